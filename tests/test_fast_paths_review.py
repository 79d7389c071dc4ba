"""A review of the fast paths (compiled matchers, narrowing, waking, worklists, settled nodes) against the slow,
obvious semantics (the generic matcher visiting every anchor node in every pass), and ``apply``'s contract.

``outcomes`` applies a rule set four ways to copies of one graph: as shipped; with ``explain=True`` (the
generic matcher, no narrowing); visiting every node a rule may anchor at in every pass with the compiled
matchers; and with both (the reference).  All four must give the same code, counts, anchors and skips.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxrules
from fxrules.engine.scheduler import Incremental, VisitEverything
from fxrules.lang.ir import RuleSet
from tests.conftest import apply_outcome, slow_examples

F = torch.nn.functional


def outcomes(gm: torch.fx.GraphModule, rules: str | RuleSet, **kwargs: Any) -> dict[str, Any]:
    """Mode -> the outcome of applying ``rules`` to a copy of ``gm`` (or the error it raised)."""
    ruleset = fxrules.parse(rules) if isinstance(rules, str) else rules
    found: dict[str, Any] = {}
    for mode in ("shipped", "generic", "compiled_everywhere", "reference"):
        copied = copy.deepcopy(gm)
        scheduler = VisitEverything if mode in ("compiled_everywhere", "reference") else Incremental
        try:
            report = fxrules.apply(copied, ruleset, explain=mode in ("generic", "reference"), scheduler=scheduler,
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
    lacked the literal), so the rewrite must wake it (fixed: ``_wake`` stopped one level short for literals)."""

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
    visits every node fires ``sq`` in pass 2; the worklist left ``relu`` out of pass 2 and out of pass 3,
    so ``sq`` never fired (fixed: ``_Run._wake_beyond_domain``)."""
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
    edges after ``mk``'s new node is a match of ``neg_mul2`` (fixed as above)."""
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


# ---------------------------------------------------------------- the commit: submodules no longer referenced

class _LinearAndItsWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) + self.lin.weight.sum()


DROP_LINEAR = """
rule drop_linear:
    given:
        l: nn.Linear
    pattern:
        return torch.relu(l(x))
    replace:
        return torch.relu(x)
"""


def test_a_submodule_whose_parameter_is_still_read_is_kept() -> None:
    """The rewrite removes the only call of ``lin``, but ``get_attr lin.weight`` still reads it: deleting
    ``lin`` left a graph that fails when run (fixed: ``_Run._commit`` deleted every submodule no longer
    *called*)."""
    gm = torch.fx.symbolic_trace(_LinearAndItsWeight())
    x = torch.randn(2, 3)
    report = fxrules.apply(gm, fxrules.parse(DROP_LINEAR))
    assert report.counts() == {"drop_linear": 1}
    assert isinstance(gm.get_submodule("lin"), torch.nn.Linear)
    torch.testing.assert_close(gm(x), torch.relu(x) + gm.lin.weight.sum())


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def test_a_submodule_whose_child_is_still_called_is_kept() -> None:
    """The rewrite removes the call of ``blk``; ``blk.act`` is still called, so ``blk`` must stay (fixed:
    deleting ``blk`` deleted ``blk.act`` with it)."""
    root = torch.nn.Module()
    root.blk = _Block()
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    kept = graph.call_module("blk.act", (x,))
    dropped = graph.call_function(torch.neg, (graph.call_function(torch.neg, (graph.call_module("blk", (x,)),)),))
    graph.output(graph.call_function(torch.add, (kept, dropped)))
    gm = torch.fx.GraphModule(root, graph)
    rules = """
rule drop_module:
    given:
        m: nn.Module
    pattern:
        return torch.neg(torch.neg(m(x)))
    replace:
        return x
"""
    report = fxrules.apply(gm, fxrules.parse(rules))
    assert report.counts() == {"drop_module": 1}
    assert isinstance(gm.get_submodule("blk.act"), torch.nn.ReLU)
    t = torch.randn(4)
    torch.testing.assert_close(gm(t), torch.relu(t) + t)


def test_a_submodule_nothing_refers_to_any_more_is_still_deleted() -> None:
    class OnlyCalled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.lin(x))

    gm = torch.fx.symbolic_trace(OnlyCalled())
    assert fxrules.apply(gm, fxrules.parse(DROP_LINEAR)).counts() == {"drop_linear": 1}
    assert not hasattr(gm, "lin")


# ---------------------------------------------------------------- families whose first member is a module

