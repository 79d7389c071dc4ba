"""An ``apply`` given user predicates is all or nothing to its end: an interrupt anywhere in the driver, or
where the predicates stop being in force (after the passes, before the commit), leaves the module as it was."""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType

import torch
import torch.fx

import fxrules
from fxrules.engine import driver
from fxrules.match import guards
from tests.engine.test_all_or_nothing import assert_unchanged, snapshot
from tests.interrupting import interrupt_at_every_line

#: a guard calling the user predicate ``is_one`` with a literal of the match
MUL_BY_ONE = fxrules.parse("rule mul_by_one:\n    torch.mul(x, c) => x where is_one(c)\n", "predicates.fxr")
PREDICATES = {"is_one": lambda c: c == 1}


def scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.mul(x, 1) + 2, torch.mul(x, 3)


def in_driver_or_guards(code: CodeType) -> bool:
    return code.co_filename in (driver.__file__, guards.__file__)


def test_the_predicate_decides_which_match_is_rewritten() -> None:
    gm = torch.fx.symbolic_trace(scaled)
    report = fxrules.apply(gm, MUL_BY_ONE, predicates=PREDICATES)
    assert report.counts() == {"mul_by_one": 1}
    assert [(n.target, n.args[1]) for n in gm.graph.find_nodes(op="call_function", target=torch.mul)] == [
        (torch.mul, 3)]


def test_an_interrupt_at_any_line_of_the_driver_or_the_guards_leaves_the_module_as_it_was() -> None:
    def expect(gm: torch.fx.GraphModule) -> Callable[[], None]:
        before = snapshot(gm)
        return lambda: assert_unchanged(before, gm)

    assert interrupt_at_every_line(lambda: torch.fx.symbolic_trace(scaled), MUL_BY_ONE, in_driver_or_guards,
                                   expect, PREDICATES) > 50
