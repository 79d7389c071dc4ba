"""The scheduler seam of ``apply``: what the pass loop asks a scheduler and tells it, and that a scheduler
given as ``apply(..., scheduler=...)`` decides which nodes each pass visits, and nothing else."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import ClassVar

import pytest
import torch
import torch.fx

import fxrules
from fxrules.engine.scheduler import Incremental, Plan, Scheduler, VisitEverything
from fxrules.rewrite.rewriter import Rewrite
from tests.conftest import apply_outcome, trace

RULES = fxrules.parse("""
rule double_neg:
    torch.neg(torch.neg(x)) => x

rule relu_sigmoid:
    torch.relu(x) => torch.sigmoid(x)

rule neg_sigmoid:
    torch.neg(torch.sigmoid(x)) => torch.tanh(x)
""")


def cascade(x: torch.Tensor) -> torch.Tensor:
    # pass 1: relu_sigmoid at relu, then neg_sigmoid overlaps its new sigmoid; pass 2: neg_sigmoid fires
    return torch.neg(torch.relu(torch.neg(torch.neg(x))))


class Recording(VisitEverything):
    """Visits what :class:`VisitEverything` visits, and writes down what the loop asks and tells."""

    log: ClassVar[list[tuple[str, ...]]] = []

    def start(self) -> bool:
        self.log.append(("start",))
        return super().start()

    def visits(self) -> Iterator[torch.fx.Node]:
        self.log.append(("visits",))
        return super().visits()

    def rewritten(self, anchor: torch.fx.Node, change: Rewrite) -> None:
        self.log.append(("rewritten", anchor.name, *(n.name for n in change.created)))

    def overlapped(self, anchor: torch.fx.Node) -> None:
        self.log.append(("overlapped", anchor.name))

    def next_pass(self) -> None:
        self.log.append(("next_pass",))
        super().next_pass()


def test_the_loop_asks_for_each_pass_and_tells_each_rewrite_and_overlap() -> None:
    Recording.log = []
    report = fxrules.apply(trace(cascade), RULES, scheduler=Recording)
    assert report.counts() == {"double_neg": 1, "relu_sigmoid": 1, "neg_sigmoid": 1}
    assert Recording.log == [
        ("start",), ("visits",),
        ("rewritten", "neg_1"), ("rewritten", "relu", "sigmoid"), ("overlapped", "neg_2"),
        ("next_pass",), ("visits",),
        ("rewritten", "neg_2", "tanh"),
        ("next_pass",), ("visits",),  # the pass that finds the fixpoint
    ]


class Nowhere(Scheduler):
    """Visits no node: no rule can fire."""

    def start(self) -> bool:
        return False

    def visits(self) -> Iterator[torch.fx.Node]:
        raise AssertionError("a run whose scheduler found nothing to visit has no pass to run")

    def next_pass(self) -> None:
        raise AssertionError("no pass fired")


def test_a_scheduler_that_visits_nothing_leaves_the_graph_alone() -> None:
    gm = trace(cascade)
    graph, code = gm.graph, gm.code
    report = fxrules.apply(gm, RULES, scheduler=Nowhere)
    assert report.counts() == {} and report.passes == 1
    assert gm.graph is graph and gm.code == code


def test_a_scheduler_may_be_any_callable_from_a_plan() -> None:
    made: list[Plan] = []

    def factory(plan: Plan) -> Scheduler:
        made.append(plan)
        return VisitEverything(plan)

    gm = trace(cascade)
    fxrules.apply(gm, RULES, scheduler=factory)
    assert [plan.gm for plan in made] == [gm]
    assert made[0].reach.depth == 2 and not made[0].reach.multi_output


@pytest.mark.parametrize("explain", [False, True])
def test_the_incremental_scheduler_finds_what_visiting_everything_finds(explain: bool) -> None:
    gm = trace(cascade)
    everything = copy.deepcopy(gm)
    report = fxrules.apply(gm, RULES, explain=explain)
    report_all = fxrules.apply(everything, RULES, explain=explain, scheduler=VisitEverything)
    assert apply_outcome(gm, report) == apply_outcome(everything, report_all)


def test_the_incremental_scheduler_is_the_default() -> None:
    gm = trace(cascade)
    default = copy.deepcopy(gm)
    report = fxrules.apply(gm, RULES, scheduler=Incremental)
    assert [r.attempts for r in report.rules] == [r.attempts for r in fxrules.apply(default, RULES).rules]
    assert gm.code == default.code


def test_a_scheduler_that_is_not_callable_is_a_usage_error() -> None:
    gm = trace(cascade)
    with pytest.raises(fxrules.FxrUsageError, match=r"^scheduler must be a Scheduler class .* got 'everything'$"):
        fxrules.apply(gm, RULES, scheduler="everything")  # type: ignore[arg-type]
