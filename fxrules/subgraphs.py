"""Subgraphs of higher-order operators: finding them, and marking those that may not get new tensors.

``torch.export`` turns autocast and grad-mode regions into calls of
higher-order operators (``wrap_with_autocast``, ``wrap_with_set_grad_enabled``)
on subgraphs held as attributes.  The call stays; ``apply`` rewrites each
subgraph (innermost first) and the module itself, all or nothing together.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

#: ``GraphModule.meta`` key of a subgraph that may not receive new tensor attributes (in an exported
#: program only the root graph's tensors can become inputs); its value says why.
NO_NEW_TENSORS = "fxrules_no_new_tensors"

#: Higher-order operators that refuse a subgraph whose outputs alias its inputs or each other (torch.export
#: clones such outputs as it traces; ``run_decompositions`` and ``torch.compile`` reject them).  The
#: autocast and grad-mode regions accept them.
ALIAS_FREE = frozenset({"cond", "while_loop", "map_impl", "scan", "associative_scan"})


def higher_order_subgraphs(gm: torch.fx.GraphModule, prefix: str = "") -> list[tuple[str, torch.fx.GraphModule]]:
    """The subgraphs higher-order operators call (autocast and grad-mode regions...), innermost first, by path."""
    found: dict[str, torch.fx.GraphModule] = {}
    for node in gm.graph.find_nodes(op="get_attr"):
        if any(isinstance(user.target, torch._ops.HigherOrderOperator) for user in node.users):
            subgraph = operator.attrgetter(str(node.target))(gm)
            path = f"{prefix}{node.target}"
            if isinstance(subgraph, torch.fx.GraphModule) and path not in found:
                found.update(higher_order_subgraphs(subgraph, f"{path}."))
                found[path] = subgraph
    return list(found.items())


def alias_free_subgraphs(gm: torch.fx.GraphModule) -> list[torch.fx.GraphModule]:
    """The subgraphs, at any depth, that an operator of :data:`ALIAS_FREE` calls (``torch.cond`` branches)."""
    found: list[torch.fx.GraphModule] = []
    for node in gm.graph.find_nodes(op="get_attr"):
        operators = {user.target.name() for user in node.users
                     if isinstance(user.target, torch._ops.HigherOrderOperator)}
        subgraph = operator.attrgetter(str(node.target))(gm)
        if operators and isinstance(subgraph, torch.fx.GraphModule):
            if operators & ALIAS_FREE:
                found.append(subgraph)
            found += alias_free_subgraphs(subgraph)
    return found
