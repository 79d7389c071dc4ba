"""Compiled matchers of family patterns and alternatives against the interpreter kept as their oracle.

* Families: at every node of graphs that spell each operation every way (function, ``F.`` function,
  method, ``nn.Module`` with its attributes, aten overload, keyword and default arguments), every
  compiled family rule gives the interpreter's answer: the same match, None, or the same skip.
* Alternatives: the first option that matches wins; a failure further on (an operand, a skip)
  goes back to the next option, as the interpreter's backtracking does, also combined with
  commutative operand orders.
* The bundled rulesets: their compiled rules (tensor-typed ones included) agree with the interpreter on
  the real-model corpus, as built and with shape metadata.
"""

from __future__ import annotations

import operator
from collections import Counter

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from fxrules.match.compiled import compile_rule
from fxrules.match.matcher import Match
from fxrules.match.skips import Skip
from tests.conftest import trace
from tests.match.test_compiled import check_agreement, compiled, interpreted, outcome
from tests.models import MODELS
from tests.strategies import GeneratedGraph, graphs

nn = torch.nn
F = torch.nn.functional
aten = torch.ops.aten

FAMILY_RULES = fxrules.parse("""
rule relu_twice:
    relu(relu(x)) => relu(x)

rule neg_neg:
    neg(neg(x)) => x

rule mul_one:
    mul(x, 1) => x

rule add_zero:
    add(x, 0) => x

rule softmax_last:
    softmax(x, -1) => torch.exp(torch.log_softmax(x, -1))

rule softmax_any:
    softmax(x, d) => torch.exp(torch.log_softmax(x, d))

rule sum_dim:
    sum(x, d) => torch.nansum(x, d)

rule transpose_back:
    transpose(transpose(x, a, b), a, b) | transpose(transpose(x, a, b), b, a) => x

rule mul_one_either:
    mul(x, 1) | mul(x, 1.0) => x

rule sigmoid_gate:
    mul(sigmoid(x), x) => F.silu(x)

rule dropout_off:
    dropout(x, training=False, ...) => x

rule cat_one:
    cat([x], ...) => x

rule neg_of_sum:
    neg(x + y) | neg(torch.add(y, x)) => torch.neg(x) - y

rule gated_either:
    (torch.sigmoid(x) * y) | (torch.tanh(x) * y) => y

rule shared:
    pattern:
        n = neg(x)
        return mul(n, n)
    replace:
        return x * x
""", filename="families.fxr")

COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


class Spellings(nn.Module):
    """Each operation the rules name, spelt every way a graph may spell it."""

    def __init__(self) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.relu_inplace = nn.ReLU(inplace=True)
        self.softmax_last = nn.Softmax(dim=-1)
        self.softmax_first = nn.Softmax(dim=0)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = -x
        s = torch.sigmoid(y)
        return (
            torch.relu(F.relu(x)), x.relu().relu(), self.relu(self.relu(x)), self.relu_inplace(torch.relu(y)),
            F.relu(x, inplace=False).relu(), -(-x), torch.neg(x.neg()), n * n, torch.neg(n),  # noqa: B002
            x * 1, torch.mul(x, 1), x.mul(1), 1 * y, torch.mul(x, 1.0), x * 2, torch.mul(x, y),
            torch.add(x, 0, alpha=1), x.add(0), torch.add(x, 0, alpha=3), x + 0, torch.add(x, 0.0),
            torch.softmax(x, -1), F.softmax(x, dim=-1), x.softmax(-1), self.softmax_last(x), self.softmax_first(y),
            F.softmax(x, 0), torch.softmax(x, dim=1, dtype=torch.float64),
            torch.sum(x, 0), x.sum(1), torch.sum(x), x.sum(dim=0, keepdim=True),
            torch.transpose(x.transpose(0, 1), 0, 1), x.transpose(1, 0).transpose(0, 1),
            torch.transpose(torch.transpose(y, 0, 1), 1, 0), torch.transpose(x.transpose(0, 1), 1, 1),
            torch.sigmoid(x) * x, x.sigmoid() * x, y * F.sigmoid(y), s * y + s, torch.tanh(x) * y,
            F.dropout(x, training=False), F.dropout(x, 0.1, False), self.drop(y), F.dropout(x, 0.0, training=True),
            torch.cat([x], 0), torch.cat((y,)), torch.concat([x]), torch.cat([x, y]),
            torch.neg(x + y), -(torch.add(y, x)), torch.neg(x - y),
        )


def spellings_module(training: bool) -> torch.fx.GraphModule:
    module = Spellings().train(training)
    return torch.fx.symbolic_trace(module)


def test_every_family_and_alternative_rule_compiles() -> None:
    assert [rule.name for rule in FAMILY_RULES if compile_rule(rule) is None] == []


