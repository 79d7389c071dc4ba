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


def _output_named_as_the_input(gm: torch.fx.GraphModule) -> None:
    """The last node takes the first node's name: the two are as far apart as a graph allows."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    output.name = next(iter(gm.graph.nodes)).name


def _listed_node_of_another_graph(gm: torch.fx.GraphModule) -> None:
    """In the node list and the table, but naming another graph as its own."""
    object.__setattr__(_node(gm, "neg"), "graph", torch.fx.Graph())


def _function_not_callable(gm: torch.fx.GraphModule) -> None:
    _node(gm, "neg").target = "neg"


def _method_not_a_string(gm: torch.fx.GraphModule) -> None:
    _node(gm, "relu").target = torch.relu


def _missing_attribute(gm: torch.fx.GraphModule) -> None:
    _node(gm, "w").target = "nothing.here"


def _module_not_a_module(gm: torch.fx.GraphModule) -> None:
    _node(gm, "inner").target = "w"


def _filed_under_another_function(gm: torch.fx.GraphModule) -> None:
    object.__setattr__(_node(gm, "neg"), "target", torch.sigmoid)  # not moved to the bucket of its new target


def _filed_under_another_opcode(gm: torch.fx.GraphModule) -> None:
    object.__setattr__(_node(gm, "w"), "op", "call_method")


def _a_stale_entry_in_its_place(gm: torch.fx.GraphModule) -> None:
    """The table holds as many nodes as the graph, but one of them in place of one of the graph's."""
    neg = _node(gm, "neg")
    gm.graph._find_nodes_lookup_table.remove(neg)
    other = torch.fx.Graph()
    gm.graph._find_nodes_lookup_table.insert(other.call_function(torch.neg, (other.placeholder("y"),)))


class _LooksLikeAString:
    """Equal to the string ``"relu"``, and hashed as it is, but not a string."""

    def __eq__(self, other: object) -> bool:
        return other == "relu"

    def __hash__(self) -> int:
        return hash("relu")


def _method_equal_to_a_string(gm: torch.fx.GraphModule) -> None:
    _node(gm, "relu").target = _LooksLikeAString()


BREAKAGES: dict[str, Callable[[torch.fx.GraphModule], None]] = {
    "unknown opcode": _unknown_opcode,
    "argument of another graph": _foreign_argument,
    "missing from the find_nodes table": _missing_from_the_table,
    "used before it is defined": _used_before_defined,
    "duplicate name": _duplicate_name,
    "the output named as the input": _output_named_as_the_input,
    "a listed node of another graph": _listed_node_of_another_graph,
    "call_function target not callable": _function_not_callable,
    "call_method target not a string": _method_not_a_string,
    "get_attr of a missing attribute": _missing_attribute,
    "call_module of a parameter": _module_not_a_module,
    "filed under another function's key": _filed_under_another_function,
    "filed under another opcode's key": _filed_under_another_opcode,
    "missing from the table, a stale entry in its place": _a_stale_entry_in_its_place,
    "call_method target equal to a string": _method_equal_to_a_string,
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


def _stale_entry(gm: torch.fx.GraphModule) -> None:
    """A node of another graph in the table besides the graph's own nodes: ``Graph.lint`` does not mind."""
    other = torch.fx.Graph()
    gm.graph._find_nodes_lookup_table.insert(other.call_function(torch.neg, (other.placeholder("y"),)))


def _equal_targets_not_the_same_object(gm: torch.fx.GraphModule) -> None:
    """Two calls of equal bound methods, each its own object, filed in one bucket."""
    module = torch.nn.ReLU()
    neg = _node(gm, "neg")
    with gm.graph.inserting_after(neg):
        first = gm.graph.call_function(module.forward, (neg,))
    with gm.graph.inserting_after(first):
        second = gm.graph.call_function(module.forward, (first,))
    neg.replace_all_uses_with(second, delete_user_cb=lambda user: user is not first)


UNUSUAL_BUT_VALID: dict[str, Callable[[torch.fx.GraphModule], None]] = {
    "a stale entry in the table": _stale_entry,
    "equal call_function targets, not the same object": _equal_targets_not_the_same_object,
}


@pytest.mark.parametrize("change", UNUSUAL_BUT_VALID.values(), ids=list(UNUSUAL_BUT_VALID))
def test_a_valid_graph_outside_the_common_shape_passes(change: Callable[[torch.fx.GraphModule], None]) -> None:
    """Graphs ``Graph.lint`` accepts that the bulk checks cannot vouch for are accepted too (by asking it)."""
    gm = _traced()
    change(gm)
    gm.graph.lint()
    lint(gm.graph)


def test_targets_are_not_checked_without_an_owning_module() -> None:
    """As ``Graph.lint``: a graph of its own has no module to resolve attribute paths in."""
    gm = _traced()
    graph = torch.fx.Graph()
    value_map: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.graph_copy(gm.graph, value_map)
    next(n for n in graph.nodes if n.op == "get_attr").target = "nothing.here"
    graph.lint()
    lint(graph)
