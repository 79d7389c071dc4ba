"""The examples of the language reference are part of the contract.

* Every ```fxr block of ``docs/language.md`` must parse with ``fxrules.parse``.  A block the
  doc shows as an error is preceded by ``<!-- expect-error: SUBSTRING -->``;
  it must raise an ``FxrError`` whose text contains SUBSTRING.
* The complete rules listed in :data:`EXAMPLES` are applied (with the rest
  of their block) to a small traced function: the named rule must fire, the
  graph must end with the expected operations, and the outputs must not change.
* Further tests check the claims the text makes next to the examples
  (literal types, defaults, families, metadata, rejection, reports, errors;
  ``@finite_inputs``, the ``dtype``/``slice``/``tuple[int]`` types, guard
  functions, named alternatives, dims and helpers in replacements, included
  rules replaced by name, in-place apply and its lint, the rendered error).
"""

from __future__ import annotations

import math
import operator
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import torch
import torch.fx
import torch.nn.functional as F  # noqa: N812 - the name rule files use too
from torch import nn

import fxrules
import fxrules.cli
import fxrules.demo
from fxrules.lang import resolve
from fxrules.lang.families import family_parameters
from fxrules.match import guards
from fxrules.match.skips import reasons_table
from fxrules.rewrite import helpers, lint
from fxrules.verification.soundness import Verdict
from fxrules.verification.strategies import Example as DrawnExample
from fxrules.verification.strategies import examples
from tests.conftest import ops, trace

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "language.md"
PRELUDE = REPO / "rulesets" / "prelude.fxr"

# ---------------------------------------------------------------- extracting the examples


@dataclass(frozen=True)
class Block:
    """One fenced example: where it is, its text, and the error it is documented to raise (if any)."""

    source: str  # the document it comes from ("docs": docs/language.md)
    line: int  # line of the opening fence
    text: str
    expect_error: str | None = None

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}"

    def rule_names(self) -> list[str]:
        return re.findall(r"^rule\s+(\w+)\s*:", self.text, re.MULTILINE)


_FENCE = re.compile(r"^```(\S*)\s*$")
_EXPECT = re.compile(r"^<!--\s*expect-error:\s*(.*?)\s*-->\s*$")


