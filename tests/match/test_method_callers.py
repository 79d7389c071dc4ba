"""Rules anchored at method calls, and patterns whose operands are method calls, find every node that calls the
method however many method names the rule set asks for (the graph's index does not key methods by name: the
nodes of a few names are found one name at a time, of more by grouping every method call once)."""

from __future__ import annotations

import copy
import operator

import pytest
import torch
import torch.fx

import fxrules
from fxrules.engine.scheduler import VisitEverything

#: Five method names, each both the anchor and the operand of its rule.
RULES = [
    "rule contiguous_twice:\n    x.contiguous().contiguous() => x.contiguous()\n",
    "rule relu_twice:\n    x.relu().relu() => x.relu()\n",
    "rule neg_twice:\n    x.neg().neg() => x\n",
    "rule abs_twice:\n    x.abs().abs() => x.abs()\n",
    "rule exp_of_log:\n    x.log().exp() => x\n",
]

_TWICE = ("contiguous", "relu", "neg", "abs")


def _methods(rounds: int) -> torch.fx.GraphModule:
    """``rounds`` times: each of the rules' method pairs, interleaved with single calls that no rule matches
    (each name once, after a ``tanh``); every result plus one returned."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    results = []
    for _ in range(rounds):
        for name in _TWICE:
            single = graph.call_method(name, (graph.call_method("tanh", (x,)),))
            results += [graph.call_method(name, (graph.call_method(name, (x,)),)), single]
        results.append(graph.call_method("exp", (graph.call_method("log", (x,)),)))
    graph.output(tuple(graph.call_function(operator.add, (r, 1)) for r in results))  # not x itself: no alias
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("names", [1, 2, 3, 5])
def test_every_method_call_of_every_name_asked_for_is_found(names: int) -> None:
    rules = fxrules.parse("\n".join(RULES[:names]))
    gm = _methods(3)
    reference = copy.deepcopy(gm)
    report = fxrules.apply(gm, rules)
    expected = {rule.name: 3 for rule in rules}
    assert report.counts() == expected
    assert fxrules.apply(reference, rules, scheduler=VisitEverything).counts() == expected
    assert gm.code == reference.code
    x = torch.rand(4).abs() + 0.5
    assert all(torch.allclose(a, b) for a, b in zip(gm(x), reference(x), strict=True))
