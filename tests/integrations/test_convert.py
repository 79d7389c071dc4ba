"""From ``replace_pattern`` to rules: ``fxrules.rule_from_functions``, ``fxrules convert`` and the drop-in
``fxrules.replace_pattern``.

The cases are the examples of torch's ``replace_pattern`` docstring and the
cases of torch's ``test/fx/test_subgraph_rewriter.py`` (the models and
functions of ``tests/integrations/test_replace_pattern_compat.py``).  Each module is
traced twice; torch's ``replace_pattern`` rewrites one copy and
``fxrules.replace_pattern`` the other, and the two must return the same
matches (the same anchor and node map, by node name) and leave the same
graph (live nodes, their operations and arguments) computing the same.
"""

from __future__ import annotations

import copy
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch.fx import subgraph_rewriter

import fxrules
from fxrules.cli import main
from tests.conftest import slow_examples
from tests.integrations.test_replace_pattern_compat import (
    CatSumModule,
    LinearMul,
    MmModule,
    NegReluModule,
    ReshapeAliasModule,
    _exp,
    _identity,
    _linear_mul,
    _mm,
    _neg,
    _neg_plus_relu,
    _relu,
    _reshape_alias,
    _reshape_alias_swapped,
    _sigmoid,
    _sigmoid_sigmoid,
    _wrapped_linear_mul,
    op_sequence,
    placeholders,
    structure,
)
from tests.lang.test_formatting import meaning

# ---------------------------------------------------------------- the cases


