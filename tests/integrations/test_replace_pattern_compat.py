"""fxrules against ``torch.fx.subgraph_rewriter.replace_pattern`` on torch's own examples.

The cases are the examples of ``replace_pattern``'s docstring and the cases of
torch's ``test/fx/test_subgraph_rewriter.py``, each written once as a pair of
Python callables (for ``replace_pattern``; shared with the conversion tests in
``subgraph_rewriter_cases.py``) and once as an ``.fxr`` rule.  The
module under test is traced twice; one copy is rewritten by
``replace_pattern``, the other by ``fxrules.apply``, and the two must agree on

* the number of replacements,
* the operations of the resulting graphs, in graph order (``(op, target)``
  pairs; node names are ignored),
* the graphs' structure: every live node's operation and arguments, with
  nodes numbered in a canonical depth-first order from the output, so the
  comparison ignores node names and (where documented) the placement of
  independent nodes,
* the outputs on random inputs.

Where the two differ *by design* (fxrules runs to a fixpoint, treats ``+`` and
``*`` as commutative, removes dead code, matches operation families), the
test asserts the documented difference explicitly and says why.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.fx
from torch.fx import subgraph_rewriter

import fxrules
import tests.integrations.subgraph_rewriter_cases as cases

# ---------------------------------------------------------------------------------------------------------------------
# Comparing two rewritten graph modules.


def _target_key(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    """A name-independent description of what a node computes."""
    if node.op == "call_function":
        target = node.target
        return f"{getattr(target, '__module__', None)}.{getattr(target, '__name__', repr(target))}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__qualname__
    if node.op == "get_attr":
        # Attributes that a rewrite adds get fresh names ('c' vs 'three'); describe the value instead.
        value = getattr(gm, str(node.target))
        if isinstance(value, torch.Tensor):
            return f"Tensor{tuple(value.shape)}:{value.dtype}"
        return type(value).__qualname__
    return str(node.target)  # placeholder: the parameter name, equal in both copies


def _live_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The nodes the output depends on, in a canonical order: depth first from the output, arguments in order."""
    order: list[torch.fx.Node] = []
    seen: set[torch.fx.Node] = set()

    def visit(node: torch.fx.Node) -> None:
        if node in seen:
            return
        seen.add(node)
        inputs: list[torch.fx.Node] = []
        torch.fx.node.map_arg((node.args, dict(sorted(node.kwargs.items()))), inputs.append)
        for argument in inputs:
            visit(argument)
        order.append(node)

    visit(gm.graph.output_node())
    return order


def structure(gm: torch.fx.GraphModule) -> list[str]:
    """One line per live node: ``%i = op target(args, kwargs)`` with arguments referring to canonical numbers."""
    nodes = _live_nodes(gm)
    number = {node: i for i, node in enumerate(nodes)}

    def show(value: Any) -> Any:
        return torch.fx.node.map_arg(value, lambda n: f"%{number[n]}")

    return [
        f"%{number[n]} = {n.op} {_target_key(gm, n)}{show(n.args)!r} {show(dict(sorted(n.kwargs.items())))!r}"
        for n in nodes
    ]


def op_sequence(gm: torch.fx.GraphModule) -> list[tuple[str, str]]:
    """The live operations in graph order, as ``(op, target)`` pairs (names ignored)."""
    live = set(_live_nodes(gm))
    return [(n.op, _target_key(gm, n)) for n in gm.graph.nodes if n in live and n.op not in {"placeholder", "output"}]


def dead_ops(gm: torch.fx.GraphModule) -> list[tuple[str, str]]:
    live = set(_live_nodes(gm))
    return [(n.op, _target_key(gm, n)) for n in gm.graph.nodes if n not in live and n.op != "placeholder"]


def placeholders(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "placeholder"]


def assert_same_outputs(a: torch.fx.GraphModule, b: torch.fx.GraphModule, inputs: Sequence[Any]) -> None:
    torch.testing.assert_close(a(*inputs), b(*inputs), equal_nan=True)


