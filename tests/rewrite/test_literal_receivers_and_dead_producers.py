"""Rewrites that used to go wrong: a literal made a method's receiver, and dead producers left unretired.

* A replacement that is a literal where the replaced value is the receiver of a method call
  (``torch.mul(1, y).contiguous()`` with ``torch.mul(x, _) => x``) would generate ``1.contiguous()``,
  which does not compile, after dead-code elimination has erased nodes, so nothing could be undone:
  it is skipped ('literal receiver') while it is still undoable, and the graph is left as it was.
* A producer only a rewritten node used (the argument ``...`` swallowed) is retired with it, and so
  on up; left in place it counted as a user of its inputs until the commit, and a later match in
  the same ``apply`` that needs those inputs to have no other user was wrongly refused.
"""

from __future__ import annotations

import pytest
import torch

import fxrules
import fxrules.rewrite.rewriter
from fxrules.match.matcher import Match
from tests.conftest import trace


def test_a_literal_is_not_made_the_receiver_of_a_method_call() -> None:
    rules = fxrules.parse("rule drop_mul:\n    torch.mul(x, _) => x\n")
    gm = trace(lambda y: torch.mul(1, y).contiguous() + torch.mul(y, 2))
    code, y = gm.code, torch.randn(3)
    report = fxrules.apply(gm, rules)
    assert report.counts() == {"drop_mul": 1}  # torch.mul(y, 2) => y: a node, fine as a receiver or not
    skipped = report["drop_mul"].skipped
    assert [s.reason for s in skipped] == ["literal receiver"] and "contiguous" in skipped[0].detail
    assert gm.code != code and "1.contiguous" not in gm.code
    torch.testing.assert_close(gm(y), y + y)  # the rule is not sound: it drops the factor 2


def test_a_literal_receiver_alone_leaves_the_graph_as_it_was() -> None:
    rules = fxrules.parse("rule drop_mul:\n    torch.mul(x, _) => x\n")
    gm = trace(lambda y: torch.mul(1, y).contiguous())
    code, y = gm.code, torch.randn(3)
    report = fxrules.apply(gm, rules)
    assert report.counts() == {} and report["drop_mul"].skip_counts == {"literal receiver": 1}
    assert gm.code == code
    torch.testing.assert_close(gm(y), y)


def test_a_producer_left_dead_by_a_rewrite_no_longer_blocks_a_later_match() -> None:
    rules = fxrules.parse("""
rule keep_first:
    torch.add(x, ...) => x

rule sigmoid_of_relu:
    torch.sigmoid(torch.relu(v)) => v
""")

    def f(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = torch.relu(v)
        n = torch.neg(r)  # used only by the add that keep_first rewrites away
        return torch.add(u, n).exp(), torch.sigmoid(r).exp()  # not the inputs themselves: see test_rewrite_aliasing

    gm = trace(f)
    u, v = torch.randn(3), torch.randn(3)
    report = fxrules.apply(gm, rules)
    assert report.counts() == {"keep_first": 1, "sigmoid_of_relu": 1}
    assert report["sigmoid_of_relu"].skipped == ()
    first, second = gm(u, v)
    torch.testing.assert_close(first, u.exp())
    torch.testing.assert_close(second, v.exp())
    assert not any(n.target in (torch.neg, torch.relu) for n in gm.graph.nodes)


def test_impure_producers_are_not_retired() -> None:
    # A producer with side effects stays until the commit (and dead-code elimination keeps it).
    rules = fxrules.parse("rule keep_first:\n    torch.add(x, ...) => x\n")

    def f(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        w = torch.ops.aten.add_.Tensor(v, v)  # in place: impure
        return torch.add(u, w).exp()

    gm = trace(f)
    in_place = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.add_.Tensor)
    retired = []
    original = fxrules.rewrite.rewriter.Rewriter._retire_dead

    def retire_dead(self: fxrules.rewrite.rewriter.Rewriter, match: Match) -> list[torch.fx.Node]:
        touched = original(self, match)
        retired.extend(self.transaction.retired)
        return touched

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(fxrules.rewrite.rewriter.Rewriter, "_retire_dead", retire_dead)
        report = fxrules.apply(gm, rules)
    assert report.counts() == {"keep_first": 1}
    assert in_place not in retired and len(retired) == 1
    assert in_place in gm.graph.nodes  # kept by dead-code elimination too


def test_a_skip_halfway_through_a_replacement_leaves_nothing_behind() -> None:
    """``r1`` makes ``neg(exp)`` and a buffer, then its helper skips: both go, and ``r2`` still fires."""
    rules = fxrules.parse("""
rule r1:
    torch.relu(x) => torch.add(torch.neg(x), torch.mul(@made(), @value(x)))

rule r2:
    torch.relu(torch.exp(y)) => torch.sigmoid(y)
""")
    gm = trace(lambda y: torch.relu(torch.exp(y)))
    report = fxrules.apply(gm, rules, helpers={"made": lambda: torch.ones(()), "value": lambda t: t.value})
    assert report["r1"].skip_counts == {"value unknown": 1}
    assert report.counts() == {"r2": 1}
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_function", "output"]
    assert dict(gm.named_buffers()) == {}


def test_a_skip_that_is_the_only_event_leaves_the_graph_exactly_as_it_was() -> None:
    rules = fxrules.parse("rule r1:\n    torch.relu(x) => torch.add(torch.neg(x), @value(x))\n")
    gm = trace(lambda y: torch.relu(y))
    nodes, code = list(gm.graph.nodes), gm.code
    report = fxrules.apply(gm, rules, helpers={"value": lambda t: t.value})
    assert report.total_fired == 0 and report["r1"].skip_counts == {"value unknown": 1}
    assert list(gm.graph.nodes) == nodes and gm.code == code
    assert [len(n.users) for n in nodes] == [1, 1, 0]
