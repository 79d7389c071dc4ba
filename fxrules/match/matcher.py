"""Matching one rule's pattern at one anchor node of an FX graph.

Algorithm, for a rule whose pattern outputs are ``o1 .. ok`` at anchor ``n``:

1. match ``o1`` at ``n``: an operation template checks the node's op and
   target (or family member), then its arguments, normalized to parameter
   names, recursively; captures bind (and unify) values, typed captures are
   checked as they bind, interior names must map to one node each; a
   tensor-typed capture whose node has no shape metadata is accepted
   provisionally (its dims stay unbound) and the state remembers it;
2. match each further output ``oi`` among the users of nodes already bound;
3. check, in order: that no typed capture lacked metadata (else the match is
   skipped for ``missing metadata``), the guard (once everything is bound),
   and the ``match`` stage of the safety checks (:mod:`fxrules.match.safety`:
   escaping users, impure nodes, cycles).

Choices (alternatives ``A | B``, commutative operand order, lists) are
explored by backtracking generators; a pattern of ``p`` operations costs
``O(p)`` per anchor without choices.  Failures are reported to a
:class:`MissTracker` so ``explain=True`` can say why a rule did not fire.

Choices can multiply: ``k`` commutative operations whose operands both fit, or ``k`` alternatives
that both match, make ``2 ** k`` ways to match, and under a false guard every one is tried.  So the
work at one anchor is counted in **match steps** (:class:`Budget`): an operation of the pattern tried
at a node that calls its target, an option of a choice tried (each option of ``A | B``, each operand
order of a commutative operation), and a structurally complete match found.  A rule that needs more
than :data:`MATCH_BUDGET` steps at an anchor is skipped there with reason ``budget``.  Equivalent
choices are not explored twice: the swapped order of a commutative operation whose two operands are
the same value is not tried, and a structural match that binds exactly as an earlier one did is not
checked again (types, guard and users would give the same answer).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import torch
import torch.fx

from fxrules.diagnostics import Span
from fxrules.graph.metadata import MissingMetadata, NotATensor, guard_view, tensor_info
from fxrules.graph.sizes import OPT_IN, DynamicSize, is_size_error
from fxrules.lang.families import map_member_call
from fxrules.lang.ir import (
    AltTemplate,
    AnchorKey,
    AttrType,
    Capture,
    CaptureType,
    DimRest,
    DimSymbol,
    Literal,
    ModuleType,
    NodeType,
    OpKind,
    OpTemplate,
    Rule,
    RuleSet,
    ScalarType,
    SeqTemplate,
    SequenceType,
    SliceTemplate,
    Template,
    TensorType,
    Wildcard,
)
from fxrules.lang.signatures import BoundCall, CallSignature, holds_default, literal_equal
from fxrules.match.guards import GuardError, holds
from fxrules.match.safety import Found
from fxrules.match.skips import Skip, SkipReason
from fxrules.memo import per_object

_MISSING = object()

#: The match steps (see the module docstring) one rule may take at one anchor.  Ordinary rules take
#: a few per pattern operation; the bundled rulesets and the test suite stay below 100.
MATCH_BUDGET = 1_000


class BudgetExhausted(Exception):  # noqa: N818 - a control-flow signal, turned into a ``budget`` skip
    """The current rule took more than its match steps at this anchor."""


class Budget:
    """The match steps one rule has taken at one anchor; :meth:`step` raises :class:`BudgetExhausted` past
    ``limit``.  Both matchers count the same steps, except that the compiled one never counts inside an
    operation it has ruled out by its arguments alone (the generic one finds no match there either)."""

    __slots__ = ("limit", "taken")

    def __init__(self, limit: int = MATCH_BUDGET) -> None:
        self.limit = limit
        self.taken = 0

    def step(self) -> None:
        self.taken += 1
        if self.taken > self.limit:
            raise BudgetExhausted

    def skip(self) -> Skip:
        """The skip of a rule that ran out of steps."""
        return Skip(SkipReason.BUDGET,
            f"gave up after {self.limit} match steps at this node: the pattern's alternatives "
            "and commutative operand orders give too many ways to match here")


def binding_key(bindings: Mapping[str, Any], nodes: Mapping[int, torch.fx.Node]) -> tuple[frozenset[Any], ...]:
    """What a structural match binds, by identity: two matches with the same key get the same answer from
    :meth:`Matcher.check_usable` (same values for the types and guard, same nodes for users and cycles)."""
    return frozenset((name, id(value)) for name, value in bindings.items()), frozenset(map(id, nodes.values()))


class SeenMatches:
    """The structural matches already checked at one anchor, by :func:`binding_key`; kept only once one
    was rejected (the usual first match is used at once, and needs no key)."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: set[tuple[frozenset[Any], ...]] | None = None

    def is_new(self, bindings: Mapping[str, Any], nodes: Mapping[int, torch.fx.Node]) -> bool:
        return self.keys is None or binding_key(bindings, nodes) not in self.keys

    def rejected(self, bindings: Mapping[str, Any], nodes: Mapping[int, torch.fx.Node]) -> None:
        if self.keys is None:
            self.keys = set()
        self.keys.add(binding_key(bindings, nodes))