def extract_blocks(path: Path, source: str, languages: set[str]) -> list[Block]:
    """The fenced code blocks of a Markdown file whose info string is one of ``languages``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        start = index
        end = start + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if fence.group(1) in languages:
            previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
            expected = _EXPECT.match(previous)
            text = "\n".join(lines[start + 1 : end]) + "\n"
            blocks.append(Block(source, start + 1, text, expected.group(1) if expected else None))
        index = end + 1
    return blocks


DOC_BLOCKS = extract_blocks(DOCS, "docs", {"fxr"})
ALL_BLOCKS = DOC_BLOCKS


def block_defining(source: str, rule: str) -> Block:
    found = [b for b in DOC_BLOCKS if rule in b.rule_names()]
    assert len(found) == 1, f"expected exactly one {source} block defining rule {rule}, found {len(found)}"
    return found[0]


def parse_block(block: Block) -> fxrules.RuleSet:
    return fxrules.parse(block.text, filename=f"{block.source}-line-{block.line}.fxr")


# ---------------------------------------------------------------- every block parses


def test_the_doc_has_examples() -> None:
    assert len(DOC_BLOCKS) >= 30
    assert any(b.expect_error for b in DOC_BLOCKS)


def test_doc_rule_names_are_unique() -> None:
    names = [name for block in DOC_BLOCKS if not block.expect_error for name in block.rule_names()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.filterwarnings("ignore::fxrules.FxrLoopWarning")
@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.id)
def test_example_parses_or_fails_as_documented(block: Block) -> None:
    if block.expect_error is None:
        ruleset = parse_block(block)
        assert len(ruleset) == len(block.rule_names()) or "include" in block.text
        return
    with pytest.raises(fxrules.FxrError) as error:
        parse_block(block)
    assert block.expect_error in str(error.value)


def test_error_examples_carry_file_line_and_column() -> None:
    block = block_defining("docs", "typo")
    with pytest.raises(fxrules.FxrLoadError) as error:
        fxrules.parse(block.text, filename="typo.fxr")
    first = error.value.first
    assert (first.span.file, first.span.line, first.span.column) == ("typo.fxr", 2, 11)  # the caret is on 'reluu'
    rendered = first.render()
    assert rendered.startswith("typo.fxr:2:11: error: unknown target 'torch.reluu'")
    assert "    torch.reluu(x) => x\n              ^" in rendered
    assert "hint: did you mean 'torch.relu'?" in rendered


# ---------------------------------------------------------------- examples applied to graphs


def randn(*shape: int) -> Callable[[], list[torch.Tensor]]:
    return lambda: [torch.randn(*shape)]


@dataclass
class Example:
    """A rule of a doc block, a function to trace, and what the graph looks like after ``apply``."""

    source: str
    rule: str
    make: Callable[[], Any]  # returns the function or module to trace
    inputs: Callable[[], list[Any]]
    expected_ops: list[str]
    fired: dict[str, int] | None = None  # default: {rule: 1}
    example_inputs: bool = False
    static_shapes: bool = False  # the rule reads sizes: it fires on the example's only when asked to specialize
    helpers: dict[str, Callable[..., Any]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.source}:{self.rule}"


def _neg_sub(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return -(a - b)


def _exp_twice(a: torch.Tensor) -> torch.Tensor:
    e = torch.exp(a)
    return e + e


def _split_sum_of_cat(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c = torch.cat([u, v])
    return c.sum(), c.mean()


class _HardswishParts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Hardsigmoid()

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return a * self.gate(a)


class _LogSoftmax(nn.Module):
    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.softmax = nn.Softmax(dim=dim)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.log(self.softmax(a))


class _ConvRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(a))


class _TwoScales(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("s1", torch.full((6,), 2.0))
        self.register_buffer("s2", torch.full((6,), 3.0))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return (a * self.s1) * self.s2


def _conv_bn_relu() -> nn.Module:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    bn = model[1]
    assert isinstance(bn, nn.BatchNorm2d)
    with torch.no_grad():
        bn.running_mean.uniform_(-1.0, 1.0)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return model.eval()


def _with_nan() -> list[torch.Tensor]:
    x = torch.randn(4, 6)
    x[0, 0] = math.nan
    return [x]


def _matmul(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, w)


#: The helpers the doc's example passes to apply (its block calls both).
DOC_HELPERS: dict[str, Callable[..., Any]] = {
    "product": lambda p, q: p * q,
    "dim_size": lambda t, d: int(t.shape[d]),
}


#: The user predicates the doc's example passes to apply: the hardware table of its section.
DOC_PREDICATES: dict[str, Callable[..., bool]] = {
    "fits_tensor_cores": lambda a, b, arch: a.dtype in (torch.float16, torch.bfloat16, torch.float32),
}


def _cat_inputs() -> list[torch.Tensor]:
    return [torch.randn(2, 3), torch.randn(2, 4)]


def _sigmoid_twice(a: torch.Tensor) -> torch.Tensor:
    s = a.sigmoid()
    return s + s


def _gelu_erf(a: torch.Tensor) -> torch.Tensor:
    return a * 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0)))


EXAMPLES: list[Example] = [
    # §1, §2
    Example("docs", "neg_sub", lambda: _neg_sub, lambda: [torch.randn(4, 6), torch.randn(4, 6)], ["sub"]),
    Example("docs", "square_self", lambda: lambda a: a * a, randn(4, 6), ["square"]),
    Example("docs", "relu6_after_relu", lambda: lambda a: F.relu6(torch.relu(a)), randn(4, 6), ["relu6"]),
    Example("docs", "hardswish_from_parts", _HardswishParts, randn(4, 6), ["hardswish"], example_inputs=True),
    Example("docs", "max_abs", lambda: lambda a: torch.maximum(torch.neg(a), a), randn(4, 6), ["abs"],
            example_inputs=True),
    Example("docs", "log_softmax_fused", _LogSoftmax, randn(3, 5), ["log_softmax"], example_inputs=True),
    Example("docs", "gelu_from_erf", lambda: _gelu_erf, randn(4, 6), ["gelu"], example_inputs=True),
    Example("docs", "relu_idempotent", lambda: lambda a: torch.relu(torch.relu(a)), randn(4, 6), ["relu"]),
    # §3
    Example("docs", "add_neg_zero", lambda: lambda a: (a + -0.0) * 2, randn(4, 6), ["mul"], example_inputs=True),
    Example("docs", "first_column", lambda: lambda a: a[:, 0], randn(4, 6), ["select"]),
    Example("docs", "drop_eval_dropout", lambda: lambda a: torch.dropout(a, 0.3, False) * 2, randn(4, 6), ["mul"]),
    Example("docs", "mul_by_one_guarded", lambda: lambda a: a * 1.0 * 2, randn(4, 6), ["mul"]),
    Example("docs", "exp_twice", lambda: _exp_twice, randn(4, 6), ["exp", "mul"]),
    Example("docs", "sum_and_mean", lambda: lambda a: (torch.sum(a, 0), torch.mean(a, 0)), randn(4, 6),
            ["sum", "getattr", "getitem", "truediv"], example_inputs=True),
    # §4
    Example("docs", "square_pow", lambda: lambda a: a**2, randn(4, 6), ["mul"], example_inputs=True),
    Example("docs", "transpose_01_twice", lambda: lambda a: a.transpose(0, 1).transpose(0, 1) * 2, randn(4, 6),
            ["mul"]),
    Example("docs", "addmm_spelled_out",
            lambda: lambda a, w, b: torch.ops.aten.add.Tensor(torch.ops.aten.mm.default(a, w), b),
            lambda: [torch.randn(2, 3), torch.randn(3, 4), torch.randn(4)], ["addmm.default"], example_inputs=True),
    Example("docs", "size_of_dim0", lambda: lambda a: a.shape[0], randn(4, 6), ["method:size"]),
    # §5
    Example("docs", "sum_of_neg", lambda: lambda a: torch.sum(torch.neg(a), dim=-1, keepdim=False), randn(4, 6),
            ["sum", "neg"]),
    Example("docs", "to_same_dtype", lambda: lambda a: a.to(torch.float32) * 2, randn(4, 6), ["mul"],
            example_inputs=True),
    Example("docs", "cat_of_one", lambda: lambda a: torch.cat([a], dim=1) * 2, randn(4, 6), ["mul"]),
    # §6
    Example("docs", "keep_nan", lambda: lambda a: torch.where(torch.isnan(a), math.nan, a) * 2, _with_nan, ["mul"],
            example_inputs=True),
    Example("docs", "softmax_in_float32", lambda: lambda a: F.softmax(a, -1, dtype=torch.float32), randn(4, 6),
            ["method:float", "softmax"]),
    Example("docs", "clamp_upper_only", lambda: lambda a: torch.clamp(a, None, 6.0), randn(4, 6), ["clamp_max"]),
    Example("docs", "trunc_div", lambda: lambda a, b: torch.div(a, b, rounding_mode="trunc"),
            lambda: [torch.randn(4, 6) * 10, torch.rand(4, 6) + 0.5], ["truediv", "trunc"], example_inputs=True),
    Example("docs", "cap_at_pi", lambda: lambda a: torch.where(torch.gt(a, math.pi), math.pi, a),
            lambda: [torch.randn(4, 6) * 4], ["clamp_max"], example_inputs=True),
    Example("docs", "identity_permute", lambda: lambda a: a.permute(0, 1) * 2, randn(4, 6), ["mul"]),
    # §7
    Example("docs", "expit", lambda: lambda a: F.sigmoid(a) * 2, randn(4, 6), ["special_expit", "mul"]),
    Example("docs", "abs_of_square", lambda: lambda a: torch.abs(torch.square(a)), randn(4, 6), ["mul"],
            example_inputs=True),  # the guard reads the dtype
    Example("docs", "sum_of_same_sigmoid", lambda: _sigmoid_twice, randn(4, 6), ["method:sigmoid", "mul"]),
    # §9
    Example("docs", "relu_twice_is_relu", lambda: nn.Sequential(nn.ReLU(), nn.ReLU()), randn(4, 6), ["relu"]),
    Example("docs", "silu_from_sigmoid", lambda: lambda a: a * a.sigmoid(), randn(4, 6), ["silu"], example_inputs=True),
    Example("docs", "mean_of_neg", lambda: lambda a: (-a).mean(-1), randn(4, 6), ["mean", "neg"]),
    Example("docs", "view_of_view", lambda: lambda a: a.view(24).view((6, 4)), randn(4, 6), ["method:view"]),
    # §10
    Example("docs", "mm_aligned", lambda: _matmul, lambda: [torch.randn(2, 16), torch.randn(16, 3)], ["mm"],
            example_inputs=True, static_shapes=True),
    Example("docs", "float_of_float", lambda: lambda a: a.float() * 2, randn(4, 6), ["mul"], example_inputs=True),
    Example("docs", "leaky_one_is_identity", lambda: lambda a: F.leaky_relu(a, 1.0) * 2, randn(4, 6), ["mul"]),
    Example("docs", "relu_of_cat", lambda: lambda a, b: torch.relu(torch.cat([a, b], 1)), _cat_inputs,
            ["getitem", "relu", "getitem", "relu", "cat"], example_inputs=True),
    Example("docs", "to_same_dtype_twice", lambda: lambda a: a.to(torch.float64).to(torch.float64) * 2, randn(4, 6),
            ["method:to", "mul"]),
    Example("docs", "slice_before_neg", lambda: lambda a: torch.neg(a)[1:], randn(4, 6), ["getitem", "neg"]),
    # §11
    Example("docs", "guard_tour", lambda: lambda a: torch.softmax(a, 1) * 2, randn(4, 8),
            ["softmax", "softmax", "add"], example_inputs=True, static_shapes=True),
    Example("docs", "conv_relu_in_place", _ConvRelu, randn(1, 3, 6, 6), ["module:Conv2d", "relu"]),
    Example("docs", "permute_back", lambda: lambda a: a.permute(1, 2, 0).permute(2, 0, 1) * 2, randn(2, 3, 4),
            ["mul"]),
    Example("docs", "mul_ones_like", lambda: lambda a, b: a * torch.ones_like(b) * 2,
            lambda: [torch.randn(2, 3), torch.randn(3)], ["mul"], example_inputs=True),
    Example("docs", "drop_fresh_clone", lambda: lambda a: torch.relu(a).clone(), randn(4, 6), ["relu"]),
    # §12, §13
    Example("docs", "merge_scales", _TwoScales, randn(4, 6), ["attr:product", "mul"],
            helpers=DOC_HELPERS, example_inputs=True),
    Example("docs", "mean_as_sum", lambda: lambda a: torch.mean(a, 1), randn(3, 5), ["sum", "truediv"],
            example_inputs=True, static_shapes=True, helpers=DOC_HELPERS),
    Example("docs", "mean_last_as_sum", lambda: lambda a: torch.mean(a, -1), randn(2, 3, 5), ["sum", "truediv"],
            example_inputs=True, static_shapes=True),
    Example("docs", "flatten_2d", lambda: lambda a: torch.flatten(a) * 2, randn(2, 3), ["method:reshape", "mul"],
            example_inputs=True, static_shapes=True),
    Example("docs", "static_shape_of", lambda: lambda a: a.view(a.shape[0], -1), randn(4, 2, 3), ["method:view"],
            fired={"static_shape_of": 1, "first_of_sizes": 1}, example_inputs=True, static_shapes=True),
    Example("docs", "fold_conv_bn", _conv_bn_relu, randn(2, 3, 8, 8), ["module:Conv2d", "module:ReLU"]),
    # §19
    Example("docs", "where_same_branches", lambda: lambda c, a: torch.where(c, a, a),
            lambda: [torch.randn(4, 6) > 0, torch.randn(4, 6)], ["getattr", "zeros_like", "add"]),
    Example("docs", "masked_where_method", lambda: lambda a, m: a.where(m, 0.0),
            lambda: [torch.randn(4, 6), torch.randn(4, 6) > 0], ["where"]),
    # the first file and the DAG of §3.2
    Example("docs", "double_neg", lambda: lambda a: torch.relu(torch.neg(torch.neg(a)) * 1 - 0), randn(4, 6),
            ["relu"], example_inputs=True, fired={"double_neg": 1, "mul_one": 1, "sub_zero": 1}),
    Example("docs", "split_sum_of_cat", lambda: _split_sum_of_cat, lambda: [torch.randn(3), torch.randn(5)],
            ["method:sum", "method:sum", "add", "method:numel", "method:numel", "add", "truediv"],
            example_inputs=True),
]


def run_example(example: Example) -> tuple[torch.fx.GraphModule, fxrules.Report]:
    torch.manual_seed(0)
    block = block_defining(example.source, example.rule)
    ruleset = parse_block(block)
    subject = example.make()
    inputs = example.inputs()
    gm = trace(subject)
    with torch.no_grad():
        expected = subject(*inputs)
    report = fxrules.apply(gm, ruleset, example_inputs=inputs if example.example_inputs else None,
                           helpers=example.helpers or None, static_shapes=example.static_shapes)
    gm.graph.lint()
    assert ops(gm) == example.expected_ops, f"{report}\n{gm.code}"
    with torch.no_grad():
        torch.testing.assert_close(gm(*inputs), expected, equal_nan=True)
    fired = example.fired or {example.rule: 1}
    assert {name: report.fired(name) for name in fired} == fired, str(report)
    return gm, report


def test_enough_examples_run_on_graphs() -> None:
    assert len([e for e in EXAMPLES if e.source == "docs"]) >= 8


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_example_rewrites_a_graph(example: Example) -> None:
    run_example(example)


def test_fold_conv_bn_provenance_and_submodules() -> None:
    gm, _ = run_example(next(e for e in EXAMPLES if e.id == "docs:fold_conv_bn"))
    folded = [n for n in gm.graph.nodes if n.op == "call_module" and n.target == "fold_conv_bn"]
    assert len(folded) == 1
    assert folded[0].meta["fxrules"]["rule"] == "fold_conv_bn"
    assert "nn_module_stack" in folded[0].meta
    children = dict(gm.named_children())
    assert set(children) == {"fold_conv_bn", "2"}  # the old Conv2d and BatchNorm2d were deleted
    assert isinstance(children["fold_conv_bn"], nn.Conv2d)


# ---------------------------------------------------------------- what the text says next to the examples


def apply_rule(source: str, rule: str, fn: Any, inputs: list[Any], **kwargs: Any) -> tuple[
        torch.fx.GraphModule, fxrules.Report]:
    gm = trace(fn)
    with torch.no_grad():
        expected = fn(*inputs)
    report = fxrules.apply(gm, parse_block(block_defining(source, rule)), **kwargs)
    with torch.no_grad():
        torch.testing.assert_close(gm(*inputs), expected, equal_nan=True)
    return gm, report


@pytest.mark.parametrize("spelling", [
    lambda a: torch.sum(torch.neg(a), -1),
    lambda a: torch.sum(torch.neg(a), dim=-1),
    lambda a: torch.sum(torch.neg(a), dim=-1, keepdim=False),
    lambda a: torch.sum(torch.neg(a), -1, False),
], ids=["positional", "keyword", "keyword-with-default", "positional-with-default"])
def test_normalized_arguments_are_one_call(spelling: Callable[[torch.Tensor], torch.Tensor]) -> None:
    _, report = apply_rule("docs", "sum_of_neg", spelling, [torch.randn(4, 6)])
    assert report.fired("sum_of_neg") == 1, str(report)


def test_left_out_arguments_must_hold_their_default() -> None:
    _, report = apply_rule("docs", "sum_of_neg", lambda a: torch.sum(torch.neg(a), -1, keepdim=True),
                           [torch.randn(4, 6)])
    assert report.fired("sum_of_neg") == 0


def test_ambiguous_signature_is_noted_in_the_report() -> None:
    _, report = apply_rule("docs", "float_of_float", lambda a: a.float() * 2, [torch.randn(4, 6)],
                           example_inputs=[torch.randn(4, 6)])
    assert report.fired("float_of_float") == 1
    assert any("compared as written" in note for note in report["float_of_float"].notes)


def test_dtype_type_narrows_the_capture() -> None:
    x = torch.randn(4, 6, dtype=torch.float64)
    _, report = apply_rule("docs", "float_of_float", lambda a: a.float() * 2, [x], example_inputs=[x])
    assert report.fired("float_of_float") == 0


def test_same_capture_twice_binds_the_same_value() -> None:
    _, report = apply_rule("docs", "square_self", lambda a, b: a * b, [torch.randn(3), torch.randn(3)])
    assert report.fired("square_self") == 0


def test_commutative_operator_matches_either_order() -> None:
    _, report = apply_rule("docs", "mul_by_one_guarded", lambda a: (1.0 * a).exp(), [torch.randn(3)])
    assert report.fired("mul_by_one_guarded") == 1


def test_literal_sign_of_zero_is_compared() -> None:
    _, report = apply_rule("docs", "add_neg_zero", lambda a: a + 0.0, [torch.randn(3)])
    assert report.fired("add_neg_zero") == 0


def test_bool_literal_never_equals_int() -> None:
    ruleset = fxrules.parse("rule keepdim_true: torch.sum(x, -1, True) => torch.sum(x, [-1], True)\n")
    gm = trace(lambda a: torch.sum(a, -1, True))
    assert fxrules.apply(gm, ruleset).fired("keepdim_true") == 1
    int_literal = fxrules.parse("rule mul_int_one: x * 1 => x\n")
    gm = trace(lambda a: a * True)
    assert fxrules.apply(gm, int_literal).fired("mul_int_one") == 0


def test_alternative_first_match_wins_inside_a_pattern() -> None:
    _, report = apply_rule("docs", "abs_of_square", lambda a: torch.abs(a * a), [torch.randn(3)],
                           example_inputs=[torch.randn(3)])
    assert report.fired("abs_of_square") == 1


@pytest.mark.parametrize("fn", [
    lambda a: F.relu(F.relu(a, inplace=True)),
    nn.Sequential(nn.ReLU(inplace=True), nn.ReLU()),
], ids=["F.relu-inplace", "nn.ReLU-inplace"])
def test_family_member_with_non_default_extra_does_not_match(fn: Any) -> None:
    gm = trace(fn)
    report = fxrules.apply(gm, parse_block(block_defining("docs", "relu_twice_is_relu")))
    assert report.fired("relu_twice_is_relu") == 0


def test_family_module_member_maps_its_attributes() -> None:
    inputs = [torch.randn(3, 5)]
    gm, report = apply_rule("docs", "log_softmax_fused", _LogSoftmax(dim=0), inputs, example_inputs=inputs)
    assert report.fired("log_softmax_fused") == 1
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert node.args[1] == 0


def test_tolerance_decorator_is_kept_on_the_rule() -> None:
    rule = parse_block(block_defining("docs", "log_softmax_fused"))["log_softmax_fused"]
    assert rule.tolerance is not None
    assert (rule.tolerance.atol, rule.tolerance.rtol) == (1e-5, 1e-4)
    assert rule.docstring.startswith("log(softmax(x)) as one numerically stable op (where softmax underflows")


def test_missing_metadata_is_reported_as_a_skip() -> None:
    inputs = [torch.randn(2, 16), torch.randn(16, 3)]
    gm, report = apply_rule("docs", "mm_aligned", _matmul, inputs)
    assert ops(gm) == ["matmul"]
    assert report["mm_aligned"].skip_counts.get("missing metadata") == 1, str(report)


def test_false_guard_is_reported_as_a_skip() -> None:
    inputs = [torch.randn(2, 12), torch.randn(12, 3)]
    _, report = apply_rule("docs", "mm_aligned", _matmul, inputs, example_inputs=inputs, static_shapes=True)
    assert report.fired("mm_aligned") == 0
    assert report["mm_aligned"].skip_counts.get("guard false") == 1, str(report)


def test_eval_mode_guard_keeps_training_batch_norm() -> None:
    model = _conv_bn_relu().train()
    gm, report = apply_rule("docs", "fold_conv_bn", model, [torch.randn(2, 3, 8, 8)])
    assert report.fired("fold_conv_bn") == 0
    assert ops(gm) == ["module:Conv2d", "module:BatchNorm2d", "module:ReLU"]


def test_escaping_interior_node_rejects_the_match() -> None:
    def f(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = torch.neg(a)
        return torch.neg(n), n

    gm = trace(f)
    report = fxrules.apply(gm, "algebra.fxr")
    assert report.fired("double_neg") == 0
    assert report["double_neg"].skip_counts == {"escaping user": 1}, str(report)


def test_nothing_fires_leaves_the_module_untouched() -> None:
    gm = trace(lambda a: a + 1)
    graph, code = gm.graph, gm.code
    report = fxrules.apply(gm, parse_block(block_defining("docs", "neg_sub")))
    assert report.counts() == {}
    assert gm.graph is graph
    assert gm.code == code


def test_all_or_nothing_when_a_helper_raises() -> None:
    def broken(conv: nn.Module, bn: nn.Module) -> nn.Module:
        raise RuntimeError("helper failed")

    gm = trace(_conv_bn_relu())
    code, children = gm.code, dict(gm.named_children())
    with pytest.raises(fxrules.FxrApplyError, match="helper failed"):
        fxrules.apply(gm, parse_block(block_defining("docs", "fold_conv_bn")), helpers={"fold_conv_bn": broken})
    assert gm.code == code
    assert dict(gm.named_children()) == children


def test_explain_records_near_misses() -> None:
    gm = trace(lambda a: F.relu(F.relu(a, inplace=True)))
    report = fxrules.apply(gm, parse_block(block_defining("docs", "relu_twice_is_relu")), explain=True)
    misses = report["relu_twice_is_relu"].near_misses
    assert misses, str(report)
    assert misses[0].condition == "argument"
    assert "inplace" in misses[0].detail


def test_load_time_warnings_for_rules_that_loop() -> None:
    block = next(b for b in DOC_BLOCKS if "expand_neg" in b.rule_names())
    with pytest.warns(fxrules.FxrLoopWarning):
        ruleset = fxrules.parse(block.text, filename="loop-warnings.fxr")  # a fresh name: not from the cache
    warned = " ".join(w.message for w in ruleset.warnings)
    assert "expand_neg" in warned
    assert "mul_to_torch" in warned or "torch_to_mul" in warned


def test_include_cycle_is_an_error_naming_the_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.fxr").write_text('include "b.fxr"\n', encoding="utf-8")
    (tmp_path / "b.fxr").write_text('include "a.fxr"\n', encoding="utf-8")
    with pytest.raises(fxrules.FxrLoadError, match=r"include cycle: a\.fxr -> b\.fxr -> a\.fxr"):
        fxrules.load(tmp_path / "a.fxr")


def test_include_resolves_next_to_the_file_first(tmp_path: Path) -> None:
    (tmp_path / "main.fxr").write_text('include "algebra.fxr"\nrule mine: torch.neg(torch.neg(x)) => x\n',
                                       encoding="utf-8")
    (tmp_path / "algebra.fxr").write_text("rule local: x * 1 => x\n", encoding="utf-8")
    assert [rule.name for rule in fxrules.load(tmp_path / "main.fxr")] == ["local", "mine"]


def test_allow_opens_another_package() -> None:
    pytest.importorskip("numpy")
    import numpy

    text = "use numpy\nrule np_neg: numpy.negative(x) => torch.neg(x)\n"
    with pytest.raises(fxrules.FxrLoadError, match="unknown name 'numpy'"):
        fxrules.parse(text)
    rule = fxrules.parse(text, allow=["numpy"])["np_neg"]
    assert rule.pattern[0].target is numpy.negative


# ---------------------------------------------------------------- features added since the first version of the doc


def _drawn_values(example: DrawnExample) -> list[Any]:
    return [*example.values.values(), *(p for m in example.modules.values() for p in m.parameters())]


def _all_finite(example: DrawnExample) -> bool:
    for value in _drawn_values(example):
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and not bool(value.isfinite().all()):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
    return True


def test_finite_inputs_decorator_is_kept_on_the_rule() -> None:
    rule = parse_block(block_defining("docs", "gelu_from_erf"))["gelu_from_erf"]
    assert rule.finite_inputs
    assert rule.tolerance is not None and (rule.tolerance.atol, rule.tolerance.rtol) == (1e-6, 1e-5)
    assert not parse_block(block_defining("docs", "mul_ones_like"))["mul_ones_like"].finite_inputs


def test_finite_inputs_rules_are_verified_without_nan_or_inf() -> None:
    rule = parse_block(block_defining("docs", "gelu_from_erf"))["gelu_from_erf"]

    @hypothesis.settings(max_examples=60, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(examples(rule))
    def every_draw_is_finite(example: DrawnExample) -> None:
        assert _all_finite(example), example.describe()

    every_draw_is_finite()
    text = block_defining("docs", "gelu_from_erf").text.replace("@finite_inputs()\n", "")
    plain = fxrules.parse(text, filename="gelu-without-finite-inputs.fxr")["gelu_from_erf"]
    assert not plain.finite_inputs
    found = hypothesis.find(examples(plain), lambda e: not _all_finite(e),
                            settings=hypothesis.settings(max_examples=500, database=None, derandomize=True,
                                                         suppress_health_check=list(hypothesis.HealthCheck)))
    assert not _all_finite(found)


@pytest.mark.parametrize("decorator", ["@finite_inputs", "@finite_inputs(1)"])
def test_finite_inputs_takes_parentheses_and_no_arguments(decorator: str) -> None:
    with pytest.raises(fxrules.FxrLoadError):
        fxrules.parse(f"{decorator}\nrule r: torch.exp(x) => x.exp()\n")


def test_every_scalar_type_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## 10. Types in `given:`", 1)[1].split("\n## ", 1)[0]
    rows = {name for row in re.findall(r"^\| ([^|]*) \|", section, re.MULTILINE)
            for name in re.findall(r"`(\w+)`", row)}
    assert set(resolve.SCALAR_TYPES) | set(resolve.SEQUENCE_TYPES) <= rows


def test_slice_type_does_not_match_an_integer_index() -> None:
    _, report = apply_rule("docs", "slice_before_neg", lambda a: torch.neg(a)[0], [torch.randn(4, 6)])
    assert report.fired("slice_before_neg") == 0


def test_dtype_type_does_not_match_another_argument() -> None:
    _, report = apply_rule("docs", "to_same_dtype_twice", lambda a: a.to("cpu").to("cpu"), [torch.randn(4, 6)])
    assert report.fired("to_same_dtype_twice") == 0


SIZES_RULE = """
rule reshape_sizes:
    given:
        t: {type}
    pattern:
        return torch.reshape(x, t)
    replace:
        return x.reshape(t)
