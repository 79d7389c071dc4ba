"""Rewrites a safety check must still refuse where a check is skipped for a rule or a graph: a rule whose first
match is harmless and a later one is not, a writer made by an earlier rewrite of the same ``apply``, a one-operation
rule in a grad-mode region, a literal replacing a method's receiver, aten-level rules that change nothing.  Each
pins the refused rewrite's reason in the report and, where something fires, that the program computes, leaves its
inputs and lets a caller's write reach exactly what it did before."""

from __future__ import annotations

import warnings

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

import fxrules
from tests.conftest import trace
from tests.side_effects import assert_same, assert_same_state, observe


def _inputs(count: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(4, 4, generator=generator) for _ in range(count)]


def _apply(gm: torch.fx.GraphModule, rules: str, **parse_kwargs: object) -> tuple[dict[str, int], dict[str, dict]]:
    """Apply ``rules`` to ``gm``, checking it behaves as before; each rule's count and skip counts by reason."""
    inputs = _inputs(len(gm.graph.find_nodes(op="placeholder")))
    before = observe(gm, inputs)
    with warnings.catch_warnings():  # some rules below change nothing on purpose: the loop check says so
        warnings.simplefilter("ignore")
        ruleset = fxrules.parse(rules, "attacks.fxr", **parse_kwargs)  # type: ignore[arg-type]
        report = fxrules.apply(gm, ruleset)
    after = observe(gm, inputs)
    assert_same(after.outputs, before.outputs, "outputs")
    assert_same_state(after.after_call, before.after_call, "after the call", 0.0)
    assert_same_state(after.after_write, before.after_write, "after a write into the outputs", 0.0)
    names = [rule.name for rule in ruleset.rules]
    return ({name: report[name].fired for name in names},
            {name: {str(reason): count for reason, count in report[name].skip_counts.items()} for name in names})


def test_a_writer_an_earlier_rewrite_made_refuses_a_later_rewrite_aliasing_what_it_writes() -> None:
    """The graph has no in-place writer until ``w`` makes one (``clone().neg_()``); ``x.clone() => x`` would then
    make ``neg_`` write into the input ``x``: refused, whichever rule comes first in the file."""
    for rules in ("rule w: torch.neg(v) + 1 => v.clone().neg_().add_(1)\nrule r: x.clone() => x\n",
                  "rule r: x.clone() => x\nrule w: torch.neg(v) + 1 => v.clone().neg_().add_(1)\n"):
        gm = trace(lambda x, y: (torch.neg(x) + 1) * y)
        fired, skipped = _apply(gm, rules)
        assert (fired, skipped["r"]) == ({"w": 1, "r": 0}, {"in-place write": 1}), rules
        assert "clone = x.clone()" in gm.code


def _plain_then_out(a: torch.Tensor, b: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    p = torch.add(a, b)
    torch.add(a, b, out=o)
    return p * o


def test_a_pattern_with_rest_rewrites_the_plain_call_and_refuses_the_out_call_of_the_same_rule() -> None:
    """``...`` lets ``out=`` through: the first match writes nothing, the second writes into ``o``; what the first
    match of a rule found may not stand for the others."""
    gm = trace(_plain_then_out)
    fired, skipped = _apply(gm, "rule r: torch.add(x, y, ...) => torch.sub(x, torch.neg(y))\n")
    assert (fired, skipped) == ({"r": 1}, {"r": {"impure": 1}})
    assert "torch.add(a, b, out = o)" in gm.code


@torch.fx.wrap
def logged(x: torch.Tensor) -> torch.Tensor:
    return x


def test_a_call_registered_side_effecting_is_refused_at_every_match_of_a_one_operation_rule() -> None:
    torch.fx.node.has_side_effect(logged)
    try:
        gm = trace(lambda x, y: logged(torch.neg(x)) + logged(torch.neg(y)))
        fired, skipped = _apply(gm, f"rule r: {__name__}.logged(torch.neg(x)) => x\n", allow=[__name__])
        assert (fired, skipped) == ({"r": 0}, {"r": {"impure": 2}})
    finally:
        torch.fx.node._side_effectful_functions.discard(logged)


def _computed_without_grad() -> torch.fx.GraphModule:
    """``y = x * 1`` inside ``torch.no_grad()`` as Dynamo records it, ``y`` used after the region."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    y = graph.call_function(torch.mul, (x, 1))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output(graph.call_function(torch.relu, (y,)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_one_operation_rule_may_not_replace_a_value_computed_without_grad_by_one_that_may_require_it() -> None:
    gm = _computed_without_grad()
    fired, skipped = _apply(gm, "rule r: torch.mul(x, 1) => x\n")
    assert (fired, skipped) == ({"r": 0}, {"r": {"grad mode": 1}})


def test_a_literal_replacing_a_method_receiver_is_refused_and_a_call_replacing_it_is_not() -> None:
    gm = trace(lambda y: torch.mul(y, 1).contiguous())
    assert _apply(gm, "rule r: torch.mul(x, c) => c\n") == ({"r": 0}, {"r": {"literal receiver": 1}})
    gm = trace(lambda y: torch.mul(y, 1).contiguous())
    assert _apply(gm, "rule r: torch.mul(x, 1) => x.clone()\n") == ({"r": 1}, {"r": {}})


def _sin_plus_one(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) + 1


def _relu_plus_one(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) + 1


def test_aten_level_rules_whose_replacement_is_the_matched_overload_change_nothing() -> None:
    """In an aten-level graph the packet ``aten.sin`` and the family ``relu`` emit the overload matched."""
    for body, rule in ((_sin_plus_one, "aten.sin.default(x) => aten.sin(x)"),
                       (_relu_plus_one, "aten.relu.default(x) => relu(x)")):
        gm = make_fx(body)(torch.randn(4, 4))
        code = gm.code
        assert _apply(gm, f"rule r: {rule}\n") == ({"r": 0}, {"r": {"no change": 1}}), rule
        assert gm.code == code


def _relu_times_its_sigmoid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = torch.relu(x)
    return n, n * torch.sigmoid(n)


def test_a_capture_computed_from_the_matched_node_refuses_the_rewrite_that_would_use_it_first() -> None:
    """``c`` is ``sigmoid(n)``: the replacement, made before ``n``, would read ``c`` computed from ``n``."""
    rule = """rule r:
    pattern:
        n = torch.relu(x)
        return n, n * c
    replace:
        m = torch.relu(x)
        return m, c * m
"""
    assert _apply(trace(_relu_times_its_sigmoid), rule) == ({"r": 0}, {"r": {"cycle": 1}})
