"""From ``replace_pattern`` to rules: ``fxrules.rule_from_functions``, ``fxrules convert`` and the drop-in
``fxrules.replace_pattern``.

The cases are the examples of torch's ``replace_pattern`` docstring and the
cases of torch's ``test/fx/test_subgraph_rewriter.py`` (the models and
functions of ``tests/integrations/subgraph_rewriter_cases.py``).  Each module is
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
import tests.integrations.subgraph_rewriter_cases as cases
from fxrules.cli import main
from tests.conftest import slow_examples
from tests.integrations.test_replace_pattern_compat import assert_same_rewrite, op_sequence, structure
from tests.lang.test_formatting import meaning

# ---------------------------------------------------------------- the cases


def _randn(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(*shape)


#: (id, module, pattern, replacement, input makers, matches, whether replacements may sit elsewhere in graph order)
CASES: list[tuple[str, Any, Any, Any, list[Callable[[], torch.Tensor]], int, bool]] = [
    ("docstring_cat_to_stack", cases.CatSumModule(), cases.cat, cases.stack, [_randn(1, 3)] * 3, 2, False),
    # torch puts each replacement before the first user of what it replaces, fxrules where that was
    ("multiple_pattern_match", cases.CatSumModule(), cases.cat_sum, cases.stack, [_randn(1, 3)] * 3, 2, True),
    ("docstring_unused_replacement_input", cases.NegReluTwoInputs(), cases.neg_plus_relu_of_two, cases.relu_of_first,
     [_randn(4, 4)] * 2, 1, False),
    ("oneliner_pattern", cases.NegOnce(), cases.neg, cases.relu, [_randn(1, 3)], 1, False),
    ("single_pattern_match", cases.NegReluModule(), cases.neg_plus_relu, cases.relu, [_randn(1, 3)], 1, False),
    ("correct_output_replacement", cases.NegReluTwoInputs(), cases.relu, cases.neg, [_randn(4, 4)] * 2, 1, False),
    ("pattern_is_entire_graph", cases.NegAddItself(), cases.neg_add_itself, cases.sigmoid_cat_itself,
     [_randn(3, 4)], 1, False),
    ("pattern_output_has_other_users", cases.ReluEscapes(), cases.relu, cases.sigmoid, [_randn(3, 4)], 1, False),
    ("internal_nodes_with_other_users", cases.AddmmOfCats(), cases.addmm_of_cats, cases.cat_three,
     [_randn(2, 3), _randn(2, 3), _randn(2, 3), _randn(4), _randn(2, 3)], 0, False),
    ("consecutive_matches", cases.sigmoids(3), cases.sigmoid, cases.exp, [_randn(3, 4)], 3, False),
    ("overlapping_matches", cases.sigmoids(4), cases.sigmoid_sigmoid, cases.neg, [_randn(3, 4)], 2, False),
    ("multiple_outputs", cases.sigmoid_and_relu, cases.sigmoid_relu_pair, cases.exp_abs_pair, [_randn(3, 4)], 1, False),
    ("duplicated_outputs", cases.difference_outputs, cases.three_outputs, cases.three_replaced,
     [_randn(3, 4)] * 2, 1, False),
    ("unused_args", cases.AddUnusedZ(), cases.add, cases.sub, [_randn(3, 4)] * 3, 1, False),
    ("call_method", cases.MethodChain(), cases.method_chain, cases.identity, [_randn(3, 4)], 1, False),
    ("kwargs_and_wrapped_replacement", cases.LinearMul(), cases.linear_mul, cases.wrapped_linear_mul,
     [_randn(4, 16)], 1, False),
    ("local_revert", cases.ThreeAnchors(), cases.linear_times_c, cases.wrapped_linear_times_c,
     [_randn(4, 16)] * 2, 2, False),
    ("placeholder_matching", cases.AddThenMethodChain(), cases.dequantize_sigmoid_to, cases.identity,
     [_randn(3, 4)], 1, False),
    ("list_type_arg", cases.ReshapeAliasModule(), cases.reshape_alias, cases.as_strided, [_randn(16)], 1, False),
    # one pass, as torch's: a pattern its replacement matches again is rewritten once, not forever
    ("list_type_arg_swap", cases.ReshapeAliasModule(), cases.reshape_alias, cases.reshape_alias_swapped,
     [_randn(16)], 1, False),
]


def _shown(value: Any) -> Any:
    """A match's value by name: nodes of two traces of one module compare by their names."""
    return value.name if isinstance(value, torch.fx.Node) else value


def _matches(matches: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(m.anchor.name, {key.name: _shown(value) for key, value in m.nodes_map.items()}) for m in matches]


Matches = list[subgraph_rewriter.Match]


def _rewrite_both(model: Any, pattern: Any,
                  replacement: Any) -> tuple[torch.fx.GraphModule, Matches, torch.fx.GraphModule, Matches]:
    """Two traces of ``model``: torch's ``replace_pattern`` rewrites the first (``theirs``, with its matches),
    then ``fxrules.replace_pattern`` the second (``ours``)."""
    theirs, ours = torch.fx.symbolic_trace(model), torch.fx.symbolic_trace(model)
    expected = subgraph_rewriter.replace_pattern(theirs, pattern, replacement)
    return theirs, expected, ours, fxrules.replace_pattern(ours, pattern, replacement)


