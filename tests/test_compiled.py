"""The compiled matchers (fxrules.compiled) against the generic matcher they stand in for.

* On random graphs, at every node, every compiled rule gives the generic matcher's answer (the
  same match, None, or the same skip) or says UNSURE.
* Choices: a failure after an unexplored commutative choice is UNSURE (the generic matcher
  backtracks into it), a choice exhausted where it was made is a sure answer.
* Which rules compile, and that apply's results do not depend on the fast path.
"""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings

import fxrules
from fxrules.compiled import UNSURE, compile_rule, compile_ruleset
from fxrules.ir import Rule, RuleSet
from fxrules.matcher import Match, Matcher, Skip
from tests.conftest import slow_examples, trace
from tests.strategies import GeneratedGraph, graphs
from tests.test_differential import RULES as DIFFERENTIAL_RULES

#: Exact calls of every argument shape the compiled matcher reads: literals, keywords, defaults,
#: lists, slices, `...`, `_`, typed captures, commutative operators, DAG patterns and guards.
EXACT_RULES = """
rule neg_neg:
    torch.neg(torch.neg(x)) => x

rule mul_one:
    x * 1 => x

rule mul_one_float:
    x * 1.0 => x

rule silu:
    torch.sigmoid(x) * x => torch.nn.functional.silu(x)

rule add_zero_alpha:
    torch.add(x, 0, alpha=2) => x

rule transpose_twice:
    torch.transpose(torch.transpose(x, 0, 1), 0, 1) => x

rule transpose_methods:
    x.transpose(0, 1).transpose(0, 1) => x

rule sum_dim:
    given:
        d: int
    pattern:
        return torch.sum(torch.sum(x, d, keepdim=True), d, keepdim=True)
    replace:
        return torch.sum(x, d, keepdim=True)

rule neg_cat_pair:
    torch.neg(torch.cat([u, v])) => torch.cat([torch.neg(u), torch.neg(v)])

rule any_mul:
    torch.mul(x, _) => x

rule mul_rest:
    torch.add(x, ...) => x

rule square:
    pattern:
        n = torch.neg(x)
        return n * n
    replace:
        return x * x

rule neg_times_neg:
    torch.neg(a) * torch.neg(b) => a * b

rule relu_sum_kept:
    pattern:
        return torch.relu(x) + torch.relu(y)
    where:
        x is not y
    replace:
        return torch.relu(x + y)
"""

EXACT = fxrules.parse(EXACT_RULES, filename="exact.fxr")
ALL_RULES = DIFFERENTIAL_RULES + EXACT
COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def generic(rule: Rule, node: torch.fx.Node, gm: torch.fx.GraphModule) -> Match | Skip | None:
    try:
        return Matcher(gm).match(rule, node)
    except Skip as skip:
        return skip


def compiled(rule: Rule, node: torch.fx.Node, gm: torch.fx.GraphModule) -> Match | Skip | object | None:
    matcher = compile_rule(rule)
    assert matcher is not None
    try:
        return matcher.match(node, Matcher(gm))
    except Skip as skip:
        return skip


def outcome(found: Any) -> Any:
    """What an answer says, comparable across matchers: the match's nodes and bindings, or the skip."""
    if isinstance(found, Match):
        return ("match", found.outputs, found.nodes, tuple(found.bindings.items()))
    if isinstance(found, Skip):
        return ("skip", found.reason, found.detail)
    return found


def check_agreement(gm: torch.fx.GraphModule, rules: RuleSet) -> int:
    """Compare at every (compiled rule, node); the number of sure answers."""
    sure = 0
    for rule in rules:
        if compile_rule(rule) is None:
            continue
        for node in gm.graph.nodes:
            found = compiled(rule, node, gm)
            if found is UNSURE:
                continue
            sure += 1
            assert outcome(found) == outcome(generic(rule, node, gm)), f"{rule.name} at {node.name}:\n{gm.code}"
    return sure


@settings(max_examples=60, **COMMON)
@given(graph=graphs(dead_code=True))
def test_compiled_rules_answer_as_the_generic_matcher(graph: GeneratedGraph) -> None:
    check_agreement(graph.gm, ALL_RULES)


@pytest.mark.slow
@settings(max_examples=slow_examples(300), **COMMON)
@given(graph=graphs(max_steps=16, dead_code=True))
def test_compiled_rules_answer_as_the_generic_matcher_many_examples(graph: GeneratedGraph) -> None:
    check_agreement(graph.gm, ALL_RULES)


