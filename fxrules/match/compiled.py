"""Rules compiled once into matchers made of plain closures: the engine's fast path for matching.

The generic :class:`~fxrules.match.matcher.Matcher` interprets a pattern's templates with backtracking
generators over immutable states; that costs 10-20 µs an attempt, even when the anchor's first
argument already rules the match out, and most attempts are such near misses.
:func:`compile_rule` turns a rule once into one step per template (a target test, an argument
reader built from the same :class:`~fxrules.lang.signatures.BindingPlan` the generic matcher binds
with, captures and literals) that bind into one mutable :class:`_Attempt`.  Before any binding,
``may_match`` checks the anchor's target and that the operand calls and the literals the pattern
needs are among its arguments (and so on down the pattern): most near misses end there, in about
a microsecond.

A compiled rule gives the generic matcher's answer: the first structural match in the generic
order (operands left to right, a commutative operation unswapped before swapped, the options of
``A | B`` in order) that passes the same :meth:`Matcher.check_usable
<fxrules.match.matcher.Matcher.check_usable>`, else the first skip, else None.  The generic matcher
backtracks into the most recent choice with an option left; the compiled one tries a choice's next
option on the spot when nothing chosen since is left to backtrack into, and otherwise starts over,
replaying the choices made up to the most recent open one and taking its next option (the same
depth-first order, without generators).  The generic matcher stays the reference the tests compare
against, and the matcher of ``explain=True`` (it records near misses).

Both count the same match steps against the same budget (see :mod:`fxrules.match.matcher`): an operation
tried at a node that calls its target, each option of a choice, each structural match; a replay
counts only what it explores beyond the choices it replays.  The compiled matcher rules some nodes
out by their arguments before it would count anything there (the generic matcher finds no match
there either), so at an anchor it never takes more steps than the generic matcher: where the generic
matcher stays within the budget, the compiled one gives its answer.

For a whole graph, or a region of it, :attr:`CompiledRule.candidates` finds at once the nodes where
``may_match`` may hold: the nodes the graph's own op/target index lists for the output's target,
kept when an argument is among the operand operation's candidates (found the same way, or through
their users when they are fewer) or equals a required literal, with set containment tests that
make no Python call per node.  The engine's first pass visits only these.

:func:`compile_ruleset` does this once per :class:`~fxrules.lang.ir.RuleSet` object, together with the
other things ``apply`` derives from the rules alone (the helper calls), so an ``apply``
that finds nothing to do costs little more than the index lookups.

Compiled: single-output patterns of function and method calls (commutative or not) and of family
calls (the member the node calls, found by its target, or its module's class, maps its arguments
onto the family's with :func:`~fxrules.lang.families.map_member_call`), alternatives, typed captures
(tensor types too: a node without shape metadata is accepted provisionally, as the generic matcher
does, and the structural match it completes is skipped for ``missing metadata``), literals, ``_``,
lists and slices.  Not compiled (:func:`compile_rule` returns None): modules and attributes named in
the pattern, and several outputs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import torch.fx

from fxrules.lang.families import family_parameters, map_member_call, parameter_map
from fxrules.lang.ir import (
    AltTemplate,
    Capture,
    CaptureType,
    Family,
    FamilyMember,
    HelperTemplate,
    Literal,
    OpKind,
    OpTemplate,
    Rule,
    RuleSet,
    SeqTemplate,
    SliceTemplate,
    Template,
    TensorType,
    Wildcard,
    walk,
)
from fxrules.lang.signatures import BindingPlan, CallSignature, holds_default, literal_equal
from fxrules.match.matcher import (
    Budget,
    BudgetExhausted,
    Match,
    Matcher,
    NodeIndex,
    Nodes,
    SeenMatches,
    State,
    Unfit,
    Unreadable,
    named_values,
    tensor_fit,
    value_type_problem,
)
from fxrules.match.skips import Skip
from fxrules.memo import per_object

Node = torch.fx.Node


class _Attempt:
    """One run of a compiled matcher: what it bound, and the option taken at each choice."""

    __slots__ = ("bindings", "budget", "matcher", "missing_metadata", "nodes", "orders", "replayed")

    def __init__(self, replayed: tuple[int, ...], matcher: Matcher, budget: Budget) -> None:
        self.bindings: dict[str, Any] = {}  # in binding order, as the generic State's
        self.nodes: dict[int, Node] = {}  # id(OpTemplate) -> node, in matching order
        self.missing_metadata: Skip | None = None  # as the generic State's: the first typed capture without it
        self.matcher = matcher  # for what a node alone does not say: the module a call_module calls
        self.budget = budget  # the anchor's, shared by its replays
        self.replayed = replayed  # the options to take at the first choices
        self.orders: list[tuple[int, int]] = []  # (option taken, last option) at each choice met

    def step(self) -> None:
        """Count a match step, unless it only replays what an earlier run of the anchor counted."""
        if len(self.orders) >= len(self.replayed):
            self.budget.step()

    def next_replay(self) -> tuple[int, ...] | None:
        """The choices of the next run in depth-first order: the most recent open choice's next option."""
        orders = self.orders
        for index in range(len(orders) - 1, -1, -1):
            taken, last = orders[index]
            if taken < last:
                return (*(option for option, _ in orders[:index]), taken + 1)
        return None


