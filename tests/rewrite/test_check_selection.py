"""Which safety checks a rewrite runs is decided per rule and per graph, and nothing one rewrite found is
carried into the next: each match is checked as if it were the only one."""

from __future__ import annotations

import torch
import torch.fx

import fxrules

nn = torch.nn


def _apply(module: nn.Module, rules: str) -> tuple[torch.fx.GraphModule, fxrules.Report]:
    gm = torch.fx.symbolic_trace(module)
    return gm, fxrules.apply(gm, fxrules.parse(rules, "selection.fxr"))


class PureThenImpure(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.neg(torch.neg(y)) * 2, torch.relu(x.add_(1))


def test_a_rule_whose_matches_write_is_refused_after_a_pure_rule_fired() -> None:
    """Whether a rule's matches may have effects is found per rule: the pure rule firing first does not let the
    writing rule's match through."""
    gm, report = _apply(PureThenImpure(), "rule pure:\n    torch.neg(torch.neg(x)) => x\n"
                                          "rule writes:\n    torch.relu(x.add_(1)) => torch.relu(x + 1)\n")
    assert report.counts() == {"pure": 1}
    assert report["writes"].skip_counts == {"impure": 1}
    x, y = torch.zeros(3), torch.ones(3)
    gm(x, y)
    assert x.tolist() == [1.0, 1.0, 1.0]


class TwoReturnedNegations(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.relu(x)
        return torch.neg(torch.neg(w)), torch.neg(torch.neg(x))


def test_the_second_rewrite_sees_its_own_aliases_not_the_first_ones() -> None:
    """The first rewrite returns a computed tensor (allowed); the second would return the graph's input itself
    and is refused: what the first found about aliases is not reused for the second."""
    gm, report = _apply(TwoReturnedNegations(), "rule r:\n    torch.neg(torch.neg(x)) => x\n")
    assert report.counts() == {"r": 1}
    assert report["r"].skip_counts == {"alias": 1}
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [torch.relu, torch.neg, torch.neg]
