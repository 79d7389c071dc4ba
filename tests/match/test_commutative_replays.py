"""How many match steps a commutative operation's other operand order costs when it cannot match, pinned where it
decides the outcome: the budget.

A swapped order whose first operand is not even a call of the operation it must match fails at once; the step
of trying it is counted all the same, with or without ``explain=True`` (which runs every order it tries).  A
pattern of a 143-level chain of commutative ``+`` over a 6-level stack of alternatives, under a false guard,
takes exactly 1,000 steps at its anchor below one ``neg`` (the budget, so the guard is what refuses it) and
1,001 below two (one past it: ``budget``).  A step too few or too many on any of the 143 swapped orders moves
one of the two outcomes.
"""

from __future__ import annotations

import operator

import pytest
import torch

import fxrules

CHAIN = 143  # commutative additions, each with a swapped order certain to fail
STACK = 6  # levels of ``(a * 2) | (2 * a)`` below them: 2 ** 6 structural matches at the base

BUDGET_DETAIL = ("gave up after 1000 match steps at this node: the pattern's alternatives and commutative operand "
                 "orders give too many ways to match here")


def chain_rule(negations: int) -> fxrules.RuleSet:
    """``neg(...(b143))``, ``b_i = b_(i-1) + w_i``, ``b1 = a6 + w1``, ``a_i = (a_(i-1) * 2) | (2 * a_(i-1))``."""
    lines = ["rule chain:", "    pattern:", "        a1 = (x * 2) | (2 * x)"]
    lines += [f"        a{i} = (a{i - 1} * 2) | (2 * a{i - 1})" for i in range(2, STACK + 1)]
    lines += [f"        b1 = a{STACK} + w1"] + [f"        b{i} = b{i - 1} + w{i}" for i in range(2, CHAIN + 1)]
    lines += [f"        return {'neg(' * negations}b{CHAIN}{')' * negations}"]
    lines += ["    where:", "        w1 is None", "    replace:", "        return w1"]
    return fxrules.parse("\n".join(lines) + "\n")


def chain_graph(negations: int) -> torch.fx.GraphModule:
    """``neg(...((x * 2 ... * 2) + y0) + ... + y142)``: the pattern's structure, every ``+`` operand a distinct
    placeholder, so each swapped order puts a placeholder where an addition must be."""
    graph = torch.fx.Graph()
    value = graph.placeholder("x")
    operands = [graph.placeholder(f"y{i}") for i in range(CHAIN)]
    for _ in range(STACK):
        value = graph.call_function(operator.mul, (value, 2))
    for operand in operands:
        value = graph.call_function(operator.add, (value, operand))
    for _ in range(negations):
        value = graph.call_function(torch.neg, (value,))
    graph.output(value)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("explain", [False, True])
@pytest.mark.parametrize(("negations", "anchor", "reason", "detail"), [
    (1, "neg", "guard false", "the where: condition is false"),
    (2, "neg_1", "budget", BUDGET_DETAIL),
])
def test_swapped_orders_certain_to_fail_cost_one_step_each(negations: int, anchor: str, reason: str, detail: str,
                                                           explain: bool) -> None:
    gm = chain_graph(negations)
    before = gm.code
    report = fxrules.apply(gm, chain_rule(negations), explain=explain)
    rule = report["chain"]
    assert (rule.fired, rule.skip_counts) == (0, {reason: 1})
    assert [(s.reason, s.node, s.detail) for s in rule.skipped] == [(reason, anchor, detail)]
    assert f"  skipped chain x1 ({reason}): {anchor}: {detail}" in str(report)
    assert gm.code == before