@pytest.mark.parametrize(("model", "pattern", "replacement", "inputs", "count", "order_may_differ"),
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_replace_pattern_agrees_with_torch(model: Any, pattern: Any, replacement: Any,
                                           inputs: list[Callable[[], torch.Tensor]], count: int,
                                           order_may_differ: bool) -> None:
    """The same matches (anchor and node map), the same live graph, the same outputs as torch's function."""
    theirs, expected, ours, found = _rewrite_both(model, pattern, replacement)
    assert len(found) == count
    assert _matches(found) == _matches(expected)
    assert all(type(match) is subgraph_rewriter.Match for match in found)
    assert_same_rewrite(theirs, ours, [make() for make in inputs], order_may_differ=order_may_differ)


@pytest.mark.parametrize(("model", "pattern", "inputs"), [
    pytest.param(cases.NegReluModule(), cases.neg_plus_relu, [_randn(1, 3)], id="pattern_is_its_own_replacement"),
    pytest.param(cases.MmModule(), cases.mm, [_randn(3, 4), _randn(4, 5)], id="graph_argument_order"),
])
def test_a_replacement_that_is_its_pattern_is_no_match(model: Any, pattern: Any,
                                                        inputs: list[Callable[[], torch.Tensor]]) -> None:
    """A replacement that computes what its pattern matched changes nothing: torch rebuilds the same nodes and
    returns the match, fxrules skips it as `no change` and returns no match; the graphs are the same."""
    theirs, expected, ours, found = _rewrite_both(model, pattern, pattern)
    assert len(expected) == 1
    assert found == []
    assert structure(ours) == structure(theirs) and op_sequence(ours) == op_sequence(theirs)
    arguments = [make() for make in inputs]
    torch.testing.assert_close(ours(*arguments), theirs(*arguments))


def test_traced_pattern_maps_its_own_nodes() -> None:
    """Given traced modules (test_subgraph_rewriter_traced_as_callable), the node map's keys are the nodes of
    the pattern graph passed in, as with torch."""
    pattern, replacement = torch.fx.symbolic_trace(cases.neg_plus_relu), torch.fx.symbolic_trace(cases.sigmoid)
    theirs, expected, ours, found = _rewrite_both(cases.NegReluModule(), pattern, replacement)
    assert [set(m.nodes_map) for m in found] == [set(m.nodes_map) for m in expected]
    assert found[0].anchor is expected[0].anchor is next(n for n in pattern.graph.nodes if n.name == "add")
    assert structure(ours) == structure(theirs)


def test_operands_match_in_their_written_order_only() -> None:
    """As torch's matcher, the drop-in does not try ``b + a`` for a pattern ``a + b`` (a rule would)."""
    gm = torch.fx.symbolic_trace(cases.NegReluSwapped())
    assert fxrules.replace_pattern(gm, cases.neg_plus_relu_of_two, cases.relu_of_first) == []
    rule = fxrules.rule_from_functions(cases.neg_plus_relu_of_two, cases.relu_of_first, name="r")
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

    theirs, expected, ours, found = _rewrite_both(f, pattern, replacement)
    assert _matches(found) == _matches(expected) == [("add", {"a": "x", "b": "z", "add": "add_1"})]
    assert structure(ours) == structure(theirs)


def test_an_output_that_would_become_an_input_is_left() -> None:
    """Documented difference: torch replaces ``neg(x)`` by ``x`` even where the graph would then return its
    input; fxrules skips that match (the caller could write into the result and change the input)."""

    class Negs(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.neg(torch.neg(x))

    _, expected, ours, found = _rewrite_both(Negs(), cases.neg, cases.identity)
    assert len(expected) == 2
    assert len(found) == 1
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


def _neg_plus_second(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.neg(x) + y


def test_a_pattern_input_the_pattern_does_not_use_matches_nothing() -> None:
    """Where torch is wrong: a pattern parameter the pattern never reads makes torch's replace_pattern raise
    ``KeyError``; the drop-in rewrites, and the unused input is not in the node map."""
    with pytest.raises(KeyError):
        subgraph_rewriter.replace_pattern(torch.fx.symbolic_trace(_neg_plus_second), _neg_of_first,
                                          cases.relu_of_first)
    gm = torch.fx.symbolic_trace(_neg_plus_second)
    found = fxrules.replace_pattern(gm, _neg_of_first, cases.relu_of_first)
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


def _add_neg(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(torch.neg(a), b)


def _sub_swapped(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.sub(b, a)


RANDOM_PAIRS = [(_neg_then_relu, _relu_and_neg), (_add_neg, _sub_swapped), (cases.add, cases.sub),
                (cases.neg, cases.relu), (_neg_and_relu, _relu_and_neg)]


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
    pytest.param(cases.cat, cases.stack, "rule r: torch.cat([w1, w2]) => torch.stack([w1, w2])\n", id="docstring"),
    pytest.param(cases.neg_plus_relu_of_two, cases.relu_of_first,
                 "rule r: torch.neg(x) + torch.relu(y) => torch.relu(x)\n", id="unused_input"),
    pytest.param(cases.method_chain, cases.identity, "rule r: x.dequantize().sigmoid().to(torch.float16) => x\n",
                 id="methods_and_dtype"),
    pytest.param(cases.neg_add_itself, cases.sigmoid_cat_itself, textwrap.dedent("""\
        rule r:
            pattern:
                neg_ = torch.neg(x)
                return torch.add(neg_, neg_)
            replace:
                sigmoid_ = torch.sigmoid(x)
                return torch.cat([sigmoid_, sigmoid_])
        """), id="shared_node"),
    pytest.param(cases.three_outputs, cases.three_replaced, textwrap.dedent("""\
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
    pytest.param(cases.reshape_alias, cases.as_strided,
                 "rule r: aten._reshape_alias_copy.default(x, arg0, arg1) => aten.as_strided.default(x, arg0, arg1)\n",
                 id="aten"),
])
def test_rule_text_and_rule(pattern: Any, replacement: Any, text: str) -> None:
    """``fxrules convert`` prints this text, and ``rule_from_functions`` is the rule it resolves to."""
    assert fxrules.integrations.convert.rule_text(pattern, replacement, "r") == text
    assert fxrules.format_text(text) == text
    assert meaning(fxrules.rule_from_functions(pattern, replacement, name="r")) == meaning(fxrules.parse(text)["r"])


def test_functions_of_other_modules_are_named_through_use() -> None:
    """A function the tracer leaves opaque is named through ``use`` of its module, allowed for the rule."""
    text = fxrules.integrations.convert.rule_text(cases.linear_mul, cases.wrapped_linear_mul, "gemm")
    assert text == textwrap.dedent("""\
        use tests.integrations.subgraph_rewriter_cases as subgraph_rewriter_cases

        rule gemm:
            pattern:
                linear_ = F.linear(a, b, bias=bias)
                return linear_, a * linear_
            replace:
                wrapped_gemm_bias_mul = subgraph_rewriter_cases.wrapped_gemm_bias_mul(a, b, bias)
                return wrapped_gemm_bias_mul[0], wrapped_gemm_bias_mul[1]
        """)
    theirs, expected, ours, found = _rewrite_both(cases.LinearMul(), cases.linear_mul, cases.wrapped_linear_mul)
    assert len(expected) == len(found) == 1
    assert structure(ours) == structure(theirs)
    assert [n.target for n in ours.graph.nodes].count(cases.wrapped_gemm_bias_mul) == 1


class ClampUnbounded(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nan_to_num(x.clamp(min=float("-inf"), max=float("inf")), nan=float("nan"))


def _clamp_unbounded(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(min=float("-inf"), max=float("inf"))


def _nan_to_nan(x: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(x, nan=float("nan"))


def test_infinite_arguments_convert_to_the_predefined_names() -> None:
    """``inf`` and ``-inf`` arguments are written as the language's names and match as torch's do."""
    text = fxrules.integrations.convert.rule_text(_clamp_unbounded, cases.identity, "r")
    assert text == "rule r: x.clamp(min=-inf, max=inf) => x\n"
    theirs, expected, ours, found = _rewrite_both(ClampUnbounded(), _clamp_unbounded, cases.identity)
    assert len(expected) == len(found) == 1
    assert structure(ours) == structure(theirs)


def test_a_nan_argument_converts_to_nan_and_matches_nan() -> None:
    """A ``nan`` argument is written ``nan``, which matches a NaN (torch's replace_pattern compares with
    ``==``, so its NaN never matches)."""
    assert fxrules.integrations.convert.rule_text(_nan_to_nan, cases.identity, "r") == \
        "rule r: torch.nan_to_num(x, nan=nan) => x\n"
    gm = torch.fx.symbolic_trace(ClampUnbounded())
    assert len(fxrules.replace_pattern(gm, _nan_to_nan, cases.identity)) == 1
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == []


@pytest.mark.parametrize(("pattern", "replacement", "message"), [
    (cases.relu, cases.MinusAttributeC(), "node 'c' is a get_attr: only function and method calls convert"),
    (cases.neg, cases.add, "the pattern takes 1 inputs and the replacement 2"),
    (lambda x: x.mul(1j), cases.identity, "the argument 1j (complex) cannot be written in a rule file"),
])
def test_what_cannot_convert_is_a_usage_error(pattern: Any, replacement: Any, message: str) -> None:
    with pytest.raises(fxrules.FxrUsageError, match=re.escape(message)):
        fxrules.rule_from_functions(pattern, replacement)
    with pytest.raises(fxrules.FxrUsageError, match=re.escape(message)):
        fxrules.replace_pattern(torch.fx.symbolic_trace(cases.NegOnce()), pattern, replacement)


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
