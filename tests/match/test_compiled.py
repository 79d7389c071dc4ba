"""The compiled matcher (fxrules.match.compiled), the one the engine runs, against the interpreter kept as its
oracle (tests/reference_matcher.py).

* On random graphs (with shape metadata on every node, on none, or on some), at every node, every
  rule gives the interpreter's answer: the same match (nodes, bindings in the same order), None, or
  the same skip; tensor-typed rules included (dims, dtypes, ``Tensor[...] | None``).  With a tracer
  attached (``explain=True``) the answer is the same, and so is the near miss it records.
* Choices: a failure after an unexplored commutative choice starts over with that choice swapped;
  a skipped match goes on to the other operand orders (every execution, by the ``matching`` fixture).
* Every template kind compiles (modules, attributes, several outputs); the compiled ruleset is built
  once; ``explain=True`` visits the nodes ``apply`` visits and still reports the near misses at the
  nodes narrowing left out.
* Families and alternatives: tests/match/test_compiled_families.py.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from fxrules.lang.ir import Rule, RuleSet
from fxrules.match.compiled import compile_rule, compile_ruleset
from fxrules.match.matcher import Match, Matcher, Miss
from fxrules.match.narrowing import Candidates
from fxrules.match.skips import Skip
from tests.conftest import apply_outcome, slow_examples, trace
from tests.match.test_differential import RULES as DIFFERENTIAL_RULES
from tests.reference_matcher import ReferenceMatcher
from tests.strategies import GeneratedGraph, graphs, with_metadata

F = torch.nn.functional

#: Exact calls of every argument shape the compiled matcher reads: literals, keywords, defaults,
#: lists, slices, `...`, `_`, typed captures, commutative operators, DAG patterns and guards.
EXACT_RULES = """
rule neg_neg:
    torch.neg(torch.neg(x)) => x

rule times_one:
    x * 1 => x

rule times_one_float:
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

rule neg_times_neg_exact:
    torch.neg(a) * torch.neg(b) => a * b

rule view_as_rows:
    x.view(y.size(0), -1) => x.reshape(y.size(0), -1)

rule relu_sum_kept:
    pattern:
        return torch.relu(x) + torch.relu(y)
    where:
        x is not y
    replace:
        return torch.relu(x + y)
"""

#: Tensor-typed captures: dims symbols (shared by two captures, with `...`), dtypes, `Tensor[...] | None`,
#: a typed capture given a literal, under alternatives and commutative operations, and guards that read
#: dims and metadata.  The generated graphs' values are 3x3, 3x1, 1x3 or 1x1, of float dtypes.
TYPED_RULES = """
rule neg_neg_square:
    given:
        x: Tensor[N, N, dtype=float32|bfloat16]
    pattern:
        return neg(neg(x))
    replace:
        return x

rule mul_one_rows:
    given:
        x: Tensor[M, 3]
    pattern:
        return mul(x, 1) | (x * 1.0)
    replace:
        return x

rule add_zero_any:
    given:
        x: Tensor
    pattern:
        return x + 0
    replace:
        return x

rule product_shared_dims:
    given:
        a: Tensor[M, K]
        b: Tensor[K, M, dtype=float32|float64]
    pattern:
        return a * b
    replace:
        return torch.multiply(b, a)

rule mul_tensors:
    given:
        a: Tensor
        b: Tensor[dtype=float32]
    pattern:
        return mul(a, b)
    replace:
        return torch.multiply(b, a)

rule add_vector:
    given:
        x: Tensor[..., C]
        v: Tensor[C] | None
    pattern:
        return add(x, v)
    replace:
        return x - torch.neg(v)

rule relu_plus_guarded:
    given:
        x: Tensor[M, K, dtype=float32|float64]
    pattern:
        return torch.relu(x) + y
    where:
        K % 3 == 0 and y.ndim == 2
    replace:
        return y - torch.neg(torch.relu(x))

rule sum_twice_typed:
    given:
        x: Tensor[R, C]
        d: int
    pattern:
        return torch.sum(torch.sum(x, d, keepdim=True), d, keepdim=True)
    where:
        R >= C
    replace:
        return torch.sum(x, d, keepdim=True)

