"""Matching one rule at one node of an FX graph: the one entry point the engine and the loop check call.

* :meth:`Matcher.match` runs the rule's compiled matcher (:mod:`fxrules.match.compiled`, built once
  per rule): the first structural match in depth-first order that :meth:`Matcher.check_usable` accepts,
  else the first reason one was not (:class:`~fxrules.match.skips.Skip`), else None.
* A :class:`Matcher` holds what matching reads besides the node: the graph module (its submodules and
  attributes), the nodes rewritten away in this pass (``retired``: no longer users of anything), and,
  with ``explain=True``, a :class:`Tracer` the same compiled matcher reports its failures to.  Tracing
  changes what is recorded, never what matches or which nodes are visited.
* After the structure matched, in order: no typed capture lacked metadata, the guard holds, interior
  nodes have no users outside the match, no impure node is deleted unless the pattern names its target
  exactly, and no capture depends on a matched node (the rewrite would create a cycle).

Example: ``Matcher(gm).match(rule, node)`` is a :class:`~fxrules.match.primitives.Match` (its nodes and
bindings), None, or raises ``Skip("guard false", ...)``; ``Matcher(gm, explain=True)`` leaves the
furthest failure of that attempt in ``misses.best``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx

from fxrules.diagnostics import Span
from fxrules.graph.metadata import MissingMetadata, guard_view
from fxrules.graph.sizes import DynamicSize
from fxrules.lang.ir import AltTemplate, OpKind, OpTemplate, Rule, Template, walk
from fxrules.match.compiled import compiled_rule
from fxrules.match.guards import GuardError, holds
from fxrules.match.index import NodeIndex, Nodes, RuleIndex, in_graph_order, node_keys
from fxrules.match.primitives import AttrValue, Budget, Match, Miss, State
from fxrules.match.skips import Skip, SkipReason
from fxrules.memo import per_object

__all__ = ["Match", "Matcher", "Miss", "NodeIndex", "Nodes", "RuleIndex", "Tracer", "in_graph_order", "node_keys"]


class Tracer:
    """Keeps the furthest failure of the current attempt: attached to a matcher only when explaining (the
    matchers test ``tracer is not None`` before writing a failure, so a run without one writes nothing)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.best: Miss | None = None
        self.rule = ""
        self.anchor = ""
        self.output = ""  # which output of a multi-output pattern is being matched ("" for one output)

    def start(self, rule: Rule, anchor: torch.fx.Node) -> None:
        self.best = None
        self.rule = rule.name
        self.anchor = anchor.name
        self.output = ""

    @property
    def furthest(self) -> int:
        return self.best.progress if self.best else 0

    def fail(self, progress: int, condition: str, detail: Callable[[], str], span: Span) -> None:
        """Record a failed condition ``progress`` operations into the match; ``detail`` is only formatted
        when the failure is the furthest so far."""
        if not self.enabled:
            return
        if self.best is None or progress > self.best.progress:
            self.best = Miss(self.rule, self.anchor, progress, condition, f"{self.output}{detail()}", span)


#: How many of a node's escaping users a skip's detail names.
ESCAPING_NAMED = 5


