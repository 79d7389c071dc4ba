"""The whole-graph narrowing of candidates (CompiledRule.candidates, RuleIndex.anchors) never loses a match.

* The invariant: wherever a compiled rule's ``may_match`` holds (and wherever the interpreter finds
  a match or a skip), the node is among ``compile_rule(rule).candidates(Candidates(graph))``, and, for a
  part ``among`` of the graph, among ``candidates(Candidates(graph), among)`` (which stays within
  ``among``).  Checked on graphs that spell the operations every way: keywords holding the literal or
  the operand (``torch.add(x, other=7)``), literals True/1/1.0/0.0/-0.0/None/strings, lists of nodes,
  slices, tensors and raw SymInts and SymFloats in the arguments, methods, families (function, method,
  ``F.``, aten members), aten graphs from ``make_fx`` and ``torch.export`` (nodes calling overloads,
  rules naming packets), ``A | B`` roots, DAG patterns, ``...``, typed captures, and random graphs
  (with shape metadata on every node, on none, or on some).
* ``RuleIndex.anchors``: a key shared with a rule on an attribute keeps the nodes that rule may match;
  anchors among a region stay in it.
* Arguments that refuse ``hash()`` (raw SymFloats) are tested node by node.

``apply`` with narrowing against ``apply`` without is in tests/engine/test_narrowing.py.
"""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fxrules
from fxrules.engine.scheduler import narrowing
from fxrules.lang.ir import RuleSet
from fxrules.match.compiled import compile_rule, compile_ruleset
from fxrules.match.matcher import RuleIndex
from fxrules.match.narrowing import Candidates
from tests.conftest import trace
from tests.match.test_compiled import EXACT, TYPED, check_candidates
from tests.match.test_compiled_families import FAMILY_RULES
from tests.match.test_differential import RULES as DIFFERENTIAL_RULES
from tests.strategies import GeneratedGraph, graphs, with_metadata

