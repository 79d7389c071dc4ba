"""The surface syntax tree of a ``.fxr`` file, built while Lark parses it.

These classes say what was *written*, with a span each; names are not yet
resolved and nothing is checked beyond the grammar.  ``fxrules.lang.resolve``
turns them into the rule IR.
"""

from __future__ import annotations

from typing import Any

import attrs
from lark import Token

from fxrules.diagnostics import Span

# ---------------------------------------------------------------- expressions


@attrs.frozen
class Name:
    id: str
    span: Span


@attrs.frozen
class Attribute:
    value: Expr
    attr: str
    span: Span


@attrs.frozen
class Keyword:
    name: str
    value: Expr
    span: Span


@attrs.frozen
class Call:
    func: Expr
    args: tuple[Expr, ...]
    keywords: tuple[Keyword, ...]
    span: Span


@attrs.frozen
class HelperCall:
    name: str
    args: tuple[Expr, ...]
    keywords: tuple[Keyword, ...]
    span: Span


@attrs.frozen
class BinOp:
    op: str
    left: Expr
    right: Expr
    span: Span


@attrs.frozen
class UnaryOp:
    op: str
    operand: Expr
    span: Span


@attrs.frozen
class SliceExpr:
    start: Expr | None
    stop: Expr | None
    step: Expr | None
    span: Span


@attrs.frozen
class Subscript:
    value: Expr
    index: tuple[Expr, ...]
    span: Span


@attrs.frozen
class Constant:
    value: int | float | str | bool | None
    span: Span


@attrs.frozen
class EllipsisExpr:
    span: Span


@attrs.frozen
class ListExpr:
    items: tuple[Expr, ...]
    span: Span


@attrs.frozen
class TupleExpr:
    items: tuple[Expr, ...]
    span: Span


@attrs.frozen
class Alternatives:
    options: tuple[Expr, ...]
    span: Span


@attrs.frozen
class BoolOp:
    op: str  # "and" | "or"
    values: tuple[Expr, ...]
    span: Span


@attrs.frozen
class Not:
    operand: Expr
    span: Span


@attrs.frozen
class Compare:
    left: Expr
    ops: tuple[str, ...]
    comparators: tuple[Expr, ...]
    span: Span


Expr = (
    Name | Attribute | Call | HelperCall | BinOp | UnaryOp | SliceExpr | Subscript | Constant
    | EllipsisExpr | ListExpr | TupleExpr | Alternatives | BoolOp | Not | Compare
)

def dotted_parts(expr: Expr) -> tuple[str, ...] | None:
    """``torch.nn.functional.relu`` as its parts, or None if ``expr`` is not a plain dotted name."""
    if isinstance(expr, Name):
        return (expr.id,)
    if isinstance(expr, Attribute):
        head = dotted_parts(expr.value)
        return (*head, expr.attr) if head else None
    return None


# ---------------------------------------------------------------- statements and items


@attrs.frozen
class Dotted:
    parts: tuple[str, ...]
    span: Span

    def __str__(self) -> str:
        return ".".join(self.parts)


@attrs.frozen
class Assign:
    name: str
    value: Expr
    span: Span


@attrs.frozen
class Return:
    values: tuple[Expr, ...]
    span: Span


Statement = Assign | Return


@attrs.frozen
class DimName:
    name: str
    span: Span


@attrs.frozen
class DimSize:
    size: int
    span: Span


@attrs.frozen
class DimEllipsis:
    span: Span


@attrs.frozen
class TypeKeyword:
    name: str
    values: tuple[Dotted, ...]
    span: Span


TypeArg = DimName | DimSize | DimEllipsis | TypeKeyword


@attrs.frozen
class TypeExpr:
    name: Dotted
    args: tuple[TypeArg, ...] | None
    span: Span


@attrs.frozen
class Declaration:
    name: str
    type: TypeExpr
    span: Span
    or_none: Span | None = None  # where ``| None`` is written: the capture may also be the literal None


@attrs.frozen
class Decorator:
    name: str
    args: tuple[Expr, ...]
    keywords: tuple[Keyword, ...]
    span: Span


@attrs.frozen
class Use:
    module: Dotted
    alias: str | None
    span: Span


@attrs.frozen
class Include:
    path: str
    span: Span
    path_span: Span  # the quoted path: where a problem with the included file is shown


@attrs.frozen
class FamilyDecl:
    name: str
    members: tuple[Dotted, ...]
    span: Span


@attrs.frozen
class CommutativeDecl:
    targets: tuple[Dotted, ...]
    span: Span


@attrs.frozen
class RuleDecl:
    name: str
    decorators: tuple[Decorator, ...]
    docstring: str | None
    given: tuple[Declaration, ...]
    pattern: tuple[Statement, ...]
    where: tuple[Expr, ...]
    replace: tuple[Statement, ...]
    span: Span
    name_span: Span


