"""Highlighting ``.fxr``: the Pygments lexer (alias ``fxr``) and the TextMate grammar of ``editors/``.

Both take their keywords from ``grammar/fxr.lark``: a keyword added to the
grammar fails these tests until both highlight it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from pygments.token import Comment, Error, Keyword, Name, Number, Operator, Punctuation, String, _TokenType

from fxrules.integrations.highlight import KEYWORD_TOKENS, FxrLexer
from fxrules.lang.parser import grammar_keywords
from tests.test_docs import DOC_BLOCKS

REPO = Path(__file__).resolve().parents[2]
EDITORS = REPO / "editors"
TEXTMATE = json.loads((EDITORS / "fxr.tmLanguage.json").read_text(encoding="utf-8"))

REPRESENTATIVE = '''\
# A comment.
use torch.nn.functional as F
include "algebra.fxr"
family act = torch.relu | F.relu
commutative torch.maximum, torch.minimum

rule inline: torch.neg(x) => x where x.ndim == 2 and not x.ndim in [1] or x is None

@tolerance(atol=1e-5, rtol=0x10)
rule block:
    """The docstring."""
    given:
        x: Tensor[N, ..., dtype=float32|float64]
        c: nn.Conv2d[exact]
    pattern:
        y = torch.where(x.replace, -1.5, True)  # trailing
        return c(y) ** 2
    where:
        False
    replace:
        return @helper(x, 'single')
'''

#: (text, token type) in the order they occur in REPRESENTATIVE: every token class of the language.
EXPECTED = [
    ("# A comment.", Comment.Single), ("use", Keyword.Namespace), ("torch", Name), (".", Punctuation),
    ("nn", Name), ("as", Keyword.Namespace), ("F", Name), ("include", Keyword.Namespace),
    ('"algebra.fxr"', String.Double), ("family", Keyword.Declaration), ("act", Name.Function), ("=", Operator),
    ("|", Operator), ("commutative", Keyword.Declaration), (",", Punctuation),
    ("rule", Keyword.Declaration), ("inline", Name.Function), (":", Punctuation), ("(", Punctuation),
    ("=>", Operator), ("where", Keyword), ("ndim", Name), ("==", Operator), ("2", Number.Integer),
    ("and", Operator.Word), ("not", Operator.Word), ("in", Operator.Word), ("[", Punctuation), ("or", Operator.Word),
    ("is", Operator.Word), ("None", Keyword.Constant),
    ("@", Name.Decorator), ("tolerance", Name.Decorator), ("atol", Name), ("1e-5", Number.Float),
    ("0x10", Number.Hex), ("block", Name.Function), ('"""The docstring."""', String.Doc),
    ("given", Keyword), ("x", Name.Variable), ("Tensor", Keyword.Type), ("N", Name), ("...", Keyword.Constant),
    ("dtype", Name.Attribute), ("float32", Name), ("c", Name.Variable), ("nn", Name.Namespace),
    ("Conv2d", Keyword.Type), ("exact", Name.Builtin), ("pattern", Keyword), ("y", Name),
    ("where", Name), ("replace", Name), ("-", Operator), ("1.5", Number.Float), ("True", Keyword.Constant),
    ("# trailing", Comment.Single), ("return", Keyword), ("**", Operator), ("False", Keyword.Constant),
    ("replace", Keyword), ("@", Name.Function), ("helper", Name.Function), ("'single'", String.Single),
]


def lex(text: str) -> list[tuple[_TokenType, str]]:
    return [(token_type, value) for token_type, value in FxrLexer().get_tokens(text) if value.strip()]


def test_every_token_class_lexes_to_its_type() -> None:
    """The representative file's tokens come out in order with the expected types (keywords after a dot,
    as ``torch.where`` and ``x.replace``, are names)."""
    remaining = lex(REPRESENTATIVE)
    for text, expected in EXPECTED:
        position = next((i for i, (_, value) in enumerate(remaining) if value == text), None)
        assert position is not None, f"{text!r} not lexed as one token"
        assert remaining[position][0] is expected, (text, remaining[position][0], expected)
        remaining = remaining[position + 1:]


RULESET_TEXTS = [path.read_text(encoding="utf-8") for path in sorted((REPO / "rulesets").glob("*.fxr"))]


@pytest.mark.parametrize("text", RULESET_TEXTS + [block.text for block in DOC_BLOCKS])
def test_bundled_rulesets_and_doc_examples_lex_without_errors(text: str) -> None:
    tokens = list(FxrLexer().get_tokens(text))
    assert [value for token_type, value in tokens if token_type is Error] == []
    assert "".join(value for _, value in tokens) == text


def test_every_grammar_keyword_has_a_token_type() -> None:
    """The lexer's classification names exactly the grammar's words, and each lexes as classified."""
    assert set(KEYWORD_TOKENS) == grammar_keywords()
    for word, token_type in KEYWORD_TOKENS.items():
        assert lex(f"rule r: x => x where {word}")[-1] == (token_type, word)
        assert lex(f"rule r: x.{word}(y) => y")[5] == (Name, word)


def test_the_lexer_is_registered_as_a_pygments_entry_point() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r'^\[project\.entry-points\."pygments\.lexers"\]\n(\w+) = "([^"]+)"$', pyproject, re.MULTILINE)
    assert section is not None
    name, value = section.groups()
    assert EntryPoint(name, value, "pygments.lexers").load() is FxrLexer
    assert "fxr" in FxrLexer.aliases and "*.fxr" in FxrLexer.filenames


def test_fxrules_does_not_import_pygments() -> None:
    code = "import sys, fxrules, fxrules.cli; print('pygments' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == "False"


# ---------------------------------------------------------------- the TextMate grammar


def _patterns(node: Any) -> list[dict[str, Any]]:
    """Every pattern of the TextMate grammar, nested ones included."""
    found = []
    if isinstance(node, dict):
        if "match" in node or "begin" in node:
            found.append(node)
        for value in node.values():
            found += _patterns(value)
    elif isinstance(node, list):
        for value in node:
            found += _patterns(value)
    return found


KEYWORD_SCOPES = ("keyword.control", "keyword.operator.logical", "storage.type", "constant.language")


def test_textmate_grammar_covers_every_keyword_of_the_grammar() -> None:
    """Each grammar keyword is matched by exactly one keyword pattern; no keyword pattern matches another word."""
    keyword_patterns = [p for p in _patterns(TEXTMATE["repository"]["expression"])
                        if p.get("name", "").startswith(KEYWORD_SCOPES)]
    for word in grammar_keywords():
        matching = [p["name"] for p in keyword_patterns if re.fullmatch(p["match"], word)]
        assert len(matching) == 1, (word, matching)
    claimed = {word for p in keyword_patterns for word in re.findall(r"[A-Za-z]+", p["match"].replace("\\b", " "))
               if word not in {"w"}}
    assert claimed == grammar_keywords()


def test_textmate_declarations_exclude_exactly_the_keywords() -> None:
    begin = TEXTMATE["repository"]["declaration"]["begin"]
    excluded = re.search(r"\(\?!\(\?:([^)]*)\)", begin)
    assert excluded is not None and set(excluded.group(1).split("|")) == grammar_keywords()
    assert re.match(begin, "        x: Tensor[N]") and not re.match(begin, "    where: x.ndim == 1")


def test_textmate_patterns_are_valid_regular_expressions() -> None:
    for pattern in _patterns(TEXTMATE):
        for key in ("match", "begin"):
            if key in pattern:
                re.compile(pattern[key])


def test_vscode_manifest_names_the_grammar() -> None:
    manifest = json.loads((EDITORS / "package.json").read_text(encoding="utf-8"))
    language, = manifest["contributes"]["languages"]
    grammar, = manifest["contributes"]["grammars"]
    assert language["extensions"] == [".fxr"] and grammar["language"] == language["id"] == "fxr"
    assert grammar["scopeName"] == TEXTMATE["scopeName"]
    assert (EDITORS / grammar["path"]).is_file() and (EDITORS / language["configuration"]).is_file()
    json.loads((EDITORS / language["configuration"]).read_text(encoding="utf-8"))
