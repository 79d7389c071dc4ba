"""Sizes from example_inputs are symbols: no rule specializes a graph to them unless static_shapes=True.

Shape propagation runs the graph on fake tensors whose dims are symbols, so a guard, a typed dim or a
helper that needs the example's value of a size is skipped with reason ``dynamic size``; sizes the graph
itself fixes (a parameter's shape, a constant), exported programs' specialized dims and
``static_shapes=True`` let such rules fire.  Nothing real runs: parameters, buffers, inputs and the random
number generator are left alone.  ``example_inputs`` itself is checked.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.fx
from torch.export import Dim

import fxrules
from fxrules.cli import main
from fxrules.demo import Encoder
from tests.conftest import trace

ALL = ["algebra.fxr", "fusions.fxr", "cleanup.fxr"]
OPT_IN = "pass static_shapes=True to apply (--static-shapes) to specialize the graph to the example sizes"


class Mean(torch.nn.Module):
    """The mean over the batch, written with the batch size read from the shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0) / x.shape[0]


class Projection(torch.nn.Module):
    """Divides by sizes the graph fixes: a parameter's and a new tensor's."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 5, generator=torch.Generator().manual_seed(0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w / self.w.shape[0] + x.new_zeros((5, 2)).shape[0]


class Training(torch.nn.Module):
    """A forward that would change state if it ran: an in-place write to its input, BatchNorm statistics
    in training mode, dropout drawing random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return self.drop(self.bn(x)).sum(0) / x.shape[0]


@torch.fx.wrap
def interrupted(x: torch.Tensor) -> torch.Tensor:
    """Stands for a user pressing Ctrl-C while shapes are propagated."""
    raise KeyboardInterrupt


def skips(report: fxrules.Report) -> dict[str, dict[str, int]]:
    return {rule.name: dict(rule.skip_counts) for rule in report.rules if rule.skip_counts}


def test_a_size_read_from_the_example_is_not_folded() -> None:
    gm = trace(Mean())
    code = gm.code
    report = fxrules.apply(gm, "cleanup.fxr", example_inputs=[torch.randn(4, 3)])
    assert report.total_fired == 0 and gm.code == code
    assert skips(report) == {"static_shape_attribute": {"dynamic size": 1}}
    (skipped,) = report["static_shape_attribute"].skipped
    assert skipped.node == "getattr_1"
    assert skipped.detail.startswith("rulesets/cleanup.fxr:20:9: the guard depends on a size the graph leaves "
                                     "symbolic (")
    assert skipped.detail.endswith(f" == 4 holds for the example sizes only); {OPT_IN}")
    x = torch.randn(7, 3)
    torch.testing.assert_close(gm(x), x.mean(0))


def test_static_shapes_true_folds_the_example_size() -> None:
    gm = trace(Mean())
    report = fxrules.apply(gm, "cleanup.fxr", example_inputs=[torch.randn(4, 3)], static_shapes=True)
    assert report.counts() == {"static_shape_attribute": 1, "getitem_of_tuple": 1}
    assert "truediv = sum_1 / 4" in gm.code
    x = torch.randn(4, 3)
    torch.testing.assert_close(gm(x), x.mean(0))


def test_sizes_the_graph_fixes_are_folded() -> None:
    """A parameter's shape and the shape of a tensor made with literal sizes are the graph's own."""
    gm = trace(Projection())
    report = fxrules.apply(gm, "cleanup.fxr", example_inputs=[torch.randn(4, 3)])
    assert report.counts() == {"static_shape_attribute": 2, "getitem_of_tuple": 2}
    assert "truediv = matmul / 3" in gm.code and "add = truediv + 5" in gm.code
    x = torch.randn(6, 3)
    torch.testing.assert_close(gm(x), x @ gm.w / 3 + 5)


@pytest.mark.parametrize(("guard", "fires"), [
    ("x.ndim == 2", True),
    ("x.dtype == float32 and x.is_floating_point", True),
    ("x.shape[-1] == x.shape[-1]", True),  # true for every size
    ("x.shape[0] * 2 == 2 * x.shape[0]", True),
    ("len(x.shape) == 2", True),
    ("x.shape[0] == 4", False),
    ("x.shape[0] > 1", False),
    ("x.numel() % 2 == 0", False),
    ("x.shape[0] % 2 == 0 or x.dtype == float64", False),
    ("min(x.shape[0], 8) == 4", False),
    ("is_static(x)", False),
])
def test_a_guard_fires_only_when_its_answer_holds_for_every_size(guard: str, fires: bool) -> None:
    gm = trace(lambda x: torch.relu(x))
    rules = fxrules.parse(f"rule r: torch.relu(x) => torch.sigmoid(x) where {guard}")
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)])
    assert report.counts() == ({"r": 1} if fires else {})
    assert skips(report) == ({} if fires else {"r": {"dynamic size": 1}})
    gm = trace(lambda x: torch.relu(x))
    assert fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)], static_shapes=True).counts() == {"r": 1}


