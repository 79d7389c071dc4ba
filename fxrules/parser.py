"""Text to syntax tree: the Lark LALR parser of ``grammar/fxr.lark``, and syntax errors in plain words.

Syntax errors are named by example, as Lark's own grammar loader does: each
message in :data:`SYNTAX_ERRORS` comes with malformed snippets, and an error
is given the message of the snippet that fails in the same parser state.
After an error the parser resynchronises at the next top-level item, so one
run reports every broken rule of a file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from lark import Lark, Token, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import DedentError, Indenter

from fxrules.bundled import grammar_text
from fxrules.diagnostics import DiagnosticSink, FxrSyntaxError, Span
from fxrules.syntax_tree import File, to_syntax_tree


class _BadDedent(Exception):
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


@functools.cache
def fxr_parser() -> Lark:
    """The one parser, built once per process from the grammar shipped with the package."""
    return Lark(
        grammar_text(),
        parser="lalr",
        postlex=FxrIndenter(),
        propagate_positions=_keep_position,
        maybe_placeholders=True,
    )


#: Plain-words syntax errors, each with snippets that fail the same way.
SYNTAX_ERRORS: list[tuple[str, list[str]]] = [
    ("expected an expression after '=>'", ["rule r: x =>\n", "rule r:\n    x =>\n", "rule r: x => where x\n"]),
    ("expected '=>' between the pattern and the replacement",
     ["rule r: torch.neg(x)\n", "rule r: torch.neg(x) x\n", "rule r: x + 0 -> x\n", "rule r:\n    torch.neg(x)\n"]),
    ("expected ':' after the rule name", ["rule r torch.neg(x) => x\n", "rule r\n"]),
    ("expected a rule name after 'rule'", ["rule : x => x\n", "rule\n", "rule 1: x => x\n"]),
    ("expected an expression after 'where'", ["rule r: x => x where\n"]),
    ("expected a rule body after ':'", ["rule r:\n", "rule r:\nrule s: x => x\n"]),
    ("expected 'rule', 'use', 'include', 'family' or 'commutative' at the start of a top-level item",
     ["x => y\n", "torch.neg(x)\n", "ruel r: x => x\n", "pattern:\n", "1\n"]),
    ("expected 'pattern:' in a block rule (sections are given:, pattern:, where:, replace:)",
     ["rule r:\n    replace:\n        return x\n", "rule r:\n    given:\n        x: Tensor\n    replace:\n        return x\n"]),
    ("expected 'replace:' after the pattern (sections are given:, pattern:, where:, replace:)",
     ["rule r:\n    pattern:\n        return x\n", "rule r:\n    pattern:\n        return x\n    where:\n        x\n",
      "rule r:\n    pattern:\n        return x\n    given:\n        x: Tensor\n"]),
    ("expected an indented block after the section header",
     ["rule r:\n    pattern:\n    return x\n", "rule r:\n    given:\n    pattern:\n"]),
    ("expected 'NAME = expression' or 'return ...' in a pattern or replace section",
     ["rule r:\n    pattern:\n        torch.neg(x)\n", "rule r:\n    pattern:\n        1 = x\n"]),
    ("expected an expression after '='", ["rule r:\n    pattern:\n        y =\n"]),
    ("expected an expression after 'return'", ["rule r:\n    pattern:\n        return\n"]),
    ("expected 'NAME: type' in a given: section", ["rule r:\n    given:\n        x Tensor\n", "rule r:\n    given:\n        1: Tensor\n"]),
    ("expected a type after ':'", ["rule r:\n    given:\n        x:\n", "rule r:\n    given:\n        x: 1\n"]),
    ("expected ']' to close the type's dimensions", ["rule r:\n    given:\n        x: Tensor[M, K\n"]),
    ("expected a closing ')'", ["rule r: torch.neg(x => x\n", "rule r: torch.neg(x\n", "rule r: (x => x\n"]),
    ("expected a closing ']'", ["rule r: torch.cat([x, y) => x\n", "rule r: x[0 => x\n"]),
    ("expected an expression", ["rule r: torch.neg(,) => x\n", "rule r: x + => x\n", "rule r: => x\n",
                                "rule r: x * * y => x\n", "rule r: x.neg(1,,) => x\n"]),
    ("expected ',' between arguments", ["rule r: torch.add(x y) => x\n", "rule r: torch.cat([x y]) => x\n"]),
    ("expected an attribute name after '.'", ["rule r: x.(1) => x\n", "rule r: x. => x\n"]),
    ("expected a module name after 'use'", ["use\n", "use 'torch'\n", "use torch.\n"]),
    ("expected a new line after the 'use' item", ["use torch as\n", "use torch as 1\n", "use torch x\n"]),
    ("expected a quoted path after 'include'", ["include algebra.fxr\n", "include\n"]),
    ("expected 'family NAME = target | target ...'", ["family relu torch.relu\n", "family = torch.relu\n",
                                                      "family relu =\n", "family relu = torch.relu |\n"]),
    ("expected a target after 'commutative'", ["commutative\n", "commutative torch.add,,\n"]),
    ("expected 'rule' after a decorator", ["@tolerance(atol=1)\nuse torch\n", "@tolerance(atol=1)\n\n"]),
    ("unexpected indentation", ["  rule r: x => x\n", "rule r: x => x\n    rule s: y => y\n"]),
]


def _describe(token: Token | None) -> str:
    if token is None or token.type == "$END":
        return "end of file"
    if token.type in {"_NL"}:
        return "end of line"
    if token.type == "_INDENT":
        return "indentation"
    if token.type == "_DEDENT":
        return "end of block"
    return repr(str(token))


@functools.cache
def _example_failures() -> tuple[tuple[str, int, str], ...]:
    """(message, parser state, token type) for every snippet of the table."""
    parser = fxr_parser()
    found: list[tuple[str, int, str]] = []
    for message, snippets in SYNTAX_ERRORS:
        for snippet in snippets:
            try:
                parser.parse(snippet)
            except UnexpectedToken as error:
                found.append((message, error.state, error.token.type))
            except (UnexpectedInput, _BadDedent):
                continue
    return tuple(found)


def _message_for(error: UnexpectedToken) -> str:
    exact = [m for m, state, token in _example_failures() if state == error.state and token == error.token.type]
    if exact:
        return exact[0]
    by_state = [m for m, state, _ in _example_failures() if state == error.state]
    if by_state:
        return by_state[0]
    return f"unexpected {_describe(error.token)}"


def _syntax_diagnostic(error: Exception, sink: DiagnosticSink, line_offset: int) -> tuple[int, int, str]:
    """The (line, column, message) of a Lark error, in the whole file's coordinates."""
    if isinstance(error, _BadDedent):
        line = (error.token.end_line or 1) + line_offset
        return line, 1, "this line's indentation does not match any enclosing block"
    if isinstance(error, UnexpectedCharacters):
        return error.line + line_offset, error.column, f"unexpected character {error.char!r}"
    if isinstance(error, UnexpectedEOF):
        last = sink.line_count or 1
        return last, 1, "unexpected end of file"
    assert isinstance(error, UnexpectedToken)
    token = error.token
    line, column = token.line or 0, token.column or 0
    if token.type == "$END" or line <= 0:
        line, column = sink.line_count or 1, len(sink.source_line(sink.line_count or 1) or "") + 1
    elif token.type == "_NL":
        # A newline token starts at the end of the offending line: point just past its text.
        column = len(sink.source_line(line + line_offset) or "") + 1 if line + line_offset else column
    return line + line_offset, column, _message_for(error)


