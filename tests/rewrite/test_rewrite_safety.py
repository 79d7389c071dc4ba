"""The safety checks of a rewrite, listed once (``fxrules.match.safety.SAFETY_CHECKS``): each refuses its
example with its own skip reason and detail, the list is the docs' table, and every check is exemplified."""

from __future__ import annotations

import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from fxrules.match.safety import SAFETY_CHECKS, Stage, checks_table
from fxrules.match.skips import SkipReason
from tests.conftest import no_grad_graph, trace

DOCS = Path(__file__).resolve().parents[2] / "docs" / "language.md"


@attrs.frozen
class Example:
    """A graph and a rule the check refuses (once), and a piece of the detail it gives."""

    graph: Callable[[], torch.fx.GraphModule]
    rule: str
    detail: str
    fired: int = 0  # where the refused match is not refused later


class Impure(torch.nn.Module):
    _is_impure = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class CallsImpure(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.side = Impure()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(self.side(x))


class KeepsImpure(torch.fx.Tracer):
    def is_leaf_module(self, m: torch.nn.Module, name: str) -> bool:
        return isinstance(m, Impure) or super().is_leaf_module(m, name)


def impure_graph() -> torch.fx.GraphModule:
    model = CallsImpure()
    return torch.fx.GraphModule(model, KeepsImpure().trace(model))



def autocast_graph() -> torch.fx.GraphModule:
    """``matmul(a, w) + b`` under ``torch.autocast("cpu")``, as Dynamo's graphs spell it, with ShapeProp's
    metadata (the product bfloat16, the sum float32)."""
    graph = torch.fx.Graph()
    a, w, b = graph.placeholder("a"), graph.placeholder("w"), graph.placeholder("b")
    enter = graph.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, None))
    out = graph.call_function(operator.add, (graph.call_function(torch.matmul, (a, w)), b))
    graph.call_function(torch.amp.autocast_mode._exit_autocast, (enter,))
    graph.output(out)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    ShapeProp(gm).propagate(torch.randn(2, 3), torch.randn(3, 4), torch.randn(4))
    return gm


def in_place(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.add_(1)
    return y


def late_capture(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.neg(x)
    y = torch.exp(x)
    return a, torch.add(x, y)


def escaping(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = torch.neg(x)
    return torch.neg(n).exp(), n


def cycle(x: torch.Tensor) -> torch.Tensor:
    n = torch.neg(x)
    return torch.mul(torch.relu(n), n)


def uses_late(x: torch.Tensor) -> torch.Tensor:
    s = torch.relu(x)
    return torch.sigmoid(s) + torch.neg(torch.exp(s))


def written_between(x: torch.Tensor) -> torch.Tensor:
    r = torch.relu(x)
    x.add_(1.0)
    return torch.relu(r)


EXAMPLES = {
    "escaping_user": Example(lambda: trace(escaping), "torch.neg(torch.neg(x)) => x",
                             "'neg' is also used by output outside the match"),
    "impure": Example(impure_graph, """
    given:
        m: nn.Module
    pattern:
        return torch.neg(m(x))
    replace:
        return x""", "'side' has side effects"),
    "cycle": Example(lambda: trace(cycle), """
    pattern:
        n = torch.neg(x)
        return n, torch.mul(c, n)
    replace:
        return torch.abs(x), torch.abs(c)""", "a capture depends on a node of the match"),
    "overlap": Example(lambda: trace(lambda x: torch.neg(torch.relu(x))), """
    pattern:
        return torch.neg(torch.sigmoid(x))
    replace:
        return torch.tanh(x)

rule relu_sigmoid:
    torch.relu(x) => torch.sigmoid(x)""", "created by another rewrite in this pass", fired=1),  # in pass 2
    "captured_late": Example(lambda: trace(late_capture), """
    pattern:
        a = torch.neg(x)
        return a, torch.add(x, y)
    replace:
        return torch.abs(x), torch.sub(x, y)""", "captured exp defined after the first output 'neg'"),
    "written_between": Example(lambda: trace(written_between), "torch.relu(torch.relu(x)) => torch.relu(x)",
                               "'add_' writes into 'x' in place between where the match reads it"),
    "no_change": Example(lambda: trace(lambda x: torch.relu(torch.neg(x))), """
    pattern:
        n = torch.neg(x)
        r = torch.relu(n)
        return n, r
    replace:
        return n, r""", "the replacement is the matched node itself"),
    "effects_kept": Example(lambda: trace(lambda x: torch.relu(x.add_(1))),
                            "torch.relu(x.add_(1)) => torch.relu(x + 1)",
                            "'add_' writes into 'x', and the replacement, which would remove it, does not do the same"),
    "used_late": Example(lambda: trace(uses_late), """
    pattern:
        s = torch.relu(x)
        c = torch.sigmoid(s)
        a = torch.exp(s)
        b = torch.neg(a)
        return b, c
    replace:
        return torch.neg(a), torch.sigmoid(torch.log(a))""", "the replacement uses exp, defined after"),
    "literal_receiver": Example(lambda: trace(lambda y: torch.mul(1, y).contiguous()), "torch.mul(x, _) => x",
                                "calls .contiguous() on 'mul'"),
    "grad_mode": Example(no_grad_graph, "torch.neg(torch.neg(x)) => x", "computed with grad disabled"),
    "autocast": Example(autocast_graph, "torch.matmul(a, w) + b => torch.addmm(b, a, w)",
                        "'add' is torch.float32 in autocast(cpu, torch.bfloat16), and its replacement would be "
                        "torch.bfloat16"),
    "in_place_write": Example(lambda: trace(in_place), "x * 1 => x", "'add_' writes into 'mul' in place"),
    "alias": Example(lambda: trace(lambda x: x * 1.0), "x * 1.0 => x", "share memory with the graph input 'x'"),
}


def test_every_check_has_an_example() -> None:
    assert list(EXAMPLES) == [check.name for check in SAFETY_CHECKS]


@pytest.mark.parametrize("check", SAFETY_CHECKS, ids=lambda check: check.name)
def test_each_check_refuses_its_example_with_its_reason(check: Any) -> None:
    example = EXAMPLES[check.name]
    text = example.rule if example.rule.startswith("\n") else f" {example.rule}"
    gm = example.graph()
    code = gm.code
    report = fxrules.apply(gm, fxrules.parse(f"rule refused:{text}\n"))
    refused = report["refused"]
    assert (refused.fired, refused.skip_counts) == (example.fired, {check.reason.value: 1}), str(report)
    assert example.detail in refused.skipped[0].detail
    if not report.total_fired:
        assert gm.code == code


def test_the_checks_run_in_stage_order_and_have_distinct_names() -> None:
    stages = [check.stage for check in SAFETY_CHECKS]
    assert stages == sorted(stages, key=list(Stage).index)
    assert len({check.name for check in SAFETY_CHECKS}) == len(SAFETY_CHECKS)
    assert all(isinstance(check.reason, SkipReason) for check in SAFETY_CHECKS)


def test_the_docs_list_the_checks_as_the_code_defines_them() -> None:
    assert checks_table() in DOCS.read_text(encoding="utf-8")
