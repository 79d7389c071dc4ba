"""The surface syntax tree of a ``.fxr`` file, built from Lark's parse tree.

These classes say what was *written*, with a span each; names are not yet
resolved and nothing is checked beyond the grammar.  ``fxrules.lang.resolve``
turns them into the rule IR.
"""

from __future__ import annotations

from typing import Any

import attrs
from lark import Token, Transformer, Tree, v_args

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


# ---------------------------------------------------------------- Lark tree -> syntax tree


def _string_value(token: Token) -> str:
    """Decode a Python-style string literal without evaluating anything."""
    text = str(token)
    quote = text[:3] if text[:3] in ('"""', "'''") else text[0]
    body = text[len(quote):-len(quote)]
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


@v_args(meta=True, inline=True)
class ToSyntaxTree(Transformer[Token, File]):
    """Builds syntax-tree objects bottom-up; every node gets its span from Lark's meta."""

    def __init__(self, filename: str) -> None:
        super().__init__()
        self.filename = filename

    def _span(self, meta: Any) -> Span:
        return Span(self.filename, meta.line, meta.column, meta.end_line, meta.end_column)

    def _token_span(self, token: Token) -> Span:
        return Span(self.filename, token.line or 0, token.column or 0, token.end_line, token.end_column)

    # -- file structure
    def start(self, meta: Any, *items: Item) -> File:
        return File(self.filename, tuple(items))

    def use_item(self, meta: Any, module: Dotted, alias: Token | None) -> Use:
        return Use(module, str(alias) if alias else None, self._span(meta))

    def include_item(self, meta: Any, path: Token) -> Include:
        return Include(_string_value(path), self._span(meta), self._token_span(path))

    def family_item(self, meta: Any, name: Token, *members: Dotted) -> FamilyDecl:
        return FamilyDecl(str(name), members, self._span(meta))

    def commutative_item(self, meta: Any, *targets: Dotted | None) -> CommutativeDecl:
        return CommutativeDecl(tuple(t for t in targets if t is not None), self._span(meta))

    def decorator(self, meta: Any, name: Token, arguments: tuple[list[Expr], list[Keyword]] | None) -> Decorator:
        args, keywords = arguments or ([], [])
        return Decorator(str(name), tuple(args), tuple(keywords), self._span(meta))

    def rule_item(self, meta: Any, *children: Any) -> RuleDecl:
        *decorators, name, body = children
        rule: RuleDecl = body
        return attrs.evolve(
            rule, name=str(name), decorators=tuple(decorators), span=self._span(meta), name_span=self._token_span(name)
        )

    def inline_body(self, meta: Any, rewrite: tuple[Expr, Expr, Expr | None]) -> RuleDecl:
        pattern, replacement, guard = rewrite
        return RuleDecl(
            name="",
            decorators=(),
            docstring=None,
            given=(),
            pattern=(Return((pattern,), pattern.span),),
            where=(guard,) if guard is not None else (),
            replace=(Return((replacement,), replacement.span),),
            span=self._span(meta),
            name_span=self._span(meta),
        )

    def indented_inline_body(self, meta: Any, docstring: str | None,
                             rewrite: tuple[Expr, Expr, Expr | None]) -> RuleDecl:
        return attrs.evolve(self.inline_body(meta, rewrite), docstring=docstring)

    def block_body(self, meta: Any, docstring: str | None, given: tuple[Declaration, ...] | None,
                   pattern: tuple[Statement, ...], where: tuple[Expr, ...] | None,
                   replace: tuple[Statement, ...]) -> RuleDecl:
        span = self._span(meta)
        return RuleDecl("", (), docstring, given or (), pattern, where or (), replace, span, span)

    def rewrite(self, meta: Any, pattern: Expr, replacement: Expr,
                guard: Expr | None) -> tuple[Expr, Expr, Expr | None]:
        return pattern, replacement, guard

    def docstring(self, meta: Any, text: Token) -> str:
        return _string_value(text)

    def given(self, meta: Any, *declarations: Declaration) -> tuple[Declaration, ...]:
        return declarations

    def declaration(self, meta: Any, name: Token, type_expr: TypeExpr, or_none: Span | None) -> Declaration:
        return Declaration(str(name), type_expr, self._span(meta), or_none)

    def or_none(self, meta: Any) -> Span:
        return self._span(meta)

    def type_expr(self, meta: Any, name: Dotted, *args: TypeArg | None) -> TypeExpr:
        present = tuple(a for a in args if a is not None)
        return TypeExpr(name, present if args else None, self._span(meta))

    def dim_name(self, meta: Any, name: Token) -> DimName:
        return DimName(str(name), self._span(meta))

    def dim_size(self, meta: Any, size: Token) -> DimSize:
        return DimSize(int(str(size), 0), self._span(meta))

    def dim_ellipsis(self, meta: Any) -> DimEllipsis:
        return DimEllipsis(self._span(meta))

    def type_keyword(self, meta: Any, name: Token, *values: Dotted) -> TypeKeyword:
        return TypeKeyword(str(name), values, self._span(meta))

    def pattern_section(self, meta: Any, *statements: Statement) -> tuple[Statement, ...]:
        return statements

    replace_section = pattern_section

    def where_section(self, meta: Any, *guards: Expr) -> tuple[Expr, ...]:
        return guards

    def assign(self, meta: Any, name: Token, value: Expr) -> Assign:
        return Assign(str(name), value, self._span(meta))

    def return_(self, meta: Any, *values: Expr | None) -> Return:
        return Return(tuple(v for v in values if v is not None), self._span(meta))

    def dotted(self, meta: Any, *parts: Token | str) -> Dotted:
        return Dotted(tuple(str(p) for p in parts), self._span(meta))

    def attr_name(self, meta: Any, token: Token) -> str:
        return str(token)

    # -- expressions
    def or_test(self, meta: Any, *values: Expr) -> BoolOp:
        return BoolOp("or", values, self._span(meta))

    def and_test(self, meta: Any, *values: Expr) -> BoolOp:
        return BoolOp("and", values, self._span(meta))

    def not_(self, meta: Any, operand: Expr) -> Not:
        return Not(operand, self._span(meta))

    def comparison(self, meta: Any, left: Expr, *rest: Any) -> Compare:
        return Compare(left, tuple(rest[0::2]), tuple(rest[1::2]), self._span(meta))

    def comp_op(self, meta: Any, *tokens: Token) -> str:
        return " ".join(str(t) for t in tokens)

    def alternatives(self, meta: Any, *options: Expr) -> Alternatives:
        return Alternatives(options, self._span(meta))

    def _binary_chain(self, meta: Any, children: tuple[Any, ...]) -> Expr:
        result: Expr = children[0]
        for op, right in zip(children[1::2], children[2::2], strict=True):
            span = Span(self.filename, result.span.line, result.span.column, right.span.end_line, right.span.end_column)
            result = BinOp(str(op), result, right, span)
        return result

    def arith(self, meta: Any, *children: Any) -> Expr:
        return self._binary_chain(meta, children)

    term = arith

    def power(self, meta: Any, base: Expr, exponent: Expr) -> BinOp:
        return BinOp("**", base, exponent, self._span(meta))

    def unary(self, meta: Any, op: Token, operand: Expr) -> UnaryOp:
        return UnaryOp(str(op), operand, self._span(meta))

    def call(self, meta: Any, func: Expr, arguments: tuple[list[Expr], list[Keyword]] | None) -> Call:
        args, keywords = arguments or ([], [])
        return Call(func, tuple(args), tuple(keywords), self._span(meta))

    def arguments(self, meta: Any, *items: Expr | Keyword | None) -> tuple[list[Expr], list[Keyword]]:
        args = [i for i in items if i is not None and not isinstance(i, Keyword)]
        keywords = [i for i in items if isinstance(i, Keyword)]
        return args, keywords

    def keyword(self, meta: Any, name: Token, value: Expr) -> Keyword:
        return Keyword(str(name), value, self._span(meta))

    def subscript(self, meta: Any, value: Expr, index: tuple[Expr, ...]) -> Subscript:
        return Subscript(value, index, self._span(meta))

    def subscripts(self, meta: Any, *items: Expr | None) -> tuple[Expr, ...]:
        return tuple(i for i in items if i is not None)

    def slice_(self, meta: Any, start: Expr | None, stop: Expr | None, step: Expr | None) -> SliceExpr:
        return SliceExpr(start, stop, step, self._span(meta))

    def attribute(self, meta: Any, value: Expr, attr: str) -> Attribute:
        return Attribute(value, attr, self._span(meta))

    def name(self, meta: Any, token: Token) -> Name:
        return Name(str(token), self._span(meta))

    def helper(self, meta: Any, name: Token, arguments: tuple[list[Expr], list[Keyword]] | None) -> HelperCall:
        args, keywords = arguments or ([], [])
        return HelperCall(str(name), tuple(args), tuple(keywords), self._span(meta))

    def int_(self, meta: Any, token: Token) -> Constant:
        return Constant(int(str(token), 0), self._span(meta))

    def float_(self, meta: Any, token: Token) -> Constant:
        return Constant(float(str(token)), self._span(meta))

    def string(self, meta: Any, token: Token) -> Constant:
        return Constant(_string_value(token), self._span(meta))

    def none(self, meta: Any) -> Constant:
        return Constant(None, self._span(meta))

    def true(self, meta: Any) -> Constant:
        return Constant(True, self._span(meta))

    def false(self, meta: Any) -> Constant:
        return Constant(False, self._span(meta))

    def ellipsis(self, meta: Any) -> EllipsisExpr:
        return EllipsisExpr(self._span(meta))

    def tuple_(self, meta: Any, *items: Expr | None) -> TupleExpr:
        return TupleExpr(tuple(i for i in items if i is not None), self._span(meta))

    def list_(self, meta: Any, *items: Expr | None) -> ListExpr:
        return ListExpr(tuple(i for i in items if i is not None), self._span(meta))


def to_syntax_tree(tree: Tree[Token], filename: str) -> File:
    return ToSyntaxTree(filename).transform(tree)
