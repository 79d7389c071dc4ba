"""The commit's lint: it accepts the graphs ``Graph.lint`` accepts and raises, for every other, the error
``Graph.lint`` raises, with its message."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.fx

from fxrules.rewrite.lint import lint


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.ReLU()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(self.inner(x + self.w)).relu()


def _traced() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(Model())


def _node(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def _unknown_opcode(gm: torch.fx.GraphModule) -> None:
    _node(gm, "neg").op = "call_everything"


def _foreign_argument(gm: torch.fx.GraphModule) -> None:
    other = torch.fx.Graph()
    _node(gm, "neg").args = (other.placeholder("y"),)


def _missing_from_the_table(gm: torch.fx.GraphModule) -> None:
    gm.graph._find_nodes_lookup_table.remove(_node(gm, "neg"))


def _used_before_defined(gm: torch.fx.GraphModule) -> None:
    _node(gm, "inner").prepend(_node(gm, "neg"))


def _duplicate_name(gm: torch.fx.GraphModule) -> None:
    _node(gm, "neg").name = "inner"


def _function_not_callable(gm: torch.fx.GraphModule) -> None:
    _node(gm, "neg").target = "neg"


def _method_not_a_string(gm: torch.fx.GraphModule) -> None:
    _node(gm, "relu").target = torch.relu


def _missing_attribute(gm: torch.fx.GraphModule) -> None:
    _node(gm, "w").target = "nothing.here"


def _module_not_a_module(gm: torch.fx.GraphModule) -> None:
    _node(gm, "inner").target = "w"


BREAKAGES: dict[str, Callable[[torch.fx.GraphModule], None]] = {
    "unknown opcode": _unknown_opcode,
    "argument of another graph": _foreign_argument,
    "missing from the find_nodes table": _missing_from_the_table,
    "used before it is defined": _used_before_defined,
    "duplicate name": _duplicate_name,
    "call_function target not callable": _function_not_callable,
    "call_method target not a string": _method_not_a_string,
    "get_attr of a missing attribute": _missing_attribute,
    "call_module of a parameter": _module_not_a_module,
}


def test_a_valid_graph_passes() -> None:
    gm = _traced()
    lint(gm.graph)
    gm.graph.lint()


@pytest.mark.parametrize("breakage", BREAKAGES.values(), ids=list(BREAKAGES))
def test_a_broken_graph_raises_what_graph_lint_raises(breakage: Callable[[torch.fx.GraphModule], None]) -> None:
    gm = _traced()
    breakage(gm)
    with pytest.raises(Exception) as expected:  # whatever Graph.lint raises
        gm.graph.lint()
    with pytest.raises(type(expected.value)) as raised:
        lint(gm.graph)
    assert str(raised.value) == str(expected.value)


def test_targets_are_not_checked_without_an_owning_module() -> None:
    """As ``Graph.lint``: a graph of its own has no module to resolve attribute paths in."""
    gm = _traced()
    graph = torch.fx.Graph()
    value_map: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.graph_copy(gm.graph, value_map)
    next(n for n in graph.nodes if n.op == "get_attr").target = "nothing.here"
    graph.lint()
    lint(graph)
