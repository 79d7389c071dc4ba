"""Shared fixtures and the one rewrite-checking helper of the test suite."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.fx

import fxrules
from fxrules.match.matcher import Matcher
from tests.reference_matcher import ReferenceMatcher

#: Every execution of matching, by name: a matcher for a graph module.  The compiled matcher the engine
#: runs, the same with the tracer ``explain=True`` attaches, and the interpreter kept as their oracle.
EXECUTIONS: dict[str, Callable[[torch.nn.Module], Matcher]] = {
    "compiled": Matcher,
    "traced": lambda gm: Matcher(gm, explain=True),
    "interpreted": ReferenceMatcher,
}


@pytest.fixture(params=list(EXECUTIONS))
def matching(request: pytest.FixtureRequest) -> Callable[[torch.nn.Module], Matcher]:
    """A matcher factory, once per execution of matching: a test that takes it runs against each, and every
    one must give the answer the test expects."""
    return EXECUTIONS[request.param]


def trace(fn: Callable[..., Any] | torch.nn.Module) -> torch.fx.GraphModule:
    """symbolic_trace a module or a plain function."""
    return torch.fx.symbolic_trace(fn)


def no_grad_graph() -> torch.fx.GraphModule:
    """``neg(neg(x))`` computed under ``torch.no_grad()`` and used after it, as Dynamo's graphs spell it."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    inner = graph.call_function(torch.neg, (graph.call_function(torch.neg, (x,)),))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.output(graph.call_function(torch.relu, (inner,)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def ops(gm: torch.fx.GraphModule) -> list[str]:
    """The graph's operations in order, as short names: 'relu', 'add', 'method:sum', 'module:Conv2d'."""
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            names.append(getattr(node.target, "__name__", str(node.target)))
        elif node.op == "call_method":
            names.append(f"method:{node.target}")
        elif node.op == "call_module":
            names.append(f"module:{type(gm.get_submodule(node.target)).__name__}")
        elif node.op == "get_attr":
            names.append(f"attr:{node.target}")
    return names


def assert_rewrites(
    fn: Callable[..., Any] | torch.nn.Module,
    rules: str,
    inputs: Sequence[Any],
    expected_ops: list[str],
    fired: dict[str, int] | None = None,
    **apply_kwargs: Any,
) -> fxrules.Report:
    """Apply ``rules`` (.fxr text) to the traced ``fn``; assert the resulting ops, lint, and unchanged outputs."""
    gm = trace(fn)
    expected = gm(*inputs)
    report = fxrules.apply(gm, fxrules.parse(rules), **apply_kwargs)
    gm.graph.lint()
    assert ops(gm) == expected_ops, gm.code
    torch.testing.assert_close(gm(*inputs), expected, equal_nan=True)
    if fired is not None:
        assert report.counts() == {k: v for k, v in fired.items() if v}
    return report


def slow_examples(default: int) -> int:
    """Example count of a @pytest.mark.slow property test: FXRULES_SLOW_EXAMPLES if set; a third in CI."""
    if "FXRULES_SLOW_EXAMPLES" in os.environ:
        return int(os.environ["FXRULES_SLOW_EXAMPLES"])
    return max(20, default // 3) if os.environ.get("CI") else default


EVAL_MODE_FOLD = "not bn.training and bn.track_running_stats and not c.training"


def fold_rule(name: str, helper: str, where: str = "") -> str:
    """A conv+bn folding rule calling ``helper`` (with guard ``where``, if any): the rule several tests need."""
    guard = f"""    where:
        {where}
""" if where else ""
    return f"""
rule {name}:
    given:
        c: nn.Conv2d
        bn: nn.BatchNorm2d
    pattern:
        return bn(c(x))
{guard}    replace:
        return @{helper}(c, bn)(x)
"""


def apply_outcome(gm: torch.fx.GraphModule, report: fxrules.Report) -> dict[str, Any]:
    """What an ``apply`` did, to compare two ways of running it: the code, the passes, and per rule what
    fired where and what was skipped why."""
    return {
        "code": gm.code, "passes": report.passes,
        "rules": [(r.name, r.fired, list(r.anchors), dict(r.skip_counts), [(s.reason, s.node) for s in r.skipped])
                  for r in report.rules],
    }
