"""What a pass leaves out changes nothing but the work: the fast paths (narrowing, waking, worklists, settled
nodes) give what the slow, obvious semantics give (visiting every anchor node in every pass).

* ``outcomes`` applies a rule set four ways to copies of one graph: as shipped; with ``explain=True`` (the
same matcher with a tracer attached); visiting every node a rule may anchor at in every pass (the
reference, ``scheduler=VisitEverything``); and that with ``explain=True``.  All four must give the same code,
counts, anchors and skips,
  when a rewrite makes a match ahead of it in the pass or beyond the reach of the next pass's worklist, and on
  random graphs where rewrites make literals.
* ``apply`` with narrowing gives what it gives with ``scheduler=VisitEverything``, on graphs spelling the
  operations every way, aten graphs and random graphs.  A node that a rewrite earlier in a pass makes matchable
  (a ``x + 0 => x`` redirect, a replacement that is a literal) is woken and tried in that same pass: the same
  rule fires there, ``max_passes`` that suffice without narrowing suffice with it, and the same skips are
  reported.
* Whether a node changed within ``steps`` use edges (settled nodes found upstream) agrees with a plain
  breadth-first walk.
"""

from __future__ import annotations

import copy
import operator
import random
from copy import deepcopy
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

import fxrules
from fxrules.engine.scheduler import Incremental, VisitEverything, changed_since
from fxrules.lang.ir import RuleSet
from tests.conftest import apply_outcome, slow_examples, trace
from tests.match.test_candidates import COMMON, NARROW_RULES, Spellings, symfloat_graph
from tests.match.test_compiled import EXACT
from tests.match.test_compiled_families import FAMILY_RULES
from tests.match.test_differential import RULES as DIFFERENTIAL_RULES
from tests.strategies import GeneratedGraph, graphs

F = torch.nn.functional


def outcomes(gm: torch.fx.GraphModule, rules: str | RuleSet, **kwargs: Any) -> dict[str, Any]:
    """Mode -> the outcome of applying ``rules`` to a copy of ``gm`` (or the error it raised)."""
    ruleset = fxrules.parse(rules) if isinstance(rules, str) else rules
    found: dict[str, Any] = {}
    for mode in ("shipped", "explained", "reference", "reference_explained"):
        copied = copy.deepcopy(gm)
        scheduler = VisitEverything if mode.startswith("reference") else Incremental
        try:
            report = fxrules.apply(copied, ruleset, explain=mode.endswith("explained"), scheduler=scheduler,
                                   **kwargs)
        except fxrules.FxrError as error:
            found[mode] = (type(error).__name__, str(error))
        else:
            found[mode] = apply_outcome(copied, report)
    return found


def assert_same_everywhere(gm: torch.fx.GraphModule, rules: str | RuleSet, **kwargs: Any) -> dict[str, Any]:
    """Every mode gives the reference's outcome; returns it."""
    found = outcomes(gm, rules, **kwargs)
    reference = found["reference"]
    for mode, outcome in found.items():
        assert outcome == reference, f"{mode} differs from the reference:\n{outcome}\n!=\n{reference}"
    return reference


def fired(outcome: dict[str, Any]) -> dict[str, int]:
    return {name: count for name, count, *_ in outcome["rules"] if count}


# ---------------------------------------------------------------- waking nodes ahead after a rewrite

def _graph(build: Any) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    build(graph)
    graph.lint()
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_literal_redirected_into_the_deepest_call_of_a_pattern_wakes_its_anchor() -> None:
    """``pick`` turns ``getitem`` into the literal 2; ``torch.mul(y, 2)`` is then the operand that
    ``neg_mul2`` needs at its anchor ``neg`` one use edge further: the pass left ``neg`` out (its operand
    lacked the literal), so the rewrite wakes it, however deep in the pattern the literal lands."""

    def build(graph: torch.fx.Graph) -> None:
        x, y = graph.placeholder("x"), graph.placeholder("y")
        picked = graph.call_function(operator.getitem, ((x, 2), 1))
        graph.output(graph.call_function(torch.neg, (graph.call_function(torch.mul, (y, picked)),)))

    rules = """
rule pick:
    operator.getitem((a, b), 1) => b

rule neg_mul2:
    torch.neg(torch.mul(x, 2)) => x * -2
"""
    gm = _graph(build)
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"pick": 1, "neg_mul2": 1}
    y = torch.randn(3)
    gm_copy = copy.deepcopy(gm)
    fxrules.apply(gm_copy, fxrules.parse(rules))
    torch.testing.assert_close(gm_copy(torch.randn(3), y), gm(torch.randn(3), y))


