"""Rules compiled once into matchers made of plain closures: the engine's fast path for matching.

The generic :class:`~fxrules.matcher.Matcher` interprets a pattern's templates with backtracking
generators over immutable states; that costs 10-20 µs an attempt, even when the anchor's first
argument already rules the match out, and most attempts are such near misses.
:func:`compile_rule` turns a rule once into one step per template (a target test, an argument
reader built from the same :class:`~fxrules.signatures.BindingPlan` the generic matcher binds
with, captures and literals) that bind into one mutable :class:`_Attempt`, so a rejection costs
about a microsecond.

A compiled rule answers only when its answer is certainly the generic matcher's: the first
structural match in the generic order (operands left to right, a commutative operation unswapped
before swapped), checked by the same :meth:`Matcher.check_usable <fxrules.matcher.Matcher.check_usable>`.
The generic matcher backtracks into the most recent choice with an alternative left; the compiled
one only tries a commutative operation's swapped order while that operation is being matched.  So
when a failure comes after a choice was taken with its alternative unexplored, it answers
:data:`UNSURE` and the engine asks the generic matcher, which stays the reference the tests compare
against and the only matcher under ``explain=True`` (it records near misses).

:func:`compile_ruleset` does this once per :class:`~fxrules.ir.RuleSet` object, together with the
other things ``apply`` derives from the rules alone (pattern depth, helper calls), so an ``apply``
that finds nothing to do costs little more than the index lookups.

Compiled: single-output patterns of exact function and method calls (commutative or not), captures
with non-tensor types, literals, ``_``, lists and slices.  Not compiled (:func:`compile_rule` returns
None): families, modules, attributes, alternatives, several outputs, and tensor-typed captures
(their missing metadata is reported even when the match fails elsewhere).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import torch.fx

from fxrules.ir import (
    AltTemplate,
    Capture,
    CaptureType,
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
from fxrules.matcher import Match, Matcher, Skip, State, holds_default, literal_equal, value_type_problem
from fxrules.signatures import BindingPlan, CallSignature

Node = torch.fx.Node


class _Unsure:
    """The type of :data:`UNSURE`."""

    def __repr__(self) -> str:
        return "UNSURE"


#: What a compiled rule answers when only the generic matcher can tell.
UNSURE: Final = _Unsure()


class _Attempt:
    """What one compiled match attempt has bound so far (mutable: choices snapshot it)."""

    __slots__ = ("bindings", "nodes", "open_choices")

    def __init__(self) -> None:
        self.bindings: dict[str, Any] = {}  # in binding order, as the generic State's
        self.nodes: dict[int, Node] = {}  # id(OpTemplate) -> node, in matching order
        self.open_choices = 0  # commutative operations matched unswapped, the swapped order unexplored


class _Backtrack(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A failure after an unexplored choice: the generic matcher would backtrack into it."""


#: Matches one template against one value, binding into the attempt; False when it does not match.
Step = Callable[[Any, _Attempt], bool]


class CompiledRule:
    """One rule's compiled matcher."""

    def __init__(self, rule: Rule, root: Step) -> None:
        self.rule = rule
        self._root = root

    def match(self, anchor: Node, matcher: Matcher) -> Match | _Unsure | None:
        """The generic ``matcher.match(rule, anchor)`` (a match, None, or :class:`Skip` raised), or UNSURE."""
        attempt = _Attempt()
        try:
            matched = self._root(anchor, attempt)
        except _Backtrack:
            return UNSURE
        if not matched:
            return UNSURE if attempt.open_choices else None
        state = State(attempt.bindings, attempt.nodes)
        try:
            matcher.check_usable(self.rule, state)
        except Skip:
            if attempt.open_choices:  # the generic matcher would go on to the other operand orders
                return UNSURE
            raise
        return matcher.to_match(self.rule, state)


def compile_rule(rule: Rule) -> CompiledRule | None:
    """The rule's compiled matcher, or None when its pattern is outside the compiled subset."""
    if len(rule.pattern) != 1 or any(isinstance(t, TensorType) for t in rule.types.values()):
        return None
    try:
        root = _Compiler(rule.types).step(rule.pattern[0])
    except _UnsupportedTemplateError:
        return None
    return CompiledRule(rule, root)


def pattern_depth(template: Template) -> int:
    """The longest chain of operations from a pattern output down to its captures."""
    if isinstance(template, OpTemplate):
        return 1 + max((pattern_depth(t) for t in template.operands()), default=0)
    if isinstance(template, AltTemplate | SeqTemplate):
        parts = template.options if isinstance(template, AltTemplate) else template.items
        return max((pattern_depth(t) for t in parts), default=0)
    return 0


@attrs.frozen(eq=False)
class CompiledRuleSet:
    """What ``apply`` derives from a rule set alone, computed once per :class:`RuleSet` object."""

    matchers: Mapping[str, CompiledRule | None]  # rule name -> its compiled matcher (None: not compiled)
    depth: int  # the deepest pattern output: how far a change can reach to affect a match
    multi_output: bool
    helper_calls: tuple[tuple[Rule, HelperTemplate], ...]  # every helper a replacement calls


