"""The commit's lint: what ``Graph.lint`` checks, in bulk, formatting nothing unless a check fails.

``Graph.lint`` writes the name of a node into an error message for every argument it checks, whether
or not the check fails (``repr`` of each node, tens of thousands of times in a large graph).
:func:`lint` establishes the same facts (each node's opcode, graph and entry in the ``find_nodes``
table, its arguments defined before it in the same graph, unique names, callable and string targets,
the attribute paths of ``get_attr`` and ``call_module`` nodes) mostly by C-level passes over the
node list and the table, and calls ``Graph.lint`` when it cannot, to raise its error with its message
or to pass a valid graph the bulk checks do not recognise.  FX keeps the opcodes and the table in
private attributes, read only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

import torch
import torch.fx
from torch.fx.graph import _legal_ops

_NAME, _GRAPH, _OP, _TARGET = map(attrgetter, ("name", "graph", "op", "target"))


def lint(graph: torch.fx.Graph) -> None:
    """``graph.lint()``: raises what it raises, for the same graphs, without its cost on a valid one."""
    if not _valid(graph):
        graph.lint()


def _valid(graph: torch.fx.Graph) -> bool:
    """True only if every check of ``Graph.lint`` passes; False when one fails, or the bulk checks below
    cannot tell (the caller's ``Graph.lint`` then decides, and raises what it would)."""
    nodes = list(graph.nodes)
    try:
        seen = _in_order(nodes)
        return seen is not None and len(set(map(_NAME, nodes))) == len(nodes) \
            and all(map(is_, map(_GRAPH, nodes), repeat(graph))) and _filed(graph, seen)
    except Exception:  # a hostile attribute or target: Graph.lint says what is wrong, if anything
        return False


def _in_order(nodes: list[torch.fx.Node]) -> set[torch.fx.Node] | None:
    """The set of the nodes, if each one's arguments are nodes listed before it (``Graph.lint``'s own test,
    on the set of the nodes seen so far); None if one is not.  A node is listed once: the list is linked
    through each node's one ``_next``."""
    seen: set[torch.fx.Node] = set()
    before, add = seen.issuperset, seen.add
    for node in nodes:
        if not before(node._input_nodes):
            return None
        add(node)
    return seen


def _filed(graph: torch.fx.Graph, listed: set[torch.fx.Node]) -> bool:
    """Whether each listed node is in its own ``find_nodes`` bucket (the one ``Graph.lint`` looks it up in),
    with a legal opcode and, if the graph has a module, a target of the right kind that resolves.

    Shown per bucket, not per node: every node in a bucket is listed and has the bucket's key (the same
    opcode; for ``call_function``, the very target object the key holds), and the key looked up again
    reaches the bucket, so a lookup of a node's key, which hashes and compares as the key does, reaches it
    too; so each bucket entry is a distinct listed node in its own bucket; there are as many entries as
    listed nodes, so every listed node is one of them.  Then the checks of a node's opcode and target are
    checks of its bucket's key and, for strings, of the bucket's targets.
    A table with more entries (a stale one ``Graph.lint`` would not mind) is left to ``Graph.lint``."""
    buckets = graph._find_nodes_lookup_table.table
    if sum(map(len, buckets.values())) != len(listed):
        return False
    module = graph.owning_module
    module = module if module else None  # Graph.lint asks `if self.owning_module`: an empty nn.Sequential is falsy
    return all(_bucket_valid(key, bucket, buckets, listed, module) for key, bucket in buckets.items() if bucket)


def _bucket_valid(key: tuple[Any, Any], bucket: Mapping[torch.fx.Node, None],
                  buckets: Mapping[tuple[Any, Any], Mapping[torch.fx.Node, None]], listed: set[torch.fx.Node],
                  module: torch.nn.Module | None) -> bool:
    """The bucket holds listed nodes of its key's (legal) opcode and targets of the right kind: the key's
    own object for ``call_function`` (callable), exact strings for the other opcodes, whose key has no
    target (attribute paths that resolve, for two of them); targets are checked only with a module."""
    op, target = key
    # ``Graph.lint`` looks each node up by a key made of its opcode and target, hashed then: the table reaches
    # this bucket by the key only if the key still hashes as when it was filed (a target's hash may change)
    # and equals no other key first
    if type(op) is not str or op not in _legal_ops or buckets.get(key) is not bucket \
            or set(map(_OP, bucket)) != {op} or not listed.issuperset(bucket):
        return False
    if op == "call_function":
        return all(map(is_, map(_TARGET, bucket), repeat(target))) and (module is None or callable(target))
    if target is not None or module is None:
        return target is None
    if set(map(type, map(_TARGET, bucket))) != {str}:  # exact strings: the set below merges only equal paths
        return False
    return op not in ("get_attr", "call_module") or all(_path_valid(module, op, path)
                                                        for path in set(map(_TARGET, bucket)))


def _path_valid(module: torch.nn.Module, op: str, target: str) -> bool:
    """Each atom of ``target`` is an attribute that is not None, and a module for ``call_module``."""
    current: Any = module
    for atom in target.split("."):
        current = getattr(current, atom, None)
        if current is None or (op == "call_module" and not isinstance(current, torch.nn.Module)):
            return False
    return True
