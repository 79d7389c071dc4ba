"""A later pass passes over its settled nodes only until it first fires: from then on it visits them, in graph
order, as visiting every anchor node in every pass does.

The graphs are chains of generated blocks.  A *delayed* block matches only in pass 2, early in the graph: its
``neg(neg(x))`` waits (escaping user) until pass 1 rewrites the other user of the inner ``neg`` further on.
The other blocks follow it and hold nodes pass 1 looked at after every change around them (pass 2's settled
candidates); in a *freed* block, such a node fires once a rewrite of pass 2 before it removes the users that
kept it from matching.  The blocks are wired to earlier blocks' values, so one block's rewrite may reach into
another.  The default scheduler must give the same code and the same report
(counts, anchors in order, skips, passes), with and without ``explain=True``.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxrules
from fxrules.engine.scheduler import Incremental, SchedulerFactory, VisitEverything
from tests.conftest import apply_outcome
from tests.engine.test_settled import RULES

Node = torch.fx.Node
Block = Callable[[torch.fx.Graph, Node, Node], list[Node]]


def _delayed(g: torch.fx.Graph, x: Node, y: Node) -> list[Node]:
    """double_neg at ``first`` waits for add_sub to rewrite ``s``; relu_after_relu then fires at ``later``."""
    n = g.call_function(torch.neg, (x,))
    first = g.call_function(torch.neg, (n,))
    s = g.call_function(operator.sub, (g.call_function(operator.add, (g.call_function(torch.relu, (y,)), n)), n))
    later = g.call_function(torch.relu, (s,))
    return [first, later, g.call_function(torch.relu, (g.call_function(torch.relu, (later,)),))]


def _freed_in_pass_2(g: torch.fx.Graph, z: Node, x: Node) -> list[Node]:
    """relu_after_relu at ``settled`` is refused in pass 1 (``y`` has other users) and looked at after every change
    around it: settled.  add_sub fires at ``s`` in pass 2 (pass 1 freed ``add`` by rewriting the dead ``t``), which
    leaves ``y`` to ``settled`` alone: pass 2 must visit it after that, and fire there."""
    y = g.call_function(torch.relu, (z,))
    add = g.call_function(operator.add, (x, y))
    s = g.call_function(operator.sub, (add, y))
    g.call_function(operator.sub, (g.call_function(operator.add, (y, add)), add))  # t: no user, rewritten in pass 1
    settled = g.call_function(torch.relu, (y,))
    return [g.call_function(torch.tanh, (s,)), g.call_function(torch.tanh, (settled,))]  # not x itself: no alias


def _relu_chain(g: torch.fx.Graph, x: Node, y: Node) -> list[Node]:
    return [g.call_function(torch.relu, (g.call_function(torch.relu, (x,)),))]


def _add_sub(g: torch.fx.Graph, x: Node, y: Node) -> list[Node]:
    return [g.call_function(operator.sub, (g.call_function(operator.add, (x, y)), y))]


def _neg_times_neg(g: torch.fx.Graph, x: Node, y: Node) -> list[Node]:
    product = g.call_function(operator.mul, (g.call_function(torch.neg, (x,)), g.call_function(torch.neg, (y,))))
    return [product, g.call_function(torch.relu, (product,))]


def _shared_neg(g: torch.fx.Graph, x: Node, y: Node) -> list[Node]:
    """A ``neg`` squared and used once more: neg_squared and double_neg are refused (escaping user) while it is."""
    n = g.call_function(torch.neg, (x,))
    return [g.call_function(operator.mul, (n, n)), g.call_function(torch.neg, (n,))]


def _near_miss(g: torch.fx.Graph, x: Node, y: Node) -> list[Node]:
    """Anchors no rule fires at: a ``relu`` of a ``tanh``, a ``sub`` of another value."""
    return [g.call_function(torch.relu, (g.call_function(torch.tanh, (x,)),)), g.call_function(operator.sub, (x, y))]


_BLOCKS: list[Block] = [_freed_in_pass_2, _relu_chain, _add_sub, _neg_times_neg, _shared_neg, _near_miss]


@st.composite
def _chains(draw: st.DrawFn) -> torch.fx.GraphModule:
    """One or two delayed blocks first, then two to eight other blocks, each fed by earlier values."""
    graph = torch.fx.Graph()
    values: list[Node] = [graph.placeholder("x"), graph.placeholder("y")]
    blocks = [_delayed] * draw(st.integers(1, 2)) + draw(st.lists(st.sampled_from(_BLOCKS), min_size=2, max_size=8))
    for block in blocks:
        x, y = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        values += block(graph, x, y)
    sinks = [v for v in values[2:] if not v.users]
    graph.output(tuple(sinks))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _outcome(gm: torch.fx.GraphModule, scheduler: SchedulerFactory, **options: Any) -> dict[str, Any]:
    copied = copy.deepcopy(gm)
    report = fxrules.apply(copied, RULES, scheduler=scheduler, **options)
    return apply_outcome(copied, report)


_SETTINGS = settings(max_examples=80, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_a_settled_node_a_rewrite_of_pass_2_frees_fires_in_pass_2() -> None:
    graph = torch.fx.Graph()
    z, x = graph.placeholder("z"), graph.placeholder("x")
    graph.output(tuple(_freed_in_pass_2(graph, z, x)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    outcome = _outcome(gm, Incremental)
    assert outcome == _outcome(gm, VisitEverything)
    fired = {name: (count, anchors) for name, count, anchors, *_ in outcome["rules"] if count}
    assert fired == {"add_sub": (2, ["sub_1", "sub"]), "relu_after_relu": (1, ["relu_1"])}
    assert outcome["passes"] == 3  # pass 2 fired at sub, then at relu_1 (settled until then); pass 3 found nothing


@_SETTINGS
@given(_chains())
def test_a_pass_that_fires_early_visits_the_settled_nodes_after_it(gm: torch.fx.GraphModule) -> None:
    assert _outcome(gm, Incremental) == _outcome(gm, VisitEverything)


@settings(_SETTINGS, max_examples=30)
@given(_chains())
def test_a_pass_that_fires_early_explains_what_visiting_everything_explains(gm: torch.fx.GraphModule) -> None:
    assert _outcome(gm, Incremental, explain=True) == _outcome(gm, VisitEverything, explain=True)
