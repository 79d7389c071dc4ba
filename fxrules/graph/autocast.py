"""Autocast regions: the autocast state each node of a graph runs in, and the dtypes a computation has in one.

Dynamo records ``torch.autocast(...)`` as an ``_enter_autocast`` call, whose result the matching
``_exit_autocast`` call takes; ``torch.export`` puts the region in a subgraph that the higher-order
operator ``wrap_with_autocast`` runs (:mod:`fxrules.graph.subgraphs` gives the subgraph the state of
its caller).  Autocast casts the inputs of the operations on its lists (``matmul``, ``addmm``, ``conv2d``
to bfloat16 on CPU...), so a rewrite there can change a dtype that the same rewrite keeps elsewhere.
"""

from __future__ import annotations

import bisect
import contextlib
import inspect
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import torch
import torch.fx

from fxrules.graph.metadata import fake_value, run_on_fake

Node = torch.fx.Node


@attrs.frozen
class Autocast:
    """One ``torch.autocast`` region, as its arguments say (``dtype`` None: the device's default)."""

    device_type: Any
    dtype: Any
    enabled: Any

    def __str__(self) -> str:
        dtype = "" if self.dtype is None else f", {self.dtype}"
        return f"autocast({self.device_type}{dtype}{'' if self.enabled is True else ', disabled'})"


#: The autocast regions a node runs in, outermost first; () outside any.
State = tuple[Autocast, ...]

_ENTER = torch.amp.autocast_mode._enter_autocast
_EXIT = torch.amp.autocast_mode._exit_autocast
_PARAMETERS = inspect.signature(torch.amp.autocast)