def test_compiled_rules_agree_on_every_argument_shape() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        s = torch.sigmoid(y)
        return (
            torch.neg(torch.neg(x)), x * 1, x * 1.0, 1 * y, x * 2, torch.sigmoid(x) * x, y * torch.sigmoid(y),
            s * y + s, torch.add(x, 0, alpha=2), torch.add(x, 0, alpha=3), torch.add(x, y),
            torch.transpose(torch.transpose(x, 0, 1), 0, 1), torch.transpose(torch.transpose(x, 1, 0), 0, 1),
            torch.transpose(x, dim0=0, dim1=1).transpose(0, 1), x.transpose(0, 1).transpose(0, 1),
            torch.sum(torch.sum(x, 1, keepdim=True), 1, keepdim=True),
            torch.sum(torch.sum(x, 1, keepdim=True), dim=0, keepdim=True),
            torch.neg(torch.cat([x, y])), torch.neg(torch.cat((x, y), 0)), torch.neg(torch.cat([x, y, x])),
            torch.mul(x, 3), n * n, torch.neg(n),
            torch.neg(x) * torch.neg(y), torch.relu(x) + torch.relu(y), torch.relu(x) + torch.relu(x), x[1:2, ::2],
        )

    gm = trace(f)
    assert check_agreement(gm, ALL_RULES) > 100
    anchor = next(n for n in gm.graph.nodes if n.target is torch.neg and n.args[0].target is torch.neg
                  and len(n.args[0].users) > 1)
    escaping = compiled(EXACT["neg_neg"], anchor, gm)
    assert isinstance(escaping, Skip) and escaping.reason == "escaping user"


def test_a_failure_after_an_unexplored_choice_is_left_to_the_generic_matcher() -> None:
    # mul(add(x, y), y) at (u + v) * v: add matches unswapped (x=u, y=v)... then y is v: fine.
    # At (u + v) * u the unswapped add binds y=v and the outer operand u fails; the generic
    # matcher backtracks into add's swapped order (x=v, y=u) and matches.
    rules = fxrules.parse("rule r:\n    (x + y) * y => x\n")
    gm = trace(lambda u, v: (u + v) * u)
    anchor = next(n for n in gm.graph.nodes if n.target is operator.mul)
    rule = rules["r"]
    assert compiled(rule, anchor, gm) is UNSURE
    match = generic(rule, anchor, gm)
    assert isinstance(match, Match) and match.bindings["x"].name == "v"
    assert fxrules.apply(gm, rules).counts() == {"r": 1}


def test_a_choice_exhausted_where_it_was_made_is_a_sure_answer() -> None:
    rules = fxrules.parse("rule r:\n    x * 3 => x\n")
    gm = trace(lambda u: u * 2)
    anchor = next(n for n in gm.graph.nodes if n.target is operator.mul)
    assert compiled(rules["r"], anchor, gm) is None


def test_a_skipped_match_with_the_other_order_untried_is_left_to_the_generic_matcher() -> None:
    rules = fxrules.parse("rule silu:\n    torch.sigmoid(x) * x => torch.nn.functional.silu(x)\n")

    def f(u: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(u)
        return s * u + s

    gm = trace(f)
    anchor = next(n for n in gm.graph.nodes if n.target is operator.mul)
    assert compiled(rules["silu"], anchor, gm) is UNSURE
    skip = generic(rules["silu"], anchor, gm)
    assert isinstance(skip, Skip) and skip.reason == "escaping user"
    assert fxrules.apply(gm, rules)["silu"].skip_counts == {"escaping user": 1}


def test_which_rules_compile() -> None:
    compiled_names = {name for name, m in compile_ruleset(EXACT).matchers.items() if m is not None}
    assert compiled_names == {rule.name for rule in EXACT}
    outside = fxrules.parse("""
rule family:
    relu(relu(x)) => relu(x)

rule alternative:
    (x * 1) | torch.mul(x, 1) => x

rule typed:
    given:
        x: Tensor[n, n]
    pattern:
        return torch.transpose(x, 0, 1)
    replace:
        return x

rule two_outputs:
    pattern:
        return torch.neg(x), torch.neg(x)
    replace:
        n = torch.neg(x)
        return n, n
""")
    assert all(m is None for m in compile_ruleset(outside).matchers.values())


def test_compiled_ruleset_is_built_once_per_ruleset_object() -> None:
    rules = EXACT + fxrules.parse("rule other:\n    torch.neg(x) * 1 => torch.neg(x)\n")
    assert compile_ruleset(rules) is compile_ruleset(rules)
    assert compile_ruleset(rules).matchers.keys() == compile_ruleset(EXACT).matchers.keys() | {"other"}


def test_explain_takes_the_generic_path_and_reports_near_misses() -> None:
    rules = fxrules.parse("rule mul_three:\n    x * 3 => x\n")
    gm = trace(lambda u: u * 2)
    report = fxrules.apply(gm, rules, explain=True)
    assert [m.condition for m in report["mul_three"].near_misses] == ["literal"]
