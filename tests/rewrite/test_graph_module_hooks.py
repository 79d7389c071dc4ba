"""What a rewrite shows the graph module it changes, as torch.fx's own calls would: the module's replace-node
hooks hear every use redirected, and new nodes get the names ``Graph.create_node`` would give them."""

from __future__ import annotations

import torch
import torch.fx

import fxrules
from tests.conftest import trace

RULES = fxrules.parse("""
rule mul_one:
    x * 1 => x

rule relu_twice:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule contiguous_twice:
    x.contiguous().contiguous() => x.contiguous()
""")


def _model(x: torch.Tensor) -> torch.Tensor:
    m = torch.neg(x) * 1
    r = torch.relu(torch.relu(m))
    c = m.contiguous().contiguous()
    return m + r + c + torch.relu(m)


def test_the_modules_replace_hooks_hear_each_redirected_use_and_the_rewrite_is_unchanged() -> None:
    """A module with replace-node hooks (as Inductor registers them) has each redirected use reported to
    them, by old node, new node's name and user, in the order the rewrite makes them; the result is what
    the same apply makes of a module without hooks."""
    heard: list[tuple[str, str, str]] = []
    hooked, plain = trace(_model), trace(_model)
    hooked._register_replace_node_hook(lambda old, new, user: heard.append((old.name, new, user.name)))
    report = fxrules.apply(hooked, RULES)
    assert report.counts() == fxrules.apply(plain, RULES).counts() == {
        "mul_one": 1, "relu_twice": 1, "contiguous_twice": 1}
    assert hooked.code == plain.code
    assert heard == [
        ("mul", "neg", "relu"), ("mul", "neg", "contiguous"), ("mul", "neg", "add"), ("mul", "neg", "relu_2"),
        ("relu_1", "relu_3", "add"), ("contiguous_1", "contiguous_2", "add_1"),
    ]


def test_new_nodes_are_named_as_graph_create_node_names_them() -> None:
    """Each new node's name is its target's, numbered past the names the graph has (a method's name as
    written), as ``Graph.create_node`` gives them."""
    gm = trace(_model)
    fxrules.apply(gm, RULES)
    assert [n.name for n in gm.graph.nodes if "fxrules" in n.meta] == ["relu_3", "contiguous_2"]
    x = torch.randn(3, 4)
    torch.testing.assert_close(gm(x), _model(x))
