"""The bundled rules fire only where their preconditions hold: no tensor written in place, masks and biases of the
input's dtype, integer inputs left alone, no training-mode dropout or batch statistics, no quantization-aware conv.
Each test traces a small model, applies a bundled ruleset with example inputs and checks that the outputs (and
dtypes) are what the model computed before, or that the rule does not fire where it would be wrong."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx

import fxrules

nn = torch.nn
F = torch.nn.functional


def _copies(inputs: list[Any]) -> list[Any]:
    return [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]


def rewritten(fn: Callable[..., Any] | nn.Module, inputs: list[Any], rules: str | list[str],
              atol: float = 1e-5, rtol: float = 1e-4, static_shapes: bool = False) -> dict[str, int]:
    """Apply ``rules`` to the traced ``fn``; assert it still runs and computes what it did (dtypes included)."""
    gm = torch.fx.symbolic_trace(fn)
    with torch.no_grad():
        expected = gm(*_copies(inputs))
    report = fxrules.apply(gm, rules, example_inputs=inputs, static_shapes=static_shapes)
    gm.graph.lint()
    with torch.no_grad():
        actual = gm(*_copies(inputs))
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True)
    return report.counts()


def _seeded(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _randomized_bn(bn: nn.modules.batchnorm._BatchNorm) -> nn.modules.batchnorm._BatchNorm:
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        if bn.running_mean is not None:
            bn.running_mean.uniform_(-1, 1, generator=generator)
            bn.running_var.uniform_(0.5, 2, generator=generator)
        if bn.weight is not None:
            bn.weight.uniform_(0.5, 2, generator=generator)
            bn.bias.uniform_(-1, 1, generator=generator)
    return bn


class ConvBn(nn.Module):
    def __init__(self, conv: nn.Module, bn: nn.Module) -> None:
        super().__init__()
        self.conv, self.bn = conv, _randomized_bn(bn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


# ---------------------------------------------------------------- identities and tensors written in place


def _mul_one_then_add_(x: torch.Tensor) -> torch.Tensor:
    y = x * 1.0
    y.add_(1)
    return x + y


def _add_zero_then_x_written(x: torch.Tensor) -> torch.Tensor:
    y = x + 0.0
    x.mul_(2)
    return y


def _div_one_then_mul_(x: torch.Tensor) -> torch.Tensor:
    y = x / 1
    y.mul_(3)
    return x - y


def _double_neg_then_add_(x: torch.Tensor) -> torch.Tensor:
    y = torch.neg(-x)
    y.add_(1)
    return x * y


def _cat_single_then_mul_(x: torch.Tensor) -> torch.Tensor:
    y = torch.cat([x], 1)
    y.mul_(2)
    return x + y


@pytest.mark.parametrize("fn", [_mul_one_then_add_, _add_zero_then_x_written, _div_one_then_mul_,
                                _double_neg_then_add_, _cat_single_then_mul_])
def test_identity_rules_do_not_merge_a_tensor_written_in_place_with_its_input(fn: Callable[..., Any]) -> None:
    """`x * 1 => x` (and `x + 0`, `x / 1`, `-(-x)`, `cat([x])`) makes the result and x one tensor: an in-place
    write into either then changes both (the outputs would change by 1.0 and more)."""
    assert rewritten(fn, [_seeded(3, 4)], "algebra.fxr") == {}


def test_identity_rules_still_fire_without_writes() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.neg(-(x * 1.0 + -0.0 - 0.0)) / 1.0]).relu()
    fired = rewritten(fn, [_seeded(3, 4)], "algebra.fxr")
    assert fired == {"mul_one": 1, "add_negative_zero": 1, "sub_zero": 1, "div_one": 1, "double_neg": 1,
                     "cat_single": 1}


@pytest.mark.parametrize("module", [False, True])
def test_mul_one_then_inplace_relu(module: bool) -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 1.0
            if module:
                self.relu(y)
            else:
                F.relu(y, inplace=True)
            return x + y
    assert rewritten(Model(), [_seeded(3, 4)], "algebra.fxr") == {}


def test_view_chain_does_not_turn_a_dtype_view_into_a_reshape() -> None:
    """`x.view(torch.int32).view(torch.float32)` is not turned into `x.reshape(torch.float32)`, which raises."""
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.view(torch.int32).view(torch.float32), x.view(torch.int32).view((12,))
    assert rewritten(fn, [_seeded(3, 4)], "algebra.fxr") == {}
    assert rewritten(lambda x: x.view((12,)).view((4, 3)), [_seeded(3, 4)], "algebra.fxr") == {"view_chain": 1}


# ---------------------------------------------------------------- clone_single_use


def test_clone_of_a_view_whose_base_is_written_later() -> None:
    """The clone of ``a.t()`` is a snapshot: without it, the 'snapshot' would see ``a.add_(1)``."""
    def fn(a: torch.Tensor) -> torch.Tensor:
        snapshot = a.t().clone()
        a.add_(1)
        return snapshot
    assert rewritten(fn, [_seeded(3, 4)], "cleanup.fxr") == {}


def test_clone_written_by_an_inplace_relu() -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = a.t().clone()
        F.relu(c, inplace=True)
        return a, c
    assert rewritten(fn, [_seeded(3, 4)], "cleanup.fxr") == {}


# ---------------------------------------------------------------- attention


def _masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / 2.0
    return torch.softmax(scores + mask, -1) @ v


def _qkv(dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    return [_seeded(2, 2, 4, 8, dtype=dtype, seed=1), _seeded(2, 2, 5, 8, dtype=dtype, seed=2),
            _seeded(2, 2, 5, 8, dtype=dtype, seed=3)]


@pytest.mark.parametrize("mask", [
    pytest.param(torch.rand(2, 1, 4, 5, generator=torch.Generator().manual_seed(4)) > 0.3, id="bool"),
    pytest.param(torch.randint(-2, 1, (2, 1, 4, 5), generator=torch.Generator().manual_seed(4)) * 10000, id="long"),
    pytest.param(_seeded(2, 1, 4, 5, dtype=torch.float16, seed=4), id="float16-mask-float32-query"),
])
def test_sdpa_masked_needs_an_additive_mask_of_the_query_dtype(mask: torch.Tensor) -> None:
    """A bool mask added to the scores adds 1.0; SDPA reads a bool mask as which positions to attend (the output
    would change by up to 1.0).  An integer mask, or a float mask of another dtype, makes SDPA raise."""
    assert rewritten(_masked_attention, [*_qkv(), mask], "fusions.fxr") == {}


def test_sdpa_masked_still_fires_on_a_float_mask_of_the_query_dtype() -> None:
    mask = torch.zeros(2, 1, 1, 5)
    mask[1, ..., -2:] = -1e9
    assert rewritten(_masked_attention, [*_qkv(), mask], "fusions.fxr") == {"sdpa_masked_div": 1}
    assert rewritten(_masked_attention, [*_qkv(torch.float64), mask.double()], "fusions.fxr") == {
        "sdpa_masked_div": 1}


@pytest.mark.parametrize("shapes", [((2, 1, 5, 8), (2, 1, 5, 8)), ((5, 8), (5, 8)), ((2, 2, 5, 8), (2, 2, 5, 3))],
                         ids=["shared-kv-head", "2d-kv", "other-value-width"])
def test_sdpa_with_broadcast_key_and_value(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v
    inputs = [_seeded(2, 2, 4, 8), _seeded(*shapes[0], seed=5), _seeded(*shapes[1], seed=6)]
    assert rewritten(fn, inputs, "fusions.fxr") == {"sdpa_mul": 1}


def test_sdpa_leaves_training_mode_dropout() -> None:
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = nn.Dropout(0.5)

        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self.drop(torch.softmax(q @ k.transpose(-1, -2) / 2.0, -1)) @ v
    gm = torch.fx.symbolic_trace(Attention().train())
    report = fxrules.apply(gm, ["algebra.fxr", "fusions.fxr"], example_inputs=_qkv())
    assert report.counts() == {}


# ---------------------------------------------------------------- addmm, linear, layer norm, silu, gelu


@pytest.mark.parametrize("bias_dtype", [torch.float64, torch.float16])
def test_addmm_and_linear_need_a_bias_of_the_input_dtype(bias_dtype: torch.dtype) -> None:
    """`a @ w + b` promotes to b's dtype; addmm and F.linear raise 'self and mat2 must have the same dtype'."""
    b = _seeded(5, dtype=bias_dtype)
    assert rewritten(lambda a, w, b: a @ w + b, [_seeded(3, 4), _seeded(4, 5), b], "fusions.fxr") == {}
    assert rewritten(lambda x, w, b: x @ w.t() + b, [_seeded(2, 3, 4), _seeded(5, 4), b], "fusions.fxr") == {}
    assert rewritten(lambda a, w, b: a @ w + b, [_seeded(3, 4), _seeded(4, 5), _seeded(5)], "fusions.fxr") == {
        "addmm": 1}