@attrs.frozen
class State:
    """What a partial match has bound: names to values, operation templates to nodes."""

    bindings: Mapping[str, Any] = attrs.field(factory=dict)
    nodes: Mapping[int, torch.fx.Node] = attrs.field(factory=dict)  # id(OpTemplate) -> node
    modules: Mapping[str, str] = attrs.field(factory=dict)  # module capture -> qualified name
    #: the skip of the first tensor-typed capture bound without shape metadata (None: every one had it)
    missing_metadata: Skip | None = None

    # Each step makes a new State (choices backtrack by keeping the old one); the constructor is called
    # directly because attrs.evolve's field introspection costs more than the copy on this hot path.
    def bind(self, name: str, value: Any) -> State:
        return State({**self.bindings, name: value}, self.nodes, self.modules, self.missing_metadata)

    def map_node(self, template: OpTemplate, node: torch.fx.Node) -> State:
        bindings = {**self.bindings, template.name: node} if template.name else self.bindings
        return State(bindings, {**self.nodes, id(template): node}, self.modules, self.missing_metadata)

    def bind_module(self, name: str, qualified_name: str) -> State:
        return State(self.bindings, self.nodes, {**self.modules, name: qualified_name}, self.missing_metadata)

    def lacking_metadata(self, skip: Skip) -> State:
        """The state with a typed capture accepted without metadata: the first such skip is kept."""
        if self.missing_metadata is not None:
            return self
        return State(self.bindings, self.nodes, self.modules, skip)


@attrs.frozen
class Match:
    """A complete match: ready to be rewritten."""

    rule: Rule
    outputs: tuple[torch.fx.Node, ...]
    nodes: tuple[torch.fx.Node, ...]  # every node the pattern's operations matched
    bindings: Mapping[str, Any]
    modules: Mapping[str, str]

    @property
    def anchor(self) -> torch.fx.Node:
        return self.outputs[0]


@attrs.frozen
class Miss:
    """Why a match attempt failed: the furthest it got and the first condition that failed there."""

    rule: str
    anchor: str
    progress: int  # operations matched before the failure
    condition: str  # target, argument, literal, type, guard, escaping user, impure, cycle, metadata
    detail: str
    span: Span

    def __str__(self) -> str:
        return f"{self.rule} at {self.anchor}: {self.condition}: {self.detail} ({self.span})"