def _cat(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.cat([w1, w2])


def _stack(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.stack([w1, w2])


def _cat_sum(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.cat([w1, w2]).sum()


def _neg_plus_relu_of_two(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.neg(x) + torch.relu(y)


def _relu_of_first(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


class NegReluTwoInputs(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        val = torch.neg(x) + torch.relu(y)
        return torch.add(val, val)


class NegOnce(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        val = torch.neg(x)
        return torch.add(val, val)


class NegAddItself(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.neg(x)
        return torch.add(a, a)


def _neg_add_itself(x: torch.Tensor) -> torch.Tensor:
    a = torch.neg(x)
    return torch.add(a, a)


def _sigmoid_cat_itself(x: torch.Tensor) -> torch.Tensor:
    a = torch.sigmoid(x)
    return torch.cat([a, a])


class ReluEscapes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        return torch.neg(y) - y


class AddmmOfCats(torch.nn.Module):
    def forward(self, x, w1, w2, b1, b2):
        m0 = torch.cat([w1, w2])  # noqa: F841
        m1 = torch.cat([w1, w2])
        m2 = torch.cat([x, b2])
        t0 = torch.addmm(b1, m1, m2.t())  # noqa: F841
        t1 = torch.sum(w1, 1)
        t2 = torch.addmm(b1, m1, m2.t())
        return torch.sum(t1), torch.sum(t2)


def _addmm_of_cats(x, w1, w2, b1, b2):
    m1 = torch.cat([w1, w2])
    m2 = torch.cat([x, b2])
    return torch.addmm(b1, m1, m2.t())


def _cat_three(x, w1, w2, b1, b2):
    return torch.cat([x, w1, w2])


def _sigmoids(count: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(count):
            x = torch.sigmoid(x)
        return x

    return chain


def _sigmoid_and_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) + torch.relu(x)


def _sigmoid_relu_pair(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sigmoid(a), torch.relu(a)


def _exp_abs_pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.exp(x), torch.abs(x)


def _difference_outputs(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    x = x1 - x2
    return torch.sigmoid(x) + torch.relu(x)


def _three_outputs(a1: torch.Tensor, a2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = a1 - a2
    return torch.sigmoid(a), torch.relu(a), a


def _three_replaced(x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y2 = torch.abs(x2)
    return y2, y2, torch.exp(x1)


class AddUnusedZ(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return x + y


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def _sub(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x - y


class MethodChain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.dequantize().sigmoid().to(torch.float16) * 2


def _method_chain(x: torch.Tensor) -> torch.Tensor:
    return x.dequantize().sigmoid().to(torch.float16)


def _as_strided(x: torch.Tensor, arg0: list[int], arg1: list[int]) -> torch.Tensor:
    return torch.ops.aten.as_strided.default(x, arg0, arg1)


class AddThenMethodChain(torch.nn.Module):
    """test_subgraph_rewriter_placeholder_matching: the capture matches the ``add``; the dtype is an attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.dtype = torch.float16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x += 3
        return torch.sigmoid(x.dequantize()).to(self.dtype)


def _dequantize_sigmoid_to(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x.dequantize()).to(torch.float16)


class ThreeAnchors(torch.nn.Module):
    """test_subgraph_rewriter_local_revert: three candidate anchors, two matches (the second's operands are
    the other way round)."""

    def __init__(self) -> None:
        super().__init__()
        for i in range(5):
            self.register_parameter(f"w{i}", torch.nn.Parameter(torch.randn([16, 16]) / 4))
            self.register_parameter(f"b{i}", torch.nn.Parameter(torch.randn([16])))

    def forward(self, in0: torch.Tensor, in1: torch.Tensor) -> torch.Tensor:
        linear = torch.nn.functional.linear
        lin_res_2 = linear(linear(in1, self.w0, bias=self.b0), self.w1, bias=self.b1)
        sum_res_1 = in1 * lin_res_2 + in1
        lin_res_3 = linear(sum_res_1, self.w2, bias=self.b2)
        mul_res_2 = lin_res_3 * torch.sigmoid(lin_res_3)
        lin_res_5 = linear(linear(in0, self.w3, bias=self.b3), self.w4, bias=self.b4)
        return torch.cat([mul_res_2, in0 * lin_res_5 + in0], dim=1)


def _linear_times_c(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                    c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    return lin_res, c * lin_res


def _fused_times_c(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                   c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res, _ = fused_linear_mul(a, b, bias)
    return lin_res, lin_res * c


def _randn(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(*shape)


#: (id, module, pattern, replacement, input makers, matches, whether replacements may sit elsewhere in graph order)
CASES: list[tuple[str, Any, Any, Any, list[Callable[[], torch.Tensor]], int, bool]] = [
    ("docstring_cat_to_stack", CatSumModule(), _cat, _stack, [_randn(1, 3)] * 3, 2, False),
    # torch puts each replacement before the first user of what it replaces, fxrules where that was
    ("multiple_pattern_match", CatSumModule(), _cat_sum, _stack, [_randn(1, 3)] * 3, 2, True),
    ("docstring_unused_replacement_input", NegReluTwoInputs(), _neg_plus_relu_of_two, _relu_of_first,
     [_randn(4, 4)] * 2, 1, False),
    ("oneliner_pattern", NegOnce(), _neg, _relu, [_randn(1, 3)], 1, False),
    ("single_pattern_match", NegReluModule(), _neg_plus_relu, _relu, [_randn(1, 3)], 1, False),
    ("correct_output_replacement", NegReluTwoInputs(), _relu, _neg, [_randn(4, 4)] * 2, 1, False),
    ("pattern_is_entire_graph", NegAddItself(), _neg_add_itself, _sigmoid_cat_itself, [_randn(3, 4)], 1, False),
    ("pattern_output_has_other_users", ReluEscapes(), _relu, _sigmoid, [_randn(3, 4)], 1, False),
    ("internal_nodes_with_other_users", AddmmOfCats(), _addmm_of_cats, _cat_three,
     [_randn(2, 3), _randn(2, 3), _randn(2, 3), _randn(4), _randn(2, 3)], 0, False),
    ("consecutive_matches", _sigmoids(3), _sigmoid, _exp, [_randn(3, 4)], 3, False),
    ("overlapping_matches", _sigmoids(4), _sigmoid_sigmoid, _neg, [_randn(3, 4)], 2, False),
    ("multiple_outputs", _sigmoid_and_relu, _sigmoid_relu_pair, _exp_abs_pair, [_randn(3, 4)], 1, False),
    ("duplicated_outputs", _difference_outputs, _three_outputs, _three_replaced, [_randn(3, 4)] * 2, 1, False),
    ("unused_args", AddUnusedZ(), _add, _sub, [_randn(3, 4)] * 3, 1, False),
    ("call_method", MethodChain(), _method_chain, _identity, [_randn(3, 4)], 1, False),
    ("kwargs_and_wrapped_replacement", LinearMul(), _linear_mul, _wrapped_linear_mul, [_randn(4, 16)], 1, False),
    ("local_revert", ThreeAnchors(), _linear_times_c, _fused_times_c, [_randn(4, 16)] * 2, 2, False),
    ("placeholder_matching", AddThenMethodChain(), _dequantize_sigmoid_to, _identity, [_randn(3, 4)], 1, False),
    ("list_type_arg", ReshapeAliasModule(), _reshape_alias, _as_strided, [_randn(16)], 1, False),
    # one pass, as torch's: a pattern its replacement matches again is rewritten once, not forever
    ("list_type_arg_swap", ReshapeAliasModule(), _reshape_alias, _reshape_alias_swapped, [_randn(16)], 1, False),
]


def _shown(value: Any) -> Any:
    """A match's value by name: nodes of two traces of one module compare by their names."""
    return value.name if isinstance(value, torch.fx.Node) else value


def _matches(matches: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(m.anchor.name, {key.name: _shown(value) for key, value in m.nodes_map.items()}) for m in matches]


@pytest.mark.parametrize(("model", "pattern", "replacement", "inputs", "count", "order_may_differ"),
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_replace_pattern_agrees_with_torch(model: Any, pattern: Any, replacement: Any,
                                           inputs: list[Callable[[], torch.Tensor]], count: int,
                                           order_may_differ: bool) -> None:
    """The same matches (anchor and node map), the same live graph, the same outputs as torch's function."""
    theirs, ours = torch.fx.symbolic_trace(model), torch.fx.symbolic_trace(model)
    expected = subgraph_rewriter.replace_pattern(theirs, pattern, replacement)
    found = fxrules.replace_pattern(ours, pattern, replacement)
    assert len(found) == count
    assert _matches(found) == _matches(expected)
    assert all(type(match) is subgraph_rewriter.Match for match in found)
    ours.graph.lint()
    assert placeholders(ours) == placeholders(theirs)
    assert structure(ours) == structure(theirs), f"torch:\n{theirs.code}\nfxrules:\n{ours.code}"
    if order_may_differ:
        assert sorted(op_sequence(ours)) == sorted(op_sequence(theirs))
    else:
        assert op_sequence(ours) == op_sequence(theirs)
    arguments = [make() for make in inputs]
    torch.testing.assert_close(ours(*arguments), theirs(*arguments))


@pytest.mark.parametrize(("model", "pattern", "inputs"), [
    pytest.param(NegReluModule(), _neg_plus_relu, [_randn(1, 3)], id="pattern_is_its_own_replacement"),
    pytest.param(MmModule(), _mm, [_randn(3, 4), _randn(4, 5)], id="graph_argument_order"),
])
def test_a_replacement_that_is_its_pattern_is_no_match(model: Any, pattern: Any,
                                                        inputs: list[Callable[[], torch.Tensor]]) -> None:
    """A replacement that computes what its pattern matched changes nothing: torch rebuilds the same nodes and
    returns the match, fxrules skips it as `no change` and returns no match; the graphs are the same."""
    theirs, ours = torch.fx.symbolic_trace(model), torch.fx.symbolic_trace(model)
    assert len(subgraph_rewriter.replace_pattern(theirs, pattern, pattern)) == 1
    assert fxrules.replace_pattern(ours, pattern, pattern) == []
    assert structure(ours) == structure(theirs) and op_sequence(ours) == op_sequence(theirs)
    arguments = [make() for make in inputs]
    torch.testing.assert_close(ours(*arguments), theirs(*arguments))


def test_traced_pattern_maps_its_own_nodes() -> None:
    """Given traced modules (test_subgraph_rewriter_traced_as_callable), the node map's keys are the nodes of
    the pattern graph passed in, as with torch."""
    pattern, replacement = torch.fx.symbolic_trace(_neg_plus_relu), torch.fx.symbolic_trace(_sigmoid)
    theirs, ours = torch.fx.symbolic_trace(NegReluModule()), torch.fx.symbolic_trace(NegReluModule())
    expected = subgraph_rewriter.replace_pattern(theirs, pattern, replacement)
    found = fxrules.replace_pattern(ours, pattern, replacement)
    assert [set(m.nodes_map) for m in found] == [set(m.nodes_map) for m in expected]
    assert found[0].anchor is expected[0].anchor is next(n for n in pattern.graph.nodes if n.name == "add")
    assert structure(ours) == structure(theirs)


def test_operands_match_in_their_written_order_only() -> None:
    """As torch's matcher, the drop-in does not try ``b + a`` for a pattern ``a + b`` (a rule would)."""

    class Swapped(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.relu(y) + torch.neg(x)

    gm = torch.fx.symbolic_trace(Swapped())
    assert fxrules.replace_pattern(gm, _neg_plus_relu_of_two, _relu_of_first) == []
    rule = fxrules.rule_from_functions(_neg_plus_relu_of_two, _relu_of_first, name="r")
    assert fxrules.apply(gm, fxrules.RuleSet((rule,))).total_fired == 1


def test_two_pattern_inputs_never_match_one_node() -> None:
    """As torch's matcher, the drop-in maps distinct pattern nodes to distinct graph nodes: ``torch.add(a, b)``
    does not match ``torch.add(x, x)`` (a rule would, binding ``a`` and ``b`` to ``x``)."""

    def f(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.add(x, x) * torch.add(x, z)

    def pattern(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.add(a, b)

    def replacement(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sub(a, b)

    theirs, ours = torch.fx.symbolic_trace(f), torch.fx.symbolic_trace(f)
    expected = subgraph_rewriter.replace_pattern(theirs, pattern, replacement)
    found = fxrules.replace_pattern(ours, pattern, replacement)
    assert _matches(found) == _matches(expected) == [("add", {"a": "x", "b": "z", "add": "add_1"})]
    assert structure(ours) == structure(theirs)


def test_an_output_that_would_become_an_input_is_left() -> None:
    """Documented difference: torch replaces ``neg(x)`` by ``x`` even where the graph would then return its
    input; fxrules skips that match (the caller could write into the result and change the input)."""

    class Negs(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.neg(torch.neg(x))

    theirs, ours = torch.fx.symbolic_trace(Negs()), torch.fx.symbolic_trace(Negs())
    assert len(subgraph_rewriter.replace_pattern(theirs, _neg, _identity)) == 2
    assert len(fxrules.replace_pattern(ours, _neg, _identity)) == 1
    assert [n.op for n in ours.graph.nodes] == ["placeholder", "call_function", "output"]


def _relu_doubled(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2


def _neg_and_relu(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.neg(a), torch.relu(a)


def _relu_and_neg(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.relu(a), torch.neg(a)


def test_a_pattern_output_absent_from_the_graph_is_no_match() -> None:
    """Where torch is wrong: a two-output pattern one of whose outputs has no candidate in the graph makes
    torch's matcher raise ``KeyError``; the drop-in finds no match and leaves the graph as it was."""
    with pytest.raises(KeyError):
        subgraph_rewriter.replace_pattern(torch.fx.symbolic_trace(_relu_doubled), _neg_and_relu, _relu_and_neg)
    gm = torch.fx.symbolic_trace(_relu_doubled)
    before = gm.code
    assert fxrules.replace_pattern(gm, _neg_and_relu, _relu_and_neg) == []
    assert gm.code == before


def _neg_of_first(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.neg(a)


def _relu_of_first_input(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a)


def _neg_plus_second(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.neg(x) + y


def test_a_pattern_input_the_pattern_does_not_use_matches_nothing() -> None:
    """Where torch is wrong: a pattern parameter the pattern never reads makes torch's replace_pattern raise
    ``KeyError``; the drop-in rewrites, and the unused input is not in the node map."""
    with pytest.raises(KeyError):
        subgraph_rewriter.replace_pattern(torch.fx.symbolic_trace(_neg_plus_second), _neg_of_first,
                                          _relu_of_first_input)
    gm = torch.fx.symbolic_trace(_neg_plus_second)
    found = fxrules.replace_pattern(gm, _neg_of_first, _relu_of_first_input)
    assert _matches(found) == [("neg", {"a": "x", "neg": "neg"})]
    assert op_sequence(gm) == [("call_function", "torch.relu"), ("call_function", "_operator.add")]


@st.composite
def chains(draw: st.DrawFn) -> torch.fx.GraphModule:
    """Small graphs of ``neg``, ``relu`` and ``add`` over two inputs, returning one or two values."""
    graph = torch.fx.Graph()
    values = [graph.placeholder("x"), graph.placeholder("y")]
    for _ in range(draw(st.integers(3, 9))):
        if draw(st.booleans()) and draw(st.booleans()):
            values.append(graph.call_function(torch.add, (draw(st.sampled_from(values)),
                                                          draw(st.sampled_from(values)))))
        else:
            values.append(graph.call_function(draw(st.sampled_from([torch.neg, torch.relu])),
                                              (draw(st.sampled_from(values[-3:])),)))
    outputs = draw(st.lists(st.sampled_from(values[2:]), min_size=1, max_size=2, unique=True))
    graph.output(tuple(outputs) if len(outputs) > 1 else outputs[0])
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _neg_then_relu(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b = torch.neg(a)
    return b, torch.relu(b)


def _relu_neg_pair(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.relu(a), torch.neg(a)


def _add_neg(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(torch.neg(a), b)


def _sub_swapped(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.sub(b, a)


RANDOM_PAIRS = [(_neg_then_relu, _relu_neg_pair), (_add_neg, _sub_swapped), (_add, _sub), (_neg, _relu),
                (_neg_and_relu, _relu_and_neg)]


@settings(max_examples=slow_examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.sampled_from(RANDOM_PAIRS))
def test_random_graphs_rewrite_as_torch_does(gm: torch.fx.GraphModule, pair: tuple[Any, Any]) -> None:
    """On random graphs the drop-in returns torch's matches and leaves torch's graph (where torch does not
    raise: see the cases above)."""
    pattern, replacement = pair
    theirs, ours = copy.deepcopy(gm), copy.deepcopy(gm)
    try:
        expected = subgraph_rewriter.replace_pattern(theirs, pattern, replacement)
    except KeyError:
        assume(False)
    found = fxrules.replace_pattern(ours, pattern, replacement)
    assert _matches(found) == _matches(expected)
    assert structure(ours) == structure(theirs), f"torch:\n{theirs.code}\nfxrules:\n{ours.code}"


# ---------------------------------------------------------------- the rule text


@pytest.mark.parametrize(("pattern", "replacement", "text"), [
    pytest.param(_cat, _stack, "rule r: torch.cat([w1, w2]) => torch.stack([w1, w2])\n", id="docstring"),
    pytest.param(_neg_plus_relu_of_two, _relu_of_first, "rule r: torch.neg(x) + torch.relu(y) => torch.relu(x)\n",
                 id="unused_input"),
    pytest.param(_method_chain, _identity, "rule r: x.dequantize().sigmoid().to(torch.float16) => x\n",
                 id="methods_and_dtype"),
    pytest.param(_neg_add_itself, _sigmoid_cat_itself, textwrap.dedent("""\
        rule r:
            pattern:
                neg_ = torch.neg(x)
                return torch.add(neg_, neg_)
            replace:
                sigmoid_ = torch.sigmoid(x)
                return torch.cat([sigmoid_, sigmoid_])
        """), id="shared_node"),
    pytest.param(_three_outputs, _three_replaced, textwrap.dedent("""\
        rule r:
            pattern:
                sub_ = a1 - a2
                return torch.sigmoid(sub_), torch.relu(sub_), sub_
            replace:
                abs_1 = torch.abs(a2)
                return abs_1, abs_1, torch.exp(a1)
        """), id="outputs"),
    pytest.param(lambda x: x[:, 0].sum(dim=1, keepdim=True), lambda x: x[1:],
                 "rule r: x[:, 0].sum(dim=1, keepdim=True) => x[1:]\n", id="index_and_keywords"),
    pytest.param(_reshape_alias, _as_strided,
                 "rule r: aten._reshape_alias_copy.default(x, arg0, arg1) => aten.as_strided.default(x, arg0, arg1)\n",
                 id="aten"),
])
def test_rule_text_and_rule(pattern: Any, replacement: Any, text: str) -> None:
    """``fxrules convert`` prints this text, and ``rule_from_functions`` is the rule it resolves to."""
    assert fxrules.integrations.convert.rule_text(pattern, replacement, "r") == text
    assert fxrules.format_text(text) == text
    assert meaning(fxrules.rule_from_functions(pattern, replacement, name="r")) == meaning(fxrules.parse(text)["r"])


@torch.fx.wrap
def fused_linear_mul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    return lin_res, a * lin_res


def _fused(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res, mul_res = fused_linear_mul(a, b, bias)
    return lin_res, mul_res


def test_functions_of_other_modules_are_named_through_use() -> None:
    """A function the tracer leaves opaque is named through ``use`` of its module, allowed for the rule."""
    text = fxrules.integrations.convert.rule_text(_linear_mul, _fused, "gemm")
    assert text == textwrap.dedent("""\
        use tests.integrations.test_convert as test_convert

        rule gemm:
            pattern:
                linear_ = F.linear(a, b, bias=bias)
                return linear_, a * linear_
            replace:
                fused_linear_mul = test_convert.fused_linear_mul(a, b, bias)
                return fused_linear_mul[0], fused_linear_mul[1]
        """)
    theirs, ours = torch.fx.symbolic_trace(LinearMul()), torch.fx.symbolic_trace(LinearMul())
    assert len(subgraph_rewriter.replace_pattern(theirs, _linear_mul, _fused)) == 1
    assert len(fxrules.replace_pattern(ours, _linear_mul, _fused)) == 1
    assert structure(ours) == structure(theirs)
    assert [n.target for n in ours.graph.nodes].count(fused_linear_mul) == 1


class WithAttribute(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = torch.tensor([3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.c


class ClampUnbounded(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nan_to_num(x.clamp(min=float("-inf"), max=float("inf")), nan=float("nan"))


def _clamp_unbounded(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(min=float("-inf"), max=float("inf"))


def _nan_to_nan(x: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(x, nan=float("nan"))


def test_infinite_arguments_convert_to_the_predefined_names() -> None:
    """``inf`` and ``-inf`` arguments are written as the language's names and match as torch's do."""
    text = fxrules.integrations.convert.rule_text(_clamp_unbounded, _identity, "r")
    assert text == "rule r: x.clamp(min=-inf, max=inf) => x\n"
    theirs, ours = torch.fx.symbolic_trace(ClampUnbounded()), torch.fx.symbolic_trace(ClampUnbounded())
    assert len(subgraph_rewriter.replace_pattern(theirs, _clamp_unbounded, _identity)) == 1
    assert len(fxrules.replace_pattern(ours, _clamp_unbounded, _identity)) == 1
    assert structure(ours) == structure(theirs)


def test_a_nan_argument_converts_to_nan_and_matches_nan() -> None:
    """A ``nan`` argument is written ``nan``, which matches a NaN (torch's replace_pattern compares with
    ``==``, so its NaN never matches)."""
    assert fxrules.integrations.convert.rule_text(_nan_to_nan, _identity, "r") == \
        "rule r: torch.nan_to_num(x, nan=nan) => x\n"
    gm = torch.fx.symbolic_trace(ClampUnbounded())
    assert len(fxrules.replace_pattern(gm, _nan_to_nan, _identity)) == 1
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == []


@pytest.mark.parametrize(("pattern", "replacement", "message"), [
    (_relu, WithAttribute(), "node 'c' is a get_attr: only function and method calls convert"),
    (_neg, _add, "the pattern takes 1 inputs and the replacement 2"),
    (lambda x: x.mul(1j), _identity, "the argument 1j (complex) cannot be written in a rule file"),
])
def test_what_cannot_convert_is_a_usage_error(pattern: Any, replacement: Any, message: str) -> None:
    with pytest.raises(fxrules.FxrUsageError, match=re.escape(message)):
        fxrules.rule_from_functions(pattern, replacement)
    with pytest.raises(fxrules.FxrUsageError, match=re.escape(message)):
        fxrules.replace_pattern(torch.fx.symbolic_trace(NegOnce()), pattern, replacement)


# ---------------------------------------------------------------- the command

PATTERNS = '''\
import torch


def pattern(w1, w2):
    return torch.cat([w1, w2]).sum()


def replacement(w1, w2):
    return torch.stack([w1, w2])
'''


def test_convert_prints_the_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "my_patterns.py").write_text(PATTERNS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main(["convert", "my_patterns:pattern", "my_patterns:replacement", "--name", "cat_sum"]) == 0
    assert capsys.readouterr().out == "rule cat_sum: torch.cat([w1, w2]).sum() => torch.stack([w1, w2])\n"
    assert main(["convert", "my_patterns:pattern", "my_patterns:replacement", "--name", "rule"]) == 2
    assert capsys.readouterr().err == "fxrules convert: error: a rule name must be a name, not 'rule'\n"
    assert main(["convert", "my_patterns:missing", "my_patterns:replacement"]) == 2
    assert capsys.readouterr().err == ("fxrules convert: error: the pattern 'my_patterns:missing': "
                                       "my_patterns has no 'missing'\n")
