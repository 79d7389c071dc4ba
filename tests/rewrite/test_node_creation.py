"""New nodes are made as ``Graph.create_node`` makes them, whatever the graph: the module's create-node hooks
hear each, a graph whose ``create_node`` is replaced (by a subclass or on the graph) has it called for each,
and a node whose arguments hold others in a list leaves them as they were when ``apply`` fails later."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx

import fxrules
from fxrules.rewrite import lint
from tests.conftest import trace

RULES = fxrules.parse("""
rule relu_twice:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule contiguous_twice:
    x.contiguous().contiguous() => x.contiguous()
""")

NEW_NODES = ["relu_2", "contiguous_2"]


def _model(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.relu(x)) + x.contiguous().contiguous()


def test_the_modules_create_node_hooks_hear_each_new_node() -> None:
    """A module with create-node hooks (as a GraphTransformObserver registers them) has each node the
    rewrite makes reported to them, named as it ends up, and is rewritten as a module without hooks is."""
    heard: list[torch.fx.Node] = []
    hooked, plain = trace(_model), trace(_model)
    hooked._register_create_node_hook(heard.append)
    assert fxrules.apply(hooked, RULES).counts() == fxrules.apply(plain, RULES).counts()
    assert [node.name for node in heard] == NEW_NODES
    assert hooked.code == plain.code


class _CountingGraph(torch.fx.Graph):
    """A graph whose ``create_node`` counts the nodes it makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.made: list[str] = []

    def create_node(self, *args: Any, **kwargs: Any) -> torch.fx.Node:
        node = super().create_node(*args, **kwargs)
        self.made.append(node.name)
        return node


def _graph_subclass(gm: torch.fx.GraphModule) -> list[str]:
    graph = _CountingGraph(owning_module=gm)
    graph.output(graph.graph_copy(gm.graph, {}))
    graph.made.clear()
    gm.graph = graph
    return graph.made


def _patched_graph(gm: torch.fx.GraphModule) -> list[str]:
    made: list[str] = []
    create_node = gm.graph.create_node

    def counting(*args: Any, **kwargs: Any) -> torch.fx.Node:
        node = create_node(*args, **kwargs)
        made.append(node.name)
        return node

    gm.graph.create_node = counting  # type: ignore[method-assign]
    return made


@pytest.mark.parametrize("replace", [_graph_subclass, _patched_graph], ids=["subclass", "patched on the graph"])
def test_a_graph_whose_create_node_is_replaced_has_it_called_for_each_new_node(replace: Any) -> None:
    """Each node the rewrite makes comes from the graph's own ``create_node``, where a subclass or a patch
    replaced FX's; the module computes what it did."""
    gm = trace(_model)
    made = replace(gm)
    assert fxrules.apply(gm, RULES).counts() == {"relu_twice": 1, "contiguous_twice": 1}
    assert made == NEW_NODES
    x = torch.randn(3, 4)
    torch.testing.assert_close(gm(x), _model(x))


LIST_RULES = fxrules.parse("""
rule add_self:
    torch.add(x, x) => torch.sum(torch.stack([x, x]), 0)

rule mul_one:
    x * 1 => x
""")


def _list_model(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.neg(x)
    doubled = torch.add(a, a)
    return doubled, torch.relu(a * 1)


def test_a_failure_after_a_rewrite_that_lists_a_node_restores_its_users_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A node a new node uses inside a list (``torch.stack([a, a])``), whose users a later rewrite changes
    again (``a * 1 => a``), has its users back, in order, when the commit is interrupted, as does every node."""
    gm = trace(_list_model)
    assert fxrules.apply(trace(_list_model), LIST_RULES).counts() == {"add_self": 1, "mul_one": 1}
    before = [(node.name, node.args, [user.name for user in node.users]) for node in gm.graph.nodes]
    code = gm.code

    def failing_lint(graph: torch.fx.Graph) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(lint, "lint", failing_lint)
    with pytest.raises(KeyboardInterrupt):
        fxrules.apply(gm, LIST_RULES)
    assert [(node.name, node.args, [user.name for user in node.users]) for node in gm.graph.nodes] == before
    assert gm.code == code


def _integer_and_boolean(i: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.relu(torch.relu(i)) * 3, b.contiguous().contiguous().logical_not()


def test_nodes_made_for_integer_and_boolean_tensors_compute_what_the_match_did() -> None:
    """The new nodes of an int64 and a bool graph are made with their arguments as the rules bind them, and the
    rewritten module gives exactly the original's results (integers compare exactly)."""
    gm = trace(_integer_and_boolean)
    i, b = torch.tensor([[-3, 0, 7], [2, -1, 5]]), torch.tensor([[True, False, True], [False, False, True]])
    expected = gm(i, b)
    assert fxrules.apply(gm, RULES).counts() == {"relu_twice": 1, "contiguous_twice": 1}
    assert [node.name for node in gm.graph.nodes if node.name in NEW_NODES] == NEW_NODES
    got = gm(i, b)
    assert [t.dtype for t in got] == [torch.int64, torch.bool]
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))
