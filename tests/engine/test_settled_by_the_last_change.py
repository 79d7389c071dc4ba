"""A candidate of the next pass settles only if the pass looked at it after the LAST change within its reach:
a node changed both before and after the pass looked at the candidate is judged by the later change, and
the next pass visits the candidate and fires there, as an engine that visits every node does."""

from __future__ import annotations

import copy

import torch

import fxrules
from fxrules.engine.scheduler import VisitEverything
from tests.conftest import apply_outcome, trace

RULES = fxrules.parse("""
rule double_neg:
    torch.neg(torch.neg(x)) => x

rule add_zero:
    x + 0 => x

rule mul_one:
    x * 1 => x
""", filename="last_change.fxr")


def changed_before_and_after_its_visit(x: torch.Tensor) -> torch.Tensor:
    r = torch.relu(x)
    a = r + 0  # add_zero fires first: n is given the new input r (n changes before outer is looked at)
    n = torch.neg(a)
    outer = torch.neg(n)  # double_neg refused in pass 1: n escapes, used by the dead `_ = n * 1`
    _ = n * 1  # mul_one fires after outer was looked at: n loses that user (n changes again, later)
    return outer


def test_a_candidate_changed_again_after_its_visit_is_visited_by_the_next_pass() -> None:
    gm = trace(changed_before_and_after_its_visit)
    everything = copy.deepcopy(gm)
    report = fxrules.apply(gm, RULES)
    report_all = fxrules.apply(everything, RULES, scheduler=VisitEverything)
    assert apply_outcome(gm, report) == apply_outcome(everything, report_all)
    assert report.passes == 3  # the third finds nothing more
    assert report.counts() == {"add_zero": 1, "mul_one": 1, "double_neg": 1}
    assert "torch.neg" not in gm.code
    x = torch.randn(5)
    assert torch.equal(gm(x), torch.relu(x))