"""


@pytest.mark.parametrize(("declared", "literal_fires", "computed_fires"), [
    ("tuple[int]", 1, 0), ("list[int]", 1, 0), ("tuple", 1, 1), ("list[Tensor]", 0, 0),
])
def test_sequence_element_types(declared: str, literal_fires: int, computed_fires: int) -> None:
    """`tuple[int]` matches constant sizes, lists as well as tuples, but not sizes computed by the graph."""
    ruleset = fxrules.parse(SIZES_RULE.format(type=declared), filename=f"sizes-{declared}.fxr")
    for fn, expected in [
        # not returned: a new view of an input that is returned would be skipped ('alias')
        (lambda a: torch.reshape(a, (6, 4)) * 2, literal_fires),
        (lambda a: torch.reshape(a, [6, 4]) * 2, literal_fires),
        (lambda a: torch.reshape(a, (a.shape[0], -1)) * 2, computed_fires),
    ]:
        gm = trace(fn)
        assert fxrules.apply(gm, ruleset).fired("reshape_sizes") == expected, (declared, gm.code)


def test_list_of_tensors_matches_nodes() -> None:
    _, report = apply_rule("docs", "relu_of_cat", lambda a, b: torch.relu(torch.cat([a, b], 1)), _cat_inputs(),
                           example_inputs=_cat_inputs())
    assert report.fired("relu_of_cat") == 1
    _, report = apply_rule("docs", "relu_of_cat", lambda a: torch.relu(torch.cat([a, a * 2], 1)), [torch.randn(2, 3)],
                           example_inputs=[torch.randn(2, 3)])
    assert report.fired("relu_of_cat") == 1


def test_named_alternative_binds_either_spelling() -> None:
    def torch_spelling(a: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(a)
        return s + s

    gm, report = apply_rule("docs", "sum_of_same_sigmoid", torch_spelling, [torch.randn(4, 6)])
    assert report.fired("sum_of_same_sigmoid") == 1
    assert ops(gm) == ["sigmoid", "mul"]


def test_an_interior_alternative_must_be_operations() -> None:
    text = "rule r:\n    pattern:\n        c = x.clone() | x\n        return c + 1\n    replace:\n        return x\n"
    with pytest.raises(fxrules.FxrLoadError, match="must name an operation"):
        fxrules.parse(text)


def test_every_guard_function_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## 11. Guards: `where`", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(\w+)\(", section)) | set(re.findall(r"`(\w+)`", section))
    assert set(guards.FUNCTIONS) <= documented, sorted(set(guards.FUNCTIONS) - documented)


def test_guard_function_examples_in_the_table() -> None:
    assert guards.inverse_permutation((1, 2, 0)) == [2, 0, 1]
    assert guards.broadcasts_to((1, 3), (2, 3))
    assert not guards.broadcasts_to((2, 3), (3,))


def test_broadcasts_to_guard_keeps_a_larger_operand() -> None:
    inputs = [torch.randn(3), torch.randn(2, 3)]
    _, report = apply_rule("docs", "mul_ones_like", lambda a, b: a * torch.ones_like(b), inputs,
                           example_inputs=inputs)
    assert report.fired("mul_ones_like") == 0
    assert report["mul_ones_like"].skip_counts == {"guard false": 1}, str(report)


def _clone_of_input(a: torch.Tensor) -> torch.Tensor:
    return a.clone()


def _clone_written_in_place(a: torch.Tensor) -> torch.Tensor:
    c = torch.relu(a).clone()
    c.add_(1)
    return c


def _clone_of_shared_value(a: torch.Tensor) -> torch.Tensor:
    r = torch.relu(a)
    return r.clone() + r


@pytest.mark.parametrize("fn", [_clone_of_input, _clone_written_in_place, _clone_of_shared_value],
                         ids=["input", "written-in-place", "another-user"])
def test_structural_guards_keep_clones_that_matter(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    gm, report = apply_rule("docs", "drop_fresh_clone", fn, [torch.randn(4, 6)])
    assert report.fired("drop_fresh_clone") == 0
    assert report["drop_fresh_clone"].skip_counts == {"guard false": 1}, str(report)
    assert any(n.target in ("clone", torch.clone) for n in gm.graph.nodes)


def test_structural_guards_need_no_metadata_and_are_taken_as_holding_by_verify() -> None:
    ruleset = parse_block(block_defining("docs", "drop_fresh_clone"))
    result = fxrules.verify(ruleset, max_examples=20, seed=0)
    assert result["drop_fresh_clone"].verdict in (Verdict.SOUND, Verdict.PROVED), str(result)  # proved with z3
    assert result["drop_fresh_clone"].examples > 0


def test_dims_of_given_types_are_values_in_the_replacement() -> None:
    inputs = [torch.randn(2, 3, 5)]
    gm, _ = apply_rule("docs", "mean_last_as_sum", lambda a: torch.mean(a, -1), inputs, example_inputs=inputs,
                       static_shapes=True)
    division = next(n for n in gm.graph.nodes if n.target is operator.truediv)
    assert division.args[1] == 5
    inputs = [torch.randn(2, 3)]
    gm, _ = apply_rule("docs", "flatten_2d", lambda a: torch.flatten(a) * 2, inputs, example_inputs=inputs,
                       static_shapes=True)
    reshape = next(n for n in gm.graph.nodes if n.op == "call_method")
    assert reshape.args[1] == 6  # N * C computed at rewrite time


def test_shape_helpers_need_static_shapes() -> None:
    _, report = apply_rule("docs", "static_shape_of", lambda a: a.view(a.shape[0], -1), [torch.randn(4, 2, 3)])
    assert report.counts() == {}
    assert report["static_shape_of"].skip_counts == {"missing metadata": 1}, str(report)


def test_every_bundled_helper_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("Bundled helpers:", 1)[1].split("```", 1)[0]
    assert set(re.findall(r"^\* `(\w+)\(", section, re.MULTILINE)) == set(helpers.BUNDLED)


def test_helper_literal_results_must_be_printable() -> None:
    text = "rule odd_result:\n    torch.neg(x) => torch.mul(x, @odd(x))\n"
    gm = trace(lambda a: torch.neg(a))
    graph, code = gm.graph, gm.code
    nodes = [(n.name, n.args) for n in graph.nodes]
    with pytest.raises(fxrules.FxrApplyError, match="returned object, which cannot be inlined in generated code"):
        fxrules.apply(gm, fxrules.parse(text), helpers={"odd": lambda t: object()})
    assert gm.graph is graph and gm.code == code
    assert [(n.name, n.args) for n in graph.nodes] == nodes


def test_a_file_rule_replaces_an_included_rule_of_the_same_name() -> None:
    ruleset = parse_block(block_defining("docs", "relu_idempotent"))
    names = [rule.name for rule in ruleset]
    assert names == [*(r.name for r in fxrules.load("algebra.fxr") if r.name != "relu_idempotent"), "relu_idempotent"]
    assert (ruleset["relu_idempotent"].docstring or "").startswith("Only the torch.relu spelling")
    gm = trace(lambda a: F.relu(F.relu(a)))
    assert fxrules.apply(gm, ruleset).fired("relu_idempotent") == 0  # the bundled family version would fire


def test_two_included_files_with_one_rule_name_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.fxr").write_text("rule shared: torch.neg(torch.neg(x)) => x\n", encoding="utf-8")
    (tmp_path / "b.fxr").write_text("rule shared: torch.exp(torch.log(x)) => x\n", encoding="utf-8")
    (tmp_path / "both.fxr").write_text('include "a.fxr"\ninclude "b.fxr"\n', encoding="utf-8")
    (tmp_path / "twice.fxr").write_text('include "a.fxr"\ninclude "a.fxr"\n', encoding="utf-8")
    with pytest.raises(fxrules.FxrLoadError, match="duplicate rule name 'shared'"):
        fxrules.load(tmp_path / "both.fxr")
    assert [rule.name for rule in fxrules.load(tmp_path / "twice.fxr")] == ["shared"]


def _fails_lint(fn: Callable[..., Any]) -> torch.fx.GraphModule:
    """A traced graph with an extra node that uses the output's node before it is defined."""
    gm = trace(fn)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    last = output.args[0]
    with gm.graph.inserting_before(last):
        gm.graph.call_function(torch.sin, (last,))
    with pytest.raises(RuntimeError):
        gm.graph.lint()
    return gm


