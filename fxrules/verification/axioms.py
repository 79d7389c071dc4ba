"""Transcendental functions in proofs: uninterpreted functions with the axioms torch's CPU kernels satisfy.

``exp``, ``tanh``, ``sigmoid`` ... have no exact model in the solver's floating-point theory.  Each call is
an *application*: a fresh result the solver may choose, tied to the other applications only by the axioms
below, each of which holds bit-exactly for torch's kernels (``tests/verify/test_prove_axioms.py`` checks
them on real tensors: every ``float16`` and ``bfloat16`` value, and samples of ``float32`` and
``float64`` with their special values).  Nothing else is assumed: not ``exp(a + b) == exp(a) * exp(b)``,
not ``sigmoid(x) == 1 / (1 + exp(-x))``, not ``tanh(-x) == -tanh(x)``.

* Determinism.  A CPU kernel computes an element with a vectorized loop, or with the scalar function for
  the tail of the loop and for strided operands; the two differ on some values for several functions
  (``sigmoid`` on ``float32``).  So two applications to equal values are equal when the function is
  path-free for that dtype (checked on every value), and otherwise only when they run on the same kernel
  path, which the solver chooses per computation: the same computation (the same operations on the same
  captures, hence the same tensor and layout) takes the same path.
* ``f(nan)`` is NaN, for every function here.
* Bounds: a result that is not NaN lies within the bounds a function's formula guarantees after rounding
  (``exp >= 0``, ``0 <= sigmoid <= 1``, ``-1 <= tanh <= 1``, ``sqrt >= 0`` with ``sqrt(-0.0) == -0.0``).
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from typing import Any

import attrs
import torch

#: The modeled functions (by operation name) and the bounds of their results that are not NaN.
TRANSCENDENTALS: Mapping[str, tuple[float, float] | None] = {
    "exp": (0.0, math.inf), "exp2": (0.0, math.inf), "sqrt": (0.0, math.inf), "sigmoid": (0.0, 1.0),
    "tanh": (-1.0, 1.0),
    **dict.fromkeys(("expm1", "log", "log2", "log10", "log1p", "rsqrt", "erf", "erfc", "sin", "cos", "tan",
                     "atan", "sinh", "cosh", "asin", "acos", "asinh", "silu", "mish")),
}
#: (function, dtype) whose vectorized and scalar kernels agree on every value (checked on all of them).
PATH_FREE: frozenset[tuple[str, torch.dtype]] = frozenset(
    (name, dtype) for dtype in (torch.float16, torch.bfloat16) for name in TRANSCENDENTALS
    if (name, dtype) not in {("rsqrt", torch.float16), ("rsqrt", torch.bfloat16), ("mish", torch.float16),
                             ("sinh", torch.bfloat16), ("cosh", torch.bfloat16)})


@attrs.frozen
class Application:
    """One call of a function: its argument and result terms, the kernel path it ran on (None where the
    function is path-free), and the computation of its argument (equal computations, equal results)."""

    function: str
    dtype: torch.dtype
    argument: Any
    result: Any
    path: Any
    computation: str


class Applications:
    """The applications of one configuration's two sides, and the axioms that tie them."""

    def __init__(self, z3: types.ModuleType) -> None:
        self.z3 = z3
        self.calls: list[Application] = []
        self.paths: dict[tuple[str, torch.dtype, str], Any] = {}

    def apply(self, function: str, dtype: torch.dtype, argument: Any, sort: Any, computation: str) -> Any:
        """The result of ``function`` on ``argument`` (a term of ``dtype``, computed by ``computation``)."""
        for call in self.calls:
            if (call.function, call.dtype, call.computation) == (function, dtype, computation):
                return call.result
        name = f"{function}.{str(dtype).removeprefix('torch.')}"
        result = self.z3.Const(f"{name}.{len(self.calls)}", sort)
        path = None
        if (function, dtype) not in PATH_FREE:
            key = (function, dtype, computation)
            path = self.paths.setdefault(key, self.z3.BitVec(f"{name}.path.{len(self.paths)}", 8))
        self.calls.append(Application(function, dtype, argument, result, path, computation))
        return result

    def axioms(self, constant: Any) -> tuple[list[Any], set[str]]:
        """The constraints on the results, and the names of the axioms they state; ``constant(value,
        dtype)`` converts a bound to a term."""
        z3 = self.z3
        constraints: list[Any] = []
        names: set[str] = set()
        for index, call in enumerate(self.calls):
            label = f"torch.{call.function}"
            names.add(f"determinism of {label}")
            for other in self.calls[:index]:
                if (other.function, other.dtype) == (call.function, call.dtype):
                    same = [other.argument == call.argument]
                    if call.path is not None:
                        same.append(other.path == call.path)
                    constraints.append(z3.Implies(z3.And(*same), other.result == call.result))
            constraints.append(z3.Implies(z3.fpIsNaN(call.argument), z3.fpIsNaN(call.result)))
            names.add(f"{label}(nan) is nan")
            bounds = TRANSCENDENTALS[call.function]
            if bounds is not None:
                low, high = (constant(bound, call.dtype) for bound in bounds)
                constraints.append(z3.Or(z3.fpIsNaN(call.result),
                                         z3.And(z3.fpLEQ(low, call.result), z3.fpLEQ(call.result, high))))
                names.add(f"{label} within [{_show(bounds[0])}, {_show(bounds[1])}]")
        return constraints, names


def _show(bound: float) -> str:
    return "inf" if bound == math.inf else f"{bound:g}"
