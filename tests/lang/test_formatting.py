"""``fxrules fmt`` and :func:`fxrules.format_text`: one canonical layout of ``.fxr`` text.

The properties hold on every bundled ruleset, every ```fxr block of the docs
and generated files: formatting is idempotent, keeps the meaning (the
resolved rules of the formatted text equal the original's, spans aside) and
every comment, and a text that does not parse gets the parser's diagnostics,
exit status 1 and an untouched file.
"""

from __future__ import annotations

import io
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxrules
from fxrules.cli import main
from fxrules.diagnostics import Span
from fxrules.lang.formatting import LINE_LENGTH
from fxrules.lang.parser import parse_syntax
from tests.conftest import slow_examples
from tests.lang.test_parser_fuzz import SETTINGS_FOR_EXPRESSIONS, expressions
from tests.test_docs import DOC_BLOCKS, Block, extract_blocks

REPO = Path(__file__).resolve().parents[2]
RULESETS = sorted((REPO / "rulesets").glob("*.fxr"))


# ---------------------------------------------------------------- meaning: the rules with their spans left out


def meaning(value: Any, shared: dict[int, int] | None = None) -> Any:
    """``value`` (a RuleSet, a Rule, any part of the IR) as plain data without its spans and text digests.

    Attrs classes compared by identity (operation templates, call signatures) are shared nodes of a DAG:
    the first visit gives their contents, later ones their visit number, so two DAGs compare equal
    exactly when they have the same shape.
    """
    shared = {} if shared is None else shared
    if isinstance(value, Span):
        return "span"
    if isinstance(value, fxrules.RuleSet):
        return meaning(value.rules, shared), [warning.message for warning in value.warnings]
    if attrs.has(type(value)):
        if type(value).__eq__ is object.__eq__:
            if id(value) in shared:
                return ("shared", shared[id(value)])
            shared[id(value)] = len(shared)
        # a rule's digest hashes its file's text, which formatting changes by design
        fields = [field.name for field in attrs.fields(type(value)) if field.init and field.name != "digest"]
        return type(value).__name__, tuple((name, meaning(getattr(value, name), shared)) for name in fields)
    if isinstance(value, tuple | list):
        return tuple(meaning(item, shared) for item in value)
    if isinstance(value, Mapping):
        return tuple((key, meaning(item, shared)) for key, item in sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, frozenset | set):
        return frozenset(meaning(item, shared) for item in value)
    return value  # a literal, or a target (torch.relu, a module class, a dtype): compared as Python compares them


def comments(text: str) -> list[str]:
    return sorted(line.strip() for line in re.findall(r"#[^\n]*", text))


