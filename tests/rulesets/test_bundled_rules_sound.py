"""The bundled rules change nothing a program can observe: each case applies a bundled ruleset to a small model
where a rule would once have changed the result (a tensor written through a view, a returned input, a snapshot
clone, the sign of zero, a Conv2d subclass, a fully masked attention row, an integer GELU) and checks that the
outputs and the side effects are those of the original model, and that ordinary models are still rewritten."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from tests.side_effects import rewrite_unobservably, skip_reasons, trace

nn = torch.nn
F = torch.nn.functional
P = torch.nn.utils.parametrizations


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- identities and writes through views

#: Each bundled rule of algebra.fxr and cleanup.fxr that returns an existing tensor, as the expression it rewrites.
IDENTITIES: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = {
    "mul_one": ("algebra.fxr", lambda x: x * 1.0),
    "add_negative_zero": ("algebra.fxr", lambda x: x + -0.0),
    "sub_zero": ("algebra.fxr", lambda x: x - 0.0),
    "div_one": ("algebra.fxr", lambda x: x / 1.0),
    "double_neg": ("algebra.fxr", lambda x: torch.neg(-x)),
    "cat_single": ("algebra.fxr", lambda x: torch.cat([x])),
    "type_as_self": ("algebra.fxr", lambda x: x.type_as(x)),
    "reshape_same_shape": ("cleanup.fxr", lambda x: x.reshape((3, 4))),
    "clone_single_use": ("cleanup.fxr", lambda x: x.detach().clone()),
}

#: Rules whose guard compares a shape with written sizes: they fire only where sizes are static.
STATIC = {"reshape_same_shape"}

#: Writes through views, as users write them.
VIEW_WRITES: dict[str, Callable[[torch.Tensor], object]] = {
    "slice": lambda t: t[0:1].zero_(),
    "t": lambda t: t.t().mul_(2),
    "view": lambda t: t.view(-1).add_(1),
    "transpose": lambda t: t.transpose(0, 1).sub_(1),
    "unsqueeze": lambda t: t.unsqueeze(0).mul_(3),
}

CASES = [pytest.param(rule, write, id=f"{rule}-{name}") for rule in IDENTITIES for name, write in VIEW_WRITES.items()]


@pytest.mark.parametrize(("rule", "write"), CASES)
def test_identity_rules_leave_a_result_written_through_a_view(rule: str, write: Callable[[torch.Tensor], object]
                                                              ) -> None:
    ruleset, expression = IDENTITIES[rule]

    def f(x: torch.Tensor) -> torch.Tensor:
        y = expression(x)
        write(y)
        return x + y
    report, _ = rewrite_unobservably(f, [_randn(3, 4)], ruleset, static_shapes=rule in STATIC)
    assert report.counts().get(rule) is None
    # clone_single_use's own guard sees the write into its clone first
    assert skip_reasons(report, rule) == {"guard false" if rule == "clone_single_use" else "in-place write": 1}


@pytest.mark.parametrize(("rule", "write"), CASES)
def test_identity_rules_leave_a_result_whose_input_is_written_through_a_view(
        rule: str, write: Callable[[torch.Tensor], object]) -> None:
    ruleset, expression = IDENTITIES[rule]

    def f(x: torch.Tensor) -> torch.Tensor:
        a = x.relu()
        y = expression(a)
        write(a)
        return y * 2
    report, _ = rewrite_unobservably(f, [_randn(3, 4)], ruleset, static_shapes=rule in STATIC)
    assert report.counts().get(rule) is None
    assert skip_reasons(report, rule) == {"in-place write": 1}


@pytest.mark.parametrize("rule", IDENTITIES)
def test_identity_rules_do_not_make_the_graph_return_its_input(rule: str) -> None:
    """A caller writing into the result would write into its input."""
    ruleset, expression = IDENTITIES[rule]
    report, _ = rewrite_unobservably(expression, [_randn(3, 4)], ruleset, static_shapes=rule in STATIC)
    assert report.counts().get(rule) is None
    assert skip_reasons(report, rule) == {"alias": 1}


@pytest.mark.parametrize("rule", IDENTITIES)
def test_identity_rules_still_fire_where_nothing_can_tell(rule: str) -> None:
    ruleset, expression = IDENTITIES[rule]

    def f(x: torch.Tensor) -> torch.Tensor:
        return expression(x.relu()).sigmoid()
    report, rewritten = rewrite_unobservably(f, [_randn(3, 4)], ruleset, static_shapes=rule in STATIC)
    assert report.counts() == {rule: 1}
    assert len(rewritten.graph.nodes) < len(torch.fx.symbolic_trace(f).graph.nodes)


# ---------------------------------------------------------------- clone_single_use and reshape_chain


def test_a_detached_snapshot_of_an_input_written_later_keeps_its_clone() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        snapshot = a.detach().clone()
        a.add_(1)
        return snapshot * 2
    report, rewritten = rewrite_unobservably(f, [_randn(3, 4)], "cleanup.fxr")
    assert skip_reasons(report, "clone_single_use") == {"in-place write": 1}
    assert "clone" in rewritten.code


def test_reshape_chain_does_not_turn_a_returned_copy_into_a_view_of_the_input() -> None:
    """``x.t().reshape(-1)`` copies; ``x.t().reshape(4, 3)`` is a view of ``x``."""
    report, _ = rewrite_unobservably(lambda x: x.t().reshape(-1).reshape(4, 3), [_randn(3, 4)], "algebra.fxr")
    assert skip_reasons(report, "reshape_chain") == {"alias": 1}


def test_reshape_chain_does_not_turn_a_written_copy_into_a_view() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.t().reshape(-1).reshape(4, 3)
        y.add_(1)
        return x * y.sum()
    report, _ = rewrite_unobservably(f, [_randn(3, 4)], "algebra.fxr")
    assert skip_reasons(report, "reshape_chain") == {"in-place write": 1}


def test_reshape_chain_still_fires() -> None:
    report, rewritten = rewrite_unobservably(lambda x: x.t().reshape(-1).reshape(4, 3).relu(), [_randn(3, 4)],
                                             "algebra.fxr")
    assert report.counts() == {"reshape_chain": 1}
    assert "reshape_2 = torch.reshape(t, (4, 3))" in rewritten.code


# ---------------------------------------------------------------- the sign of zero


def test_adding_zero_to_a_float_keeps_the_sign_of_negative_zero() -> None:
    """``1 / (x + 0)`` is ``inf`` at ``x = -0.0``; ``1 / x`` is ``-inf``."""
    x = torch.tensor([-0.0, 0.0, 1.5, -2.0])
    report, _ = rewrite_unobservably(lambda x: 1 / (x + 0.0) + 1 / (x + 0), [x], "algebra.fxr")
    assert report.counts() == {}


def test_adding_zero_to_an_integer_and_negative_zero_to_a_float_still_fire() -> None:
    report, rewritten = rewrite_unobservably(lambda x: (x + 0) * 3, [torch.arange(-3, 3)], "algebra.fxr")
    assert report.counts() == {"add_zero": 1}
    assert "x * 3" in rewritten.code
    report, rewritten = rewrite_unobservably(lambda x: 1 / (x + -0.0), [torch.tensor([-0.0, 0.0, 2.0])],
                                             "algebra.fxr")
    assert report.counts() == {"add_negative_zero": 1}
    assert "1 / x" in rewritten.code


# ---------------------------------------------------------------- BatchNorm folds and module subclasses


class StandardizedConv2d(nn.Conv2d):
    """Weight standardization: the convolution uses its weight normalized per output channel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight - self.weight.mean((1, 2, 3), keepdim=True)
        return self._conv_forward(x, weight / (weight.std((1, 2, 3), keepdim=True) + 1e-5), self.bias)


class ScaledLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


class LayerThenNorm(nn.Module):
    def __init__(self, layer: nn.Module, norm: nn.Module) -> None:
        super().__init__()
        self.layer, self.norm = layer, norm
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            norm.running_mean.uniform_(-1, 1, generator=generator)
            norm.running_var.uniform_(0.5, 2, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.layer(x))


def _qat_conv2d() -> nn.Module:
    from torch.ao.nn.qat import Conv2d
    from torch.ao.quantization import get_default_qat_qconfig
    conv = Conv2d(4, 6, 3, qconfig=get_default_qat_qconfig("fbgemm"))
    with torch.no_grad():
        conv(_randn(2, 4, 9, 9))  # the observers see data
    return conv


IMAGES = _randn(2, 4, 9, 9)

SUBCLASSES = {
    "weight standardization": (lambda: StandardizedConv2d(4, 6, 3), lambda: nn.BatchNorm2d(6), IMAGES),
    "quantization-aware training": (_qat_conv2d, lambda: nn.BatchNorm2d(6), IMAGES),
    "spectral norm parametrization": (lambda: P.spectral_norm(nn.Conv2d(4, 6, 3)), lambda: nn.BatchNorm2d(6), IMAGES),
    "spectral norm hook": (lambda: nn.utils.spectral_norm(nn.Conv2d(4, 6, 3)), lambda: nn.BatchNorm2d(6), IMAGES),
    "forward hook": (lambda: _hooked(nn.Conv2d(4, 6, 3)), lambda: nn.BatchNorm2d(6), IMAGES),
    "batch norm hook": (lambda: nn.Conv2d(4, 6, 3), lambda: _hooked(nn.BatchNorm2d(6)), IMAGES),
    "conv1d parametrization": (lambda: P.weight_norm(nn.Conv1d(4, 6, 3)), lambda: nn.BatchNorm1d(6), _randn(2, 4, 9)),
    "conv3d parametrization": (lambda: P.orthogonal(nn.Conv3d(4, 6, 1)), lambda: nn.BatchNorm3d(6),
                               _randn(2, 4, 3, 3, 3)),
    "linear subclass": (lambda: ScaledLinear(4, 6), lambda: nn.BatchNorm1d(6), _randn(5, 4)),
}