rule transpose_twice_typed:
    given:
        x: Tensor[A, B, dtype=float64|bfloat16]
    pattern:
        return transpose(transpose(x, 0, 1), 0, 1) | transpose(transpose(x, 1, 0), 0, 1)
    replace:
        return x

rule neg_square_typed:
    given:
        x: Tensor[N, N]
    pattern:
        n = neg(x)
        return n * n
    replace:
        return x * x

rule linear_optional_bias:
    given:
        x: Tensor[B, I]
        w: Tensor[O, I]
        b: Tensor[O] | None
    pattern:
        return F.linear(x, w, b)
    replace:
        return aten.linear.default(x, w, b)
"""

EXACT = fxrules.parse(EXACT_RULES, filename="exact.fxr")
TYPED = fxrules.parse(TYPED_RULES, filename="typed.fxr")
ALL_RULES = DIFFERENTIAL_RULES + EXACT + TYPED
COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def answer(matcher: Matcher, rule: Rule, node: torch.fx.Node) -> Match | Skip | None:
    try:
        return matcher.match(rule, node)
    except Skip as skip:
        return skip


def interpreted(rule: Rule, node: torch.fx.Node, gm: torch.fx.GraphModule) -> Match | Skip | None:
    return answer(ReferenceMatcher(gm), rule, node)


def compiled(rule: Rule, node: torch.fx.Node, gm: torch.fx.GraphModule) -> Match | Skip | None:
    return answer(Matcher(gm), rule, node)


def near_miss(matcher: Matcher, rule: Rule, node: torch.fx.Node) -> tuple[Any, Miss | None]:
    """The answer of ``matcher`` (a tracing one) and the near miss it recorded."""
    found = outcome(answer(matcher, rule, node))
    return found, matcher.misses.best


def outcome(found: Any) -> Any:
    """What an answer says, comparable across matchers: the match's nodes and bindings, or the skip."""
    if isinstance(found, Match):
        return ("match", found.outputs, found.nodes, tuple(found.bindings.items()))
    if isinstance(found, Skip):
        return ("skip", found.reason, found.detail)
    return found


def check_agreement(gm: torch.fx.GraphModule, rules: RuleSet) -> Counter[str]:
    """Compare at every (compiled rule, node), and check that the interpreter matches or skips only
    where the compiled ``may_match`` holds; how many of each answer there were (skips by reason)."""
    answers: Counter[str] = Counter()
    for rule in rules:
        matcher = compile_rule(rule)
        for node in gm.graph.nodes:
            found = compiled(rule, node, gm)
            expected = interpreted(rule, node, gm)
            assert outcome(found) == outcome(expected), f"{rule.name} at {node.name}:\n{gm.code}"
            assert expected is None or matcher.may_match(node), f"{rule.name} at {node.name}:\n{gm.code}"
            traced = near_miss(Matcher(gm, explain=True), rule, node)
            assert traced == near_miss(ReferenceMatcher(gm, explain=True), rule, node), \
                f"{rule.name} at {node.name}:\n{gm.code}"
            assert traced[0] == outcome(found)
            answers[type(found).__name__] += 1
            if isinstance(found, Skip):
                answers[found.reason] += 1
    return answers


