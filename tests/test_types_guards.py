"""Typed captures, guards, shape metadata and rewrite-time helpers (design card sections 5 and 6)."""

from __future__ import annotations

import pytest
import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from tests.conftest import ops, trace

ADDMM = """
rule addmm:
    given:
        a: Tensor[M, K]
        w: Tensor[K, N]
        b: Tensor[N]
    pattern:
        y = torch.matmul(a, w)
        return y + b
    replace:
        return torch.addmm(b, a, w)
"""


def matmul_bias(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, w) + b


def apply_with_inputs(fn: object, rules: str, inputs: list[torch.Tensor], **kwargs: object) -> tuple[
        torch.fx.GraphModule, fxrules.Report]:
    gm = trace(fn)  # type: ignore[arg-type]
    expected = gm(*inputs)
    report = fxrules.apply(gm, fxrules.parse(rules), example_inputs=inputs, **kwargs)  # type: ignore[arg-type]
    gm.graph.lint()
    torch.testing.assert_close(gm(*inputs), expected)
    return gm, report


def test_shape_guarded_addmm_fires_on_2d_operands() -> None:
    gm, report = apply_with_inputs(matmul_bias, ADDMM, [torch.randn(4, 3), torch.randn(3, 5), torch.randn(5)])
    assert report.counts() == {"addmm": 1}
    assert ops(gm) == ["addmm"]


def test_shape_guarded_addmm_does_not_fire_on_batched_operands() -> None:
    gm, report = apply_with_inputs(matmul_bias, ADDMM, [torch.randn(2, 4, 3), torch.randn(3, 5), torch.randn(5)])
    assert report.total_fired == 0
    assert ops(gm) == ["matmul", "add"]


def test_symbolic_dims_unify_across_captures() -> None:
    rules = """
rule same_k:
    given:
        a: Tensor[M, K]
        b: Tensor[K, M]
    pattern:
        return a + torch.transpose(b, 0, 1)
    replace:
        return a + b.t()
"""
    _, square = apply_with_inputs(lambda a, b: a + torch.transpose(b, 0, 1), rules,
                                  [torch.randn(3, 3), torch.randn(3, 3)])
    assert square.counts() == {"same_k": 1}
    rectangular = """
rule bias_matches_n:
    given:
        a: Tensor[M, K]
        b: Tensor[K]
    pattern:
        return a + b
    replace:
        return torch.add(a, b)
"""
    _, report = apply_with_inputs(lambda a, b: a + b, rectangular, [torch.randn(3, 4), torch.randn(4)])
    assert report.counts() == {"bias_matches_n": 1}
    mismatch = """
rule k_must_agree:
    given:
        a: Tensor[M, K]
        b: Tensor[K, 5]
    pattern:
        return torch.matmul(a, b)
    replace:
        return torch.mm(a, b)
"""
    _, report = apply_with_inputs(lambda a, b: torch.matmul(a, b), mismatch, [torch.randn(3, 4), torch.randn(4, 6)])
    assert report.total_fired == 0  # literal dim 5 != 6
    _, report = apply_with_inputs(lambda a, b: torch.matmul(a, b), mismatch, [torch.randn(3, 4), torch.randn(4, 5)])
    assert report.counts() == {"k_must_agree": 1}


def test_ellipsis_dims_and_dtype_guards() -> None:
    rules = """
rule half_only:
    given:
        x: Tensor[..., C, dtype=float16|bfloat16]
    pattern:
        return torch.relu(x)
    where:
        C % 8 == 0
    replace:
        return F.relu(x)
"""
    _, report = apply_with_inputs(lambda x: torch.relu(x), rules, [torch.randn(2, 3, 16).half()])
    assert report.counts() == {"half_only": 1}
    _, report = apply_with_inputs(lambda x: torch.relu(x), rules, [torch.randn(2, 3, 16)])
    assert report.total_fired == 0
    _, report = apply_with_inputs(lambda x: torch.relu(x), rules, [torch.randn(2, 3, 12).bfloat16()])
    assert report.total_fired == 0 and report["half_only"].skip_counts == {"guard false": 1}


def test_scalar_typed_captures_bind_literals_of_that_type() -> None:
    rules = """
rule int_scale:
    given:
        k: int
    pattern:
        return x * k
    replace:
        return torch.mul(x, k)
"""
    _, report = apply_with_inputs(lambda x: x * 2, rules, [torch.randn(3)])
    assert report.counts() == {"int_scale": 1}
    _, report = apply_with_inputs(lambda x: x * 2.0, rules, [torch.randn(3)])
    assert report.total_fired == 0
    _, report = apply_with_inputs(lambda x: x * True, rules, [torch.randn(3)])
    assert report.total_fired == 0  # a bool is never an int