def _hooked(module: nn.Module) -> nn.Module:
    module.register_forward_hook(lambda _module, _inputs, output: output * 2)
    return module


@pytest.mark.parametrize("case", SUBCLASSES.values(), ids=list(SUBCLASSES))
def test_batch_norm_folds_leave_modules_that_compute_differently(
        case: tuple[Callable[[], nn.Module], Callable[[], nn.Module], torch.Tensor]) -> None:
    layer, norm, x = case
    model = LayerThenNorm(layer(), norm()).eval()
    report, _ = rewrite_unobservably(model, [x], "fusions.fxr", atol=1e-5)
    assert report.counts() == {}


@pytest.mark.parametrize(("layer", "norm", "x", "rule"), [
    (lambda: nn.Conv2d(4, 6, 3), lambda: nn.BatchNorm2d(6), IMAGES, "fold_conv2d_bn"),
    (lambda: nn.Conv1d(4, 6, 3), lambda: nn.BatchNorm1d(6), _randn(2, 4, 9), "fold_conv1d_bn"),
    (lambda: nn.Conv3d(4, 6, 1), lambda: nn.BatchNorm3d(6), _randn(2, 4, 3, 3, 3), "fold_conv3d_bn"),
    (lambda: nn.Linear(4, 6), lambda: nn.BatchNorm1d(6), _randn(5, 4), "fold_linear_bn"),
], ids=["conv2d", "conv1d", "conv3d", "linear"])
def test_batch_norm_folds_still_fold_the_plain_modules(layer: Callable[[], nn.Module], norm: Callable[[], nn.Module],
                                                       x: torch.Tensor, rule: str) -> None:
    report, rewritten = rewrite_unobservably(LayerThenNorm(layer(), norm()).eval(), [x], "fusions.fxr", atol=1e-5)
    assert report.counts() == {rule: 1}
    assert "self.norm" not in rewritten.code


# ---------------------------------------------------------------- attention and GELU


def _masked_div(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) / 2.0 + mask, -1) @ v


def _masked_mul(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.5 + mask, dim=-1) @ v