class MissTracker:
    """Keeps the furthest failure of the current attempt (only when explaining)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.best: Miss | None = None
        self.rule = ""
        self.anchor = ""

    def start(self, rule: Rule, anchor: torch.fx.Node) -> None:
        self.best = None
        self.rule = rule.name
        self.anchor = anchor.name

    @property
    def furthest(self) -> int:
        return self.best.progress if self.best else 0

    def fail(self, state: State, condition: str, detail: Callable[[], str], span: Span) -> None:
        """Record a failed condition; ``detail`` is only formatted when explaining (the hot path skips it)."""
        if not self.enabled:
            return
        progress = len(state.nodes)
        if self.best is None or progress > self.best.progress:
            self.best = Miss(self.rule, self.anchor, progress, condition, detail(), span)



class Matcher:
    """Matches rules at nodes of one graph module."""

    def __init__(self, gm: torch.nn.Module, explain: bool = False,
                 retired: Mapping[torch.fx.Node, None] | None = None) -> None:
        self.gm = gm  # the module owning the graph: the submodules and attributes its nodes name
        self.misses = MissTracker(explain)
        self.retired = retired if retired is not None else {}  # rewritten away: no longer users of anything
        self._bound_cache: dict[tuple[int, int], BoundCall | None] = {}
        self.rule_types: Mapping[str, CaptureType] = {}
        self.budget = Budget()
        self._found = Found(self.retired, self.module_of)  # the safety checks' view of each structural match

    def forget(self) -> None:
        """Drop what was cached about nodes: a rewrite changed the graph."""
        self._bound_cache.clear()

    # ---------------------------------------------------------------- entry point

    def match(self, rule: Rule, anchor: torch.fx.Node) -> Match | None:
        """The first complete match of ``rule`` anchored at ``anchor``, or None; raises :class:`Skip`."""
        self.misses.start(rule, anchor)
        self.rule_types = rule.types
        budget = self.budget = Budget()
        seen = SeenMatches()
        skip: Skip | None = None
        try:
            for state in self._outputs(rule, anchor):
                budget.step()
                if not seen.is_new(state.bindings, state.nodes):
                    continue
                try:
                    self.check_usable(rule, state)
                except Skip as reason:
                    skip = skip or reason
                    seen.rejected(state.bindings, state.nodes)
                    continue
                return self.to_match(rule, state)
        except BudgetExhausted:
            raise budget.skip() from None
        if skip is not None:
            raise skip
        return None

    def _outputs(self, rule: Rule, anchor: torch.fx.Node) -> Iterator[State]:
        first, *others = rule.pattern
        for state in self.match_template(first, anchor, State()):
            yield from self._other_outputs(others, state)

    def _other_outputs(self, outputs: list[Template], state: State) -> Iterator[State]:
        if not outputs:
            yield state
            return
        head, *tail = outputs
        if isinstance(head, OpTemplate) and id(head) in state.nodes:  # an interior node that is also an output
            yield from self._other_outputs(tail, state)
            return
        for candidate in self._candidates_near(state):
            self.budget.step()  # each node tried as a further output: a shared input may have thousands of users
            for next_state in self.match_template(head, candidate, state):
                yield from self._other_outputs(tail, next_state)

    def _candidates_near(self, state: State) -> list[torch.fx.Node]:
        """Nodes that may be further outputs: users of what the match bound so far."""
        bound = [*state.nodes.values(), *(v for v in state.bindings.values() if isinstance(v, torch.fx.Node))]
        mapped = set(state.nodes.values())
        seen: dict[torch.fx.Node, None] = {}
        for node in bound:
            for user in node.users:
                if user not in mapped and user not in self.retired:
                    seen[user] = None
        return list(seen)

    # ---------------------------------------------------------------- templates

    def match_template(self, template: Template, value: Any, state: State) -> Iterator[State]:
        if isinstance(template, OpTemplate):
            yield from self.match_op(template, value, state)
        elif isinstance(template, Capture | Literal):
            matched = self.capture(template, value, state) if isinstance(template, Capture) else self.literal(
                template, value, state)
            if matched is not None:
                yield matched
        elif isinstance(template, Wildcard):
            yield state
        elif isinstance(template, AltTemplate):
            for option in template.options:
                self.budget.step()
                yield from self.match_template(option, value, state)
        elif isinstance(template, SeqTemplate):
            if not isinstance(value, list | tuple) or len(value) != len(template.items):
                self.misses.fail(state, "argument", lambda: f"expected a sequence of {len(template.items)}, found "
                                                    f"{_show(value)}", template.span)
                return
            yield from self.match_all(template.items, value, state)
        elif isinstance(template, SliceTemplate):
            if not isinstance(value, slice):
                self.misses.fail(state, "argument", lambda: f"expected a slice, found {_show(value)}", template.span)
                return
            parts = (template.start, template.stop, template.step)
            yield from self.match_all(parts, (value.start, value.stop, value.step), state)

    def match_all(self, templates: tuple[Template, ...], values: Any, state: State) -> Iterator[State]:
        """Match templates to values pairwise.  Literals, ``_`` and captures have at most one outcome and
        are checked in a loop; the first template with choices recurses (the hot path stays flat)."""
        for index, template in enumerate(templates):
            value = values[index]
            if isinstance(template, Capture):
                state = self.capture(template, value, state)  # type: ignore[assignment]
            elif isinstance(template, Literal):
                state = self.literal(template, value, state)  # type: ignore[assignment]
            elif not isinstance(template, Wildcard):
                rest, rest_values = templates[index + 1:], values[index + 1:]
                for next_state in self.match_template(template, value, state):
                    yield from self.match_all(rest, rest_values, next_state)
                return
            if state is None:
                return
        yield state

    def literal(self, template: Literal, value: Any, state: State) -> State | None:
        if isinstance(value, torch.fx.Node) or not literal_equal(template.value, value):
            self.misses.fail(state, "literal", lambda: f"expected {template.value!r}, found {_show(value)}",
                             template.span)
            return None
        return state

    def capture(self, template: Capture, value: Any, state: State) -> State | None:
        """The state with ``template`` bound to ``value`` (type-checked), or None when it cannot be."""
        name = template.name
        if name in state.bindings:
            previous = state.bindings[name]
            same = previous is value if isinstance(previous, torch.fx.Node) or isinstance(value, torch.fx.Node) \
                else literal_equal(previous, value)
            if not same:
                self.misses.fail(state, "argument", lambda: f"'{name}' is bound to {_show(previous)} but here is "
                                                    f"{_show(value)}", template.span)
                return None
            return state
        declared = self.rule_types.get(name)
        if declared is not None:
            checked = self.check_type(name, declared, value, state, template.span)
            if checked is None:
                return None
            state = checked
        return state.bind(name, value)

    # ---------------------------------------------------------------- operations

    def match_op(self, template: OpTemplate, value: Any, state: State) -> Iterator[State]:
        if not isinstance(value, torch.fx.Node):
            self.misses.fail(state, "target", lambda: f"expected {template.describe()}, found {_show(value)}",
                             template.span)
            return
        node = value
        if id(template) in state.nodes:
            if state.nodes[id(template)] is node:
                yield state
            else:
                self.misses.fail(state, "argument", lambda: f"'{template.name}' is used twice but the graph has two "
                                                    "different nodes", template.span)
            return
        if node in state.nodes.values():
            self.misses.fail(state, "target", lambda: f"node '{node.name}' is already matched by another operation",
                             template.span)
            return
        bound = self._node_call(template, node, state)
        if bound is _MISSING:
            return
        self.budget.step()
        state = state.map_node(template, node)
        if template.binds is not None:
            state = self._bind_module_or_attr(template, node, state)  # type: ignore[assignment]
            if state is None:
                return
        if template.kind is OpKind.ATTR:
            yield state
            return
        yield from self.match_arguments(template, node, bound, state)

    def _node_call(self, template: OpTemplate, node: torch.fx.Node, state: State) -> Any:
        """The node's arguments bound to the template's parameters; None: as written; _MISSING: no match."""
        kind, target = template.kind, template.target
        if kind is OpKind.FAMILY:
            return self._family_call(template, node, state)
        module = self.module_of(node) if node.op == "call_module" else None
        fits = (
            (kind is OpKind.FUNCTION and node.op == "call_function" and _same_function(target, node.target))
            or (kind is OpKind.METHOD and node.op == "call_method" and node.target == target)
            or (kind is OpKind.MODULE and module is not None and isinstance(module, target))
            or (kind is OpKind.ATTR and node.op == "get_attr")
        )
        if not fits:
            self.misses.fail(state, "target",
                             lambda: f"expected {template.describe()}, found {_describe_node(node, module)}",
                             template.span)
            return _MISSING
        if template.bound is None or template.signature is None:
            return None
        return self._bind_node(template.signature, node)

    def _family_call(self, template: OpTemplate, node: torch.fx.Node, state: State) -> Any:
        family = template.target
        module = self.module_of(node) if node.op == "call_module" else None
        member = None
        for candidate in family.members:
            if (candidate.kind.value == node.op and (
                    (candidate.kind is OpKind.FUNCTION and _same_function(candidate.target, node.target))
                    or (candidate.kind is OpKind.METHOD and candidate.target == node.target)
                    or (candidate.kind is OpKind.MODULE and isinstance(module, candidate.target)))):
                member = candidate
                break
        if member is None:
            self.misses.fail(state, "target", lambda: f"expected a member of family {family.name}, found "
                                              f"{_describe_node(node, module)}", template.span)
            return _MISSING
        if member.signature is None or template.bound is None:
            return None
        bound = self._bind_node(member.signature, node)
        if bound is None:
            return None
        mapped = map_member_call(member, family, bound, module)
        if mapped.bound is None:
            self.misses.fail(state, "argument", lambda: mapped.reason, template.span)
            return _MISSING
        return mapped.bound

    def _bind_node(self, signature: CallSignature, node: torch.fx.Node) -> BoundCall | None:
        key = (id(node), id(signature))
        if key not in self._bound_cache:
            self._bound_cache[key] = signature.bind(node.args, node.kwargs)
        return self._bound_cache[key]

    def match_arguments(self, template: OpTemplate, node: torch.fx.Node, bound: BoundCall | None,
                        state: State) -> Iterator[State]:
        if not template.commutative:
            yield from self._as_written(template, node, state, False) if bound is None else \
                self._by_name(template, bound, state, False)
            return
        for swapped in (False, True):
            if bound is None:
                yield from self._as_written(template, node, state, swapped)
            else:
                yield from self._by_name(template, bound, state, swapped)

    def _by_name(self, template: OpTemplate, bound: BoundCall, state: State, swapped: bool) -> Iterator[State]:
        expected: Mapping[str, Template] = template.bound or {}
        if swapped:
            names = list(expected)[:2]
            if len(names) < 2:
                return
            expected = {**expected, names[0]: expected[names[1]], names[1]: expected[names[0]]}
        values = named_values(tuple(expected), template.rest, bound)
        if template.commutative and not isinstance(values, Unreadable) and not self._new_order(values, swapped):
            return
        if isinstance(values, Unreadable):
            name = values.parameter
            if values.given is _MISSING:
                self.misses.fail(state, "argument", lambda: f"argument '{name}' is not given", template.span)
            else:
                given = values.given
                self.misses.fail(state, "argument", lambda: f"argument '{name}' is {_show(given)}; the pattern "
                                 "leaves it out, so it must hold its default", template.span)
            return
        yield from self.match_all(tuple(expected.values()), values, state)

    def _as_written(self, template: OpTemplate, node: torch.fx.Node, state: State, swapped: bool) -> Iterator[State]:
        args = list(node.args)
        if swapped:
            if len(args) < 2:
                return
            args[0], args[1] = args[1], args[0]
        if len(args) < len(template.args) or (len(args) > len(template.args) and not template.rest):
            self.misses.fail(state, "argument", lambda: f"expected {len(template.args)} positional argument(s), found "
                                                f"{len(args)}", template.span)
            return
        names = [name for name, _ in template.kwargs]
        if (any(name not in names for name in node.kwargs) and not template.rest) or any(
                name not in node.kwargs for name in names):
            self.misses.fail(state, "argument", lambda: f"keyword arguments differ: expected {names}, found "
                                                f"{list(node.kwargs)}", template.span)
            return
        templates = (*template.args, *(t for _, t in template.kwargs))
        values = (*args[: len(template.args)], *(node.kwargs[name] for name in names))
        if template.commutative and not self._new_order(values, swapped):
            return
        yield from self.match_all(templates, values, state)

    def _new_order(self, values: Any, swapped: bool) -> bool:
        """An operand order of a commutative operation is an option tried (a step), unless it is the swapped
        order of two operands that are the same value: that is the first order again."""
        if swapped and len(values) >= 2 and values[0] is values[1]:
            return False
        self.budget.step()
        return True

    # ---------------------------------------------------------------- modules, attributes, types

    def module_of(self, node: torch.fx.Node) -> torch.nn.Module | None:
        """The module a ``call_module`` node calls (None when the graph module has none by that name)."""
        try:
            return self.gm.get_submodule(str(node.target))
        except AttributeError:
            return None

    def _bind_module_or_attr(self, template: OpTemplate, node: torch.fx.Node, state: State) -> State | None:
        name = template.binds
        assert name is not None
        value: Any = node if template.kind is OpKind.ATTR else self.module_of(node)
        previous = state.bindings.get(name, _MISSING)
        if previous is not _MISSING and previous is not value:
            self.misses.fail(state, "argument", lambda: f"'{name}' is bound to another module", template.span)
            return None
        if template.kind is OpKind.MODULE:
            declared = self.rule_types.get(name)
            if isinstance(declared, ModuleType) and not declared.fits(value):
                self.misses.fail(state, "type", lambda: f"'{name}' must be exactly {declared.cls.__name__}, "
                                                        f"without hooks; found {type(value).__name__}", template.span)
                return None
            state = state.bind_module(name, str(node.target))
        return state.bind(name, value)

    def check_type(self, name: str, declared: CaptureType, value: Any, state: State, span: Span) -> State | None:
        """The state with ``value`` checked against the declared type of capture ``name`` (and the dims of a
        tensor type bound), or None when it does not fit."""
        if isinstance(declared, TensorType):
            fit = tensor_fit(name, declared, value, state.bindings)
            if isinstance(fit, Unfit):
                self.misses.fail(state, "type", fit.detail, span)
                return None
            if isinstance(fit, Skip):
                return state.lacking_metadata(fit)
            for symbol, size in fit.items():
                state = state.bind(symbol, size)
            return state
        problem = value_type_problem(name, declared, value)
        if problem:
            self.misses.fail(state, "type", lambda: problem, span)
            return None
        return state

    # ---------------------------------------------------------------- after the structure matched

    def check_usable(self, rule: Rule, state: State) -> None:
        """Raise :class:`Skip` when a structural match cannot be used: a typed capture without metadata, the
        guard, then the ``match`` stage of the safety checks (:mod:`fxrules.match.safety`)."""
        if state.missing_metadata is not None:  # the types are undecided: so is everything that reads them
            raise state.missing_metadata
        if rule.guard is not None:
            self._check_guard(rule, state)
        self._found.check(rule, state.nodes, _output_nodes(rule, state), state.bindings)

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
            raise Skip.dynamic_size(dynamic) from None
        if not ok:
            self.misses.fail(state, "guard", lambda: "the where: condition is false", rule.guard.conditions[0].span)
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

    def to_match(self, rule: Rule, state: State) -> Match:
        """The usable match a structural match makes."""
        outputs = _output_nodes(rule, state)
        return Match(rule, outputs, tuple(state.nodes.values()), dict(state.bindings), dict(state.modules))


class RuleIndex:
    """The rules that may anchor at a node, by the node's key (op, target), in file order; cached per key."""

    def __init__(self, gm: torch.fx.GraphModule, ruleset: RuleSet) -> None:
        self.gm = gm
        self.ruleset = ruleset
        self.by_anchor = ruleset.by_anchor
        self._cache: dict[tuple[str, Any], tuple[Rule, ...]] = {}

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
        except TypeError:  # an unhashable target
            return self._lookup(node)

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
        self._grouped: set[str] = set()

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
        if op not in self._grouped:  # methods, attributes, modules: named by strings
            self._grouped.add(op)
            for node in self.with_op(op):
                self._calling.setdefault((op, node.target), []).append(node)
        return self._calling.setdefault(key, [])