def test_guard_over_literal_values_and_arithmetic() -> None:
    rules = """
rule small_power:
    given:
        p: int
    pattern:
        return x ** p
    where:
        p >= 2 and p <= 3 and (p * 2) // 2 == p
    replace:
        return torch.pow(x, p)
"""
    _, report = apply_with_inputs(lambda x: x ** 2, rules, [torch.randn(3)])
    assert report.counts() == {"small_power": 1}
    _, report = apply_with_inputs(lambda x: x ** 5, rules, [torch.randn(3)])
    assert report.total_fired == 0


def test_guard_error_means_no_match_and_is_reported() -> None:
    rules = """
rule index_out_of_range:
    pattern:
        return torch.relu(x)
    where:
        x.shape[7] == 1
    replace:
        return F.relu(x)
"""
    _, report = apply_with_inputs(lambda x: torch.relu(x), rules, [torch.randn(3)])
    assert report.total_fired == 0
    [skip] = report["index_out_of_range"].skipped
    assert skip.reason == "guard error"
    assert skip.detail == "<string>:6:9: IndexError: tuple index out of range"


def test_missing_metadata_skips_with_a_hint() -> None:
    gm = trace(matmul_bias)
    report = fxrules.apply(gm, fxrules.parse(ADDMM))
    assert report.total_fired == 0
    [skip] = report["addmm"].skipped
    assert skip.reason == "missing metadata"
    assert "pass example_inputs=" in skip.detail
    assert "skipped addmm x1 (missing metadata)" in str(report)


def test_shape_prop_metadata_is_used() -> None:
    gm = trace(matmul_bias)
    inputs = [torch.randn(4, 3), torch.randn(3, 5), torch.randn(5)]
    ShapeProp(gm).propagate(*inputs)
    report = fxrules.apply(gm, fxrules.parse(ADDMM))
    assert report.counts() == {"addmm": 1}


class MatmulBias(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 5))
        self.b = torch.nn.Parameter(torch.randn(5))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, self.w) + self.b


def test_export_fake_tensor_metadata_is_used_on_aten_graphs() -> None:
    model = MatmulBias()
    a = torch.randn(4, 3)
    exported = torch.export.export(model, (a,))
    gm = exported.module()
    rules = """
rule aten_addmm:
    given:
        a: Tensor[M, K]
        w: Tensor[K, N]
        b: Tensor[N]
    pattern:
        return aten.add.Tensor(aten.matmul.default(a, w), b)
    replace:
        return aten.addmm.default(b, a, w)
"""
    expected = gm(a)
    report = fxrules.apply(gm, fxrules.parse(rules))
    assert report.counts() == {"aten_addmm": 1}
    assert torch.ops.aten.addmm.default in [n.target for n in gm.graph.nodes]
    torch.testing.assert_close(gm(a), expected)


def test_module_attribute_guards_training_batchnorm_is_not_folded() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    model.train()
    gm = torch.fx.symbolic_trace(model)
    report = fxrules.apply(gm, "fusions.fxr")
    assert report.total_fired == 0
    assert report["fold_conv2d_bn"].skip_counts == {"guard false": 1}
    assert ops(gm) == ["module:Conv2d", "module:BatchNorm2d"]


def test_module_guard_on_constructor_attributes() -> None:
    rules = """
rule grouped_only:
    given:
        c: nn.Conv2d
    pattern:
        return torch.relu(c(x))
    where:
        c.groups > 1 and c.padding_mode == "zeros" and c.bias is not None
    replace:
        return F.relu(c(x))
"""

    class ConvRelu(torch.nn.Module):
        def __init__(self, groups: int) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, groups=groups)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.conv(x))

    for groups, fires in [(1, False), (2, True)]:
        gm = torch.fx.symbolic_trace(ConvRelu(groups))
        report = fxrules.apply(gm, fxrules.parse(rules))
        assert report.total_fired == int(fires)
        relu = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert relu == [torch.nn.functional.relu if fires else torch.relu]


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv1d(2, 4, 3, bias=False)
        self.b1 = torch.nn.BatchNorm1d(4)
        self.c2 = torch.nn.Conv2d(3, 6, 3, groups=3)
        self.b2 = torch.nn.BatchNorm2d(6)
        self.c3 = torch.nn.Conv3d(2, 2, 1)
        self.b3 = torch.nn.BatchNorm3d(2)
        self.fc = torch.nn.Linear(6, 5)
        self.b4 = torch.nn.BatchNorm1d(5)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y1 = torch.relu(self.b1(self.c1(x1)))
        y2 = torch.relu(self.b2(self.c2(x2)))
        y3 = self.b3(self.c3(x3))
        y4 = self.b4(self.fc(y2.mean((2, 3))))
        return y1, y2, y3, y4