F = torch.nn.functional
aten = torch.ops.aten
COMMON = {"deadline": None, "database": None, "derandomize": True,
          "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}

#: Rules whose compiled matchers narrow by every kind of requirement: literals of every type, in keywords,
#: operands (function, method, family, aten packet and overload), lists, slices, alternatives, DAGs, `...`.
NARROW_RULES = fxrules.parse("""
rule add7:
    x + 7 => x

rule tadd7:
    torch.add(x, 7) => x

rule tadd_other7:
    torch.add(x, other=7) => x

rule add_fam7:
    add(x, 7) => x

rule add_fam1f:
    add(x, 1.0) => x

rule mul_fam1:
    mul(x, 1) => x

rule mul_true:
    torch.mul(x, True) => x

rule mul_negzero:
    torch.mul(x, -0.0) => x

rule mul_zero:
    torch.mul(x, 0.0) => x

rule mul_none:
    torch.mul(x, None) => x

rule aten_add7:
    aten.add(x, 7) => x

rule aten_add_tensor7:
    aten.add.Tensor(x, 7) => x

rule aten_neg_neg:
    aten.neg(aten.neg(x)) => x

rule neg_neg_fam:
    neg(neg(x)) => x

rule neg_relu_fam:
    neg(relu(x)) => x

rule relu_neg_fam:
    relu(neg(x)) => x

rule sum_fam:
    sum(neg(x), 1) => x

rule softmax_fam:
    softmax(neg(x), -1) => x

rule cat_neg:
    torch.cat([torch.neg(a), b]) => a

rule neg_cat:
    torch.neg(torch.cat([a, b])) => a

rule neg_cat_fam:
    neg(cat([a, b], 0)) => a

rule gelu_tanh:
    F.gelu(x, approximate="tanh") => x

rule gelu_tanh_fam:
    gelu(neg(x), approximate="tanh") => x

rule meth_add7:
    x.add(7) => x

rule meth_neg_neg:
    x.neg().neg() => x

rule meth_add_neg:
    x.add(torch.neg(y)) => x

rule alt_root:
    torch.neg(torch.relu(x)) | torch.neg(torch.sigmoid(x)) | torch.add(x, 5) => x

rule dag:
    pattern:
        n = torch.neg(x)
        return n * n
    replace:
        return x * x

rule dag_fam:
    pattern:
        n = neg(x)
        return mul(n, neg(n))
    replace:
        return x

rule rest_add:
    torch.add(torch.neg(x), ...) => x

rule typed:
    given:
        d: int
    pattern:
        return torch.sum(torch.neg(x), d)
    replace:
        return x

rule neg_slice:
    torch.neg(x)[1:2] => x

rule neg_item:
    torch.neg(x)[1] => x

rule transpose_fam:
    transpose(transpose(x, 0, 1), 0, 1) => x

rule div_floor:
    torch.div(neg(x), y, rounding_mode="floor") => x

rule div_trunc_method:
    x.div(y, rounding_mode="trunc") => x

rule sub_alpha:
    torch.sub(x, torch.neg(y), alpha=2) => x

rule clamp_none:
    torch.clamp(torch.neg(x), None, 1.0) => x

rule pow_two:
    pow(neg(x), 2) => x

rule pow_two_float:
    pow(x, 2.0) => x

rule operator_add_neg:
    operator.add(torch.neg(x), 1) => x

rule view_sizes:
    torch.neg(x).view(2, 3) => x

rule lt_zero:
    torch.lt(x, 0) => x

rule eq_true:
    torch.eq(x, True) => x
""", filename="narrow.fxr")


# ------------------------------------------------ the invariant (check_candidates: tests/match/test_compiled.py)


def candidate_names(gm: torch.fx.GraphModule, rules: RuleSet, name: str) -> set[str] | None:
    compiled = compile_rule(rules[name])
    found = compiled.candidates(Candidates(gm.graph))
    return None if found is None else {n.name for n in found}


def matched_names(gm: torch.fx.GraphModule, rules: RuleSet, name: str) -> set[str]:
    compiled = compile_rule(rules[name])
    return {n.name for n in gm.graph.nodes if compiled.may_match(n)}


class Spellings(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        return (
            x + 7, torch.add(x, 7), torch.add(x, other=7), x.add(7), x.add(other=7), 7 + x, torch.add(x, 7.0),
            torch.add(x, True), torch.add(x, 1.0), torch.add(x, other=1.0), x * 1, x.mul(1), torch.mul(x, 1.0),
            torch.mul(x, True), torch.mul(x, -0.0), torch.mul(x, 0.0), torch.mul(x, 0), torch.mul(x, False),
            torch.cat([n, y]), torch.neg(torch.cat([x, y])), torch.neg(torch.cat((x, y), 0)),
            torch.neg(torch.cat([x, y], dim=0)), torch.neg(torch.concat([x, y])),
            F.gelu(x, approximate="tanh"), F.gelu(-x, approximate="tanh"), F.gelu(x), x.neg().neg(), -(-x),  # noqa: B002
            torch.neg(x.neg()), torch.neg(torch.relu(x)), torch.neg(F.relu(y)), torch.neg(x.relu()), torch.relu(-x),
            F.relu(x.neg()), torch.neg(torch.sigmoid(x)), torch.add(x, 5), torch.add(x, 5, alpha=1),
            n * n, torch.mul(n, n), torch.mul(n, torch.neg(n)), torch.add(n, y), torch.add(n, y, alpha=3),
            torch.add(y, n), torch.add(y, other=n), x.add(other=torch.neg(y)),
            torch.sum(n, 1), torch.sum(n, dim=1), n.sum(1), torch.sum(n, 1, keepdim=False), torch.sum(n, (1,)),
            torch.softmax(n, -1), n.softmax(dim=-1), F.softmax(n, -1),
            n[1:2], n[1], n[1, 2], x[1:2],
            torch.transpose(torch.transpose(x, 0, 1), 0, 1), x.transpose(0, 1).transpose(0, 1),
            n.view(-1), n.view(2, 3), n.view((2, 3)), n.view([2, 3]),
            torch.div(n, y, rounding_mode="floor"), torch.div(x, y, rounding_mode="trunc"),
            x.div(y, rounding_mode="trunc"), x.div(y, rounding_mode="floor"),
            torch.sub(x, torch.neg(y), alpha=2), torch.sub(x, y, alpha=2),
            torch.clamp(n, None, 1.0), torch.clamp(n, max=1.0), torch.clamp(n, min=None, max=1.0),
            torch.pow(n, 2), n.pow(2), n ** 2, torch.pow(x, 2.0), x ** 2.0,
            n + 1, torch.lt(x, 0), x < 0, torch.eq(x, True), x == True, x == 1,  # noqa: E712
        )


def test_symbolic_graph_of_every_spelling() -> None:
    gm = trace(Spellings())
    assert check_candidates(gm, NARROW_RULES) >= 60
    assert check_candidates(gm, EXACT) >= 1
    assert check_candidates(gm, FAMILY_RULES) >= 15


def test_keywords_holding_the_literal_or_the_operand_are_candidates() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.add(x, other=7), x.add(other=7), torch.add(x, 8), x.add(other=torch.neg(y)),
                torch.add(y, other=torch.neg(x)), torch.div(torch.neg(x), y, rounding_mode="floor"))

    gm = trace(f)
    assert candidate_names(gm, NARROW_RULES, "tadd_other7") >= {"add"}
    assert candidate_names(gm, NARROW_RULES, "tadd7") >= {"add"}
    assert "add_1" not in candidate_names(gm, NARROW_RULES, "tadd7")  # torch.add(x, 8): ruled out
    assert candidate_names(gm, NARROW_RULES, "meth_add7") >= {"add_1"}
    assert candidate_names(gm, NARROW_RULES, "add_fam7") >= {"add", "add_1"}
    assert candidate_names(gm, NARROW_RULES, "meth_add_neg") >= {"add_3"}
    assert candidate_names(gm, NARROW_RULES, "rest_add") >= {"add_4"}
    assert candidate_names(gm, NARROW_RULES, "div_floor") == {"div"}
    assert check_candidates(gm, NARROW_RULES) >= 8


@pytest.mark.parametrize(("rule", "spelling", "expected"), [
    ("mul_true", lambda x: torch.mul(x, True), True),
    ("mul_true", lambda x: torch.mul(x, 1), False),  # 1 == True, yet not the literal True
    ("mul_fam1", lambda x: torch.mul(x, 1), True),
    ("mul_fam1", lambda x: x * True, False),
    ("mul_fam1", lambda x: x.mul(1), True),
    ("add_fam1f", lambda x: torch.add(x, 1.0), True),
    ("add_fam1f", lambda x: x + 1, False),
    ("mul_zero", lambda x: torch.mul(x, 0.0), True),
    ("mul_zero", lambda x: torch.mul(x, -0.0), False),
    ("mul_negzero", lambda x: torch.mul(x, -0.0), True),
    ("mul_negzero", lambda x: torch.mul(x, 0.0), False),
    ("mul_none", ((torch.mul, "x", None),), True),  # built, not traced: torch.mul refuses None
    ("mul_none", ((torch.mul, "x", 0),), False),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), True),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="none"), True),  # approximate has a default: not required
    ("div_trunc_method", lambda x: x.div(x, rounding_mode="trunc"), True),
    ("eq_true", lambda x: torch.eq(x, True), True),
    ("lt_zero", lambda x: torch.lt(x, 0), True),
    ("lt_zero", lambda x: torch.lt(x, 0.0), False),
])
def test_literals_of_every_type(rule: str, spelling: Any, expected: bool) -> None:
    gm = build(*spelling) if isinstance(spelling, tuple) else trace(spelling)
    anchor = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")][-1]
    compiled = compile_rule(NARROW_RULES[rule])
    assert compiled is not None
    assert compiled.may_match(anchor) is expected
    candidates = compiled.candidates(Candidates(gm.graph))
    assert candidates is not None
    if expected:
        assert anchor in candidates
        assert anchor in compiled.candidates(Candidates(gm.graph), {anchor})  # type: ignore[operator]
    check_candidates(gm, NARROW_RULES)


