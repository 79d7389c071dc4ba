"""Subgraphs of higher-order operators: finding them, how they are called, and the grad mode of each node.

``torch.export`` turns autocast and grad-mode regions into calls of
higher-order operators (``wrap_with_autocast``, ``wrap_with_set_grad_enabled``)
on subgraphs held as attributes.  The call stays; ``apply`` rewrites each
subgraph (innermost first) and the module itself, all or nothing together.
"""

from __future__ import annotations

import operator

import attrs
import torch
import torch.fx

from fxrules.graph.autocast import AutocastRegions, State, autocast_regions, region

#: ``GraphModule.meta`` key of a subgraph that may not receive new tensor attributes (in an exported
#: program only the root graph's tensors can become inputs); its value says why.
NO_NEW_TENSORS = "fxrules_no_new_tensors"

#: Higher-order operators that refuse a subgraph whose outputs alias its inputs or each other (torch.export
#: clones such outputs as it traces; ``run_decompositions`` and ``torch.compile`` reject them).  The
#: autocast and grad-mode regions accept them.
ALIAS_FREE = frozenset({"cond", "while_loop", "map_impl", "scan", "associative_scan"})


@attrs.frozen
class CallContext:
    """How the higher-order operators that call a subgraph run it, as far as rewriting it must respect."""

    alias_free: bool = False  # an operator of ALIAS_FREE calls it: its outputs may not alias (torch.cond)
    grad_enabled: bool | None = None  # the grad mode ``wrap_with_set_grad_enabled`` runs it in, if it does
    #: the autocast regions it runs in (its callers' and ``wrap_with_autocast``'s), one state per way it is called
    autocast: tuple[State, ...] = ()


#: The module ``apply`` was given: no operator of the graph calls it.
TOP_LEVEL = CallContext()


def higher_order_subgraphs(gm: torch.fx.GraphModule, prefix: str = "",
                           autocast: tuple[State, ...] = ()) -> list[tuple[str, torch.fx.GraphModule, CallContext]]:
    """The subgraphs higher-order operators call (autocast and grad-mode regions, ``torch.cond`` branches...),
    innermost first, by path, with how they are called (``gm`` itself run in the ``autocast`` states)."""
    found: dict[str, tuple[torch.fx.GraphModule, CallContext]] = {}
    regions = autocast_regions(gm.graph, autocast)
    for node in gm.graph.find_nodes(op="get_attr"):
        callers = [user for user in node.users if isinstance(user.target, torch._ops.HigherOrderOperator)]
        subgraph = operator.attrgetter(str(node.target))(gm) if callers else None
        path = f"{prefix}{node.target}"
        if isinstance(subgraph, torch.fx.GraphModule) and path not in found:
            context = _call_context(callers, regions)
            found.update((p, (m, c)) for p, m, c in higher_order_subgraphs(subgraph, f"{path}.", context.autocast))
            found[path] = (subgraph, context)
    return [(path, subgraph, context) for path, (subgraph, context) in found.items()]


def _call_context(callers: list[torch.fx.Node], regions: AutocastRegions | None) -> CallContext:
    """How ``callers`` run their subgraph, given the autocast ``regions`` of their graph."""
    grad_modes = [c.args[0] for c in callers if c.target is torch.ops.higher_order.wrap_with_set_grad_enabled
                  and c.args and isinstance(c.args[0], bool)]
    autocast = [state + ((region(c.args[:3]),) if c.target is torch.ops.higher_order.wrap_with_autocast else ())
                for c in callers for state in (regions.states(c) if regions is not None else ((),))]
    return CallContext(alias_free=any(c.target.name() in ALIAS_FREE for c in callers),  # type: ignore[union-attr]
                       grad_enabled=grad_modes[0] if grad_modes else None,
                       autocast=tuple(dict.fromkeys(autocast)) if any(autocast) else ())


#: The grad mode of a value that no computation of the graph makes (an input, an attribute): it may require grad.
OUTSIDE = "outside"


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
