"""Where aten operators are required (an ExportedProgram), replacements are spelled as aten operators."""

from __future__ import annotations

import pytest
import torch
import torch.fx

import fxrules
from fxrules.rewrite.aten import is_aten_graph

nn = torch.nn


def _exported(fn: nn.Module, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    return torch.export.export(fn, inputs).module()


class Sums(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x).sum(-1) + torch.relu(x).sum()


def _calls(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize(("replacement", "expected"), [
    ("torch.sum(x, -1)", "aten.sum.dim_IntList"),           # overload chosen from the arguments
    ("torch.sum(x)", "aten.sum.default"),
    ("sum(x, -1, keepdim=False)", "aten.sum.dim_IntList"),  # a family: its first aten member that takes them
    ("x.sum(-1)", "aten.sum.dim_IntList"),                  # a method
    ("torch.sum(input=x, dim=-1)", "aten.sum.dim_IntList"),  # torch's `input` is aten's `self`
    ("relu(x) * 2.0", "aten.mul.Tensor"),                   # an operator on a tensor
])
def test_replacement_spelled_in_aten_in_an_exported_program(replacement: str, expected: str) -> None:
    x = torch.randn(3, 4)
    rules = fxrules.parse(f"rule r:\n    torch.exp(x).sum(-1) | aten.sum.dim_IntList(aten.exp.default(x), [-1]) => "
                          f"{replacement}\n")
    result = fxrules.apply_program(torch.export.export(Sums(), (x,)), rules)
    assert result.report.fired("r") == 1, str(result.report)
    gm = result.program.graph_module
    assert expected in _calls(gm)
    assert all(isinstance(n.target, torch._ops.OpOverload) for n in gm.graph.nodes if n.op == "call_function")
    torch.testing.assert_close(result.program.module()(x), eval_replacement(replacement, x) + torch.relu(x).sum())


def eval_replacement(replacement: str, x: torch.Tensor) -> torch.Tensor:
    relu = torch.relu
    values = {"torch.sum(x, -1)": x.sum(-1), "torch.sum(x)": x.sum(), "sum(x, -1, keepdim=False)": x.sum(-1),
              "x.sum(-1)": x.sum(-1), "torch.sum(input=x, dim=-1)": x.sum(-1), "relu(x) * 2.0": relu(x) * 2.0}
    return values[replacement]


def test_size_arithmetic_keeps_python_operators() -> None:
    class Flatten(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.neg(torch.neg(x)).reshape(x.shape[0] * x.shape[1]).exp()  # not a view of its input

    x = torch.randn(3, 4)
    batch = torch.export.Dim("batch")
    gm = torch.export.export(Flatten(), (x,), dynamic_shapes=({0: batch},)).module()
    assert is_aten_graph(gm.graph)  # sym_size and operator.mul on sizes sit beside aten operators
    report = fxrules.apply(gm, "algebra.fxr")
    assert report.fired("double_neg") == 1
    assert "<built-in function mul>" in _calls(gm)  # the size product is still operator.mul of SymInts
    torch.testing.assert_close(gm(torch.randn(5, 4)).shape, torch.Size([20]))


def test_a_traced_graph_is_not_aten_level() -> None:
    gm = torch.fx.symbolic_trace(Sums())
    assert not is_aten_graph(gm.graph)
    fxrules.apply(gm, fxrules.parse("rule r:\n    torch.exp(x) => torch.sigmoid(x)\n"))
    assert "<built-in method sigmoid of type object at" in " ".join(_calls(gm))


class Sigmoid(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) + 1


@pytest.mark.parametrize(("replacement", "expected"), [
    ("torch.special.expit(x.permute(1, 0)).permute(1, 0)", ["aten.permute.default", "aten.permute.default"]),
    ("torch.special.expit(x.reshape(3, 2)).reshape(2, 3)", ["aten.reshape.default", "aten.reshape.default"]),
    ("torch.special.expit(x.view([6])).view(2, 3)", ["aten.view.default", "aten.view.default"]),
])
def test_methods_taking_sizes_loose_are_spelled_with_a_size_list(replacement: str, expected: list[str]) -> None:
    x = torch.randn(2, 3)
    result = fxrules.apply_program(torch.export.export(Sigmoid(), (x,)),
                                   fxrules.parse(f"rule r:\n    sigmoid(x) => {replacement}\n", "sizes.fxr"))
    assert result.report.counts() == {"r": 1}
    calls = _calls(result.program.graph_module)
    assert [c for c in calls if c in set(expected)] == expected and "aten.special_expit.default" in calls
    torch.testing.assert_close(result.program.module()(x), Sigmoid()(x))


def test_a_single_size_that_could_be_a_dtype_is_not_guessed() -> None:
    x = torch.randn(2, 3)
    result = fxrules.apply_program(torch.export.export(Sigmoid(), (x,)), fxrules.parse(
        "rule r:\n    sigmoid(x) => torch.special.expit(x.view(6)).view(2, 3)\n", "sizes.fxr"))
    assert result.report["r"].skip_counts == {"no aten spelling": 1}
    assert "aten.view.dtype would take 6 as a dtype; write the sizes of Tensor.view as a list" in str(result.report)


def test_comparison_operators_on_tensors_are_spelled_in_aten() -> None:
    x = torch.randn(5)
    rules = fxrules.parse("rule r:\n    sigmoid(x) => torch.where(operator.gt(x, 0), x, x * 2)\n", "cmp.fxr")
    result = fxrules.apply_program(torch.export.export(Sigmoid(), (x,)), rules)
    assert result.report.counts() == {"r": 1}
    assert {"aten.gt.Scalar", "aten.mul.Tensor", "aten.where.self"} <= set(_calls(result.program.graph_module))
    torch.testing.assert_close(result.program.module()(x), torch.where(x > 0, x, x * 2) + 1)
