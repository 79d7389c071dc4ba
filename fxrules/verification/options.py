"""verify's options, checked once for the Python API, the command line and the pytest plugin.

Each option has one meaning and one error text wherever it is given:
``max_examples`` (``--examples``), ``seed`` (``--seed``), ``max_side``
(``--max-side``), ``dtypes`` (``--dtypes``), ``database`` (``--database``),
``prove`` (``--no-prove``) and ``prove_timeout`` (``--prove-timeout``).
A bad value is an :class:`~fxrules.diagnostics.FxrUsageError`; the command
line and the plugin report the same text under the flag's name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs
import torch

from fxrules.diagnostics import FxrUsageError, did_you_mean
from fxrules.verification.strategies import DrawSettings

#: The seed of every run that names none: the same inputs on every run, so a verdict can be reproduced.
DEFAULT_SEED = 0
DEFAULT_EXAMPLES = 100
DEFAULT_MAX_SIDE = DrawSettings().max_side
#: The largest ``max_side``: a drawn tensor has up to five dims, so a side of 16 is already a million elements.
MAX_SIDE_LIMIT = 16
#: The dtypes ``dtypes`` may name, by the names it accepts (``torch.`` before each is allowed too).
DTYPES: Mapping[str, torch.dtype] = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
}

DtypesArgument = str | Iterable[str | torch.dtype] | None


@attrs.frozen
class VerifyOptions:
    """How each rule is verified: examples per rule, the hypothesis seed, what is drawn, the directory
    of hypothesis's example database (None: no database, and verify writes no file), whether each rule is
    given to the prover first (when z3 is installed), and its solver seconds per rule (None: prove's
    default)."""

    max_examples: int = DEFAULT_EXAMPLES
    seed: int = DEFAULT_SEED
    draws: DrawSettings = attrs.Factory(DrawSettings)
    database: Path | None = None
    prove: bool = True
    prove_timeout: float | None = None

    @classmethod
    def checked(cls, *, max_examples: object = DEFAULT_EXAMPLES, seed: object = DEFAULT_SEED,
                max_side: object = DEFAULT_MAX_SIDE, dtypes: DtypesArgument = None,
                database: str | os.PathLike[str] | None = None, prove: object = True,
                prove_timeout: object = None) -> VerifyOptions:
        """The options from the values a caller gave; ``seed=None`` is the default seed."""
        draws = DrawSettings(max_side=_whole("max_side", max_side, 1, MAX_SIDE_LIMIT),
                             dtypes=parse_dtypes(dtypes) if dtypes is not None else None)
        if not isinstance(prove, bool):
            raise FxrUsageError(f"prove must be True or False, got {prove!r}")
        return cls(_whole("max_examples", max_examples, 1), _whole("seed", DEFAULT_SEED if seed is None else seed),
                   draws, Path(database) if database is not None else None, prove,
                   None if prove_timeout is None else _seconds("prove_timeout", prove_timeout))


def whole_number_problem(value: object, low: int | None = None, high: int | None = None) -> str | None:
    """What is wrong with ``value`` as a whole number from ``low`` to ``high`` (either may be open), or None."""
    number = _as_int(value)
    if number is not None and (low is None or number >= low) and (high is None or number <= high):
        return None
    if low is not None and high is not None:
        wanted = f"a whole number from {low} to {high}"
    elif low is not None:
        wanted = f"a whole number of at least {low}"
    else:
        wanted = "a whole number"
    return f"must be {wanted}, got {value if isinstance(value, str) else repr(value)}"


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _whole(option: str, value: object, low: int | None = None, high: int | None = None) -> int:
    problem = whole_number_problem(value, low, high)
    if problem is not None:
        raise FxrUsageError(f"{option} {problem}")
    number = _as_int(value)
    assert number is not None  # whole_number_problem found none
    return number


def seconds_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a positive, finite number of seconds, or None."""
    if _as_seconds(value) is not None:
        return None
    return f"must be a positive number of seconds, got {value!r}"  # as prove's --timeout says it


def _as_seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds > 0 and not math.isinf(seconds) else None  # NaN is not > 0


def _seconds(option: str, value: object) -> float:
    seconds = _as_seconds(value)
    if seconds is None:
        raise FxrUsageError(f"{option} {seconds_problem(value)}")
    return seconds


def parse_dtypes(dtypes: str | Iterable[str | torch.dtype]) -> tuple[torch.dtype, ...]:
    """The dtypes named by ``dtypes``: a comma-separated string (``"float32,int64"``) or a sequence of names
    or ``torch.dtype`` objects; unknown names are an error with the closest known one."""
    items = [item.strip() for item in dtypes.split(",") if item.strip()] if isinstance(dtypes, str) else list(dtypes)
    known = ", ".join(DTYPES)
    parsed: list[torch.dtype] = []
    for item in items:
        if isinstance(item, torch.dtype) and item in DTYPES.values():
            parsed.append(item)
            continue
        name = item.removeprefix("torch.") if isinstance(item, str) else str(item)
        if name not in DTYPES:
            hint = did_you_mean(name, DTYPES) if isinstance(item, str) else None
            raise FxrUsageError(f"unknown dtype {str(item)!r}" + (f"; {hint}" if hint else "")
                                + f" (verify draws {known})")
        parsed.append(DTYPES[name])
    if not parsed:
        raise FxrUsageError(f"no dtype given; name at least one of {known}")
    return tuple(dict.fromkeys(parsed))
