"""The incremental scheduler rewrites what visiting every anchor node in every pass rewrites, on generated
chains and DAGs of a few operations and generated rule sets two or three operations deep, whose rewrites
give nodes ahead of the pass new inputs (nodes or literals) that make deeper rules match there; with
guards that count users, ``accept=`` filters and ``explain=True`` reports."""

from __future__ import annotations

import copy
import operator
from typing import Any

import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxrules
from fxrules.engine.scheduler import Incremental, SchedulerFactory, VisitEverything
from tests.conftest import apply_outcome

#: Rules of depth one to three; several give a node a new operand (a node or a literal) another one needs.
POOL = {
    "mul_one": "rule mul_one:\n    x * 1 => x\n",
    "add_zero": "rule add_zero:\n    x + 0 => x\n",
    "mul_zero_add": "rule mul_zero_add:\n    (x * 0) + y => y * 1\n",
    "neg_neg": "rule neg_neg:\n    torch.neg(torch.neg(x)) => x\n",
    "triple": "rule triple:\n    torch.relu(torch.tanh(torch.neg(y))) => torch.exp(y)\n",
    "abs_neg": "rule abs_neg:\n    torch.abs(torch.neg(x)) => torch.abs(x)\n",
    "relu_relu": "rule relu_relu:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n",
    "tanh_add_one": "rule tanh_add_one:\n    torch.tanh(x + 1) => torch.tanh(x) + 0\n",
    "lonely_neg": (
        "rule lonely_neg:\n    pattern:\n        n = torch.neg(x)\n        return torch.tanh(n)\n"
        "    where:\n        num_users(n) == 1 and num_users(x) == 1\n    replace:\n"
        "        return torch.neg(torch.tanh(x))\n"),
    "exp_of_neg3": "rule exp_of_neg3:\n    torch.exp(torch.abs(torch.neg(x)) * 1) => torch.exp(torch.abs(x))\n",
}

_UNARY = [torch.neg, torch.relu, torch.tanh, torch.abs, torch.exp]
_LITERAL = [(operator.mul, 1), (operator.mul, 0), (operator.add, 0), (operator.add, 1)]


@st.composite
def _graphs(draw: st.DrawFn) -> torch.fx.GraphModule:
    """A DAG of unary calls, calls with a literal operand and sums of two values; unused values returned."""
    graph = torch.fx.Graph()
    values: list[torch.fx.Node] = [graph.placeholder("x")]
    for _ in range(draw(st.integers(2, 12))):
        kind = draw(st.integers(0, 5))
        source = values[-1] if draw(st.booleans()) else draw(st.sampled_from(values))
        if kind <= 2:
            values.append(graph.call_function(draw(st.sampled_from(_UNARY)), (source,)))
        elif kind <= 4:
            function, literal = draw(st.sampled_from(_LITERAL))
            values.append(graph.call_function(function, (source, literal)))
        else:
            values.append(graph.call_function(operator.add, (source, draw(st.sampled_from(values)))))
    sinks = [v for v in values[1:] if not v.users] or [values[-1]]
    graph.output(tuple(sinks) if len(sinks) > 1 else sinks[0])
    return torch.fx.GraphModule(torch.nn.Module(), graph)


_RULESETS = st.lists(st.sampled_from(sorted(POOL)), min_size=1, max_size=5, unique=True)


def _outcome(gm: torch.fx.GraphModule, names: list[str], scheduler: SchedulerFactory,
             **options: Any) -> dict[str, Any]:
    copied = copy.deepcopy(gm)
    report = fxrules.apply(copied, fxrules.parse("\n".join(POOL[name] for name in names)),
                           scheduler=scheduler, **options)
    return {**apply_outcome(copied, report), "counts": report.counts()}


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(_graphs(), _RULESETS)
def test_incremental_rewrites_what_visiting_everything_rewrites(gm: torch.fx.GraphModule, names: list[str]) -> None:
    """Same code, passes, rewrites per rule and anchor, and skips."""
    assert _outcome(gm, names, Incremental) == _outcome(gm, names, VisitEverything)


@settings(_SETTINGS, max_examples=100)
@given(_graphs(), _RULESETS)
def test_incremental_explains_what_visiting_everything_explains(gm: torch.fx.GraphModule, names: list[str]) -> None:
    """With ``explain=True``: the same outcome."""
    assert _outcome(gm, names, Incremental, explain=True) == _outcome(gm, names, VisitEverything, explain=True)
