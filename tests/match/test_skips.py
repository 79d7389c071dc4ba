"""Skip details: written lazily (computed once, when first read), and an escaping user's detail names the users
outside the match."""

from __future__ import annotations

import torch

import fxrules
from fxrules.engine.report import ReportBuilder
from fxrules.match.skips import Skip
from tests.conftest import trace


def test_skip_details_written_lazily_read_as_before() -> None:
    calls = []

    def detail() -> str:
        calls.append(1)
        return "written"

    skip = Skip("escaping user", detail)
    assert calls == []
    assert (skip.reason, skip.detail, str(skip), skip.detail) == ("escaping user", "written", "written", "written")
    assert calls == [1]
    assert str(Skip("cycle", "plain")) == "plain"
    rules = fxrules.parse("rule r:\n    torch.neg(torch.neg(x)) => x\n")
    builder = ReportBuilder(rules)
    builder.skipped(rules["r"], "neg_1", "escaping user", lambda: "kept")
    report = builder.build(0, 0, 0.0)
    assert [s.detail for s in report["r"].skipped] == ["kept"]


def test_escaping_user_detail_names_the_users_outside_the_match() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        return torch.neg(n), n * 2

    report = fxrules.apply(trace(f), fxrules.parse("rule r:\n    torch.neg(torch.neg(x)) => x\n"))
    assert [(s.reason, s.detail) for s in report["r"].skipped] == [
        ("escaping user", "'neg' is also used by mul outside the match")]
