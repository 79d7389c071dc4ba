"""Subgraphs of higher-order operators, and one all-or-nothing ``apply`` over a module and its subgraphs.

``torch.export`` turns autocast and grad-mode regions into calls of
higher-order operators (``wrap_with_autocast``, ``wrap_with_set_grad_enabled``)
on subgraphs held as attributes.  The call stays; the rules are applied to
each subgraph (innermost first), then to the module itself.
"""

from __future__ import annotations

import copy
import operator
import time
from collections.abc import Callable

import torch
import torch.fx

from fxrules.report import Report, combine

#: ``GraphModule.meta`` key of a subgraph that may not receive new tensor attributes (in an exported
#: program only the root graph's tensors can become inputs); its value says why.
NO_NEW_TENSORS = "fxrules_no_new_tensors"


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


def apply_nested(gm: torch.fx.GraphModule, subgraphs: list[tuple[str, torch.fx.GraphModule]],
                 run: Callable[[torch.fx.GraphModule], Report]) -> Report:
    """Apply to each subgraph, then to ``gm``: all or nothing over the whole module.

    Each ``apply`` undoes itself when it fails; subgraphs already rewritten are
    restored from a copy of their graph taken before (a shallow copy: node
    metadata is shared), and the attributes helpers added to them are removed.
    """
    started = time.perf_counter()
    saved = [(sub, copy.deepcopy(sub.graph), set(sub._modules) | set(sub._buffers) | set(sub._parameters))
             for _, sub in subgraphs]
    reports: list[tuple[str, Report]] = []
    try:
        for path, sub in subgraphs:
            reports.append((path, run(sub)))
        root = run(gm)
    except BaseException:
        for sub, graph, attributes in saved:
            for name in (set(sub._modules) | set(sub._buffers) | set(sub._parameters)) - attributes:
                delattr(sub, name)
            sub.graph = graph  # regenerates its code
        raise
    return combine(root, reports, time.perf_counter() - started)
