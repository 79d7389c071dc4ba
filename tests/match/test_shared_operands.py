"""Narrowing by an operand call finds the same nodes whether the operands have few users or many.

When there are no more operand candidates than nodes to narrow, a node stays a candidate exactly when one of
the operands is among its inputs (anywhere in its arguments or keywords): with operands that have a few users
each, and with operands shared by many nodes (a value used all over the graph), for which the nodes' inputs
are read instead of the operands' users.
"""

from __future__ import annotations

import pytest
import torch
import torch.fx

import fxrules
from fxrules.match.compiled import compile_rule
from fxrules.match.narrowing import Candidates

RULE = """
rule contiguous_twice:
    x.contiguous().contiguous() => x.contiguous()
"""


def _graph(other_users: int) -> torch.fx.Graph:
    """Inner ``contiguous`` calls, each used by two outer ones (one with it inside a list, one as a keyword)
    and by ``other_users`` negations; and ``contiguous`` calls of a placeholder, which use no inner call."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    outputs = []
    for _ in range(3):
        inner = graph.call_method("contiguous", (x,))
        outputs += [graph.call_function(torch.neg, (inner,)) for _ in range(other_users)]
        outputs.append(graph.call_method("contiguous", (inner,)))
        outputs.append(graph.call_method("contiguous", ([inner, x],)))
        outputs.append(graph.call_method("contiguous", (x,), {"memory_format": inner}))
    graph.output(tuple(outputs))
    return graph


@pytest.mark.parametrize("other_users", [0, 40])
def test_candidates_are_the_nodes_with_an_operand_among_their_inputs(other_users: int) -> None:
    """The contiguous calls left are those with an input that calls contiguous, however many users it has."""
    graph = _graph(other_users)
    rule = fxrules.parse(RULE).rules[0]
    calls = graph.find_nodes(op="call_method", target="contiguous")
    expected = {n for n in calls if any(i.op == "call_method" for i in n.all_input_nodes)}
    found = compile_rule(rule).candidates(Candidates(graph), None)
    assert found is not None and set(found) == expected
