"""Every spelling of a prelude family's operation is matched by the family, as each tracer records it.

For each family, a module computes the operation once per spelling (the
function, the ``F.`` function, the Python operator, the method, the module)
and returns them all; it is traced with ``torch.fx.symbolic_trace``,
``torch.export`` (an aten-level graph) and Dynamo, and the family's pattern
must match every one of them.
"""

from __future__ import annotations

import operator
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx

import fxrules

nn = torch.nn
F = nn.functional
PRELUDE = Path(__file__).resolve().parents[2] / "rulesets" / "prelude.fxr"

Spelling = Callable[..., torch.Tensor]


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _i(*shape: int) -> torch.Tensor:
    return torch.randint(0, 8, shape)


def _unary(name: str, module: type[nn.Module] | None = None, functional: bool = False,
           operator_form: Spelling | None = None) -> tuple[list[Spelling], Callable[[], list[torch.Tensor]]]:
    spellings: list[Spelling] = [getattr(torch, name), lambda x: getattr(x, name)()]
    if functional:
        spellings.append(getattr(F, name))
    if module is not None:
        spellings.append(module())
    if operator_form is not None:
        spellings.append(operator_form)
    return spellings, lambda: [_r(3, 4)]


def _binary(name: str, operator_form: Spelling, inputs: Callable[[], list[torch.Tensor]] = lambda: [_r(3, 4), _r(3, 4)],
            ) -> tuple[list[Spelling], Callable[[], list[torch.Tensor]]]:
    return [getattr(torch, name), lambda x, y: getattr(x, name)(y), operator_form], inputs


#: family -> (spellings, inputs): each spelling is called with the inputs.
SPELLINGS: dict[str, tuple[list[Spelling], Callable[[], list[torch.Tensor]]]] = {
    "relu": _unary("relu", nn.ReLU, functional=True),
    "gelu": ([F.gelu, nn.GELU()], lambda: [_r(3, 4)]),
    "silu": ([F.silu, nn.SiLU()], lambda: [_r(3, 4)]),
    "sigmoid": _unary("sigmoid", nn.Sigmoid, functional=True),
    "tanh": _unary("tanh", nn.Tanh, functional=True),
    "exp": _unary("exp"),
    "log": _unary("log"),
    "neg": _unary("neg", operator_form=operator.neg),
    "abs": _unary("abs", operator_form=abs),
    "positive": _unary("positive", operator_form=operator.pos),
    "add": _binary("add", operator.add),
    "sub": _binary("sub", operator.sub),
    "mul": _binary("mul", operator.mul),
    "div": _binary("div", operator.truediv),
    "matmul": _binary("matmul", operator.matmul, lambda: [_r(3, 4), _r(4, 5)]),
    "floor_divide": _binary("floor_divide", operator.floordiv),
    "remainder": _binary("remainder", operator.mod),
    "lt": _binary("lt", operator.lt),
    "le": _binary("le", operator.le),
    "gt": _binary("gt", operator.gt),
    "ge": _binary("ge", operator.ge),
    "eq": _binary("eq", operator.eq),
    "ne": _binary("ne", operator.ne),
    "bitwise_and": _binary("bitwise_and", operator.and_, lambda: [_i(3, 4), _i(3, 4)]),
    "bitwise_or": _binary("bitwise_or", operator.or_, lambda: [_i(3, 4), _i(3, 4)]),
    "bitwise_xor": _binary("bitwise_xor", operator.xor, lambda: [_i(3, 4), _i(3, 4)]),
    "bitwise_not": ([torch.bitwise_not, lambda x: x.bitwise_not(), operator.invert], lambda: [_i(3, 4)]),
    "linear": ([F.linear], lambda: [_r(2, 4), _r(3, 4), _r(3)]),
    "softmax": ([lambda x: torch.softmax(x, -1), lambda x: F.softmax(x, -1), lambda x: x.softmax(-1),
                 nn.Softmax(-1)], lambda: [_r(3, 4)]),
    "layer_norm": ([lambda x: F.layer_norm(x, [4])], lambda: [_r(3, 4)]),
    "dropout": ([lambda x: F.dropout(x, 0.5, True), lambda x: torch.dropout(x, 0.5, True)], lambda: [_r(3, 4)]),
    "transpose": ([lambda x: torch.transpose(x, 0, 1), lambda x: x.transpose(0, 1)], lambda: [_r(3, 4)]),
    "permute": ([lambda x: torch.permute(x, (1, 0)), lambda x: x.permute(1, 0)], lambda: [_r(3, 4)]),
    "reshape": ([lambda x: torch.reshape(x, (4, 3)), lambda x: x.reshape(4, 3)], lambda: [_r(3, 4)]),
    "view": ([lambda x: x.view(4, 3)], lambda: [_r(3, 4)]),
    "contiguous": ([lambda x: x.t().contiguous()], lambda: [_r(3, 4)]),
    "cat": ([lambda x, y: torch.cat([x, y]), lambda x, y: torch.concat([x, y]),
             lambda x, y: torch.concatenate([x, y])], lambda: [_r(3, 4), _r(3, 4)]),
    "sum": ([lambda x: torch.sum(x, -1), lambda x: x.sum(-1), torch.sum, lambda x: x.sum()], lambda: [_r(3, 4)]),
    "mean": ([lambda x: torch.mean(x, -1), lambda x: x.mean(-1), torch.mean, lambda x: x.mean()], lambda: [_r(3, 4)]),
    "pow": ([lambda x: torch.pow(x, 2), lambda x: x.pow(2), lambda x: x ** 2, lambda x: x ** x, lambda x: 2 ** x],
            lambda: [_r(3, 4)]),
    "sqrt": _unary("sqrt"),
    "rsqrt": _unary("rsqrt"),
    "erf": _unary("erf"),
    "conv1d": ([F.conv1d, torch.conv1d], lambda: [_r(1, 2, 8), _r(3, 2, 3)]),
    "conv2d": ([F.conv2d, torch.conv2d], lambda: [_r(1, 2, 8, 8), _r(3, 2, 3, 3)]),
    "conv3d": ([F.conv3d, torch.conv3d], lambda: [_r(1, 2, 4, 4, 4), _r(3, 2, 3, 3, 3)]),
    "batch_norm": ([lambda x, m, v: F.batch_norm(x, m, v), lambda x, m, v: torch.batch_norm(
        x, None, None, m, v, False, 0.1, 1e-5, False)], lambda: [_r(2, 3, 4), _r(3), _r(3).abs()]),
}

