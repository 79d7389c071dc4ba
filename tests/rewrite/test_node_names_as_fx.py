"""The names new nodes get are the names ``Graph.create_node`` gives them, for targets whose names FX changes: a
builtin's (``abs``, ``sum``, ``float``), one ending in ``_<digits>`` (submodules ``layer_1``, ``block_7``,
``features.0``), one already taken by a placeholder or an attribute read; and so are the names the graph gives
nodes made later.

The reference is the same module with a create-node hook that does nothing: every node is then made by FX's own
``create_node``."""

from __future__ import annotations

import torch
import torch.fx

import fxrules

RULES = fxrules.parse("""
rule abs_of_neg:
    torch.abs(torch.neg(x)) => torch.abs(x)

rule sum_of_neg:
    torch.sum(torch.neg(x)) => torch.neg(torch.sum(x))

rule float_twice:
    x.float().float() => x.float()

rule relu_module_twice:
    given:
        m: nn.ReLU
    pattern:
        return m(m(x))
    replace:
        return m(x)

rule neg_of_relu_module:
    given:
        m: nn.ReLU
    pattern:
        return torch.neg(m(x))
    replace:
        return m(torch.neg(x))
""", "names.fxr")

#: placeholders and an attribute read named as FX would name the new nodes
TAKEN = ("abs_1", "sum_1", "float_1", "layer_1", "features_0", "neg")
#: submodules whose targets FX names with a number (``features.0`` as ``features_0``; ``block_7`` free, so
#: taken as it is, numbering later ``block`` nodes from 7) or as a builtin
MODULES = ("layer_1", "features.0", "block_7", "abs")


def _module() -> torch.fx.GraphModule:
    root = torch.nn.Module()
    root.layer_1, root.block_7, root.abs = torch.nn.ReLU(), torch.nn.ReLU(), torch.nn.ReLU()
    root.features = torch.nn.Sequential(torch.nn.ReLU())
    root.register_buffer("neg", torch.ones(3))
    graph = torch.fx.Graph()
    taken = [graph.placeholder(name) for name in TAKEN[:-1]]
    values = [*taken, graph.get_attr("neg")]
    outputs = []
    for value in values:
        outputs.append(graph.call_function(torch.abs, (graph.call_function(torch.neg, (value,)),)))
        outputs.append(graph.call_function(torch.sum, (graph.call_function(torch.neg, (value,)),)))
        # neither read from an input nor returned: x.float() may return x itself (a rewrite refused as an alias)
        twice = graph.call_method("float", (graph.call_method("float", (graph.call_function(torch.exp, (value,)),)),))
        outputs.append(graph.call_function(torch.exp, (twice,)))
        for target in MODULES:
            outputs.append(_call(graph, target, _call(graph, target, value)))
            outputs.append(graph.call_function(torch.neg, (_call(graph, target, value),)))
    graph.output(tuple(outputs))
    return torch.fx.GraphModule(root, graph)


def _call(graph: torch.fx.Graph, target: str, value: torch.fx.Node) -> torch.fx.Node:
    """A call of the submodule ``target``; one of ``block_7`` named otherwise, so that the first node a rewrite makes
    of it finds ``block_7`` free."""
    return graph.create_node("call_module", target, (value,), name="blk" if target == "block_7" else None)


def _names_made_next(gm: torch.fx.GraphModule) -> list[str]:
    """The names the graph gives the next nodes it makes of the rules' targets (which are then erased)."""
    graph, first = gm.graph, next(iter(gm.graph.nodes))
    made = [graph.call_function(target, (first,)) for target in (torch.abs, torch.sum, torch.neg)]
    made += [graph.call_method("float", (first,))] + [graph.call_module(target, (first,)) for target in MODULES]
    for node in reversed(made):
        graph.erase_node(node)
    return [node.name for node in made]


def test_new_nodes_are_named_as_create_node_names_them() -> None:
    """Every rule fires, and the rewritten graph's nodes, its code and the names of nodes made afterwards are
    those of the same module whose nodes FX's own ``create_node`` made."""
    plain, reference = _module(), _module()
    reference._register_create_node_hook(lambda node: None)
    report = fxrules.apply(plain, RULES)
    assert report.counts() == fxrules.apply(reference, RULES).counts()
    assert all(report.counts().get(rule.name) for rule in RULES.rules)
    assert [node.name for node in plain.graph.nodes] == [node.name for node in reference.graph.nodes]
    assert plain.code == reference.code
    assert _names_made_next(plain) == _names_made_next(reference)
