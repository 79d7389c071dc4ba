"""fxrules against ``torch.fx.subgraph_rewriter.replace_pattern`` on torch's own examples.

The cases are the examples of ``replace_pattern``'s docstring and the cases of
torch's ``test/fx/test_subgraph_rewriter.py``, each written once as a pair of
Python callables (for ``replace_pattern``) and once as an ``.fxr`` rule.  The
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

# ---------------------------------------------------------------------------------------------------------------------
# Functions that stay opaque to tracing (torch's test file wraps the same two).


@torch.fx.wrap
def wrapped_gemm_bias_mul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    mul_res = lin_res * a
    return lin_res, mul_res


class LinearMul(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w0 = torch.nn.Parameter(torch.randn([16, 16]))
        self.b0 = torch.nn.Parameter(torch.randn([16]))

    def forward(self, in0: torch.Tensor) -> torch.Tensor:
        lin_res = torch.nn.functional.linear(in0, self.w0, bias=self.b0)
        mul_res = in0 * lin_res
        return mul_res + in0


def _linear_mul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    mul_res = a * lin_res
    return lin_res, mul_res


def _wrapped_linear_mul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res, mul_res = wrapped_gemm_bias_mul(a, b, bias)
    return lin_res, mul_res


@torch.fx.wrap
def wrapped_gemm_bias_mul_with_c(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    mul_res = lin_res * c
    return lin_res, mul_res


# ---------------------------------------------------------------------------------------------------------------------
# Patterns and replacements used by several cases (functions, not lambdas: replace_pattern traces them).


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _neg(x: torch.Tensor) -> torch.Tensor:
    return torch.neg(x)


def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x)


def _exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def _neg_plus_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.neg(x) + torch.relu(x)


def _sigmoid_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.sigmoid(x))


def _mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, y)


def _reshape_alias(x: torch.Tensor, arg0: list[int], arg1: list[int]) -> torch.Tensor:
    return torch.ops.aten._reshape_alias_copy.default(x, arg0, arg1)


def _reshape_alias_swapped(x: torch.Tensor, arg0: list[int], arg1: list[int]) -> torch.Tensor:
    return torch.ops.aten._reshape_alias_copy.default(x, arg1, arg0)


class MmModule(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, y)


class ReshapeAliasModule(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # doubled: returning a view of the input (the replacement's as_strided) would be skipped (reason 'alias')
        return torch.ops.aten._reshape_alias_copy.default(x, [1, 2], [3, 4]) * 2


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
# replace_pattern's docstring.


class CatSumModule(torch.nn.Module):
    """The module of replace_pattern's docstring (and of test_subgraph_rewriter_multiple_pattern_match)."""

    def forward(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        m1 = torch.cat([w1, w2]).sum()
        m2 = torch.cat([w1, w2]).sum()
        return x + torch.max(m1) + torch.max(m2)


def test_docstring_cat_to_stack_list_argument_two_matches() -> None:
    """Docstring: ``torch.cat([w1, w2])`` -> ``torch.stack([w1, w2])``, matched twice, a list argument."""
    check_agreement(
        CatSumModule(),
        lambda w1, w2: torch.cat([w1, w2]),
        lambda w1, w2: torch.stack([w1, w2]),
        "rule cat_to_stack:\n    torch.cat([w1, w2]) => torch.stack([w1, w2])\n",
        [_randn(1, 3), _randn(1, 3), _randn(1, 3)],
        replacements=2,
    )


def test_multiple_pattern_match_cat_sum_method_call() -> None:
    """test_subgraph_rewriter_multiple_pattern_match: ``torch.cat([w1, w2]).sum()`` (a method call) -> stack."""
    _, fx, report = check_agreement(
        CatSumModule(),
        lambda w1, w2: torch.cat([w1, w2]).sum(),
        lambda w1, w2: torch.stack([w1, w2]),
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


def test_docstring_neg_relu_with_unused_replacement_input() -> None:
    """Docstring: ``torch.neg(x) + torch.relu(y)`` -> ``torch.relu(x)`` (the replacement ignores ``y``)."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            val = torch.neg(x) + torch.relu(y)
            return torch.add(val, val)

    def pattern(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.neg(x) + torch.relu(y)

    def replacement(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    check_agreement(
        M(), pattern, replacement,
        "rule neg_plus_relu:\n    torch.neg(x) + torch.relu(y) => torch.relu(x)\n",
        [_randn(4, 4), _randn(4, 4)],
        replacements=1,
    )


# ---------------------------------------------------------------------------------------------------------------------
# torch/test/fx/test_subgraph_rewriter.py: cases where both must agree.


class NegReluModule(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        val = torch.neg(x) + torch.relu(x)
        return torch.add(val, val)


def test_oneliner_pattern() -> None:
    """test_subgraph_rewriter_with_oneliner_pattern: a single op, ``neg`` -> ``relu``."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            val = torch.neg(x)
            return torch.add(val, val)

    check_agreement(
        M(), _neg, _relu,
        "rule neg_to_relu: torch.neg(x) => torch.relu(x)\n",
        [_randn(1, 3)], replacements=1,
    )


def test_single_pattern_match_multi_node() -> None:
    """test_subgraph_rewriter_single_pattern_match: three nodes, one capture used twice."""
    check_agreement(
        NegReluModule(), _neg_plus_relu, _relu,
        "rule r:\n    torch.neg(x) + torch.relu(x) => torch.relu(x)\n",
        [_randn(1, 3)], replacements=1,
    )


def test_correct_output_replacement() -> None:
    """test_subgraph_rewriter_correct_output_replacement: only the ``relu`` of ``neg(y) + relu(x)`` is replaced."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            val = torch.neg(y) + torch.relu(x)
            return torch.add(val, val)

    check_agreement(
        M(), _relu, _neg,
        "rule relu_to_neg: torch.relu(x) => torch.neg(x)\n",
        [_randn(4, 4), _randn(4, 4)], replacements=1,
    )


def test_traced_as_callable() -> None:
    """test_subgraph_rewriter_traced_as_callable: pattern and replacement given as traced modules."""

    class Pattern(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.neg(x) + torch.relu(x)

    class Replacement(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(x)

    check_agreement(
        NegReluModule(), torch.fx.symbolic_trace(Pattern()), torch.fx.symbolic_trace(Replacement()),
        "rule r:\n    torch.neg(x) + torch.relu(x) => torch.sigmoid(x)\n",
        [_randn(3, 4)], replacements=1,
    )


def test_pattern_is_entire_graph_block_form() -> None:
    """test_subgraph_rewriter_pattern_is_entire_graph: an interior node used twice; a block-form rule."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = torch.neg(x)
            return torch.add(a, a)

    def pattern(x: torch.Tensor) -> torch.Tensor:
        a = torch.neg(x)
        return torch.add(a, a)

    def replacement(x: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(x)
        return torch.cat([a, a])

    rules = """
rule r:
    pattern:
        a = torch.neg(x)
        return torch.add(a, a)
    replace:
        a = torch.sigmoid(x)
        return torch.cat([a, a])
"""
    check_agreement(M(), pattern, replacement, rules, [_randn(3, 4)], replacements=1)


def test_pattern_output_may_have_unmatched_users() -> None:
    """test_..._pattern_output_pattern_node_can_have_users_that_are_not_matched: the OUTPUT may escape."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(x)
            return torch.neg(y) - y

    check_agreement(
        M(), _relu, _sigmoid,
        "rule r: torch.relu(x) => torch.sigmoid(x)\n",
        [_randn(3, 4)], replacements=1,
    )


def test_interior_nodes_with_unmatched_users_reject_the_match() -> None:
    """test_..._internal_pattern_nodes_cannot_have_users_that_are_not_matched: no match, graph untouched.

    ``m1`` (a ``cat``) is also used by the other ``addmm`` (and by the dead ``t0``), ``m2`` by the other ``.t()``;
    both tools reject the match.  fxrules must also say why in its report.
    """

    class M(torch.nn.Module):
        def forward(self, x, w1, w2, b1, b2):
            m0 = torch.cat([w1, w2])  # noqa: F841
            m1 = torch.cat([w1, w2])
            m2 = torch.cat([x, b2])
            t0 = torch.addmm(b1, m1, m2.t())  # noqa: F841
            t1 = torch.sum(w1, 1)
            t2 = torch.addmm(b1, m1, m2.t())
            return torch.sum(t1), torch.sum(t2)

    def pattern(x, w1, w2, b1, b2):
        m1 = torch.cat([w1, w2])
        m2 = torch.cat([x, b2])
        return torch.addmm(b1, m1, m2.t())

    def replacement(x, w1, w2, b1, b2):
        return torch.cat([x, w1, w2])

    rules = """
rule addmm_of_cats:
    pattern:
        m1 = torch.cat([w1, w2])
        m2 = torch.cat([x, b2])
        return torch.addmm(b1, m1, m2.t())
    replace:
        return torch.cat([x, w1, w2])
"""
    untouched = torch.fx.symbolic_trace(M()).code
    inputs = [_randn(2, 3), _randn(2, 3), _randn(2, 3), _randn(4), _randn(2, 3)]
    rp, matches, fx, report = rewrite_both(M(), pattern, replacement, rules)
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

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sigmoid = torch.nn.Sigmoid()
            self.submod = torch.nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + 1
            return self.submod(self.sigmoid(x))

    class Pattern(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sigmoid = torch.nn.Sigmoid()
            self.submod = torch.nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.submod(self.sigmoid(x))

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


def test_replace_consecutive_nodes_several_matches() -> None:
    """test_subgraph_rewriter_replace_consecutive_submodules: three matches in a chain."""

    def f(x: torch.Tensor) -> torch.Tensor:
        x = torch.sigmoid(x)
        x = torch.sigmoid(x)
        return torch.sigmoid(x)

    check_agreement(
        f, _sigmoid, _exp,
        "rule r: torch.sigmoid(x) => torch.exp(x)\n",
        [_randn(3, 4)], replacements=3,
    )


def test_overlapping_matches() -> None:
    """test_subgraph_rewriter_with_overlapping_matches: four sigmoids, a two-sigmoid pattern, two matches."""

    def f(x: torch.Tensor) -> torch.Tensor:
        x = torch.sigmoid(x)
        x = torch.sigmoid(x)
        x = torch.sigmoid(x)
        return torch.sigmoid(x)

    check_agreement(
        f, _sigmoid_sigmoid, _neg,
        "rule r: torch.sigmoid(torch.sigmoid(x)) => torch.neg(x)\n",
        [_randn(3, 4)], replacements=2,
    )


def test_replace_with_multiple_outputs() -> None:
    """test_subgraph_rewriter_replace_with_multiple_outputs: a two-output pattern."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x)
        z = torch.relu(x)
        return y + z

    def pattern(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sigmoid(a), torch.relu(a)

    def replacement(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.exp(x), torch.abs(x)

    rules = """
rule r:
    pattern:
        return torch.sigmoid(a), torch.relu(a)
    replace:
        return torch.exp(a), torch.abs(a)
"""
    check_agreement(f, pattern, replacement, rules, [_randn(3, 4)], replacements=1)


def test_replace_with_duplicated_outputs() -> None:
    """test_subgraph_rewriter_replace_with_duplicated_outputs: the interior ``a`` is also the third output.

    Documented difference: replace_pattern leaves the replacement of the unused output ``a`` (``torch.exp``) in
    the graph as dead code; fxrules removes dead code after a rewrite (design card section 7).
    """

    def f(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        x = x1 - x2
        y = torch.sigmoid(x)
        z = torch.relu(x)
        return y + z

    def pattern(a1: torch.Tensor, a2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = a1 - a2
        b = torch.sigmoid(a)
        c = torch.relu(a)
        return b, c, a

    def replacement(x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y1 = torch.exp(x1)
        y2 = torch.abs(x2)
        return y2, y2, y1

    rules = """
rule r:
    pattern:
        a = a1 - a2
        return torch.sigmoid(a), torch.relu(a), a
    replace:
        y2 = torch.abs(a2)
        return y2, y2, torch.exp(a1)
"""
    rp, fx, _ = check_agreement(f, pattern, replacement, rules, [_randn(3, 4), _randn(3, 4)], replacements=1)
    assert dead_ops(rp) == [("call_function", "torch.exp")]
    assert dead_ops(fx) == []


def test_duplicated_outputs_in_any_order() -> None:
    """The same rule with the outputs listed interior-first matches the same way (output order is not semantic)."""

    def f(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        x = x1 - x2
        return torch.sigmoid(x) + torch.relu(x)

    def rules(order: str) -> str:
        outputs = {"last": "torch.sigmoid(a), torch.relu(a), a", "first": "a, torch.sigmoid(a), torch.relu(a)"}
        replaced = {"last": "y2, y2, torch.exp(a1)", "first": "torch.exp(a1), y2, y2"}
        return (f"rule r:\n    pattern:\n        a = a1 - a2\n        return {outputs[order]}\n"
                f"    replace:\n        y2 = torch.abs(a2)\n        return {replaced[order]}\n")

    results = {}
    for order in ("first", "last"):
        gm = torch.fx.symbolic_trace(f)
        report = fxrules.apply(gm, fxrules.parse(rules(order)))
        results[order] = (report.total_fired, structure(gm))
    assert results["last"] == results["first"]
    assert results["first"][0] == 1


def test_unused_args_keep_their_placeholders() -> None:
    """test_subgraph_rewriter_with_unused_args: ``x + y`` -> ``x - y``; the unused input ``z`` stays."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return x + y

    _, fx, _ = check_agreement(
        M(), lambda x, y: x + y, lambda x, y: x - y,
        "rule add_to_sub: x + y => x - y\n",
        [_randn(3, 4), _randn(3, 4), _randn(3, 4)], replacements=1,
    )
    assert placeholders(fx) == ["x", "y", "z"]


def test_call_method_pattern() -> None:
    """test_subgraph_rewriter_call_method: a chain of three method calls, replaced by its input.

    ``Tensor.to`` and ``Tensor.dequantize`` have several overloads whose parameter names disagree; the design card
    (section 3) says such calls are compared as written, not rejected.
    """

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.dequantize()
            x = x.sigmoid()
            x = x.to(torch.float16)
            return x * 2  # returning the input itself would be skipped (reason 'alias')

    def pattern(x: torch.Tensor) -> torch.Tensor:
        x = x.dequantize()
        x = x.sigmoid()
        x = x.to(torch.float16)
        return x

    check_agreement(
        M(), pattern, _identity,
        "rule drop_dequant_sigmoid_to: x.dequantize().sigmoid().to(torch.float16) => x\n",
        [_randn(3, 4)], replacements=1,
    )


def test_placeholder_matching() -> None:
    """test_subgraph_rewriter_placeholder_matching: a capture matches a node (the ``add``) with inputs of its own.

    The dtype comes from a module attribute, so it is a literal ``torch.float16`` in the graph.
    """

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dtype = torch.float16

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x += 3
            x = x.dequantize()
            x = torch.sigmoid(x)
            dtype = self.dtype
            x = x.to(dtype)
            return x

    def pattern(x: torch.Tensor) -> torch.Tensor:
        x = x.dequantize()
        x = torch.sigmoid(x)
        x = x.to(torch.float16)
        return x

    check_agreement(
        M(), pattern, _identity,
        "rule r: torch.sigmoid(x.dequantize()).to(torch.float16) => x\n",
        [_randn(3, 4)], replacements=1,
    )


def test_nodes_with_kwargs_and_wrapped_replacement() -> None:
    """test_subgraph_rewriter_nodes_with_kwargs: ``F.linear(a, b, bias=bias)`` and a two-output replacement.

    The replacement calls a function the tracer leaves opaque; the rule names it through ``use`` (its module is
    passed in ``allow=``) and unpacks its tuple result with ``[0]``/``[1]``, as replace_pattern's tracing does.
    """

    rules = f"""
use {__name__} as compat
rule gemm_bias_mul:
    pattern:
        lin = F.linear(a, b, bias=bias)
        return lin, a * lin
    replace:
        both = compat.wrapped_gemm_bias_mul(a, b, bias)
        return both[0], both[1]
"""
    _, fx, _ = check_agreement(LinearMul(), _linear_mul, _wrapped_linear_mul, rules, [_randn(4, 16)],
                               replacements=1, allow=[__name__])
    assert [n.target for n in fx.graph.nodes].count(wrapped_gemm_bias_mul) == 1


def test_local_revert_cycle_rejected() -> None:
    """test_subgraph_rewriter_local_revert: three candidate anchors, two real matches.

    replace_pattern does not match anchor 2 (``lin_res_3 * sigmoid(lin_res_3)``) because the operand order differs
    from the pattern's ``c * lin``.  fxrules treats ``*`` as commutative (design card section 3) and so does match
    it structurally, with ``c = sigmoid(lin_res_3)``: a capture computed from a node of the match, which the card
    (section 7) rejects as a cycle.  The count agrees, and the report names the cycle.
    """

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for i in range(5):
                self.register_parameter(f"w{i}", torch.nn.Parameter(torch.randn([16, 16]) / 4))
                self.register_parameter(f"b{i}", torch.nn.Parameter(torch.randn([16])))

        def forward(self, in0: torch.Tensor, in1: torch.Tensor) -> torch.Tensor:
            lin_res_1 = torch.nn.functional.linear(in1, self.w0, bias=self.b0)
            lin_res_2 = torch.nn.functional.linear(lin_res_1, self.w1, bias=self.b1)
            mul_res_1 = in1 * lin_res_2  # anchor 1
            sum_res_1 = mul_res_1 + in1
            lin_res_3 = torch.nn.functional.linear(sum_res_1, self.w2, bias=self.b2)
            sigmoid_res_1 = torch.sigmoid(lin_res_3)
            mul_res_2 = lin_res_3 * sigmoid_res_1  # anchor 2: not a match
            lin_res_4 = torch.nn.functional.linear(in0, self.w3, bias=self.b3)
            lin_res_5 = torch.nn.functional.linear(lin_res_4, self.w4, bias=self.b4)
            mul_res_3 = in0 * lin_res_5  # anchor 3
            sum_res_2 = mul_res_3 + in0
            return torch.cat([mul_res_2, sum_res_2], dim=1)

    def pattern(a, b, bias, c):
        lin_res = torch.nn.functional.linear(a, b, bias=bias)
        mul_res = c * lin_res
        return lin_res, mul_res

    def replacement(a, b, bias, c):
        lin_res, mul_res = wrapped_gemm_bias_mul_with_c(a, b, bias, c)
        return lin_res, mul_res

    rules = f"""
use {__name__} as compat
rule gemm_bias_mul_with_c:
    pattern:
        lin = F.linear(a, b, bias=bias)
        return lin, c * lin
    replace:
        both = compat.wrapped_gemm_bias_mul_with_c(a, b, bias, c)
        return both[0], both[1]
"""
    _, fx, report = check_agreement(
        M(), pattern, replacement, rules, [_randn(4, 16), _randn(4, 16)], replacements=2, allow=[__name__],
    )
    assert [n.target for n in fx.graph.nodes].count(wrapped_gemm_bias_mul_with_c) == 2
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

    def replacement(x, arg0, arg1):
        return torch.ops.aten.as_strided.default(x, arg0, arg1)

    # In a graph of aten operators fxrules spells a replacement's torch.as_strided as aten.as_strided.default
    # (see docs/pipelines.md); both tools are given the aten spelling so the outputs compare as written.
    _, fx, _ = check_agreement(
        ReshapeAliasModule(), _reshape_alias, replacement,
        "rule r: aten._reshape_alias_copy.default(x, size, stride) => aten.as_strided.default(x, size, stride)\n",
        [_randn(16)], replacements=1,
    )
    assert next(n for n in fx.graph.nodes if n.op == "call_function").args[1:] == ([1, 2], [3, 4])


def test_replacement_with_attrs() -> None:
    """test_replacement_with_attrs: ``x + self.a`` -> ``x - <new constant>``.

    replace_pattern copies the replacement module's tensor ``c``; in a rule, an ``Attr`` capture matches the
    ``get_attr`` (guarded by its name) and a helper returning a tensor adds the new constant (card sections 5, 6).
    """

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.tensor([1])
            self.b = torch.tensor([2])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.a - self.b

    class Pattern(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.tensor([1])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.a

    class Replacement(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = torch.tensor([3])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x - self.c

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
        M(), Pattern(), Replacement(), rules, [torch.randint(-5, 5, (3,))], replacements=1,
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
            NegReluModule(), _neg_plus_relu,
            "rule same:\n    torch.neg(x) + torch.relu(x) => torch.neg(x) + torch.relu(x)\n",
            lambda: [_randn(1, 3)],
            id="preserves_logic",
        ),
        pytest.param(
            MmModule(), _mm,
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
    model = ReshapeAliasModule()
    rp = torch.fx.symbolic_trace(model)
    assert len(subgraph_rewriter.replace_pattern(rp, _reshape_alias, _reshape_alias_swapped)) == 1
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

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.relu(y) + torch.neg(x)

    def pattern(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.neg(x) + torch.relu(y)

    def replacement(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sub(torch.relu(y), x)

    _, matches, fx, report = rewrite_both(
        M(), pattern, replacement, "rule r:\n    torch.neg(x) + torch.relu(y) => torch.sub(torch.relu(y), x)\n"
    )
    assert matches == []
    assert report.total_fired == 1
    assert op_sequence(fx) == [("call_function", "torch.relu"), ("call_function", "torch.sub")]
    inputs = [_randn(3, 4), _randn(3, 4)]
    torch.testing.assert_close(fx(*inputs), M()(*inputs))


def test_families_match_every_spelling() -> None:
    """replace_pattern matches one exact target; an fxrules family (design card section 4) matches every spelling.

    ``torch.relu(x)`` and ``x.relu()`` are both ``relu``: the family rule replaces both, replace_pattern only the
    ``torch.relu`` call.
    """

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + x.relu()

    rp, matches, fx, report = rewrite_both(M(), _relu, _sigmoid, "rule r: relu(x) => torch.sigmoid(x)\n")
    assert len(matches) == 1
    assert report.total_fired == 2
    add = ("call_function", f"{operator.add.__module__}.add")
    assert sorted(op_sequence(rp)) == sorted([("call_function", "torch.sigmoid"), ("call_method", "Tensor.relu"), add])
    assert op_sequence(fx) == [("call_function", "torch.sigmoid"), ("call_function", "torch.sigmoid"), add]
    inputs = [_randn(3, 4)]
    torch.testing.assert_close(fx(*inputs), 2 * torch.sigmoid(inputs[0]))
