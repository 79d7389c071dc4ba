"""An ``apply`` that fails leaves every node's users in their order, including the other inputs of a node a
rewrite gave a new input: undoing the redirection must not move that node to the end of their users."""

from __future__ import annotations

import pytest
import torch
import torch.fx

import fxrules
from fxrules.diagnostics import FxrConvergenceError
from tests.engine.test_all_or_nothing import assert_unchanged, snapshot

#: ``neg_twice`` redirects ``add`` from the double negation to ``x``; ``grows`` keeps firing, so apply fails.
RULES = fxrules.parse("""
rule neg_twice:
    torch.neg(torch.neg(x)) => x

rule grows:
    torch.sin(torch.cos(x)) => torch.sin(torch.cos(torch.neg(torch.neg(x))))
""", "rollback.fxr")


def program(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    added = torch.add(torch.neg(torch.neg(x)), y)  # y's first user, redirected away from the negations
    return added, torch.mul(y, 2.0), torch.sub(y, 1.0), torch.sin(torch.cos(x))


def test_a_failed_apply_keeps_the_user_order_of_a_redirected_nodes_other_inputs() -> None:
    """``y``'s users stay ``[add, mul, sub]`` after the failed apply, not ``[mul, sub, add]``; nothing else of
    the module changes either."""
    gm = torch.fx.symbolic_trace(program)
    before = snapshot(gm)
    with pytest.raises(FxrConvergenceError):
        fxrules.apply(gm, RULES, max_passes=3)
    y = next(iter(gm.graph.find_nodes(op="placeholder", target="y")))
    assert [user.name for user in y.users] == ["add", "mul", "sub"]
    assert_unchanged(before, gm)
