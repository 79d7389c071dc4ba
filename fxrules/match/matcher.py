"""Matching one rule at one node of an FX graph: the one entry point the engine and the loop check call.

* :meth:`Matcher.match` runs the rule's compiled matcher (:mod:`fxrules.match.compiled`, built once
  per rule): the first structural match in depth-first order that :meth:`Matcher.refusal` does not refuse,
  else the first reason one was not (:class:`~fxrules.match.skips.Skip`), else None.
* A :class:`Matcher` holds what matching reads besides the node: the graph module (its submodules and
  attributes), the nodes rewritten away in this pass (``retired``: no longer users of anything), and,
  with ``explain=True``, a :class:`Tracer` the same compiled matcher reports its failures to.  Tracing
  changes what is recorded, never what matches or which nodes are visited.
* After the structure matched, in order: no typed capture lacked metadata, the guard holds, and the
  ``match`` stage of the safety checks (:mod:`fxrules.match.safety`: escaping users, impure nodes,
  cycles) passes.

Example: ``Matcher(gm).match(rule, node)`` is a :class:`~fxrules.match.primitives.Match` (its nodes and
bindings), None, or raises ``Skip("guard false", ...)``; ``Matcher(gm, explain=True)`` leaves the
furthest failure of that attempt in ``misses.best``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from fxrules.diagnostics import Span
from fxrules.graph.metadata import MissingMetadata, guard_view
from fxrules.graph.sizes import DynamicSize
from fxrules.lang.ir import Rule
from fxrules.match.compiled import compiled_rule
from fxrules.match.guards import GuardError, holds
from fxrules.match.index import NodeIndex, Nodes, RuleIndex, in_graph_order, node_keys
from fxrules.match.primitives import AttrValue, Bound, Budget, Match, Miss, output_keys, output_nodes
from fxrules.match.safety import Found, SafetyCheck, checks_for
from fxrules.match.skips import Skip, SkipReason

if TYPE_CHECKING:
    from fxrules.match.compiled import _Attempt

#: The nodes a pattern's outputs matched, in order (None: not matched).
Outputs = tuple[torch.fx.Node | None, ...]

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
        self.found = Found(self.retired, self.module_of)  # the safety checks' view of each structural match
        self.attempt: _Attempt | None = None  # the compiled matchers' run, reused by each (see _Attempt.restart)

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

    def refusal(self, rule: Rule, state: Bound, outputs: Outputs | None = None,
                checks: tuple[SafetyCheck, ...] | None = None) -> Skip | None:
        """Why a structural match cannot be used, or None: a typed capture without metadata, the guard, then the
        ``match`` stage of the safety checks (:mod:`fxrules.match.safety`; ``checks``: the rule's, when the caller
        has them already).  ``outputs``: the nodes the pattern's outputs matched, when the caller has them already
        (the compiled matcher does).  Returned, not raised: the compiled matcher raises at most one skip per
        anchor, from where the driver catches it (each frame an exception leaves costs a traceback entry)."""
        if state.missing_metadata is not None:  # the types are undecided: so is everything that reads them
            return state.missing_metadata
        if rule.guard is not None:
            skip = self._guard_refusal(rule, state)
            if skip is not None:
                return skip
        return self.found.refusal(rule, checks_for(rule).match.all if checks is None else checks, state.nodes,
                                   output_nodes(output_keys(rule.pattern), state.nodes) if outputs is None
                                   else outputs, state.bindings)

    def _guard_refusal(self, rule: Rule, state: Bound) -> Skip | None:
        assert rule.guard is not None

        def lookup(name: str) -> Any:
            return self.guard_value(state.bindings[name])

        try:
            ok = holds(rule.guard, lookup)
        except MissingMetadata as missing:
            return Skip(SkipReason.MISSING_METADATA, f"the guard needs shape metadata: {missing} "
                                            "(pass example_inputs= to apply, or use torch.export)")
        except GuardError as error:
            return Skip(SkipReason.GUARD_ERROR, str(error))
        except DynamicSize as dynamic:
            return Skip.dynamic_size(dynamic)
        if not ok:
            self.misses.fail(len(state.nodes), "guard", lambda: "the where: condition is false",
                             rule.guard.conditions[0].span)
            return Skip(SkipReason.GUARD_FALSE, "the where: condition is false")
        return None

    def guard_value(self, value: Any) -> Any:
        """A bound value as guards see it: tensors as TensorInfo, ``get_attr`` nodes as :class:`AttrValue`."""
        if isinstance(value, torch.fx.Node):
            if value.op == "get_attr":
                return AttrValue(str(value.target), operator.attrgetter(str(value.target))(self.gm))
            return guard_view(value, [user for user in value.users if user not in self.retired])
        if isinstance(value, list | tuple):
            return type(value)(self.guard_value(v) for v in value)
        return value