@pytest.mark.parametrize(("attention", "rule"), [(_masked_div, "sdpa_masked_div"), (_masked_mul, "sdpa_masked_mul")])
def test_masked_attention_keeps_nan_rows_of_a_fully_masked_query(attention: Callable[..., torch.Tensor],
                                                                  rule: str) -> None:
    """Softmax over a row that is all ``-inf`` is nan; scaled_dot_product_attention alone gives 0 there."""
    q, k, v = _randn(2, 2, 4, 8, seed=1), _randn(2, 2, 5, 8, seed=2), _randn(2, 2, 5, 8, seed=3)
    mask = torch.zeros(2, 1, 4, 5)
    mask[0, 0, 1] = -math.inf  # query 1 of batch 0 may attend nothing
    mask[1, 0, :, 3:] = -math.inf
    report, rewritten = rewrite_unobservably(attention, [q, k, v, mask], "fusions.fxr", atol=1e-5)
    assert report.counts() == {rule: 1}
    assert "scaled_dot_product_attention" in rewritten.code
    assert rewritten.code.count("softmax(") == 1 and "torch.softmax(mask, -1)" in rewritten.code  # only the nan term
    assert rewritten(q, k, v, mask)[0, :, 1].isnan().all()


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _gelu_erf(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


@pytest.mark.parametrize(("formula", "rule"), [(_gelu_tanh, "gelu_tanh"), (_gelu_erf, "gelu_erf")])
def test_gelu_rules_leave_integer_inputs_and_fuse_float_ones(formula: Callable[[torch.Tensor], torch.Tensor],
                                                             rule: str) -> None:
    report, _ = rewrite_unobservably(formula, [torch.arange(-3, 3)], "fusions.fxr")
    assert report.counts() == {}
    report, rewritten = rewrite_unobservably(formula, [_randn(3, 4)], "fusions.fxr", atol=1e-5)
    assert report.counts() == {rule: 1}
    assert "gelu" in rewritten.code


# ---------------------------------------------------------------- dtypes and values outside the fusions' domain


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1) @ v


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_leaves_half_precision_attention(dtype: torch.dtype) -> None:
    """SDPA in float16 or bfloat16 rounds differently from the eager formula, beyond the rule's tolerance."""
    q, k, v = (_randn(2, 4, 8, seed=s).to(dtype) for s in (1, 2, 3))
    report, _ = rewrite_unobservably(_attention, [q, k, v], "fusions.fxr")
    assert report.counts() == {}
    report, _ = rewrite_unobservably(_attention, [q.double(), k.double(), v.double()], "fusions.fxr", atol=1e-5)
    assert report.counts() == {"sdpa_mul": 1}


def test_sdpa_leaves_keys_of_another_dtype() -> None:
    """On empty tensors matmul accepts a uint8 key; SDPA raises on mixed dtypes."""
    q, v = torch.zeros(1, 4, 0), torch.zeros(1, 5, 3)
    assert _fired_with_eager_metadata(_attention, [q, torch.zeros(1, 5, 0, dtype=torch.uint8), v]) == {}


def _fired_with_eager_metadata(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> dict[str, int]:
    """What fusions.fxr rewrites in a graph whose metadata an eager run recorded (``ShapeProp``): fake tensors,
    which ``example_inputs`` uses, refuse these mixed-dtype empty inputs that eager kernels accept."""
    gm = trace(fn)
    ShapeProp(gm).propagate(*inputs)
    return fxrules.apply(gm, "fusions.fxr").counts()


def _layer_norm(eps: float) -> Callable[..., torch.Tensor]:
    def written_out(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        centered = x - x.mean(-1, keepdim=True)
        return centered / torch.sqrt((centered * centered).mean(-1, keepdim=True) + eps) * w + b
    return written_out


@pytest.mark.parametrize(("eps", "dtype"), [(0.0, torch.float32), (1e-7, torch.float32), (1e-5, torch.float16),
                                            (1e-5, torch.complex64)],
                         ids=["eps-zero", "eps-below-1e-5", "float16", "complex"])
def test_layer_norm_leaves_zero_eps_and_other_dtypes(eps: float, dtype: torch.dtype) -> None:
    x = _randn(2, 8).to(dtype)
    x[0] = 1  # a constant row: with eps = 0 the formula divides zero by zero, a small eps magnifies rounding
    report, _ = rewrite_unobservably(_layer_norm(eps), [x, _randn(8, seed=1).to(dtype), _randn(8, seed=2).to(dtype)],
                                     "fusions.fxr", atol=1e-3)
    assert report.counts() == {}


def test_layer_norm_still_fires_with_a_positive_eps() -> None:
    inputs = [_randn(2, 8), _randn(8, seed=1), _randn(8, seed=2)]
    report, _ = rewrite_unobservably(_layer_norm(1e-5), inputs, "fusions.fxr", atol=1e-5)
    assert report.counts() == {"layer_norm": 1}


def test_functional_fold_leaves_a_weight_of_another_dtype() -> None:
    """An empty batch convolves with a bool weight; the folded weight cannot be computed in bool."""
    def fn(x: torch.Tensor, w: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(F.conv2d(x, w), rm, rv, training=False)
    inputs = [torch.zeros(0, 2, 1, 1), torch.ones(3, 2, 1, 1, dtype=torch.bool), torch.zeros(3), torch.ones(3)]
    assert _fired_with_eager_metadata(fn, inputs) == {}