def test_a_later_pass_visits_a_match_its_rewrite_made_beyond_its_domain() -> None:
    """Pass 1: ``mk`` makes ``neg(neg(x))``.  Pass 2 looks around that only: ``double_neg`` fires there and
    makes ``mul`` ``x * x``, which makes ``relu`` (outside pass 2's domain) a match of ``sq``.  A pass that
    visits every node fires ``sq`` in pass 2; so does the worklist, which wakes the matches a rewrite makes
    beyond the pass's domain."""
    rules = """
rule mk:
    torch.cos(x) => torch.neg(torch.neg(x))

rule double_neg:
    torch.neg(torch.neg(x)) => x

rule sq:
    torch.relu(x * x) => x
"""
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(torch.cos(x) * x).exp())  # not returning the input x
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"mk": 1, "double_neg": 1, "sq": 1}
    assert outcome["passes"] == 3


def test_a_later_pass_visits_a_match_its_literal_made_beyond_its_domain() -> None:
    """As above, with a literal: ``pick`` (pass 2) makes ``mul``'s operand the literal 2, so ``neg`` two use
    edges after ``mk``'s new node is a match of ``neg_mul2``, and a later pass visits it."""
    rules = """
rule mk:
    torch.cos(x) => operator.getitem((x, 2), 1)

rule pick:
    operator.getitem((a, b), 1) => b

rule neg_mul2:
    torch.neg(torch.mul(x, 2)) => x * -2
"""
    gm = torch.fx.symbolic_trace(lambda x, y: torch.neg(torch.mul(y, torch.cos(x))))
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"mk": 1, "pick": 1, "neg_mul2": 1}


def test_a_later_pass_visits_a_match_whose_interior_lost_a_user_beyond_its_domain() -> None:
    """``m`` has two users, so ``neg(neg(y))`` cannot fire (escaping user) until ``drop`` (pass 2, in the
    domain of ``mk``'s new node) rewrites the other user of ``m`` away; a pass that visits every node then
    fires ``double_neg`` in that same pass."""
    rules = """
rule mk:
    torch.cos(x) => torch.sin(x)

rule drop:
    torch.sin(x) * y => x

rule double_neg:
    torch.neg(torch.neg(x)) => x
"""

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = torch.neg(y)
        return (torch.cos(x) * m).exp(), torch.neg(m).exp()  # not returning the inputs themselves

    gm = torch.fx.symbolic_trace(f)
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"mk": 1, "drop": 1, "double_neg": 1}


# ---------------------------------------------------------------- random graphs where rewrites make literals

#: ``pick`` replaces a node by a literal (0, 1 or 2), which then is the literal argument the other
#: rules need, at every depth of their patterns; ``sub_lit`` turns a literal into a node again.
LITERAL_RULES = fxrules.parse("""
rule pick:
    operator.getitem((a, b), 1) => b

rule neg_mul2:
    torch.neg(torch.mul(x, 2)) => x * -2

rule relu_neg_add1:
    torch.relu(torch.neg(torch.add(x, 1))) => torch.sigmoid(x)

rule mul_zero:
    torch.mul(x, 0) => torch.zeros_like(x)

rule tanh_tanh_sub2:
    torch.tanh(torch.tanh(torch.sub(x, 2))) => torch.cos(x)

rule sub_lit:
    torch.sub(x, 1) => torch.add(x, -1)
""", filename="literal_rules.fxr")

_LITERALS = (0, 1, 2)
_UNARY = (torch.neg, torch.relu, torch.tanh, torch.sigmoid)
_BINARY = (torch.mul, torch.add, torch.sub)


@st.composite
def literal_graphs(draw: st.DrawFn, max_steps: int = 12) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    inputs = [graph.placeholder(f"x{i}") for i in range(2)]
    tensors = list(inputs)
    scalars: list[Any] = []  # getitem nodes that `pick` makes literals
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(("pick", "unary", "binary", "binary")))
        if kind == "pick":
            scalars.append(graph.call_function(operator.getitem, ((draw(st.sampled_from(inputs)),
                                                                   draw(st.sampled_from(_LITERALS))), 1)))
        elif kind == "unary":
            tensors.append(graph.call_function(draw(st.sampled_from(_UNARY)), (draw(st.sampled_from(tensors)),)))
        else:
            other = draw(st.one_of(st.sampled_from(_LITERALS), *([st.sampled_from(scalars)] if scalars else []),
                                   st.sampled_from(tensors)))
            tensors.append(graph.call_function(draw(st.sampled_from(_BINARY)),
                                               (draw(st.sampled_from(tensors)), other)))
    sinks = [n for n in tensors if not n.users and n.op != "placeholder"] or [tensors[-1]]
    graph.output(tuple(sinks))
    for node in list(graph.nodes):  # picks nothing uses: not dead code, it would block nothing but clutter
        if node.op == "call_function" and node.target is operator.getitem and not node.users:
            graph.erase_node(node)
    graph.lint()
    return torch.fx.GraphModule(torch.nn.Module(), graph)


