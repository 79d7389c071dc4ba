"""What a pass may leave out: the nodes its narrowing rules out, the nodes outside the reach of the
previous pass's changes (its worklist), and, until it first fires, the candidates whose outcome the
previous pass already knows (looked at after every change within their reach: settled).

Leaving them out must change nothing but the work done: on random graphs and on the benchmark's
block, ``apply`` gives the same code and the same report (counts, anchors in order, skips, passes)
as an engine that visits, in every pass, every node a rule may anchor at.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings

import fxrules
from fxrules.engine.report import KEEP_EXAMPLES, ReportBuilder
from fxrules.engine.scheduler import VisitEverything, reach_of
from fxrules.lang.ir import RuleSet
from tests.conftest import apply_outcome, slow_examples, trace
from tests.match.test_compiled import EXACT
from tests.strategies import GeneratedGraph, graphs

#: Rules that cascade (one rewrite makes or breaks another match), with guards that do not count
#: users and single outputs, so that passes do settle.
CASCADING = """
rule neg_times_neg:
    mul(neg(a), neg(b)) => a * b

rule neg_squared:
    pattern:
        n = neg(x)
        return mul(n, n)
    replace:
        return x * x

rule relu_after_relu:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule add_sub:
    (x + y) - y => x
"""

#: Without any_mul (torch.mul(x, _) => x), which can replace a node by a literal that is then a method's receiver.
RULES = (fxrules.parse(CASCADING, filename="cascading.fxr") + RuleSet(tuple(r for r in EXACT if r.name != "any_mul"))
         + fxrules.load("algebra.fxr"))
COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def apply_both_ways(gm: torch.fx.GraphModule) -> tuple[Any, Any, int, int]:
    """(outcome settling, outcome visiting everything, attempts settling, attempts visiting everything)."""
    settling = copy.deepcopy(gm)
    report = fxrules.apply(settling, RULES)
    report_all = fxrules.apply(gm, RULES, scheduler=VisitEverything)
    attempts = sum(r.attempts for r in report.rules)
    attempts_all = sum(r.attempts for r in report_all.rules)
    return apply_outcome(settling, report), apply_outcome(gm, report_all), attempts, attempts_all


def test_the_rules_settle() -> None:
    reach = reach_of(RULES)
    assert not (reach.multi_output or reach.counts_users)


@settings(max_examples=60, **COMMON)
@given(graph=graphs(dead_code=False))
def test_settling_changes_nothing_but_the_work(graph: GeneratedGraph) -> None:
    settled, everything, attempts, attempts_all = apply_both_ways(graph.gm)
    assert settled == everything
    assert attempts <= attempts_all


@pytest.mark.slow
@settings(max_examples=slow_examples(300), **COMMON)
@given(graph=graphs(max_steps=16, dead_code=False))
def test_settling_changes_nothing_but_the_work_many_examples(graph: GeneratedGraph) -> None:
    settled, everything, _, _ = apply_both_ways(graph.gm)
    assert settled == everything


def test_a_later_pass_that_fires_visits_its_settled_nodes_after_that() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        first = torch.neg(n)  # double_neg waits: n is also used by `later`, until pass 1 rewrites that
        s = (torch.relu(y) + n) - n  # add_sub (pass 1) leaves torch.relu(y)
        later = torch.relu(s)  # relu_after_relu fires in pass 2, after first (settled) fires
        return first, later, torch.relu(torch.relu(later))

    gm = trace(f)
    settled, everything, _, _ = apply_both_ways(gm)
    assert settled == everything
    assert settled["passes"] >= 2


def test_the_benchmark_block_settles_its_second_pass() -> None:
    bench = pytest.importorskip("benchmarks.bench_apply")
    gm = trace(bench.Blocks(2))
    settled, everything, attempts, attempts_all = apply_both_ways(gm)
    assert settled == everything and settled["passes"] == 2
    assert attempts < attempts_all


def test_skip_counts_count_each_node_once_however_often_it_is_tried() -> None:
    # More skipped nodes than the report keeps examples of: revisiting one must not count it again.
    ruleset = fxrules.parse("rule r:\n    torch.neg(torch.neg(x)) => x\n")
    builder = ReportBuilder(ruleset)
    rule = ruleset["r"]
    for _ in range(2):
        for index in range(KEEP_EXAMPLES + 5):
            builder.skipped(rule, f"neg_{index}", "escaping user", lambda: "detail")
    report = builder.build(0, 0, 0.0)
    assert report["r"].skip_counts == {"escaping user": KEEP_EXAMPLES + 5}
    assert len(report["r"].skipped) == KEEP_EXAMPLES


def test_a_guard_counting_users_sees_the_users_a_later_rewrite_gives_its_capture() -> None:
    rules = fxrules.parse("""
rule shared_relu:
    pattern:
        return torch.relu(x)
    where:
        num_users(x) == 4
    replace:
        return torch.sigmoid(x)

rule mul_one:
    y * 1 => y
""")

    def f(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = torch.neg(a)  # used by relu, mul, cos: 3 users until mul_one hands it mul's two users
        r = torch.relu(x)  # before mul: pass 1 has looked at it when mul_one fires
        m = x * 1
        return r, m + 1, m + 2, torch.cos(x)

    gm = trace(f)
    everywhere = copy.deepcopy(gm)
    report = fxrules.apply(gm, rules)
    assert (report.counts(), report.passes) == ({"shared_relu": 1, "mul_one": 1}, 3)
    assert fxrules.apply(gm, rules).counts() == {}  # a fixpoint
    fxrules.apply(everywhere, rules, scheduler=VisitEverything)
    assert gm.code == everywhere.code
