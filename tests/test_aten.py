"""Replacements in aten-level graphs are spelled as aten operators (fxrules.aten)."""

from __future__ import annotations

import pytest
import torch
import torch.fx

import fxrules
from fxrules.aten import is_aten_graph

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
def test_replacement_spelled_in_aten(replacement: str, expected: str) -> None:
    gm = _exported(Sums(), torch.randn(3, 4))
    rules = fxrules.parse(f"rule r:\n    torch.exp(x).sum(-1) | aten.sum.dim_IntList(aten.exp.default(x), [-1]) => "
                          f"{replacement}\n")
    report = fxrules.apply(gm, rules)
    assert report.fired("r") == 1, str(report)
    assert expected in _calls(gm)
    assert all(isinstance(n.target, torch._ops.OpOverload) for n in gm.graph.nodes if n.op == "call_function"
               and "pytree" not in str(n.target))
    x = torch.randn(3, 4)
    torch.testing.assert_close(gm(x), eval_replacement(replacement, x) + torch.relu(x).sum())


def eval_replacement(replacement: str, x: torch.Tensor) -> torch.Tensor:
    relu = torch.relu
    values = {"torch.sum(x, -1)": x.sum(-1), "torch.sum(x)": x.sum(), "sum(x, -1, keepdim=False)": x.sum(-1),
              "x.sum(-1)": x.sum(-1), "torch.sum(input=x, dim=-1)": x.sum(-1), "relu(x) * 2.0": relu(x) * 2.0}
    return values[replacement]


def test_size_arithmetic_keeps_python_operators() -> None:
    class Flatten(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.neg(torch.neg(x)).reshape(x.shape[0] * x.shape[1])

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
