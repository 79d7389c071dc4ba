"""The canonical layout of ``.fxr`` text: what ``fxrules fmt`` writes.

The layout is rebuilt from Lark's parse tree, so it depends only on what was
written, never on how it was spaced: four spaces per indentation level, one
space around binary operators, ``=>``, ``|`` and ``=`` of a statement, none
around a keyword argument's ``=``; parentheses only where precedence needs
them; block-rule sections in their one order (docstring, ``given:``,
``pattern:``, ``where:``, ``replace:``), each on lines of its own.  A one-line
rule stays on one line when it fits in the line length, else on the line
after ``rule NAME:``, else it becomes a block rule (the same rule: the syntax
tree is the same).  A statement too long for its line is broken inside the
brackets of its outermost call, list or tuple, one argument a line.

Literals are kept as written (``0x10``, ``1e-5``, quotes), and so are
docstrings, character for character: re-indenting a docstring's lines would
change the docstring.  Comments, which the grammar reads as line ends, are
found again in the text by position: a comment on the last line of a
statement stays at its end, any other one goes on a line of its own before
the line of code that follows it, indented as that line.  Between top-level
items one blank line is kept where one or more were written, and a rule is
always set apart by one.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
from lark import Token, Tree

from fxrules.diagnostics import DiagnosticSink, FxrSyntaxError, Span
from fxrules.lang.parser import fxr_parser, parse_syntax

#: The error of nesting the parser reads but Python's recursion cannot lay out.
NESTED_TOO_DEEPLY = "expressions are nested too deeply to read"

#: The longest line the layout aims for (the one of the bundled rulesets).
LINE_LENGTH = 120
INDENT = "    "

#: How tightly each expression binds, loosest first, as the grammar's precedence ladder has it.
_LEVELS = {
    "or_test": 1, "and_test": 2, "not_": 3, "comparison": 4, "alternatives": 5, "arith": 6, "term": 7,
    "unary": 8, "power": 9, "call": 10, "subscript": 10, "attribute": 10,
}
_ATOM = 11
_WORDS = {"none": "None", "true": "True", "false": "False", "ellipsis": "..."}
_BRACKETS = {"call": ("(", ")"), "helper": ("(", ")"), "list_": ("[", "]"), "tuple_": ("(", ")")}


def format_text(text: str, filename: str = "<string>", line_length: int = LINE_LENGTH) -> str:
    """``text`` in the canonical layout; :class:`~fxrules.FxrSyntaxError` (every problem, with
    file:line:col) when it does not parse."""
    parse_syntax(text, filename)  # whatever the parser refuses (a literal Python cannot read too), with where and why
    tree = fxr_parser().parse(text if text.endswith("\n") else text + "\n")
    layout = _Layout(line_length)
    try:
        items = [layout.item(item) for item in tree.children if isinstance(item, Tree)]
    except RecursionError:  # nesting the parser read but Python cannot lay out: as the parser says it
        sink = DiagnosticSink(text, filename)
        sink.error(Span(filename, 1, 1), NESTED_TOO_DEEPLY)
        sink.raise_if_any(FxrSyntaxError)
        raise
    return _assemble(items, _comments(text), _blank_lines(text))


def format_files(paths: Sequence[str], *, check: bool = False, diff: bool = False,
                 line_length: int = LINE_LENGTH) -> int:
    """``fxrules fmt``: lay out each file in place (``-``: standard input to standard output), or with
    ``check``/``diff`` only say which would change (and how).  Exit status 1 if a file does not parse or
    cannot be read (it is left as it is) or, with ``check``, if one would change; else 0."""
    return max((_format_file(name, check, diff, line_length) for name in paths), default=0)


def _format_file(name: str, check: bool, diff: bool, line_length: int) -> int:
    text = _read(name)
    if text is None:
        return 1
    try:
        formatted = format_text(text, "<stdin>" if name == "-" else name, line_length)
    except FxrSyntaxError as error:
        print(error, file=sys.stderr)
        return 1
    if name == "-" and not (check or diff):  # a filter, as an editor's format-on-save runs it
        sys.stdout.write(formatted)
        return 0
    if formatted == text:
        return 0
    if diff:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(keepends=True),
                                                   formatted.splitlines(keepends=True), name, name))
    if check:
        print(f"{name}: would reformat", file=sys.stderr)
        return 1
    if not diff:
        _replace(Path(name), formatted)
        print(f"{name}: reformatted", file=sys.stderr)
    return 0


def _read(name: str) -> str | None:
    """The file's text (``-``: standard input's), or None once the reason it cannot be read is printed."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else f"not UTF-8 ({error.reason})"
        print(f"fxrules fmt: error: cannot read {name}: {reason}", file=sys.stderr)
        return None