def check_properties(text: str, name: str, line_length: int = LINE_LENGTH) -> str:
    """Format ``text``; assert idempotence, the same meaning and the same comments; return the layout."""
    formatted = fxrules.format_text(text, name, line_length)
    assert fxrules.format_text(formatted, name, line_length) == formatted, formatted
    assert comments(formatted) == comments(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
        try:
            before = fxrules.parse(text, name)
        except fxrules.FxrLoadError as error:  # formatting keeps a rule file's errors too
            with pytest.raises(fxrules.FxrLoadError) as again:
                fxrules.parse(formatted, name)
            assert [d.message for d in again.value.diagnostics] == [d.message for d in error.diagnostics]
            return formatted
        after = fxrules.parse(formatted, name)
    assert meaning(after) == meaning(before), formatted
    return formatted


# ---------------------------------------------------------------- bundled rulesets and docs


@pytest.mark.parametrize("path", RULESETS, ids=lambda path: path.name)
def test_bundled_rulesets_are_formatted(path: Path) -> None:
    """Each bundled ruleset is in the canonical layout: ``fxrules fmt --check rulesets/*.fxr`` passes."""
    text = path.read_text(encoding="utf-8")
    assert check_properties(text, f"rulesets/{path.name}") == text


@pytest.mark.parametrize("width", [40, 80])
@pytest.mark.parametrize("path", RULESETS, ids=lambda path: path.name)
def test_bundled_rulesets_at_narrow_widths(path: Path, width: int) -> None:
    """At narrow widths one-line rules become block rules and long statements break: same rules, stable."""
    check_properties(path.read_text(encoding="utf-8"), f"rulesets/{path.name}", width)


PARSING_BLOCKS = [block for block in DOC_BLOCKS if block.expect_error is None
                  or "expected an expression" not in block.expect_error]


@pytest.mark.parametrize("block", PARSING_BLOCKS, ids=lambda block: block.id)
def test_doc_examples_keep_their_meaning(block: Block) -> None:
    check_properties(block.text, f"{block.source}-line-{block.line}.fxr")
    check_properties(block.text, f"{block.source}-line-{block.line}.fxr", 50)


AUTHORING = REPO / "docs" / "authoring.md"


def test_authoring_doc_example_is_what_fmt_writes() -> None:
    """docs/authoring.md shows a messy file and its layout: the layout is fmt's output, and a fixed point."""
    messy = next(b for b in extract_blocks(AUTHORING, "authoring", {""}) if b.text.startswith("# header"))
    formatted, = extract_blocks(AUTHORING, "authoring", {"fxr"})
    assert check_properties(messy.text, "authoring.fxr") == formatted.text
    assert fxrules.format_text(formatted.text) == formatted.text


# ---------------------------------------------------------------- the layout itself


MESSY = '''\
# header


use torch.nn.functional as F  # short names
family  act = torch.relu|F.relu
commutative torch.maximum,torch.minimum,
rule a:  x+0=>x   # trailing
# about b
@tolerance( atol = 1e-5 )
rule b:
  """Doc.

     Kept as written."""
  given:
        x: Tensor[N,...,dtype=float32|float64]
  pattern:  # on the header
    y = torch.sum(x,
       # inside the brackets
       dim=1)[0,1:2:]**-2
    return y
  where: not x.ndim<2<=3 and (x.ndim in [2, 3])
  replace:
    return ((x * 2,)[0]) * (-(x)) ** 2
'''

MESSY_FORMATTED = '''\
# header

use torch.nn.functional as F  # short names
family act = torch.relu | F.relu
commutative torch.maximum, torch.minimum

rule a: x + 0 => x  # trailing

# about b
@tolerance(atol=1e-5)
rule b:
    """Doc.

     Kept as written."""
    given:
        x: Tensor[N, ..., dtype=float32|float64]
    pattern:  # on the header
        # inside the brackets
        y = torch.sum(x, dim=1)[0, 1:2] ** -2
        return y
    where:
        not x.ndim < 2 <= 3 and x.ndim in [2, 3]
    replace:
        return (x * 2,)[0] * (-x) ** 2
'''


def test_canonical_layout_of_a_messy_file() -> None:
    """Spacing, indentation, needless parentheses and blank lines become canonical; comments and the
    docstring (character for character) stay; a comment inside brackets moves before its statement."""
    assert check_properties(MESSY, "messy.fxr") == MESSY_FORMATTED


LONG_RULE = "rule long: torch.cat([torch.neg(first_input), torch.relu(second_input)], 0) => torch.neg(first_input)\n"


def test_one_line_rule_that_does_not_fit_moves_to_the_next_line_then_becomes_a_block() -> None:
    assert fxrules.format_text(LONG_RULE, line_length=120) == LONG_RULE
    assert fxrules.format_text(LONG_RULE, line_length=100) == (
        "rule long:\n"
        "    torch.cat([torch.neg(first_input), torch.relu(second_input)], 0) => torch.neg(first_input)\n"
    )
    assert check_properties(LONG_RULE, "long.fxr", 60) == (
        "rule long:\n"
        "    pattern:\n"
        "        return torch.cat(\n"
        "            [\n"
        "                torch.neg(first_input),\n"
        "                torch.relu(second_input),\n"
        "            ],\n"
        "            0,\n"
        "        )\n"
        "    replace:\n"
        "        return torch.neg(first_input)\n"
    )


def test_a_rule_written_on_the_next_line_comes_back_to_one_line_when_it_fits() -> None:
    assert fxrules.format_text("rule r:\n\n    torch.neg(x)   =>  x  where x.ndim==2\n") == (
        "rule r: torch.neg(x) => x where x.ndim == 2\n"
    )


def test_precedence_keeps_the_parentheses_it_needs() -> None:
    text = "rule r: (a - (b - c)) * (d | e) ** (-f) => -(a ** b) + (not a) + (1).real + (a < b) < c\n"
    assert fxrules.format_text(text) == (
        "rule r: (a - (b - c)) * (d | e) ** -f => -a ** b + (not a) + (1).real + (a < b) < c\n"
    )


def test_rules_are_set_apart_by_one_blank_line_and_declarations_keep_their_grouping() -> None:
    text = ("family a = torch.relu\nfamily b = torch.neg\n\n\n\nfamily c = torch.exp\nrule r: a(x) => x\n# next\n"
            "rule s: b(x) => x\n")
    assert fxrules.format_text(text) == (
        "family a = torch.relu\nfamily b = torch.neg\n\nfamily c = torch.exp\n\nrule r: a(x) => x\n\n# next\n"
        "rule s: b(x) => x\n"
    )


# ---------------------------------------------------------------- generated files

_CAPTURES = st.sampled_from(["x", "y"])
_SPACE = st.sampled_from(["", " ", "  "])


def _spaced(draw: st.DrawFn, *parts: str) -> str:
    return "".join(part + draw(_SPACE) for part in parts).strip()


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 3) -> str:
    """Tensor expressions the resolver accepts, with random spacing and parentheses."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(_CAPTURES)
    inner = draw(_expressions(depth - 1))
    other = draw(_expressions(depth - 1))
    form = draw(st.sampled_from([
        "torch.neg({a})", "torch.relu({a})", "{a} + {b}", "({a}) * ({b})", "{a} - 2", "-({a})",
        "torch.cat([{a}, {b}], 0)", "({a}).sum(1, keepdim=True)", "torch.add({a}, {b}, alpha=2)", "(({a}))",
        "torch.sum({a},\n  dim=1)", "({a}) ** 2",
    ]))
    spaced = form.replace(", ", "," + draw(_SPACE)).replace(" + ", draw(_SPACE) + "+" + draw(_SPACE))
    return spaced.format(a=inner, b=other)


@st.composite
def _comment(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["", "", "  # note", " #x", "  # 'quoted' \"#\""]))


@st.composite
def _rule(draw: st.DrawFn, index: int) -> str:
    indent = draw(st.sampled_from(["  ", "    ", "\t"]))
    pattern = f"torch.neg({draw(_expressions())})"
    replacement = draw(st.sampled_from(["x", "torch.relu(x)", "x * 2"]))
    pattern = pattern if "x" in pattern else f"torch.add({pattern}, x)"
    guard = draw(st.sampled_from(["", " where x.ndim==2", " where not x.ndim < 1 or x.ndim in [2, 3]"]))
    decorators = draw(st.sampled_from(["", "@tolerance(atol = 1e-3)\n", "@no_grad_check()\n"]))
    doc = draw(st.sampled_from(['"""One line."""', '"""Two\n   lines."""']))
    form = draw(st.integers(0, 2))
    note = draw(_comment())
    if form == 0:
        body = f" {pattern} => {replacement}{guard}{note}\n"
    elif form == 1:
        body = f"{note}\n{indent}{doc}\n{indent}{pattern}=>{replacement}{guard}\n"
    else:
        where = f"{indent}where:{draw(_comment())}\n{indent * 2}{guard[7:]}\n" if guard else ""
        blank = draw(st.sampled_from(["", "\n", "   # inside\n"]))
        body = (f"\n{indent}{doc}\n{indent}given:\n{indent * 2}x: Tensor\n{indent}pattern:{note}\n"
                f"{indent * 2}h = {pattern}\n{blank}{indent * 2}return h\n{where}"
                f"{indent}replace:\n{indent * 2}return {replacement}\n")
    return f"{decorators}rule r{index}:{body}"


@st.composite
def fxr_files(draw: st.DrawFn) -> str:
    """Files of rules in the three forms, declarations, comments and blank lines, oddly spaced."""
    parts = []
    for index in range(draw(st.integers(1, 5))):
        parts.append(draw(st.sampled_from(["", "\n", "\n\n\n", "# standalone\n", "\n# after a blank\n"])))
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from(["family act = torch.relu|F.relu\n", "commutative torch.maximum ,\n",
                                               "use torch.nn.functional as F  # F\n"])))
        parts.append(draw(_rule(index)))
    return "".join(parts) + draw(st.sampled_from(["", "# the end\n", "\n\n"]))


@settings(max_examples=slow_examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fxr_files(), st.sampled_from([40, 60, 120]))
def test_generated_files_are_formatted_idempotently_and_keep_their_meaning(text: str, width: int) -> None:
    check_properties(text, "generated.fxr", width)


@settings(max_examples=slow_examples(90), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(expressions("atom"), st.sampled_from(SETTINGS_FOR_EXPRESSIONS), st.sampled_from([30, 120]))
def test_expressions_drawn_from_the_grammar_keep_their_syntax_tree(expression: str, setting: str,
                                                                   width: int) -> None:
    """Any expression of the grammar, in every position, is laid out to the same syntax tree (spans aside):
    the parentheses precedence needs are kept, and a broken line parses back to the same call."""
    text = setting.replace("{}", expression)
    formatted = fxrules.format_text(text, "drawn.fxr", width)
    assert meaning(parse_syntax(formatted)) == meaning(parse_syntax(text)), formatted
    assert fxrules.format_text(formatted, "drawn.fxr", width) == formatted


# ---------------------------------------------------------------- the command


def test_fmt_rewrites_a_file_in_place_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "messy.fxr"
    path.write_text(MESSY, encoding="utf-8")
    assert main(["fmt", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == MESSY_FORMATTED
    assert capsys.readouterr().err == f"{path}: reformatted\n"
    assert main(["fmt", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_fmt_check_and_diff_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.fxr"
    path.write_text("rule r:  torch.neg(x)=>x\n", encoding="utf-8")
    assert main(["fmt", "--check", "--diff", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[2:] == ["@@ -1 +1 @@", "-rule r:  torch.neg(x)=>x", "+rule r: torch.neg(x) => x"]
    assert err == f"{path}: would reformat\n"
    assert main(["fmt", "--diff", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == "rule r:  torch.neg(x)=>x\n"
    assert main(["fmt", "--check", *[str(p) for p in RULESETS]]) == 0


def test_fmt_dash_formats_standard_input_to_standard_output(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(MESSY.encode())))
    assert main(["fmt", "-"]) == 0
    assert capsys.readouterr().out == MESSY_FORMATTED
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"rule r: x =>\n")))
    assert main(["fmt", "-"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("<stdin>:1:13: error: expected an expression after '=>'")


def test_fmt_of_a_file_that_does_not_parse_reports_and_leaves_it(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.fxr"
    text = "rule ok:   torch.neg(x) => x\nrule r: x =>\nrule s: torch.relu(x) x\n"
    path.write_text(text, encoding="utf-8")
    assert main(["fmt", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:13: error: expected an expression after '=>'" in err
    assert f"{path}:3:23: error: expected '=>' between the pattern and the replacement" in err
    assert path.read_text(encoding="utf-8") == text


def test_fmt_of_an_unreadable_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.fxr"
    path.write_bytes(b"# caf\xe9\nrule r: x => x\n")
    assert main(["fmt", str(path), str(tmp_path / "missing.fxr")]) == 1
    err = capsys.readouterr().err
    assert f"cannot read {path}: not UTF-8 (invalid continuation byte)" in err
    assert f"cannot read {tmp_path / 'missing.fxr'}: No such file or directory" in err


@settings(max_examples=slow_examples(60), deadline=None)
@given(st.text(st.sampled_from(list("rule x:=>()[],.+#\n \"'@0"))))
def test_fmt_is_total(text: str) -> None:
    """Any text formats, or raises the parser's syntax error with the same diagnostics ``parse`` gives."""
    try:
        formatted = fxrules.format_text(text, "soup.fxr")
    except fxrules.FxrSyntaxError as error:
        with pytest.raises(fxrules.FxrSyntaxError) as again:
            parse_syntax(text, "soup.fxr")
        assert str(again.value) == str(error)
        return
    assert fxrules.format_text(formatted, "soup.fxr") == formatted