_ITEM_START = re.compile(r"^(rule|use|include|family|commutative|@)\b|^@")


def _chunks(text: str) -> Iterator[tuple[int, str]]:
    """Split a file at its top-level items: (index of first line, chunk text)."""
    lines = text.splitlines(keepends=True)
    start = 0
    for index, line in enumerate(lines):
        previous_is_decorator = index > 0 and lines[index - 1].startswith("@")
        if index > start and _ITEM_START.match(line) and not previous_is_decorator:
            yield start, "".join(lines[start:index])
            start = index
    yield start, "".join(lines[start:])


def _parse_tree(text: str) -> object:
    if not text.endswith("\n"):
        text += "\n"
    return fxr_parser().parse(text)


def parse_syntax(text: str, filename: str = "<string>") -> File:
    """Parse ``.fxr`` text into its syntax tree, or raise one error listing every syntax problem."""
    try:
        return to_syntax_tree(_parse_tree(text), filename)
    except (UnexpectedInput, _BadDedent):
        pass
    sink = DiagnosticSink(text, filename)
    for first_line, chunk in _chunks(text):
        try:
            _parse_tree(chunk)
        except (UnexpectedInput, _BadDedent) as error:
            line, column, message = _syntax_diagnostic(error, sink, first_line)
            sink.error(Span(filename, line, column), message)
    if not sink.diagnostics:  # the chunks parse alone but not together: report the whole-file error
        try:
            _parse_tree(text)
        except (UnexpectedInput, _BadDedent) as error:
            line, column, message = _syntax_diagnostic(error, sink, 0)
            sink.error(Span(filename, line, column), message)
    sink.raise_if_any(FxrSyntaxError)
    raise AssertionError("unreachable: the text failed to parse but no error was found")