def test_a_literal_dim_of_a_typed_capture_is_a_size_guard() -> None:
    rules = fxrules.parse("""
rule three_columns:
    given:
        x: Tensor[M, 3]
    pattern:
        return torch.relu(x)
    replace:
        return torch.sigmoid(x)
""")
    gm = trace(lambda x: torch.relu(x))
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)])
    assert skips(report) == {"three_columns": {"dynamic size": 1}}
    (skipped,) = report["three_columns"].skipped
    assert skipped.detail.startswith("'x' has shape (")
    assert skipped.detail.endswith(f"): whether it fits Tensor[M, 3] depends on a size the graph leaves symbolic; "
                                   f"{OPT_IN}")
    gm = trace(lambda x: torch.relu(x))
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)], static_shapes=True)
    assert report.counts() == {"three_columns": 1}


def test_a_dim_used_in_the_replacement_is_a_baked_size() -> None:
    rules = fxrules.parse("""
rule flatten_rows:
    given:
        x: Tensor[M, K]
    pattern:
        return torch.flatten(x)
    replace:
        return x.reshape(M * K)
""")
    def flattened(x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x) * 2  # not returned as is: the alias check keeps a returned view of an input

    gm = trace(flattened)
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)])
    assert skips(report) == {"flatten_rows": {"dynamic size": 1}}
    assert report["flatten_rows"].skipped[0].detail.startswith("'M' depends on a size the graph leaves symbolic (")
    gm = trace(flattened)
    assert fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)], static_shapes=True).counts() == \
        {"flatten_rows": 1}
    assert "reshape(12)" in gm.code


def test_a_helper_that_reads_a_symbolic_size_is_skipped() -> None:
    rules = fxrules.parse("rule r: x.sum(0) => @rows(x)")
    gm = trace(lambda x: x.sum(0))
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)],
                           helpers={"rows": lambda x: float(x.shape[0])})
    assert skips(report) == {"r": {"dynamic size": 1}}
    assert report["r"].skipped[0].detail.startswith("helper '@rows' depends on a size the graph leaves symbolic (")


def test_an_exported_programs_dynamic_dim_is_symbolic_and_a_specialized_one_static() -> None:
    rules = fxrules.parse("rule r: aten.relu.default(x) => aten.clamp_min.default(x, 0) where x.shape[0] == 4")

    class Relu(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + 1

    x = torch.randn(4, 3)
    dynamic = fxrules.apply_program(torch.export.export(Relu(), (x,), dynamic_shapes=({0: Dim("batch")},)), rules)
    assert dynamic.report.counts() == {} and skips(dynamic.report) == {"r": {"dynamic size": 1}}
    static = fxrules.apply_program(torch.export.export(Relu(), (x,)), rules)
    assert static.report.counts() == {"r": 1}


def test_sizes_stay_symbolic_when_the_graph_inputs_carry_no_metadata() -> None:
    """The shape environment is found on whichever node carries metadata first, not only on the inputs."""
    rules = fxrules.parse("rule r: aten.relu.default(y) => aten.clamp_min.default(y, 0) where y.shape[0] == 4")

    class DoubledRelu(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x * 2) + 1

    gm = torch.export.export(DoubledRelu(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("batch")},)).module()
    for node in gm.graph.find_nodes(op="placeholder"):
        node.meta.clear()
    report = fxrules.apply(gm, rules)
    assert report.counts() == {} and skips(report) == {"r": {"dynamic size": 1}}


def test_explain_says_how_to_opt_in(capsys: pytest.CaptureFixture[str]) -> None:
    model = f"{__name__}:Mean"
    assert main(["explain", "cleanup.fxr", "--model", model, "--input-shape", "4,3"]) == 0
    out = capsys.readouterr().out
    assert "skipped static_shape_attribute x1 (dynamic size): getattr_1: " in out and OPT_IN in out
    assert "/ 4" not in out
    assert main(["apply", "cleanup.fxr", "--model", model, "--input-shape", "4,3", "--static-shapes"]) == 0
    assert "+    truediv = sum_1 / 4;  sum_1 = None" in capsys.readouterr().out


def test_propagation_runs_nothing_real() -> None:
    """Parameters, buffers, the example inputs and the random number generator are as they were."""
    gm = trace(Training().train())
    x = torch.randn(4, 3)
    x_before, state_before, rng_before = x.clone(), {k: v.clone() for k, v in gm.state_dict().items()}, \
        torch.get_rng_state()
    fxrules.apply(gm, ALL, example_inputs=[x])
    assert torch.equal(x, x_before) and torch.equal(torch.get_rng_state(), rng_before)
    state = gm.state_dict()
    assert all(torch.equal(state[name], value) for name, value in state_before.items())


def test_metadata_is_taken_back_when_apply_fails() -> None:
    gm = trace(lambda x: torch.relu(x))
    rules = fxrules.parse("rule r: torch.relu(x) => @boom(x)")

    def boom(x: object) -> float:
        raise ValueError("boom")

    with pytest.raises(fxrules.FxrApplyError):
        fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3)], helpers={"boom": boom})
    assert not any("val" in node.meta for node in gm.graph.nodes)


