"""Review of what ``apply`` promises when it rewrites: all or nothing, outputs kept, valid results.

Each test is a bug found in review (fixed since): a rewrite made valid by a sound rule, a commit that
kept every value, an ``apply`` that left nothing behind but what it was asked to change.
"""

from __future__ import annotations

import pytest
import torch
import torch.fx

import fxrules

DOUBLE_NEG = "rule double_neg:\n    torch.neg(torch.neg(x)) => torch.relu(torch.abs(x))\n"


def test_a_multi_output_replacement_reusing_a_later_interior_node_is_skipped_not_fatal() -> None:
    """The new nodes go before the earliest output; an interior node the replacement reuses may come after
    it.  Spliced anyway, the graph failed lint and the whole apply raised; the match is skipped instead."""
    rules = fxrules.parse("""
rule two_outputs:
    pattern:
        s = torch.relu(x)
        c = torch.sigmoid(s)
        a = torch.exp(s)
        b = torch.neg(a)
        return b, c
    replace:
        return torch.neg(a), torch.sigmoid(torch.log(a))
""")

    def f(x: torch.Tensor) -> torch.Tensor:
        s = torch.relu(x)
        return torch.sigmoid(s) + torch.neg(torch.exp(s))

    gm = torch.fx.symbolic_trace(f)
    code = gm.code
    report = fxrules.apply(gm, rules)
    assert report.fired("two_outputs") == 0
    assert report["two_outputs"].skip_counts == {"order": 1}
    assert gm.code == code


def test_a_rewrite_elsewhere_keeps_an_unused_in_place_call() -> None:
    """FX deems ``x.add_(1)`` pure; the commit's dead-code elimination erased it, changing every later read."""

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x.add_(1)
            torch.relu_(x)
            return torch.neg(torch.neg(x)), x * 2

    gm = torch.fx.symbolic_trace(Model())
    assert fxrules.apply(gm, fxrules.parse(DOUBLE_NEG)).fired("double_neg") == 1
    x = torch.randn(5)
    torch.testing.assert_close(gm(x.clone()), Model()(x.clone()))
    assert {"add_", "relu_"} <= {n.name for n in gm.graph.nodes}


def test_example_inputs_leave_buffers_inputs_and_random_state_as_they_were() -> None:
    """Shape propagation runs the module: a training BatchNorm updated its running statistics, an in-place
    op changed the caller's input, a random op advanced the generator, though nothing fired."""

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return self.bn(x) + torch.rand_like(x)

    gm = torch.fx.symbolic_trace(Model().train())
    state = {name: value.clone() for name, value in gm.state_dict().items()}
    x = torch.randn(8, 4)
    given = x.clone()
    torch.manual_seed(0)
    expected_draw = torch.rand(3)
    torch.manual_seed(0)
    report = fxrules.apply(gm, fxrules.parse(DOUBLE_NEG), example_inputs=[x])
    assert report.total_fired == 0
    torch.testing.assert_close(torch.rand(3), expected_draw)
    torch.testing.assert_close(x, given)
    for name, value in gm.state_dict().items():
        torch.testing.assert_close(value, state[name], msg=name)
    assert [size.node.hint for size in gm.graph.find_nodes(op="placeholder")[0].meta["val"].shape] == [8, 4]


def test_a_failed_apply_leaves_the_names_of_later_nodes_as_they_would_have_been() -> None:
    """Erasing a node keeps its name taken: after a rolled-back apply, the next one named its nodes
    ``abs_2``/``relu_1`` instead of ``abs_1``/``relu``."""
    rules = fxrules.parse(DOUBLE_NEG + "rule boom:\n    torch.sigmoid(x) => @boom(x)\n")

    def boom(x: object) -> object:
        raise RuntimeError("boom")

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.neg(torch.neg(x)))

    gm, fresh = torch.fx.symbolic_trace(f), torch.fx.symbolic_trace(f)
    with pytest.raises(fxrules.FxrApplyError, match="boom"):
        fxrules.apply(gm, rules, helpers={"boom": boom})
    for module in (gm, fresh):
        fxrules.apply(module, fxrules.parse(DOUBLE_NEG))
    assert gm.code == fresh.code


def test_a_failed_apply_takes_back_the_shapes_its_example_inputs_propagated() -> None:
    """All or nothing includes ``node.meta``: the ``val`` that shape propagation wrote
    for this apply go when it fails, and metadata that was there before stays."""
    rules = fxrules.parse(DOUBLE_NEG + "rule boom:\n    torch.sigmoid(x) => @boom(x)\n")

    def boom(x: object) -> object:
        raise RuntimeError("boom")

    gm = torch.fx.symbolic_trace(lambda x: torch.sigmoid(torch.neg(torch.neg(x))))
    placeholder = gm.graph.find_nodes(op="placeholder")[0]
    placeholder.meta["type"] = "kept"
    before = [(node.name, dict(node.meta)) for node in gm.graph.nodes]
    with pytest.raises(fxrules.FxrApplyError, match="boom"):
        fxrules.apply(gm, rules, helpers={"boom": boom}, example_inputs=[torch.randn(2, 3)])
    assert [(node.name, dict(node.meta)) for node in gm.graph.nodes] == before
    fxrules.apply(gm, fxrules.parse(DOUBLE_NEG), example_inputs=[torch.randn(2, 3)])
    assert [size.node.hint for size in gm.graph.find_nodes(op="placeholder")[0].meta["val"].shape] == [2, 3]


def test_a_cond_branch_is_not_made_to_return_its_input() -> None:
    """``x * 1 => x`` in a ``torch.cond`` branch made it return its input; torch refuses aliasing branches,
    so the program failed ``run_decompositions``.  The rewrite is skipped there (not in the root graph)."""

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda v: torch.neg(torch.neg(v)) * 1, lambda v: torch.relu(v) * 1,
                              (x,)) * 1

    program = torch.export.export(Model(), (torch.randn(4),))
    result = fxrules.apply_program(program, "algebra.fxr")
    assert "alias" in result.report["mul_one"].skip_counts
    rewritten = result.program.run_decompositions()
    for x in (torch.rand(4), -torch.rand(4)):
        torch.testing.assert_close(rewritten.module()(x), program.module()(x))


def test_an_identity_replacement_of_a_tensor_written_in_place_is_skipped_and_reported() -> None:
    """``x * 1 => x`` would make ``y`` and ``x`` one tensor, and ``y.add_(1)`` would then change ``x``."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y.add_(1)
        return x + y

    gm = torch.fx.symbolic_trace(f)
    before = gm.code
    report = fxrules.apply(gm, fxrules.parse("rule mul_one:\n    x * 1 => x\n"))
    assert report.counts() == {}
    assert report["mul_one"].skip_counts == {"in-place write": 1}
    assert report["mul_one"].skipped[0].detail == ("'add_' writes into 'mul' in place, and the replacement would "
                                                   "make 'mul' share memory with 'x'")
    assert gm.code == before
