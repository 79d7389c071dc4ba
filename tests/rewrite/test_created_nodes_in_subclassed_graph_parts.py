"""A node a rewrite makes goes through the graph's own namespace and ``find_nodes`` table: where a pass gave
the graph subclasses of FX's, their methods name and file every new node, as ``Graph.create_node`` has them."""

from __future__ import annotations

import torch
import torch.fx
from torch.fx.graph import _FindNodesLookupTable, _Namespace

import fxrules

RULES = fxrules.parse("rule relu_twice:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n", "created.fxr")


def program(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.relu(x)) + 1


class _RecordingTable(_FindNodesLookupTable):
    def __init__(self, heard: list[str]) -> None:
        super().__init__()
        self.heard = heard

    def insert(self, node: torch.fx.Node) -> None:
        self.heard.append(node.name)
        super().insert(node)


class _RecordingNamespace(_Namespace):
    def __init__(self, heard: list[str]) -> None:
        super().__init__()
        self.heard = heard

    def associate_name_with_obj(self, name: str, obj: object) -> None:
        self.heard.append(name)
        super().associate_name_with_obj(name, obj)


def test_a_find_nodes_table_of_a_subclass_files_every_node_a_rewrite_makes() -> None:
    gm = torch.fx.symbolic_trace(program)
    heard: list[str] = []
    table = _RecordingTable(heard)
    for node in gm.graph.nodes:
        table.insert(node)
    heard.clear()
    gm.graph._find_nodes_lookup_table = table
    fxrules.apply(gm, RULES)
    assert heard[0] == "relu_2"  # filed as it is made (the commit's code generation files every node again)
    assert "relu_2" in gm.code
    assert [node.name for node in gm.graph.find_nodes(op="call_function", target=torch.relu)] == ["relu_2"]


def test_a_namespace_of_a_subclass_names_every_node_a_rewrite_makes() -> None:
    gm = torch.fx.symbolic_trace(program)
    heard: list[str] = []
    namespace = _RecordingNamespace(heard)
    old = gm.graph._graph_namespace
    for node in gm.graph.nodes:
        namespace.associate_name_with_obj(namespace.create_name(node.name, None), node)
    assert old._used_names <= namespace._used_names
    heard.clear()
    gm.graph._graph_namespace = namespace
    fxrules.apply(gm, RULES)
    assert heard == ["relu_2"]
    torch.testing.assert_close(gm(torch.tensor([-1.0, 2.0])), torch.tensor([1.0, 3.0]))