Item = Use | Include | FamilyDecl | CommutativeDecl | RuleDecl


@attrs.frozen
class File:
    filename: str
    items: tuple[Item, ...]


# ---------------------------------------------------------------- building the syntax tree


def _string_value(token: Token) -> str:
    """Decode a Python-style string literal without evaluating anything."""
    text = str(token)
    quote = text[:3] if text[:3] in ('"""', "'''") else text[0]
    body = text[len(quote):-len(quote)]
    if "\\" not in body:  # nothing to decode (most strings, every docstring without an escape)
        return body
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


#: What a rule's body says, in :class:`RuleDecl`'s order: its docstring, given, pattern, where and replace
#: sections.  The rule item makes the one RuleDecl of them, with its name, decorators and span.
RuleParts = tuple[str | None, tuple[Declaration, ...], tuple[Statement, ...], tuple[Expr, ...], tuple[Statement, ...]]


class SyntaxBuilder:
    """Builds syntax-tree objects bottom-up, one method per grammar rule (or alias) that makes a node.

    The parser calls a method when it reduces its rule, with the span of everything the rule read
    (layout tokens left out) and the rule's children: tokens, ``None`` for an optional part not
    written, and what the methods of the child rules returned.
    """

    def __init__(self, filename: str) -> None:
        self.filename = filename

    def _token_span(self, token: Token) -> Span:
        return Span(self.filename, token.line or 0, token.column or 0, token.end_line, token.end_column)

    # -- file structure
    def start(self, span: Span | None, *items: Item) -> File:
        return File(self.filename, tuple(items))

    def use_item(self, span: Span, module: Dotted, alias: Token | None) -> Use:
        return Use(module, str(alias) if alias else None, span)

    def include_item(self, span: Span, path: Token) -> Include:
        return Include(_string_value(path), span, self._token_span(path))

    def family_item(self, span: Span, name: Token, *members: Dotted) -> FamilyDecl:
        return FamilyDecl(str(name), members, span)

    def commutative_item(self, span: Span, *targets: Dotted | None) -> CommutativeDecl:
        return CommutativeDecl(tuple(t for t in targets if t is not None), span)

    def decorator(self, span: Span, name: Token, arguments: tuple[list[Expr], list[Keyword]] | None) -> Decorator:
        args, keywords = arguments or ([], [])
        return Decorator(str(name), tuple(args), tuple(keywords), span)

    def rule_item(self, span: Span, *children: Any) -> RuleDecl:
        *decorators, name, body = children
        parts: RuleParts = body
        return RuleDecl(str(name), tuple(decorators), *parts, span=span, name_span=self._token_span(name))

    def inline_body(self, span: Span, rewrite: tuple[Expr, Expr, Expr | None]) -> RuleParts:
        pattern, replacement, guard = rewrite
        return (None, (), (Return((pattern,), pattern.span),), (guard,) if guard is not None else (),
                (Return((replacement,), replacement.span),))

    def indented_inline_body(self, span: Span, docstring: str | None,
                             rewrite: tuple[Expr, Expr, Expr | None]) -> RuleParts:
        return (docstring, *self.inline_body(span, rewrite)[1:])

    def block_body(self, span: Span, docstring: str | None, given: tuple[Declaration, ...] | None,
                   pattern: tuple[Statement, ...], where: tuple[Expr, ...] | None,
                   replace: tuple[Statement, ...]) -> RuleParts:
        return docstring, given or (), pattern, where or (), replace

    def rewrite(self, span: Span, pattern: Expr, replacement: Expr,
                guard: Expr | None) -> tuple[Expr, Expr, Expr | None]:
        return pattern, replacement, guard

    def docstring(self, span: Span, text: Token) -> str:
        return _string_value(text)

    def given(self, span: Span, *declarations: Declaration) -> tuple[Declaration, ...]:
        return declarations

    def declaration(self, span: Span, name: Token, type_expr: TypeExpr, or_none: Span | None) -> Declaration:
        return Declaration(str(name), type_expr, span, or_none)

    def or_none(self, span: Span) -> Span:
        return span

    def type_expr(self, span: Span, name: Dotted, *args: TypeArg | None) -> TypeExpr:
        present = tuple(a for a in args if a is not None)
        return TypeExpr(name, present if args else None, span)

    def dim_name(self, span: Span, name: Token) -> DimName:
        return DimName(str(name), span)

    def dim_size(self, span: Span, size: Token) -> DimSize:
        return DimSize(int(str(size), 0), span)

    def dim_ellipsis(self, span: Span) -> DimEllipsis:
        return DimEllipsis(span)

    def type_keyword(self, span: Span, name: Token, *values: Dotted) -> TypeKeyword:
        return TypeKeyword(str(name), values, span)

    def pattern_section(self, span: Span, *statements: Statement) -> tuple[Statement, ...]:
        return statements

    replace_section = pattern_section

    def where_section(self, span: Span, *guards: Expr) -> tuple[Expr, ...]:
        return guards

    def assign(self, span: Span, name: Token, value: Expr) -> Assign:
        return Assign(str(name), value, span)

    def return_(self, span: Span, *values: Expr | None) -> Return:
        return Return(tuple(v for v in values if v is not None), span)

    def dotted(self, span: Span, *parts: Token | str) -> Dotted:
        return Dotted(tuple(str(p) for p in parts), span)

    def attr_name(self, span: Span, token: Token) -> str:
        return str(token)

    # -- expressions
    def or_test(self, span: Span, *values: Expr) -> BoolOp:
        return BoolOp("or", values, span)

    def and_test(self, span: Span, *values: Expr) -> BoolOp:
        return BoolOp("and", values, span)

    def not_(self, span: Span, operand: Expr) -> Not:
        return Not(operand, span)

    def comparison(self, span: Span, left: Expr, *rest: Any) -> Compare:
        return Compare(left, tuple(rest[0::2]), tuple(rest[1::2]), span)

    def comp_op(self, span: Span, *tokens: Token) -> str:
        return " ".join(str(t) for t in tokens)

    def alternatives(self, span: Span, *options: Expr) -> Alternatives:
        return Alternatives(options, span)

    def _binary_chain(self, children: tuple[Any, ...]) -> Expr:
        result: Expr = children[0]
        for op, right in zip(children[1::2], children[2::2], strict=True):
            span = Span(self.filename, result.span.line, result.span.column, right.span.end_line, right.span.end_column)
            result = BinOp(str(op), result, right, span)
        return result

    def arith(self, span: Span, *children: Any) -> Expr:
        return self._binary_chain(children)

    term = arith

    def power(self, span: Span, base: Expr, exponent: Expr) -> BinOp:
        return BinOp("**", base, exponent, span)

    def unary(self, span: Span, op: Token, operand: Expr) -> UnaryOp:
        return UnaryOp(str(op), operand, span)

    def call(self, span: Span, func: Expr, arguments: tuple[list[Expr], list[Keyword]] | None) -> Call:
        args, keywords = arguments or ([], [])
        return Call(func, tuple(args), tuple(keywords), span)

    def arguments(self, span: Span, *items: Expr | Keyword | None) -> tuple[list[Expr], list[Keyword]]:
        args = [i for i in items if i is not None and not isinstance(i, Keyword)]
        keywords = [i for i in items if isinstance(i, Keyword)]
        return args, keywords

    def keyword(self, span: Span, name: Token, value: Expr) -> Keyword:
        return Keyword(str(name), value, span)

    def subscript(self, span: Span, value: Expr, index: tuple[Expr, ...]) -> Subscript:
        return Subscript(value, index, span)

    def subscripts(self, span: Span, *items: Expr | None) -> tuple[Expr, ...]:
        return tuple(i for i in items if i is not None)

    def slice_(self, span: Span, start: Expr | None, stop: Expr | None, step: Expr | None) -> SliceExpr:
        return SliceExpr(start, stop, step, span)

    def attribute(self, span: Span, value: Expr, attr: str) -> Attribute:
        return Attribute(value, attr, span)

    def name(self, span: Span, token: Token) -> Name:
        return Name(str(token), span)

    def helper(self, span: Span, name: Token, arguments: tuple[list[Expr], list[Keyword]] | None) -> HelperCall:
        args, keywords = arguments or ([], [])
        return HelperCall(str(name), tuple(args), tuple(keywords), span)

    def int_(self, span: Span, token: Token) -> Constant:
        return Constant(int(str(token), 0), span)

    def float_(self, span: Span, token: Token) -> Constant:
        return Constant(float(str(token)), span)

    def string(self, span: Span, token: Token) -> Constant:
        return Constant(_string_value(token), span)

    def none(self, span: Span) -> Constant:
        return Constant(None, span)

    def true(self, span: Span) -> Constant:
        return Constant(True, span)

    def false(self, span: Span) -> Constant:
        return Constant(False, span)

    def ellipsis(self, span: Span) -> EllipsisExpr:
        return EllipsisExpr(span)

    def tuple_(self, span: Span, *items: Expr | None) -> TupleExpr:
        return TupleExpr(tuple(i for i in items if i is not None), span)

    def list_(self, span: Span, *items: Expr | None) -> ListExpr:
        return ListExpr(tuple(i for i in items if i is not None), span)
