"""Text to syntax tree: the Lark LALR parser of ``grammar/fxr.lark``, and syntax errors in plain words.

Syntax errors are named by example, as Lark's own grammar loader does: each
message in :data:`SYNTAX_ERRORS` comes with malformed snippets, and an error
is given the message of the snippet that failed most like it (in the same
parser state, or where the parser would have accepted the same things).
After an error the parser resynchronises at the next top-level item, so one
run reports every broken rule of a file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from lark import Lark, Token, UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.indenter import DedentError, Indenter

from fxrules.diagnostics import Diagnostic, DiagnosticSink, FxrSyntaxError, Span
from fxrules.lang.building import Built, LiteralError, SyntaxParser
from fxrules.lang.bundled import grammar_text
from fxrules.lang.syntax_tree import File, Item
from fxrules.lang.tables import load_parser


class _BadDedent(Exception):  # noqa: N818 - internal signal, never raised to users
    def __init__(self, token: Token) -> None:
        self.token = token


class FxrIndenter(Indenter):
    """Python-style INDENT/DEDENT tokens; a bad dedent keeps its position."""

    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB", "LBRACE"]  # noqa: RUF012 - Lark reads these as class attributes
    CLOSE_PAREN_types = ["RPAR", "RSQB", "RBRACE"]  # noqa: RUF012
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8

    def handle_NL(self, token: Token) -> Iterator[Token]:  # noqa: N802 - Lark's name
        try:
            yield from super().handle_NL(token)
        except DedentError:
            raise _BadDedent(token) from None


def _keep_position(token: Token) -> bool:
    # Without this filter a statement's span would swallow its newline and indentation.
    return getattr(token, "type", None) not in {"_NL", "_INDENT", "_DEDENT"}


_POSITIONED: dict[str, Any] = {"propagate_positions": _keep_position}


def shipped_parser(grammar: str, **runtime: Any) -> Lark | None:
    """The parser of ``grammar`` read from the shipped tables, or None when they were not built from it.

    ``runtime`` are Lark's options that hold objects of this process (a ``transformer``); without them the
    parser makes Lark trees whose meta has positions (the formatter's)."""
    return load_parser(grammar, postlex=FxrIndenter(), **(runtime or _POSITIONED))


def built_parser(grammar: str, **runtime: Any) -> Lark:
    """The parser of ``grammar``, built from it (``runtime`` as for :func:`shipped_parser`)."""
    return Lark(grammar, parser="lalr", postlex=FxrIndenter(), maybe_placeholders=True, **(runtime or _POSITIONED))


def _parser(grammar: str, **runtime: Any) -> Lark:
    """Read from the tables shipped with the grammar when they were built from it (:mod:`fxrules.lang.tables`),
    else built from the grammar."""
    shipped = shipped_parser(grammar, **runtime)
    return shipped if shipped is not None else built_parser(grammar, **runtime)


@functools.cache
def fxr_parser() -> Lark:
    """The parser of Lark trees with positions (what the formatter lays out), made once per process."""
    return _parser(grammar_text())


@functools.cache
def syntax_parser() -> SyntaxParser:
    """The parser of syntax trees (what loading reads), made once per process."""
    return SyntaxParser(functools.partial(_parser, grammar_text()))


@functools.cache
def grammar_keywords() -> frozenset[str]:
    """Every word the grammar spells out as a literal (``rule``, ``where``, ``None``, ...): no name may be one."""
    return frozenset(terminal.pattern.value for terminal in syntax_parser().lark.terminals
                     if terminal.pattern.type == "str" and terminal.pattern.value.isidentifier())


_DOC = '    """What the rule does."""\n'
_GIVEN = "    given:\n        x: Tensor\n"
_DOC_RULE = 'rule r:\n    """What the rule does."""\n'


def _block(body: str) -> list[str]:
    """A block-rule snippet, also with a docstring and a ``given:`` section before it.

    Each optional head puts the parser in states of its own, so an example
    must be given with every head for its message to apply after each.
    """
    return [f"rule r:\n{head}{body}" for head in ("", _DOC, _GIVEN, _DOC + _GIVEN)]


def _inline(body: str) -> list[str]:
    """A one-line rule written on the line after ``rule NAME:``, with and without a docstring."""
    return [f"rule r:\n{head}{body}" for head in ("", _DOC)]


_SECTIONS = "(sections are given:, pattern:, where:, replace:, in this order)"
_PATTERN = "    pattern:\n        return neg(x)\n"
_WHERE = "    where:\n        x.ndim == 1\n"
_REPLACE = "    replace:\n        return x\n"
_PW = (_PATTERN, _PATTERN + _WHERE)  # a pattern, with and without a where: section after it


def _after(tails: tuple[str, ...], line: str) -> list[str]:
    return [snippet for tail in tails for snippet in _block(tail + line)]


#: Expressions ending in each way an expression can end: each leaves the parser in a state of its own.
_ENDINGS = ("x", "neg(x)", "neg()", "x[0]", "x.y", "1", "1.5", "'s'", "None", "(x)", "[x]", "(x, x)", "()", "[]", "...")


def _ended(template: str, junk: tuple[str, ...] = ("z", "1")) -> list[str]:
    """``template`` with its ``{}`` filled by every kind of expression ending, then by ``junk``."""
    return [template.format(f"{ending} {extra}") for ending in _ENDINGS for extra in junk]


#: Plain-words syntax errors, each with snippets that fail the same way.
#:
#: An error takes the message of the snippet that failed in the same parser
#: state with the same unexpected token, or failing that in the same state;
#: among those, the snippet whose parser stack is most like the error's wins.
#: A snippet must fail *at the spot its message describes*: a keyword such as
#: ``where`` is an ordinary name where a name fits, so ``x => where x`` fails
#: at the second ``x``, not at ``where``.
SYNTAX_ERRORS: list[tuple[str, list[str]]] = [
    ("expected an expression after '=>'", ["rule r: x =>\n", "rule r: x => => x\n", *_inline("    x =>\n")]),
    ("expected a pattern before '=>'", ["rule r: => x\n", "@tolerance(atol=1)\nrule r: => x\n",
                                        *_inline("    => x\n")]),
    ("expected '=>' between the pattern and the replacement",
     [*_ended("rule r: {} => x\n"), *_ended(_DOC_RULE + "    {} => x\n"),
      "rule r: torch.neg(x)\n", "rule r: torch.neg(x) x\n", "rule r: x + 0 -> x\n", "rule r: x y => x\n",
      "rule r: neg(x) = x\n", "rule r: neg(x) -> x\n", "rule r: neg(x) x\n", "rule r: x 1 => x\n",
      *_inline("    torch.neg(x)\n"), *_inline("    x y => x\n"), *_inline("    neg(x) x => x\n")]),
    ("expected the end of the line after the replacement",
     [*_ended("rule r: x => {}\n", ("z", "1", "=>", ":")), *_ended(_DOC_RULE + "    x => {}\n", ("z", "1", "=>", ":")),
      "rule r: x => x y\n", "rule r: x => neg(x) y\n", "rule r: x => x, y\n", "rule r: x => x 1\n",
      *_inline("    x => x y\n"), *_inline("    x => x, y\n")]),
    ("a one-line rule has one rewrite: start the next one with 'rule NAME:'",
     [*_inline("    x => x\n    x => x\n"), *_inline("    x => x\n    x\n")]),
    ("in a one-line rule, 'where' goes on the same line as the rewrite", [*_inline("    x => x\n    where x\n")]),
    ("expected ':' after the rule name",
     ["rule r torch.neg(x) => x\n", "rule r\n", "rule r(x): x => x\n", "@tolerance(atol=1)\nrule r x => x\n",
      "@tolerance(atol=1)\nrule r\n"]),
    ("expected a rule name after 'rule'",
     ["rule : x => x\n", "rule\n", "rule 1: x => x\n", "@tolerance(atol=1)\nrule : x => x\n",
      "@tolerance(atol=1)\nrule\n", "@tolerance(atol=1)\nrule .r: x => x\n"]),
    ("expected an expression after 'where'", ["rule r: x => x where\n", *_inline("    x => x where\n")]),
    ("expected a rule body after ':'",
     ["rule r:\n", "rule r:\nrule s: x => x\n", "@tolerance(atol=1)\nrule r:\n",
      "@tolerance(atol=1)\nrule r:\nrule s: x => x\n"]),
    ("expected a rewrite or a pattern: section after the docstring", [_DOC_RULE]),
    ("expected a new line after the docstring", [_DOC_RULE[:-1] + " x => x\n", _DOC_RULE[:-1] + "pattern:\n",
                                                  _DOC_RULE[:-1] + "given:\n", _DOC_RULE[:-1] + " 1\n"]),
    ("expected 'rule', 'use', 'include', 'family' or 'commutative' at the start of a top-level item",
     ["x => y\n", "torch.neg(x)\n", "ruel r: x => x\n", "pattern:\n", "1\n", ".x\n", "(x)\n", "=> x\n",
      "rule r: x => x\nx => y\n", "rule r: x => x\n.x\n", "rule r: x => x\n(x)\n", "rule r: x => x\n=> x\n",
      "rule r: x => x\n1\n", *[f"{snippet}x => y\n" for snippet in _block(_PATTERN + _REPLACE)]]),
    (f"expected 'pattern:' in a block rule {_SECTIONS}",
     [*_block("    replace:\n        return x\n"), *_block(_WHERE), _GIVEN.join(["rule r:\n", ""]),
      _GIVEN.join([_DOC_RULE, ""])]),
    (f"expected 'replace:' after the pattern {_SECTIONS}", [*_after(_PW, ""), *_after(_PW, "    neg(x)\n")]),
    (f"'given:' must come before 'pattern:' {_SECTIONS}",
     [*_after(_PW, "    given:\n"), *_after((_PATTERN + _REPLACE, _PATTERN + _WHERE + _REPLACE), "    given:\n")]),
    (f"'where:' must come before 'replace:' {_SECTIONS}",
     _after((_PATTERN + _REPLACE, _PATTERN + _WHERE + _REPLACE), "    where:\n")),
    ("a rule has one 'pattern:' section",
     [*_after(_PW, "    pattern:\n"), *_after((_PATTERN + _REPLACE, _PATTERN + _WHERE + _REPLACE), "    pattern:\n")]),
    ("a rule has one 'where:' section", _after((_PATTERN + _WHERE,), "    where:\n")),
    ("a rule has one 'replace:' section",
     _after((_PATTERN + _REPLACE, _PATTERN + _WHERE + _REPLACE), "    replace:\n")),
    ("expected 'in' after 'not' (as in 'a not in b'; to negate, write 'not a')",
     ["rule r: x => x where x not y\n", "rule r: x => x where x not\n", "rule r: x => x where x not and y\n"]),
    ("expected the end of the rule after its replace: section",
     [*_after((_PATTERN + _REPLACE, _PATTERN + _WHERE + _REPLACE), "    neg(x)\n"),
      *_after((_PATTERN + _REPLACE, _PATTERN + _WHERE + _REPLACE), '    """doc"""\n')]),
    ("expected an indented block after the section header",
     ["rule r:\n    pattern:\n    return x\n", "rule r:\n    given:\n    pattern:\n", *_block("    pattern:\n"),
      *_block("    pattern:\n    replace:\n"), *_after(_PW, "    replace:\n"), *_after((_PATTERN,), "    where:\n"),
      *_after((_PATTERN,), "    where:\n    replace:\n"), *_block("    pattern: return neg(x)\n"),
      *_after(_PW, "    replace: return x\n"), *_inline("    given:\n"), *_inline("    given: x: Tensor\n")]),
    ("expected ':' after the section name",
     [*_block("    pattern\n"), *_after(_PW, "    replace\n"), *_after((_PATTERN,), "    where\n"),
      *_inline("    given\n")]),
    ("expected 'NAME = expression' or 'return ...' in a pattern or replace section",
     [*_block("    pattern:\n        torch.neg(x)\n"), *_block("    pattern:\n        1 = x\n"),
      *_block("    pattern:\n        x\n"), *_block("    pattern:\n        y, z = neg(x)\n"),
      *_after(_PW, "    replace:\n        x\n"), *_after(_PW, "    replace:\n        neg(x)\n"),
      *_block("    pattern:\n        y = neg(x)\n        neg(y)\n"), *_block("    pattern:\n        .x\n"),
      *_block("    pattern:\n        y = neg(x)\n        .x\n"), *_after(_PW, "    replace:\n        .x\n"),
      *_after(_PW, "    replace:\n        y = x\n        .x\n"),
      *_after(_PW, "    replace:\n        y = x\n        neg(y)\n")]),
    ("expected the end of the line after the statement (one statement per line)",
     [*_ended("rule r:\n    pattern:\n        y = {}\n", ("z", "1", "=>", ":")),
      *_ended("rule r:\n    pattern:\n        return {}\n", ("z", "1", "=>", ":")),
      *_ended("rule r:\n    pattern:\n        return neg(x)\n    replace:\n        y = {}\n", ("z", "1", "=>", ":")),
      *_ended("rule r:\n    pattern:\n        return neg(x)\n    replace:\n        return {}\n", ("z", "1", "=>", ":")),
      *_block("    pattern:\n        y = neg(x) return y\n"), *_block("    pattern:\n        return neg(x) y\n"),
      *_after(_PW, "    replace:\n        return x y\n"), *_after(_PW, "    replace:\n        return x =>\n"),
      *_after(_PW, "    replace:\n        y = x z\n")]),
    ("expected the end of the line after the guard",
     [*_ended("rule r: x => x where {}\n", ("z", "1", "=>", ":")), *_ended(_DOC_RULE + "    x => x where {}\n"),
      *_ended(_PATTERN.join(["rule r:\n", "    where:\n        {}\n"]), ("z", "1", "=>", ":")),
      *_ended(_PATTERN.join(["rule r:\n", "    where: {}\n"]), ("z", "1", "=>", ":")),
      *_after((_PATTERN,), "    where:\n        x.ndim == 1\n        replace:\n"),
      *_after((_PATTERN,), "    where:\n        replace:\n"),
      *_after((_PATTERN,), "    where:\n        x.ndim == 1 y\n"), *_after((_PATTERN,), "    where: x.ndim == 1 y\n")]),
    ("expected an expression after '='", [*_block("    pattern:\n        y =\n"), "rule r: torch.sum(x, dim=) => x\n",
                                          *_after(_PW, "    replace:\n        y =\n")]),
    ("expected an expression after 'return'",
     [*_block("    pattern:\n        return\n"), *_after(_PW, "    replace:\n        return\n")]),
    ("'=' assigns; compare with '=='",
     [*_ended("rule r: x => x where {}\n", ("= 1",)),
      *_ended(_PATTERN.join(["rule r:\n", "    where:\n        {}\n"]), ("= 1",)),
      *_ended(_PATTERN.join(["rule r:\n", "    where: {}\n"]), ("= 1",)),
      "rule r: x => x where x.ndim = 1\n", *_after((_PATTERN,), "    where: x.ndim = 1\n"),
      *_after((_PATTERN,), "    where:\n        x.ndim = 1\n")]),
    ("expected 'NAME: type' in a given: section",
     [*_inline("    given:\n        x Tensor\n"), *_inline("    given:\n        1: Tensor\n"),
      *_inline("    given:\n        x = Tensor\n"), *_inline("    given:\n        x: Tensor\n        y Tensor\n"),
      *_inline("    given:\n        x: Tensor\n        1: Tensor\n")]),
    ("expected a type after ':'", ["rule r:\n    given:\n        x:\n", "rule r:\n    given:\n        x: 1\n"]),
    ("expected the end of the line after the type",
     [*_inline("    given:\n        x: Tensor y\n"), *_inline("    given:\n        x: Tensor[M] y\n"),
      *_inline("    given:\n        x: Tensor[M, K] y\n"), *_inline("    given:\n        x: Tensor[M, K, N] y\n"),
      *_inline("    given:\n        x: Tensor[M,] y\n"), *_inline("    given:\n        x: Tensor[M, K,] y\n"),
      *_inline("    given:\n        x: Tensor[M, dtype=float32] y\n"),
      *_inline("    given:\n        x: Tensor[dtype=float32|float16] y\n"),
      *_inline("    given:\n        x: Tensor:\n"),
      *_inline("    given:\n        x: nn.Linear y\n"), *_inline("    given:\n        x: nn.Linear:\n"),
      *_inline("    given:\n        x: Tensor, y\n"), *_inline("    given:\n        x: nn.Linear, y\n"),
      *_inline("    given:\n        x: Tensor\n        y: Tensor z\n"),
      *_inline("    given:\n        x: Tensor\n        y: Tensor[M] z\n"),
      *_inline("    given:\n        x: Tensor\n        y: Tensor[M, K] z\n")]),
    ("expected ']' to close the type's dimensions", ["rule r:\n    given:\n        x: Tensor[M K]\n",
                                                     "rule r:\n    given:\n        x: Tensor[dtype=float32 M]\n"]),
    ("expected a dimension (a name, an integer or '...') or 'dtype=...'",
     ["rule r:\n    given:\n        x: Tensor[M,, K]\n", "rule r:\n    given:\n        x: Tensor[]\n",
      "rule r:\n    given:\n        x: Tensor[-1]\n", "rule r:\n    given:\n        x: Tensor[,]\n"]),
    ("expected a dtype after '='", ["rule r:\n    given:\n        x: Tensor[M, dtype=]\n",
                                    "rule r:\n    given:\n        x: Tensor[M, dtype=float32|]\n"]),
    ("expected a closing ')'", ["rule r: torch.neg(x => x\n", "rule r: (x => x\n", "rule r: torch.neg(x]\n",
                                "rule r: (x]\n"]),
    ("expected a closing ']'", ["rule r: torch.cat([x, y) => x\n", "rule r: x[0 => x\n", "rule r: [x, y => x\n",
                                "rule r: x[0) => x\n", "rule r: [x) => x\n"]),
    ("expected an expression", ["rule r: torch.neg(,) => x\n", "rule r: x + => x\n", "rule r: x * * y => x\n",
                                "rule r: x.neg(1,,) => x\n", "rule r: x == => x\n", "rule r: x ** => x\n",
                                "rule r: not => x\n", "rule r: [x,, y] => x\n", "rule r: x => x where x >\n",
                                "rule r: x => x where not\n", "rule r: x => x where x is not\n",
                                "rule r: x => x where x in\n", "rule r: (x,,) => x\n", "rule r: x[,] => x\n",
                                "rule r: x | => x\n", "rule r: x => x where x and\n", "rule r: x => x where x or\n",
                                "rule r: x => x where x.ndim == 1 and\n",
                                "rule r: x + : => x\n", "rule r: x => x + :\n", "rule r: x[1:.] => x\n",
                                *_block("    pattern:\n        return :\n"),
                                *_block("    pattern:\n        return neg(x),,\n"),
                                *_after(_PW, "    replace:\n        return x,,\n")]),
    ("expected ',' between arguments", [*_ended("rule r: f({}) => x\n"), *_ended("rule r: f(x, {}) => x\n"),
                                        *_ended("rule r: [{}] => x\n"), *_ended("rule r: [x, {}] => x\n"),
                                        *_ended("rule r: f(a={}) => x\n"), *_ended("rule r: (x, {}) => x\n"),
                                        "rule r: torch.add(x y) => x\n", "rule r: torch.cat([x y]) => x\n",
                                        "rule r: torch.add(x 1) => x\n", "rule r: torch.cat([x 1]) => x\n",
                                        "rule r: torch.add(x, y z) => x\n", "rule r: (x y) => x\n"]),
    ("a keyword argument is written NAME=value", ["rule r: torch.sum(x, 1=2) => x\n",
                                                   "rule r: torch.sum(x, x.y=2) => x\n"]),
    ("a slice has at most three parts, start:stop:step", ["rule r: x[1:2:3:4] => x\n"]),
    ("expected a helper name after '@': helpers are called as @name(...)",
     ["rule r: x => @(x)\n", "rule r: x => @@h(x)\n", "rule r: x => @\n", "rule r: x => @ 1\n"]),
    ("expected '(' after the helper's name: helpers are called as @name(...)",
     ["rule r: x => @helper\n", "rule r: x => @helper x\n"]),
    ("expected an attribute name after '.'", ["rule r: x.(1) => x\n", "rule r: x. => x\n", "rule r: x.1 => x\n"]),
    ("expected a module name after 'use'", ["use\n", "use 'torch'\n", "use torch.\n", "use torch.nn.\n"]),
    ("expected a new line after the 'use' item", ["use torch as\n", "use torch as 1\n", "use torch x\n",
                                                  "use torch.nn as\n", "use torch.nn x\n", "use torch as F as G\n",
                                                  "use torch.nn as F as G\n"]),
    ("expected a quoted path after 'include'", ["include algebra.fxr\n", "include\n"]),
    ("expected a new line after the included path", ["include 'a.fxr' 'b.fxr'\n", "include 'a.fxr' x\n"]),
    ("expected 'family NAME = target | target ...'", ["family relu torch.relu\n", "family = torch.relu\n",
                                                      "family relu = torch.relu | F.relu |\n",
                                                      "family relu = torch.relu | F.relu | .x\n",
                                                      "family relu = torch.relu | .x\n", "family relu = .x\n",
                                                      "family relu = torch.relu | F.relu || x\n",
                                                      "family relu = torch.relu (| F.relu\n",
                                                      "family relu = torch [\n", "family relu = torch.relu [\n",
                                                      "family relu = torch.relu | F.relu [\n",
                                                      "family relu = torch.relu | F.relu | torch.Tensor.relu [\n",
                                                      "family relu = torch.relu || x\n",
                                                      "family relu =\n", "family relu = torch.relu |\n",
                                                      "family relu = torch.relu, F.relu\n",
                                                      "family relu = torch.relu F.relu\n",
                                                      "family relu = torch.relu | F.relu, torch.Tensor.relu\n",
                                                      "family relu: torch.relu\n", "family relu = torch.\n"]),
    ("expected a target after 'commutative'", ["commutative\n", "commutative torch.add,,\n"]),
    ("expected ',' between targets", ["commutative torch.add torch.mul\n", "commutative torch.add, torch.mul x\n"]),
    ("expected 'rule' after a decorator", ["@tolerance(atol=1)\nuse torch\n", "@tolerance(atol=1)\n\n",
                                           "@tolerance(atol=1)\n@tolerance(rtol=1)\n\n"]),
    ("expected a decorator name after '@'", ["@\nrule r: x => x\n", "@ 1\nrule r: x => x\n"]),
    ("expected '(' after the decorator name: decorators are written @name(...)",
     ["@tolerance\nrule r: x => x\n", "@tolerance atol=1\nrule r: x => x\n"]),
    ("unexpected indentation", ["rule r: x => x\n    rule s: y => y\n",
                                *_block("    pattern:\n        y = neg(x)\n          return y\n"),
                                *_after(_PW, "    replace:\n        y = x\n          return y\n"),
                                *_after((_PATTERN,), "    where:\n        x.ndim == 1\n          x.ndim == 1\n"),
                                *_after((_PATTERN,), "    where: x.ndim == 1\n        x.ndim == 2\n"),
                                "rule r:\n    given:\n        x: Tensor\n          y: Tensor\n"]),
]

_TERMINAL_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string", "_NL": "end of line",
    "_INDENT": "an indented block", "_DEDENT": "end of block", "$END": "end of file",
}