def _written_out_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    centered = x - x.mean(-1, keepdim=True)
    variance = (centered * centered).mean(-1, keepdim=True)
    return centered / torch.sqrt(variance + 1e-5) * w + b


@pytest.mark.parametrize(("x_dtype", "w_dtype", "b_dtype"), [
    (torch.float16, torch.float32, torch.float32),  # the written-out form returns float32, F.layer_norm float16
    (torch.bfloat16, torch.float32, torch.float32),
    (torch.float32, torch.float64, torch.float64),  # F.layer_norm raises on mixed dtypes
    (torch.float32, torch.float32, torch.float64),
])
def test_layer_norm_needs_parameters_of_the_input_dtype(x_dtype: torch.dtype, w_dtype: torch.dtype,
                                                         b_dtype: torch.dtype) -> None:
    inputs = [_seeded(2, 3, 8, dtype=x_dtype), _seeded(8, dtype=w_dtype, seed=1), _seeded(8, dtype=b_dtype, seed=2)]
    assert rewritten(_written_out_layer_norm, inputs, "fusions.fxr", atol=1e-2, rtol=1e-2, static_shapes=True) == {}


def test_layer_norm_still_fires_with_parameters_of_the_input_dtype() -> None:
    inputs = [_seeded(2, 3, 8), _seeded(8, seed=1), _seeded(8, seed=2)]
    # the replacement reads its normalized shape from x when it runs, so symbolic sizes do not stop it
    assert rewritten(_written_out_layer_norm, inputs, "fusions.fxr") == {"layer_norm": 1}
    assert rewritten(_written_out_layer_norm, inputs, "fusions.fxr", static_shapes=True) == {"layer_norm": 1}


