"""The syntax tree built during the parse: every node and span as Lark's positions would give them.

The parser builds syntax nodes as it reduces, working out each span itself.  The reference here is
what Lark's own ``propagate_positions`` gives: the tree of :func:`fxr_parser` turned into syntax nodes
by the same builder methods, each given the span of its Lark subtree's meta.  The two must be equal,
spans included, on every text the project ships or documents and on a generated 500-rule file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark import Token, Transformer, Tree

import fxrules
from fxrules import FxrSyntaxError
from fxrules.diagnostics import Span
from fxrules.lang.parser import fxr_parser, parse_syntax
from fxrules.lang.syntax_tree import File, SyntaxBuilder
from tests.lang.test_grammar_tables import corpus
from tests.lang.test_parser_fuzz import FUZZ, PIECES, edited_files

ROOT = Path(__file__).resolve().parents[2]


class _FromLarkPositions(Transformer[Token, Any]):
    """Syntax nodes from a Lark tree, each with the span of its subtree's meta."""

    def __init__(self, filename: str) -> None:
        super().__init__()
        self.builder = SyntaxBuilder(filename)

    def __default__(self, data: str, children: list[Any], meta: Any) -> Any:
        method = getattr(SyntaxBuilder, data, None)
        if method is None:
            return Tree(data, children, meta)
        span = None if meta.empty else Span(self.builder.filename, meta.line, meta.column, meta.end_line,
                                             meta.end_column)
        return method(self.builder, span, *children)


def _reference(text: str, filename: str) -> File:
    tree = fxr_parser().parse(text)
    built = _FromLarkPositions(filename).transform(tree)
    assert isinstance(built, File)
    return built


def _generated_500_rules() -> str:
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "benchmarks" / "bench_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.rule_file(500)
    return text


def _parsable() -> list[str]:
    texts = []
    for text in corpus():
        try:
            fxr_parser().parse(text)
        except Exception:  # a documented syntax error: tests/lang/test_diagnostics.py pins those
            continue
        texts.append(text)
    return texts


def test_every_node_and_span_is_what_lark_positions_give_on_every_shipped_and_documented_text() -> None:
    texts = _parsable()
    assert len(texts) > 20
    for index, text in enumerate(texts):
        assert parse_syntax(text, f"t{index}.fxr") == _reference(text, f"t{index}.fxr")


def test_every_node_and_span_is_what_lark_positions_give_on_a_generated_500_rule_file() -> None:
    text = _generated_500_rules()
    built = parse_syntax(text, "rules500.fxr")
    assert len(built.items) > 500
    assert built == _reference(text, "rules500.fxr")


@pytest.mark.parametrize("text", [
    "rule r: ((x)).neg() => (x)\n",
    "rule r: (a) + (b) == ((c)) => x where (x.ndim) > 1\n",
    "rule r:\n    pattern:\n        y = (torch.neg(x))\n        return (y), ((x),)\n"
    "    replace:\n        return x[(1):],\n",
    "rule r: torch.cat([x, y,], dim=(0),) => -(x) ** (2)\n",
    "commutative torch.add, torch.mul,\nuse torch.nn as nn\n",
    "@tolerance(atol=1e-3)\n@finite_inputs()\nrule r:\n"
    "    given:\n        x: Tensor[M, ..., dtype=float32|float16] | None\n"
    "    pattern:\n        return torch.neg(x)\n    replace:\n        return x\n",
])
def test_spans_through_parentheses_trailing_commas_and_dropped_tokens_are_what_lark_positions_give(
        text: str) -> None:
    """A parenthesised expression keeps its own span while its parent is measured from the parenthesis;
    a trailing comma, a closing bracket, a keyword or a decorator's '@' ends or starts its node."""
    assert parse_syntax(text, "f.fxr") == _reference(text, "f.fxr")


