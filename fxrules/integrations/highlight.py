"""A Pygments lexer for ``.fxr`` rule files, registered under the alias ``fxr``.

Pygments finds it through the ``pygments.lexers`` entry point, so Sphinx,
MkDocs and any renderer that uses Pygments highlight ```` ```fxr ```` blocks
once fxrules is installed.  This is the only module of fxrules that imports
Pygments; nothing else imports this one.

The keywords come from ``grammar/fxr.lark`` itself (every word the grammar
spells out as a literal), so the lexer cannot fall behind the parser: a word
:data:`KEYWORD_TOKENS` does not classify yet is still a keyword.  As in the
grammar, a keyword after a dot is a name (``torch.where``, ``x.replace``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pygments.lexer import RegexLexer, bygroups, include, words
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Whitespace,
    _TokenType,
)

from fxrules.lang.parser import fxr_parser, grammar_keywords
from fxrules.lang.resolve import SCALAR_TYPES, SEQUENCE_TYPES

#: The token type of each word of the grammar.
KEYWORD_TOKENS: dict[str, _TokenType] = {
    "rule": Keyword.Declaration, "family": Keyword.Declaration, "commutative": Keyword.Declaration,
    "use": Keyword.Namespace, "include": Keyword.Namespace, "as": Keyword.Namespace,
    "given": Keyword, "pattern": Keyword, "where": Keyword, "replace": Keyword, "return": Keyword,
    "and": Operator.Word, "or": Operator.Word, "not": Operator.Word, "in": Operator.Word, "is": Operator.Word,
    "None": Keyword.Constant, "True": Keyword.Constant, "False": Keyword.Constant,
}

#: The types a ``given:`` declaration may name (besides ``nn.`` module classes).
TYPE_NAMES = ("Tensor", *SCALAR_TYPES, *SEQUENCE_TYPES, "Node", "Attr")

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _keywords(token_type: _TokenType) -> tuple[Any, _TokenType]:
    chosen = [word for word in sorted(grammar_keywords()) if KEYWORD_TOKENS.get(word, Keyword) is token_type]
    return words(chosen, prefix=r"(?<![\w.])", suffix=r"\b"), token_type


def _string(pattern: str) -> str:
    return fxr_parser().get_terminal(pattern).pattern.value


def _declaration() -> str:
    """``x: Tensor[...]`` in a ``given:`` section: a name (not a keyword), a colon, and more on the line."""
    keywords = "|".join(sorted(grammar_keywords()))
    return rf"^([ \t]+)(?!(?:{keywords})\b)({_NAME})([ \t]*)(:)(?![ \t]*(#[^\n]*)?$)"


class FxrLexer(RegexLexer):
    """Rule files of fxrules: declarative rewrite rules for torch.fx graphs."""

    name = "fxrules"
    aliases: ClassVar[list[str]] = ["fxr", "fxrules"]
    filenames: ClassVar[list[str]] = ["*.fxr"]
    mimetypes: ClassVar[list[str]] = ["text/x-fxr"]
    url = "https://github.com/fxrules/fxrules"

    tokens: ClassVar[dict[str, list[Any]]] = {
        "root": [
            (r"\n", Whitespace),
            # a string alone on its line is a docstring: no statement of the grammar is a bare string
            (rf"^([ \t]+)({_string('STRING')})(?=[ \t]*(#[^\n]*)?$)", bygroups(Whitespace, String.Doc)),
            (rf"^(@)({_NAME})", bygroups(Name.Decorator, Name.Decorator)),
            (rf"(rule|family)([ \t]+)({_NAME})", bygroups(Keyword.Declaration, Whitespace, Name.Function)),
            (_declaration(), bygroups(Whitespace, Name.Variable, Whitespace, Punctuation), "type"),
            include("expression"),
        ],
        "type": [
            (r"(?=\n)", Text, "#pop"),
            (rf"({_NAME})(=)", bygroups(Name.Attribute, Operator)),
            (words(TYPE_NAMES, suffix=r"\b"), Keyword.Type),
            (rf"(nn)(\.)({_NAME})", bygroups(Name.Namespace, Punctuation, Keyword.Type)),
            (r"\bexact\b", Name.Builtin),
            include("expression"),
        ],
        "expression": [
            (r"[ \t\f]+", Whitespace),
            (r"\\\n", Text),
            (r"#[^\n]*", Comment.Single),
            (r'"""(.|\n)*?"""|\'\'\'(.|\n)*?\'\'\'', String),
            (r'"([^"\\\n]|\\.)*"', String.Double),
            (r"'([^'\\\n]|\\.)*'", String.Single),
            (rf"(\.)([ \t]*)({_NAME})", bygroups(Punctuation, Whitespace, Name)),  # after a dot a keyword is a name
            (rf"(@)({_NAME})", bygroups(Name.Function, Name.Function)),
            (r"\.\.\.", Keyword.Constant),
            _keywords(Keyword.Declaration),
            _keywords(Keyword.Namespace),
            _keywords(Keyword),
            _keywords(Operator.Word),
            _keywords(Keyword.Constant),
            (r"0x[0-9a-fA-F]+", Number.Hex),
            (_string("FLOAT"), Number.Float),
            (r"[0-9]+", Number.Integer),
            (r"=>", Operator),
            (r"\*\*|//|==|!=|<=|>=|[-+*/%@|<>=]", Operator),
            (r"[()\[\],:.]", Punctuation),
            (_NAME, Name),
        ],
    }
