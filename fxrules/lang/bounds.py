"""How large a value fxrules computes from a rule's literals may be: one bound for every place it folds.

A rule file is data from a stranger, and Python's arithmetic is unbounded: ``10 ** 10 ** 10`` or
``1 << 10 ** 10`` is minutes of big-integer work that no signal interrupts, and a replacement that
squares a captured literal doubles its size at every pass.  Literal arithmetic is folded at load time
(the resolver checks a pattern's or replacement's literal operations), at apply time (the rewriter
computes ``c * c`` from the literals a match bound) and in guards; each goes through :func:`bounded`.
"""

from __future__ import annotations

import math
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


def bounded(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, refused with :class:`LiteralTooLarge` when the result would be over the
    bound.

    Powers, shifts, repetitions and the ``math`` functions whose integer results grow without bound
    (``factorial``, ``comb``, ``perm``, ``prod``, ``lcm``) are estimated before they are computed (computing
    them is the cost); any other result is checked after, since its operands were within the bound.
    """
    problem = _too_large_to_compute(function, args, kwargs)
    if problem is None:
        try:
            result = function(*args, **kwargs)
        except OverflowError:  # a float beyond float64 (2.0 ** 100000): over the bound, not a failing rule
            raise LiteralTooLarge(f"{_call(function, args, kwargs)} overflows a float") from None
        problem = _too_large(result, lambda: f"{_call(function, args, kwargs)} is")
        if problem is None:
            return result
    raise LiteralTooLarge(problem)


def _too_large_to_compute(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    bits = _math_bits(function, args, kwargs)
    if bits is not None and bits > MAX_INT_BITS:
        return f"{_call(function, args, kwargs)} would have more than {MAX_INT_BITS} bits"
    if len(args) != 2:
        return None
    left, right = args
    if function in (operator.mod, operator.imod) and isinstance(left, str | bytes):
        # '%0999999999d' % 1: a width or precision may be any size, and the result is only known once made.
        return f"{_call(function, args, kwargs)}: string formatting is not computed in rule files"
    integers = _is_int(left) and _is_int(right)
    if function is operator.pow and integers and right > 0 and (abs(left).bit_length() - 1) * right > MAX_INT_BITS:
        return f"{_call(function, args, kwargs)} would have more than {MAX_INT_BITS} bits"
    if function is operator.lshift and integers and right > 0 and abs(left).bit_length() + right > MAX_INT_BITS:
        return f"{_call(function, args, kwargs)} would have more than {MAX_INT_BITS} bits"
    if function in (operator.mul, operator.imul):
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, _SEQUENCES) and _is_int(count) and _items(sequence) * count > MAX_LENGTH:
                return f"repeating a sequence {count} times would make more than {MAX_LENGTH} items"
    return None


def _math_bits(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
    """About how many bits the integer result of a growing ``math`` function has (None: another function, or
    arguments it will refuse itself)."""
    if function is math.factorial and len(args) == 1 and _is_int(args[0]) and args[0] >= 0:
        return _falling_bits(args[0], args[0])
    if function is math.perm and args and all(_is_int(a) or a is None for a in args):
        n, k = args[0], args[1] if len(args) > 1 and args[1] is not None else args[0]
        return _falling_bits(n, k) if 0 <= k <= n else None
    if function is math.comb and len(args) == 2 and all(_is_int(a) for a in args) and 0 <= args[1] <= args[0]:
        n, k = args[0], min(args[1], args[0] - args[1])
        return _falling_bits(n, k) - _falling_bits(k, k)
    if function is math.lcm:
        lcm_bits: int = sum(abs(a).bit_length() for a in args if _is_int(a))
        return lcm_bits
    if function is math.prod and len(args) == 1 and isinstance(args[0], _SEQUENCES):
        factors = [*args[0], kwargs.get("start", 1)]
        prod_bits: int = sum(abs(f).bit_length() for f in factors if _is_int(f))
        return prod_bits
    return None


def _falling_bits(n: int, k: int) -> float:
    """About log2 of n * (n - 1) * ... * (n - k + 1): exact enough where floats hold n, else an upper bound."""
    if n.bit_length() <= 53:
        return (math.lgamma(n + 1) - math.lgamma(n - k + 1)) / math.log(2)
    return k * n.bit_length()


def _too_large(value: Any, described: Callable[[], str]) -> str | None:
    if _is_int(value) and value.bit_length() > MAX_INT_BITS:
        return f"{described()} an integer of {value.bit_length()} bits (the bound is {MAX_INT_BITS})"
    if isinstance(value, _SEQUENCES) and len(value) > MAX_LENGTH:
        return f"{described()} {len(value)} items long (the bound is {MAX_LENGTH})"
    if isinstance(value, _SEQUENCES) and _items(value) > MAX_LENGTH:
        return f"{described()} more than {MAX_LENGTH} items long, nested ones included (the bound is {MAX_LENGTH})"
    return None


def _items(value: Any, seen: dict[int, int] | None = None) -> int:
    """How many items ``value`` holds, nested ones included and a list repeated by reference counted at each
    place (``[[0] * 65536] * 65536`` costs nothing to build, but 2 ** 32 steps to compare); counting stops a
    little over the bound, and each distinct list is walked once."""
    if isinstance(value, str | bytes):
        return len(value)
    if not isinstance(value, list | tuple):
        return 0
    seen = {} if seen is None else seen
    if id(value) not in seen:
        total = 0
        for item in value:
            total += 1 + _items(item, seen)
            if total > MAX_LENGTH:
                break
        seen[id(value)] = total
    return seen[id(value)]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _call(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> str:
    """``10 ** 10000000000``: the operation as written, each operand shortened to a readable length."""
    symbol = _SYMBOLS.get(function)
    shown = [_short(a) for a in args]
    if symbol is not None and len(shown) == 2 and not kwargs:
        return f"{shown[0]} {symbol} {shown[1]}"
    shown += [f"{name}={_short(value)}" for name, value in (kwargs or {}).items()]
    prefix = "math." if getattr(function, "__module__", None) == "math" else ""
    return f"{prefix}{getattr(function, '__name__', function)}({', '.join(shown)})"


def _short(value: Any, limit: int = 40) -> str:
    if _is_int(value) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    if isinstance(value, list | tuple) and value:  # item by item: the repr of a long list is the cost
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
        shown = _short(value[0], limit)
        for item in value[1:]:
            text = _short(item, limit)
            if len(shown) + len(text) + 2 > limit:
                return f"{opening}{shown}, ...{closing}"
            shown += f", {text}"
        return f"{opening}{shown}{',' if len(value) == 1 and closing == ')' else ''}{closing}"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


_SYMBOLS: dict[Callable[..., Any], str] = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
    operator.mod: "%", operator.pow: "**", operator.lshift: "<<", operator.rshift: ">>", operator.matmul: "@",
}