def test_a_graph_that_failed_lint_before_the_rewrite_is_a_usage_error() -> None:
    gm = _fails_lint(lambda a: torch.neg(torch.neg(a)) + 1)
    graph, code = gm.graph, gm.code
    nodes = [(n.name, n.op, n.target, n.args) for n in graph.nodes]
    with pytest.raises(fxrules.FxrUsageError, match=r"fails lint\(\) as it was given"):
        fxrules.apply(gm, "algebra.fxr")  # double_neg fires, the lint before the commit fails: all undone
    assert gm.graph is graph and gm.code == code
    assert [(n.name, n.op, n.target, n.args) for n in graph.nodes] == nodes


def test_a_rewrite_that_breaks_lint_is_an_apply_error(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = trace(lambda a: torch.neg(torch.neg(a)) + 1)
    code = gm.code
    real_lint = torch.fx.Graph.lint
    calls: list[str] = []

    def commit_lint_fails(graph: torch.fx.Graph) -> None:  # the lint of the rewritten graph
        calls.append("rewritten")
        raise RuntimeError("broken by the rewrite")

    def graph_lint(self: torch.fx.Graph) -> None:  # the undone original, which passes
        calls.append("as given")
        real_lint(self)

    monkeypatch.setattr(lint, "lint", commit_lint_fails)
    monkeypatch.setattr(torch.fx.Graph, "lint", graph_lint)
    with pytest.raises(fxrules.FxrApplyError, match="the rewritten graph is invalid, so nothing was changed"):
        fxrules.apply(gm, "algebra.fxr")
    monkeypatch.undo()
    assert gm.code == code and calls == ["rewritten", "as given"]


def test_a_graph_nothing_fires_on_is_neither_linted_nor_touched() -> None:
    gm = _fails_lint(lambda a: a + 1)
    graph, code = gm.graph, gm.code
    report = fxrules.apply(gm, "algebra.fxr")
    assert report.counts() == {}
    assert gm.graph is graph and gm.code == code


def test_apply_rewrites_the_graph_in_place() -> None:
    gm = trace(_neg_sub)
    graph = gm.graph
    report = fxrules.apply(gm, parse_block(block_defining("docs", "neg_sub")))
    assert report.fired("neg_sub") == 1
    assert gm.graph is graph
    assert ops(gm) == ["sub"]


def test_loop_warnings_are_user_warnings_with_a_location() -> None:
    assert issubclass(fxrules.FxrLoopWarning, UserWarning)
    block = next(b for b in DOC_BLOCKS if "expand_neg" in b.rule_names())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
        ruleset = fxrules.parse(block.text, filename="loop-warnings-location.fxr")
    first = ruleset.warnings[0]
    assert isinstance(first, fxrules.Diagnostic)
    assert first.span.file == "loop-warnings-location.fxr" and first.span.line >= 1


def test_rendered_error_in_the_doc_is_what_fxrules_prints() -> None:
    text = DOCS.read_text(encoding="utf-8")
    shown = next(block for block in re.findall(r"```text\n(.*?)```", text, re.DOTALL) if "my_rules.fxr:1:" in block)
    with pytest.raises(fxrules.FxrLoadError) as error:
        fxrules.parse("rule r: torch.reluu(x) => x\n", filename="my_rules.fxr")
    assert error.value.first.render().rstrip() == shown.rstrip()


def test_caret_points_at_the_part_that_failed() -> None:
    with pytest.raises(fxrules.FxrLoadError) as error:
        fxrules.parse("rule r: torch.nn.functionall.relu(x) => x\n", filename="nested.fxr")
    span = error.value.first.span
    assert span.column == len("rule r: torch.nn.") + 1  # under 'functionall'


def test_demo_is_a_command(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(fxrules.demo, "run_demo", lambda: calls.append(True))
    assert fxrules.cli.main(["demo"]) == 0
    assert calls == [True]


def test_documented_bundled_rulesets_are_the_bundled_ones() -> None:
    from fxrules.lang.bundled import ruleset_names

    text = DOCS.read_text(encoding="utf-8")
    listed = re.search(r"bundled rulesets \(([^)]*)\)\. Text given to", text)
    assert listed is not None
    assert sorted(re.findall(r"`(\w+\.fxr)`", listed.group(1))) == sorted(ruleset_names())


# ---------------------------------------------------------------- the prelude table


def _doc_prelude_table() -> dict[str, tuple[list[str], list[str]]]:
    """family -> (arguments, members) as the doc's prelude table lists them."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### The prelude", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \| (.*) \|$", section, re.MULTILINE)
    return {
        name: ([a.strip() for a in arguments.strip("` ").split(",")], re.findall(r"`([^`]+)`", members))
        for name, arguments, members in rows
    }


def _prelude_families() -> dict[str, list[str]]:
    families = {}
    for line in PRELUDE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"family (\w+) = (.*)$", line)
        if match:
            families[match.group(1)] = [m.strip() for m in match.group(2).split("|")]
    return families


def test_doc_lists_every_prelude_family_with_its_members() -> None:
    documented = {name: members for name, (_, members) in _doc_prelude_table().items()}
    assert documented == _prelude_families()


def test_the_prelude_has_the_families_the_language_promises() -> None:
    required = {
        "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "neg", "abs", "add", "sub", "mul", "div", "matmul",
        "linear", "softmax", "layer_norm", "dropout", "transpose", "permute", "reshape", "view", "contiguous", "cat",
        "sum", "mean",
    }
    assert required <= set(_prelude_families())


@pytest.mark.parametrize("family", sorted(_prelude_families()))
def test_documented_family_arguments(family: str) -> None:
    arguments, _ = _doc_prelude_table()[family]
    rule = fxrules.parse(f"rule probe_{family}: {family}(x, ...) => x\n")[f"probe_{family}"]
    template = rule.pattern[0]
    assert list(family_parameters(template.target)) == arguments


# ---------------------------------------------------------------- the doc's rules are sound


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::fxrules.FxrLoopWarning")
@pytest.mark.parametrize("block", [b for b in DOC_BLOCKS if not b.expect_error and b.rule_names()
                                   and "include" not in b.text], ids=lambda b: b.id)
def test_doc_rules_are_not_unsound(block: Block) -> None:
    """No example of the doc rewrites to something that computes a different value."""
    result = fxrules.verify(parse_block(block), max_examples=25, seed=0, helpers=DOC_HELPERS,
                            predicates=DOC_PREDICATES)
    assert result.sound, str(result)


def test_the_skip_reasons_table_lists_every_reason_as_the_code_defines_it() -> None:
    assert reasons_table() in DOCS.read_text(encoding="utf-8")