@functools.cache
def _overloads(packet: torch._ops.OpOverloadPacket) -> tuple[torch._ops.OpOverload, ...]:
    return tuple(getattr(packet, name) for name in packet.overloads())


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


def unify_dims(dims: tuple[Any, ...], shape: tuple[Any, ...], bound: Mapping[str, Any]) -> dict[str, Any] | None:
    """Bind symbolic dims against a shape; None when literal dims differ or a symbol disagrees."""
    rest = [i for i, d in enumerate(dims) if isinstance(d, DimRest)]
    if rest:
        head, tail = dims[: rest[0]], dims[rest[0] + 1:]
        if len(shape) < len(head) + len(tail):
            return None
        pairs = list(zip(head, shape[: len(head)], strict=True))
        pairs += list(zip(tail, shape[len(shape) - len(tail):], strict=True))
    else:
        if len(shape) != len(dims):
            return None
        pairs = list(zip(dims, shape, strict=True))
    found: dict[str, Any] = {}
    for dim, size in pairs:
        if isinstance(dim, DimSymbol):
            known = found.get(dim.name, bound.get(dim.name, _MISSING))
            if known is not _MISSING and known != size:
                return None
            found[dim.name] = size
        elif dim != size:
            return None
    return found


class AttrValue:
    """What a guard sees of an ``Attr`` capture: its qualified name and its tensor's attributes."""

    guard_attributes = frozenset({"target", "shape", "ndim", "dtype", "device"})

    def __init__(self, target: str, value: Any) -> None:
        self.target = target
        self._value = value

    def __getattr__(self, name: str) -> Any:
        if name in {"shape", "ndim", "dtype", "device"}:
            return getattr(self._value, name)
        raise AttributeError(name)

    def numel(self) -> int:
        return int(self._value.numel())


