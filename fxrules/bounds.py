"""How large a value fxrules computes from a rule's literals may be: one bound for every place it folds.

A rule file is data from a stranger, and Python's arithmetic is unbounded: ``10 ** 10 ** 10`` or
``1 << 10 ** 10`` is minutes of big-integer work that no signal interrupts, and a replacement that
squares a captured literal doubles its size at every pass.  Literal arithmetic is folded at load time
(the resolver checks a pattern's or replacement's literal operations), at apply time (the rewriter
computes ``c * c`` from the literals a match bound) and in guards; each goes through :func:`bounded`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

#: The largest integer a fold may make, in bits (a size is far smaller; 4096 bits is 1233 decimal digits).
MAX_INT_BITS = 4096
#: The most items a string, list or tuple a fold makes may hold, the items of nested ones included.
MAX_LENGTH = 1 << 16

_SEQUENCES = (str, bytes, list, tuple)


class LiteralTooLarge(ValueError):  # noqa: N818 - read as "the literal is too large"
    """A fold whose result would exceed :data:`MAX_INT_BITS` or :data:`MAX_LENGTH`."""


def bounded(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, refused with :class:`LiteralTooLarge` when the result would be over the bound.

    Powers, shifts and repetitions are estimated before they are computed (computing them is the
    cost); any other result is checked after, since its operands were within the bound.
    """
    problem = _too_large_to_compute(function, args)
    if problem is None:
        try:
            result = function(*args)
        except OverflowError:  # a float beyond float64 (2.0 ** 100000): over the bound, not a failing rule
            raise LiteralTooLarge(f"{_call(function, args)} overflows a float") from None
        problem = _too_large(result, lambda: f"{_call(function, args)} is")
        if problem is None:
            return result
    raise LiteralTooLarge(problem)


def _too_large_to_compute(function: Callable[..., Any], args: tuple[Any, ...]) -> str | None:
    if len(args) != 2:
        return None
    left, right = args
    integers = _is_int(left) and _is_int(right)
    if function is operator.pow and integers and right > 0 and (abs(left).bit_length() - 1) * right > MAX_INT_BITS:
        return f"{_call(function, args)} would have more than {MAX_INT_BITS} bits"
    if function is operator.lshift and integers and right > 0 and abs(left).bit_length() + right > MAX_INT_BITS:
        return f"{_call(function, args)} would have more than {MAX_INT_BITS} bits"
    if function in (operator.mul, operator.imul):
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, _SEQUENCES) and _is_int(count) and _items(sequence, {}) * count > MAX_LENGTH:
                return f"repeating a sequence {count} times would make more than {MAX_LENGTH} items"
    return None


def _too_large(value: Any, described: Callable[[], str]) -> str | None:
    if _is_int(value) and value.bit_length() > MAX_INT_BITS:
        return f"{described()} an integer of {value.bit_length()} bits (the bound is {MAX_INT_BITS})"
    if isinstance(value, _SEQUENCES) and (items := _items(value, {})) > MAX_LENGTH:
        return f"{described()} {items} items long (the bound is {MAX_LENGTH})"
    return None


def _items(value: Any, counted: dict[int, int]) -> int:
    """How many items ``value`` holds, a nested sequence's counted each time it appears: ``[[0] * 60000] * 60000``
    is one small list in memory, but comparing, printing or converting it walks 3.6 billion items.  Each
    distinct sequence is counted once (``counted``, by identity), so counting is as cheap as the memory."""
    if isinstance(value, str | bytes):
        return len(value)
    if not isinstance(value, list | tuple):
        return 0
    known = counted.get(id(value))
    if known is None:
        known = counted[id(value)] = len(value) + sum(_items(item, counted) for item in value)
    return known


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _call(function: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """``10 ** 10000000000``: the operation as written, each operand shortened to a readable length."""
    symbol = _SYMBOLS.get(function)
    shown = [_short(a) for a in args]
    if symbol is not None and len(shown) == 2:
        return f"{shown[0]} {symbol} {shown[1]}"
    return f"{getattr(function, '__name__', function)}({', '.join(shown)})"


def _short(value: Any) -> str:
    if _is_int(value) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


_SYMBOLS: dict[Callable[..., Any], str] = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
    operator.mod: "%", operator.pow: "**", operator.lshift: "<<", operator.rshift: ">>", operator.matmul: "@",
}
