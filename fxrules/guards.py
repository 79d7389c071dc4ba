"""The ``where:`` guard language: checked into IR at load time, interpreted at match time.

Guards are data, never Python code: a small interpreter walks the guard IR
over the values a match bound.  It allows literals, bound names, ``and or
not``, comparisons, arithmetic, indexing, ``len/all/any/min/max/abs``, the
tensor attributes ``.shape .ndim .dtype .device`` and methods ``.numel()
.size() .dim()`` (from shape metadata), the plain data attributes of
captured modules (read statically: no property, method or ``__getattr__`` of
the module runs), and for ``Attr`` captures ``.target`` and the tensor
attributes of their value.  Private and dunder attributes are load errors.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch

from fxrules import syntax_tree as st
from fxrules.bounds import LiteralTooLarge, bounded
from fxrules.diagnostics import DiagnosticSink, Span, did_you_mean
from fxrules.ir import (
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
from fxrules.metadata import MissingMetadata, TensorInfo, UnknownTensor
from fxrules.sizes import DynamicSize, dynamic_size, is_size_error


def inverse_permutation(permutation: Any) -> list[int]:
    """The permutation that undoes ``permutation`` (negative dims count from the end)."""
    size = len(permutation)
    inverse = [0] * size
    for position, dim in enumerate(permutation):
        inverse[dim % size] = position
    return inverse


def broadcasts_to(shape: Any, target: Any) -> bool:
    """True when a tensor of ``shape`` broadcasts to ``target`` without making it larger."""
    if len(shape) > len(target):
        return False
    return all(_broadcasts(size, other) for size, other in zip(reversed(shape), reversed(target), strict=False))


def _broadcasts(size: Any, other: Any) -> bool:
    """Whether a dim of ``size`` broadcasts to one of ``other``, asking first what is known for every size: a
    plain 1 broadcasts to anything, a symbolic dim equals itself, but whether it is 1 depends on the size."""
    return size in (1, other) if isinstance(size, int) else size in (other, 1)


def is_static(value: Any) -> bool:
    """True when every dim of a tensor's shape is known: a plain int, or a symbol the graph fixes.  A dim the
    graph leaves symbolic makes the guard depend on a size (skip reason ``dynamic size``), unless the caller
    asked for static shapes."""
    return all(isinstance(int(size), int) for size in read_attribute(value, "shape"))


def is_computed(value: Any) -> bool:
    """True when a captured value is made by an operation of the graph (not an input or an attribute)."""
    computed = getattr(value, "computed", None)
    if computed is None:
        raise GuardError("is_computed() needs a value of the graph")
    return bool(computed)


def is_mutated(value: Any) -> bool:
    """True when a user of the captured value changes it in place (``c.add_(1)``, ``c[i] = v``)."""
    mutated = getattr(value, "mutated", None)
    if mutated is None:
        raise GuardError("is_mutated() needs a value of the graph")
    return bool(mutated)


def num_users(value: Any) -> int:
    """How many graph nodes use a captured value."""
    users = getattr(value, "users", None)
    if users is None:
        raise GuardError("num_users() needs a value of the graph")
    return int(users)


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "len": len, "all": all, "any": any, "min": min, "max": max, "abs": abs, "list": list, "tuple": tuple,
    "inverse_permutation": inverse_permutation, "is_static": is_static, "num_users": num_users,
    "broadcasts_to": broadcasts_to, "is_computed": is_computed, "is_mutated": is_mutated,
}
TENSOR_METHODS = frozenset({"numel", "size", "dim"})
DTYPE_NAMES = {name for name in dir(torch) if isinstance(getattr(torch, name, None), torch.dtype)}

def _bounded(function: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``function`` within the literal bound of :mod:`fxrules.bounds`: guards compute with shapes and sizes,
    and a result beyond it is a guard error, not minutes of big-integer arithmetic (``10 ** 10 ** 10``)."""

    def within_bound(left: Any, right: Any) -> Any:
        try:
            return bounded(function, left, right)
        except LiteralTooLarge as error:
            raise GuardError(f"{error}: too large for a guard") from None

    return within_bound


BINARY: Mapping[str, Callable[[Any, Any], Any]] = {
    symbol: _bounded(function) for symbol, function in {
        "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
        "//": operator.floordiv, "%": operator.mod, "**": operator.pow}.items()
}
COMPARE: Mapping[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "is": operator.is_, "is not": operator.is_not, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}


class GuardError(Exception):
    """A guard could not be evaluated on this match (e.g. an index out of range): no match."""


