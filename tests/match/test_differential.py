"""Differential properties: the indexed engine against the naive reference matcher, on random FX graphs.

* The index never loses a match: every (rule, node) the reference finds is
  among the rules the engine's index files under that node.
* On any graph, the engine's first rewrite is the reference's first match (the
  graph is unchanged until then), nothing fires where the reference finds
  nothing, and at the fixpoint the reference finds no match left (when the
  input had no dead code: a dead user blocks a match until the final cleanup).
* On graphs of isolated sites (no two matches share a node, no rewrite makes
  or breaks another match), one pass fires exactly the reference's greedy
  prediction, and the report's counts agree with it.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch.fx
from hypothesis import HealthCheck, given, settings

import fxrules
from fxrules.match.matcher import RuleIndex
from tests.conftest import slow_examples
from tests.reference_matcher import Matches, predict_pass, reference_anchors, reference_matches
from tests.strategies import GeneratedGraph, graphs, site_graphs

#: Rules filed under every kind of anchor key: exact functions, operators, methods, modules, families, DAGs.
FIRST_RULES = """
rule relu_method_twice:
    \"\"\"Before algebra.fxr, so it wins over relu_idempotent where both match.\"\"\"
    x.relu().relu() => x.relu()

rule relu_module_twice:
    given:
        m: nn.ReLU
        k: nn.ReLU
    pattern:
        return k(m(x))
    where:
        not m.inplace and not k.inplace
    replace:
        return m(x)

rule shared_neg:
    \"\"\"Two outputs: two negations of one value become one.\"\"\"
    pattern:
        return neg(x), neg(x)
    replace:
        n = neg(x)
        return n, n

rule neg_times_neg:
    mul(neg(a), neg(b)) => a * b

rule neg_squared:
    pattern:
        n = neg(x)
        return mul(n, n)
    replace:
        return x * x
"""

LAST_RULES = """
rule neg_neg_exact:
    \"\"\"After algebra.fxr: double_neg always wins where this matches.\"\"\"
    torch.neg(torch.neg(x)) => x

rule scaled_by_one:
    (x * 1) | torch.mul(x, 1) => x

rule transpose_01_method:
    x.transpose(0, 1).transpose(0, 1) => x

rule near_miss_alpha:
    torch.add(x, 0, alpha=2) => x

rule sum_kept:
    pattern:
        s = torch.sum(x, d, keepdim=True)
        return torch.sum(s, d, keepdim=True)
    replace:
        return torch.sum(x, d, keepdim=True)
"""

RULES = (fxrules.parse(FIRST_RULES, filename="first.fxr") + fxrules.load("algebra.fxr")
         + fxrules.parse(LAST_RULES, filename="last.fxr"))

SLOW_EXAMPLES = slow_examples(300)
FAST_EXAMPLES = 60
TWO_PASSES = 2
COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def indexed_pairs(gm: torch.fx.GraphModule) -> set[tuple[str, str]]:
    """(rule, node) for every rule the engine's index files under every node."""
    index = RuleIndex(gm, RULES)
    return {(rule.name, node.name) for node in gm.graph.nodes for rule in index.rules_at(node)}


def fired_pairs(report: fxrules.Report) -> set[tuple[str, str]]:
    return {(rule.name, anchor) for rule in report.rules for anchor in rule.anchors}


def first_match(gm: torch.fx.GraphModule, matches: Matches) -> tuple[str, str]:
    """The reference's first match in graph order; at that node, the first rule in file order."""
    for node in gm.graph.nodes:
        for rule in RULES:
            if (rule.name, node.name) in matches:
                return rule.name, node.name
    raise AssertionError("no match")


def check_index_keeps_every_match(gm: torch.fx.GraphModule) -> None:
    lost = reference_anchors(gm, RULES) - indexed_pairs(gm)
    assert not lost, f"the index loses these (rule, anchor) matches: {sorted(lost)}"


def check_first_rewrite_and_fixpoint(gm: torch.fx.GraphModule) -> None:
    matches = reference_matches(gm, RULES)
    code = gm.code
    had_dead_code = any(n.op not in ("placeholder", "output") and not n.users for n in gm.graph.nodes)
    first = first_match(gm, matches) if matches else None
    report = fxrules.apply(gm, RULES)
    if first is None:
        assert report.counts() == {}, "fired where the reference finds no match"
        assert gm.code == code, "nothing matched, yet the module changed"
        return
    rule, anchor = first
    assert anchor in report[rule].anchors, f"expected {rule} to fire first, at {anchor}; fired {fired_pairs(report)}"
    left = reference_anchors(gm, RULES) if not had_dead_code else set()  # dead users block matches until the end
    assert not left, f"apply stopped, but the reference still finds {sorted(left)} in\n{gm.code}"


def check_isolated_sites(gm: torch.fx.GraphModule) -> None:
    check_index_keeps_every_match(gm)
    predicted = predict_pass(gm, RULES)
    report = fxrules.apply(gm, RULES)
    assert fired_pairs(report) == predicted
    assert report.counts() == dict(Counter(rule for rule, _ in predicted))
    if predicted:  # the first pass fires everything, the second finds nothing left
        assert report.passes == TWO_PASSES, f"{report.passes} passes"


@settings(max_examples=FAST_EXAMPLES, **COMMON)
@given(graph=graphs(dead_code=True))
def test_index_never_loses_a_match(graph: GeneratedGraph) -> None:
    check_index_keeps_every_match(graph.gm)


@settings(max_examples=FAST_EXAMPLES, **COMMON)
@given(graph=graphs(dead_code=True))
def test_first_rewrite_and_fixpoint_agree_with_the_reference(graph: GeneratedGraph) -> None:
    check_first_rewrite_and_fixpoint(graph.gm)


@settings(max_examples=FAST_EXAMPLES, **COMMON)
@given(graph=site_graphs())
def test_isolated_sites_fire_as_the_reference_predicts(graph: GeneratedGraph) -> None:
    check_isolated_sites(graph.gm)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(graph=graphs(max_steps=16, dead_code=True))
def test_index_and_engine_agree_with_the_reference_many_examples(graph: GeneratedGraph) -> None:
    check_index_keeps_every_match(graph.gm)
    check_first_rewrite_and_fixpoint(graph.gm)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(graph=site_graphs(max_sites=10))
def test_isolated_sites_many_examples(graph: GeneratedGraph) -> None:
    check_isolated_sites(graph.gm)
