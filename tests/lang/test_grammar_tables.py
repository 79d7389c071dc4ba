"""The parser's tables shipped with the grammar: current, and parsing exactly as the parser built from it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import lark
import pytest
from lark import Tree

from fxrules.lang import bundled
from fxrules.lang.parser import built_parser, fxr_parser, shipped_parser

ROOT = Path(__file__).resolve().parents[2]


def corpus() -> list[str]:
    """Every rule text the project ships or documents: the bundled rulesets and the docs' ``fxr`` blocks."""
    texts = [path.read_text(encoding="utf-8") for path in sorted((ROOT / "rulesets").glob("*.fxr"))]
    for doc in sorted((ROOT / "docs").glob("*.md")):
        texts += re.findall(r"```fxr\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
    return [text if text.endswith("\n") else text + "\n" for text in texts]


def positions(tree: Tree) -> list[tuple[object, ...]]:
    """Each subtree's rule and span, in order: what the syntax tree's spans are made of."""
    return [(sub.data, *(getattr(sub.meta, name, None) for name in ("line", "column", "end_line", "end_column")))
            for sub in tree.iter_subtrees()]


def test_shipped_tables_were_built_from_the_shipped_grammar_with_this_lark() -> None:
    """The stamp of grammar/fxr.lark.json names this grammar text and this Lark: `python -m
    fxrules.lang.tables` has been run since the grammar last changed."""
    shipped = json.loads(bundled.grammar_tables_text())
    grammar = bundled.grammar_text()
    assert shipped["lark"] == lark.__version__
    assert shipped["grammar_sha256"] == hashlib.sha256(grammar.encode()).hexdigest()
    assert shipped_parser(grammar) is not None


def test_the_parser_in_use_parses_every_shipped_and_documented_text_as_the_built_parser() -> None:
    built = built_parser(bundled.grammar_text())
    texts = corpus()
    assert len(texts) > 20
    for text in texts:
        try:
            expected = built.parse(text)
        except lark.exceptions.LarkError as error:  # a documented syntax error: the same error, same place
            with pytest.raises(type(error)) as raised:
                fxr_parser().parse(text)
            assert (raised.value.line, raised.value.column) == (error.line, error.column)  # type: ignore[attr-defined]
            continue
        found = fxr_parser().parse(text)
        assert found == expected
        assert positions(found) == positions(expected)


def test_tables_of_another_grammar_text_are_not_used() -> None:
    """An edited grammar is parsed by a parser built from it, never by stale tables."""
    edited = bundled.grammar_text() + "\n// edited\n"
    assert shipped_parser(edited) is None
