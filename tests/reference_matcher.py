"""The test oracle for matching: a plain interpreter of patterns, and a naive engine built on it.

:class:`ReferenceMatcher` interprets a rule's templates with backtracking generators over immutable
states, from the same pieces as the compiled matcher the engine runs (:mod:`fxrules.match.primitives`
for types, argument binding and steps; :meth:`Matcher.refusal` once the structure matched): the
``matching`` fixture of ``conftest.py`` runs the matching tests against both, and the differential
tests compare the engine with :func:`reference_matches`, every rule at every node, no index, no early
reject.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.fx

from fxrules.diagnostics import Span
from fxrules.lang.families import map_member_call
from fxrules.lang.ir import (
    AltTemplate,
    Capture,
    CaptureType,
    Literal,
    ModuleType,
    OpKind,
    OpTemplate,
    Rule,
    RuleSet,
    SeqTemplate,
    SliceTemplate,
    Template,
    TensorType,
    Wildcard,
    matching_order,
)
from fxrules.lang.signatures import BoundCall, CallSignature, literal_equal
from fxrules.match.matcher import Matcher
from fxrules.match.primitives import (
    MISSING,
    Budget,
    BudgetExhausted,
    Match,
    SeenMatches,
    State,
    Unfit,
    Unreadable,
    describe_node,
    named_values,
    output_keys,
    output_nodes,
    same_function,
    show,
    tensor_fit,
    users_near,
    value_type_problem,
)
from fxrules.match.skips import Skip


class ReferenceMatcher(Matcher):
    """:class:`Matcher` with :meth:`match` interpreted template by template instead of compiled."""

    def __init__(self, gm: torch.nn.Module, explain: bool = False,
                 retired: Mapping[torch.fx.Node, None] | None = None) -> None:
        super().__init__(gm, explain, retired)
        self.rule_types: Mapping[str, CaptureType] = {}

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
                self.misses.output = ""
                refusal = self.refusal(rule, state)
                if refusal is not None:
                    skip = skip or refusal
                    seen.rejected(state.bindings, state.nodes)
                    continue
                outputs = output_nodes(output_keys(rule.pattern), state.nodes)
                assert None not in outputs, "a complete match binds every output"
                return Match(rule, outputs, tuple(state.nodes.values()), state.bindings,  # type: ignore[arg-type]
                             state.modules)
        except BudgetExhausted:
            raise budget.skip() from None
        if skip is not None:
            raise skip
        return None

    def _outputs(self, rule: Rule, anchor: torch.fx.Node) -> Iterator[State]:
        first, *others = [(self._label(rule, i), rule.pattern[i]) for i in matching_order(rule.pattern)]
        label, template = first
        for state in self._labelled(label, self.match_template(template, anchor, State())):
            yield from self._other_outputs(others, state)

    def _fail(self, state: State, condition: str, detail: Callable[[], str], span: Span) -> None:
        self.misses.fail(len(state.nodes), condition, detail, span)

    @staticmethod
    def _label(rule: Rule, position: int) -> str:
        if len(rule.pattern) == 1:
            return ""
        name = getattr(rule.pattern[position], "name", None)
        return f"output {position + 1} '{name}': " if name else f"output {position + 1}: "

    def _labelled(self, label: str, states: Iterator[State]) -> Iterator[State]:
        """``states``, with the tracer told which output fails whenever the generator runs."""
        while True:
            self.misses.output = label
            state = next(states, None)
            if state is None:
                return
            yield state

    def _other_outputs(self, outputs: list[tuple[str, Template]], state: State) -> Iterator[State]:
        if not outputs:
            yield state
            return
        (label, head), *tail = outputs
        if isinstance(head, OpTemplate) and id(head) in state.nodes:  # an interior node that is also an output
            yield from self._other_outputs(tail, state)
            return
        self.misses.output = label
        near = self._candidates_near(state)
        if not near:
            self._fail(state, "target", lambda: "no node uses what the other outputs matched",
                             head.span)  # type: ignore[union-attr]
        for candidate in near:
            self.budget.step()  # each node tried as a further output: a shared input may have thousands of users
            for next_state in self._labelled(label, self.match_template(head, candidate, state)):
                yield from self._other_outputs(tail, next_state)

    def _candidates_near(self, state: State) -> list[torch.fx.Node]:
        """Nodes that may be further outputs: users of what the match bound so far."""
        bound = [*state.nodes.values(), *(v for v in state.bindings.values() if isinstance(v, torch.fx.Node))]
        return users_near(bound, set(state.nodes.values()), self.retired)

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
                self._fail(state, "argument", lambda: f"expected a sequence of {len(template.items)}, found "
                                                    f"{show(value)}", template.span)
                return
            yield from self.match_all(template.items, value, state)
        elif isinstance(template, SliceTemplate):
            if not isinstance(value, slice):
                self._fail(state, "argument", lambda: f"expected a slice, found {show(value)}", template.span)
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
            self._fail(state, "literal", lambda: f"expected {template.value!r}, found {show(value)}",
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
                self._fail(state, "argument", lambda: f"'{name}' is bound to {show(previous)} but here is "
                                                    f"{show(value)}", template.span)
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
            self._fail(state, "target", lambda: f"expected {template.describe()}, found {show(value)}",
                             template.span)
            return
        node = value
        if id(template) in state.nodes:
            if state.nodes[id(template)] is node:
                yield state
            else:
                self._fail(state, "argument", lambda: f"'{template.name}' is used twice but the graph has two "
                                                    "different nodes", template.span)
            return
        if node in state.nodes.values():
            self._fail(state, "target", lambda: f"node '{node.name}' is already matched by another operation",
                             template.span)
            return
        bound = self._node_call(template, node, state)
        if bound is MISSING:
            return
        self.budget.step()
        state = map_node(state, template, node)
        if template.binds is not None:
            state = self._bind_module_or_attr(template, node, state)  # type: ignore[assignment]
            if state is None:
                return
        if template.kind is OpKind.ATTR:
            yield state
            return
        yield from self.match_arguments(template, node, bound, state)

    def _node_call(self, template: OpTemplate, node: torch.fx.Node, state: State) -> Any:
        """The node's arguments bound to the template's parameters; None: as written; MISSING: no match."""
        kind, target = template.kind, template.target
        if kind is OpKind.FAMILY:
            return self._family_call(template, node, state)
        module = self.module_of(node) if node.op == "call_module" else None
        fits = (
            (kind is OpKind.FUNCTION and node.op == "call_function" and same_function(target, node.target))
            or (kind is OpKind.METHOD and node.op == "call_method" and node.target == target)
            or (kind is OpKind.MODULE and module is not None and isinstance(module, target))
            or (kind is OpKind.ATTR and node.op == "get_attr")
        )
        if not fits:
            self._fail(state, "target",
                             lambda: f"expected {template.describe()}, found {describe_node(node, module)}",
                             template.span)
            return MISSING
        if template.bound is None or template.signature is None:
            return None
        return self._bind_node(template.signature, node)

    def _family_call(self, template: OpTemplate, node: torch.fx.Node, state: State) -> Any:
        family = template.target
        module = self.module_of(node) if node.op == "call_module" else None
        member = None
        for candidate in family.members:
            if (candidate.kind.value == node.op and (
                    (candidate.kind is OpKind.FUNCTION and same_function(candidate.target, node.target))
                    or (candidate.kind is OpKind.METHOD and candidate.target == node.target)
                    or (candidate.kind is OpKind.MODULE and isinstance(module, candidate.target)))):
                member = candidate
                break
        if member is None:
            self._fail(state, "target", lambda: f"expected a member of family {family.name}, found "
                                              f"{describe_node(node, module)}", template.span)
            return MISSING
        if member.signature is None or template.bound is None:
            return None
        bound = self._bind_node(member.signature, node)
        if bound is None:
            return None
        mapped = map_member_call(member, family, bound, module)
        if mapped.bound is None:
            self._fail(state, "argument", lambda: mapped.reason, template.span)
            return MISSING
        return mapped.bound

    @staticmethod
    def _bind_node(signature: CallSignature, node: torch.fx.Node) -> BoundCall | None:
        return signature.bind(node.args, node.kwargs)

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
            if values.given is MISSING:
                self._fail(state, "argument", lambda: f"argument '{name}' is not given", template.span)
            else:
                given = values.given
                self._fail(state, "argument", lambda: f"argument '{name}' is {show(given)}; the pattern "
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
            self._fail(state, "argument", lambda: f"expected {len(template.args)} positional argument(s), found "
                                                f"{len(args)}", template.span)
            return
        names = [name for name, _ in template.kwargs]
        if (any(name not in names for name in node.kwargs) and not template.rest) or any(
                name not in node.kwargs for name in names):
            self._fail(state, "argument", lambda: f"keyword arguments differ: expected {names}, found "
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
    def _bind_module_or_attr(self, template: OpTemplate, node: torch.fx.Node, state: State) -> State | None:
        name = template.binds
        assert name is not None
        value: Any = node if template.kind is OpKind.ATTR else self.module_of(node)
        previous = state.bindings.get(name, MISSING)
        if previous is not MISSING and previous is not value:
            self._fail(state, "argument", lambda: f"'{name}' is bound to another module", template.span)
            return None
        if template.kind is OpKind.MODULE:
            declared = self.rule_types.get(name)
            if isinstance(declared, ModuleType) and not declared.fits(value):
                self._fail(state, "type", lambda: f"'{name}' must be exactly {declared.cls.__name__}, "
                                                        f"without hooks; found {type(value).__name__}", template.span)
                return None
            state = bind_module(state, name, str(node.target))
        return state.bind(name, value)

    def check_type(self, name: str, declared: CaptureType, value: Any, state: State, span: Span) -> State | None:
        """The state with ``value`` checked against the declared type of capture ``name`` (and the dims of a
        tensor type bound), or None when it does not fit."""
        if isinstance(declared, TensorType):
            fit = tensor_fit(name, declared, value, state.bindings)
            if isinstance(fit, Unfit):
                self._fail(state, "type", fit.detail, span)
                return None
            if isinstance(fit, Skip):
                return lacking_metadata(state, fit)
            for symbol, size in fit.items():
                state = state.bind(symbol, size)
            return state
        problem = value_type_problem(name, declared, value)
        if problem:
            self._fail(state, "type", lambda: problem, span)
            return None
        return state



#: (rule name, anchor node name) -> names of the nodes the match covers.
Matches = dict[tuple[str, str], frozenset[str]]


def reference_matches(gm: torch.fx.GraphModule, ruleset: RuleSet) -> Matches:
    """Every usable match: :meth:`ReferenceMatcher.match` at every (rule, node) pair; a :class:`Skip` is not
    a match."""
    found: Matches = {}
    for rule in ruleset:
        for node in gm.graph.nodes:
            try:
                match = ReferenceMatcher(gm).match(rule, node)
            except Skip:
                continue
            if match is not None:
                found[rule.name, node.name] = frozenset(n.name for n in match.nodes)
    return found

def reference_anchors(gm: torch.fx.GraphModule, ruleset: RuleSet) -> set[tuple[str, str]]:
    """The (rule name, anchor node name) pairs of :func:`reference_matches`."""
    return set(reference_matches(gm, ruleset))


def predict_pass(gm: torch.fx.GraphModule, ruleset: RuleSet, matches: Matches | None = None) -> set[tuple[str, str]]:
    """What one pass fires if no rewrite changes any other match: greedy in graph order, rules in file order.

    At each node, the first rule (in file order) whose match shares no node
    with a match fired before fires.  This equals the engine's pass only when
    rewrites do not interact (e.g. graphs from ``strategies.site_graphs``).
    """
    matches = reference_matches(gm, ruleset) if matches is None else matches
    claimed: set[str] = set()
    fired: set[tuple[str, str]] = set()
    for node in gm.graph.nodes:
        if node.name in claimed:
            continue
        for rule in ruleset:
            covered = matches.get((rule.name, node.name))
            if covered is not None and not covered & claimed:
                claimed |= covered
                fired.add((rule.name, node.name))
                break
    return fired


# State steps only the interpreter takes (the compiled matcher keeps these facts in its closures).
def map_node(state: State, template: OpTemplate, node: torch.fx.Node) -> State:
    bindings = {**state.bindings, template.name: node} if template.name else state.bindings
    return State(bindings, {**state.nodes, id(template): node}, state.modules, state.missing_metadata)


def bind_module(state: State, name: str, qualified_name: str) -> State:
    return State(state.bindings, state.nodes, {**state.modules, name: qualified_name}, state.missing_metadata)


def lacking_metadata(state: State, skip: Skip) -> State:
    """The state with a typed capture accepted without metadata: the first such skip is kept."""
    if state.missing_metadata is not None:
        return state
    return State(state.bindings, state.nodes, state.modules, skip)