class Spellings(nn.Module):
    """Every spelling of one operation, on the same inputs (``forward`` spelled out for symbolic_trace)."""

    def __init__(self, spellings: list[Spelling]) -> None:
        super().__init__()
        self.modules_ = nn.ModuleList(s for s in spellings if isinstance(s, nn.Module))
        self.spellings = spellings

    def all(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(spelling(*inputs) for spelling in self.spellings)


class One(Spellings):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.all(x)


class Two(Spellings):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.all(x, y)


class Three(Spellings):
    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.all(x, y, z)


def _traced(tracer: str, module: nn.Module, inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
    if tracer == "symbolic_trace":
        return torch.fx.symbolic_trace(module)
    if tracer == "export":
        return torch.export.export(module, tuple(inputs)).module()
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, _: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(module, backend=backend, fullgraph=True)(*inputs)
    return graphs[0]


def _rule(family: str) -> fxrules.RuleSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
        return fxrules.parse(f"rule probe: {family}(x, ...) => torch.special.expit(x)\n", f"{family}.fxr")


def test_every_prelude_family_has_its_spellings_listed() -> None:
    families = re.findall(r"^family (\w+) =", PRELUDE.read_text(encoding="utf-8"), re.MULTILINE)
    assert sorted(SPELLINGS) == sorted(families)


@pytest.mark.parametrize("tracer", ["symbolic_trace", "export", "dynamo"])
@pytest.mark.parametrize("family", sorted(SPELLINGS))
def test_a_family_matches_each_spelling_as_the_tracer_records_it(family: str, tracer: str) -> None:
    spellings, inputs = SPELLINGS[family]
    values = inputs()
    gm = _traced(tracer, (One, Two, Three)[len(values) - 1](spellings).eval(), values)
    report = fxrules.apply(gm, _rule(family))
    assert report.fired("probe") == len(spellings), f"{report}\n{gm.code}"