def assert_same_rewrite(
    rp: torch.fx.GraphModule,
    fx: torch.fx.GraphModule,
    inputs: Sequence[Any],
    *,
    order_may_differ: bool = False,
) -> None:
    """The two rewritten modules are the same graph up to node names, and compute the same outputs."""
    rp.graph.lint()
    fx.graph.lint()
    assert placeholders(fx) == placeholders(rp)
    assert structure(fx) == structure(rp), f"replace_pattern:\n{rp.code}\nfxrules:\n{fx.code}"
    if order_may_differ:
        assert sorted(op_sequence(fx)) == sorted(op_sequence(rp)), f"replace_pattern:\n{rp.code}\nfxrules:\n{fx.code}"
    else:
        assert op_sequence(fx) == op_sequence(rp), f"replace_pattern:\n{rp.code}\nfxrules:\n{fx.code}"
    assert_same_outputs(rp, fx, inputs)


def rewrite_both(
    model: torch.nn.Module | Callable[..., Any],
    pattern: Callable[..., Any] | torch.nn.Module,
    replacement: Callable[..., Any] | torch.nn.Module,
    rules: str,
    **apply_kwargs: Any,
) -> tuple[torch.fx.GraphModule, list[Any], torch.fx.GraphModule, fxrules.Report]:
    """Trace ``model`` twice; rewrite one copy with replace_pattern and the other with the ``.fxr`` rules."""
    rp = torch.fx.symbolic_trace(model)
    fx = torch.fx.symbolic_trace(model)
    matches = subgraph_rewriter.replace_pattern(rp, pattern, replacement)
    allow = apply_kwargs.pop("allow", ())
    report = fxrules.apply(fx, fxrules.parse(rules, allow=allow), allow=allow, **apply_kwargs)
    return rp, matches, fx, report


def check_agreement(
    model: torch.nn.Module | Callable[..., Any],
    pattern: Callable[..., Any] | torch.nn.Module,
    replacement: Callable[..., Any] | torch.nn.Module,
    rules: str,
    inputs: Sequence[Any],
    replacements: int,
    *,
    order_may_differ: bool = False,
    **apply_kwargs: Any,
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, fxrules.Report]:
    rp, matches, fx, report = rewrite_both(model, pattern, replacement, rules, **apply_kwargs)
    assert len(matches) == replacements, rp.code
    assert report.total_fired == replacements, f"{report}\n{fx.code}"
    assert_same_rewrite(rp, fx, inputs, order_may_differ=order_may_differ)
    return rp, fx, report


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# ---------------------------------------------------------------------------------------------------------------------
# replace_pattern's docstring and torch/test/fx/test_subgraph_rewriter.py: cases where both must agree.