class _ReluModuleAndFunction(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = torch.nn.ReLU()
        self.act_inplace = torch.nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # each result computed: a graph returning its input x (twice) would make those rewrites skip ('alias')
        return (torch.neg(self.act(x)).exp(), torch.neg(torch.relu(x)).cos(),
                torch.neg(self.act_inplace(torch.sigmoid(x))))


@pytest.mark.parametrize("pattern", ["act(x)", "act(x, inplace=False)"])
def test_a_module_first_family_matches_its_module_and_its_functions_at_their_defaults(pattern: str) -> None:
    """The family's parameters are nn.ReLU's: ``input`` and the constructor's ``inplace`` (default False).
    ``act(x)`` leaves ``inplace`` out, so it matches ``nn.ReLU()`` (inplace at its default) and
    ``torch.relu`` (no such argument: the default), not ``nn.ReLU(inplace=True)``; naming
    ``inplace=False`` is the same (fixed: the family knew no default for ``inplace``, so ``act(x)``
    never matched the module and ``act(x, inplace=False)`` never matched ``torch.relu``)."""
    rules = f"""
family act = nn.ReLU | torch.relu

rule neg_act:
    torch.neg({pattern}) => x
"""
    gm = torch.fx.symbolic_trace(_ReluModuleAndFunction())
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"neg_act": 2}
    assert "self.act(" not in outcome["code"] and "torch.relu" not in outcome["code"]
    assert "self.act_inplace(" in outcome["code"]



class _Softmaxes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sm = torch.nn.Softmax(dim=1)
        self.sm0 = torch.nn.Softmax(dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sm(x) + torch.softmax(x, 1) + torch.softmax(x, dim=1) + self.sm0(x) + torch.softmax(x, 0)


@pytest.mark.parametrize("pattern", ["sm(x, 1)", "sm(x, dim=1)"])
def test_a_module_first_family_takes_constructor_attributes_by_position_and_by_name(pattern: str) -> None:
    """Design card section 4: a family's arguments are its first member's, by position and by name; for a
    module, the constructor's attributes follow ``forward``'s parameters (``sm(x, 1)`` used to be compared
    as written, and matched only ``torch.softmax(x, 1)``)."""
    rules = f"""
family sm = nn.Softmax | torch.softmax

rule softmax_to_sigmoid:
    {pattern} => torch.sigmoid(x)
"""
    gm = torch.fx.symbolic_trace(_Softmaxes())
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"softmax_to_sigmoid": 3}
    assert outcome["code"].count("torch.sigmoid(x)") == 3
    assert "self.sm0(x)" in outcome["code"] and "torch.softmax(x, 0)" in outcome["code"]


@pytest.mark.parametrize("pattern", ["add(x, 0)", "torch.add(x, 0)"])
def test_an_extra_argument_at_its_default_is_the_default_in_families_as_in_calls(pattern: str) -> None:
    """``alpha=1`` and ``alpha=1.0`` are both ``torch.add``'s default, whether the pattern names the target or
    a family it belongs to (the family's test used to want the default's exact type, so ``add(x, 0)`` did
    not match ``torch.add(x, 0, alpha=1.0)``); ``alpha=2`` is not the default either way."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.add(x, 0, alpha=1.0) * torch.add(x, 0, alpha=1) * torch.add(x, 0, alpha=2)

    outcome = assert_same_everywhere(torch.fx.symbolic_trace(f), f"rule add_zero:\n    {pattern} => x\n")
    assert fired(outcome) == {"add_zero": 2}
    assert "alpha = 2" in outcome["code"] and "alpha = 1" not in outcome["code"]

def test_a_helper_buffer_that_a_later_rewrite_left_unread_is_not_kept() -> None:
    """``scale`` adds the buffer ``two`` (pass 1); ``drop`` then removes its only reader (pass 2).  The
    buffer would stay in the module's state_dict though nothing reads it (fixed: the commit dropped
    unreferenced submodules only)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(x)) + 1

    rules = """
rule scale:
    torch.neg(torch.neg(x)) => x * @two(x)

rule drop:
    (x * p) + 1 => x + 1
"""
    gm = torch.fx.symbolic_trace(f)
    report = fxrules.apply(gm, fxrules.parse(rules), helpers={"two": lambda x: torch.tensor(2.0)})
    assert report.counts() == {"scale": 1, "drop": 1}
    assert "two" not in gm.state_dict()
    t = torch.randn(3)
    torch.testing.assert_close(gm(t), t + 1)


def test_a_helper_buffer_still_read_is_kept() -> None:
    gm = torch.fx.symbolic_trace(lambda x: torch.neg(torch.neg(x)))
    rules = "rule scale:\n    torch.neg(torch.neg(x)) => x * @two(x)\n"
    assert fxrules.apply(gm, fxrules.parse(rules), helpers={"two": lambda x: torch.tensor(2.0)}).counts() == {
        "scale": 1}
    assert "two" in gm.state_dict()
    t = torch.randn(3)
    torch.testing.assert_close(gm(t), t * 2)


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
    assert found["generic"] == found["reference"], gm.code


@settings(max_examples=40, **_COMMON)
@given(gm=literal_graphs())
def test_rewrites_that_make_literals_change_nothing_but_the_work(gm: torch.fx.GraphModule) -> None:
    _check_literal_graph(gm)


@pytest.mark.slow
@settings(max_examples=slow_examples(400), **_COMMON)
@given(gm=literal_graphs(max_steps=20))
def test_rewrites_that_make_literals_change_nothing_but_the_work_many_examples(gm: torch.fx.GraphModule) -> None:
    _check_literal_graph(gm)
