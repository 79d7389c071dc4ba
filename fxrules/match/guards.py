"""Evaluating ``where:`` guards on the values a match bound.

The guard IR was checked at load time (:mod:`fxrules.lang.guards`); here a
small interpreter walks it.  Tensors are read through their shape metadata,
modules through :mod:`fxrules.graph.module_data` (no code of theirs runs),
and every arithmetic result stays within the literal bound of
:mod:`fxrules.lang.bounds`.

User predicates (``apply(predicates={"name": fn})``) are looked up in the
table :func:`using_predicates` puts in scope for one ``apply`` or ``verify``:
a context variable, so the matcher, which evaluates guards deep inside a
pass, needs no new argument, and two threads applying with different tables
do not see each other's.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from fxrules.diagnostics import FxrUsageError, did_you_mean
from fxrules.graph.metadata import MissingMetadata, TensorInfo, UnknownTensor
from fxrules.graph.module_data import UnreadableAttribute, read_module_attribute
from fxrules.graph.sizes import DynamicSize, dynamic_size, is_size_error
from fxrules.lang.bounds import LiteralTooLarge, bounded
from fxrules.lang.guards import BINARY_OPERATORS, FUNCTION_NAMES
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
    Rule,
)

Predicates = Mapping[str, Callable[..., bool]]


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


_IMPLEMENTATIONS: Mapping[str, Callable[..., Any]] = {
    "len": len, "all": all, "any": any, "min": min, "max": max, "abs": abs, "list": list, "tuple": tuple,
    "inverse_permutation": inverse_permutation, "is_static": is_static, "num_users": num_users,
    "broadcasts_to": broadcasts_to, "is_computed": is_computed, "is_mutated": is_mutated,
}
#: Every function the language names, implemented (a name without an implementation fails at import).
FUNCTIONS: Mapping[str, Callable[..., Any]] = {name: _IMPLEMENTATIONS[name] for name in FUNCTION_NAMES}


def _bounded(function: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``function`` within the literal bound of :mod:`fxrules.lang.bounds`: guards compute with shapes and sizes,
    and a result beyond it is a guard error, not minutes of big-integer arithmetic (``10 ** 10 ** 10``)."""

    def within_bound(left: Any, right: Any) -> Any:
        try:
            return bounded(function, left, right)
        except LiteralTooLarge as error:
            raise GuardError(f"{error}: too large for a guard") from None

    return within_bound


_BINARY_FUNCTIONS: Mapping[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
}
BINARY: Mapping[str, Callable[[Any, Any], Any]] = {
    symbol: _bounded(_BINARY_FUNCTIONS[symbol]) for symbol in BINARY_OPERATORS
}
COMPARE: Mapping[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "is": operator.is_, "is not": operator.is_not, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}


class GuardError(Exception):
    """A guard could not be evaluated on this match (e.g. an index out of range): no match."""


_PREDICATES: contextvars.ContextVar[Predicates] = contextvars.ContextVar(
    "fxrules_predicates", default=types.MappingProxyType({}))


@contextlib.contextmanager
def using_predicates(predicates: Predicates) -> Iterator[None]:
    """Guards evaluated inside the block call the user predicates of ``predicates`` (by name)."""
    token = _PREDICATES.set(predicates)
    try:
        yield
    finally:
        _PREDICATES.reset(token)


def predicate_table(predicates: Predicates | None) -> dict[str, Callable[..., bool]]:
    """``predicates`` as given to ``apply`` or ``verify``, checked: names that a guard can call, callables."""
    table = dict(predicates or {})
    for name, function in table.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise FxrUsageError(f"predicates= maps names to functions; {name!r} is not a name a guard can call")
        if name in FUNCTION_NAMES:
            raise FxrUsageError(f"predicate '{name}' has the name of a guard function, which a guard calls instead")
        if not callable(function):
            raise FxrUsageError(f"predicate '{name}' is not callable: {type(function).__name__}")
    return table


def unknown_predicate(rules: Iterable[Rule], predicates: Predicates) -> str | None:
    """What to say about the first predicate call of ``rules`` that ``predicates`` does not define, or None."""
    for rule in rules:
        for call in rule.guard.predicates if rule.guard is not None else ():
            if call.func not in predicates:
                hint = did_you_mean(call.func, [*predicates, *FUNCTION_NAMES])
                known = f"given predicates are {', '.join(sorted(predicates))}" if predicates else "none were given"
                return (f"{call.span}: rule {rule.name} calls unknown predicate '{call.func}'"
                        f"{f'; {hint}' if hint else ''} ({known}; pass them with predicates={{...}})")
    return None


def _call_predicate(call: GuardCall, args: list[Any]) -> bool:
    result = _PREDICATES.get()[call.func](*args)
    if isinstance(result, torch.SymBool):  # of a symbolic size: bool() asks, and may say it depends on the size
        return bool(result)
    if not isinstance(result, bool):
        raise GuardError(f"{call.span}: predicate '{call.func}' returned {type(result).__name__}, not a bool")
    return result


def holds(guard: Guard, lookup: Callable[[str], Any]) -> bool:
    """True when every condition of ``guard`` holds.

    ``lookup(name)`` returns a bound value (a :class:`TensorInfo` for tensors).
    Raises :class:`GuardError` for a guard that fails to evaluate,
    :class:`MissingMetadata` when a tensor attribute is unknown and
    :class:`~fxrules.graph.sizes.DynamicSize` when the answer depends on a size the
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
        unary: dict[str, Callable[[Any], Any]] = {"not": operator.not_, "-": operator.neg, "+": operator.pos}
        return unary[expr.op](value)
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
    if expr.predicate:
        return _call_predicate(expr, args)
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
        try:
            return read_module_attribute(value, attr)
        except UnreadableAttribute as error:
            raise GuardError(str(error)) from None
    if hasattr(value, "guard_attributes") and attr in value.guard_attributes:
        return getattr(value, attr)
    raise GuardError(f"a guard cannot read '.{attr}' of {type(value).__name__}")
