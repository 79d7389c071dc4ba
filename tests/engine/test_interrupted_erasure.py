"""Erasing dead nodes whose arguments nest nodes in lists, tuples, slices and dicts, use one node twice,
or are of a subclass of ``Node``: the commit leaves what FX's ``erase_node`` leaves, and an interrupt at
any line of the commit leaves the module as it was before ``apply``."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx

import fxrules
from tests.engine.test_all_or_nothing import assert_unchanged, snapshot
from tests.engine.test_interrupted_commit import run_commit_interrupted

#: Drops the relu and with it every node only the relu's operand needed.
RULES = fxrules.parse("rule drop_relu:\n    torch.relu(x) + y => y\n")


class _Marked(torch.fx.Node):
    """A subclass of ``Node``, as a pass may give nodes it makes."""


def _model(hooked: bool) -> tuple[torch.fx.GraphModule, list[str]]:
    """``relu(d) + tanh(x)`` where ``d`` is computed from ``x`` through nested arguments, which the rewrite kills."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    n0 = graph.call_function(torch.neg, (x,))
    n1 = graph.call_function(operator.add, (n0, n0))  # one node used twice by one user
    n2 = graph.call_function(operator.getitem, (n1, (slice(n0, None), Ellipsis)))
    n2.__class__ = _Marked
    n3 = graph.call_function(torch.stack, ([n1, n2],), {"dim": n0})
    d = graph.call_function(torch.cat, ({"a": [n1, (n2, slice(n0, n1, None))]},), {"dim": n3})
    graph.output(graph.call_function(operator.add, (graph.call_function(torch.relu, (d,)),
                                                                   graph.call_function(torch.tanh, (x,)))))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    heard: list[str] = []
    if hooked:
        gm._register_erase_node_hook(lambda node: heard.append(node.name))
    return gm, heard


@pytest.mark.parametrize("hooked", [False, True], ids=["without erase hooks", "with an erase hook"])
def test_an_interrupt_at_any_line_leaves_nested_arguments_and_users_as_they_were(hooked: bool) -> None:
    reference, _ = _model(hooked)
    lines = run_commit_interrupted(reference, RULES, None)
    assert "relu" not in reference.code and lines > 50
    for index in range(lines):
        gm, _ = _model(hooked)
        nodes = list(gm.graph.nodes)
        before = snapshot(gm), [(n.args, n.kwargs, list(n.users)) for n in nodes]
        with pytest.raises(KeyboardInterrupt):
            run_commit_interrupted(gm, RULES, index)
        assert_unchanged(before[0], gm)
        assert [(n.args, n.kwargs, list(n.users)) for n in nodes] == before[1], index
        assert len(gm.graph.nodes) == len(nodes) == len(list(gm.graph.nodes))
        fxrules.apply(gm, RULES)
        assert gm.code == reference.code, index


def test_nested_arguments_are_erased_as_fx_erases_them() -> None:
    """The same nodes erased, with None wherever a node was, every node's users and the node count, with
    FX's erase_node (a module with an erase hook) or without it."""
    states = []
    for hooked in (False, True):
        gm, heard = _model(hooked)
        nodes = list(gm.graph.nodes)
        fxrules.apply(gm, RULES)
        listed = set(gm.graph.nodes)
        states.append(([(n.name, n.args, dict(n.kwargs), n._erased) for n in nodes if n not in listed],
                       {n.name: [u.name for u in n.users] for n in nodes}, len(gm.graph.nodes), gm.code))
    assert states[0] == states[1]
    assert heard == ["add_1", "relu", "cat", "stack", "getitem", "add", "neg"]
    assert states[0][0][4] == ("cat", ({"a": [None, (None, slice(None, None, None))]},), {"dim": None}, True)
