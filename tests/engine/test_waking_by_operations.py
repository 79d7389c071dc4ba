"""Waking by the operation of the new input: whether a node given as a new input may make a node ahead a
candidate depends on what it calls, so every node of one operation wakes alike, however many rewrites give one,
and a node of another operation is judged on its own.

* Chains whose ``x * 1`` gives ``tanh`` a ``neg`` each wake their ``relu``, the anchor of a rule that needs
  ``relu(tanh(neg(...)))``, in the pass that rewrote them; chains that give it a ``sigmoid`` wake nothing,
  wherever they come among the others.
* The same rewrites, passes and skips as ``VisitEverything``.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable

import torch
import torch.fx

import fxrules
from fxrules.engine.scheduler import Incremental, SchedulerFactory, VisitEverything
from tests.conftest import apply_outcome

RULES = """
rule mul_one:
    x * 1 => x

rule triple:
    torch.relu(torch.tanh(torch.neg(y))) => torch.exp(y)
"""


def _chains(*firsts: Callable[..., torch.Tensor]) -> torch.fx.GraphModule:
    """One chain ``relu(tanh(first(x) * 1))`` per function in ``firsts``, all returned."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    ends = []
    for first in firsts:
        value = graph.call_function(operator.mul, (graph.call_function(first, (x,)), 1))
        ends.append(graph.call_function(torch.relu, (graph.call_function(torch.tanh, (value,)),)))
    graph.output(tuple(ends))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _applied(gm: torch.fx.GraphModule, scheduler: SchedulerFactory) -> tuple[fxrules.Report, torch.fx.GraphModule]:
    copied = copy.deepcopy(gm)
    return fxrules.apply(copied, fxrules.parse(RULES), scheduler=scheduler), copied


def test_each_new_input_of_a_needed_operation_wakes_its_anchor_and_others_wake_none() -> None:
    gm = _chains(torch.neg, torch.sigmoid, torch.neg, torch.sigmoid, torch.neg)
    report, rewritten = _applied(gm, Incremental)
    reference, rewritten_all = _applied(gm, VisitEverything)
    assert apply_outcome(rewritten, report) == apply_outcome(rewritten_all, reference)
    assert report.counts() == {"mul_one": 5, "triple": 3}
    assert report.passes == 2  # each neg chain fired in pass 1: its relu was woken there
    # woken: the relu of each neg chain, once; the relu of a sigmoid chain is never a candidate
    assert report["triple"].attempts == 3


def test_a_refused_operation_first_does_not_keep_a_needed_one_from_waking() -> None:
    gm = _chains(torch.sigmoid, torch.sigmoid, torch.neg)
    report, rewritten = _applied(gm, Incremental)
    reference, rewritten_all = _applied(gm, VisitEverything)
    assert apply_outcome(rewritten, report) == apply_outcome(rewritten_all, reference)
    assert report.counts() == {"mul_one": 3, "triple": 1}
    assert report.passes == 2
    assert report["triple"].attempts == 1
