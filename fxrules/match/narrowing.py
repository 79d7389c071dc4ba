"""Narrowing: which nodes a compiled operation may match, tested without binding a call.

* A **requirement** of an operation is something some argument of every node it matches must be: a
  node that may match an operand operation, or a literal that cannot come from a default.  ``test``
  asks it of one argument; ``narrow`` of many nodes at once, with set containment tests that make no
  Python call per node.
* :class:`Candidates` keeps what narrowing found in one graph (the nodes that may match each pattern
  operation), besides the graph's nodes by op and target.
* :class:`Satisfiers` says what may satisfy a required argument, so a rewrite that gives a node a new
  input can tell whether it may have made the node a candidate.

Example: for ``x * 3``, a ``mul`` node is a candidate only if one of its arguments is the literal 3.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import attrs
import torch.fx

from fxrules.lang.signatures import literal_equal
from fxrules.match.index import NodeIndex, Nodes

Node = torch.fx.Node


@attrs.frozen(eq=False)
class Satisfiers:
    """What can satisfy a required argument of compiled operations: a node calling one of ``keys``
    (directly, or one of its aten overloads), any module (``modules``) or any attribute (``attributes``),
    or a literal passing one of ``literal_tests``."""

    keys: frozenset[tuple[str, Any]] = frozenset()
    modules: bool = False
    literal_tests: tuple[Callable[[Any], bool], ...] = ()
    attributes: bool = False

    def __or__(self, other: Satisfiers) -> Satisfiers:
        return Satisfiers(self.keys | other.keys, self.modules or other.modules,
                          self.literal_tests + other.literal_tests, self.attributes or other.attributes)

    def admit(self, value: Any) -> bool:
        """Whether ``value`` may satisfy one of the required arguments."""
        if not isinstance(value, Node):
            return any(test(value) for test in self.literal_tests)
        if value.op == "call_module":
            return self.modules
        if value.op == "get_attr":
            return self.attributes
        keys, target = self.keys, value.target
        if (value.op, target) in keys:
            return True
        packet = getattr(target, "overloadpacket", None)
        return packet is not None and (value.op, packet) in keys


def literal_test(expected: Any) -> Callable[[Any], bool]:
    """``literal_equal(expected, value)`` for a value that is not a node, as cheap as the literal allows."""
    if type(expected) in (int, bool, str, type(None)) or (
            type(expected) is float and expected == expected and expected != 0.0):  # noqa: PLR0124 - not nan
        kind = type(expected)

        def plain_literal(value: Any) -> bool:
            # literal_equal for these types: same type and equal (no nan or signed zero to tell apart)
            return type(value) is kind and value == expected

        return plain_literal

    def literal(value: Any) -> bool:
        return not isinstance(value, Node) and literal_equal(expected, value)

    return literal


class Candidates(NodeIndex):
    """What narrowing found in one graph: the nodes that may match each pattern operation (None: any
    node may), besides the graph's nodes by key (families of many rules share members)."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        super().__init__(graph)
        self.of_operation: dict[int, Nodes | None] = {}  # id(OpTemplate) -> nodes, in the whole graph


#: candidates(found, among=None) of a rule or an operation: see :attr:`~fxrules.match.compiled.CompiledRule.candidates`.
CandidatesOf = Callable[[Candidates, "set[Node] | None"], "Nodes | None"]

#: Narrows distinct nodes to those that may have the required argument (at least all that have it).
Narrower = Callable[[Nodes, Candidates], Nodes]


@attrs.frozen
class Requirement:
    """Something some argument of a matching node must be: ``test`` asks it of one argument, ``narrow``
    of many nodes at once, without a Python call per node; ``scans`` when that looks at every node."""

    test: Callable[[Any], bool]
    narrow: Narrower
    scans: bool


class Operand(Protocol):
    """An operation of a pattern as narrowing sees it (a compiled operation)."""

    def may_be_operand(self, value: Any) -> bool: ...

    def candidates(self, found: Candidates, among: set[Node] | None = None) -> Nodes | None: ...


#: How many operands' users :func:`operand_call` counts to judge how many users all have.
_SAMPLE = 64


def operand_call(operation: Operand) -> Requirement:
    """An argument is a node that may match ``operation``."""

    def narrow(nodes: Nodes, found: Candidates) -> Nodes:
        operands = operation.candidates(found)
        if operands is None:
            return nodes
        if len(operands) <= len(nodes):  # fewer operands: their users (a node's users use it somewhere)
            users = [o.users for o in operands]
            # the users there are, judged from the first operands' (either way finds the same nodes)
            sample = users[:_SAMPLE]
            if sum(map(len, sample)) * len(users) <= 2 * len(nodes) * len(sample):
                return in_any(users, nodes)
            # operands with many users (a shared input): the nodes whose inputs hold one, found from the nodes.
            # The same set: FX keeps a node in ``o.users`` exactly while ``o`` is among its ``_input_nodes``
            wanted = _as_set(operands)
            return {n for n in nodes if not wanted.isdisjoint(n._input_nodes)}
        return _with_argument_in(nodes, _as_set(operands), operation.may_be_operand)

    return Requirement(operation.may_be_operand, narrow, scans=False)


def _as_set(nodes: Nodes) -> set[Node]:
    """``nodes`` as a set (the one given, if it is one: no copy)."""
    return nodes if isinstance(nodes, set) else set(nodes)


def literal_argument(value: Any) -> Requirement:
    """An argument is the literal ``value``."""
    test = literal_test(value)
    if type(value) not in (int, bool, str, float, type(None)) or value != value:  # noqa: PLR0124 - nan
        return Requirement(test, lambda nodes, found: nodes, scans=False)
    # A set holds every argument equal to the literal (and some others: 1 == True == 1.0).
    return Requirement(test, lambda nodes, found: _with_argument_in(nodes, frozenset((value,)), test),
                        scans=True)


def in_any(groups: Sequence[Iterable[Node]], within: Nodes | None) -> set[Node]:
    """The nodes in any of ``groups`` (and in ``within``, when given), with set operations only."""
    if within is None:
        return set().union(*groups)
    if not isinstance(within, set):
        return set().union(*groups).intersection(within)
    return within.intersection(*groups) if len(groups) == 1 else within.intersection(set().union(*groups))


def _with_argument_in(nodes: Nodes, values: set[Any] | frozenset[Any], test: Callable[[Any], bool]) -> set[Node]:
    """The nodes with an argument in ``values``: at least all those with an argument passing ``test``."""
    misses = values.isdisjoint
    try:  # Node._args and ._kwargs: the attributes behind .args and .kwargs, without a Python call per node
        return {n for n in nodes if not misses(n._args) or (n._kwargs and not misses(n._kwargs.values()))}
    except Exception:  # an argument that cannot be hashed (a slice, a symbolic float): node by node
        return {n for n in nodes if any(test(v) for v in (*n.args, *n.kwargs.values()))}