def test_lists_slices_and_unhashable_arguments() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        return (torch.cat([n, y]), torch.cat([y, n]), torch.neg(torch.cat([x, y])), n[1:2], n[1], n[0:1], n[..., 1],
                n[1:2] + 7, x[1:2].add(7), torch.neg(n)[1:2], x[1:2] * 1)

    gm = trace(f)
    assert candidate_names(gm, NARROW_RULES, "cat_neg") >= {"cat"}
    assert candidate_names(gm, NARROW_RULES, "neg_cat") >= {"neg_1"}
    slices = candidate_names(gm, NARROW_RULES, "neg_slice")
    assert slices is not None and {"getitem", "getitem_2"} <= slices
    assert matched_names(gm, NARROW_RULES, "neg_slice") <= slices
    assert check_candidates(gm, NARROW_RULES) >= 8


def build(*calls: tuple[Any, ...]) -> torch.fx.GraphModule:
    """A graph of ``(target, *args)`` calls on one input ``x`` (a string target is a method); the last is
    the output.  An argument "x" or an int index into earlier calls (as ("node", i)) is a node."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    made: list[torch.fx.Node] = []

    def value(arg: Any) -> Any:
        if arg == "x":
            return x
        if isinstance(arg, tuple) and len(arg) == 2 and arg[0] == "node":
            return made[arg[1]]
        return arg

    for target, *args in calls:
        values = tuple(value(a) for a in args)
        made.append(graph.call_method(target, values) if isinstance(target, str)
                    else graph.call_function(target, values))
    graph.output(made[-1])
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_tensors_and_raw_symints_in_arguments() -> None:
    env = ShapeEnv()
    symint = env.create_unbacked_symint()  # hash() raises TypeError: tested node by node
    constant = torch.tensor(7)
    with pytest.warns(UserWarning):
        gm = build((torch.neg, "x"), (torch.add, ("node", 0), constant), (torch.add, ("node", 0), 7),
                   (torch.add, "x", symint), (torch.add, ("node", 0), symint), (torch.add, "x", [symint, 7]),
                   (torch.mul, ("node", 0), 1), (torch.mul, constant, ("node", 0)))
    assert candidate_names(gm, NARROW_RULES, "tadd7") == {"add_1"}
    assert candidate_names(gm, NARROW_RULES, "rest_add") == {"add", "add_1", "add_3"}
    assert check_candidates(gm, NARROW_RULES) >= 4
    report = fxrules.apply(gm, NARROW_RULES)
    assert report.counts()["tadd7"] == 1


def test_aten_graph_from_make_fx() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        return (x + 7, torch.add(x, 7.0), x * 1, torch.mul(x, -0.0), torch.cat([n, y]), torch.neg(torch.cat([x, y])),
                F.gelu(-x, approximate="tanh"), -(-x), torch.neg(torch.relu(x)), torch.relu(-x), n * n,  # noqa: B002
                torch.mul(n, torch.neg(n)), torch.sum(n, 1), torch.softmax(n, -1), n[1:2], n[1],
                torch.transpose(torch.transpose(x, 0, 1), 0, 1), torch.pow(n, 2), torch.lt(x, 0))

    gm = make_fx(f)(torch.randn(3, 3), torch.randn(3, 3))
    assert any(isinstance(n.target, torch._ops.OpOverload) for n in gm.graph.nodes)
    aten_add7 = candidate_names(gm, NARROW_RULES, "aten_add7")  # a packet: nodes call aten.add.Tensor
    assert aten_add7 is not None and matched_names(gm, NARROW_RULES, "aten_add7") <= aten_add7
    assert len(matched_names(gm, NARROW_RULES, "aten_add7")) >= 1
    assert matched_names(gm, NARROW_RULES, "aten_add_tensor7") <= candidate_names(gm, NARROW_RULES, "aten_add_tensor7")
    assert len(matched_names(gm, NARROW_RULES, "aten_neg_neg")) >= 1
    assert len(matched_names(gm, NARROW_RULES, "neg_neg_fam")) >= 1
    assert check_candidates(gm, NARROW_RULES) >= 15
    assert check_candidates(gm, FAMILY_RULES) >= 5


def test_aten_graphs_from_export_static_and_dynamic() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            n = torch.neg(x)
            return (n.view(x.shape[0] * 1, -1), x + 7, torch.add(n, y) * 1, n.sum(1) + 0, torch.cat([n, y]) * 1.0,
                    n[0:x.shape[0]], -(-x), torch.neg(torch.relu(y)))  # noqa: B002

    inputs = (torch.randn(4, 3), torch.randn(4, 3))
    dim = torch.export.Dim("d")
    for dynamic in (None, ({0: dim}, {0: dim})):
        program = torch.export.export(M(), inputs, dynamic_shapes=dynamic).run_decompositions()
        gm = program.graph_module
        assert check_candidates(gm, NARROW_RULES) >= 6
        assert check_candidates(gm, FAMILY_RULES) >= 3
        assert check_candidates(gm, DIFFERENTIAL_RULES) >= 3


def test_alternatives_dags_rest_and_typed_captures() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = torch.neg(x)
        return (torch.neg(torch.relu(x)), torch.neg(torch.sigmoid(y)), torch.add(x, 5), torch.add(x, 6),
                n * n, torch.neg(y) * n, torch.mul(n, torch.neg(n)), torch.add(n, y, alpha=3), torch.add(y, n),
                torch.sum(n, 1), torch.sum(n, dim=0), torch.sum(x, 1))

    gm = trace(f)
    alt = candidate_names(gm, NARROW_RULES, "alt_root")
    assert alt is not None and {"neg_1", "neg_2", "add"} <= alt and "add_1" not in alt
    assert matched_names(gm, NARROW_RULES, "dag") <= candidate_names(gm, NARROW_RULES, "dag")  # type: ignore[operator]
    assert "mul" in candidate_names(gm, NARROW_RULES, "dag")  # type: ignore[operator]
    assert {"add_2", "add_3"} <= candidate_names(gm, NARROW_RULES, "rest_add")  # type: ignore[operator]
    assert {"sum_1", "sum_2"} <= candidate_names(gm, NARROW_RULES, "typed")  # type: ignore[operator]
    assert check_candidates(gm, NARROW_RULES) >= 10


def test_families_with_module_members_are_not_narrowed() -> None:
    # relu and softmax have nn.Module members: no index keys, so every anchor node stays a candidate.
    gm = trace(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Softmax(-1)))
    assert candidate_names(gm, NARROW_RULES, "relu_neg_fam") is None
    assert candidate_names(gm, FAMILY_RULES, "softmax_last") is None


@settings(max_examples=40, **COMMON)
@given(graph=graphs(max_steps=12, dead_code=True).flatmap(with_metadata))
def test_invariant_on_random_graphs(graph: GeneratedGraph) -> None:
    check_candidates(graph.gm, NARROW_RULES)
    check_candidates(graph.gm, FAMILY_RULES)
    check_candidates(graph.gm, DIFFERENTIAL_RULES)
    check_candidates(graph.gm, TYPED)


# ---------------------------------------------------------------- the rule index


def test_a_key_shared_with_a_rule_on_an_attribute_keeps_the_nodes_that_rule_may_match() -> None:
    """An attribute operand does not narrow (the graph's index keys attributes by name): the rule on it keeps
    its anchor nodes while the other rule filed under the same key is narrowed to none."""
    rules = fxrules.parse("""
rule add_seven:
    torch.add(x, 7) => x

rule add_attribute:
    given:
        p: Attr
    pattern:
        return torch.add(x, p)
    replace:
        return torch.sub(x, p)
""")
    class AddBuffer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("p", torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.add(x, self.p)

    gm = trace(AddBuffer())
    found = Candidates(gm.graph)
    narrowed = narrowing(compile_ruleset(rules).matchers, found)
    assert narrowed(rules["add_seven"]) == set()
    assert {n.name for n in RuleIndex(gm, rules).anchors(found, narrowed)} == {"add"}
    report = fxrules.apply(gm, rules)
    assert report.counts() == {"add_attribute": 1}


def test_anchors_among_a_region_stay_in_it_and_keep_every_possible_match() -> None:
    gm = trace(Spellings())
    index = RuleIndex(gm, NARROW_RULES)
    nodes = list(gm.graph.nodes)
    for region in (set(nodes[::3]), set(nodes[1::2]), set(nodes[-10:])):
        found = Candidates(gm.graph)
        anchors = index.anchors(found, narrowing(compile_ruleset(NARROW_RULES).matchers, found, region), region)
        assert anchors <= region
        for node in region:
            for rule in index.rules_at(node):
                if compile_rule(rule).may_match(node):
                    assert node in anchors, (rule.name, node.name)


# ---------------------------------------------------------------- arguments that refuse hash()


def symfloat_graph() -> torch.fx.GraphModule:
    symfloat = ShapeEnv().create_unbacked_symfloat()  # hash() raises GuardOnDataDependentSymNode
    with pytest.warns(UserWarning):
        return build((torch.mul, "x", symfloat), (torch.mul, ("node", 0), 2.0))


def test_a_raw_symfloat_argument_is_tested_node_by_node() -> None:
    gm = symfloat_graph()
    rules = fxrules.parse("rule mul_two:\n    torch.mul(x, 2.0) => x\n")
    compiled = compile_rule(rules["mul_two"])
    assert compiled is not None
    assert {n.name for n in compiled.candidates(Candidates(gm.graph)) or ()} == {"mul_1"}
    assert fxrules.apply(gm, rules).counts() == {"mul_two": 1}


def test_operator_functions_narrow_like_torch_functions() -> None:
    gm = trace(lambda x: operator.add(torch.neg(x), 1))
    assert candidate_names(gm, NARROW_RULES, "operator_add_neg") == {"add"}