#: (module, pattern, replacement, rules, input shapes, replacements): the cases checked by check_agreement alone
AGREEING = [
    # replace_pattern's docstring: cat -> stack, matched twice, a list argument
    pytest.param(cases.CatSumModule(), cases.cat, cases.stack,
                 "rule cat_to_stack:\n    torch.cat([w1, w2]) => torch.stack([w1, w2])\n",
                 [(1, 3)] * 3, 2, id="docstring_cat_to_stack_list_argument_two_matches"),
    # replace_pattern's docstring: ``neg(x) + relu(y)`` -> ``relu(x)``, the replacement ignores ``y``
    pytest.param(cases.NegReluTwoInputs(), cases.neg_plus_relu_of_two, cases.relu_of_first,
                 "rule neg_plus_relu:\n    torch.neg(x) + torch.relu(y) => torch.relu(x)\n",
                 [(4, 4)] * 2, 1, id="docstring_neg_relu_with_unused_replacement_input"),
    # test_subgraph_rewriter_with_oneliner_pattern: a single op, ``neg`` -> ``relu``
    pytest.param(cases.NegOnce(), cases.neg, cases.relu, "rule neg_to_relu: torch.neg(x) => torch.relu(x)\n",
                 [(1, 3)], 1, id="oneliner_pattern"),
    # test_subgraph_rewriter_single_pattern_match: three nodes, one capture used twice
    pytest.param(cases.NegReluModule(), cases.neg_plus_relu, cases.relu,
                 "rule r:\n    torch.neg(x) + torch.relu(x) => torch.relu(x)\n",
                 [(1, 3)], 1, id="single_pattern_match_multi_node"),
    # test_subgraph_rewriter_correct_output_replacement: only the ``relu`` of ``neg(y) + relu(x)`` is replaced
    pytest.param(cases.NegYPlusReluX(), cases.relu, cases.neg, "rule relu_to_neg: torch.relu(x) => torch.neg(x)\n",
                 [(4, 4)] * 2, 1, id="correct_output_replacement"),
    # test_subgraph_rewriter_traced_as_callable: pattern and replacement given as traced modules
    pytest.param(cases.NegReluModule(),
                 torch.fx.symbolic_trace(cases.neg_plus_relu), torch.fx.symbolic_trace(cases.sigmoid),
                 "rule r:\n    torch.neg(x) + torch.relu(x) => torch.sigmoid(x)\n",
                 [(3, 4)], 1, id="traced_as_callable"),
    # test_subgraph_rewriter_pattern_is_entire_graph: an interior node used twice; a block-form rule
    pytest.param(cases.NegAddItself(), cases.neg_add_itself, cases.sigmoid_cat_itself, """
rule r:
    pattern:
        a = torch.neg(x)
        return torch.add(a, a)
    replace:
        a = torch.sigmoid(x)
        return torch.cat([a, a])
""", [(3, 4)], 1, id="pattern_is_entire_graph_block_form"),
    # test_..._pattern_output_pattern_node_can_have_users_that_are_not_matched: the OUTPUT may escape
    pytest.param(cases.ReluEscapes(), cases.relu, cases.sigmoid, "rule r: torch.relu(x) => torch.sigmoid(x)\n",
                 [(3, 4)], 1, id="pattern_output_may_have_unmatched_users"),
    # test_subgraph_rewriter_replace_consecutive_submodules: three matches in a chain
    pytest.param(cases.sigmoids(3), cases.sigmoid, cases.exp, "rule r: torch.sigmoid(x) => torch.exp(x)\n",
                 [(3, 4)], 3, id="replace_consecutive_nodes_several_matches"),
    # test_subgraph_rewriter_with_overlapping_matches: four sigmoids, a two-sigmoid pattern, two matches
    pytest.param(cases.sigmoids(4), cases.sigmoid_sigmoid, cases.neg,
                 "rule r: torch.sigmoid(torch.sigmoid(x)) => torch.neg(x)\n",
                 [(3, 4)], 2, id="overlapping_matches"),
    # test_subgraph_rewriter_replace_with_multiple_outputs: a two-output pattern
    pytest.param(cases.sigmoid_and_relu, cases.sigmoid_relu_pair, cases.exp_abs_pair, """
rule r:
    pattern:
        return torch.sigmoid(a), torch.relu(a)
    replace:
        return torch.exp(a), torch.abs(a)
""", [(3, 4)], 1, id="replace_with_multiple_outputs"),
    # test_subgraph_rewriter_call_method: a chain of three method calls, replaced by its input.  ``Tensor.to`` and
    # ``Tensor.dequantize`` have several overloads whose parameter names disagree; the design card (section 3) says
    # such calls are compared as written, not rejected.
    pytest.param(cases.MethodChain(), cases.method_chain, cases.identity,
                 "rule drop_dequant_sigmoid_to: x.dequantize().sigmoid().to(torch.float16) => x\n",
                 [(3, 4)], 1, id="call_method_pattern"),
    # test_subgraph_rewriter_placeholder_matching: a capture matches a node (the ``add``) with inputs of its own;
    # the dtype comes from a module attribute, so it is a literal ``torch.float16`` in the graph
    pytest.param(cases.AddThenMethodChain(), cases.dequantize_sigmoid_to, cases.identity,
                 "rule r: torch.sigmoid(x.dequantize()).to(torch.float16) => x\n",
                 [(3, 4)], 1, id="placeholder_matching"),
]


@pytest.mark.parametrize(("model", "pattern", "replacement", "rules", "shapes", "replacements"), AGREEING)
def test_rule_makes_the_rewrite_replace_pattern_makes(
    model: torch.nn.Module | Callable[..., Any],
    pattern: Callable[..., Any],
    replacement: Callable[..., Any],
    rules: str,
    shapes: list[tuple[int, ...]],
    replacements: int,
) -> None:
    """The rule fires as often as replace_pattern replaces, leaving the same graph computing the same outputs."""
    check_agreement(model, pattern, replacement, rules, [_randn(*shape) for shape in shapes], replacements)