def _replace(path: Path, text: str) -> None:
    """Write ``text`` over ``path`` at once: interrupted, the file is either as it was or formatted."""
    target = path.resolve()
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as file:
            file.write(text)
        os.chmod(temporary, target.stat().st_mode & 0o7777)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


# ---------------------------------------------------------------- expressions on one line


def _present(children: Sequence[object]) -> list[object]:
    """A tree's children without the None that stands for an optional part left out."""
    return [child for child in children if child is not None]


def _level(node: object) -> int:
    return _LEVELS.get(node.data, _ATOM) if isinstance(node, Tree) else _ATOM


def _operand(node: object, level: int) -> str:
    """``node`` where an expression binding at least as tightly as ``level`` is needed."""
    text = expression(node)
    return f"({text})" if _level(node) < level else text


def _joined(children: Sequence[object], separator: str, level: int) -> str:
    return separator.join(_operand(child, level) for child in children)


def expression(node: object) -> str:
    """One expression (or argument list, subscript list, dotted name) on one line."""
    if isinstance(node, Token):
        return str(node)
    assert isinstance(node, Tree), node
    kind, children = str(node.data), node.children
    if kind in _WORDS:
        return _WORDS[kind]
    if kind in {"name", "int_", "float_", "string", "attr_name", "dim_name", "dim_size"}:
        return str(children[0])
    render = _RENDERERS.get(kind)
    assert render is not None, f"no layout for {kind}"
    return render(children)


def _chain(children: Sequence[object], level: int) -> str:
    """``a + b - c``: operands and the operator tokens between them."""
    parts = [_operand(children[0], level)]
    for op, right in zip(children[1::2], children[2::2], strict=True):
        parts += [str(op), _operand(right, level)]
    return " ".join(parts)


def _comparison(children: Sequence[object]) -> str:
    parts = [_operand(children[0], 5)]
    for op, right in zip(children[1::2], children[2::2], strict=True):
        parts += [expression(op), _operand(right, 5)]
    return " ".join(parts)


def _attribute(children: Sequence[object]) -> str:
    value, name = children
    # "1.real" would read as the number "1." and a name: an integer takes parentheses
    int_base = isinstance(value, Tree) and value.data == "int_"
    base = f"({expression(value)})" if int_base else _operand(value, 10)
    return f"{base}.{expression(name)}"


def _arguments(node: Any) -> list[str]:
    return [] if node is None else [expression(child) for child in _present(node.children)]


def _tuple(children: Sequence[object]) -> str:
    items = [expression(child) for child in _present(children)]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _slice(children: Sequence[object]) -> str:
    start, stop, step = (expression(part) if part is not None else "" for part in children)
    return f"{start}:{stop}:{step}" if step else f"{start}:{stop}"


def _type_expr(children: Sequence[object]) -> str:
    name, *args = children
    present = _present(args)
    return expression(name) + (f"[{', '.join(expression(arg) for arg in present)}]" if present else "")


_RENDERERS: dict[str, Callable[[Sequence[Any]], str]] = {
    "or_test": lambda c: _joined(c, " or ", 2),
    "and_test": lambda c: _joined(c, " and ", 3),
    "not_": lambda c: f"not {_operand(c[0], 3)}",
    "comparison": _comparison,
    "comp_op": lambda c: " ".join(str(token) for token in c),
    "alternatives": lambda c: _joined(c, " | ", 6),
    "arith": lambda c: _chain(c, 7),
    "term": lambda c: _chain(c, 8),
    "unary": lambda c: f"{c[0]}{_operand(c[1], 8)}",
    "power": lambda c: f"{_operand(c[0], 10)} ** {_operand(c[1], 8)}",
    "call": lambda c: f"{_operand(c[0], 10)}({', '.join(_arguments(c[1]))})",
    "helper": lambda c: f"@{c[0]}({', '.join(_arguments(c[1]))})",
    "subscript": lambda c: f"{_operand(c[0], 10)}[{expression(c[1])}]",
    "subscripts": lambda c: ", ".join(expression(child) for child in _present(c)),
    "slice_": _slice,
    "attribute": _attribute,
    "keyword": lambda c: f"{c[0]}={expression(c[1])}",
    "arguments": lambda c: ", ".join(expression(child) for child in _present(c)),
    "tuple_": _tuple,
    "list_": lambda c: f"[{', '.join(expression(child) for child in _present(c))}]",
    "dotted": lambda c: ".".join(expression(child) for child in c),
    "type_expr": _type_expr,
    "dim_ellipsis": lambda c: "...",
    "type_keyword": lambda c: f"{c[0]}={'|'.join(expression(value) for value in c[1:])}",
    "rewrite": lambda c: f"{expression(c[0])} => {expression(c[1])}" + (f" where {expression(c[2])}" if c[2] else ""),
}


# ---------------------------------------------------------------- lines


