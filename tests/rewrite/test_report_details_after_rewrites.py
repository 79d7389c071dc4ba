"""What ``apply(..., explain=True)`` reports of each rule stays true of the rewrite it was found at, once
later rewrites of other rules have run: a skip's detail names the nodes and targets of its own match (as the
rule file spells them, never an object's address), and a rule that fired in a subgraph is not said to be
unable to start."""

from __future__ import annotations

import re
import warnings

import torch

import fxrules
from tests.conftest import trace

with warnings.catch_warnings():  # ``same`` is meant to be skipped as ``no change``, which parse warns of
    warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
    SEVERAL_RULES = fxrules.parse("""
rule same:
    torch.relu(x) => torch.relu(x)
rule neg_twice:
    torch.neg(torch.neg(x)) => x
rule eff:
    x.clone().add_(c) => x + c
rule sigmoid_twice:
    torch.sigmoid(torch.sigmoid(x)) => torch.sigmoid(x)
""")


def _several(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.relu(x)
    b = torch.neg(torch.neg(y))
    d = x.clone()
    d.add_(1)
    return a + b + d.sum(), torch.sigmoid(torch.sigmoid(x))


def _skip_lines(report: fxrules.Report) -> list[str]:
    return [line.strip() for line in str(report).splitlines() if line.strip().startswith("skipped")]


def test_each_skip_detail_names_its_own_match_after_later_rewrites_of_other_rules() -> None:
    """Skips of two rules found before and between rewrites of two others read, when the report is
    rendered after the apply, the nodes of their own matches."""
    gm = trace(_several)
    report = fxrules.apply(gm, SEVERAL_RULES, explain=True)
    assert report.counts() == {"neg_twice": 1, "sigmoid_twice": 1}
    lines = _skip_lines(report)
    assert len(lines) == 2
    assert lines[0].startswith("skipped same x1 (no change): relu: the replacement computes 'relu' as the match does: ")
    assert lines[1] == "skipped eff x1 (escaping user): add_: 'clone' is also used by sum_1 outside the match"


def test_a_no_change_skip_names_the_target_as_the_rule_spells_it() -> None:
    """The ``no change`` detail names the replacement's operation by its public name (``torch.relu``), not
    by the repr of the builtin, whose memory address differs from run to run."""
    report = fxrules.apply(trace(_several), SEVERAL_RULES, explain=True)
    line = _skip_lines(report)[0]
    assert not re.search(r"0x[0-9a-f]+", line), line
    assert line.endswith("as the match does: torch.relu of the same arguments")


class _Branches(torch.nn.Module):
    def forward(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        def true_branch(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x)

        def false_branch(x: torch.Tensor) -> torch.Tensor:
            return x.t().t().clone()

        return torch.cond(p, true_branch, false_branch, (x,))


def test_a_rule_that_fired_in_a_cond_branch_is_not_said_never_to_start() -> None:
    """A rule whose first operation occurs only in a ``torch.cond`` branch fires there, and the report does not
    also say it cannot start because that operation does not occur in the graph."""
    x = torch.randn(3, 3)
    gm = torch.export.export(_Branches(), (x, torch.tensor(False))).module()
    report = fxrules.apply(gm, fxrules.parse("rule tt:\n    aten.t(aten.t(x)) => x\n"), explain=True)
    assert report.counts() == {"tt": 1}
    assert "never starts tt" not in str(report), str(report)
    assert torch.equal(gm(x, torch.tensor(False)), x)