class GuardBuilder:
    """Checks a ``where`` clause and turns it into guard IR."""

    def __init__(self, sink: DiagnosticSink, bound: set[str], scope_resolver: Any) -> None:
        self.sink = sink
        self.bound = bound
        self.scope_resolver = scope_resolver
        self.reads: set[str] = set()

    def build(self, conditions: tuple[st.Expr, ...]) -> Guard:
        return Guard(tuple(self.expr(c) for c in conditions), frozenset(self.reads))

    def fail(self, span: Span, message: str, hint: str | None = None) -> GuardConst:
        self.sink.error(span, message, hint)
        return GuardConst(False, span)

    def expr(self, node: st.Expr) -> GuardExpr:
        if isinstance(node, st.Constant):
            return GuardConst(node.value, node.span)
        if isinstance(node, st.Name):
            return self.name(node)
        if isinstance(node, st.Attribute):
            return self.attribute(node)
        if isinstance(node, st.Call):
            return self.call(node)
        if isinstance(node, st.Subscript):
            if len(node.index) != 1 or isinstance(node.index[0], st.SliceExpr):
                return self.fail(node.span, "a guard may index with one value, as in x.shape[0]")
            return GuardIndex(self.expr(node.value), self.expr(node.index[0]), node.span)
        if isinstance(node, st.BinOp):
            if node.op not in BINARY:
                return self.fail(node.span, f"operator '{node.op}' is not available in guards")
            return GuardBinary(node.op, self.expr(node.left), self.expr(node.right), node.span)
        if isinstance(node, st.UnaryOp):
            return GuardUnary(node.op, self.expr(node.operand), node.span)
        if isinstance(node, st.Not):
            return GuardUnary("not", self.expr(node.operand), node.span)
        if isinstance(node, st.BoolOp):
            return GuardBool(node.op, tuple(self.expr(v) for v in node.values), node.span)
        if isinstance(node, st.Compare):
            return GuardCompare(self.expr(node.left), node.ops, tuple(self.expr(c) for c in node.comparators),
                                node.span)
        if isinstance(node, st.ListExpr | st.TupleExpr):
            return GuardSeq(tuple(self.expr(i) for i in node.items), node.span, isinstance(node, st.TupleExpr))
        return self.fail(node.span, "this expression is not available in guards")

    def name(self, node: st.Name) -> GuardExpr:
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
        if isinstance(node.func, st.Name) and node.func.id in FUNCTIONS:
            return GuardCall(node.func.id, args, node.span)
        if isinstance(node.func, st.Attribute) and node.func.attr in TENSOR_METHODS:
            return GuardCall(node.func.attr, args, node.span, receiver=self.expr(node.func.value))
        return self.fail(node.func.span, f"guards may call only {', '.join(FUNCTIONS)} and the tensor methods "
                                         ".numel(), .size(), .dim()")


# ---------------------------------------------------------------- evaluation


def holds(guard: Guard, lookup: Callable[[str], Any]) -> bool:
    """True when every condition of ``guard`` holds.

    ``lookup(name)`` returns a bound value (a :class:`TensorInfo` for tensors).
    Raises :class:`GuardError` for a guard that fails to evaluate,
    :class:`MissingMetadata` when a tensor attribute is unknown and
    :class:`~fxrules.sizes.DynamicSize` when the answer depends on a size the
    graph leaves symbolic.
    """
    return all(evaluate(condition, lookup, truth=True) for condition in guard.conditions)


def evaluate(expr: GuardExpr, lookup: Callable[[str], Any], truth: bool = False) -> Any:
    """The value of ``expr`` (with ``truth``, its truth: for a symbolic size, that is a question too)."""
    try:
        value = _evaluate(expr, lookup)
        return bool(value) if truth else value
    except (GuardError, MissingMetadata, DynamicSize):
        raise
    except Exception as error:
        if is_size_error(error):
            raise dynamic_size(error, f"{expr.span}: the guard") from None
        raise GuardError(f"{expr.span}: {type(error).__name__}: {error}") from error


