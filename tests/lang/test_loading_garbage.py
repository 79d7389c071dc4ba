"""Loading rule files leaves the program's garbage collection working: the cycles a program makes
between loads are still freed by the automatic collections, without calling ``gc.collect()``."""

from __future__ import annotations

import gc
import weakref

import fxrules

_TEXT = "rule r: torch.neg(torch.neg(x)) => x\n"


class _Cycle:
    """An object that refers to itself: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _unfreed_cycles(loads: int) -> int:
    """How many of ``loads`` garbage cycles, one made before each ``fxrules.parse``, are still alive."""
    refs = []
    for _ in range(loads):
        cycle = _Cycle()
        refs.append(weakref.ref(cycle))
        del cycle
        fxrules.parse(_TEXT)
    return sum(ref() is not None for ref in refs)


def test_cycles_made_between_loads_are_freed_by_automatic_collections() -> None:
    """A program that loads rules in a loop (a server, a test suite) does not accumulate its garbage
    cycles: the young collections that run between loads free most of them, as without fxrules."""
    gc.collect()
    assert gc.isenabled() and not gc.get_freeze_count()
    loads = 2000
    assert _unfreed_cycles(loads) < loads // 2
    gc.collect()


def test_garbage_made_by_repeated_loads_does_not_pile_up_in_the_oldest_generation() -> None:
    """Repeated loads of rule texts leave the oldest generation about as large as one load does: what a
    load made and dropped is collected automatically, not kept until an explicit ``gc.collect()``."""
    gc.collect()
    fxrules.parse(_TEXT)
    gc.collect()
    before = len(gc.get_objects(generation=2))
    for number in range(1000):
        fxrules.parse(f"rule r{number}: torch.neg(torch.neg(x)) => x\n")
    grown = len(gc.get_objects(generation=2)) - before
    freed = gc.collect()
    assert grown < 20_000 and freed < 5_000, (grown, freed)
