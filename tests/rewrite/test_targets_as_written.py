"""A replacement emits the targets its text names; families, packets and aten-only consumers are the exceptions.

In a GraphModule (torch-level or aten-level, as ``torch.export(...).module()`` makes
it) every function, method and operator is emitted as written; a family emits
the member that fits the graph's level; an overload packet, in an aten-level
graph, the overload PyTorch picks.  In an ExportedProgram everything is spelled
as an aten operator.  A rewrite that computes what it matched is skipped as
``no change``; captured modules' parameters are used as they are.
"""

from __future__ import annotations

import operator
import warnings

import pytest
import torch
import torch.fx

import fxrules

nn = torch.nn
F = nn.functional


def scale(x: torch.Tensor) -> torch.Tensor:
    """A user function a rule may emit once allowed."""
    return x * 3


class SinTimesTwo(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2


class SwishLike(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class LinearRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l(x))


def _aten_module(module: nn.Module, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    return torch.export.export(module, inputs).module()


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")
            and n.target != "_guards_fn"]


def _rules(text: str, **options: object) -> fxrules.RuleSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
        return fxrules.parse(text, "written.fxr", **options)  # type: ignore[arg-type]


X = torch.randn(3, 4)


@pytest.mark.parametrize(("replacement", "expected", "reference"), [
    ("torch.sin(x)", [torch.sin, torch.ops.aten.mul.Tensor], lambda x: torch.sin(x) * 2),
    ("x.cos() * 3.0", ["cos", operator.mul, torch.ops.aten.mul.Tensor], lambda x: x.cos() * 3.0 * 2),
    ("torch.ops.prims.mul.default(x, x)", [torch.ops.prims.mul.default, torch.ops.aten.mul.Tensor],
     lambda x: x * x * 2),
], ids=["torch function", "method and inlined scalar", "prims operator"])
def test_an_aten_level_graph_module_gets_the_targets_the_replacement_names(
        replacement: str, expected: list[object], reference: object) -> None:
    gm = _aten_module(SinTimesTwo(), X)
    report = fxrules.apply(gm, _rules(f"rule lower:\n    aten.sin.default(x) => {replacement}\n"))
    assert report.counts() == {"lower": 1} and report.passes == 2  # fired once, then nothing to match
    assert _targets(gm) == expected
    torch.testing.assert_close(gm(X), reference(X))  # type: ignore[operator]


def test_a_family_emits_its_aten_member_in_an_aten_level_graph_and_its_first_member_elsewhere() -> None:
    rules = _rules("rule swish:\n    mul(x, sigmoid(x)) => silu(x)\n")
    aten_gm = _aten_module(SwishLike(), X)
    traced = torch.fx.symbolic_trace(SwishLike())
    assert fxrules.apply(aten_gm, rules).counts() == fxrules.apply(traced, rules).counts() == {"swish": 1}
    assert _targets(aten_gm) == [torch.ops.aten.silu.default]
    assert _targets(traced) == [F.silu]


def test_an_overload_packet_is_emitted_as_the_overload_torch_picks_in_an_aten_level_graph_only() -> None:
    rules = _rules("rule r:\n    torch.sin(x) | aten.sin.default(x) => aten.sum(x, [-1], True)\n")
    aten_gm, traced = _aten_module(SinTimesTwo(), X), torch.fx.symbolic_trace(SinTimesTwo())
    fxrules.apply(aten_gm, rules)
    fxrules.apply(traced, rules)
    assert _targets(aten_gm) == [torch.ops.aten.sum.dim_IntList, torch.ops.aten.mul.Tensor]
    assert _targets(traced) == [torch.ops.aten.sum, operator.mul]  # as written
    torch.testing.assert_close(aten_gm(X), traced(X))


def test_an_exported_program_spells_every_replacement_operation_in_aten() -> None:
    result = fxrules.apply_program(torch.export.export(SinTimesTwo(), (X,)),
                                   _rules("rule r:\n    aten.sin.default(x) => x.cos() * 3.0\n"))
    assert result.report.counts() == {"r": 1}
    assert [n.target for n in result.program.graph.nodes if n.op == "call_function"] == [
        torch.ops.aten.cos.default, torch.ops.aten.mul.Tensor, torch.ops.aten.mul.Tensor]


@pytest.mark.parametrize("replacement", ["torch.sin(x)", "x.sin()", "aten.sin(x)"])
def test_a_replacement_spelled_as_its_match_in_an_exported_program_is_no_change(replacement: str) -> None:
    result = fxrules.apply_program(torch.export.export(SinTimesTwo(), (X,)),
                                   _rules(f"rule r:\n    aten.sin.default(x) => {replacement}\n"))
    assert result.report.counts() == {}
    assert result.report["r"].skip_counts == {"no change": 1}
    assert "the replacement computes 'sin' as the match does: aten.sin.default of the same arguments" \
        in str(result.report)


@pytest.mark.parametrize(("module", "rule"), [
    (SinTimesTwo(), "aten.sin.default(x) => aten.sin(x)"),  # the packet resolves to the matched overload
    (SinTimesTwo(), "aten.mul.Tensor(x, y) => aten.mul.Tensor(x, other=y)"),  # the same after normalization
], ids=["packet", "normalized arguments"])
def test_a_rewrite_computing_what_it_matched_is_skipped_in_an_aten_level_graph(module: nn.Module, rule: str) -> None:
    gm = _aten_module(module, X)
    before = gm.code
    report = fxrules.apply(gm, _rules(f"rule r:\n    {rule}\n"))
    assert report.counts() == {} and report["r"].skip_counts == {"no change": 1}
    assert gm.code == before


def test_a_rewrite_computing_what_it_matched_is_skipped_in_a_traced_graph() -> None:
    class Sum(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sum(x, -1)

    gm = torch.fx.symbolic_trace(Sum())
    report = fxrules.apply(gm, _rules("rule r:\n    torch.sum(x, -1) => torch.sum(x, dim=-1, keepdim=False)\n"))
    assert report.counts() == {} and report["r"].skip_counts == {"no change": 1}


def test_the_loop_check_warns_about_rules_whose_replacement_is_their_pattern() -> None:
    with pytest.warns(fxrules.FxrLoopWarning) as caught:
        fxrules.parse("rule r:\n    aten.sin.default(x) => aten.sin(x)\n", "same.fxr")
    assert [str(w.message).splitlines()[0] for w in caught] == [
        "same.fxr:1:6: warning: rule r: its replacement computes what its pattern matches: every match is "
        "skipped as `no change`"]
    with pytest.warns(fxrules.FxrLoopWarning) as caught:
        fxrules.parse("rule lower:\n    aten.sin.default(x) => torch.sin(x)\n", "lower.fxr")
    assert [str(w.message).splitlines()[0] for w in caught] == [
        "lower.fxr:1:6: warning: rule lower: in an ExportedProgram and Inductor's post-grad pass, where every "
        "operation is spelled as an aten operator, its replacement computes what its pattern matches: every "
        "match there is skipped as `no change`"]


def test_a_canonicalizing_rule_is_not_reported_as_no_change() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fxrules.parse("rule canon:\n    F.relu(x) => torch.relu(x)\n", "canon.fxr")
    assert [str(w.message) for w in caught] == []


def test_getitem_of_a_multi_output_operator_in_an_aten_level_graph_and_an_exported_program() -> None:
    class Mean(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean(-1, keepdim=True) + 1

    text = ("rule r:\n    aten.mean.dim(x, [-1], True) => "
            "aten.var_mean.correction(x, [-1], correction=0, keepdim=True)[1]\n")
    gm = _aten_module(Mean(), X)
    assert fxrules.apply(gm, _rules(text)).counts() == {"r": 1}
    assert _targets(gm) == [torch.ops.aten.var_mean.correction, operator.getitem, torch.ops.aten.add.Tensor]
    result = fxrules.apply_program(torch.export.export(Mean(), (X,)), _rules(text))
    assert result.report.counts() == {"r": 1}
    torch.testing.assert_close(gm(X), Mean()(X))
    torch.testing.assert_close(result.program.module()(X), Mean()(X))


def test_a_helper_built_module_and_an_allowed_function_in_an_aten_level_graph() -> None:
    rules = _rules(f"use {__name__} as t\nrule r:\n    aten.sin.default(x) => t.scale(@tanh_module()(x))\n",
                   allow=[__name__])
    gm = _aten_module(SinTimesTwo(), X)
    report = fxrules.apply(gm, rules, helpers={"tanh_module": nn.Tanh}, allow=[__name__])
    assert report.counts() == {"r": 1}
    assert _targets(gm) == ["tanh_module", scale, torch.ops.aten.mul.Tensor]
    torch.testing.assert_close(gm(X), torch.tanh(X) * 3 * 2)


def test_a_captured_modules_parameters_are_used_as_they_are() -> None:
    model = LinearRelu()
    gm = torch.fx.symbolic_trace(model)
    rules = _rules("rule r:\n    given:\n        l: nn.Linear\n    pattern:\n        return relu(l(x))\n"
                   "    replace:\n        return torch.relu(F.linear(x, l.weight, l.bias))\n")
    assert fxrules.apply(gm, rules).counts() == {"r": 1}
    assert [n.target for n in gm.graph.find_nodes(op="get_attr")] == ["l.weight", "l.bias"]
    assert gm.get_parameter("l.weight") is model.l.weight  # symbolic_trace shares the module: no copy
    assert [name for name, _ in gm.named_parameters()] == ["l.weight", "l.bias"]
    x = torch.randn(2, 4)
    torch.testing.assert_close(gm(x), model(x))


def test_a_captured_modules_data_attribute_is_inlined_and_a_missing_one_is_an_error() -> None:
    gm = torch.fx.symbolic_trace(LinearRelu())
    inlined = _rules("rule r:\n    given:\n        l: nn.Linear\n    pattern:\n        return relu(l(x))\n"
                     "    replace:\n        return torch.relu(F.linear(x, l.weight, l.bias)) * l.out_features\n")
    assert fxrules.apply(gm, inlined).counts() == {"r": 1}
    assert "mul = relu_1 * 3;" in gm.code
    gm = torch.fx.symbolic_trace(LinearRelu())
    misspelt = _rules("rule r:\n    given:\n        l: nn.Linear\n    pattern:\n        return relu(l(x))\n"
                      "    replace:\n        return F.linear(x, l.wieght, l.bias)\n")
    with pytest.raises(fxrules.FxrApplyError, match=r"written.fxr:7:28: 'Linear' has no attribute 'wieght'"):
        fxrules.apply(gm, misspelt)


def test_a_lifted_parameter_stays_the_programs_parameter() -> None:
    model = nn.Sequential(nn.Linear(4, 3))
    program = torch.export.export(model, (X,))
    result = fxrules.apply_program(program, _rules(
        "rule r:\n    aten.linear.default(x, w, b) => aten.add.Tensor(aten.matmul.default(x, aten.t.default(w)), b)\n"))
    assert result.report.counts() == {"r": 1}
    specs = [(s.kind.name, s.target) for s in result.program.graph_signature.input_specs]
    assert specs == [("PARAMETER", "0.weight"), ("PARAMETER", "0.bias"), ("USER_INPUT", None)]
    assert result.program.state_dict["0.weight"] is program.state_dict["0.weight"]
    torch.testing.assert_close(result.program.module()(X), model(X))
