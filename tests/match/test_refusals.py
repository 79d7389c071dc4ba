"""Which structural matches are refused, and how a refusal is reported: a rule of one operation is refused for a
tensor-typed capture without metadata and for its guard, a rule of several for an escaping user, whichever order
of a commutative operation matched first; the first refusal of an anchor is the one reported, with or without
``explain=True``."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch

import fxrules
from fxrules.match.matcher import Matcher
from fxrules.match.skips import Skip
from tests.conftest import EXECUTIONS, trace

NEG_TYPED = """
rule neg_typed:
    given:
        x: Tensor[N]
    pattern:
        return torch.neg(x)
    replace:
        return torch.abs(x)
"""

NEG_GUARDED = """
rule neg_guarded:
    given:
        s: int
    pattern:
        return torch.add(x, s)
    where:
        s > 5
    replace:
        return torch.sub(x, s)
"""

NEG_TIMES = """
rule neg_times:
    pattern:
        return torch.neg(x) * y
    replace:
        return torch.neg(torch.mul(x, y))
"""


def _skips(report: fxrules.Report, rule: str) -> list[tuple[str, str, str]]:
    return [(s.reason, s.node, s.detail) for s in report[rule].skipped]


def test_one_operation_with_a_tensor_typed_capture_is_refused_without_metadata() -> None:
    report = fxrules.apply(trace(lambda x: torch.neg(x)), fxrules.parse(NEG_TYPED))
    assert report.total_fired == 0
    [(reason, node, detail)] = _skips(report, "neg_typed")
    assert (reason, node) == ("missing metadata", "neg")
    assert detail.startswith("'x' needs shape metadata: ")
    assert detail.endswith("(pass example_inputs= to apply, or use torch.export)")


def test_one_operation_with_a_guard_is_refused_where_the_guard_is_false() -> None:
    gm = trace(lambda x: torch.add(x, 2) + torch.add(x, 7))
    report = fxrules.apply(gm, fxrules.parse(NEG_GUARDED))
    assert report.total_fired == 1
    assert _skips(report, "neg_guarded") == [("guard false", "add", "the where: condition is false")]
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [torch.add, torch.sub, operator.add]


def test_commutative_match_refused_in_order_is_rewritten_swapped() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        escaping = torch.neg(a)
        return escaping * torch.neg(b), escaping + 1

    gm = trace(f)
    report = fxrules.apply(gm, fxrules.parse(NEG_TIMES))
    assert (report.total_fired, _skips(report, "neg_times")) == (1, [])
    a, b = torch.randn(3), torch.randn(3)
    assert all(torch.equal(g, e) for g, e in zip(gm(a, b), f(a, b), strict=True))
    assert "torch.mul(b, neg)" in gm.code


def test_commutative_match_refused_both_ways_reports_the_first_order() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        first, second = torch.neg(a), torch.neg(b)
        return first * second, first + 1, second + 2

    expected = [("escaping user", "mul", "'neg' is also used by add outside the match")]
    for explain in (False, True):
        report = fxrules.apply(trace(f), fxrules.parse(NEG_TIMES), explain=explain)
        assert (report.total_fired, _skips(report, "neg_times")) == (0, expected)
        assert report["neg_times"].skip_counts == {"escaping user": 1}
    assert "skipped neg_times x1 (escaping user): mul: 'neg' is also used by add outside the match" in str(report)


def _outcomes(make: Callable[[torch.nn.Module], Matcher], source: str,
              f: Callable[..., Any]) -> list[tuple[str, str, int]]:
    """At each node: the match's outcome (a reason, 'match' or 'none') and the match steps it took."""
    gm, [rule] = trace(f), fxrules.parse(source)
    matcher, found = make(gm), []
    for node in gm.graph.nodes:
        matcher.budget.taken = 0  # (a matcher counts afresh only at a node where the rule may match)
        try:
            outcome = "none" if matcher.match(rule, node) is None else "match"
        except Skip as skip:
            outcome = f"{skip.reason}: {skip.detail}"
        found.append((node.name, outcome, matcher.budget.taken))
    return found


def _sites(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Commutative sites refused in the order written: usable swapped, refused both ways, refused with the other
    operand a literal, refused with the other operand a node of another target."""
    first, second, third = torch.neg(a), torch.neg(b), torch.neg(a + b)
    return (first * torch.neg(b), first * second, second * 2, third * torch.relu(a), first + 1, second + 2,
            third + 3)


@pytest.mark.parametrize("execution", ["traced", "interpreted"])
def test_commutative_refusals_take_the_same_steps_in_every_execution(execution: str) -> None:
    """The compiled matcher passes over an operand order certain to fail without replaying it, and counts the
    step the replay would: its outcomes and steps at every node are the traced and interpreted matchers'."""
    outcomes = _outcomes(EXECUTIONS["compiled"], NEG_TIMES, _sites)
    assert outcomes == _outcomes(EXECUTIONS[execution], NEG_TIMES, _sites)
    assert [(node, outcome) for node, outcome, _ in outcomes if outcome != "none"] == [
        ("mul", "match"),
        ("mul_1", "escaping user: 'neg' is also used by mul, add_1 outside the match"),
        ("mul_2", "escaping user: 'neg_1' is also used by mul_1, add_2 outside the match"),
        ("mul_3", "escaping user: 'neg_2' is also used by add_3 outside the match")]
