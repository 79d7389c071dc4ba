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


class ReluAndSigmoidTwice(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.relu(x)) + torch.sigmoid(torch.sigmoid(x)) + torch.relu(torch.relu(x + 1))


def test_each_rule_emits_its_own_replacement_with_its_own_provenance() -> None:
    """What a rewrite reads of its rule (replacement, checks, provenance) is its own rule's, with several rules
    firing in turn on one graph."""
    gm, report = _apply(ReluAndSigmoidTwice(), "rule relu2:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n"
                                               "rule sig2:\n    torch.sigmoid(torch.sigmoid(x)) => torch.tanh(x)\n")
    assert report.counts() == {"relu2": 2, "sig2": 1}
    made = [(n.target, n.meta["fxrules"]["rule"]) for n in gm.graph.nodes if "fxrules" in n.meta]
    assert sorted(made, key=str) == sorted([(torch.relu, "relu2"), (torch.tanh, "sig2"), (torch.relu, "relu2")],
                                           key=str)
    x = torch.randn(4)
    torch.testing.assert_close(gm(x), torch.relu(x) + torch.tanh(x) + torch.relu(x + 1))


class WriterMadeMidway(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = torch.relu(torch.neg(x))
        return r * 1, r


def test_a_writer_one_rewrite_makes_is_seen_by_the_next_rewrites_write_checks() -> None:
    """The graph has no in-place writer until the first rewrite makes one (``relu_`` writing into its new
    ``neg``, which ``r`` then shares memory with); the second rewrite, which would make ``r * 1`` share memory
    with ``r``, runs the write checks and is refused: whether the graph may write is asked at each rewrite."""
    rules = ("rule make_writer:\n    torch.relu(torch.neg(x)) => torch.relu_(torch.neg(x))\n"
             "rule mul_one:\n    x * 1 => x\n")
    gm, report = _apply(WriterMadeMidway(), rules)
    assert report.counts() == {"make_writer": 1}
    assert report["mul_one"].skip_counts == {"in-place write": 1}
    x = torch.randn(4)
    first, second = gm(x)
    assert first is not second
    torch.testing.assert_close(first, torch.relu(-x))


class PureAddThenAddOut(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        s = torch.add(a, b)
        torch.add(a, s, out=o)
        return s * o


def test_a_rule_that_may_write_checks_effects_at_each_match_after_a_pure_one_fired() -> None:
    """``...`` lets ``out=`` through, so the rule's matches may write: its first match (a pure ``add``) fires, and
    its second, which writes into ``o``, is still checked and refused."""
    gm, report = _apply(PureAddThenAddOut(), "rule add_sub:\n    torch.add(x, y, ...) => torch.sub(x, y)\n")
    assert report.counts() == {"add_sub": 1}
    assert report["add_sub"].skip_counts == {"impure": 1}
    a, b, o = torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 5.0)
    torch.testing.assert_close(gm(a, b, o), torch.zeros(3))
    torch.testing.assert_close(o, torch.zeros(3))  # a + (a - b): the write kept