def test_an_interrupted_propagation_leaves_no_metadata() -> None:
    gm = trace(lambda x: interrupted(torch.relu(x)))
    with pytest.raises(KeyboardInterrupt):
        fxrules.apply(gm, ALL, example_inputs=[torch.randn(4, 3)])
    assert not any("val" in node.meta for node in gm.graph.nodes)


def test_example_inputs_must_be_a_list_or_tuple() -> None:
    with pytest.raises(fxrules.FxrUsageError) as error:
        fxrules.apply(trace(Mean()), "cleanup.fxr", example_inputs=torch.randn(4, 3))
    assert str(error.value) == ("example_inputs must be a list or tuple with one value per graph input (x), got a "
                                "tensor; for one input write example_inputs=[x]")


def test_example_inputs_must_match_the_graph_inputs() -> None:
    with pytest.raises(fxrules.FxrUsageError) as error:
        fxrules.apply(trace(Mean()), "cleanup.fxr", example_inputs=(torch.randn(4, 3), torch.randn(4)))
    assert str(error.value) == "example_inputs has 2 values, but the graph has 1 inputs (x)"


def test_a_shape_propagation_failure_names_the_node_and_the_inputs() -> None:
    class Mismatch(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Parameter(torch.ones(3, 3))
            self.b = torch.nn.Parameter(torch.ones(2, 2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.a @ self.b

    gm = trace(Mismatch())
    with pytest.raises(fxrules.FxrUsageError) as error:
        fxrules.apply(gm, "algebra.fxr", example_inputs=[torch.randn(4, 3, dtype=torch.float64)])
    assert str(error.value) == ("shape propagation with example_inputs failed at node 'matmul' (call_function "
                                "matmul) with inputs x=Tensor(4, 3) float64: RuntimeError: a and b must have same "
                                "reduction dim, but got [3, 3] X [2, 2].")
    assert error.value.__cause__ is None and error.value.__suppress_context__
    assert not any("val" in node.meta for node in gm.graph.nodes)


def encoder_inputs(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * 100 + length)
    mask = torch.zeros(batch, 1, 1, length)
    mask[-1, :, :, -2:] = torch.finfo(torch.float32).min  # the last sequence ends in padding
    return torch.randn(batch, length, 64, generator=generator), mask


def test_demo_encoder_rewritten_at_one_size_computes_the_model_at_every_size() -> None:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        encoder = Encoder(layers=2).eval()
    gm = trace(encoder)
    report = fxrules.apply(gm, ALL, example_inputs=list(encoder_inputs(2, 8)))
    assert report.counts() == {"sdpa_masked_div": 2, "gelu_tanh": 2, "dropout_eval": 4}
    assert skips(report)["static_shape_attribute"] == {"dynamic size": 10}
    with torch.no_grad():
        for batch, length in itertools.product((1, 2, 3), (5, 8, 13)):
            inputs = encoder_inputs(batch, length)
            torch.testing.assert_close(gm(*inputs), encoder(*inputs), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("guard", "example"), [
    ("x.shape[0] == 1", (1, 3)),
    ("x.shape[1] == 1", (4, 1)),
    ("x.shape[1] != 1", (4, 3)),
    ("x.shape[0] > 1", (4, 3)),
])
def test_an_elementwise_operation_does_not_fix_a_size_to_the_example(guard: str, example: tuple[int, ...]) -> None:
    """torch's elementwise kernels ask whether a dim is 1 while computing strides; that question about the
    example is not the graph's contract, so a guard on it is still a dynamic size."""
    rules = fxrules.parse(f"rule r: torch.relu(x) => torch.sigmoid(x) where {guard}")
    gm = trace(lambda x: torch.relu(x) + 1)
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(*example)])
    assert skips(report) == {"r": {"dynamic size": 1}}
    gm = trace(lambda x: torch.relu(x) + 1)
    assert fxrules.apply(gm, rules, example_inputs=[torch.randn(*example)], static_shapes=True).counts() == {"r": 1}


def test_a_batch_of_one_is_not_folded_into_the_model() -> None:
    """A model traced and rewritten with a batch of one computes the model at other batch sizes."""
    class Scaled(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).sum(0) / x.shape[0]

    gm = trace(Scaled())
    report = fxrules.apply(gm, ALL, example_inputs=[torch.randn(1, 3)])
    assert skips(report)["static_shape_attribute"] == {"dynamic size": 1}
    x = torch.randn(5, 3)
    torch.testing.assert_close(gm(x), torch.relu(x).mean(0))


def test_an_example_that_broadcasts_a_size_of_one_still_propagates() -> None:
    """Where the example runs only with a dim broadcast at 1, that dim is fixed at 1, as torch.export fixes
    it; the other sizes stay symbolic."""
    rules = fxrules.parse("rule r: torch.relu(x) => torch.sigmoid(x) where x.shape[0] == 1")
    gm = trace(lambda x, y: torch.relu(y) + x)
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3), torch.randn(1, 3)])
    assert report.counts() == {"r": 1}
    rules = fxrules.parse("rule r: torch.relu(x) => torch.sigmoid(x) where x.shape[1] == 3")
    gm = trace(lambda x, y: torch.relu(y) + x)
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(4, 3), torch.randn(1, 3)])
    assert skips(report) == {"r": {"dynamic size": 1}}