def test_silu_leaves_integer_tensors() -> None:
    """`x * sigmoid(x)` of an integer x is float; F.silu raises 'silu_cpu not implemented for Long'."""
    x = torch.arange(-3, 3)
    assert rewritten(lambda x: x * torch.sigmoid(x), [x], "fusions.fxr") == {}
    assert rewritten(lambda x: x * torch.sigmoid(x), [x.half()], "fusions.fxr") == {"silu": 1}


@pytest.mark.parametrize("formula", ["tanh", "erf"])
def test_gelu_leaves_integer_tensors(formula: str) -> None:
    """The written-out GELU promotes an integer x to float; F.gelu raises 'GeluKernelImpl not implemented'."""
    def tanh_form(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def erf_form(x: torch.Tensor) -> torch.Tensor:
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    form = tanh_form if formula == "tanh" else erf_form
    assert rewritten(form, [torch.arange(-3, 3)], "fusions.fxr") == {}
    assert rewritten(form, [torch.arange(-3, 3).double()], "fusions.fxr") == {f"gelu_{formula}": 1}


# ---------------------------------------------------------------- BatchNorm folds


def test_fold_conv1d_bn_leaves_unbatched_inputs() -> None:
    """On an unbatched (C, L) input BatchNorm1d normalizes the conv's positions: folding it into the channels
    would change the output (BatchNorm1d(5) after Conv1d(4, 5, 3)) or raise when rewriting (Conv1d(4, 6, 3))."""
    assert rewritten(ConvBn(nn.Conv1d(4, 5, 3), nn.BatchNorm1d(5)).eval(), [_seeded(4, 7)], "fusions.fxr") == {}
    with torch.no_grad():
        _ = ConvBn(nn.Conv1d(4, 6, 3), nn.BatchNorm1d(5)).eval()(_seeded(4, 7))  # valid in eager
    assert rewritten(ConvBn(nn.Conv1d(4, 6, 3), nn.BatchNorm1d(5)).eval(), [_seeded(4, 7)], "fusions.fxr") == {}
    assert rewritten(ConvBn(nn.Conv1d(4, 6, 3), nn.BatchNorm1d(6)).eval(), [_seeded(2, 4, 7)], "fusions.fxr") == {
        "fold_conv1d_bn": 1}


@pytest.mark.parametrize(("conv", "bn"), [
    (lambda: nn.Conv2d(4, 6, 3, bias=False), lambda: nn.BatchNorm2d(6, affine=False)),
    (lambda: nn.Conv2d(4, 8, 3, groups=4, dilation=2, padding=2), lambda: nn.BatchNorm2d(8, momentum=None, eps=0.1)),
    (lambda: nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"), lambda: nn.BatchNorm2d(6)),
], ids=["no-bias-no-affine", "depthwise-dilated", "reflect"])
def test_fold_conv2d_bn_variants(conv: Callable[[], nn.Module], bn: Callable[[], nn.Module]) -> None:
    model = ConvBn(conv(), bn()).eval()
    assert rewritten(model, [_seeded(2, 4, 9, 9)], "fusions.fxr") == {"fold_conv2d_bn": 1}


def test_batch_norm_without_running_stats_or_in_training_is_left() -> None:
    x = _seeded(2, 4, 9, 9)
    no_stats = ConvBn(nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6, track_running_stats=False)).eval()
    assert rewritten(no_stats, [x], "fusions.fxr") == {}
    training = ConvBn(nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6)).train()
    reference = copy.deepcopy(training)
    gm = torch.fx.symbolic_trace(training)
    assert fxrules.apply(gm, ["algebra.fxr", "fusions.fxr", "cleanup.fxr"], example_inputs=[x]).counts() == {}
    torch.testing.assert_close(gm(x), reference(x))
    torch.testing.assert_close(gm.bn.running_mean, reference.bn.running_mean)


def test_fold_conv2d_bn_leaves_a_qat_conv() -> None:
    """torch.ao.nn.qat.Conv2d fake-quantizes its weight in its own forward: folding would quantize the folded
    weight instead."""
    from torch.ao.nn.qat import Conv2d as QatConv2d
    from torch.ao.quantization import get_default_qat_qconfig
    model = ConvBn(QatConv2d(4, 6, 3, qconfig=get_default_qat_qconfig("fbgemm")), nn.BatchNorm2d(6))
    x = _seeded(2, 4, 9, 9)
    model.train()
    with torch.no_grad():
        model(x)  # observers see data
    model.eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1, generator=torch.Generator().manual_seed(2))
    assert rewritten(model, [x], "fusions.fxr") == {}


def test_functional_fold_leaves_statistics_computed_from_the_batch() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x, w)
        return F.batch_norm(y, y.mean((0, 2, 3)), y.var((0, 2, 3)), training=False)
    assert rewritten(fn, [_seeded(2, 4, 9, 9), _seeded(6, 4, 3, 3, seed=1)], "fusions.fxr") == {}