#: id(RuleSet) -> (a weak reference to it, its compiled form); an entry leaves with its rule set.
_COMPILED: dict[int, tuple[weakref.ref[RuleSet], CompiledRuleSet]] = {}


def compile_ruleset(ruleset: RuleSet) -> CompiledRuleSet:
    """The rule set's :class:`CompiledRuleSet`, built on first use (RuleSets are immutable, and unhashable)."""
    key = id(ruleset)
    cached = _COMPILED.get(key)
    if cached is not None and cached[0]() is ruleset:
        return cached[1]
    compiled = CompiledRuleSet(
        matchers={rule.name: compile_rule(rule) for rule in ruleset},
        depth=max((pattern_depth(o) for rule in ruleset for o in rule.pattern), default=1),
        multi_output=any(len(rule.pattern) > 1 for rule in ruleset),
        helper_calls=tuple((rule, helper) for rule in ruleset for output in rule.replacement
                           for helper in _helpers_in(output)),
    )
    _COMPILED[key] = (weakref.ref(ruleset, lambda _: _COMPILED.pop(key, None)), compiled)
    return compiled


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
        if isinstance(template, OpTemplate) and template.kind in (OpKind.FUNCTION, OpKind.METHOD) \
                and template.binds is None:
            return _Operation(template, self).match
        raise _UnsupportedTemplateError(type(template).__name__)


# ---------------------------------------------------------------- captures, literals, lists


def _anything(value: Any, attempt: _Attempt) -> bool:
    return True


def _capture_step(name: str, declared: CaptureType | None) -> Step:
    def capture(value: Any, attempt: _Attempt) -> bool:
        bindings = attempt.bindings
        if name in bindings:  # a non-linear capture (x * x): the same node, or an equal literal
            previous = bindings[name]
            if isinstance(previous, Node) or isinstance(value, Node):
                return previous is value
            return literal_equal(previous, value)
        if declared is not None and value_type_problem(name, declared, value) is not None:
            return False
        bindings[name] = value
        return True

    return capture


def _literal_step(expected: Any) -> Step:
    if type(expected) in (int, bool, str, type(None)) or (
            type(expected) is float and expected == expected and expected != 0.0):  # noqa: PLR0124 - not nan
        kind = type(expected)

        def plain_literal(value: Any, attempt: _Attempt) -> bool:
            # literal_equal for these types: same type and equal (no nan or signed zero to tell apart)
            return type(value) is kind and value == expected

        return plain_literal

    def literal(value: Any, attempt: _Attempt) -> bool:
        return not isinstance(value, Node) and literal_equal(expected, value)

    return literal


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

    def read(self, node: Node) -> tuple[Any, ...] | None:
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
        self.readers: dict[int, _PlannedReader] = {}  # id(plan) -> its reader (plans live in the signature)
        if template.bound is not None and template.signature is not None:
            self.signature = template.signature
            self.expected = tuple(template.bound)
            self.named_steps = tuple(compiler.step(t) for t in template.bound.values())
            if len(self.named_steps) >= 2:
                self.swapped_named_steps = (self.named_steps[1], self.named_steps[0], *self.named_steps[2:])

    def match(self, value: Any, attempt: _Attempt) -> bool:
        if not isinstance(value, Node):
            return False
        nodes = attempt.nodes
        if self.key in nodes:  # a shared operation of a DAG pattern: the node it matched before
            return nodes[self.key] is value
        if value.op != self.op or not self._same_target(value.target) or value in nodes.values():
            return False
        nodes[self.key] = value
        if self.name:
            attempt.bindings[self.name] = value
        plan = self.signature.plan(value.args, value.kwargs) if self.signature is not None else None
        if plan is None:
            return self._as_written(value, attempt)
        reader = self.readers.get(id(plan))
        if reader is None:
            reader = self.readers[id(plan)] = _PlannedReader(plan, self.expected, self.rest,
                                                            self.signature.pack_from)
        values = reader.read(value)
        if values is None:
            return False
        if self.commutative and len(values) >= 2:
            return _either_order(self.named_steps, values, self.swapped_named_steps, values, attempt)
        return _match_all(self.named_steps, values, attempt)

    def _same_target(self, target: Any) -> bool:
        if self.op == "call_method":
            return bool(target == self.target)
        return target is self.target or getattr(target, "overloadpacket", None) is self.target

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
        if self.commutative and len(args) >= 2:
            swapped = (args[1], args[0], *args[2:])
            return _either_order(self.written_steps, values, self.written_steps,
                                 (*swapped[:count], *keyword_values), attempt)
        return _match_all(self.written_steps, values, attempt)


def _either_order(steps: tuple[Step, ...], values: tuple[Any, ...], swapped_steps: tuple[Step, ...],
                  swapped_values: tuple[Any, ...], attempt: _Attempt) -> bool:
    """Operands as given, else swapped; success as given leaves the swapped order an open choice."""
    open_before = attempt.open_choices
    bindings, nodes = dict(attempt.bindings), dict(attempt.nodes)
    if _match_all(steps, values, attempt):
        attempt.open_choices += 1
        return True
    if attempt.open_choices > open_before:  # an operand's own choice is more recent than this one
        raise _Backtrack
    attempt.bindings, attempt.nodes = bindings, nodes
    return _match_all(swapped_steps, swapped_values, attempt)

