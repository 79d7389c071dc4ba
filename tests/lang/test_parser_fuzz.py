"""Fuzzing the front end: whatever the text, loading it succeeds or raises an FxrError that points into it.

Three sources of text:

* random text, both arbitrary Unicode and a soup of ``.fxr`` tokens;
* valid rule files (the bundled rulesets and example files of every construct)
  with a few random edits: characters or lines deleted, inserted,
  duplicated or swapped, indentation changed;
* expressions drawn from the grammar itself (``hypothesis.extra.lark``),
  set into patterns, replacements, guards and statements: these must pass
  the real parser, and loading them must not crash.

Every example runs under a hypothesis deadline and a hard time budget, so a
parser that hangs fails the test instead of stalling the run.
"""

from __future__ import annotations

import collections
import contextlib
import re
import signal
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark
from lark import Lark

import fxrules
from fxrules.lang.bundled import grammar_text
from fxrules.lang.parser import parse_syntax
from tests.conftest import slow_examples

RULESETS = Path(__file__).resolve().parents[2] / "rulesets"

#: Hard per-example budget: a hypothesis deadline only fires after an example ends, this stops a hang.
BUDGET_SECONDS = 5.0
FUZZ = settings(
    max_examples=150,
    deadline=timedelta(milliseconds=1500),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

#: Lark's own names for tokens: a diagnostic must never show them.
RAW_TOKEN = re.compile(r"Token\(|__ANON|\$END|\b_NL\b|\b_INDENT\b|\b_DEDENT\b|\b[LR](PAR|SQB)\b|\bCOMMA\b|\bVBAR\b")

LANGUAGE_EXAMPLES = [
    '''# rulesets/example.fxr — comments start with '#'
use torch.nn.functional as F          # optional: extra short names for targets
include "algebra.fxr"                 # optional: rules of another file, in place

rule double_neg:
    torch.neg(torch.neg(x)) => x

rule mul_one:
    x * 1 => x

rule add_zero:
    x + 0 => x
''',
    '''rule addmm:
    given:                       # optional: types of captures (see §5)
        a: Tensor[M, K]
        w: Tensor[K, N]
        b: Tensor[N]
    pattern:
        y = torch.matmul(a, w)
        return y + b
    replace:
        return torch.addmm(b, a, w)

rule split_sum_of_cat:           # a DAG: `c` is used twice
    pattern:
        c = torch.cat([u, v])
        return c.sum(), c.mean()
    where:
        u.ndim == 1 and v.ndim == 1
    replace:
        s = u.sum() + v.sum()
        return s, s / (u.numel() + v.numel())
''',
    '''family myrelu = torch.relu | F.relu | torch.Tensor.relu | nn.ReLU | aten.relu.default

rule relu_idempotent:
    myrelu(myrelu(x)) => myrelu(x)
''',
    '''rule fold_conv_bn:
    given:
        c: nn.Conv2d
        bn: nn.BatchNorm2d
    pattern:
        return bn(c(x))
    where:
        not bn.training and bn.track_running_stats
    replace:
        return @fold_conv_bn(c, bn)(x)
''',
    '''commutative torch.maximum, torch.minimum

@tolerance(atol=1e-3, rtol=1e-3)
rule typed:
    """A docstring."""
    given:
        x: Tensor[N, C, dtype=float16|bfloat16]
        k: int
    pattern:
        return torch.sum(x[:, 0] * 2, dim=k, keepdim=False) | torch.mean(x[1:], k)
    where: C % 8 == 0 and x.shape[0] is not None and k in [1, 2]
    replace:
        return x
''',
]
VALID_FILES = [path.read_text(encoding="utf-8") for path in sorted(RULESETS.glob("*.fxr"))] + LANGUAGE_EXAMPLES

#: Pieces of .fxr text, to build random texts that get deeper into the parser than arbitrary characters do.
PIECES = [
    "rule", "use", "include", "family", "commutative", "given", "pattern", "where", "replace", "return",
    "not", "and", "or", "in", "is", "None", "True", "False", "torch", "F", "nn", "aten", "neg", "relu", "x", "y",
    "Tensor", "int", "r", ".", ",", ":", "=", "=>", "==", "|", "(", ")", "[", "]", "+", "-", "*", "/", "@",
    "**", "...", "0", "1", "01", "1.5", "0x1f", '"a.fxr"', "'s'", '"""doc"""', '"', "#c", "\\\n", "\n", "\n    ",
    "\n        ", "    ", "\t", " ", "\r\n", "\f", "$", "_", "__class__",
]


class HangError(Exception):
    """An example ran past the per-example budget."""


@contextlib.contextmanager
def time_budget(seconds: float = BUDGET_SECONDS) -> Iterator[None]:
    if not hasattr(signal, "setitimer"):  # pragma: no cover - no interval timers on Windows
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise HangError(f"loading took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_loads_or_reports(text: str) -> None:
    """Loading ``text`` succeeds, or raises FxrError whose diagnostics all point into ``text``."""
    lines = text.split("\n")  # the parser counts lines at '\n' only
    try:
        with time_budget():
            fxrules.parse(text, filename="fuzz.fxr")
    except fxrules.FxrError as error:
        found = getattr(error, "diagnostics", None)
        assert found, f"an FxrError without diagnostics: {error!r}"
        for diagnostic in found:
            line, column = diagnostic.span.line, diagnostic.span.column
            where = f"{line}:{column} {diagnostic.message!r} in {text!r}"
            assert diagnostic.span.file == "fuzz.fxr", where
            assert 1 <= line <= len(lines) + 1, where
            assert column >= 1, where
            if line <= len(lines):
                assert column <= len(lines[line - 1]) + 1, where
            assert diagnostic.message.strip(), where
            assert not RAW_TOKEN.search(diagnostic.message), where
        str(error)  # renders


@pytest.fixture(scope="module", autouse=True)
def _warm_up() -> None:
    """Build the parser and its table of example errors before any deadline is running."""
    for text in ("rule r: torch.neg(x) => x\n", "rule r: =>\n"):
        with contextlib.suppress(fxrules.FxrError):
            fxrules.parse(text, filename="warm-up.fxr")


# ---------------------------------------------------------------- random text


@settings(FUZZ, max_examples=400)
@given(st.text(max_size=200))
def test_random_unicode_text(text: str) -> None:
    check_loads_or_reports(text)


@settings(FUZZ, max_examples=400)
@given(st.lists(st.sampled_from(PIECES), max_size=60).map("".join))
def test_random_fxr_token_soup(text: str) -> None:
    check_loads_or_reports(text)


@settings(FUZZ, max_examples=300)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_random_soup_after_a_valid_rule(tail: str) -> None:
    check_loads_or_reports("rule ok: torch.neg(torch.neg(x)) => x\n" + tail)


# ---------------------------------------------------------------- valid files, randomly edited

EDITS = ("delete", "insert", "duplicate", "swap", "delete line", "duplicate line", "swap lines", "indent", "dedent")


@st.composite
def edited_files(draw: st.DrawFn, max_edits: int = 3) -> str:
    text = draw(st.sampled_from(VALID_FILES))
    for _ in range(draw(st.integers(1, max_edits))):
        text = draw(edit(text))
    return text


def edit(text: str) -> st.SearchStrategy[str]:
    @st.composite
    def one_edit(draw: st.DrawFn) -> str:
        kind = draw(st.sampled_from(EDITS))
        lines = text.split("\n")
        if kind.endswith("line") or kind in {"swap lines", "indent", "dedent"}:
            index = draw(st.integers(0, len(lines) - 1))
            if kind == "delete line":
                del lines[index]
            elif kind == "duplicate line":
                lines.insert(index, lines[index])
            elif kind == "swap lines":
                other = draw(st.integers(0, len(lines) - 1))
                lines[index], lines[other] = lines[other], lines[index]
            elif kind == "indent":
                lines[index] = draw(st.sampled_from([" ", "  ", "    ", "\t"])) + lines[index]
            else:
                lines[index] = lines[index][draw(st.integers(1, 4)):] if lines[index][:1] in {" ", "\t"} else \
                    lines[index][1:]
            return "\n".join(lines)
        if not text:
            return draw(st.sampled_from(PIECES))
        start = draw(st.integers(0, len(text) - 1))
        end = min(len(text), start + draw(st.integers(1, 8)))
        if kind == "delete":
            return text[:start] + text[end:]
        if kind == "insert":
            piece = draw(st.sampled_from(PIECES) | st.characters())
            return text[:start] + piece + text[start:]
        if kind == "duplicate":
            return text[:end] + text[start:end] + text[end:]
        after = min(len(text), end + draw(st.integers(1, 8)))  # swap two neighbouring pieces
        return text[:start] + text[end:after] + text[start:end] + text[after:]

    return one_edit()


@pytest.mark.parametrize("index", range(len(VALID_FILES)))
def test_unedited_files_load(index: int) -> None:
    fxrules.parse(VALID_FILES[index], filename="valid.fxr")


@settings(FUZZ, max_examples=300)
@given(edited_files())
def test_edited_valid_files(text: str) -> None:
    check_loads_or_reports(text)


@pytest.mark.slow
@settings(FUZZ, max_examples=slow_examples(1500))
@given(edited_files(max_edits=6))
def test_edited_valid_files_at_length(text: str) -> None:
    check_loads_or_reports(text)


# ---------------------------------------------------------------- expressions drawn from the grammar

#: Words the grammar reserves: drawn as a NAME they would lex as a keyword.
KEYWORDS = frozenset({"use", "include", "family", "commutative", "rule", "where", "given", "pattern", "replace",
                      "return", "or", "and", "not", "in", "is", "None", "True", "False", "as"})


def expression_grammar(start: str) -> Lark:
    """The grammar of ``.fxr`` started at an expression rule, without the indenter (expressions have no layout)."""
    return Lark(grammar_text(), parser="lalr", start=start)


def spaced(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # A space after every token, so that drawn neighbours never fuse ('1' '.' 'x' must not lex as '1.' 'x').
    return strategy.map(lambda token: token + " ")


def expressions(start: str) -> st.SearchStrategy[str]:
    """Texts of the grammar's rule ``start``: 'test' is any expression, 'atom' a name, literal or bracketed one."""
    grammar = expression_grammar(start)
    explicit = {
        terminal.name: spaced(st.just(terminal.pattern.value))
        for terminal in grammar.terminals if terminal.pattern.type == "str"
    }
    explicit.update({
        "NAME": spaced(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True).filter(
            lambda name: name not in KEYWORDS)),
        "INT": spaced(st.integers(0, 10**6).map(str) | st.integers(0, 255).map(hex)),
        "FLOAT": spaced(st.floats(0, 1e6, allow_nan=False).map(repr) | st.sampled_from([".5", "1e3", "2.5E-3"])),
        "STRING": spaced(st.text(st.characters(exclude_characters="\"\\\n\r"), max_size=8).map(lambda s: f'"{s}"')),
    })
    return from_lark(grammar, start=start, explicit=explicit)


SETTINGS_FOR_EXPRESSIONS = [
    "rule r: {} => x\n",
    "rule r: torch.neg(x) => {}\n",
    "rule r: torch.neg(x) => x where {}\n",
    "rule r:\n    pattern:\n        y = {}\n        return torch.neg(y)\n    replace:\n        return y\n",
    "rule r:\n    pattern:\n        return torch.neg(x)\n    where:\n        {}\n    replace:\n        return {}\n",
]


def check_expression(expression: str, setting: str) -> None:
    text = setting.replace("{}", expression)
    with time_budget():
        parse_syntax(text, "fuzz.fxr")  # an expression of the grammar is never a syntax error
    check_loads_or_reports(text)


# Drawing from the whole expression grammar is slow (about a second an example: most random expansions of
# a grammar this size run past hypothesis's buffer), so the default run starts at 'atom', whose bracketed
# forms still hold whole expressions, and the slow run starts at 'test'.


@settings(FUZZ, max_examples=60)
@given(expressions("atom"), st.sampled_from(SETTINGS_FOR_EXPRESSIONS))
def test_grammar_atoms_parse_in_every_position(expression: str, setting: str) -> None:
    check_expression(expression, setting)


@pytest.mark.slow
@settings(FUZZ, max_examples=slow_examples(40))
@given(expressions("test"), st.sampled_from(SETTINGS_FOR_EXPRESSIONS))
def test_grammar_expressions_parse_in_every_position(expression: str, setting: str) -> None:
    check_expression(expression, setting)


# ---------------------------------------------------------------- nesting


@pytest.mark.parametrize("depth", [10, 100, 300, 1000, 5000])
@pytest.mark.parametrize(("opening", "closing"), [("torch.neg(", ")"), ("[", "]"), ("(", ",)"), ("-", "")])
def test_deep_nesting_loads_or_reports(depth: int, opening: str, closing: str) -> None:
    """A deeply nested expression loads or is a load error: never a RecursionError from the front end."""
    try:
        check_loads_or_reports(f"rule r: torch.neg({opening * depth}x{closing * depth}) => x\n")
    except (AssertionError, HangError):
        raise
    except Exception as error:  # say what crashed and where, without a traceback of a thousand frames
        frames = collections.Counter(
            f"{Path(frame.filename).name}:{frame.name}" for frame in traceback.extract_tb(error.__traceback__))
        pytest.fail(f"nesting depth {depth}: {type(error).__name__}: {str(error)[:120]!r}; most repeated frames: "
                    f"{frames.most_common(2)}", pytrace=False)