class _Backtrack(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A failure after a choice with an unexplored option: start over to explore it."""


#: Matches one template against one value, binding into the attempt; False when it does not match.
Step = Callable[[Any, _Attempt], bool]


class CompiledRule:
    """One rule's compiled matcher."""

    def __init__(self, rule: Rule, root: Step, may_match: Callable[[Node], bool],
                 may_match_anchor: Callable[[Node], bool] | None, candidates: CandidatesOf,
                 satisfiers: Satisfiers) -> None:
        self.rule = rule
        self._root = root
        #: may_match(anchor) is False when the rule certainly does not match there (nothing to report
        #: either): the anchor does not call the output's target, or lacks an operand call or a literal
        #: the pattern needs.  Most attempts end here, before any argument binding.
        self.may_match = may_match
        #: may_match at a node the rule index filed under one of the rule's anchor keys, whose target
        #: is known to fit; None when nothing else is left to check.
        self.may_match_anchor = may_match_anchor
        #: candidates(found, among=None): the nodes of ``found.graph`` (among ``among``) where may_match may
        #: hold (None: every anchor node), found for all at once with set and tuple containment tests
        self.candidates = candidates
        #: what can satisfy a required argument of an operation of the pattern (see ``_Run._wake``)
        self.satisfiers = satisfiers

    def match(self, anchor: Node, matcher: Matcher) -> Match | None:
        """What ``matcher.match(rule, anchor)`` returns (a match or None) or raises (:class:`Skip`)."""
        return self.match_candidate(anchor, matcher) if self.may_match(anchor) else None

    def match_candidate(self, anchor: Node, matcher: Matcher) -> Match | None:
        """:meth:`match` at an anchor for which :attr:`may_match` holds."""
        skip: Skip | None = None
        budget = matcher.budget = Budget()
        seen = SeenMatches()
        replayed: tuple[int, ...] | None = ()
        while replayed is not None:
            attempt = _Attempt(replayed, matcher, budget)
            try:
                matched = self._root(anchor, attempt)
                if matched:
                    budget.step()
            except _Backtrack:
                matched = False
            except BudgetExhausted:
                raise budget.skip() from None
            if matched and seen.is_new(attempt.bindings, attempt.nodes):
                state = State(attempt.bindings, attempt.nodes, missing_metadata=attempt.missing_metadata)
                try:
                    matcher.check_usable(self.rule, state)
                except Skip as reason:  # the generic matcher goes on to the other options, and raises the first
                    skip = skip or reason
                    seen.rejected(attempt.bindings, attempt.nodes)
                else:
                    return matcher.to_match(self.rule, state)
            replayed = attempt.next_replay()
        if skip is not None:
            raise skip
        return None


def compile_rule(rule: Rule) -> CompiledRule | None:
    """The rule's compiled matcher, or None when its pattern is outside the compiled subset."""
    output = rule.pattern[0]
    if len(rule.pattern) != 1:
        return None
    compiler = _Compiler(rule.types)
    try:
        if isinstance(output, AltTemplate):
            if not all(_compiles(o) for o in output.options):
                return None
            step = compiler.step(output)
            options = tuple(compiler.operation(o) for o in output.options)  # type: ignore[arg-type]
            return CompiledRule(rule, step, _any_option(options), _any_option(options), _union_of_options(options),
                                compiler.satisfiers)
        if not _compiles(output):
            return None
        root = compiler.operation(output)  # type: ignore[arg-type]
    except _UnsupportedTemplateError:
        return None
    return CompiledRule(rule, root.match_checked, root.may_match, root.has_required if root.required else None,
                        root.candidates, compiler.satisfiers)


def _any_option(options: tuple[_Operation, ...]) -> Callable[[Node], bool]:
    def may_match_an_option(node: Node) -> bool:
        return any(option.may_match(node) for option in options)

    return may_match_an_option


def _union_of_options(options: tuple[_Operation, ...]) -> CandidatesOf:
    def candidates_of_an_option(found: Candidates, among: set[Node] | None = None) -> Nodes | None:
        sets = [option.candidates(found, among) for option in options]
        return None if any(s is None for s in sets) else set().union(*sets)  # type: ignore[arg-type]

    return candidates_of_an_option


@attrs.frozen(eq=False)
class Satisfiers:
    """What can satisfy a required argument of compiled operations: a node calling one of ``keys``
    (directly, or one of its aten overloads) or any module (``modules``), or a literal passing one of
    ``literal_tests``."""

    keys: frozenset[tuple[str, Any]] = frozenset()
    modules: bool = False
    literal_tests: tuple[Callable[[Any], bool], ...] = ()

    def __or__(self, other: Satisfiers) -> Satisfiers:
        return Satisfiers(self.keys | other.keys, self.modules or other.modules,
                          self.literal_tests + other.literal_tests)

    def admit(self, value: Any) -> bool:
        """Whether ``value`` may satisfy one of the required arguments."""
        if not isinstance(value, Node):
            return any(test(value) for test in self.literal_tests)
        if value.op == "call_module":
            return self.modules
        keys, target = self.keys, value.target
        try:
            if (value.op, target) in keys:
                return True
        except TypeError:  # an unhashable target: it may
            return True
        packet = getattr(target, "overloadpacket", None)
        return packet is not None and (value.op, packet) in keys


@attrs.frozen(eq=False)
class CompiledRuleSet:
    """What ``apply`` derives from a rule set alone, computed once per :class:`RuleSet` object."""

    matchers: Mapping[int, CompiledRule | None]  # id(rule) -> its compiled matcher (None: not compiled)
    helper_calls: tuple[tuple[Rule, HelperTemplate], ...]  # every helper a replacement calls


@per_object
def compile_ruleset(ruleset: RuleSet) -> CompiledRuleSet:
    """The rule set's :class:`CompiledRuleSet`, built on first use for each RuleSet object."""
    return CompiledRuleSet(
        matchers={id(rule): compile_rule(rule) for rule in ruleset},
        helper_calls=tuple((rule, helper) for rule in ruleset for output in rule.replacement
                           for helper in _helpers_in(output)),
    )


def _helpers_in(template: Template) -> list[HelperTemplate]:
    """The helper calls of a replacement: ``@h(x)`` as a value, and ``@h(...)(x)`` as a module to call."""
    found = []
    for part in walk(template):
        helper = part.target if isinstance(part, OpTemplate) else part
        if isinstance(helper, HelperTemplate):
            found.append(helper)
    return found


class _UnsupportedTemplateError(Exception):
    """The pattern has a template the compiled matcher does not handle."""


class _Compiler:
    """Builds the steps of one pattern, one per template object (a shared operation is one step)."""

    def __init__(self, types: Mapping[str, CaptureType]) -> None:
        self.types = types
        self.steps: dict[int, Step] = {}
        self.satisfiers = Satisfiers()  # of every required argument of the pattern's operations

    def step(self, template: Template) -> Step:
        known = self.steps.get(id(template))
        if known is None:
            known = self.steps[id(template)] = self._build(template)
        return known

    def _build(self, template: Template) -> Step:
        if isinstance(template, Capture):
            return _capture_step(template.name, self.types.get(template.name))
        if isinstance(template, Literal):
            return _literal_step(template.value)
        if isinstance(template, Wildcard):
            return _anything
        if isinstance(template, SeqTemplate):
            return _sequence_step(tuple(self.step(t) for t in template.items))
        if isinstance(template, SliceTemplate):
            return _slice_step(tuple(self.step(t) for t in (template.start, template.stop, template.step)))
        if isinstance(template, AltTemplate):
            return _alternatives_step(tuple(self.step(t) for t in template.options))
        if _compiles(template):
            operation = _FamilyOperation if template.kind is OpKind.FAMILY else _Operation  # type: ignore[union-attr]
            return operation(template, self).match  # type: ignore[arg-type]
        raise _UnsupportedTemplateError(type(template).__name__)

    def operation(self, template: OpTemplate) -> _Operation:
        step = self.step(template)
        return step.__self__  # type: ignore[attr-defined]  # the bound method _Operation.match


def _compiles(template: Template) -> bool:
    """An operation the compiled matcher handles: a function or method call, or a family's."""
    return isinstance(template, OpTemplate) and template.kind in (OpKind.FUNCTION, OpKind.METHOD, OpKind.FAMILY) \
        and template.binds is None


# ---------------------------------------------------------------- captures, literals, lists


def _anything(value: Any, attempt: _Attempt) -> bool:
    return True


def _capture_step(name: str, declared: CaptureType | None) -> Step:
    if isinstance(declared, TensorType):
        return _tensor_capture_step(name, declared)

    def capture(value: Any, attempt: _Attempt) -> bool:
        if name in attempt.bindings:
            return _same_as_bound(attempt.bindings[name], value)
        if declared is not None and value_type_problem(name, declared, value) is not None:
            return False
        attempt.bindings[name] = value
        return True

    return capture


def _tensor_capture_step(name: str, declared: TensorType) -> Step:
    """A tensor-typed capture, checked with the generic matcher's :func:`~fxrules.match.matcher.tensor_fit`."""

    def tensor_capture(value: Any, attempt: _Attempt) -> bool:
        bindings = attempt.bindings
        if name in bindings:
            return _same_as_bound(bindings[name], value)
        fit = tensor_fit(name, declared, value, bindings)
        if isinstance(fit, Unfit):
            return False
        if isinstance(fit, Skip):
            if attempt.missing_metadata is None:  # the first one is reported, as the generic matcher does
                attempt.missing_metadata = fit
        else:
            bindings.update(fit)  # its dims first, then the capture: the generic State's binding order
        bindings[name] = value
        return True

    return tensor_capture


def _same_as_bound(previous: Any, value: Any) -> bool:
    """A non-linear capture (x * x) seen again: the same node, or an equal literal."""
    if isinstance(previous, Node) or isinstance(value, Node):
        return previous is value
    return literal_equal(previous, value)


def _literal_test(expected: Any) -> Callable[[Any], bool]:
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


def _literal_step(expected: Any) -> Step:
    test = _literal_test(expected)

    def literal(value: Any, attempt: _Attempt) -> bool:
        return test(value)

    return literal


def _alternatives_step(options: tuple[Step, ...]) -> Step:
    def alternatives(value: Any, attempt: _Attempt) -> bool:
        return _choose(tuple(((option,), (value,)) for option in options), attempt)

    return alternatives


def _match_all(steps: tuple[Step, ...], values: tuple[Any, ...], attempt: _Attempt) -> bool:
    for step, value in zip(steps, values, strict=True):  # noqa: SIM110 - a loop: all() would add a generator
        if not step(value, attempt):
            return False
    return True


def _sequence_step(items: tuple[Step, ...]) -> Step:
    def sequence(value: Any, attempt: _Attempt) -> bool:
        return isinstance(value, list | tuple) and len(value) == len(items) and _match_all(items, tuple(value), attempt)

    return sequence


def _slice_step(parts: tuple[Step, ...]) -> Step:
    def slice_(value: Any, attempt: _Attempt) -> bool:
        return isinstance(value, slice) and _match_all(parts, (value.start, value.stop, value.step), attempt)

    return slice_


# ---------------------------------------------------------------- operations


#: Where a parameter's value comes from in a call of a given shape.
_POSITION, _KEYWORD, _DEFAULT = range(3)


class _PlannedReader:
    """Reads a pattern operation's parameters, in the pattern's order, from calls of one binding plan.

    ``None`` from :meth:`read`: no operand order can match (a parameter the pattern names is not
    given and has no default, or one it leaves out is given and not at its default).
    """

    def __init__(self, plan: BindingPlan, expected: tuple[str, ...], rest: bool, pack_from: int | None) -> None:
        given = dict(plan.slots)
        self.pack_from = pack_from if plan.packed else None
        self.impossible = False
        self.sources: list[tuple[int, Any]] = []
        for name in expected:
            if name in given:
                key = given[name]
                self.sources.append((_POSITION, key) if isinstance(key, int) else (_KEYWORD, key))
            elif name in plan.defaults:
                self.sources.append((_DEFAULT, plan.defaults[name]))
            else:
                self.impossible = True
        # Parameters the call gives but the pattern leaves out must hold their defaults (unless `...`).
        self.left_out: list[tuple[int | str, Any]] = []
        for name, key in () if rest else plan.slots:
            if name in expected:
                continue
            if name not in plan.defaults:
                self.impossible = True
            self.left_out.append((key, plan.defaults.get(name)))
        # The usual call: every parameter the pattern names given by position, nothing else to check.
        self.positions: Callable[[tuple[Any, ...]], Any] | None = None
        if not self.impossible and not self.left_out and self.pack_from is None and self.sources \
                and all(kind == _POSITION for kind, _ in self.sources):
            self.positions = operator.itemgetter(*(key for _, key in self.sources))
            self.single = len(self.sources) == 1  # itemgetter of one index gives the item, not a tuple

    def read(self, node: Node) -> tuple[Any, ...] | None:
        if self.positions is not None:
            values = self.positions(node.args)
            return (values,) if self.single else values
        if self.impossible:
            return None
        args, kwargs = node.args, node.kwargs
        if self.pack_from is not None:
            args = (*args[: self.pack_from], tuple(args[self.pack_from:]))
        for key, default in self.left_out:
            if not holds_default(args[key] if isinstance(key, int) else kwargs[key], default):
                return None
        return tuple(args[key] if kind == _POSITION else kwargs[key] if kind == _KEYWORD else key
                     for kind, key in self.sources)


class _Operation:
    """The step of one function or method call of the pattern: target, arguments, operands.

    As the generic matcher: arguments are compared by parameter name when the pattern's call and the
    node's call both bind unambiguously, else as written; a commutative operation also tries its
    first two operands swapped.
    """

    def __init__(self, template: OpTemplate, compiler: _Compiler) -> None:
        self.key = id(template)
        self.name = template.name
        self.target = template.target
        self.op = template.kind.value
        self.commutative = template.commutative
        self.rest = template.rest
        written = (*template.args, *(value for _, value in template.kwargs))
        self.written_steps = tuple(compiler.step(t) for t in written)
        self.positional = len(template.args)
        self.keywords = tuple(name for name, _ in template.kwargs)
        self.signature: CallSignature | None = None
        self.expected: tuple[str, ...] | None = None  # the parameters the pattern names, when it binds by name
        self.readers: dict[int, _PlannedReader] = {}  # id(plan) -> its reader (plans live in the signature)
        if template.bound is not None and template.signature is not None:
            self.signature = template.signature
            self.expected = tuple(template.bound)
            self.named_steps = tuple(compiler.step(t) for t in template.bound.values())
            if len(self.named_steps) >= 2:
                self.swapped_named_steps = (self.named_steps[1], self.named_steps[0], *self.named_steps[2:])
        requirements = self._required_arguments(template, compiler)
        self.required = tuple(r.test for r in requirements)
        # Operands first: narrowing by them follows use edges; by literals, it scans the nodes left.
        self.narrowers = tuple(r.narrow for r in sorted(requirements, key=lambda r: r.scans))

    def may_be_operand(self, value: Any) -> bool:
        """The value may match this operation: a node passing :meth:`may_match`."""
        return isinstance(value, Node) and self.may_match(value)

    def may_match(self, node: Node) -> bool:
        """The cheap necessary conditions: the node calls the target with every required argument."""
        return self.fits(node) and (not self.required or self.has_required(node))

    def fits(self, node: Node) -> bool:
        """The node calls the operation's target."""
        if node.op != self.op:
            return False
        target = node.target
        if self.op == "call_method":
            return bool(target == self.target)
        return target is self.target or getattr(target, "overloadpacket", None) is self.target

    def match(self, value: Any, attempt: _Attempt) -> bool:
        if not isinstance(value, Node):
            return False
        nodes = attempt.nodes
        if self.key in nodes:  # a shared operation of a DAG pattern: the node it matched before
            return nodes[self.key] is value
        if not self.fits(value) or value in nodes.values():
            return False
        if self.required and not self.has_required(value):
            return False
        return self.match_checked(value, attempt)

    def match_checked(self, node: Node, attempt: _Attempt) -> bool:
        """:meth:`match` of a node already found new to the attempt and passing :meth:`may_match`."""
        attempt.step()
        attempt.nodes[self.key] = node
        if self.name:
            attempt.bindings[self.name] = node
        signature = self.signature
        plan = signature.plan(node.args, node.kwargs) if signature is not None else None
        if plan is None:
            return self._as_written(node, attempt)
        reader = self.readers.get(id(plan))
        if reader is None:
            reader = self.readers[id(plan)] = _PlannedReader(plan, self.expected, self.rest,  # type: ignore[arg-type]
                                                             signature.pack_from)  # type: ignore[union-attr]
        values = reader.read(node)
        return values is not None and self._by_name(values, attempt)

    def index_keys(self) -> tuple[tuple[str, Any], ...] | None:
        """The graph index's (op, target) keys of the nodes that call the operation's target."""
        return ((self.op, self.target),)

    def candidates(self, found: Candidates, among: set[Node] | None = None) -> Nodes | None:
        """The nodes of ``found.graph`` (``among`` them, if given) that may match the operation: every node
        where :meth:`may_match` holds, and perhaps others, from the graph's own index; None when its index
        keys do not say."""
        if among is None and self.key in found.of_operation:
            return found.of_operation[self.key]
        keys = self.index_keys()
        nodes: Nodes | None = None
        if keys is not None:
            groups = [found.calling(op, target) for op, target in keys]
            # one key's list as the index gives it: a set costs a hash per node, and a narrower scans a list as fast
            nodes = groups[0] if among is None and len(groups) == 1 else _in_any(groups, among)
            for narrow in self.narrowers:
                if not nodes:  # nothing left to narrow: the operands need not be looked for
                    break
                nodes = narrow(nodes, found)
        if among is None:
            found.of_operation[self.key] = nodes
        return nodes

    def has_required(self, node: Node) -> bool:
        """Every required test holds for some argument of the node (see :meth:`_required_arguments`)."""
        values = (*node.args, *node.kwargs.values()) if node.kwargs else node.args
        for test in self.required:
            for value in values:
                if test(value):
                    break
            else:
                return False
        return True

    def _by_name(self, values: tuple[Any, ...], attempt: _Attempt) -> bool:
        if self.commutative and len(values) >= 2 and values[0] is not values[1]:  # else swapped is the same
            return _choose(((self.named_steps, values), (self.swapped_named_steps, values)), attempt)
        if self.commutative:
            attempt.step()  # the one operand order: an option, as the generic matcher counts it
        return _match_all(self.named_steps, values, attempt)

    def _as_written(self, node: Node, attempt: _Attempt) -> bool:
        args, kwargs = node.args, node.kwargs
        count = self.positional
        if len(args) < count or (len(args) > count and not self.rest):
            return False
        if (not self.rest and any(name not in self.keywords for name in kwargs)) or any(
                name not in kwargs for name in self.keywords):
            return False
        keyword_values = tuple(kwargs[name] for name in self.keywords)
        values = (*args[:count], *keyword_values)
        if self.commutative and len(args) >= 2 and args[0] is not args[1]:  # else swapped is the same
            swapped = (args[1], args[0], *args[2:])
            return _choose(((self.written_steps, values),
                            (self.written_steps, (*swapped[:count], *keyword_values))), attempt)
        if self.commutative:
            attempt.step()  # the one operand order: an option, as the generic matcher counts it
        return _match_all(self.written_steps, values, attempt)

    def _required_arguments(self, template: OpTemplate, compiler: _Compiler) -> tuple[_Requirement, ...]:
        """Tests of which each must hold for some argument of a node the operation matches.

        Whichever way the call binds (by name, as written, operands swapped), an operand that is a call
        is one of the node's arguments (one that may match it, checked the same way down the pattern),
        and so is a literal, unless it could come from a default.  Checked first, they reject most near
        misses (another literal, another operand) without binding the call.  None for a target that
        takes sizes loose or as one tuple (x.view(2, 3) is x.view((2, 3))): an operand may be inside it.
        """
        signature = template.signature
        if signature is not None and signature.pack_from is not None:
            return ()
        return _operand_tests(template, compiler, _with_default(signature))


class _FamilyOperation(_Operation):
    """The step of a family's call: the node calls one of its members (the first that fits, in the
    family's order), whose arguments :func:`~fxrules.lang.families.map_member_call` maps onto the family's."""

    def __init__(self, template: OpTemplate, compiler: _Compiler) -> None:
        family: Family = template.target
        self.family = family
        #: (op, target) -> (position, member) of the first function or method member with that target
        self.by_target: dict[tuple[str, Any], tuple[int, FamilyMember]] = {}
        for position, member in enumerate(family.members):
            if member.kind is not OpKind.MODULE:
                self.by_target.setdefault(member.key, (position, member))
        self.module_members = tuple(m for m in family.members if m.kind is OpKind.MODULE)
        super().__init__(template, compiler)

    def fits(self, node: Node) -> bool:
        """The node calls a member (a module call may: which module it calls is checked when matching)."""
        if node.op == "call_module":
            return bool(self.module_members)
        return self._called_member(node) is not None

    def match_checked(self, node: Node, attempt: _Attempt) -> bool:
        attempt.nodes[self.key] = node
        if self.name:
            attempt.bindings[self.name] = node
        module = attempt.matcher.module_of(node) if node.op == "call_module" else None
        member = self._called_member(node) if module is None else next(
            (m for m in self.module_members if isinstance(module, m.target)), None)
        if member is None:
            return False
        bound = member.signature.bind(node.args, node.kwargs) \
            if member.signature is not None and self.expected is not None else None
        mapped = map_member_call(member, self.family, bound, module).bound if bound is not None else None
        if bound is not None and mapped is None:
            return False
        attempt.step()  # as the generic matcher: the node calls a member whose arguments map onto the family's
        if mapped is None:
            return self._as_written(node, attempt)
        values = named_values(self.expected, self.rest, mapped)  # type: ignore[arg-type]
        return not isinstance(values, Unreadable) and self._by_name(tuple(values), attempt)

    def index_keys(self) -> tuple[tuple[str, Any], ...] | None:
        """The members' keys; None when a module may be a member (the graph's index keys modules by name)."""
        return None if self.module_members else tuple(self.by_target)

    def _called_member(self, node: Node) -> FamilyMember | None:
        """The first function or method member the node calls: its target, or the target's overload packet."""
        by_target = self.by_target
        target = node.target
        try:
            exact = by_target.get((node.op, target))
        except TypeError:  # an unhashable target is no member's (members are functions, methods, operators)
            return None
        packet = getattr(target, "overloadpacket", None)
        of_packet = by_target.get((node.op, packet)) if packet is not None else None
        if exact is None or (of_packet is not None and of_packet[0] < exact[0]):
            exact = of_packet
        return exact[1] if exact is not None else None

    def _required_arguments(self, template: OpTemplate, compiler: _Compiler) -> tuple[_Requirement, ...]:
        """As an exact call's, over every member: none when a member takes sizes loose; no literals when a
        module member can supply an argument from the module's attributes (nn.Softmax's dim)."""
        members = self.family.members
        if any(m.signature is not None and m.signature.pack_from is not None for m in members):
            return ()
        if self.module_members:
            return _operand_tests(template, compiler, None)
        names = family_parameters(self.family)
        with_default = _with_default(template.signature)
        for member in members:
            member_defaults = _with_default(member.signature)
            with_default |= {name for member_name, name in parameter_map(member, names).items()
                             if member_name in member_defaults}
        return _operand_tests(template, compiler, with_default)


def _with_default(signature: CallSignature | None) -> set[str]:
    """The parameters that have a default in some overload of ``signature``."""
    if signature is None:
        return set()
    return {name for overload in signature.overloads for name, parameter in overload.parameters.items()
            if parameter.default is not parameter.empty}


def _operand_tests(template: OpTemplate, compiler: _Compiler,
                   with_default: set[str] | None) -> tuple[_Requirement, ...]:
    """A test per operand call, and per literal whose parameter has no default (none if ``with_default``
    is None): each holds for some argument of a node the operation matches."""
    parameter_of = {id(t): name for name, t in (template.bound or {}).items()}
    tests: list[_Requirement] = []
    for operand in template.operands():
        if _compiles(operand):
            operation = compiler.operation(operand)  # type: ignore[arg-type]
            tests.append(_operand_call(operation))
            keys = operation.index_keys()
            compiler.satisfiers |= Satisfiers(keys=frozenset(keys or ()), modules=keys is None)
        elif isinstance(operand, Literal) and with_default is not None \
                and parameter_of.get(id(operand)) not in with_default:
            tests.append(_literal_argument(operand.value))
            compiler.satisfiers |= Satisfiers(literal_tests=(tests[-1].test,))
    return tuple(tests)


# ---------------------------------------------------------------- required arguments, node by node and graph-wide

class Candidates(NodeIndex):
    """What narrowing found in one graph: the nodes that may match each pattern operation (None: any
    node may), besides the graph's nodes by key (families of many rules share members)."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        super().__init__(graph)
        self.of_operation: dict[int, Nodes | None] = {}  # id(OpTemplate) -> nodes, in the whole graph


#: candidates(found, among=None) of a rule or an operation: see :attr:`CompiledRule.candidates`.
CandidatesOf = Callable[[Candidates, "set[Node] | None"], "Nodes | None"]

#: Narrows distinct nodes to those that may have the required argument (at least all that have it).
Narrower = Callable[[Nodes, Candidates], Nodes]


@attrs.frozen
class _Requirement:
    """Something some argument of a matching node must be: ``test`` asks it of one argument, ``narrow``
    of many nodes at once, without a Python call per node; ``scans`` when that looks at every node."""

    test: Callable[[Any], bool]
    narrow: Narrower
    scans: bool


def _operand_call(operation: _Operation) -> _Requirement:
    """An argument is a node that may match ``operation``."""

    def narrow(nodes: Nodes, found: Candidates) -> Nodes:
        operands = operation.candidates(found)
        if operands is None:
            return nodes
        if len(operands) <= len(nodes):  # fewer operands: their users (a node's users use it somewhere)
            return _in_any([o.users for o in operands], nodes)
        return _with_argument_in(nodes, operands if isinstance(operands, set) else set(operands),
                                 operation.may_be_operand)

    return _Requirement(operation.may_be_operand, narrow, scans=False)


def _literal_argument(value: Any) -> _Requirement:
    """An argument is the literal ``value``."""
    test = _literal_test(value)
    if type(value) not in (int, bool, str, float, type(None)) or value != value:  # noqa: PLR0124 - nan
        return _Requirement(test, lambda nodes, found: nodes, scans=False)
    # A set holds every argument equal to the literal (and some others: 1 == True == 1.0).
    return _Requirement(test, lambda nodes, found: _with_argument_in(nodes, frozenset((value,)), test),
                        scans=True)


def _in_any(groups: list[Iterable[Node]], within: Nodes | None) -> set[Node]:
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


def _choose(options: tuple[tuple[tuple[Step, ...], tuple[Any, ...]], ...], attempt: _Attempt) -> bool:
    """A choice: the first of ``options`` (steps and the values they match) that matches, in order: a
    commutative operation's operands as given then swapped, or the options of ``A | B``.

    Replayed where an earlier run of the attempt chose (see the module docstring).  A failure after a
    more recent choice that still has options left starts over (:class:`_Backtrack`), so choices are
    explored depth-first, as the generic matcher's backtracking explores them.
    """
    orders = attempt.orders
    choice = len(orders)
    last = len(options) - 1
    if choice < len(attempt.replayed):
        taken = attempt.replayed[choice]
        orders.append((taken, last))
        attempt.step()  # counted when this is the replay's new option, the last it replays
        return _match_all(*options[taken], attempt)
    bindings, nodes, missing_metadata = attempt.bindings, attempt.nodes, attempt.missing_metadata
    for taken, (steps, values) in enumerate(options):
        del orders[choice:]
        attempt.budget.step()
        # An option may bind before it fails: all but the last bind into copies of what the choice found.
        attempt.bindings, attempt.nodes = (dict(bindings), dict(nodes)) if taken < last else (bindings, nodes)
        attempt.missing_metadata = missing_metadata
        orders.append((taken, last))
        if _match_all(steps, values, attempt):
            return True
        if any(option < more for option, more in orders[choice + 1:]):  # a more recent choice is open
            raise _Backtrack
    return False