#: Tokens that begin a line of their own: met inside an open bracket, the bracket was never closed.
_LINE_STARTERS = frozenset({"RULE", "USE", "INCLUDE", "FAMILY", "COMMUTATIVE", "GIVEN", "PATTERN", "WHERE", "REPLACE",
                            "RETURN"})
_CLOSERS = {"RPAR": "LPAR", "RSQB": "LSQB"}


def _describe(token: Token | None) -> str:
    if token is None or token.type == "$END":
        return "end of file"
    if token.type in {"_NL", "_INDENT", "_DEDENT"}:
        return {"_NL": "end of line", "_INDENT": "indentation", "_DEDENT": "end of block"}[token.type]
    return repr(str(token))


def _terminal_words(name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    try:
        pattern = syntax_parser().lark.get_terminal(name).pattern
    except KeyError:
        return name.lower()
    return repr(pattern.value) if pattern.type == "str" else name.lower()


def _stack(error: UnexpectedToken) -> tuple[int, ...]:
    return tuple(getattr(error.state, "state_stack", None) or ())


#: Terminals that continue or start any expression: they say little about where the parser is.
_EXPRESSION_TOKENS = frozenset({
    "AND", "OR", "NOT", "IN", "IS", "DOT", "LPAR", "LSQB", "VBAR", "AT", "MINUS", "PLUS", "STAR", "SLASH", "PERCENT",
    "LESSTHAN", "MORETHAN", "POW", "EQ", "GE", "LE", "NE", "FLOORDIV",
})


def _context(error: UnexpectedToken) -> frozenset[str]:
    """What could have come instead of the bad token, beyond expression operators: where the parser is."""
    try:
        accepts = frozenset(error.interactive_parser.accepts())
    except Exception:  # the context only refines the message
        accepts = frozenset(error.expected)
    return accepts - _EXPRESSION_TOKENS or accepts


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _recent(error: UnexpectedToken) -> tuple[str, ...]:
    """The kinds of the last two things the parser read (token types or rule names)."""
    kinds = []
    for value in (getattr(error.state, "value_stack", None) or ())[-2:]:
        kind = value.type if isinstance(value, Token) else getattr(value, "data", "")
        kinds.append(str(kind))
    return tuple(kinds)


@functools.cache
def _example_failures() -> tuple[tuple[str, tuple[int, ...], str, frozenset[str], tuple[str, ...]], ...]:
    """(message, parser state stack, token type, context, recent kinds) for every snippet of the table."""
    parser = syntax_parser()
    found: list[tuple[str, tuple[int, ...], str, frozenset[str], tuple[str, ...]]] = []
    for message, snippets in SYNTAX_ERRORS:
        for snippet in snippets:
            try:
                parser.parse(snippet, "<example>")
            except UnexpectedToken as error:
                found.append((message, _stack(error), error.token.type, _context(error), _recent(error)))
            except (UnexpectedInput, _BadDedent):
                continue
    return tuple(found)


def _common_suffix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    count = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        count += 1
    return count


def _message_for(error: UnexpectedToken) -> str:
    """The message of the table's example that failed most like ``error``, else a plain 'unexpected X'.

    Examples are compared by what the parser would have accepted instead
    (its context), then by the unexpected token, then by what was read just
    before it, then by how much of the parser stack they share.  An example
    in another parser state counts only where the context says enough: the
    same context read after the same things, or a close context of two or
    more terminals (a lone NAME or end of line is expected in many unrelated
    places).
    """
    stack = _stack(error)
    context = _context(error)
    recent = _recent(error)
    best: str | None = None
    best_score: tuple[float, bool, bool, int] = (0.0, False, False, 0)
    for message, example_stack, token_type, example_context, example_recent in _example_failures():
        common = _common_suffix(stack, example_stack)
        similar = _similarity(context, example_context)
        same_token = token_type == error.token.type
        same_recent = recent == example_recent
        informative = len(context) >= 2 or context == {"ARROW"}  # only a pattern is followed by '=>'
        close = similar == 1.0 or (similar >= 0.8 and same_token)
        if not ((common and similar >= 0.5) or (informative and close) or (similar == 1.0 and same_recent)):
            continue
        score = (similar, same_token, same_recent, common)
        if score > best_score:
            best, best_score = message, score
    if best is not None:
        return best
    expected = sorted({_terminal_words(t) for t in error.expected})
    if 0 < len(expected) <= 4:
        return f"unexpected {_describe(error.token)}; expected {' or '.join(expected)}"
    return f"unexpected {_describe(error.token)}"


def _unclosed_bracket(error: UnexpectedToken) -> Token | None:
    """The innermost bracket still open where the parser stopped, if any."""
    opened: list[Token] = []
    for value in getattr(error.state, "value_stack", None) or ():
        if isinstance(value, Token):
            if value.type in _CLOSERS.values():
                opened.append(value)
            elif value.type in _CLOSERS and opened:
                opened.pop()
    return opened[-1] if opened else None


def _end_of(value: object) -> tuple[int, int] | None:
    """Where a token or subtree the parser already read ends (None for layout tokens)."""
    if isinstance(value, Token):
        if value.type in {"_NL", "_INDENT", "_DEDENT"} or not value.end_line:
            return None
        return value.end_line, value.end_column or 1
    if isinstance(value, Built):
        return value.span.end_line or value.span.line, value.span.end_column or value.span.column
    meta = getattr(value, "meta", None)
    if meta is not None and not getattr(meta, "empty", True):
        return meta.end_line, meta.end_column
    for child in reversed(getattr(value, "children", None) or ()):
        found = _end_of(child)
        if found:
            return found
    return None


def _last_position(error: UnexpectedToken) -> tuple[int, int] | None:
    """Just past the last thing the parser read before the error."""
    for value in reversed(getattr(error.state, "value_stack", None) or ()):
        found = _end_of(value)
        if found:
            return found
    return None


def _syntax_diagnostic(error: Exception, text: str, line_offset: int) -> tuple[int, int, str]:
    """The (line, column, message) of a Lark error in ``text``, moved down by ``line_offset`` lines.

    An error at the end of a line, a block or the file points just past the
    last thing read, not at the invisible layout token; unexpected
    indentation points at the indented text.
    """
    if isinstance(error, _BadDedent):
        token = error.token
        return ((token.end_line or 1) + line_offset, token.end_column or 1,
                "this line's indentation does not match any enclosing block")
    if isinstance(error, UnexpectedCharacters):
        if error.char in "'\"":
            message = "unterminated string literal"
        elif error.char.isdigit():  # INT refuses a leading zero, as Python does
            message = "leading zeros are not allowed in an integer (write 0x... for hexadecimal)"
        else:
            message = f"unexpected character {error.char!r}"
        return error.line + line_offset, error.column, message
    if not isinstance(error, UnexpectedToken):  # UnexpectedEOF: not raised by the LALR parser, but kept safe
        line, column = _end_of_text(text)
        return line + line_offset, column, "unexpected end of file"
    token = error.token
    positioned = bool(token.line) and token.type != "$END"
    opener = _unclosed_bracket(error)
    # Inside brackets the indenter drops line breaks, so only the end of the text brings a dedent there.
    at_end = token.type in {"$END", "_DEDENT"} or not positioned
    if opener is not None and (at_end or (token.type in _LINE_STARTERS and token.line > (opener.line or 0))):
        return (opener.line or 1) + line_offset, opener.column or 1, f"'{opener}' is never closed"
    # Where '=>' cannot come, the lexer reads '=' (a keyword argument) or '-' and then fails at '>':
    # the user wrote an arrow, so point at its first character.
    arrow = token.type == "ARROW" or (token.type == "MORETHAN" and _char_before(text, token) in {"=", "-"})
    column = (token.column or 1) - (token.type == "MORETHAN" and arrow)
    if opener is not None and arrow:  # an arrow inside brackets: the bracket was left open
        return (token.line or 1) + line_offset, column, f"expected a closing '{')' if opener.type == 'LPAR' else ']'}'"
    if opener is None and token.type in _CLOSERS:
        return (token.line or 1) + line_offset, token.column or 1, f"unmatched '{token}'"
    message = _message_for(error)
    if token.type == "_INDENT" and token.end_line:
        line, column = token.end_line, token.end_column or 1
    elif token.type in {"_NL", "_DEDENT", "$END"} or not positioned:
        line, column = _last_position(error) or _end_of_text(text)
    else:
        line = token.line or 1
    return line + line_offset, column, message


def _char_before(text: str, token: Token) -> str:
    """The character just before ``token`` on its line ('' at the start of a line)."""
    lines = text.split("\n")
    line, column = token.line or 0, token.column or 0
    if not 1 <= line <= len(lines) or column < 2:
        return ""
    return lines[line - 1][column - 2 : column - 1]


def _end_of_text(text: str) -> tuple[int, int]:
    """Just past the last line of ``text`` that holds more than a comment."""
    lines = text.split("\n")
    for number in range(len(lines), 0, -1):
        stripped = lines[number - 1].rstrip()
        if stripped and not stripped.lstrip().startswith("#"):
            return number, len(stripped) + 1
    return 1, 1


_ITEM_START = re.compile(r"^(rule|use|include|family|commutative|@)\b|^@")


def _chunks(text: str) -> Iterator[tuple[int, str]]:
    """Split a file at its top-level items: (index of first line, chunk text)."""
    # Lines end at '\n' only, as the parser counts them (str.splitlines would also break at '\f', '\x1c', ...).
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
    start = 0
    for index, line in enumerate(lines):
        previous_is_decorator = index > 0 and lines[index - 1].startswith("@")
        if index > start and _ITEM_START.match(line) and not previous_is_decorator:
            yield start, "".join(lines[start:index])
            start = index
    yield start, "".join(lines[start:])


def _parse(text: str, filename: str) -> File:
    return syntax_parser().parse(text if text.endswith("\n") else text + "\n", filename)


def _build(text: str, filename: str) -> File:
    """Parse and build the syntax tree; a literal Python cannot hold is a syntax error with a location
    rather than a crash."""
    try:
        return _parse(text, filename)
    except LiteralError as error:
        sink = DiagnosticSink(text, filename)
        sink.error(Span(filename, error.span.line, error.span.column), f"this literal cannot be read: {error}")
        sink.raise_if_any(FxrSyntaxError)
        raise AssertionError("unreachable") from None


def parse_partial(text: str, filename: str = "<string>") -> tuple[File, list[Diagnostic]]:
    """Parse what parses: the syntax tree of every top-level item that is well formed, and a
    diagnostic for each one that is not (so semantic errors elsewhere can be reported too)."""
    try:
        return _build(text, filename), []
    except (UnexpectedInput, _BadDedent):
        pass
    sink = DiagnosticSink(text, filename)
    items: list[Item] = []
    for first_line, chunk in _chunks(text):
        padded = "\n" * first_line + chunk  # with the lines before it, the chunk's positions are the file's
        try:
            items += _build(padded, filename).items
        except (UnexpectedInput, _BadDedent) as error:
            line, column, message = _syntax_diagnostic(error, padded, 0)
            sink.error(Span(filename, line, column), message)
        except FxrSyntaxError as error:
            sink.extend(error.diagnostics)
    if not sink.diagnostics:  # the chunks parse alone but not together: report the whole-file error
        try:
            _parse(text, filename)
        except (UnexpectedInput, _BadDedent) as error:
            line, column, message = _syntax_diagnostic(error, text, 0)
            sink.error(Span(filename, line, column), message)
    return File(filename, tuple(items)), sink.diagnostics


def parse_syntax(text: str, filename: str = "<string>") -> File:
    """Parse ``.fxr`` text into its syntax tree, or raise one error listing every syntax problem."""
    syntax, problems = parse_partial(text, filename)
    if problems:
        raise FxrSyntaxError(sorted(problems, key=lambda d: (d.span.line, d.span.column)))
    return syntax
