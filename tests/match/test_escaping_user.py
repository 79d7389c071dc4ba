"""The ``escaping_user`` refusal of matches of two operations and more: a matched node other than the output that a
live node outside the match uses is refused, naming that node and its users; a user the pass rewrote away does not
count; a rule's own conditions (typed captures without metadata) are reported before it; with three operations the
escaping node is found among the inner ones."""

from __future__ import annotations

import torch

import fxrules
from tests.conftest import trace

DOUBLE_NEG = """
rule double_neg:
    torch.neg(torch.neg(x)) => x
"""

MUL_ONE_THEN_DOUBLE_NEG = """
rule mul_one:
    x * 1 => x

rule double_neg:
    torch.neg(torch.neg(x)) => x
"""

DOUBLE_NEG_TYPED = """
rule double_neg_typed:
    given:
        x: Tensor[N]
    pattern:
        return torch.neg(torch.neg(x))
    replace:
        return x
"""

TRIPLE_NEG = """
rule triple_neg:
    torch.neg(torch.neg(torch.neg(x))) => torch.neg(x)
"""


def shared(x: torch.Tensor) -> torch.Tensor:
    """``neg(neg(x))`` whose inner ``neg`` is also used outside it."""
    inner = torch.neg(x)
    return torch.neg(inner) + inner


def _skips(report: fxrules.Report, rule: str) -> list[tuple[str, str, str]]:
    return [(s.reason, s.node, s.detail) for s in report[rule].skipped]


def test_an_inner_node_used_outside_the_match_refuses_it_and_is_named() -> None:
    report = fxrules.apply(trace(shared), fxrules.parse(DOUBLE_NEG))
    assert report.total_fired == 0
    assert _skips(report, "double_neg") == [("escaping user", "neg_1", "'neg' is also used by add outside the match")]


def test_an_inner_node_used_by_the_output_alone_is_rewritten() -> None:
    gm = trace(lambda x: torch.neg(torch.neg(x)) * 2)
    report = fxrules.apply(gm, fxrules.parse(DOUBLE_NEG))
    assert report.counts() == {"double_neg": 1}
    assert _skips(report, "double_neg") == []
    x = torch.randn(3)
    assert torch.equal(gm(x), x * 2)


def test_a_user_rewritten_away_earlier_in_the_pass_does_not_escape() -> None:
    """``m = neg(x) * 1`` is rewritten first; ``neg(x)`` keeps ``m`` as a user until the commit, but ``m`` is
    retired, so ``neg(m)``, now ``neg(neg(x))``, is rewritten at its one attempt, nothing skipped."""
    gm = trace(lambda x: torch.neg(torch.neg(x) * 1) * 2)
    report = fxrules.apply(gm, fxrules.parse(MUL_ONE_THEN_DOUBLE_NEG))
    assert report.counts() == {"mul_one": 1, "double_neg": 1}
    assert report.to_dict()["rules"][1]["attempts"] == 1
    assert _skips(report, "double_neg") == []
    x = torch.randn(3)
    assert torch.equal(gm(x), x * 2)


def test_a_typed_capture_without_metadata_is_reported_before_an_escaping_user() -> None:
    report = fxrules.apply(trace(shared), fxrules.parse(DOUBLE_NEG_TYPED))
    assert report.total_fired == 0
    [(reason, node, detail)] = _skips(report, "double_neg_typed")
    assert (reason, node) == ("missing metadata", "neg_1")
    assert detail.startswith("'x' needs shape metadata: ")


def test_three_operations_name_the_inner_node_that_escapes() -> None:
    def shared(x: torch.Tensor) -> torch.Tensor:
        middle = torch.neg(torch.neg(x))
        return torch.neg(middle) * middle

    report = fxrules.apply(trace(shared), fxrules.parse(TRIPLE_NEG))
    assert report.total_fired == 0
    assert _skips(report, "triple_neg") == [
        ("escaping user", "neg_2", "'neg_1' is also used by mul outside the match")]
