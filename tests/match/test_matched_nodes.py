"""Which nodes one match may bind, and what a match keeps: two operations of a pattern never match one node (a
pattern whose operations make one path down from its output, ``torch.sigmoid(x) * x``, cannot meet a node it matched
already; one with two operations under a call can), and a match keeps what it bound while the same matcher goes on
matching at other anchors."""

from __future__ import annotations

from collections.abc import Callable

import torch

import fxrules
from fxrules.match.matcher import Matcher
from tests.conftest import trace

RULES = fxrules.parse("""
rule two_negs:
    torch.neg(x) + torch.neg(y) => torch.sub(y, x)

rule silu:
    torch.sigmoid(x) * x => torch.nn.functional.silu(x)

rule double_neg:
    torch.neg(torch.neg(x)) => x

rule sub_one:
    x - 1 => torch.sub(x, 1)
""")


def _rule(name: str) -> fxrules.Rule:
    return next(rule for rule in RULES if rule.name == name)


def _matched(matcher: Matcher, rule: str, gm: torch.fx.GraphModule, node: str) -> list[str] | None:
    found = matcher.match(_rule(rule), next(n for n in gm.graph.nodes if n.name == node))
    return None if found is None else [n.name for n in found.nodes]


def test_two_operations_of_a_pattern_never_match_one_node(matching: Callable[[torch.nn.Module], Matcher]) -> None:
    """``torch.neg(x) + torch.neg(y)`` at ``n + n`` would match ``n`` twice: no match; at ``neg(a) + neg(b)`` it
    matches both."""
    def shared(a: torch.Tensor) -> torch.Tensor:
        n = torch.neg(a)
        return n + n

    def apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.neg(a) + torch.neg(b)

    gm = trace(shared)
    assert _matched(matching(gm), "two_negs", gm, "add") is None
    gm = trace(apart)
    assert _matched(matching(gm), "two_negs", gm, "add") == ["add", "neg", "neg_1"]


def test_a_path_of_operations_matches_only_new_nodes(matching: Callable[[torch.nn.Module], Matcher]) -> None:
    """``torch.sigmoid(x) * x`` at ``s * s`` (``s = sigmoid(a)``): either order binds ``x`` to two values, no match;
    ``torch.neg(torch.neg(x))`` matches a chain of two ``neg`` and not one ``neg`` of a ``neg`` used twice below."""
    def squared(a: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(a)
        return s * s

    def chain(a: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(a)) * torch.sigmoid(a) * a

    gm = trace(squared)
    assert _matched(matching(gm), "silu", gm, "mul") is None
    gm = trace(chain)
    matcher = matching(gm)
    assert _matched(matcher, "double_neg", gm, "neg_1") == ["neg_1", "neg"]
    assert _matched(matcher, "double_neg", gm, "neg") is None


def test_a_match_keeps_its_bindings_while_its_matcher_goes_on(matching: Callable[[torch.nn.Module], Matcher]) -> None:
    """One matcher at every node of a graph, each rule in turn: every match found keeps the nodes and bindings it
    had when found (a matcher's next runs bind anew), and each is the match a matcher of its own finds there."""
    def sites(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(a)) - 1 + torch.sigmoid(b) * b + (torch.neg(a) + torch.neg(b)) - 1

    gm = trace(sites)
    matcher = matching(gm)
    found = []
    for rule in RULES:
        for node in gm.graph.nodes:
            match = matcher.match(rule, node)
            if match is not None:
                found.append((rule, node, match, match.nodes, dict(match.bindings)))
    assert {(rule.name, node.name) for rule, node, *_ in found} == {
        ("two_negs", "add_1"), ("silu", "mul"), ("double_neg", "neg_1"), ("sub_one", "sub"), ("sub_one", "sub_1")}
    for rule, node, match, nodes, bindings in found:
        assert (match.nodes, dict(match.bindings)) == (nodes, bindings)
        alone = matching(gm).match(rule, node)
        assert alone is not None
        assert (alone.nodes, dict(alone.bindings)) == (nodes, bindings)