_COMMON = {"deadline": None, "database": None,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def _check_literal_graph(gm: torch.fx.GraphModule) -> None:
    found = outcomes(gm, LITERAL_RULES)
    assert found["shipped"] == found["reference"], gm.code
    assert found["explained"] == found["reference"], gm.code


@settings(max_examples=40, **_COMMON)
@given(gm=literal_graphs())
def test_rewrites_that_make_literals_change_nothing_but_the_work(gm: torch.fx.GraphModule) -> None:
    _check_literal_graph(gm)


@pytest.mark.slow
@settings(max_examples=slow_examples(400), **_COMMON)
@given(gm=literal_graphs(max_steps=20))
def test_rewrites_that_make_literals_change_nothing_but_the_work_many_examples(gm: torch.fx.GraphModule) -> None:
    _check_literal_graph(gm)


# ---------------------------------------------------------------- apply: with narrowing as without

def outcome(gm: torch.fx.GraphModule, rules: RuleSet, **kwargs: Any) -> tuple[Any, ...]:
    copy = deepcopy(gm)
    try:
        report = fxrules.apply(copy, rules, **kwargs)
    except fxrules.FxrError as error:
        return ("error", type(error).__name__)
    return copy.code, report.counts()


def same_as_without_narrowing(gm: torch.fx.GraphModule, rules: RuleSet, **kwargs: Any) -> tuple[Any, ...]:
    expected = outcome(gm, rules, scheduler=VisitEverything, **kwargs)
    found = outcome(gm, rules, **kwargs)
    assert found == expected
    return found


def test_visiting_everything_really_disables_narrowing() -> None:
    gm = trace(lambda x: (x + 1) + (x + 2))
    report = fxrules.apply(gm, fxrules.parse("rule add_seven:\n    x + 7 => x\n"), scheduler=VisitEverything)
    assert report["add_seven"].attempts == 3  # narrowed, it is 0 (tests/match/test_compiled.py)


@pytest.mark.parametrize("rules", [NARROW_RULES, EXACT, FAMILY_RULES, DIFFERENTIAL_RULES],
                         ids=["narrowing", "exact", "families", "differential"])
def test_apply_on_every_spelling_as_without_narrowing(rules: RuleSet) -> None:
    _, counts = same_as_without_narrowing(trace(Spellings()), rules)
    assert counts


def test_apply_on_aten_graphs_as_without_narrowing() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        return (x + 7, x * 1, -(-x), torch.neg(torch.relu(x)), n * n, torch.sum(n, 1), torch.cat([n, y]),  # noqa: B002
                torch.transpose(torch.transpose(x, 0, 1), 0, 1), torch.relu(torch.relu(y)))

    gm = make_fx(f)(torch.randn(3, 3), torch.randn(3, 3))
    for rules in (NARROW_RULES, FAMILY_RULES, DIFFERENTIAL_RULES):
        _, counts = same_as_without_narrowing(gm, rules)
        assert counts


@settings(max_examples=40, **COMMON)
@given(graph=graphs(max_steps=14, dead_code=True))
def test_apply_on_random_graphs_as_without_narrowing(graph: GeneratedGraph) -> None:
    for rules in (NARROW_RULES, FAMILY_RULES, DIFFERENTIAL_RULES):
        same_as_without_narrowing(graph.gm, rules)


# ---------------------------------------------------------------- settled nodes

def latest_change(changed: dict[torch.fx.Node, int], steps: int) -> dict[torch.fx.Node, int]:
    """The plain breadth-first walk: for every node at most ``steps`` use edges after a changed node, the
    latest change among those."""
    latest = dict(changed)
    layer = changed
    for _ in range(steps):
        reached: dict[torch.fx.Node, int] = {}
        for node, position in layer.items():
            for user in node.users:
                if reached.get(user, -1) < position:
                    reached[user] = position
        for node, position in reached.items():
            if latest.get(node, -1) < position:
                latest[node] = position
        layer = reached
    return latest


@settings(max_examples=25, **COMMON)
@given(graph=graphs(max_steps=12))
def test_changed_since_answers_as_latest_change(graph: GeneratedGraph) -> None:
    nodes = list(graph.gm.graph.nodes)
    chooser = random.Random(len(nodes))
    for steps in range(4):
        changed = {n: chooser.randrange(6) for n in chooser.sample(nodes, k=min(3, len(nodes)))}
        latest = latest_change(changed, steps)
        for node in nodes:
            for position in range(7):
                expected = latest.get(node, -1) >= position
                assert changed_since(node, position, changed, steps) is expected, (node.name, position)


# ---------------------------------------------------------------- narrowed once, while the pass rewrites

MIDPASS = """
rule add_zero:
    torch.add(x, 0) => x

rule neg_relu:
    torch.neg(torch.relu(x)) => torch.sigmoid(x)

rule abs_neg:
    torch.abs(torch.neg(x)) => torch.abs(x)
"""


def redirected(a: torch.Tensor) -> torch.Tensor:
    # neg's operand is an add when pass 1 starts; add_zero redirects it to the relu before neg is reached.
    return torch.abs(torch.neg(torch.add(torch.relu(a), 0)))


def test_the_mid_pass_example_without_narrowing() -> None:
    # Without narrowing, neg_relu fires at neg in pass 1, right after add_zero.
    code, counts = outcome(trace(redirected), fxrules.parse(MIDPASS), scheduler=VisitEverything)
    assert counts == {"add_zero": 1, "neg_relu": 1}
    assert "sigmoid" in code and "relu" not in code


def test_a_redirect_earlier_in_pass_one_is_seen_by_later_nodes() -> None:
    code, counts = outcome(trace(redirected), fxrules.parse(MIDPASS))
    assert counts == {"add_zero": 1, "neg_relu": 1}
    assert "sigmoid" in code and "relu" not in code


def test_a_redirect_earlier_in_a_later_pass_is_seen_by_later_nodes() -> None:
    rules = fxrules.parse("rule sub_zero:\n    torch.sub(x, 0) => torch.neg(torch.add(x, 0))\n" + MIDPASS)

    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.abs(torch.sub(torch.relu(a), 0))

    expected = outcome(trace(f), rules, scheduler=VisitEverything)
    assert expected[1] == {"sub_zero": 1, "add_zero": 1, "neg_relu": 1}
    assert outcome(trace(f), rules) == expected


def test_a_literal_a_replacement_puts_in_place_is_seen_in_the_same_pass() -> None:
    rules = fxrules.parse("""
rule sub_to_lit:
    torch.sub(x, y) => y

rule add7:
    torch.add(x, 7) => torch.relu(x)

rule neg_add:
    torch.neg(torch.add(x, y)) => torch.sigmoid(x)
""")

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.add(b, torch.sub(a, 7)))

    expected = outcome(trace(f), rules, scheduler=VisitEverything)
    assert expected[1] == {"sub_to_lit": 1, "add7": 1}
    assert outcome(trace(f), rules) == expected