def check_candidates(gm: torch.fx.GraphModule, rules: RuleSet) -> int:
    """For every compiled rule and node: the interpreter's match or skip implies ``may_match``, which
    implies the node is among the rule's candidates in the whole graph and in every part that holds it;
    candidates in a part stay in it.  The number of (rule, node) where ``may_match`` holds."""
    nodes = list(gm.graph.nodes)
    parts = [set(nodes[::2]), set(nodes[1::2]), set(nodes[len(nodes) // 2:]), set()]
    found = Candidates(gm.graph)
    hits = 0
    for rule in rules:
        compiled = compile_rule(rule)
        whole = compiled.candidates(found)
        fresh = compiled.candidates(Candidates(gm.graph))
        assert whole == fresh, f"{rule.name}: the shared `found` changes the answer"
        in_parts = [compiled.candidates(Candidates(gm.graph), part) for part in parts]
        for part, in_part in zip(parts, in_parts, strict=True):
            assert in_part is None or in_part <= part, rule.name
        for node in nodes:
            may_match = compiled.may_match(node)
            expected = interpreted(rule, node, gm)
            assert expected is None or may_match, f"{rule.name} at {node.name}: may_match rejects a match"
            if not may_match:
                continue
            hits += 1
            assert whole is None or node in whole, f"{rule.name} at {node.format_node()}:\n{gm.code}"
            for part, in_part in zip(parts, in_parts, strict=True):
                assert in_part is None or node not in part or node in in_part, f"{rule.name} at {node.name}"
    return hits


@settings(max_examples=60, **COMMON)
@given(graph=graphs(dead_code=True).flatmap(with_metadata))
def test_compiled_rules_answer_as_the_interpreter(graph: GeneratedGraph) -> None:
    check_agreement(graph.gm, ALL_RULES)
    check_candidates(graph.gm, ALL_RULES)


@pytest.mark.slow
@settings(max_examples=slow_examples(300), **COMMON)
@given(graph=graphs(max_steps=16, dead_code=True).flatmap(with_metadata))
def test_compiled_rules_answer_as_the_interpreter_many_examples(graph: GeneratedGraph) -> None:
    check_agreement(graph.gm, ALL_RULES)
    check_candidates(graph.gm, ALL_RULES)


def test_compiled_rules_agree_on_every_argument_shape() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        s = torch.sigmoid(y)
        return (
            torch.neg(torch.neg(x)), x * 1, x * 1.0, 1 * y, x * 2, torch.sigmoid(x) * x, y * torch.sigmoid(y),
            s * y + s, torch.add(x, 0, alpha=2), torch.add(x, 0, alpha=3), torch.add(x, y),
            torch.transpose(torch.transpose(x, 0, 1), 0, 1), torch.transpose(torch.transpose(x, 1, 0), 0, 1),
            torch.transpose(x, dim0=0, dim1=1).transpose(0, 1), x.transpose(0, 1).transpose(0, 1),
            torch.transpose(torch.transpose(x, 0, 1), 0, dim1=1), torch.transpose(torch.transpose(x, 0, 1), 1, 1),
            torch.transpose(torch.transpose(x, 0, 2), 0, 1),
            torch.sum(torch.sum(x, 1, keepdim=True), 1, keepdim=True),
            torch.sum(torch.sum(x, 1, keepdim=True), dim=0, keepdim=True),
            torch.neg(torch.cat([x, y])), torch.neg(torch.cat((x, y), 0)), torch.neg(torch.cat([x, y, x])),
            torch.mul(x, 3), n * n, torch.neg(n),
            torch.neg(x) * torch.neg(y), torch.relu(x) + torch.relu(y), torch.relu(x) + torch.relu(x), x[1:2, ::2],
            x.view(y.size(0), -1), x.view((y.size(0), -1)), x.view([y.size(0), -1]), x.view(y.size(1), -1),
        )

    gm = trace(f)
    answers = check_agreement(gm, ALL_RULES)
    assert answers["Match"] >= 20 and answers["Skip"] >= 3 and answers["NoneType"] > 100
    assert check_candidates(gm, ALL_RULES) >= 20
    anchor = next(n for n in gm.graph.nodes if n.target is torch.neg and n.args[0].target is torch.neg
                  and len(n.args[0].users) > 1)
    escaping = compiled(EXACT["neg_neg"], anchor, gm)
    assert isinstance(escaping, Skip) and escaping.reason == "escaping user"


@pytest.mark.parametrize("coverage", ["every node", "no node", "some nodes"])
def test_typed_rules_agree_whatever_metadata_the_graph_has(coverage: str) -> None:
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        square = x @ w.t() @ w
        return (
            F.linear(x, w, None), F.linear(x, w, bias=b), F.linear(x, w, x[0, 0]), F.linear(x, w),
            torch.neg(-s), torch.neg(-x), x * 1, x * 1.0, 1 * x, x * 2, x * w[0], torch.mul(x, x), x + 0, x + 1,
            x + b[0], s + b[:3], torch.relu(s) + s, torch.relu(x) + x,
            torch.sum(torch.sum(s, 0, keepdim=True), 0, keepdim=True),
            torch.transpose(torch.transpose(s, 1, 0), 0, 1), torch.neg(square) * torch.neg(square),
            s.to(torch.float64) * 1, s.to(torch.bfloat16) * s.to(torch.bfloat16).t(),
        )

    gm = trace(f)
    if coverage != "no node":
        ShapeProp(gm).propagate(torch.randn(2, 3), torch.randn(4, 3), torch.randn(4), torch.randn(3, 3))
    if coverage == "some nodes":  # the inputs x and b, and every other node
        for node in [n for n in gm.graph.nodes if n.name in ("x", "b")] + list(gm.graph.nodes)[5::2]:
            node.meta.clear()
    answers = check_agreement(gm, TYPED)
    assert check_candidates(gm, TYPED) >= 20
    least = {"every node": {"Match": 12}, "no node": {"missing metadata": 20},
             "some nodes": {"Match": 3, "missing metadata": 12}}[coverage]
    assert all(answers[answer] >= count for answer, count in least.items()), answers


def test_a_failure_after_an_unexplored_choice_starts_over_with_that_choice_swapped(
        matching: Callable[[torch.nn.Module], Matcher]) -> None:
    # (x + y) * y at (u + v) * u: the add matches unswapped (x=u, y=v), then the outer operand u is
    # not y; the interpreter backtracks into the add's swapped order (x=v, y=u) and matches.
    rules = fxrules.parse("rule r:\n    (x + y) * y => x\n")
    gm = trace(lambda u, v: ((u + v) * u).exp())  # returning the input v itself would be skipped ('alias')
    anchor = next(n for n in gm.graph.nodes if n.target is operator.mul)
    match = answer(matching(gm), rules["r"], anchor)
    assert isinstance(match, Match) and match.bindings["x"].name == "v"
    assert fxrules.apply(gm, rules).counts() == {"r": 1}


def test_a_choice_exhausted_where_it_was_made_is_a_miss(matching: Callable[[torch.nn.Module], Matcher]) -> None:
    rules = fxrules.parse("rule r:\n    x * 3 => x\n")
    gm = trace(lambda u: u * 2)
    anchor = next(n for n in gm.graph.nodes if n.target is operator.mul)
    assert answer(matching(gm), rules["r"], anchor) is None


def test_a_skipped_match_goes_on_to_the_other_order_then_reports_the_first_skip(
        matching: Callable[[torch.nn.Module], Matcher]) -> None:
    rules = fxrules.parse("rule r:\n    torch.neg(x) * y => torch.neg(x * y)\n")

    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        na, nb, nc = torch.neg(a), torch.neg(b), torch.neg(c)
        # as given, na escapes (it is an output too); swapped, x is b and the match is usable
        return na * nb, na, nc * c, nc

    gm = trace(f)
    usable_swapped, skipped = (n for n in gm.graph.nodes if n.target is operator.mul)
    match = answer(matching(gm), rules["r"], usable_swapped)
    assert isinstance(match, Match) and match.bindings["x"].name == "b"
    skip = answer(matching(gm), rules["r"], skipped)
    assert isinstance(skip, Skip) and skip.reason == "escaping user"
    report = fxrules.apply(gm, rules)
    assert report.counts() == {"r": 1} and report["r"].skipped[0].node == skipped.name



def test_when_every_operand_order_is_skipped_the_first_orders_skip_is_reported(
        matching: Callable[[torch.nn.Module], Matcher]) -> None:
    """Each operand order of a commutative call matches and is skipped for another reason: the skip reported is
    the first order's (the guard's), not the last's (escaping user), in the answer and in the report; a match
    skipped with no other order to try reports its own skip."""
    rules = fxrules.parse("rule r:\n    pattern:\n        return torch.neg(x) * y\n    where:\n        x.ndim == 1\n"
                          "    replace:\n        return torch.neg(x * y)\n")

    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        na, nb = torch.neg(a), torch.neg(b)
        # as given, x is a (2-d): the guard is false; swapped, x is b (1-d) and nb escapes (an output too)
        return na * nb, nb, b * nb

    gm = trace(f)
    ShapeProp(gm).propagate(torch.randn(2, 2), torch.randn(2))
    both_skipped, one_order = (n for n in gm.graph.nodes if n.target is operator.mul)
    skip = answer(matching(gm), rules["r"], both_skipped)
    assert isinstance(skip, Skip) and skip.reason == "guard false"
    alone = answer(matching(gm), rules["r"], one_order)
    assert isinstance(alone, Skip) and alone.reason == "escaping user"
    report = fxrules.apply(gm, rules)
    assert [(s.node, s.reason) for s in report["r"].skipped] == [(both_skipped.name, "guard false"),
                                                                 (one_order.name, "escaping user")]


#: A rule of each template kind the engine once ran without compiling: modules (by class, typed exactly,
#: used twice), attributes, families with module members, several outputs (one computed from another).
KIND_RULES = """
rule module_relu:
    given:
        m: nn.ReLU
    pattern:
        return torch.neg(m(x))
    replace:
        return torch.neg(torch.relu(x))

rule exact_module_twice:
    given:
        m: nn.Tanh
    pattern:
        return m(m(x))
    replace:
        return m(x)

rule attribute:
    given:
        p: Attr
    pattern:
        return torch.add(x, p) | (x + p)
    where:
        p.ndim == 1
    replace:
        return torch.sub(x, -p)

rule family_with_modules:
    relu(relu(x)) => relu(x)

rule three_of_x:
    pattern:
        a = torch.sigmoid(x)
        b = torch.tanh(a)
        c = torch.exp(b)
        return c, a
    replace:
        a = torch.sigmoid(x)
        return torch.tanh(a).exp(), a
"""


class Kinds(torch.nn.Module):
    """Modules (a ReLU, a Tanh called twice), a parameter added to values, sigmoid/tanh/exp chains."""

    def __init__(self) -> None:
        super().__init__()
        self.act, self.squash, self.bias = torch.nn.ReLU(), torch.nn.Tanh(), torch.nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.sigmoid(x)
        return (torch.neg(self.act(x)), self.squash(self.squash(x)), x + self.bias, torch.add(a, self.bias),
                torch.relu(self.act(x)), torch.exp(torch.tanh(a)), a, torch.exp(torch.sigmoid(x)))


def test_every_template_kind_compiles_and_answers_as_the_interpreter() -> None:
    class Leaves(torch.fx.Tracer):
        def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
            return True

    model = Kinds()
    gm = torch.fx.GraphModule(model, Leaves().trace(model))
    ShapeProp(gm).propagate(torch.randn(3))
    rules = fxrules.parse(KIND_RULES, filename="kinds.fxr")
    answers = check_agreement(gm, rules)
    assert answers["Match"] == 4 and answers["escaping user"] == 2, answers  # the attribute is used twice
    assert check_candidates(gm, rules) >= 6


def test_compiled_ruleset_is_built_once_per_ruleset_object() -> None:
    rules = EXACT + fxrules.parse("rule other:\n    torch.neg(x) * 1 => torch.neg(x)\n")
    assert compile_ruleset(rules) is compile_ruleset(rules)
    assert compile_ruleset(rules).matchers.keys() == {id(rule) for rule in rules}


def test_explain_reports_the_near_miss_at_a_node_narrowing_left_out() -> None:
    rules = fxrules.parse("rule mul_three:\n    x * 3 => x\n")
    gm = trace(lambda u: u * 2)
    report = fxrules.apply(gm, rules, explain=True)
    assert report["mul_three"].attempts == 0  # the pass leaves the node out, as without explain
    assert [(m.anchor, m.condition, m.detail) for m in report["mul_three"].near_misses] == [
        ("mul", "literal", "expected 3, found 2")]


@pytest.mark.parametrize("rules", [KIND_RULES, EXACT_RULES, TYPED_RULES])
def test_explain_visits_the_nodes_apply_visits_and_rewrites_the_same(rules: str) -> None:
    class Leaves(torch.fx.Tracer):
        def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
            return True

    ruleset = fxrules.parse(rules)
    found = []
    for explain in (False, True):
        model = Kinds()
        gm = torch.fx.GraphModule(model, Leaves().trace(model))
        ShapeProp(gm).propagate(torch.randn(3))
        report = fxrules.apply(gm, ruleset, explain=explain)
        found.append((apply_outcome(gm, report), [(rule.name, rule.attempts) for rule in report.rules]))
    assert found[0] == found[1]


def test_a_near_miss_of_a_pattern_with_several_outputs_names_the_output_that_failed() -> None:
    rules = fxrules.parse(KIND_RULES + """
rule relu_and_sigmoid:
    pattern:
        r = torch.relu(x)
        return r, torch.sigmoid(x)
    replace:
        return torch.clamp_min(x, 0.0), torch.sigmoid(x)
""", filename="kinds.fxr")
    gm = trace(lambda x: (torch.exp(torch.tanh(torch.relu(x))), torch.tanh(x)))
    report = fxrules.apply(gm, rules, explain=True)
    assert [(m.progress, m.condition, m.detail, str(m.span)) for m in report["three_of_x"].near_misses] == [
        (2, "target", "output 1 'c': expected torch.sigmoid, found relu 'relu'", "kinds.fxr:33:13")]
    assert [(m.progress, m.condition, m.detail, str(m.span)) for m in report["relu_and_sigmoid"].near_misses] == [
        (1, "target", "output 2: expected torch.sigmoid, found tanh 'tanh'", "kinds.fxr:44:19")]


def test_candidates_test_node_by_node_where_arguments_cannot_be_hashed() -> None:
    # `x[1:2]` holds a slice, which cannot be hashed: those nodes are tested one by one.
    rules = fxrules.parse("rule second_of_neg:\n    torch.neg(x)[1] => x\n\nrule add_seven:\n    x + 7 => x\n")

    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.neg(x)[1], torch.neg(x)[1:2], x[1], torch.neg(x)[0], x[0:1] + 7, x + 1

    gm = trace(f)
    found = Candidates(gm.graph)
    picked = {rule.name: {n.name for n in compile_rule(rule).candidates(found)}  # type: ignore[union-attr]
              for rule in rules}
    assert picked == {"second_of_neg": {"getitem"}, "add_seven": {"add"}}
    assert check_candidates(gm, rules) == 2


def test_pass_one_tries_only_the_candidates_found_for_the_whole_graph() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x + 1) + (x + 2) + torch.neg(torch.neg(x)) + torch.neg(x)

    gm = trace(f)
    report = fxrules.apply(gm, fxrules.parse("rule add_seven:\n    x + 7 => x\n\nrule neg_neg:\n"
                                             "    torch.neg(torch.neg(x)) => x\n"))
    # No add has a 7, nor gets one from neg_neg's rewrite (a 7 would wake it): none is tried.
    assert report["add_seven"].attempts == 0
    assert report["neg_neg"].attempts == 1 and report["neg_neg"].fired == 1  # only the outer neg of the pair


def test_a_match_a_rewrite_makes_at_a_node_ruled_out_before_fires_in_the_same_pass() -> None:
    # neg_1's operand is a mul when pass 1 starts: no neg(neg(..)) there until mul_one rewrites it, which
    # wakes it (the pass goes on to it, as it would have without narrowing).
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(x) * 1).exp()  # not the input itself: that rewrite is skipped ('alias')

    gm = trace(f)
    x = torch.randn(3)
    expected = gm(x)
    report = fxrules.apply(gm, fxrules.parse("rule mul_one:\n    x * 1 => x\n\nrule neg_neg:\n"
                                             "    torch.neg(torch.neg(x)) => x\n"))
    assert (report["mul_one"].fired, report["neg_neg"].fired, report.passes) == (1, 1, 2)
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_method", "output"]
    torch.testing.assert_close(gm(x), expected)


def test_a_call_binding_by_which_arguments_are_lists_is_read_by_name_whatever_its_arguments(
        matching: Callable[[torch.nn.Module], Matcher]) -> None:
    """``view`` binds ``view(size)`` or ``view(dtype)`` by whether its argument is a list: a size given as a list
    or tuple matches the pattern's ``size=`` by name, as loose ints do, and a dtype does not."""
    rules = fxrules.parse("rule r:\n    x.view(size=[a, b]) => x.reshape(a, b)\n")
    gm = trace(lambda x: (x.view(2, 3), x.view([2, 3]), x.view((2, 3)), x.view(size=[2, 3]), x.view(torch.int32)))
    views = [n for n in gm.graph.nodes if n.op == "call_method"]
    found = [answer(matching(gm), rules["r"], node) for node in views]
    assert [(m.bindings["a"], m.bindings["b"]) if isinstance(m, Match) else m for m in found] == [(2, 3)] * 4 + [None]