def region(args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> Autocast:
    """The region of ``torch.autocast(*args, **kwargs)``, its defaults filled in as torch fills them (arguments
    torch would refuse make a region that cannot be entered: every rewrite in it is refused)."""
    try:
        bound = _PARAMETERS.bind(*args, **(kwargs or {}))
    except TypeError:
        return Autocast(tuple(args), tuple((kwargs or {}).items()), True)
    bound.apply_defaults()
    return Autocast(bound.arguments["device_type"], bound.arguments["dtype"], bound.arguments["enabled"])


@attrs.frozen
class AutocastRegions:
    """The autocast states of a graph's nodes: one per state the graph is run in (several when the callers of a
    subgraph differ).  A node's state follows from the ``_enter_autocast`` and ``_exit_autocast`` calls before
    it, found once: a rewrite adds no such call, and FX keeps every node's sort key when it inserts others."""

    outer: tuple[State, ...]  # the states the graph itself is run in
    keys: list[Any]  # the sort keys of the enter and exit calls, in graph order
    inner: list[State]  # the regions open after each of them

    def states(self, node: Node) -> tuple[State, ...]:
        """The states ``node`` is computed in (an enter or exit call is in those before it)."""
        after = bisect.bisect_left(self.keys, node._sort_key)
        local = self.inner[after - 1] if after else ()
        return tuple(outer + local for outer in self.outer)


#: The device types torch.autocast knows by name (the privateuse1 one, which an extension may rename, is asked).
_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla", "ipu")


def ambient() -> State:
    """The autocast regions open now (``torch.autocast`` around ``apply``).  A ``torch.compile`` backend runs in
    those of the call it compiles for, and Dynamo guards on them: the graph runs in them too."""
    devices = (*_DEVICES, torch._C._get_privateuse1_backend_name())
    return tuple(Autocast(device, torch.get_autocast_dtype(device), True) for device in devices
                 if torch.is_autocast_enabled(device))


def autocast_regions(graph: torch.fx.Graph, outer: tuple[State, ...] = ()) -> AutocastRegions | None:
    """The autocast states of ``graph``'s nodes when it is run in the ``outer`` states (none given: the
    :func:`ambient` one), or None when no node of it runs under autocast."""
    outer = tuple(dict.fromkeys(outer or (ambient(),)))
    switches = sorted([*graph.find_nodes(op="call_function", target=_ENTER),
                       *graph.find_nodes(op="call_function", target=_EXIT)], key=lambda n: n._sort_key)
    if not switches and outer == ((),):
        return None
    open_regions: dict[Node, Autocast] = {}
    inner: list[State] = []
    for node in switches:
        if node.target is _ENTER:
            open_regions[node] = region(node.args, node.kwargs)
        elif node.args:
            open_regions.pop(node.args[0], None)
        inner.append(tuple(open_regions.values()))
    return AutocastRegions(outer, [n._sort_key for n in switches], inner)


def casts(state: State) -> bool:
    """Whether autocast casts anything in ``state``: the innermost region of some device is enabled."""
    last = {region.device_type: region.enabled for region in state}
    return any(enabled is not False for enabled in last.values())


def describe(states: Iterable[State]) -> str:
    """``states`` as a skip's detail names them."""
    return " or ".join(f"in {' in '.join(map(str, reversed(state)))}" if state else "outside autocast"
                       for state in states)


@contextlib.contextmanager
def entered(state: State) -> Iterator[None]:
    """Run the body in ``state``'s regions, outermost first."""
    with contextlib.ExitStack() as stack:
        for entry in state:
            stack.enter_context(torch.autocast(entry.device_type, dtype=entry.dtype, enabled=entry.enabled))
        yield


def running(regions: AutocastRegions | None, node: Node) -> contextlib.AbstractContextManager[None]:
    """Run the body in the autocast state ``node`` runs in (the first, where its graph runs in several)."""
    return entered(regions.states(node)[0]) if regions is not None else contextlib.nullcontext()


def changed_dtype(matched: Iterable[Node], outputs: Sequence[Node], values: Sequence[Any],
                  created: Sequence[Node], states: tuple[State, ...]) -> str | None:
    """Why replacing ``outputs`` by ``values`` (``created`` made for them) changes a dtype in ``states``: the
    matched nodes and the new ones are run on fake tensors (from the metadata of what they read) in each
    state.  Each output must keep the dtypes of its tensors, and a new node that autocast casts (it computes
    another dtype than it would on the same inputs without autocast) must have a matched node of the same
    operation computing that dtype: else the replacement would compute in a precision the match did not.
    None when all of that holds."""
    in_order = sorted(matched, key=lambda n: n._sort_key)
    for state in states:
        try:
            with warnings.catch_warnings(), entered(state):
                warnings.simplefilter("ignore")  # torch's warning that it cannot run a region: said below instead
                before = run_on_fake(in_order)
                after = run_on_fake(created, before)
                _check_runnable(state, before, after)
            for output, value in zip(outputs, values, strict=True):
                was = _dtypes(before[output])
                now = _dtypes(after[value] if isinstance(value, Node) and value in after else fake_value(value))
                if was != now:
                    return f"'{output.name}' is {was} {describe([state])}, and its replacement would be {now}"
            cast = _cast_anew(in_order, created, before, after, state)
        except Exception as error:  # any failure leaves the dtypes unknown: refuse
            return f"the dtypes {describe([state])} are unknown: {error}"
        if cast is not None:
            return cast
    return None


def _check_runnable(state: State, *results: dict[Node, Any]) -> None:
    """Raise when a region of ``state`` that casts a device the results are on is one torch disables on this
    machine (``torch.autocast("cuda")`` without CUDA): the run shows the dtypes the region would not give."""
    innermost = {entry.device_type: entry for entry in state}
    disabled = {device: entry for device, entry in innermost.items()
                if entry.enabled is True and not torch.is_autocast_enabled(device)}
    if not disabled:
        return
    for values in results:
        for leaf in torch.utils._pytree.tree_leaves(list(values.values())):
            if isinstance(leaf, torch.Tensor) and leaf.device.type in disabled:
                raise RuntimeError(f"torch cannot run {disabled[leaf.device.type]} on this machine")


def _cast_anew(matched: list[Node], created: Sequence[Node], before: dict[Node, Any], after: dict[Node, Any],
               state: State) -> str | None:
    """Why a new node autocast casts in ``state`` computes in a precision no matched node of its operation did."""
    for node in created:
        with entered(tuple(Autocast(entry.device_type, None, False) for entry in state)):
            plain = _dtypes(run_on_fake([node], after)[node])
        cast = _dtypes(after[node])
        if cast != plain and not any(m.op == node.op and m.target == node.target and _dtypes(before[m]) == cast
                                     for m in matched):
            return f"autocast would run the replacement's '{node.name}' in {cast} (it would be {plain} without " \
                   f"autocast), and no node of the match with its target is {cast}"
    return None


def _dtypes(value: Any) -> str:
    """The dtypes of the tensors in a value, as a detail names them ('not a tensor' for a literal)."""
    dtypes = [str(leaf.dtype) for leaf in torch.utils._pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]
    if not dtypes:
        return "not a tensor"
    return dtypes[0] if len(dtypes) == 1 and isinstance(value, torch.Tensor) else f"({', '.join(dtypes)})"