def test_conv_bn_folding_on_a_small_cnn_removes_every_batchnorm() -> None:
    torch.manual_seed(0)
    model = SmallCNN()
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
    model.eval()
    gm = torch.fx.symbolic_trace(model)
    inputs = [torch.randn(2, 2, 9), torch.randn(2, 3, 8, 8), torch.randn(1, 2, 3, 3, 3)]
    expected = gm(*inputs)
    without_shapes = fxrules.apply(torch.fx.symbolic_trace(model), "fusions.fxr")
    assert without_shapes["fold_linear_bn"].skip_counts == {"missing metadata": 1}
    report = fxrules.apply(gm, "fusions.fxr", example_inputs=inputs)
    assert report.counts() == {"fold_conv1d_bn": 1, "fold_conv2d_bn": 1, "fold_conv3d_bn": 1, "fold_linear_bn": 1}
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in gm.modules())
    torch.testing.assert_close(gm(*inputs), expected, atol=1e-5, rtol=1e-5)


def test_helper_returning_a_tensor_becomes_a_buffer() -> None:
    def doubled_weight(w: torch.Tensor) -> torch.Tensor:
        return w * 2

    rules = """
rule fold_scale:
    given:
        w: Attr
    pattern:
        return x * w * 2
    replace:
        return x * @doubled(w)
"""
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.arange(3.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w * 2

    gm = torch.fx.symbolic_trace(M())
    x = torch.randn(3)
    expected = gm(x)
    report = fxrules.apply(gm, fxrules.parse(rules), helpers={"doubled": doubled_weight})
    assert report.counts() == {"fold_scale": 1}
    attrs = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    assert attrs == ["doubled"]
    torch.testing.assert_close(gm.doubled, torch.arange(3.0) * 2)
    torch.testing.assert_close(gm(x), expected)


def test_helper_returning_a_literal_is_inlined_and_sees_metadata() -> None:
    def rank(x: object) -> int:
        return len(x.shape)  # type: ignore[attr-defined]

    rules = """
rule sum_last:
    pattern:
        return torch.sum(x, -1)
    replace:
        return torch.sum(x, @rank(x) - 1)
"""
    gm, report = apply_with_inputs(lambda x: torch.sum(x, -1), rules, [torch.randn(2, 4)],
                                   helpers={"rank": rank})
    assert report.counts() == {"sum_last": 1}
    [node] = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.sum]
    assert node.args[1:] == (1,)


def test_attr_capture_guard_reads_qualified_name_and_value() -> None:
    rules = """
rule weight_only:
    given:
        p: Attr
    pattern:
        return x + p
    where:
        p.target == "weight" and p.ndim == 1 and p.shape[0] == 3
    replace:
        return torch.add(x, p)
"""

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(3))
            self.other = torch.nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + self.weight, x + self.other

    gm = torch.fx.symbolic_trace(M())
    report = fxrules.apply(gm, fxrules.parse(rules))
    assert report.counts() == {"weight_only": 1}
    assert report["weight_only"].anchors == ("add",)


@pytest.mark.parametrize("guard", ["x.__class__ == 1", "x._private == 1", "x.numel().__str__() == 1"])
def test_private_or_dunder_reads_in_guards_are_load_errors(guard: str) -> None:
    expected = r"guards may not read private or dunder attributes|guards may call only"
    with pytest.raises(fxrules.FxrLoadError, match=expected):
        fxrules.parse(f"rule r: torch.relu(x) => x where {guard}")


def test_guard_cannot_call_arbitrary_functions() -> None:
    with pytest.raises(fxrules.FxrLoadError, match="guards may call only len, all, any"):
        fxrules.parse("rule r: torch.relu(x) => x where print(x)")


OPTIONAL_BIAS = """
rule linear_bias:
    given:
        w: Tensor[N, K]
        b: Tensor[N] | None
    pattern:
        return torch.relu(F.linear(x, w, b))
    replace:
        return F.linear(x, w, b)
"""


def test_a_tensor_type_or_none_takes_a_tensor_of_that_shape_or_the_literal_none() -> None:
    def three_biases(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, wide: torch.Tensor) -> tuple[torch.Tensor, ...]:
        linear = torch.nn.functional.linear
        return torch.relu(linear(x, w, b)), torch.relu(linear(x, w, None)), torch.relu(linear(x, w, wide))

    gm = trace(three_biases)
    inputs = [torch.randn(2, 3), torch.randn(4, 3), torch.randn(4), torch.randn(2, 4)]
    report = fxrules.apply(gm, fxrules.parse(OPTIONAL_BIAS), example_inputs=inputs)
    assert report["linear_bias"].anchors == ("relu", "relu_1")  # the (2, 4) bias is neither Tensor[N] nor None
