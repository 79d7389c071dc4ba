"""Applying rules and checking that nothing a program can observe changed: the outputs (values, dtypes, the sign of
zero, nan), the inputs and buffers after the call, and what a caller's write into the returned tensors reaches."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import attrs
import torch
import torch.fx

import fxrules
from fxrules.report import Report

Model = Callable[..., Any] | torch.nn.Module


@attrs.frozen
class Observed:
    """What one call shows: its outputs, then the inputs, parameters and buffers after the call, then those and
    the outputs after the caller wrote into every returned tensor."""

    outputs: list[torch.Tensor]
    after_call: list[torch.Tensor]
    after_write: list[torch.Tensor]


def observe(gm: torch.nn.Module, inputs: list[torch.Tensor]) -> Observed:
    args = [value.clone() for value in inputs]
    with torch.no_grad():
        result = gm(*args)
        returned = [result] if isinstance(result, torch.Tensor) else list(result)
        outputs = [value.clone() for value in returned]
        state = [*args, *gm.parameters(), *gm.buffers()]
        after_call = [value.clone() for value in state]
        for value in returned:
            value.add_(True if value.dtype == torch.bool else 5)
        after_write = [value.clone() for value in (*state, *returned)]
    return Observed(outputs, after_call, after_write)


def assert_same(actual: list[torch.Tensor], expected: list[torch.Tensor], what: str, atol: float = 0.0) -> None:
    assert len(actual) == len(expected), what
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        torch.testing.assert_close(a, e, atol=atol, rtol=atol and 1e-4, equal_nan=True, msg=f"{what}[{index}]")
        if e.is_floating_point() and not atol:
            assert torch.equal(torch.signbit(a), torch.signbit(e)), f"{what}[{index}]: the sign of a zero changed"


def trace(model: Model) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(copy.deepcopy(model) if isinstance(model, torch.nn.Module) else model)


def rewrite_unobservably(model: Model, inputs: list[torch.Tensor], rules: Any, atol: float = 0.0
                         ) -> tuple[Report, torch.fx.GraphModule]:
    """Apply ``rules`` to a trace of ``model`` and assert that the rewritten graph and the original one show the
    same outputs and side effects (``atol``: for fused kernels, which round differently)."""
    original, rewritten = trace(model), trace(model)
    report = fxrules.apply(rewritten, rules, example_inputs=[value.clone() for value in inputs])
    rewritten.graph.lint()
    expected, actual = observe(original, inputs), observe(rewritten, inputs)
    assert_same(actual.outputs, expected.outputs, "outputs", atol)
    assert_same(actual.after_call, expected.after_call, "inputs, parameters and buffers after the call", atol)
    assert_same(actual.after_write, expected.after_write, "after a write into the outputs", atol)
    return report, rewritten


def skip_reasons(report: Report, rule: str) -> dict[str, int]:
    return dict(report[rule].skip_counts)
