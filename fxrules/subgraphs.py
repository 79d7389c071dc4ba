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


#: The grad mode of a value that no computation of the graph makes (an input, an attribute): it may require grad.
OUTSIDE = "outside"


def grad_mode_subgraphs(gm: torch.fx.GraphModule) -> dict[int, bool]:
    """The subgraphs, at any depth, that ``wrap_with_set_grad_enabled`` runs, by id: the grad mode it sets."""
    found: dict[int, bool] = {}
    for node in gm.graph.find_nodes(op="get_attr"):
        subgraph = operator.attrgetter(str(node.target))(gm)
        if not isinstance(subgraph, torch.fx.GraphModule):
            continue
        for user in node.users:
            if user.target is torch.ops.higher_order.wrap_with_set_grad_enabled and isinstance(user.args[0], bool):
                found[id(subgraph)] = user.args[0]
        found.update(grad_mode_subgraphs(subgraph))
    return found


def grad_modes(graph: torch.fx.Graph, fixed: bool | None) -> dict[torch.fx.Node, bool | str] | None:
    """The grad mode each node of ``graph`` is computed in (:data:`OUTSIDE` for inputs, attributes and the
    output), or
    None when the graph neither switches it nor runs in a ``fixed`` one: a rewrite cannot move a value
    across grad modes then.

    Dynamo records ``torch.no_grad()`` regions as ``torch._C._set_grad_enabled`` calls, the last of which
    restores the mode the graph was traced in (Dynamo guards on it): the nodes before the first switch
    run in that mode.  ``torch.inference_mode()`` regions are ``_enter_inference_mode`` and
    ``_exit_inference_mode`` calls: no grad inside.  ``torch.export`` puts such regions in subgraphs that
    run in a ``fixed`` mode.
    """
    set_grad = graph.find_nodes(op="call_function", target=torch._C._set_grad_enabled)
    switches = [*set_grad, *graph.find_nodes(op="call_function", target=_ENTER_INFERENCE)]
    if fixed is None and not switches:
        return None
    mode: bool | None = fixed
    if mode is None:
        last = set_grad[-1].args if set_grad else ()
        mode = last[0] if last and isinstance(last[0], bool) else True
    entered: list[bool] = []  # the modes inference-mode regions left
    modes: dict[torch.fx.Node, bool | str] = {}
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):  # what the graph returns leaves its modes
            modes[node] = OUTSIDE
            continue
        modes[node] = mode
        if node.op != "call_function" or not node.args:
            continue
        if node.target is torch._C._set_grad_enabled and isinstance(node.args[0], bool):
            mode = node.args[0]
        elif node.target is _ENTER_INFERENCE:
            entered.append(mode)
            mode = False if node.args[0] else mode
        elif node.target is _EXIT_INFERENCE and entered:
            mode = entered.pop()
    return modes


_ENTER_INFERENCE = torch.autograd.grad_mode._enter_inference_mode
_EXIT_INFERENCE = torch.autograd.grad_mode._exit_inference_mode