@attrs.frozen
class Unfit:
    """Why a value does not fit a tensor type: ``detail`` writes it (only when a near miss is recorded)."""

    detail: Callable[[], str]


def tensor_fit(name: str, declared: TensorType, value: Any,
               bound: Mapping[str, Any]) -> Mapping[str, Any] | Skip | Unfit:
    """How ``value`` fits the tensor type of capture ``name``, given the dims already ``bound``.

    A mapping: it fits, binding these dims (in the type's order); :class:`Unfit`: it does not (not a tensor,
    another dtype, rank or size); a ``missing metadata`` :class:`Skip`: the node has no shape metadata, or a
    ``dynamic size`` one: whether it fits depends on a symbolic size; only a structurally complete match may
    report either.
    """
    if value is None and declared.or_none:
        return {}
    if not isinstance(value, torch.fx.Node):
        return Unfit(lambda: f"'{name}' must be a tensor, found {_show(value)}")
    try:
        info = tensor_info(value)
    except NotATensor as not_a_tensor:
        reason = str(not_a_tensor)  # the exception's name is unbound once the handler ends
        return Unfit(lambda: f"'{name}' must be a tensor: {reason}")
    except MissingMetadata as missing:
        return Skip(SkipReason.MISSING_METADATA, f"'{name}' needs shape metadata: {missing} "
                                        "(pass example_inputs= to apply, or use torch.export)")
    if declared.dtypes is not None and info.dtype not in declared.dtypes:
        return Unfit(lambda: f"'{name}' has dtype {info.dtype}, expected one of "
                             f"{', '.join(map(str, declared.dtypes))}")
    if declared.dims is None:
        return {}
    try:
        unified = unify_dims(declared.dims, tuple(info.shape), bound)
    except Exception as error:
        if not is_size_error(error):
            raise
        shape = tuple(info.shape)  # the names of the exception are unbound once the handler ends
        return Skip(SkipReason.DYNAMIC_SIZE,
            lambda: f"'{name}' has shape {shape}: whether it fits {_show_dims(declared.dims)} "
            f"depends on a size the graph leaves symbolic; {OPT_IN}")
    if unified is None:
        return Unfit(lambda: f"'{name}' has shape {tuple(info.shape)}, which does not fit "
                             f"{_show_dims(declared.dims)}")
    return unified