@attrs.frozen
class _Line:
    """Output lines of one piece of code, and the source lines it was read from (for its comments)."""

    texts: tuple[str, ...]
    first: int
    last: int
    indent: str


@attrs.frozen
class _Item:
    lines: tuple[_Line, ...]
    is_rule: bool


def _span(node: Any) -> tuple[int, int]:
    """The source lines of a parse tree's node (every node the layout meets has a position)."""
    return node.meta.line, node.meta.end_line


def _head_line(node: Tree[Token]) -> tuple[int, int]:
    return node.meta.line, node.meta.line


@attrs.frozen
class _Layout:
    width: int

    def fitted(self, node: object, indent: str, prefix: str = "", suffix: str = "") -> tuple[str, ...]:
        """``node`` on one line if it fits, else broken inside its outermost brackets, one item a line."""
        line = f"{indent}{prefix}{expression(node)}{suffix}"
        if len(line) <= self.width or not isinstance(node, Tree) or node.data not in _BRACKETS:
            return (line,)
        opening, closing = _BRACKETS[str(node.data)]
        if node.data == "call":
            head, items = _operand(node.children[0], 10), _arguments_nodes(node.children[1])
        elif node.data == "helper":
            head, items = f"@{node.children[0]}", _arguments_nodes(node.children[1])
        else:
            head, items = "", _present(node.children)
        if not items:
            return (line,)
        inner = indent + INDENT
        lines = [f"{indent}{prefix}{head}{opening}"]
        for item in items:
            if isinstance(item, Tree) and item.data == "keyword":
                lines += self.fitted(item.children[1], inner, f"{item.children[0]}=", ",")
            else:
                lines += self.fitted(item, inner, "", ",")
        return (*lines, f"{indent}{closing}{suffix}")

    def item(self, node: Tree[Token]) -> _Item:
        kind = str(node.data)
        if kind == "rule_item":
            return _Item(tuple(self.rule(node)), True)
        children = node.children
        if kind == "use_item":
            text = f"use {expression(children[0])}" + (f" as {children[1]}" if children[1] else "")
        elif kind == "include_item":
            text = f"include {children[0]}"
        elif kind == "family_item":
            text = f"family {children[0]} = {' | '.join(expression(member) for member in children[1:])}"
        else:
            text = f"commutative {', '.join(expression(target) for target in _present(children))}"
        return _Item((_Line((text,), *_span(node), ""),), False)

    def rule(self, node: Tree[Token]) -> Iterator[_Line]:
        children: list[Any] = node.children
        *decorators, name, body = children
        for decorator in decorators:
            yield _Line(self.decorator(decorator), *_span(decorator), "")
        header = f"rule {name}:"
        if body.data == "block_body":
            yield _Line((header,), name.line, name.line, "")
            yield from self.block(body.children)
            return
        docstring, rewrite = body.children if body.data == "indented_inline_body" else (None, body.children[0])
        one_line = f"{header} {expression(rewrite)}"
        if docstring is None and len(one_line) <= self.width:
            yield _Line((one_line,), name.line, body.meta.end_line, "")
            return
        yield _Line((header,), name.line, name.line, "")
        indented = INDENT + expression(rewrite)
        if len(indented) <= self.width:
            if docstring is not None:
                yield _Line((INDENT + str(docstring.children[0]),), *_span(docstring), INDENT)
            yield _Line((indented,), *_span(rewrite), INDENT)
            return
        yield from self.block_from_rewrite(docstring, rewrite)

    def decorator(self, node: Tree[Token]) -> tuple[str, ...]:
        return self.fitted(Tree("helper", node.children), "")

    def block_from_rewrite(self, docstring: Tree[Token] | None, rewrite: Tree[Token]) -> Iterator[_Line]:
        """A one-line rule too long for a line, as the block rule it is the same as."""
        pattern, replacement, guard = rewrite.children
        where: list[tuple[str, list[Any]]] = [] if guard is None else [("where:", [guard])]
        sections = [("pattern:", [Tree("return_", [pattern])]), *where, ("replace:", [Tree("return_", [replacement])])]
        first, last = _span(rewrite)
        if docstring is not None:
            yield _Line((INDENT + str(docstring.children[0]),), *_span(docstring), INDENT)
        for title, entries in sections:
            yield _Line((INDENT + title,), first, first, INDENT)
            for entry in entries:
                yield _Line(self.entry(entry), first, last, INDENT * 2)

    def block(self, children: Sequence[Any]) -> Iterator[_Line]:
        docstring, given, pattern, where, replace = children
        if isinstance(docstring, Tree):
            yield _Line((INDENT + str(docstring.children[0]),), *_span(docstring), INDENT)
        titles = ("given:", "pattern:", "where:", "replace:")
        for title, section in zip(titles, (given, pattern, where, replace), strict=True):
            if not isinstance(section, Tree):
                continue
            yield _Line((INDENT + title,), *_head_line(section), INDENT)
            for entry in section.children:
                yield _Line(self.entry(entry), *_span(entry), INDENT * 2)

    def entry(self, node: object) -> tuple[str, ...]:
        """One line of a section: a declaration, a statement or a condition."""
        indent = INDENT * 2
        if not isinstance(node, Tree):
            return (f"{indent}{expression(node)}",)
        if node.data == "declaration":
            name, type_expr, or_none = node.children
            return (f"{indent}{name}: {expression(type_expr)}" + (" | None" if or_none is not None else ""),)
        if node.data == "assign":
            return self.fitted(node.children[1], indent, f"{node.children[0]} = ")
        if node.data == "return_":
            values = _present(node.children)
            if len(values) == 1:
                return self.fitted(values[0], indent, "return ")
            return (f"{indent}return {', '.join(expression(value) for value in values)}",)
        return self.fitted(node, indent)