def test_multiple_pattern_match_cat_sum_method_call() -> None:
    """test_subgraph_rewriter_multiple_pattern_match: ``torch.cat([w1, w2]).sum()`` (a method call) -> stack."""
    _, fx, report = check_agreement(
        cases.CatSumModule(),
        cases.cat_sum,
        cases.stack,
        "rule cat_sum_to_stack:\n    torch.cat([w1, w2]).sum() => torch.stack([w1, w2])\n",
        [_randn(1, 3), _randn(1, 3), _randn(1, 3)],
        replacements=2,
        # Same graph, different placement: replace_pattern puts the second torch.stack just before its first
        # user (after the first max/add); fxrules splices each replacement where the matched output was.  Both
        # are valid topological orders of the same DAG (the structure comparison checks that).
        order_may_differ=True,
    )
    assert report.counts() == {"cat_sum_to_stack": 2}
    # fxrules: each torch.stack where its matched .sum() was, i.e. both before the first max.
    assert op_sequence(fx)[:2] == [("call_function", "torch.stack")] * 2


def test_interior_nodes_with_unmatched_users_reject_the_match() -> None:
    """test_..._internal_pattern_nodes_cannot_have_users_that_are_not_matched: no match, graph untouched.

    ``m1`` (a ``cat``) is also used by the other ``addmm`` (and by the dead ``t0``), ``m2`` by the other ``.t()``;
    both tools reject the match.  fxrules must also say why in its report.
    """
    rules = """
rule addmm_of_cats:
    pattern:
        m1 = torch.cat([w1, w2])
        m2 = torch.cat([x, b2])
        return torch.addmm(b1, m1, m2.t())
    replace:
        return torch.cat([x, w1, w2])
"""
    untouched = torch.fx.symbolic_trace(cases.AddmmOfCats()).code
    inputs = [_randn(2, 3), _randn(2, 3), _randn(2, 3), _randn(4), _randn(2, 3)]
    rp, matches, fx, report = rewrite_both(cases.AddmmOfCats(), cases.addmm_of_cats, cases.cat_three, rules)
    assert matches == []
    assert report.total_fired == 0
    assert rp.code == untouched
    assert fx.code == untouched
    # The report names the reason (design card section 7: escaping users reject a match; the report says why).
    assert set(report["addmm_of_cats"].skip_counts) == {"escaping user"}, str(report)
    assert_same_rewrite(rp, fx, inputs)


