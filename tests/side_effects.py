"""Applying rules and checking that nothing a program can observe changed: the outputs (values, dtypes, the sign of
zero, nan), the inputs, parameters and buffers after the call, and what a caller's write into the returned tensors
reaches."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import attrs
import torch
import torch.fx

import fxrules
from fxrules.engine.report import Report

Model = Callable[..., Any] | torch.nn.Module


@attrs.frozen
class Observed:
    """What one call shows: its outputs, then the inputs and the module's state (parameters and buffers, by name)
    after the call, then the same and the outputs after the caller wrote into every returned tensor."""

    outputs: list[torch.Tensor]
    after_call: dict[str, torch.Tensor]
    after_write: dict[str, torch.Tensor]


def _state(gm: torch.nn.Module, args: list[torch.Tensor], outputs: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    named = {**{f"input {i}": a for i, a in enumerate(args)}, **{f"output {i}": o for i, o in enumerate(outputs)},
             **dict(gm.named_parameters()), **dict(gm.named_buffers())}
    return {name: value.clone() for name, value in named.items()}


def observe(gm: torch.nn.Module, inputs: list[torch.Tensor]) -> Observed:
    args = [value.clone() for value in inputs]
    with torch.no_grad():
        result = gm(*args)
        returned = [result] if isinstance(result, torch.Tensor) else list(result)
        outputs = [value.clone() for value in returned]
        after_call = _state(gm, args, [])
        for value in returned:
            value.add_(True if value.dtype == torch.bool else 5)
        return Observed(outputs, after_call, _state(gm, args, returned))


def assert_same(actual: list[torch.Tensor], expected: list[torch.Tensor], what: str, atol: float = 0.0) -> None:
    assert len(actual) == len(expected), what
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        torch.testing.assert_close(a, e, atol=atol, rtol=atol and 1e-4, equal_nan=True, msg=f"{what}[{index}]")
        if e.is_floating_point() and not atol:
            assert torch.equal(torch.signbit(a), torch.signbit(e)), f"{what}[{index}]: the sign of a zero changed"


def assert_same_state(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], what: str,
                      atol: float) -> None:
    """The inputs, outputs and the state both graphs have (a fold replaces modules: theirs are not compared)."""
    common = [name for name in expected if name in actual]
    assert_same([actual[n] for n in common], [expected[n] for n in common], f"{what} {common}", atol)


def trace(model: Model) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(copy.deepcopy(model) if isinstance(model, torch.nn.Module) else model)


def rewrite_unobservably(model: Model, inputs: list[torch.Tensor], rules: Any, atol: float = 0.0,
                         static_shapes: bool = False) -> tuple[Report, torch.fx.GraphModule]:
    """Apply ``rules`` to a trace of ``model`` and assert that the rewritten graph and the original one show the
    same outputs and side effects (``atol``: for fused kernels, which round differently)."""
    original, rewritten = trace(model), trace(model)
    report = fxrules.apply(rewritten, rules, example_inputs=[value.clone() for value in inputs],
                           static_shapes=static_shapes)
    rewritten.graph.lint()
    expected, actual = observe(original, inputs), observe(rewritten, inputs)
    assert_same(actual.outputs, expected.outputs, "outputs", atol)
    assert_same_state(actual.after_call, expected.after_call, "after the call:", atol)
    assert_same_state(actual.after_write, expected.after_write, "after a write into the outputs:", atol)
    return report, rewritten


def skip_reasons(report: Report, rule: str) -> dict[str, int]:
    return dict(report[rule].skip_counts)