def _arguments_nodes(node: Any) -> list[object]:
    return [] if node is None else _present(node.children)


# ---------------------------------------------------------------- comments and blank lines


@attrs.frozen
class _Comment:
    line: int
    text: str
    trailing: bool  # written after code on its line


@functools.cache
def _comment_pattern() -> re.Pattern[str]:
    """Strings or comments, whichever comes first: a '#' inside a string starts no comment."""
    string = fxr_parser().get_terminal("STRING").pattern.value
    return re.compile(f"(?:{string})|(?P<comment>#[^\\n]*)")


def _comments(text: str) -> list[_Comment]:
    found = []
    line, counted_to = 1, 0  # lines are counted as the matches go: one pass over the text
    for match in _comment_pattern().finditer(text):
        if match.group("comment") is None:
            continue
        start = match.start()
        line += text.count("\n", counted_to, start)
        counted_to = start
        line_start = text.rfind("\n", 0, start) + 1
        trailing = bool(text[line_start:start].strip())
        found.append(_Comment(line, match.group("comment").rstrip(), trailing))
    return found


def _blank_lines(text: str) -> frozenset[int]:
    return frozenset(number for number, line in enumerate(text.split("\n"), 1) if not line.strip())


@attrs.define
class _Output:
    """The lines written so far, and the comments still to place (in source order: code is written in
    source order too, so each comment is looked at once)."""

    comments: deque[_Comment]
    blank: frozenset[int]
    lines: list[str] = attrs.Factory(list)
    read_to: int = 0  # the last source line whose code or comments are out

    def comments_before(self, line: _Line) -> list[_Comment]:
        """The comments to write on lines of their own before ``line``: all before it, and those within it
        but the one ending its last line."""
        before = []
        while self.comments and (self.comments[0].line < line.first or (
                self.comments[0].line <= line.last and not self._trails(self.comments[0], line))):
            before.append(self.comments.popleft())
        return before

    @staticmethod
    def _trails(comment: _Comment, line: _Line) -> bool:
        return comment.trailing and comment.line == line.last

    def write(self, line: _Line) -> None:
        texts = list(line.texts)
        if self.comments and self._trails(self.comments[0], line):
            texts[-1] += f"  {self.comments.popleft().text}"
        self.lines += texts
        self.read_to = max(self.read_to, line.last)


def _assemble(items: list[_Item], comments: list[_Comment], blank: frozenset[int]) -> str:
    out = _Output(deque(comments), blank)
    previous_is_rule = False
    for item in items:
        first, *rest = item.lines
        _top_level(out, out.comments_before(first), first, separate=item.is_rule or previous_is_rule)
        for line in rest:
            for comment in out.comments_before(line):
                out.lines.append(line.indent + comment.text)
            out.write(line)
        previous_is_rule = item.is_rule
    _top_level(out, list(out.comments), None, separate=False)
    return "\n".join(out.lines) + "\n" if out.lines else ""


def _top_level(out: _Output, comments: list[_Comment], item: _Line | None, *, separate: bool) -> None:
    """Comments and the first line of a top-level item, one blank line wherever one or more were written
    between them, and one before them all where a rule needs setting apart from the item before."""
    starts = [comment.line for comment in comments] + ([item.first] if item is not None else [])
    blanks: list[bool] = []
    previous = out.read_to
    for start in starts:
        blanks.append(bool(out.lines or blanks) and any(n in out.blank for n in range(previous + 1, start)))
        previous = start
    if separate and out.lines and not any(blanks):
        blanks[0] = True
    for comment, blank in zip(comments, blanks, strict=False):
        out.lines += ["", comment.text] if blank else [comment.text]
    out.read_to = max([out.read_to, *starts[: len(comments)]])
    if item is not None:
        if blanks[-1]:
            out.lines.append("")
        out.write(item)
    else:
        out.comments.clear()