class Matcher:
    """Matches rules at nodes of one graph module."""

    def __init__(self, gm: torch.nn.Module, explain: bool = False,
                 retired: Mapping[torch.fx.Node, None] | None = None) -> None:
        self.gm = gm  # the module owning the graph: the submodules and attributes its nodes name
        self.misses = Tracer(explain)
        #: the tracer the compiled matchers report to; None when not explaining (the hot path tests only this)
        self.tracer = self.misses if explain else None
        self.retired = retired if retired is not None else {}  # rewritten away: no longer users of anything
        self.budget = Budget()

    def match(self, rule: Rule, anchor: torch.fx.Node) -> Match | None:
        """The first usable match of ``rule`` anchored at ``anchor``, or None; raises :class:`Skip`."""
        return compiled_rule(rule).match(anchor, self)

    def module_of(self, node: torch.fx.Node) -> torch.nn.Module | None:
        """The module a ``call_module`` node calls (None when the graph module has none by that name)."""
        try:
            return self.gm.get_submodule(str(node.target))
        except AttributeError:
            return None

    # ---------------------------------------------------------------- after the structure matched

    def check_usable(self, rule: Rule, state: State) -> None:
        """Raise :class:`Skip` when a structural match cannot be used: a typed capture without metadata,
        guard, escaping user, impure node, cycle."""
        if state.missing_metadata is not None:  # the types are undecided: so is everything that reads them
            raise state.missing_metadata
        if rule.guard is not None:
            self._check_guard(rule, state)
        matched = set(state.nodes.values())
        if len(matched) > 1:
            outputs = _output_nodes(rule, state)
            escaping_from = [node for node in matched if node not in outputs and self._escapes(node, matched)]
            if escaping_from:  # report the first in graph order
                node = min(escaping_from, key=lambda n: n._sort_key)
                raise Skip(SkipReason.ESCAPING_USER, lambda: self._escaping_detail(node, matched))
        for template in _maybe_unnamed(rule):
            unnamed = state.nodes.get(id(template))
            if unnamed is not None and not self._named_exactly(template, unnamed) and unnamed.is_impure():
                raise Skip(SkipReason.IMPURE,
                    f"'{unnamed.name}' has side effects and the pattern does not name its target")
        captured = [v for v in state.bindings.values() if isinstance(v, torch.fx.Node) and v not in matched]
        if _depends_on(captured, matched):
            raise Skip(SkipReason.CYCLE, "a capture depends on a node of the match; rewriting would create a cycle")

    def _escaping_detail(self, node: torch.fx.Node, matched: set[torch.fx.Node]) -> str:
        """The escaping users by name, the first few only: a node may have thousands (a shared input), and
        the detail is one line of the report."""
        escaping = [u.name for u in node.users if u not in matched and u not in self.retired]
        named = ", ".join(escaping[:ESCAPING_NAMED])
        more = len(escaping) - ESCAPING_NAMED
        return f"'{node.name}' is also used by {named}{f' and {more} more' if more > 0 else ''} outside the match"

    def _escapes(self, node: torch.fx.Node, matched: set[torch.fx.Node]) -> bool:
        """The node has a live user outside the match."""
        retired = self.retired
        for user in node.users:  # noqa: SIM110 - a loop: any() would add a generator on a hot path
            if user not in matched and user not in retired:
                return True
        return False

    def _check_guard(self, rule: Rule, state: State) -> None:
        assert rule.guard is not None

        def lookup(name: str) -> Any:
            return self.guard_value(state.bindings[name])

        try:
            ok = holds(rule.guard, lookup)
        except MissingMetadata as missing:
            raise Skip(SkipReason.MISSING_METADATA, f"the guard needs shape metadata: {missing} "
                                           "(pass example_inputs= to apply, or use torch.export)") from None
        except GuardError as error:
            raise Skip(SkipReason.GUARD_ERROR, str(error)) from None
        except DynamicSize as dynamic:
            raise Skip(SkipReason.DYNAMIC_SIZE, str(dynamic)) from None
        if not ok:
            self.misses.fail(len(state.nodes), "guard", lambda: "the where: condition is false",
                             rule.guard.conditions[0].span)
            raise Skip(SkipReason.GUARD_FALSE, "the where: condition is false")

    def guard_value(self, value: Any) -> Any:
        """A bound value as guards see it: tensors as TensorInfo, ``get_attr`` nodes as :class:`AttrValue`."""
        if isinstance(value, torch.fx.Node):
            if value.op == "get_attr":
                return AttrValue(str(value.target), operator.attrgetter(str(value.target))(self.gm))
            return guard_view(value, [user for user in value.users if user not in self.retired])
        if isinstance(value, list | tuple):
            return type(value)(self.guard_value(v) for v in value)
        return value

    def _named_exactly(self, template: OpTemplate, node: torch.fx.Node) -> bool:
        if template.kind is OpKind.MODULE:
            return type(self.module_of(node)) is template.target
        return template.kind in (OpKind.FUNCTION, OpKind.METHOD, OpKind.FAMILY)

    def to_match(self, rule: Rule, state: State) -> Match:
        """The usable match a structural match makes."""
        outputs = tuple(node for node in _output_nodes(rule, state) if node is not None)
        assert len(outputs) == len(rule.pattern), "a complete match binds every output"
        return Match(rule, outputs, tuple(state.nodes.values()), dict(state.bindings), dict(state.modules))




def _output_nodes(rule: Rule, state: State) -> tuple[torch.fx.Node | None, ...]:
    """The nodes the pattern outputs matched, in order."""
    pattern = rule.pattern
    if len(pattern) == 1 and isinstance(pattern[0], OpTemplate):  # the usual pattern, without the calls
        return (state.nodes.get(id(pattern[0])),)
    return tuple(_output_node(t, state) for t in pattern)


def _output_node(template: Template, state: State) -> torch.fx.Node | None:
    """The node a pattern output matched (for ``A | B``, the option that matched)."""
    if isinstance(template, AltTemplate):
        found = (_output_node(option, state) for option in template.options)
        return next((node for node in found if node is not None), None)
    return state.nodes.get(id(template)) if isinstance(template, OpTemplate) else None


@per_object
def _maybe_unnamed(rule: Rule) -> tuple[OpTemplate, ...]:
    """The pattern's operations that may match a node without naming its exact target (modules by base
    class, attributes): only these need the purity check."""
    return tuple(template for output in rule.pattern for template in walk(output)
                 if isinstance(template, OpTemplate) and template.kind in (OpKind.MODULE, OpKind.ATTR))


def _depends_on(captured: list[torch.fx.Node], matched: set[torch.fx.Node]) -> bool:
    """True when a captured node is computed from a matched node (searching only after the earliest match)."""
    if not captured or not matched:
        return False
    earliest = min([n._sort_key for n in matched])  # FX keeps a sortable position on every node
    stack = [c for c in captured if c._sort_key > earliest]
    if not stack:  # the usual case: every capture comes before the match
        return False
    seen: set[torch.fx.Node] = set()
    while stack:
        node = stack.pop()
        if node in matched:
            return True
        if node in seen:
            continue
        seen.add(node)
        stack.extend(n for n in node.all_input_nodes if n._sort_key > earliest or n in matched)
    return False