def test_max_passes_that_sufficed_still_suffice() -> None:
    rules = fxrules.parse("rule mul_one:\n    x * 1 => x\n\nrule neg_neg:\n    torch.neg(torch.neg(x)) => x\n")

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(x) * 1).exp()  # not its input: that rewrite would be skipped ('alias')

    assert outcome(trace(f), rules, max_passes=2, scheduler=VisitEverything)[1] == {"mul_one": 1, "neg_neg": 1}
    fxrules.apply(trace(f), rules, max_passes=2)


def test_overlap_skips_are_still_reported() -> None:
    rules = fxrules.parse("rule relu_sig:\n    torch.relu(x) => torch.sigmoid(x)\n\n"
                          "rule neg_sig:\n    torch.neg(torch.sigmoid(x)) => torch.tanh(x)\n")

    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.relu(a))

    before = fxrules.apply(trace(f), rules, scheduler=VisitEverything)
    after = fxrules.apply(trace(f), rules)
    assert before["neg_sig"].skip_counts == {"overlap": 1}
    assert after["neg_sig"].skip_counts == before["neg_sig"].skip_counts


# ---------------------------------------------------------------- arguments that refuse hash()

def test_a_raw_symfloat_argument_without_narrowing() -> None:
    report = fxrules.apply(symfloat_graph(), fxrules.parse("rule mul_two:\n    torch.mul(x, 2.0) => x\n"),
                           scheduler=VisitEverything)
    assert report.counts() == {"mul_two": 1}
