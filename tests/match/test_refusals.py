"""Which structural matches are refused, and how a refusal is reported: a rule of one operation is refused for a
tensor-typed capture without metadata and for its guard, a rule of several for an escaping user, whichever order
of a commutative operation matched first; the first refusal of an anchor is the one reported, with or without
``explain=True``."""

from __future__ import annotations

import operator

import torch

import fxrules
from tests.conftest import trace

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