def _evaluate(expr: GuardExpr, lookup: Callable[[str], Any]) -> Any:
    if isinstance(expr, GuardConst):
        return expr.value
    if isinstance(expr, GuardName):
        return lookup(expr.name)
    if isinstance(expr, GuardBool):
        if expr.op == "and":
            return all(_evaluate(v, lookup) for v in expr.values)
        return any(_evaluate(v, lookup) for v in expr.values)
    if isinstance(expr, GuardUnary):
        value = _evaluate(expr.operand, lookup)
        return {"not": operator.not_, "-": operator.neg, "+": operator.pos}[expr.op](value)
    if isinstance(expr, GuardBinary):
        return BINARY[expr.op](_evaluate(expr.left, lookup), _evaluate(expr.right, lookup))
    if isinstance(expr, GuardCompare):
        left = _evaluate(expr.left, lookup)
        for op, comparator in zip(expr.ops, expr.comparators, strict=True):
            right = _evaluate(comparator, lookup)
            if not COMPARE[op](left, right):
                return False
            left = right
        return True
    if isinstance(expr, GuardIndex):
        return _evaluate(expr.value, lookup)[_evaluate(expr.index, lookup)]
    if isinstance(expr, GuardSeq):
        items = [_evaluate(i, lookup) for i in expr.items]
        return tuple(items) if expr.is_tuple else items
    if isinstance(expr, GuardAttr):
        return read_attribute(_evaluate(expr.value, lookup), expr.attr)
    assert isinstance(expr, GuardCall)
    args = [_evaluate(a, lookup) for a in expr.args]
    if expr.receiver is None:
        return FUNCTIONS[expr.func](*args)
    receiver = _evaluate(expr.receiver, lookup)
    if isinstance(receiver, UnknownTensor):
        receiver.attribute(expr.func)  # raises MissingMetadata
    if not isinstance(receiver, TensorInfo | torch.Tensor):
        raise GuardError(f"{expr.span}: .{expr.func}() needs a tensor, got {type(receiver).__name__}")
    return getattr(receiver, expr.func)(*args)


TENSOR_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "requires_grad", "is_floating_point"})
DTYPE_ATTRIBUTES = frozenset({"is_floating_point", "is_complex", "is_signed", "itemsize"})


def read_attribute(value: Any, attr: str) -> Any:
    """The read-only attribute reads a guard may do, by the kind of value."""
    if isinstance(value, TensorInfo | UnknownTensor):
        return value.attribute(attr)
    if isinstance(value, torch.Tensor) and attr in TENSOR_ATTRIBUTES:
        return getattr(value, attr)
    if isinstance(value, torch.dtype) and attr in DTYPE_ATTRIBUTES:
        return getattr(value, attr)
    if isinstance(value, torch.nn.Module):
        return read_module_attribute(value, attr)
    if hasattr(value, "guard_attributes") and attr in value.guard_attributes:
        return getattr(value, attr)
    raise GuardError(f"a guard cannot read '.{attr}' of {type(value).__name__}")


#: What a guard may read from a captured module: plain data, tensors, and submodules (``m.conv.groups``).
MODULE_DATA = (bool, int, float, complex, str, type(None), torch.dtype, torch.device, torch.layout,
               torch.memory_format, torch.Tensor, torch.nn.Module)
_ABSENT = object()


def read_module_attribute(module: torch.nn.Module, attr: str) -> Any:
    """``module.attr`` read without running any code of the module: its parameters, buffers and submodules,
    its instance ``__dict__``, or a plain class attribute, never a property, method or ``__getattr__``.

    A captured module is the user's object: a property of its class could do anything, and ``nn.Module``'s
    own ``__getattr__`` is Python code too.  Only plain data comes back; anything else is a :class:`GuardError`.
    """
    value = _static_module_attribute(module, attr)
    if value is _ABSENT:
        raise GuardError(f"'{type(module).__name__}' has no attribute '{attr}'")
    if not _is_module_data(value):
        kind = "a property" if isinstance(value, property) else (
            "a method" if callable(value) else f"a {type(value).__name__}")
        raise GuardError(f"'{type(module).__name__}.{attr}' is {kind}; guards read plain data attributes only "
                         "(numbers, bools, strings, None, tuples of them, tensors, submodules)")
    return value


def module_parameter(module: torch.nn.Module, attr: str, default: Any) -> Any:
    """A family parameter held by a module (``nn.Softmax.dim``), read as a guard reads it: ``default`` when the
    module has no such attribute or it is a method; :class:`GuardError` when it is a property or other code."""
    value = _static_module_attribute(module, attr)
    if value is _ABSENT or (callable(value) and not _is_module_data(value)
                            and not isinstance(value, property | staticmethod | classmethod)):
        return default
    return read_module_attribute(module, attr)


def _static_module_attribute(module: torch.nn.Module, attr: str) -> Any:
    state = vars(module)
    for store in ("_parameters", "_buffers", "_modules"):
        entries = state.get(store)
        if isinstance(entries, dict) and attr in entries:
            return entries[attr]
    if attr in state:
        return state[attr]
    return inspect.getattr_static(type(module), attr, _ABSENT)


def _is_module_data(value: Any) -> bool:
    if isinstance(value, tuple | list):
        return all(_is_module_data(item) for item in value)
    return isinstance(value, MODULE_DATA)
