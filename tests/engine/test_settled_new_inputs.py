"""Why the incremental scheduler need not note the nodes a rewrite gives a new input when it decides which
candidates of the next pass settled: a pass visits nodes in graph order, and every node a rewrite gives a
new input (a user of the rewritten node) comes after every node the pass has visited so far, and so does
every node it reaches through its users.  A change there happens before the pass looks at any candidate
whose match may contain it, so it never unsettles one."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.fx
from hypothesis import given, settings

import fxrules
from fxrules.engine.scheduler import Incremental, Plan, Scheduler
from fxrules.rewrite.rewriter import Rewrite
from tests.conftest import trace
from tests.engine.test_settled import COMMON, RULES, apply_both_ways
from tests.strategies import GeneratedGraph, graphs


class _Watched(Scheduler):
    """:class:`Incremental`, noting in graph order where each pass's visits and each rewrite's new inputs lie."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        self.inner = Incremental(plan)
        self.visited: list[torch.fx.Node] = []
        self.out_of_order: list[str] = []  # what broke the order: a visit, or a new input at or before a visit
        self.new_inputs = 0

    def start(self) -> bool:
        return self.inner.start()

    def visits(self) -> Iterator[torch.fx.Node]:
        for node in self.inner.visits():
            if self.visited and not self._position(self.visited[-1]) < self._position(node):
                self.out_of_order.append(f"visit of {node.name} after {self.visited[-1].name}")
            self.visited.append(node)
            yield node

    def rewritten(self, anchor: torch.fx.Node, change: Rewrite) -> None:
        order = {node: index for index, node in enumerate(self.plan.gm.graph.nodes)}
        last = max(order[node] for node in self.visited)
        for user, _ in change.redirected:
            self.new_inputs += 1
            if order[user] <= last:
                self.out_of_order.append(f"new input of {user.name} at the visit of {anchor.name}")
        self.inner.rewritten(anchor, change)

    def overlapped(self, anchor: torch.fx.Node) -> None:
        self.inner.overlapped(anchor)

    def next_pass(self) -> None:
        self.visited = []
        self.inner.next_pass()

    def passed_over(self) -> list[torch.fx.Node]:
        return self.inner.passed_over()

    def _position(self, node: torch.fx.Node) -> int:
        return list(self.plan.gm.graph.nodes).index(node)


def _watched(gm: torch.fx.GraphModule) -> _Watched:
    schedulers: list[_Watched] = []

    def make(plan: Plan) -> Scheduler:
        schedulers.append(_Watched(plan))
        return schedulers[-1]

    fxrules.apply(gm, RULES, scheduler=make)
    return schedulers[0]


@settings(max_examples=60, **COMMON)
@given(graph=graphs(dead_code=False))
def test_every_new_input_goes_to_a_node_after_every_node_the_pass_visited(graph: GeneratedGraph) -> None:
    assert _watched(graph.gm).out_of_order == []


def test_new_inputs_of_a_cascade_come_after_the_visits_and_settling_finds_what_visiting_everything_finds() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        first = torch.neg(n)  # double_neg waits: n is also used by `later`, until pass 1 rewrites that
        s = (torch.relu(y) + n) - n  # add_sub gives relu(s) a new input (relu(y)) ahead of the pass
        later = torch.relu(s)
        return first, later * 1, torch.relu(torch.relu(later))

    watched = _watched(trace(f))
    assert watched.new_inputs > 0 and watched.out_of_order == []
    settled, everything, _, _ = apply_both_ways(trace(f))
    assert settled == everything and settled["passes"] >= 2
