"""The ``where:`` guard language, checked into guard IR at load time.

Guards are data, never Python code: :mod:`fxrules.match.guards` interprets
the IR built here over the values a match bound.  A guard may use literals,
bound names, ``and or not``, comparisons, arithmetic, indexing, the guard
functions of :data:`FUNCTION_NAMES`, user predicates (any other plain name
called: ``fits_tensor_cores(x, w)``; whether the caller supplies it is
checked by ``apply`` and ``verify``, which have the table), the tensor attributes ``.shape .ndim
.dtype .device`` and methods ``.numel() .size() .dim()`` (from shape
metadata), the plain data attributes of captured modules, and for ``Attr``
captures ``.target`` and the tensor attributes of their value.  Private and
dunder attributes are load errors.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import torch

from fxrules.diagnostics import DiagnosticSink, Span, did_you_mean
from fxrules.lang import syntax_tree as st
from fxrules.lang.binding import partly_bound_error
from fxrules.lang.ir import (
    Guard,
    GuardAttr,
    GuardBinary,
    GuardBool,
    GuardCall,
    GuardCompare,
    GuardConst,
    GuardExpr,
    GuardIndex,
    GuardName,
    GuardSeq,
    GuardUnary,
)

#: The functions a guard may call, by name; :mod:`fxrules.match.guards` implements each.
FUNCTION_NAMES = ("len", "all", "any", "min", "max", "abs", "list", "tuple", "inverse_permutation", "is_static",
                  "num_users", "broadcasts_to", "is_computed", "is_mutated")
BINARY_OPERATORS = frozenset({"+", "-", "*", "/", "//", "%", "**"})
TENSOR_METHODS = frozenset({"numel", "size", "dim"})
DTYPE_NAMES = {name for name in dir(torch) if isinstance(getattr(torch, name, None), torch.dtype)}


class GuardBuilder:
    """Checks a ``where`` clause and turns it into guard IR."""

    def __init__(self, sink: DiagnosticSink, bound: set[str], scope_resolver: Any,
                 partly_bound: Collection[str] = ()) -> None:
        self.sink = sink
        self.bound = bound
        self.partly_bound = partly_bound  # bound by some options of an ``A | B`` only
        self.scope_resolver = scope_resolver
        self.reads: set[str] = set()
        self.predicates: list[GuardCall] = []

    def build(self, conditions: tuple[st.Expr, ...]) -> Guard:
        built = tuple(self.expr(c) for c in conditions)
        return Guard(built, frozenset(self.reads), tuple(self.predicates))

    def fail(self, span: Span, message: str, hint: str | None = None) -> GuardConst:
        self.sink.error(span, message, hint)
        return GuardConst(False, span)

    def expr(self, node: st.Expr) -> GuardExpr:
        kind = type(node)
        handler = _HANDLERS.get(kind, _UNKNOWN)
        if handler is _UNKNOWN:  # the first handler whose class the node is an instance of, found once per class
            handler = _HANDLERS[kind] = next((h for cls, h in _HANDLED if isinstance(node, cls)), None)
        if handler is None:
            return self.fail(node.span, "this expression is not available in guards")
        return handler(self, node)  # type: ignore[no-any-return]

    def constant(self, node: st.Constant) -> GuardExpr:
        return GuardConst(node.value, node.span)

    def subscript(self, node: st.Subscript) -> GuardExpr:
        if len(node.index) != 1 or isinstance(node.index[0], st.SliceExpr):
            return self.fail(node.span, "a guard may index with one value, as in x.shape[0]")
        return GuardIndex(self.expr(node.value), self.expr(node.index[0]), node.span)

    def binary(self, node: st.BinOp) -> GuardExpr:
        if node.op not in BINARY_OPERATORS:
            return self.fail(node.span, f"operator '{node.op}' is not available in guards")
        return GuardBinary(node.op, self.expr(node.left), self.expr(node.right), node.span)

    def unary(self, node: st.UnaryOp) -> GuardExpr:
        return GuardUnary(node.op, self.expr(node.operand), node.span)

    def negation(self, node: st.Not) -> GuardExpr:
        return GuardUnary("not", self.expr(node.operand), node.span)

    def boolean(self, node: st.BoolOp) -> GuardExpr:
        return GuardBool(node.op, tuple(self.expr(v) for v in node.values), node.span)

    def compare(self, node: st.Compare) -> GuardExpr:
        return GuardCompare(self.expr(node.left), node.ops, tuple(self.expr(c) for c in node.comparators), node.span)

    def sequence(self, node: st.ListExpr | st.TupleExpr) -> GuardExpr:
        return GuardSeq(tuple(self.expr(i) for i in node.items), node.span, isinstance(node, st.TupleExpr))

    def name(self, node: st.Name) -> GuardExpr:
        if node.id in self.partly_bound:
            return self.fail(node.span, *partly_bound_error(node.id))
        if node.id in self.bound:
            self.reads.add(node.id)
            return GuardName(node.id, node.span)
        if node.id in DTYPE_NAMES:
            return GuardConst(getattr(torch, node.id), node.span)
        if node.id in {"nan", "inf"}:
            return GuardConst(float(node.id), node.span)
        return self.fail(node.span, f"the guard reads '{node.id}', which the pattern does not bind",
                         did_you_mean(node.id, self.bound))

    def attribute(self, node: st.Attribute) -> GuardExpr:
        parts = st.dotted_parts(node)
        if parts and parts[0] not in self.bound and self.scope_resolver.scope.namespace.is_root(parts[0]):
            value = self.scope_resolver.resolve_dotted(parts, node.span)
            return GuardConst(value, node.span)
        if node.attr.startswith("_"):
            return self.fail(node.span, f"'.{node.attr}': guards may not read private or dunder attributes")
        return GuardAttr(self.expr(node.value), node.attr, node.span)

    def call(self, node: st.Call) -> GuardExpr:
        args = tuple(self.expr(a) for a in node.args)
        if node.keywords:
            return self.fail(node.keywords[0].span, "guard functions take no keyword arguments")
        if isinstance(node.func, st.Name) and node.func.id in FUNCTION_NAMES:
            return GuardCall(node.func.id, args, node.span)
        if isinstance(node.func, st.Attribute) and node.func.attr in TENSOR_METHODS:
            return GuardCall(node.func.attr, args, node.span, receiver=self.expr(node.func.value))
        if isinstance(node.func, st.Name) and node.func.id not in self.bound:
            call = GuardCall(node.func.id, args, node.span, predicate=True)
            self.predicates.append(call)
            return call
        return self.fail(node.func.span, f"guards may call only {', '.join(FUNCTION_NAMES)} and the tensor methods "
                                         ".numel(), .size(), .dim()",
                         "a user predicate is called by its plain name, as in fits(x), and given to "
                         "apply(predicates=...)")


#: Which method builds each expression class, in the order they are tried; the rest are not guard expressions.
_HANDLED: tuple[tuple[type, Any], ...] = (
    (st.Constant, GuardBuilder.constant), (st.Name, GuardBuilder.name), (st.Attribute, GuardBuilder.attribute),
    (st.Call, GuardBuilder.call), (st.Subscript, GuardBuilder.subscript), (st.BinOp, GuardBuilder.binary),
    (st.UnaryOp, GuardBuilder.unary), (st.Not, GuardBuilder.negation), (st.BoolOp, GuardBuilder.boolean),
    (st.Compare, GuardBuilder.compare), (st.ListExpr, GuardBuilder.sequence), (st.TupleExpr, GuardBuilder.sequence),
)
_HANDLERS: dict[type, Any] = {}
_UNKNOWN = object()
