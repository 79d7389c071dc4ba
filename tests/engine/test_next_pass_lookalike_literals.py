"""The next pass's candidates are narrowed from its region as pass 1's were from the graph, not taken from what
pass 1 woke: a node pass 1 never visited is tried in pass 2 when narrowing lets it through.

* ``ge_self`` gives ``neg * ge(neg, neg)`` the literal ``True``.  Pass 1 does not wake the ``mul`` for
  ``mul_one`` (``True`` is not the literal ``1`` the rule needs), but narrowing, which finds literals by set
  lookups, cannot tell ``True`` from ``1``: the ``mul``, one use edge after ``neg`` (which lost a user), is a
  candidate of pass 2 and is tried there once (nothing fires), as visiting everything finds.
"""

from __future__ import annotations

import copy
import operator

import torch
import torch.fx

import fxrules
from fxrules.engine.scheduler import Incremental, VisitEverything
from tests.conftest import apply_outcome

RULES = """
rule mul_one:
    x * 1 => x

rule neg_neg:
    torch.neg(torch.neg(x)) => x

rule ge_self:
    torch.ge(x, x) => True
"""


def _graph(other_users: int) -> torch.fx.GraphModule:
    """``neg(x) * ge(neg(x), neg(x))``, and ``other_users`` more users of ``neg(x)`` (a region too big to test
    node by node: it is narrowed)."""
    graph = torch.fx.Graph()
    negated = graph.call_function(torch.neg, (graph.placeholder("x"),))
    product = graph.call_function(operator.mul, (negated, graph.call_function(torch.ge, (negated, negated))))
    graph.output((product, *(graph.call_function(torch.relu, (negated,)) for _ in range(other_users))))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_node_given_a_lookalike_literal_is_tried_in_the_next_pass() -> None:
    gm = _graph(12)
    rewritten, rewritten_all = copy.deepcopy(gm), copy.deepcopy(gm)
    report = fxrules.apply(rewritten, fxrules.parse(RULES), scheduler=Incremental)
    reference = fxrules.apply(rewritten_all, fxrules.parse(RULES), scheduler=VisitEverything)
    assert apply_outcome(rewritten, report) == apply_outcome(rewritten_all, reference)
    assert report.counts() == {"ge_self": 1} and report.passes == 2
    assert "neg * True" in rewritten.code
    assert report["mul_one"].attempts == 1  # pass 2 only: pass 1 left the mul out and did not wake it
