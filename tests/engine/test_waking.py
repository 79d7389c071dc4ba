"""Waking: a rewrite that gives a node ahead of the pass a new input makes the pass visit the anchors it may have
made matchable, in that same pass, as visiting every anchor node in every pass does.

* The node given the new input is woken, and its users up to ``depth - 2`` use edges after it (a node input)
  or ``depth - 1`` (a literal input): the pass that made the match fires there, and one more pass finds
  nothing, as with ``scheduler=VisitEverything``.
* The same rewrites, counts, skips and attempts as ``VisitEverything``, however far from the anchor the new
  input lands.
"""

from __future__ import annotations

import copy
import operator

import torch
import torch.fx

import fxrules
from fxrules.engine.scheduler import Incremental, SchedulerFactory, VisitEverything

#: ``triple`` is three operations deep; ``mul_one`` may give its ``tanh`` the ``neg`` it needs.
DEEP_RULES = """
rule mul_one:
    x * 1 => x

rule triple:
    torch.relu(torch.tanh(torch.neg(y))) => torch.exp(y)
"""


def _chain(*targets: object) -> torch.fx.GraphModule:
    """``x`` through ``targets`` in order (``1``: multiplied by 1), the last one's value returned."""
    graph = torch.fx.Graph()
    value = graph.placeholder("x")
    for target in targets:
        value = graph.call_function(operator.mul, (value, 1)) if target == 1 else graph.call_function(target, (value,))
    graph.output(value)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _applied(gm: torch.fx.GraphModule, scheduler: SchedulerFactory) -> tuple[fxrules.Report, str]:
    copied = copy.deepcopy(gm)
    report = fxrules.apply(copied, fxrules.parse(DEEP_RULES), scheduler=scheduler)
    return report, copied.code


def test_a_new_operand_wakes_the_anchor_one_use_edge_after_it_in_the_same_pass() -> None:
    # relu(tanh(neg(x) * 1)): pass 1 leaves relu out (its tanh has no neg operand) until mul_one gives tanh
    # the neg; relu, one use edge after tanh, is the anchor that may match now, and fires in pass 1
    gm = _chain(torch.neg, 1, torch.tanh, torch.relu)
    report, code = _applied(gm, Incremental)
    reference, reference_code = _applied(gm, VisitEverything)
    assert report.counts() == reference.counts() == {"mul_one": 1, "triple": 1}
    assert report.passes == reference.passes == 2  # both fired in pass 1, pass 2 found nothing
    assert code == reference_code
    assert "relu" not in code and "neg" not in code and "torch.exp(x)" in code


def test_a_new_operand_too_far_from_any_anchor_wakes_nothing_it_need_not() -> None:
    # relu(abs(tanh(neg(x) * 1))): the neg lands two use edges before the relu, out of triple's reach
    gm = _chain(torch.neg, 1, torch.tanh, torch.abs, torch.relu)
    report, code = _applied(gm, Incremental)
    reference, reference_code = _applied(gm, VisitEverything)
    assert report.counts() == reference.counts() == {"mul_one": 1}
    assert report.passes == reference.passes == 2
    assert report["triple"].attempts == 0 < reference["triple"].attempts  # narrowed out, never woken
    assert code == reference_code