def test_replaces_referenced_submodules() -> None:
    """test_subgraph_rewriter_replaces_referenced_submodules: call_module patterns; the unused submodule goes.

    replace_pattern copies the replacement module's ``tanh`` submodule; in a rule, a new module comes from a
    helper (design card section 6).  Both leave ``sigmoid`` unreferenced and delete it.
    """

    class Pattern(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sigmoid = torch.nn.Sigmoid()
            self.submod = torch.nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.submod(self.sigmoid(x))

    class M(Pattern):
        """The pattern's submodules, applied to ``x + 1``."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x + 1)

    class Replacement(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tanh = torch.nn.Tanh()
            self.submod = torch.nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.submod(self.tanh(x))

    rules = """
rule sigmoid_module_to_tanh_module:
    given:
        s: nn.Sigmoid
        m: nn.ReLU
    pattern:
        return m(s(x))
    replace:
        return m(@tanh_module()(x))
"""
    _, fx, _ = check_agreement(
        M(), Pattern(), Replacement(), rules, [_randn(3, 4)], replacements=1,
        helpers={"tanh_module": torch.nn.Tanh},
    )
    assert not hasattr(fx, "sigmoid")
    assert type(fx.get_submodule("submod")) is torch.nn.ReLU


def test_replace_with_duplicated_outputs() -> None:
    """test_subgraph_rewriter_replace_with_duplicated_outputs: the interior ``a`` is also the third output.

    Documented difference: replace_pattern leaves the replacement of the unused output ``a`` (``torch.exp``) in
    the graph as dead code; fxrules removes dead code after a rewrite (design card section 7).
    """

    rules = """
rule r:
    pattern:
        a = a1 - a2
        return torch.sigmoid(a), torch.relu(a), a
    replace:
        y2 = torch.abs(a2)
        return y2, y2, torch.exp(a1)
"""
    rp, fx, _ = check_agreement(
        cases.difference_outputs, cases.three_outputs, cases.three_replaced, rules, [_randn(3, 4), _randn(3, 4)],
        replacements=1,
    )
    assert dead_ops(rp) == [("call_function", "torch.exp")]
    assert dead_ops(fx) == []


def test_duplicated_outputs_in_any_order() -> None:
    """The same rule with the outputs listed interior-first matches the same way (output order is not semantic)."""

    def rules(order: str) -> str:
        outputs = {"last": "torch.sigmoid(a), torch.relu(a), a", "first": "a, torch.sigmoid(a), torch.relu(a)"}
        replaced = {"last": "y2, y2, torch.exp(a1)", "first": "torch.exp(a1), y2, y2"}
        return (f"rule r:\n    pattern:\n        a = a1 - a2\n        return {outputs[order]}\n"
                f"    replace:\n        y2 = torch.abs(a2)\n        return {replaced[order]}\n")

    results = {}
    for order in ("first", "last"):
        gm = torch.fx.symbolic_trace(cases.difference_outputs)
        report = fxrules.apply(gm, fxrules.parse(rules(order)))
        results[order] = (report.total_fired, structure(gm))
    assert results["last"] == results["first"]
    assert results["first"][0] == 1


def test_unused_args_keep_their_placeholders() -> None:
    """test_subgraph_rewriter_with_unused_args: ``x + y`` -> ``x - y``; the unused input ``z`` stays."""
    _, fx, _ = check_agreement(
        cases.AddUnusedZ(), cases.add, cases.sub,
        "rule add_to_sub: x + y => x - y\n",
        [_randn(3, 4), _randn(3, 4), _randn(3, 4)], replacements=1,
    )
    assert placeholders(fx) == ["x", "y", "z"]


def test_nodes_with_kwargs_and_wrapped_replacement() -> None:
    """test_subgraph_rewriter_nodes_with_kwargs: ``F.linear(a, b, bias=bias)`` and a two-output replacement.

    The replacement calls a function the tracer leaves opaque; the rule names it through ``use`` (its module is
    passed in ``allow=``) and unpacks its tuple result with ``[0]``/``[1]``, as replace_pattern's tracing does.
    """

    rules = f"""
use {cases.__name__} as cases
rule gemm_bias_mul:
    pattern:
        lin = F.linear(a, b, bias=bias)
        return lin, a * lin
    replace:
        both = cases.wrapped_gemm_bias_mul(a, b, bias)
        return both[0], both[1]
"""
    _, fx, _ = check_agreement(cases.LinearMul(), cases.linear_mul, cases.wrapped_linear_mul, rules, [_randn(4, 16)],
                               replacements=1, allow=[cases.__name__])
    assert [n.target for n in fx.graph.nodes].count(cases.wrapped_gemm_bias_mul) == 1


def test_local_revert_cycle_rejected() -> None:
    """test_subgraph_rewriter_local_revert: three candidate anchors, two real matches.

    replace_pattern does not match anchor 2 (``lin_res_3 * sigmoid(lin_res_3)``) because the operand order differs
    from the pattern's ``c * lin``.  fxrules treats ``*`` as commutative (design card section 3) and so does match
    it structurally, with ``c = sigmoid(lin_res_3)``: a capture computed from a node of the match, which the card
    (section 7) rejects as a cycle.  The count agrees, and the report names the cycle.
    """

    rules = f"""
use {cases.__name__} as cases
rule gemm_bias_mul_with_c:
    pattern:
        lin = F.linear(a, b, bias=bias)
        return lin, c * lin
    replace:
        both = cases.wrapped_gemm_bias_mul_with_c(a, b, bias, c)
        return both[0], both[1]
"""
    _, fx, report = check_agreement(
        cases.ThreeAnchors(), cases.linear_times_c, cases.wrapped_linear_times_c, rules, [_randn(4, 16), _randn(4, 16)],
        replacements=2, allow=[cases.__name__],
    )
    assert [n.target for n in fx.graph.nodes].count(cases.wrapped_gemm_bias_mul_with_c) == 2
    assert report["gemm_bias_mul_with_c"].skip_counts == {"cycle": 1}, str(report)


class QuantizedAddReluModule(torch.nn.Module):
    """test_replace_pattern_with_filters: the first ``torch.add`` adds a scalar, the second a tensor."""

    def forward(self, x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
        x = x.dequantize()
        x = torch.add(x, 2)
        x = x.relu()
        x = torch.quantize_per_tensor(x, scale, zero_point, torch.quint8)
        y = x + 1
        x = x.dequantize()
        x = torch.add(x, y)
        x = x.relu()
        x = torch.quantize_per_tensor(x, scale, zero_point, torch.quint8)
        return x


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")  # deprecated in torch, used by torch's case
def test_replace_pattern_with_filters_as_typed_capture() -> None:
    """test_replace_pattern_with_filters: the match filter ``second_input_is_scalar`` is ``num: Scalar`` in a rule.

    Without the filter replace_pattern replaces both sites; with it, one.  The typed rule must agree with the
    filtered call.
    """

    def pattern(x, num, scale, zero_point):
        x = x.dequantize()
        x = torch.add(x, num)
        x = x.relu()
        return torch.quantize_per_tensor(x, scale, zero_point, torch.quint8)

    def replacement(x, num, scale, zero_point):
        return torch.mul(x, num)

    def second_input_is_scalar(match: Any, original_graph: Any, pattern_graph: Any) -> bool:
        num_node = [n for n in pattern_graph.nodes if n.op == "placeholder"][1]
        return isinstance(match.nodes_map[num_node], int | float)

    unfiltered = torch.fx.symbolic_trace(QuantizedAddReluModule())
    assert len(subgraph_rewriter.replace_pattern_with_filters(unfiltered, pattern, replacement, None)) == 2

    rp = torch.fx.symbolic_trace(QuantizedAddReluModule())
    matches = subgraph_rewriter.replace_pattern_with_filters(rp, pattern, replacement, [second_input_is_scalar])
    assert len(matches) == 1

    rules = """
rule binary_op_scalar_relu:
    given:
        num: Scalar
    pattern:
        x1 = torch.add(x.dequantize(), num)
        return torch.quantize_per_tensor(x1.relu(), scale, zero_point, torch.quint8)
    replace:
        return torch.mul(x, num)
"""
    fx = torch.fx.symbolic_trace(QuantizedAddReluModule())
    report = fxrules.apply(fx, fxrules.parse(rules))
    assert report.total_fired == 1, str(report)
    assert_same_rewrite(rp, fx, [torch.rand(3, 4), 0.05, 3])


def test_list_captures_bind_whole_list_arguments() -> None:
    """test_matching_pattern_with_list_type_arg (variant): captures bind list arguments ``[1, 2]`` and ``[3, 4]``.

    (torch's own version swaps the two lists in place; that rule is its own inverse: see the fixpoint test below.)
    """

    # In a graph of aten operators fxrules spells a replacement's torch.as_strided as aten.as_strided.default
    # (see docs/pipelines.md); both tools are given the aten spelling so the outputs compare as written.
    _, fx, _ = check_agreement(
        cases.ReshapeAliasModule(), cases.reshape_alias, cases.as_strided,
        "rule r: aten._reshape_alias_copy.default(x, size, stride) => aten.as_strided.default(x, size, stride)\n",
        [_randn(16)], replacements=1,
    )
    assert next(n for n in fx.graph.nodes if n.op == "call_function").args[1:] == ([1, 2], [3, 4])


def test_replacement_with_attrs() -> None:
    """test_replacement_with_attrs: ``x + self.a`` -> ``x - <new constant>``.

    replace_pattern copies the replacement module's tensor ``c``; in a rule, an ``Attr`` capture matches the
    ``get_attr`` (guarded by its name) and a helper returning a tensor adds the new constant (card sections 5, 6).
    """

    class Pattern(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.tensor([1])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.a

    class M(Pattern):
        """The pattern, then ``- self.b``."""

        def __init__(self) -> None:
            super().__init__()
            self.b = torch.tensor([2])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) - self.b

    rules = """
rule add_a_to_sub_c:
    given:
        p: Attr
    pattern:
        return x + p
    where:
        p.target == "a"
    replace:
        return x - @three()
"""
    check_agreement(
        M(), Pattern(), cases.MinusAttributeC(), rules, [torch.randint(-5, 5, (3,))], replacements=1,
        helpers={"three": lambda: torch.tensor([3])},
        # Placement of get_attr nodes: replace_pattern hoists the untouched `b = self.b` above the replacement's
        # `c = self.c`; fxrules leaves `b` where it was.  Same DAG (the structure comparison checks that).
        order_may_differ=True,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Documented differences.


@pytest.mark.parametrize(
    ("model", "pattern", "rules", "inputs"),
    [
        pytest.param(
            cases.NegReluModule(), cases.neg_plus_relu,
            "rule same:\n    torch.neg(x) + torch.relu(x) => torch.neg(x) + torch.relu(x)\n",
            lambda: [_randn(1, 3)],
            id="preserves_logic",
        ),
        pytest.param(
            cases.MmModule(), cases.mm,
            "rule same: torch.mm(x, y) => torch.mm(x, y)\n",
            lambda: [_randn(3, 4), _randn(4, 5)],
            id="graph_argument_order",
        ),
    ],
)
def test_a_rule_whose_replacement_is_its_pattern_changes_nothing(
    model: Any, pattern: Any, rules: str, inputs: Callable[[], list[torch.Tensor]]
) -> None:
    """replace_pattern rewrites the match once, into a copy of itself: the same graph but for node names.

    fxrules skips a rewrite whose result computes what the match does (same targets, same arguments) as
    ``no change``, so the rule terminates and the graph keeps its nodes; the load-time check says so.
    """
    rp = torch.fx.symbolic_trace(model)
    assert len(subgraph_rewriter.replace_pattern(rp, pattern, pattern)) == 1
    fx = torch.fx.symbolic_trace(model)
    before = fx.code
    ruleset = fxrules.parse(rules)
    assert [w.message for w in ruleset.warnings] == [
        "rule same: its replacement computes what its pattern matches: every match is skipped as `no change`"]
    report = fxrules.apply(fx, ruleset)
    assert report.counts() == {} and report["same"].skip_counts == {"no change": 1}
    assert fx.code == before
    assert structure(fx) == structure(rp)
    assert_same_outputs(rp, fx, inputs())


def test_a_rule_matched_by_its_own_different_replacement_does_not_converge() -> None:
    """replace_pattern makes one pass, so a pattern that matches its own replacement is rewritten once.

    fxrules repeats passes to a fixpoint: a rule whose replacement (the list arguments swapped) its own pattern
    matches fires forever.  It gets a load-time warning, then a convergence error naming the rule, with the
    module left exactly as it was (all or nothing).
    """
    model = cases.ReshapeAliasModule()
    rp = torch.fx.symbolic_trace(model)
    assert len(subgraph_rewriter.replace_pattern(rp, cases.reshape_alias, cases.reshape_alias_swapped)) == 1
    fx = torch.fx.symbolic_trace(model)
    before = fx.code
    ruleset = fxrules.parse("rule same:\n    aten._reshape_alias_copy.default(x, a0, a1) => "
                            "aten._reshape_alias_copy.default(x, a1, a0)\n")
    assert [w.message for w in ruleset.warnings] == [
        "rule same: its pattern matches its own replacement, so it may fire forever"]
    with pytest.raises(fxrules.FxrConvergenceError, match="same"):
        fxrules.apply(fx, ruleset, max_passes=5)
    assert fx.code == before
    assert_same_outputs(torch.fx.symbolic_trace(model), fx, [_randn(16)])


def test_commutative_operands_match_in_either_order() -> None:
    """replace_pattern matches operands in the written order only; fxrules also tries ``a + b`` as ``b + a``.

    Design card section 3: ``operator.add`` is commutative, the written order tried first.
    """

    def replacement(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sub(torch.relu(y), x)

    _, matches, fx, report = rewrite_both(
        cases.NegReluSwapped(), cases.neg_plus_relu_of_two, replacement,
        "rule r:\n    torch.neg(x) + torch.relu(y) => torch.sub(torch.relu(y), x)\n",
    )
    assert matches == []
    assert report.total_fired == 1
    assert op_sequence(fx) == [("call_function", "torch.relu"), ("call_function", "torch.sub")]
    inputs = [_randn(3, 4), _randn(3, 4)]
    torch.testing.assert_close(fx(*inputs), cases.NegReluSwapped()(*inputs))


def test_families_match_every_spelling() -> None:
    """replace_pattern matches one exact target; an fxrules family (design card section 4) matches every spelling.

    ``torch.relu(x)`` and ``x.relu()`` are both ``relu``: the family rule replaces both, replace_pattern only the
    ``torch.relu`` call.
    """

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + x.relu()

    rp, matches, fx, report = rewrite_both(M(), cases.relu, cases.sigmoid, "rule r: relu(x) => torch.sigmoid(x)\n")
    assert len(matches) == 1
    assert report.total_fired == 2
    add = ("call_function", f"{operator.add.__module__}.add")
    assert sorted(op_sequence(rp)) == sorted([("call_function", "torch.sigmoid"), ("call_method", "Tensor.relu"), add])
    assert op_sequence(fx) == [("call_function", "torch.sigmoid"), ("call_function", "torch.sigmoid"), add]
    inputs = [_randn(3, 4)]
    torch.testing.assert_close(fx(*inputs), 2 * torch.sigmoid(inputs[0]))
