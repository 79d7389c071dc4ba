"""The commit's lint: what ``Graph.lint`` checks, in one walk that formats nothing unless a check fails.

``Graph.lint`` writes the name of a node into an error message for every argument it checks, whether
or not the check fails (``repr`` of each node, tens of thousands of times in a large graph).
:func:`lint` checks the same things (each node's opcode, graph and entry in the ``find_nodes`` table,
its arguments defined before it in the same graph, unique names, callable and string targets, the
attribute paths of ``get_attr`` and ``call_module`` nodes) and calls ``Graph.lint`` only when one
fails, to raise its error with its message.  FX keeps the opcodes and the table in private
attributes, read only here.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.fx.graph import _legal_ops


def lint(graph: torch.fx.Graph) -> None:
    """``graph.lint()``: raises what it raises, for the same graphs, without its cost on a valid one."""
    if not _valid(graph):
        graph.lint()


def _valid(graph: torch.fx.Graph) -> bool:
    """Whether every check of ``Graph.lint`` passes (False too when reading an attribute path raises: the
    caller's ``Graph.lint`` then raises what it would)."""
    buckets = graph._find_nodes_lookup_table.table
    module = graph.owning_module
    targets_checked = bool(module)  # Graph.lint asks `if self.owning_module`: an empty nn.Sequential is falsy
    resolved: dict[tuple[str, Any], bool] = {}
    seen: set[torch.fx.Node] = set()  # only nodes of this graph: an argument of another graph is never in it
    names: set[str] = set()
    try:
        for node in graph.nodes:
            op, target = node.op, node.target
            bucket = buckets.get((op, target if op == "call_function" else None))
            name = node.name
            if op not in _legal_ops or node.graph is not graph or bucket is None or node not in bucket \
                    or not seen.issuperset(node._input_nodes) or name in names \
                    or (targets_checked and not (callable(target) if op == "call_function"
                                                 else _target_valid(module, op, target, resolved))):
                return False
            seen.add(node)
            names.add(name)
    except Exception:
        return False
    return True


def _target_valid(module: Any, op: str, target: Any, resolved: dict[tuple[str, Any], bool]) -> bool:
    """The target of a node other than ``call_function``: a string, an attribute path for two ops."""
    if not isinstance(target, str):
        return False
    if op not in ("get_attr", "call_module"):
        return True
    key = (op, target)
    if key not in resolved:
        resolved[key] = _path_valid(module, op, target)
    return resolved[key]


def _path_valid(module: torch.nn.Module, op: str, target: str) -> bool:
    """Each atom of ``target`` is an attribute that is not None, and a module for ``call_module``."""
    current: Any = module
    for atom in target.split("."):
        current = getattr(current, atom, None)
        if current is None or (op == "call_module" and not isinstance(current, torch.nn.Module)):
            return False
    return True
