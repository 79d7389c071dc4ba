"""Waking by a literal: a rewrite that replaces a value by a literal gives its users that literal, and with rules
two operations deep the anchor one use edge after such a user may match now.  The pass that made the match
fires there, as visiting every anchor node in every pass does; a node given a node input wakes no user further
on (its users' tests read no deeper than the user itself)."""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable

import torch
import torch.fx

import fxrules
from fxrules.engine.scheduler import Incremental, SchedulerFactory, VisitEverything

#: ``keep_first`` replaces ``torch.mul(3, y)`` by the literal 3; ``relu_of_sub_three`` is two operations deep and
#: needs that literal in its ``sub``: narrowing leaves every ``relu`` out until ``keep_first`` fires.
RULES = """
rule keep_first:
    torch.mul(x, _) => x

rule relu_of_sub_three:
    torch.relu(torch.sub(t, 3)) => torch.relu(t)
"""


def _graph(build: Callable[[torch.fx.Graph, torch.fx.Node, torch.fx.Node], torch.fx.Node]) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    y, z = graph.placeholder("y"), graph.placeholder("z")
    graph.output(build(graph, y, z))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _applied(gm: torch.fx.GraphModule, scheduler: SchedulerFactory) -> tuple[fxrules.Report, str]:
    copied = copy.deepcopy(gm)
    report = fxrules.apply(copied, fxrules.parse(RULES), scheduler=scheduler)
    return report, copied.code


def _both(gm: torch.fx.GraphModule) -> tuple[fxrules.Report, str]:
    report, code = _applied(gm, Incremental)
    reference, reference_code = _applied(gm, VisitEverything)
    assert report.counts() == reference.counts()
    assert [r.anchors for r in report.rules] == [r.anchors for r in reference.rules]
    assert report.passes == reference.passes
    assert code == reference_code
    return report, code


def test_a_literal_given_to_an_operand_wakes_the_anchor_one_use_edge_after_it() -> None:
    # relu(z - mul(3, y)): keep_first gives the sub the literal 3, and the relu after it fires in the same pass
    gm = _graph(lambda g, y, z: g.call_function(torch.relu, (g.call_function(torch.sub, (z, g.call_function(
        torch.mul, (3, y)))),)))
    report, code = _both(gm)
    assert report.counts() == {"keep_first": 1, "relu_of_sub_three": 1}
    assert report.passes == 2  # both fired in pass 1; pass 2 found nothing
    assert report["relu_of_sub_three"].attempts == 1  # woken once, not a candidate as pass 1 started
    assert "torch.relu(z)" in code and "sub" not in code


def test_a_literal_reaching_several_users_wakes_each_anchor_after_them() -> None:
    # the literal 3 replaces a value used by two subs (one through a keyword) and an add, each with a relu after it
    def build(g: torch.fx.Graph, y: torch.fx.Node, z: torch.fx.Node) -> torch.fx.Node:
        three = g.call_function(torch.mul, (3, y))
        first = g.call_function(torch.relu, (g.call_function(torch.sub, (z, three)),))
        second = g.call_function(torch.relu, (g.call_function(torch.sub, (y,), {"other": three}),))
        third = g.call_function(torch.relu, (g.call_function(operator.add, (z, three)),))
        return g.call_function(operator.add, (g.call_function(operator.add, (first, second)), third))

    report, _ = _both(_graph(build))
    assert report.counts() == {"keep_first": 1, "relu_of_sub_three": 2}
    assert report.passes == 2


def test_a_node_given_a_node_input_leaves_the_anchor_after_it_out() -> None:
    # keep_first gives the sub the node y: no relu after it may match, and none is visited in pass 1
    gm = _graph(lambda g, y, z: g.call_function(torch.relu, (g.call_function(torch.sub, (z, g.call_function(
        torch.mul, (y, 3)))),)))
    report, code = _both(gm)
    assert report.counts() == {"keep_first": 1}
    assert report["relu_of_sub_three"].attempts == 0
    assert "torch.sub(z, y)" in code