@pytest.mark.parametrize("text", [
    "rule r: torch.cat([a, b, c, d], dim=0, out=None) => a - b + c - d * e / f // g % h @ i ** -j\n",
    "@tolerance(atol=1)\n@tolerance(rtol=2)\n@finite_inputs()\nrule r: x => x\n",
    "family f = torch.relu | F.relu | torch.Tensor.relu | aten.relu.default\n"
    "commutative torch.add, torch.mul, torch.maximum,\n",
    "rule r:\n    given:\n        x: Tensor[M, N, K, dtype=float32|float16|bfloat16]\n        y: Tensor[M]\n"
    "    pattern:\n        a = f(x)\n        b = g(a)\n        return a, b, x\n"
    "    where:\n        x.ndim == 1\n        x.ndim < 2 <= 3 is not 4 not in y\n        a and b and c or d or e\n"
    "    replace:\n        return x, y, z,\n",
    "\n\n# a comment\n\nrule r: x => x\n\n\n",
    'rule r:\n    """doc"""\n    x => (x)\n',
    "rule r: (x)(y)[(z)].w => f()\n",
    "rule r: x[:] => x[::2][1:][:2][1:2:3]\n",
    "use torch.nn.functional as F\ninclude 'a.fxr'\nrule r: @h() => @h(x, k=(y))\n",
])
def test_repetitions_and_rules_measured_between_layout_tokens_are_built_as_lark_positions_give(text: str) -> None:
    """Repetitions (arguments, operators, decorators, members, statements, guards, blank lines) build the
    children Lark's trees hold, in order; a node that starts or ends next to a new line or an indentation is
    measured from the token or node beside it; an optional part not written is absent; a bracketed child
    keeps its own span while its parent is measured from the bracket."""
    assert parse_syntax(text, "f.fxr") == _reference(text, "f.fxr")


def test_an_integer_too_long_for_python_is_a_syntax_error_at_the_literal() -> None:
    """A literal Python refuses to convert stops the parse with a syntax error at the literal, in plain words,
    not a ValueError."""
    with pytest.raises(FxrSyntaxError) as info:
        fxrules.parse("rule r:\n    x => x.reshape(" + "9" * 5000 + ")\n", "f.fxr")
    assert [(str(d.span), d.message.split(":")[0]) for d in info.value.diagnostics] == [
        ("f.fxr:2:20", "this literal cannot be read")]
    assert "4300 digits" in info.value.diagnostics[0].message


@pytest.mark.parametrize("text", [
    "rule r:\n\tpattern:\n\t\treturn torch.neg(x)\n\treplace:\n\t\treturn x\n",
    "rule r: torch.neg(x) => x\r\nrule s:\r\n    x => x\r\n",
    "rule r: torch.neg( \\\n   x) => \\\n x\n",
    "rule r: torch.cat([x,\n    y],\n  dim=0) => x  # a comment\n\n   \n# another\nrule s: x => x",
    "\f\nrule r:\n    pattern:\n        return (x\n  )\n    replace:\n        return x",
    'rule r:\n    """a\n    docstring over lines"""\n    given:\n        x: Tensor\n    pattern:\n'
    "        return x.where\n    replace:\n        return x.replace",
    "",
    "# only a comment",
])
def test_layout_of_tabs_crlf_continuations_brackets_over_lines_and_no_final_newline_is_what_lark_gives(
        text: str) -> None:
    """Indentation by tabs, CRLF line ends, backslash continuations, new lines inside brackets, comments,
    blank lines and a last line without a new line give the nodes and spans Lark's positions give."""
    assert parse_syntax(text, "f.fxr") == _reference(text if text.endswith("\n") else text + "\n", "f.fxr")


def _accepted_alike(text: str) -> None:
    """``text`` is a syntax error for the parser exactly when it is for Lark, and otherwise parses to the
    nodes and spans Lark's positions give."""
    text = text if text.endswith("\n") else text + "\n"
    try:
        reference = _reference(text, "f.fxr")
    except Exception:  # Lark's error, a bad dedent, a literal Python cannot hold: each a syntax error
        with pytest.raises(FxrSyntaxError):
            parse_syntax(text, "f.fxr")
        return
    assert parse_syntax(text, "f.fxr") == reference


@settings(FUZZ, max_examples=300, deadline=None)  # the first example makes Lark's parser
@given(edited_files())
def test_edited_valid_files_are_accepted_and_built_as_lark_does(text: str) -> None:
    _accepted_alike(text)


@settings(FUZZ, max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_token_soup_is_accepted_and_built_as_lark_does(text: str) -> None:
    _accepted_alike("rule ok: torch.neg(x) => x\n" + text)
