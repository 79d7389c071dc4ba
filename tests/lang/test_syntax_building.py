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
from lark import Token, Transformer, Tree

import fxrules
from fxrules import FxrSyntaxError
from fxrules.diagnostics import Span
from fxrules.lang.parser import fxr_parser, parse_syntax
from fxrules.lang.syntax_tree import File, SyntaxBuilder
from tests.lang.test_grammar_tables import corpus

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


def test_an_integer_too_long_for_python_is_a_syntax_error_at_the_literal() -> None:
    """A literal Python refuses to convert stops the parse with a syntax error at the literal, in plain words,
    not a ValueError."""
    with pytest.raises(FxrSyntaxError) as info:
        fxrules.parse("rule r:\n    x => x.reshape(" + "9" * 5000 + ")\n", "f.fxr")
    assert [(str(d.span), d.message.split(":")[0]) for d in info.value.diagnostics] == [
        ("f.fxr:2:20", "this literal cannot be read")]
    assert "4300 digits" in info.value.diagnostics[0].message
