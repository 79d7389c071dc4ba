"""Typed captures, guards, shape metadata and rewrite-time helpers (docs/language.md sections 10-12)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from fxrules.match.matcher import Match
from fxrules.match.skips import Skip
from tests.conftest import ops, trace
from tests.match.test_compiled import compiled, interpreted, outcome

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
    matmul = lambda a, b: torch.matmul(a, b)  # noqa: E731
    _, report = apply_with_inputs(matmul, mismatch, [torch.randn(3, 4), torch.randn(4, 6)], static_shapes=True)
    assert report.total_fired == 0  # literal dim 5 != 6
    _, report = apply_with_inputs(matmul, mismatch, [torch.randn(3, 4), torch.randn(4, 5)], static_shapes=True)
    assert report.counts() == {"k_must_agree": 1}
    # a literal dim is a size guard: sizes from example inputs are symbols, not 5
    _, report = apply_with_inputs(matmul, mismatch, [torch.randn(3, 4), torch.randn(4, 5)])
    assert report.total_fired == 0 and report["k_must_agree"].skip_counts == {"dynamic size": 1}


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
    relu = lambda x: torch.relu(x)  # noqa: E731
    _, report = apply_with_inputs(relu, rules, [torch.randn(2, 3, 16).half()], static_shapes=True)
    assert report.counts() == {"half_only": 1}
    _, report = apply_with_inputs(relu, rules, [torch.randn(2, 3, 16)], static_shapes=True)
    assert report.total_fired == 0
    _, report = apply_with_inputs(relu, rules, [torch.randn(2, 3, 12).bfloat16()], static_shapes=True)
    assert report.total_fired == 0 and report["half_only"].skip_counts == {"guard false": 1}
    # C % 8 == 0 of a size the example shows as 16 holds for that size only
    _, report = apply_with_inputs(relu, rules, [torch.randn(2, 3, 16).half()])
    assert report.total_fired == 0 and report["half_only"].skip_counts == {"dynamic size": 1}


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


# ---------------------------------------------------------------- missing metadata: only for structural matches

ADD_ZERO_TYPED = """
rule add_zero:
    given:
        x: Tensor
    pattern:
        return x + 0
    replace:
        return x
"""


def needs_metadata(name: str, node: str) -> str:
    """The detail of a skip for a typed capture ``name`` bound to ``node``, which has no shape metadata."""
    return f"'{name}' needs shape metadata: node '{node}' has no shape metadata " \
           "(pass example_inputs= to apply, or use torch.export)"


def answer_at(rules: str, target: object, gm: torch.fx.GraphModule) -> Match | Skip | None:
    """The answer of the only rule of ``rules`` at the last node calling ``target``; the interpreter kept as the
    matcher's oracle gives the same."""
    [rule] = fxrules.parse(rules)
    node = [n for n in gm.graph.nodes if n.target is target][-1]
    found = compiled(rule, node, gm)
    assert outcome(interpreted(rule, node, gm)) == outcome(found)
    return found


def without_metadata(gm: torch.fx.GraphModule, *names: str) -> torch.fx.GraphModule:
    """``gm`` with the shape metadata of the nodes ``names`` removed."""
    for node in gm.graph.nodes:
        if node.name in names:
            node.meta.clear()
    return gm


def test_a_near_miss_without_metadata_is_not_reported() -> None:
    # `a + 1` is not `x + 0`, whatever `a` is: neither a match nor a skip, even though `a` has no metadata.
    gm = trace(lambda a: a + 1)
    assert answer_at(ADD_ZERO_TYPED, operator.add, gm) is None
    report = fxrules.apply(gm, fxrules.parse(ADD_ZERO_TYPED))
    assert report["add_zero"].skipped == () and report.total_fired == 0


def test_a_structural_match_without_metadata_is_reported_naming_the_capture_and_the_node() -> None:
    gm = trace(lambda a: a + 0)
    skip = answer_at(ADD_ZERO_TYPED, operator.add, gm)
    assert isinstance(skip, Skip) and skip.reason == "missing metadata"
    assert skip.detail == needs_metadata("x", "a")
    report = fxrules.apply(gm, fxrules.parse(ADD_ZERO_TYPED))
    assert [(s.reason, s.node, s.detail) for s in report["add_zero"].skipped] == [
        ("missing metadata", "add", needs_metadata("x", "a"))]


def test_a_known_type_mismatch_fails_the_match_though_another_capture_lacks_metadata() -> None:
    def shaped(*shapes: tuple[int, ...]) -> torch.fx.GraphModule:
        gm = trace(matmul_bias)
        ShapeProp(gm).propagate(*(torch.randn(shape) for shape in shapes))
        return without_metadata(gm, "a")

    # w is 3-D: it cannot be Tensor[K, N], whatever a is
    assert answer_at(ADDMM, operator.add, shaped((4, 3), (2, 3, 5), (5,))) is None
    # w fits: the match waits for a's metadata (K stays as w's, unchecked against a)
    skip = answer_at(ADDMM, operator.add, shaped((4, 3), (3, 5), (5,)))
    assert isinstance(skip, Skip) and skip.detail == needs_metadata("a", "a")


def test_the_guard_and_the_usability_checks_wait_for_the_metadata() -> None:
    # Without metadata the match is skipped for it, not for its guard (false) nor its escaping interior node.
    rules = """
rule neg_neg:
    given:
        x: Tensor
    pattern:
        return torch.neg(torch.neg(x))
    where:
        x.ndim == 5
    replace:
        return x
"""

    def f(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = torch.neg(a)
        return torch.neg(n), n

    skip = answer_at(rules, torch.neg, trace(f))
    assert isinstance(skip, Skip) and skip.reason == "missing metadata" and skip.detail == needs_metadata("x", "a")


def test_another_operand_order_that_matches_usably_wins_over_missing_metadata() -> None:
    rules = """
rule float_times:
    given:
        x: Tensor[dtype=float32]
    pattern:
        return x * y
    replace:
        return torch.mul(y, x)
"""
    gm = trace(lambda a, b: a * b)
    ShapeProp(gm).propagate(torch.randn(2), torch.randn(2))
    # as written x is `a`, which lacks metadata (a skip, kept in case nothing else matches); swapped, x is `b`
    match = answer_at(rules, operator.mul, without_metadata(gm, "a"))
    assert isinstance(match, Match) and match.bindings["x"].name == "b"
    # neither order has x's metadata: the first skip (as written, x is `a`) is reported
    skip = answer_at(rules, operator.mul, without_metadata(gm, "a", "b"))
    assert isinstance(skip, Skip) and skip.detail == needs_metadata("x", "a")


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
    """A plain name called in a guard is a user predicate, looked up only in apply's predicates= (never a Python
    builtin); a method that is no tensor method is a load error."""
    ruleset = fxrules.parse("rule r: torch.relu(x) => x where print(x)")
    with pytest.raises(fxrules.FxrApplyError, match="calls unknown predicate 'print'"):
        fxrules.apply(torch.fx.symbolic_trace(torch.nn.ReLU()), ruleset)
    with pytest.raises(fxrules.FxrLoadError, match="guards may call only len, all, any"):
        fxrules.parse("rule r: torch.relu(x) => x where x.system()")


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