def value_type_problem(name: str, declared: CaptureType, value: Any) -> str | None:
    """Why ``value`` does not fit the declared type of capture ``name`` (None: it fits); not for tensor types."""
    if isinstance(declared, ScalarType):
        if not _scalar_fits(declared.name, value):
            return f"'{name}' must be a {declared.name} literal, found {_show(value)}"
    elif isinstance(declared, SequenceType):
        if not isinstance(value, list | tuple) or not all(_element_fits(declared.element, v) for v in value):
            return f"'{name}' must be a {declared.name}, found {_show(value)}"
    elif isinstance(declared, NodeType | AttrType | ModuleType) and not isinstance(value, torch.fx.Node):
        return f"'{name}' must be a node, found {_show(value)}"
    return None


def _same_function(expected: Any, actual: Any) -> bool:
    if expected is actual:
        return True
    packet = getattr(actual, "overloadpacket", None)
    return packet is not None and packet is expected


def _element_fits(element: str | None, value: Any) -> bool:
    """An item of a ``list[...]``/``tuple[...]`` capture: ``Tensor`` items are nodes, ``int`` ones ints."""
    if element == "Tensor":
        return isinstance(value, torch.fx.Node)
    if element is not None:
        return _scalar_fits(element, value)
    return True


def _scalar_fits(type_name: str, value: Any) -> bool:
    if isinstance(value, torch.fx.Node):
        return False
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "float":
        return isinstance(value, float)
    if type_name == "bool":
        return isinstance(value, bool)
    if type_name == "str":
        return isinstance(value, str)
    if type_name == "dtype":
        return isinstance(value, torch.dtype)
    if type_name == "slice":
        return isinstance(value, slice)
    return isinstance(value, int | float | bool)


