"""Which nodes of a graph the rules of a rule set may anchor at: the rules by anchor key, the graph's nodes
by op and target (from the graph's own index), and graph order."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from fxrules.lang.ir import AnchorKey, Rule, RuleSet
from fxrules.memo import per_object


class RuleIndex:
    """The rules that may anchor at a node, by the node's key (op, target), in file order; cached per key."""

    def __init__(self, gm: torch.fx.GraphModule, ruleset: RuleSet) -> None:
        self.gm = gm
        self.ruleset = ruleset
        self.by_anchor = ruleset.by_anchor
        self._cache: dict[tuple[str, Any], tuple[Rule, ...]] = {}

    def candidates(self, nodes: NodeIndex,
                   narrowed: Callable[[Rule], Nodes | None] = lambda rule: None) -> list[torch.fx.Node]:
        """:meth:`anchors` in graph order."""
        return in_graph_order(nodes.graph, self.anchors(nodes, narrowed))

    def anchors(self, nodes: NodeIndex, narrowed: Callable[[Rule], Nodes | None] = lambda rule: None,
                among: set[torch.fx.Node] | None = None) -> set[torch.fx.Node]:
        """The nodes (``among`` them, if given) some rule may anchor at, found with the graph's own op/target index.

        ``narrowed(rule)`` may give the nodes (``among`` them) where the rule can match at most (None: any
        node of its anchor keys); a key all of whose rules give them contributes only those nodes.
        """
        found: set[torch.fx.Node] = set()
        narrowed_sets = {rule.name: narrowed(rule) for rule in self.ruleset}
        for rule_nodes in narrowed_sets.values():
            if rule_nodes is not None:
                found.update(rule_nodes)
        for key, rules in self.by_anchor.items():
            if all(narrowed_sets[rule.name] is not None for rule in rules):
                continue
            op, target = key
            if op in {"call_module", "get_attr"}:
                calling = [n for n in nodes.with_op(op) if self.rules_at(n)]
            else:  # every node found calls the target or one of its overloads: some rule anchors there
                calling = nodes.calling(op, target)
            found.update(calling if among is None else among.intersection(calling))
        return found

    def rules_at(self, node: torch.fx.Node) -> tuple[Rule, ...]:
        op = node.op
        if op in ("placeholder", "output"):
            return ()
        key = (op, node.target)
        try:
            return self._cache[key]
        except KeyError:
            rules = self._cache[key] = self._lookup(node)
            return rules

    def _lookup(self, node: torch.fx.Node) -> tuple[Rule, ...]:
        found = {rule.name: rule for key in node_keys(self.gm, node) for rule in self.by_anchor.get(key, ())}
        if len(found) < 2:
            return tuple(found.values())
        order = _file_order(self.ruleset)
        return tuple(sorted(found.values(), key=lambda rule: order[rule.name]))


def node_keys(gm: torch.nn.Module, node: torch.fx.Node) -> list[AnchorKey]:
    """The anchor keys a rule's pattern output may have to stand at ``node`` (of a graph of ``gm``): its
    target and the target's overload packet, or each class of the module it calls."""
    if node.op == "call_function":
        packet = getattr(node.target, "overloadpacket", None)
        return [("call_function", node.target)] + ([("call_function", packet)] if packet is not None else [])
    if node.op == "call_method":
        return [("call_method", node.target)]
    if node.op == "call_module":
        try:
            module = gm.get_submodule(str(node.target))
        except AttributeError:  # a dangling call_module: no rule can anchor there
            return []
        return [("call_module", cls) for cls in type(module).__mro__]
    if node.op == "get_attr":
        return [("get_attr", None)]
    return []


@per_object
def _file_order(ruleset: RuleSet) -> dict[str, int]:
    """Rule name -> its position in the rule set."""
    return {rule.name: i for i, rule in enumerate(ruleset)}


def in_graph_order(graph: torch.fx.Graph, nodes: set[torch.fx.Node]) -> list[torch.fx.Node]:
    """``nodes`` (of ``graph``) in graph order: sorted when they are few, else by one walk of the graph."""
    if len(nodes) * 8 < len(graph.nodes):
        return sorted(nodes, key=lambda n: n._sort_key)
    return [n for n in graph.nodes if n in nodes]


#: How many targets of one op :meth:`NodeIndex.calling` finds by a scan before grouping the op's nodes by target.
_SCANS_BEFORE_GROUPING = 2
_target = operator.attrgetter("target")

#: Distinct nodes: a set, or a list as the graph's index gives them (a set would cost a hash per node).
Nodes = set[torch.fx.Node] | list[torch.fx.Node]


class NodeIndex:
    """A graph's nodes by op and target, from the graph's own index, each key looked up once.

    ``Graph.find_nodes`` keeps call_function nodes by target, but finds a method's callers by
    comparing the target of every call_method node; here they are grouped once per graph.
    """

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self._calling: dict[tuple[str, Any], list[torch.fx.Node]] = {}
        self._by_op: dict[str, list[torch.fx.Node]] = {}
        self._grouped: set[str] = set()  # ops whose nodes are in _calling by every target
        self._scanned: dict[str, int] = {}  # op -> how many targets were found by scanning its nodes

    def with_op(self, op: str) -> list[torch.fx.Node]:
        nodes = self._by_op.get(op)
        if nodes is None:
            nodes = self._by_op[op] = self.graph.find_nodes(op=op, sort=False)
        return nodes

    def calling(self, op: str, target: Any) -> list[torch.fx.Node]:
        """The nodes that call ``target`` (hashable) with ``op``, or, for an aten overload packet, one of its
        overloads; in no particular order."""
        key = (op, target)
        nodes = self._calling.get(key)
        if nodes is not None:
            return nodes
        if op == "call_function":
            nodes = self.graph.find_nodes(op=op, target=target, sort=False)
            if isinstance(target, torch._ops.OpOverloadPacket):  # aten graphs name the overloads
                nodes = [*nodes, *(n for overload in _overloads(target)
                                   for n in self.graph.find_nodes(op=op, target=overload, sort=False))]
            self._calling[key] = nodes
            return nodes
        return self._named(op, target)

    def _named(self, op: str, target: Any) -> list[torch.fx.Node]:
        """:meth:`calling` for methods, attributes and modules, named by strings the graph's index does not key.

        A scan of the op's nodes for one target (no Python frame per node) costs about half of grouping them
        all by target: an op is scanned for its first targets, and grouped once more are asked for.
        """
        key = (op, target)
        if op in self._grouped:
            return self._calling.setdefault(key, [])
        nodes = self.with_op(op)
        scans = self._scanned[op] = self._scanned.get(op, 0) + 1
        if scans <= _SCANS_BEFORE_GROUPING:
            found = self._calling[key] = list(itertools.compress(nodes, map(operator.eq, map(_target, nodes),
                                                                            itertools.repeat(target))))
            return found
        self._grouped.add(op)
        groups: dict[tuple[str, Any], list[torch.fx.Node]] = {}
        for node in nodes:
            groups.setdefault((op, node.target), []).append(node)
        for named, group in groups.items():  # a scanned target keeps its list (the same nodes, in the same order)
            self._calling.setdefault(named, group)
        return self._calling.setdefault(key, [])


@functools.cache
def _overloads(packet: torch._ops.OpOverloadPacket) -> tuple[torch._ops.OpOverload, ...]:
    return tuple(getattr(packet, name) for name in packet.overloads())