@pytest.mark.parametrize("training", [False, True])
def test_family_rules_answer_as_the_interpreter_on_every_spelling(training: bool) -> None:
    answers = check_agreement(spellings_module(training), FAMILY_RULES)
    assert answers["Match"] >= 30 and answers["Skip"] >= 2 and answers["NoneType"] > 500


def test_family_rules_agree_on_an_aten_graph() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.relu(torch.relu(x)), -(-x), x * 1, torch.softmax(x, -1), torch.sum(x, 0),  # noqa: B002
                torch.transpose(torch.transpose(x, 0, 1), 1, 0), torch.sigmoid(y) * y, torch.cat([x]))

    inputs = (torch.randn(3, 3), torch.randn(3, 3))
    gm = torch.fx.experimental.proxy_tensor.make_fx(f)(*inputs)
    assert any(isinstance(n.target, torch._ops.OpOverload) for n in gm.graph.nodes)
    answers = check_agreement(gm, FAMILY_RULES)
    assert answers["Match"] >= 6


@settings(max_examples=60, **COMMON)
@given(graph=graphs(dead_code=True))
def test_family_rules_answer_as_the_interpreter_on_random_graphs(graph: GeneratedGraph) -> None:
    check_agreement(graph.gm, FAMILY_RULES)


def test_an_alternative_goes_on_to_the_next_option_when_an_operand_fails() -> None:
    # transpose(transpose(x, a, b), a, b) binds a=1, b=0 from the inner call, then the outer (0, 1) fails;
    # the second option, transpose(transpose(x, a, b), b, a), matches.
    gm = trace(lambda u: torch.transpose(torch.transpose(u, 1, 0), 0, 1))
    anchor = list(gm.graph.nodes)[-2]
    rule = FAMILY_RULES["transpose_back"]
    match = compiled(rule, anchor, gm)
    assert isinstance(match, Match) and match.bindings["a"] == 1
    assert outcome(match) == outcome(interpreted(rule, anchor, gm))


def test_an_alternative_whose_first_option_is_skipped_goes_on_to_the_next() -> None:
    # torch.sigmoid(x) * y: as given the sigmoid escapes (it is an output too); swapped it is not a sigmoid;
    # then the tanh option does not fit either: the first skip is reported, as the interpreter does.
    def f(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = torch.sigmoid(u)
        return s * v, s, torch.tanh(u) * v

    gm = trace(f)
    skipped, matched = (n for n in gm.graph.nodes if n.target is operator.mul)
    rule = FAMILY_RULES["gated_either"]
    skip = compiled(rule, skipped, gm)
    assert isinstance(skip, Skip) and skip.reason == "escaping user"
    assert outcome(skip) == outcome(interpreted(rule, skipped, gm))
    match = compiled(rule, matched, gm)
    assert isinstance(match, Match) and outcome(match) == outcome(interpreted(rule, matched, gm))


def test_alternatives_with_commutative_options_explore_in_the_interpreters_order() -> None:
    # neg(x + y) | neg(torch.add(y, x)): each option has its own operand orders; the answers and the
    # bindings (x, y) must be those of the interpreter's depth-first order.
    def f(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.neg(u + v), torch.neg(torch.add(v, u)), torch.neg(torch.add(u, u)), torch.neg(u - v)

    gm = trace(f)
    rule = FAMILY_RULES["neg_of_sum"]
    found = Counter()
    for node in gm.graph.nodes:
        answer = compiled(rule, node, gm)
        assert outcome(answer) == outcome(interpreted(rule, node, gm)), node.name
        found[type(answer).__name__] += 1
    assert found["Match"] == 3


def test_module_members_read_their_arguments_from_the_module() -> None:
    gm = spellings_module(training=False)
    nodes = {n.target: n for n in gm.graph.nodes if n.op == "call_module"}
    last, first = nodes["softmax_last"], nodes["softmax_first"]
    rule = FAMILY_RULES["softmax_last"]
    assert isinstance(compiled(rule, last, gm), Match)
    assert compiled(rule, first, gm) is None
    match = compiled(FAMILY_RULES["softmax_any"], first, gm)
    assert isinstance(match, Match) and match.bindings["d"] == 0
    inplace = nodes["relu_inplace"]
    assert compiled(FAMILY_RULES["relu_twice"], inplace, gm) is None  # nn.ReLU(inplace=True) is not relu


BUNDLED = ("algebra.fxr", "fusions.fxr", "cleanup.fxr")


@pytest.mark.slow
@pytest.mark.parametrize("shapes", [False, True], ids=["as built", "shape-propagated"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_bundled_rules_agree_on_real_models(model: str, shapes: bool) -> None:
    """As traced or exported (no metadata, or torch.export's), and with ShapeProp metadata on every node."""
    case = MODELS[model]()
    if shapes:
        with torch.no_grad():
            ShapeProp(case.gm).propagate(*case.inputs)
    for name in BUNDLED:
        check_agreement(case.gm, fxrules.load(name))