@attrs.frozen
class Unreadable:
    """Why a bound call cannot give a pattern's arguments: ``parameter`` is not given (``given`` is
    missing), or is given (as ``given``) where the pattern leaves it out and not at its default."""

    parameter: str
    given: Any


def named_values(names: tuple[str, ...], rest: bool, bound: BoundCall) -> list[Any] | Unreadable:
    """The values of the parameters ``names`` in a bound call, in order (defaults for those not given).

    Every other parameter the call gives must hold its default, unless ``rest`` (the pattern ends in ``...``).
    """
    for name, given in bound.explicit.items():
        if name in names or rest:
            continue
        if name not in bound.defaults or not holds_default(given, bound.defaults[name]):
            return Unreadable(name, given)
    values = []
    for name in names:
        value = bound.value(name, _MISSING)
        if value is _MISSING:
            return Unreadable(name, _MISSING)
        values.append(value)
    return values


def _show(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        return f"node '{value.name}'"
    return repr(value)


def _show_dims(dims: tuple[Any, ...]) -> str:
    shown = ["..." if isinstance(d, DimRest) else d.name if isinstance(d, DimSymbol) else str(d) for d in dims]
    return f"Tensor[{', '.join(shown)}]"


def _describe_node(node: torch.fx.Node, module: torch.nn.Module | None) -> str:
    if node.op == "call_module" and module is not None:
        return f"call_module {type(module).__name__} '{node.name}'"
    if node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target))
        return f"{name} '{node.name}'"
    return f"{node.op} {node.target} '{node.name}'"

