"""Rules compiled once into matchers made of plain closures: the one matcher the engine runs.

:func:`compile_rule` turns a rule once into one step per template (a target test, an argument reader
built from the :class:`~fxrules.lang.signatures.BindingPlan` of the node's call, captures, literals,
modules, attributes) that bind into one mutable :class:`_Attempt`.  Every template kind compiles:
function, method, module, attribute and family calls, alternatives, typed captures, literals, ``_``,
lists, slices, and patterns with several outputs.  The pieces each step decides with (types, argument
binding by name, budgets) are :mod:`fxrules.match.primitives`, which the tests' interpreter, the oracle
this matcher is checked against, is built from too.

* **Order.** The first structural match in depth-first order (operands left to right, a commutative
  operation unswapped before swapped, the options of ``A | B`` in order, the outputs in
  :func:`~fxrules.lang.ir.matching_order`, each further output among the users of what is bound, in
  the order they are found) that :meth:`Matcher.refusal <fxrules.match.matcher.Matcher.refusal>` does not
  refuse, else the first skip, else None.  A choice's next option is tried on the spot when nothing
  chosen since is left to backtrack into; otherwise the attempt starts over, replaying the choices made
  up to the most recent open one and taking its next option (depth-first, without generators).
* **Steps.** Counted against the budget of :mod:`fxrules.match.primitives`; a replay counts only what
  it explores beyond the choices it replays.  A replay whose new option certainly fails at once (a
  commutative operation's swapped operands, the first operand not even a call of its operation) is counted,
  not run (``_certain_failure``).
* **Early rejection.** Before any binding, ``may_match`` checks the anchor's target and that the
  operand calls and the literals the pattern needs are among its arguments (and so on down the
  pattern): most near misses end there, in about a microsecond.  For a whole graph, or a region of it,
  :attr:`CompiledRule.candidates` finds at once the nodes where ``may_match`` may hold (the graph's own
  op/target index, narrowed with set containment tests that make no Python call per node).
* **Tracing.** With a tracer attached (``explain=True``), each step that fails reports why to it, and
  an operation that early rejection rules out is explored anyway, without counting steps, so that
  the near miss names the argument that failed.  What matches, the steps counted and the nodes
  visited are the same with and without a tracer.

:func:`compile_ruleset` does this once per :class:`~fxrules.lang.ir.RuleSet` object, together with the
other things ``apply`` derives from the rules alone (the helper calls), so an ``apply``
that finds nothing to do costs little more than the index lookups.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import torch.fx

from fxrules.diagnostics import Span
from fxrules.lang.families import family_parameters, map_member_call, parameter_map
from fxrules.lang.ir import (
    AltTemplate,
    Capture,
    CaptureType,
    Family,
    FamilyMember,
    HelperTemplate,
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
    children,
    matching_order,
    walk,
)
from fxrules.lang.signatures import BindingPlan, CallSignature, holds_default, literal_equal
from fxrules.match.index import Nodes
from fxrules.match.narrowing import (
    Candidates,
    CandidatesOf,
    Requirement,
    Satisfiers,
    in_any,
    literal_argument,
    literal_test,
    operand_call,
)
from fxrules.match.primitives import (
    MISSING,
    Budget,
    BudgetExhausted,
    Match,
    SeenMatches,
    Unfit,
    Unreadable,
    describe_node,
    named_values,
    output_keys,
    output_nodes,
    show,
    tensor_fit,
    users_near,
    value_type_problem,
)
from fxrules.match.safety import ESCAPING_ONLY, checks_for, pair_refusal
from fxrules.match.skips import Skip
from fxrules.memo import per_object

if TYPE_CHECKING:
    from fxrules.match.matcher import Matcher, Tracer

Node = torch.fx.Node


class _Attempt:
    """One run of a compiled matcher: what it bound, and the option taken at each choice."""

    __slots__ = ("bindings", "budget", "matcher", "missing_metadata", "modules", "nodes", "orders", "replayed",
                 "tracer")

    def __init__(self, replayed: tuple[int, ...], matcher: Matcher, budget: Budget, tracer: Tracer | None) -> None:
        self.matcher = matcher  # the graph module (the module a call_module calls), the retired nodes, the tracer
        self.tracer = tracer  # the matcher's
        self.budget = budget  # the anchor's, shared by its replays
        self.restart(replayed)

    def restart(self, replayed: tuple[int, ...]) -> None:
        """Make this a new run, from the choices ``replayed`` on, with nothing bound.  A matcher's runs reuse one
        attempt (:meth:`CompiledRule.outcome`): an object and its ``__init__`` per run were about 0.3 us of the 1 to
        4 us of an anchor's matching.  What a run leaves (a match keeps its mappings) is left as it is: each
        mapping is made anew."""
        self.bindings: dict[str, Any] = {}  # in binding order
        self.nodes: dict[int, Node] = {}  # id(OpTemplate) -> node, in matching order
        self.modules: dict[str, str] = {}  # module capture -> qualified name
        self.missing_metadata: Skip | None = None  # the first typed capture bound without metadata
        self.replayed = replayed  # the options to take at the first choices
        self.orders: list[_Order] = []  # at each choice met

    def step(self) -> None:
        """Count a match step, unless it only replays what an earlier run of the anchor counted."""
        if len(self.orders) >= len(self.replayed):
            self.budget.step()

    def next_replay(self, fails: Mapping[Step, Callable[[Any], bool]] | None = None) -> tuple[int, ...] | None:
        """The choices of the next run in depth-first order: the most recent open choice's next option (None
        when no choice met has one left, or none was met); with ``fails``, past the runs it says certainly fail
        (:meth:`_past_certain_failures`)."""
        orders = self.orders
        if not orders:  # most runs: no choice met
            return None
        for index in range(len(orders) - 1, -1, -1):
            taken, last, _ = orders[index]
            if taken < last:
                replayed = (*[order[0] for order in orders[:index]], taken + 1)
                return replayed if not fails else self._past_certain_failures(replayed, fails)
        return None

    def _past_certain_failures(self, first: tuple[int, ...], fails: Mapping[Step, Callable[[Any], bool]]) -> \
            tuple[int, ...] | None:
        """The first run from ``first`` on (the options to take at the first choices) whose new option ``fails``
        does not say certainly fails (see :func:`_certain_failure`); the step each run passed over would count is
        counted, and its choice taken as explored.  Exact: a replay takes the options it is given at the first
        choices (the options this run met there: the same node, the same arguments), counts one step for the
        last, and fails where that option fails (every step of a pattern fails with the steps it is part of, up
        to the root); what it leaves to explore is this run's choices before that one, and the rest of that
        one's options."""
        orders, budget = self.orders, self.budget
        replayed: tuple[int, ...] | None = first
        while replayed is not None:
            index = len(replayed) - 1
            _, last, options = orders[index]
            step, value = options[replayed[index]]
            certain = fails.get(step)
            if certain is None or not certain(value):
                return replayed
            budget.taken += 1  # the step the replay would count (Budget.step inlined), raised as its skip
            if budget.taken > budget.limit:
                raise budget.skip()
            del orders[index + 1:]
            orders[index] = (replayed[index], last, options)
            replayed = self.next_replay()
        return None

    def fail(self, condition: str, detail: Callable[[], str], span: Span, progress: int | None = None) -> None:
        """Tell the tracer (the caller checked there is one) why a step failed, ``progress`` operations in
        (by default, the operations bound so far)."""
        assert self.tracer is not None
        self.tracer.fail(len(self.nodes) if progress is None else progress, condition, detail, span)

    def scratch(self, replayed: tuple[int, ...]) -> _Attempt:
        """A copy to explore in without counting steps, from the choices ``replayed`` on."""
        copy = _Attempt(replayed, self.matcher, Budget(), self.tracer)
        copy.bindings, copy.nodes, copy.modules = dict(self.bindings), dict(self.nodes), dict(self.modules)
        copy.missing_metadata = self.missing_metadata
        return copy


class _Backtrack(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A failure after a choice with an unexplored option: start over to explore it."""


#: Matches one template against one value, binding into the attempt; False when it does not match.
Step = Callable[[Any, _Attempt], bool]

#: A choice met by an attempt: the option taken, the last option, and the options (a step and its value).
_Order = tuple[int, int, tuple[tuple[Step, Any], ...]]

#: How a call of some shape is read (see ``_Operation._call_step``): a step and the position of the argument it
#: matches, or a step of the whole node and None.
_Read = tuple[Step, int | None]


class CompiledRule:
    """One rule's compiled matcher."""

    def __init__(self, rule: Rule, root: Step, traced_root: Step, may_match: Callable[[Node], bool],
                 may_match_anchor: Callable[[Node], bool] | None, candidates: CandidatesOf,
                 satisfiers: Satisfiers, tensor_typed: bool, fails: Mapping[Step, Callable[[Any], bool]]) -> None:
        self._rule = weakref.ref(rule)  # the rule's compiled matcher is kept per rule: no cycle back to it
        self._root = root  # at an anchor where may_match holds
        self._traced_root = traced_root  # at any node: tests the target, rules nothing out before tracing it
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
        keys = output_keys(rule.pattern)
        self._outputs: Callable[[Mapping[int, Node]], tuple[Node | None, ...]] = partial(output_nodes, keys)
        #: the usual pattern, one operation's node: its key, the output read without a call (None: another pattern)
        self._output_key = keys[0][0] if len(keys) == 1 and len(keys[0]) == 1 else None
        #: the ``match`` stage's safety checks of the rule (:func:`~fxrules.match.safety.checks_for`, found once)
        self._checks = checks_for(rule).match.all
        #: whether :meth:`Matcher.refusal` may refuse a structural match before its safety checks.  Exact when
        #: False: before them, it refuses only for a typed capture without metadata (which only a tensor-typed
        #: capture's step records) and for the guard; then only the checks are asked (``Matcher.found``).
        self._conditions = rule.guard is not None or tensor_typed
        #: whether :meth:`Matcher.refusal` may refuse a structural match at all (exact when False: neither the
        #: conditions before the checks nor one of ``_checks``)
        self._refusable = bool(self._checks) or self._conditions
        #: whether a match of two nodes is refused by :func:`~fxrules.match.safety.pair_refusal` alone (exact when
        #: True: no conditions before the checks, ``escaping_user`` the one check, one output read without a call)
        self._pair = not self._conditions and self._checks == ESCAPING_ONLY and self._output_key is not None
        #: option step -> a test of its value that is True only where it certainly fails (_certain_failure)
        self._fails = fails

    @property
    def rule(self) -> Rule:
        rule = self._rule()
        assert rule is not None, "a compiled matcher outlived its rule"
        return rule

    def match(self, anchor: Node, matcher: Matcher) -> Match | None:
        """The first usable match at ``anchor`` (see the module docstring) or None; raises :class:`Skip`."""
        if matcher.tracer is None and not self.may_match(anchor):
            return None
        return self.match_candidate(anchor, matcher)

    def _all_outputs(self, nodes: Mapping[int, Node]) -> tuple[Node | None, ...]:
        """The nodes a complete match binds to the pattern's outputs."""
        outputs = self._outputs(nodes)
        assert None not in outputs, "a complete match binds every output"
        return outputs

    def match_candidate(self, anchor: Node, matcher: Matcher) -> Match | None:
        """:meth:`match` at an anchor for which :attr:`may_match` holds (any node, with a tracer)."""
        found = self.outcome(anchor, matcher)
        if isinstance(found, Skip):
            raise found
        return found

    def outcome(self, anchor: Node, matcher: Matcher) -> Match | Skip | None:
        """:meth:`match_candidate`, its refusal returned rather than raised (a raise costs a traceback entry per
        frame it leaves, and an anchor's refusal is the commonest skip); a skip for the anchor's step budget is
        raised still."""
        rule, tracer = self._rule(), matcher.tracer
        assert rule is not None, "a compiled matcher outlived its rule"
        root, fails = self._root, self._fails
        if tracer is not None:
            tracer.start(rule, anchor)
            root, fails = self._traced_root, {}  # each option run: a tracer hears why it fails
        skip: Skip | None = None
        budget = matcher.budget  # the anchor's steps, shared by its replays: counted afresh, not a new Budget
        budget.taken = 0
        seen: SeenMatches | None = None  # made once a match is rejected and another run may find it again
        attempt = matcher.attempt
        if attempt is None:  # the matcher's first run: one attempt for all (see _Attempt.restart)
            attempt = matcher.attempt = _Attempt((), matcher, budget, tracer)
        replayed: tuple[int, ...] | None = ()
        while replayed is not None:
            attempt.restart(replayed)
            try:
                matched = root(anchor, attempt)
                if matched:  # a step, counted (Budget.step inlined: a call costs more than the count)
                    budget.taken += 1
                    if budget.taken > budget.limit:
                        raise BudgetExhausted
            except _Backtrack:
                matched = False
            except BudgetExhausted:
                raise budget.skip() from None
            if matched and (seen is None or seen.is_new(attempt.bindings, attempt.nodes)):
                if tracer is not None:
                    tracer.output = ""  # what the refusal reports is the whole match's
                key, nodes = self._output_key, attempt.nodes
                outputs: tuple[Node | None, ...] = (nodes[key],) if key is not None else self._all_outputs(nodes)
                if not self._refusable:
                    refusal = None
                elif self._conditions:
                    refusal = matcher.refusal(rule, attempt, outputs, self._checks)
                elif self._pair and len(nodes) == 2:  # two operations (a pattern may have more in choices)
                    refusal = pair_refusal(nodes, outputs[0], matcher.found.retired)  # type: ignore[arg-type]
                else:  # Matcher.refusal, from its checks on (see _conditions)
                    refusal = matcher.found.refusal(rule, self._checks, nodes, outputs, attempt.bindings)
                if refusal is None:  # the match keeps the attempt's mappings: its next run makes new ones
                    return Match(rule, outputs, tuple(nodes.values()), attempt.bindings,  # type: ignore[arg-type]
                                 attempt.modules)
                skip = skip or refusal  # go on to the other options, and raise the first if none is usable
                replayed = attempt.next_replay(fails) if attempt.orders else None
                if replayed is not None:
                    seen = seen or SeenMatches()
                    seen.rejected(attempt.bindings, nodes)
                continue
            # a run that met no choice (most runs) has nothing to replay: no call asks
            replayed = attempt.next_replay(fails) if attempt.orders else None
        return skip


@per_object
def compiled_rule(rule: Rule) -> CompiledRule:
    """The rule's compiled matcher, built on first use for each Rule object."""
    return compile_rule(rule)


def compile_rule(rule: Rule) -> CompiledRule:
    """The rule's compiled matcher."""
    compiler = _Compiler(rule.types, rule.pattern)
    order = matching_order(rule.pattern)
    first = rule.pattern[order[0]]
    options = tuple(compiler.operation(o) for o in (first.options if isinstance(first, AltTemplate) else (first,))
                    if isinstance(o, OpTemplate))
    step = compiler.step(first)
    root: Step
    traced_root: Step
    may_match: Callable[[Node], bool]
    may_match_anchor: Callable[[Node], bool] | None
    candidates: CandidatesOf
    if isinstance(first, OpTemplate):
        root, traced_root = options[0].match_checked, step
        may_match = options[0].may_match
        may_match_anchor = options[0].has_required if options[0].required else None
        candidates = options[0].candidates
    else:  # A | B (of operations: an output is a computation)
        root = traced_root = step
        may_match = _any_option(options)
        may_match_anchor = may_match
        candidates = _union_of_options(options)
    if len(rule.pattern) > 1:
        further = tuple(_further_output(compiler.step(rule.pattern[i]), rule.pattern[i], _output_label(rule, i))
                        for i in order[1:])
        root, traced_root = (_with_outputs(r, _output_label(rule, order[0]), further) for r in (root, traced_root))
    return CompiledRule(rule, root, traced_root, may_match, may_match_anchor, candidates, compiler.satisfiers,
                        compiler.tensor_typed, compiler.fails)


def _any_option(options: tuple[_Operation, ...]) -> Callable[[Node], bool]:
    def may_match_an_option(node: Node) -> bool:
        return any(option.may_match(node) for option in options)

    return may_match_an_option


def _union_of_options(options: tuple[_Operation, ...]) -> CandidatesOf:
    def candidates_of_an_option(found: Candidates, among: set[Node] | None = None) -> Nodes | None:
        sets = [option.candidates(found, among) for option in options]
        return None if any(s is None for s in sets) else set().union(*sets)  # type: ignore[arg-type]

    return candidates_of_an_option


# ---------------------------------------------------------------- patterns with several outputs


def _output_label(rule: Rule, position: int) -> str:
    """How a near miss names the output it failed in: ``output 2 'v': ``."""
    name = getattr(rule.pattern[position], "name", None)
    return f"output {position + 1} '{name}': " if name else f"output {position + 1}: "


def _with_outputs(first: Step, label: str, further: tuple[Step, ...]) -> Step:
    """The root of a pattern with several outputs: the first output at the anchor, then the others."""

    def outputs(anchor: Any, attempt: _Attempt) -> bool:
        if attempt.tracer is not None:
            attempt.tracer.output = label
        if not first(anchor, attempt):
            return False
        for step in further:  # noqa: SIM110 - a loop: all() would add a generator
            if not step(None, attempt):
                return False
        return True

    return outputs


def _further_output(step: Step, template: Template, label: str) -> Step:
    """A further output: an operation the outputs matched so far already bound, or one of the users of what
    they bound (each tried is an option of a choice, in the order the users are found)."""
    key = id(template) if isinstance(template, OpTemplate) else None
    span: Span = template.span

    def further_output(_: Any, attempt: _Attempt) -> bool:
        if attempt.tracer is not None:
            attempt.tracer.output = label
        if key is not None and key in attempt.nodes:  # an interior node of an output matched before
            return True
        near = _users_near(attempt)
        if not near and attempt.tracer is not None:
            attempt.fail("target", lambda: "no node uses what the other outputs matched", span)
        return _choose(tuple((step, node) for node in near), attempt)

    return further_output


def _users_near(attempt: _Attempt) -> list[Node]:
    """The nodes that may be further outputs: users of what the match bound so far that are operations, not
    matched, not retired."""
    nodes = attempt.nodes.values()
    return users_near([*nodes, *(v for v in attempt.bindings.values() if isinstance(v, Node))], set(nodes),
                      attempt.matcher.retired)


@attrs.frozen(eq=False)
class CompiledRuleSet:
    """What ``apply`` derives from a rule set alone, computed once per :class:`RuleSet` object."""

    matchers: Mapping[int, CompiledRule]  # id(rule) -> its compiled matcher
    helper_calls: tuple[tuple[Rule, HelperTemplate], ...]  # every helper a replacement calls


@per_object
def compile_ruleset(ruleset: RuleSet) -> CompiledRuleSet:
    """The rule set's :class:`CompiledRuleSet`, built on first use for each RuleSet object."""
    return CompiledRuleSet(
        matchers={id(rule): compiled_rule(rule) for rule in ruleset},
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


def _path_operations(pattern: tuple[Template, ...]) -> frozenset[int]:
    """The operations (by id) of a pattern of one output whose operations make one path down from it: each has at
    most one operation among the templates below it before the next operation (through lists and slices), and
    there is no ``A | B``; none otherwise.  Each of them is matched at an argument of the node matched by the
    one above it, when only the operations above it have matched nodes: nodes that use that argument, directly
    or not, so none is it (a graph has no cycle).  ``torch.neg(torch.neg(x))`` and ``torch.sigmoid(x) * x`` are
    paths; ``torch.neg(x) + torch.neg(y)`` is not."""
    if len(pattern) != 1:
        return frozenset()
    found: list[int] = []
    current: Template | None = pattern[0]
    while isinstance(current, OpTemplate):
        found.append(id(current))
        below: list[OpTemplate] = []
        stack = list(children(current))
        while stack:
            template = stack.pop()
            if isinstance(template, AltTemplate):
                return frozenset()
            if isinstance(template, OpTemplate):
                below.append(template)
            elif isinstance(template, SeqTemplate | SliceTemplate):
                stack += children(template)
        if len(below) > 1:
            return frozenset()
        current = below[0] if below else None
    return frozenset(found)


class _Compiler:
    """Builds the steps of one pattern, one per template object (a shared operation is one step)."""

    def __init__(self, types: Mapping[str, CaptureType], pattern: tuple[Template, ...]) -> None:
        self.types = types
        self.on_path = _path_operations(pattern)  # see _Operation._match_step
        self.steps: dict[int, Step] = {}
        self.operations: dict[int, _Operation] = {}
        self.satisfiers = Satisfiers()  # of every required argument of the pattern's operations
        self.tensor_typed = False  # whether a step of a tensor-typed capture was built (it may record missing metadata)
        self.fails: dict[Step, Callable[[Any], bool]] = {}  # see CompiledRule._fails

    def step(self, template: Template) -> Step:
        known = self.steps.get(id(template))
        if known is None:
            known = self.steps[id(template)] = self._build(template)
        return known

    def _build(self, template: Template) -> Step:
        if isinstance(template, OpTemplate):
            return self.operation(template).match
        if isinstance(template, Capture):
            declared = self.types.get(template.name)
            self.tensor_typed = self.tensor_typed or isinstance(declared, TensorType)
            return _capture_step(template, declared)
        if isinstance(template, Literal):
            return _literal_step(template)
        if isinstance(template, Wildcard):
            return _anything
        if isinstance(template, SeqTemplate):
            return _sequence_step(template, tuple(self.step(t) for t in template.items))
        if isinstance(template, SliceTemplate):
            return _slice_step(template, tuple(self.step(t) for t in (template.start, template.stop, template.step)))
        if isinstance(template, AltTemplate):
            return _alternatives_step(tuple(self.step(t) for t in template.options))
        raise TypeError(f"a pattern cannot hold {type(template).__name__}")  # the resolver never puts one there

    def operation(self, template: OpTemplate) -> _Operation:
        known = self.operations.get(id(template))
        if known is None:
            kind = _FamilyOperation if template.kind is OpKind.FAMILY else _Operation
            known = self.operations[id(template)] = kind(template, self)
        return known


# ---------------------------------------------------------------- captures, literals, lists


def _anything(value: Any, attempt: _Attempt) -> bool:
    return True


def _capture_step(template: Capture, declared: CaptureType | None) -> Step:
    if isinstance(declared, TensorType):
        return _tensor_capture_step(template, declared)
    name = template.name

    def capture(value: Any, attempt: _Attempt) -> bool:
        if name in attempt.bindings:
            return _same_as_bound(template, attempt.bindings[name], value, attempt)
        if declared is not None:
            problem = value_type_problem(name, declared, value)
            if problem is not None:
                if attempt.tracer is not None:
                    attempt.fail("type", lambda: problem, template.span)
                return False
        attempt.bindings[name] = value
        return True

    return capture


def _tensor_capture_step(template: Capture, declared: TensorType) -> Step:
    """A tensor-typed capture: a node without shape metadata is accepted provisionally (its dims stay unbound),
    and the structural match it completes is skipped for ``missing metadata``."""
    name = template.name

    def tensor_capture(value: Any, attempt: _Attempt) -> bool:
        bindings = attempt.bindings
        if name in bindings:
            return _same_as_bound(template, bindings[name], value, attempt)
        fit = tensor_fit(name, declared, value, bindings)
        if isinstance(fit, Unfit):
            if attempt.tracer is not None:
                attempt.fail("type", fit.detail, template.span)
            return False
        if isinstance(fit, Skip):
            if attempt.missing_metadata is None:  # the first one is reported
                attempt.missing_metadata = fit
        else:
            bindings.update(fit)  # its dims first, then the capture
        bindings[name] = value
        return True

    return tensor_capture


def _same_as_bound(template: Capture, previous: Any, value: Any, attempt: _Attempt) -> bool:
    """A non-linear capture (x * x) seen again: the same node, or an equal literal."""
    if isinstance(previous, Node) or isinstance(value, Node):
        same = previous is value
    else:
        same = literal_equal(previous, value)
    if not same and attempt.tracer is not None:
        attempt.fail("argument", lambda: f"'{template.name}' is bound to {show(previous)} but here is {show(value)}",
                     template.span)
    return same


def _literal_step(template: Literal) -> Step:
    test = literal_test(template.value)

    def literal(value: Any, attempt: _Attempt) -> bool:
        if test(value):
            return True
        if attempt.tracer is not None:
            attempt.fail("literal", lambda: f"expected {template.value!r}, found {show(value)}", template.span)
        return False

    return literal


def _alternatives_step(options: tuple[Step, ...]) -> Step:
    def alternatives(value: Any, attempt: _Attempt) -> bool:
        return _choose(tuple((option, value) for option in options), attempt)

    return alternatives


def _match_all(steps: tuple[Step, ...], values: tuple[Any, ...], attempt: _Attempt) -> bool:
    if len(steps) == 1:  # most operations have one operand: no zip
        return steps[0](values[0], attempt)
    for step, value in zip(steps, values, strict=True):  # noqa: SIM110 - a loop: all() would add a generator
        if not step(value, attempt):
            return False
    return True


def _match_at(steps: tuple[tuple[Step, int], ...], node: Node, attempt: _Attempt) -> bool:
    """Each step matches the argument of the node (a call without keywords) at its position, in order."""
    args = node._args
    for step, at in steps:  # noqa: SIM110 - a loop: all() would add a generator
        if not step(args[at], attempt):
            return False
    return True


def _all_of(steps: tuple[Step, ...]) -> Step:
    """The step of a tuple of values as long as ``steps``: each value matches its step, in order."""
    if len(steps) == 1:  # most operations: no loop
        (step,) = steps
        return lambda values, attempt: step(values[0], attempt)
    if len(steps) == 2:
        first, second = steps
        return lambda values, attempt: first(values[0], attempt) and second(values[1], attempt)
    return partial(_match_all, steps)


def _sequence_step(template: SeqTemplate, items: tuple[Step, ...]) -> Step:
    def sequence(value: Any, attempt: _Attempt) -> bool:
        if isinstance(value, list | tuple) and len(value) == len(items):
            return _match_all(items, tuple(value), attempt)
        if attempt.tracer is not None:
            attempt.fail("argument", lambda: f"expected a sequence of {len(items)}, found {show(value)}", template.span)
        return False

    return sequence


def _slice_step(template: SliceTemplate, parts: tuple[Step, ...]) -> Step:
    def slice_(value: Any, attempt: _Attempt) -> bool:
        if isinstance(value, slice):
            return _match_all(parts, (value.start, value.stop, value.step), attempt)
        if attempt.tracer is not None:
            attempt.fail("argument", lambda: f"expected a slice, found {show(value)}", template.span)
        return False

    return slice_


# ---------------------------------------------------------------- operations


#: Types none of whose values is a list to :meth:`~fxrules.lang.signatures.CallSignature.plan`: not a list or
#: tuple, and no ``is_sequence`` attribute (which only templates of lists have).
_NEVER_SEQUENCES = frozenset({Node, int, float, bool, type(None), str})

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
            self.indices: tuple[int, ...] = tuple(key for _, key in self.sources)
            self.positions = operator.itemgetter(*self.indices)
            self.single = len(self.sources) == 1  # itemgetter of one index gives the item, not a tuple

    def read(self, node: Node) -> tuple[Any, ...] | None:
        if self.positions is not None:
            values = self.positions(node._args)
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
    """The step of one call of the pattern (a function, method, module or attribute): target, arguments,
    operands.

    Arguments are compared by parameter name when the pattern's call and the node's call both bind
    unambiguously, else as written; a commutative operation also tries its first two operands swapped.
    """

    def __init__(self, template: OpTemplate, compiler: _Compiler) -> None:
        self.template = template
        self.key = id(template)
        self.name = template.name
        self.target = template.target
        self.kind = template.kind
        # tested on every node matched: an enum member's lookup costs about 0.2 us (Python 3.11)
        self.of_module, self.of_attribute = template.kind is OpKind.MODULE, template.kind is OpKind.ATTR
        self.op = template.kind.value
        self.binds = template.binds
        self.declared = compiler.types.get(template.binds) if template.binds else None
        self.commutative = template.commutative
        self.rest = template.rest
        written = (*template.args, *(value for _, value in template.kwargs))
        self.written = _all_of(tuple(compiler.step(t) for t in written))
        self.positional = len(template.args)
        self.keywords = tuple(name for name, _ in template.kwargs)
        self.signature: CallSignature | None = None
        self.expected: tuple[str, ...] | None = None  # the parameters the pattern names, when it binds by name
        self.readers: dict[int, _PlannedReader] = {}  # id(plan) -> its reader (plans live in the signature)
        if template.bound is not None and template.signature is not None:
            self.signature = template.signature
            self.expected = tuple(template.bound)
            self.named_steps = tuple(compiler.step(t) for t in template.bound.values())
            self.in_order = _all_of(self.named_steps)  # the values the parameters the pattern names take
            if len(self.named_steps) >= 2:  # the first two operands swapped: the other order of a commutative call
                self.swapped = _all_of((self.named_steps[1], self.named_steps[0], *self.named_steps[2:]))
                if self.commutative:
                    bound = tuple(template.bound.values())
                    compiler.fails[self.swapped] = _certain_failure((bound[1], bound[0], *bound[2:]), compiler)
        requirements = self._required_arguments(template, compiler)
        self.required = tuple(r.test for r in requirements)
        #: every required test holds for some argument of the node (see :meth:`_required_arguments`)
        self.has_required: Callable[[Node], bool] = self._required_test()
        # Operands first: narrowing by them follows use edges; by literals, it scans the nodes left.
        self.narrowers = tuple(r.narrow for r in sorted(requirements, key=lambda r: r.scans))
        #: argument count -> how a call without keywords of that many arguments is read (see _call_step)
        self.by_count: dict[int, _Read] = {}
        if self.kind in (OpKind.FUNCTION, OpKind.METHOD) and self.binds is None and self.signature is not None:
            self.match_checked = self._call_step()  # type: ignore[method-assign,assignment]
        self.match: Step = self._match_step(self.key in compiler.on_path)
        #: the value may match this operation: a node passing :meth:`may_match` (a requirement of the operations
        #: that use it, see :func:`~fxrules.match.narrowing.operand_call`)
        self.may_be_operand: Callable[[Any], bool] = self._operand_test()

    def _operand_test(self) -> Callable[[Any], bool]:
        """:attr:`may_be_operand`: a node passing :meth:`may_match`, tested in one call or two (it is asked of each
        argument of the nodes that may use this operation, at every candidate of their rules)."""
        fits, required, has_required = self._fits_test(), self.required, self.has_required
        if required:
            return lambda value: fits(value) and has_required(value)
        return fits

    def _fits_test(self) -> Callable[[Any], bool]:
        """:meth:`fits` as a test of any value (False for one that is not a node): a function's or a method's call
        inlined, with its target (no lookups, one call per value)."""
        fits = self.fits
        if type(self).fits is not _Operation.fits or self.op not in ("call_function", "call_method"):
            return lambda value: isinstance(value, Node) and fits(value)
        target = self.target
        if self.op == "call_method":

            def calls_method(value: Any) -> bool:
                return isinstance(value, Node) and value.op == "call_method" and bool(value.target == target)

            return calls_method

        def calls_target(value: Any) -> bool:
            return isinstance(value, Node) and value.op == "call_function" and (
                value.target is target or getattr(value.target, "overloadpacket", None) is target)

        return calls_target

    def may_match(self, node: Node) -> bool:
        """The cheap necessary conditions: the node calls the target with every required argument."""
        return self.fits(node) and (not self.required or self.has_required(node))

    def fits(self, node: Node) -> bool:
        """The node calls the operation's target (a module call: some module, whose class the match checks)."""
        if node.op != self.op:
            return False
        if self.op == "call_function":
            target = node.target
            return target is self.target or getattr(target, "overloadpacket", None) is self.target
        return self.op != "call_method" or bool(node.target == self.target)

    def _match_step(self, on_path: bool) -> Step:
        """The operation's step at any value (an operand): the node the operation matched before, or a new node
        passing :meth:`may_match`, then :meth:`match_checked`.  A closure of what it reads of the operation
        (several lookups per operand matched, and a call to :meth:`fits` of a function's call, saved).

        ``on_path``: the operation is on the one path of a pattern's operations (:func:`_path_operations`), where
        no node is matched before it but those above it, which use its value: the tests of an operation matched
        before and of a node matched already cannot fail, and a value that may match goes on at once."""
        key, template, required, has_required, match_checked = \
            self.key, self.template, self.required, self.has_required, self.match_checked
        fits = self._fits_test()

        def match(value: Any, attempt: _Attempt) -> bool:
            if not isinstance(value, Node):
                if attempt.tracer is not None:
                    attempt.fail("target", lambda: f"expected {template.describe()}, found {show(value)}",
                                 template.span)
                return False
            nodes = attempt.nodes
            if key in nodes:  # a shared operation of a DAG pattern: the node it matched before
                if nodes[key] is value:
                    return True
                if attempt.tracer is not None:
                    attempt.fail("argument", lambda: f"'{self.name}' is used twice but the graph has two different "
                                                     "nodes", template.span)
                return False
            if not fits(value) or value in nodes.values():
                if attempt.tracer is not None:
                    self._trace_unfit(value, attempt)
                return False
            if required and not has_required(value):
                if attempt.tracer is not None:
                    self._explore(value, attempt)
                return False
            return match_checked(value, attempt)

        if not on_path:
            return match

        def match_on_path(value: Any, attempt: _Attempt) -> bool:
            if fits(value) and (not required or has_required(value)):
                return match_checked(value, attempt)
            return match(value, attempt)  # fails: it tells the tracer why

        return match_on_path

    def match_checked(self, node: Node, attempt: _Attempt) -> bool:
        """:attr:`match` at a node already found new to the attempt and passing :meth:`may_match`."""
        module = None
        if self.of_module:
            module = attempt.matcher.module_of(node)
            if not isinstance(module, self.target):
                if attempt.tracer is not None:
                    self._trace_unfit(node, attempt)
                return False
        if len(attempt.orders) >= len(attempt.replayed):  # attempt.step(), inlined: once per operation matched
            attempt.budget.step()
        attempt.nodes[self.key] = node
        if self.name:
            attempt.bindings[self.name] = node
        if self.binds is not None and not self._bind_module_or_attr(node, module, attempt):
            return False
        if self.of_attribute:
            return True
        return self._read_planned(node, attempt)

    def _call_step(self) -> Step:
        """:meth:`match_checked` of a function or method call that binds no module or attribute: the same
        steps, with the operands of a call without keywords read at positions planned once per argument count.

        Exact: a call without keywords binds by the plan of its argument count alone when
        :meth:`~fxrules.lang.signatures.CallSignature.count_plan` says so; other counts are planned call by
        call, as :meth:`match_checked` does."""
        key, name, by_count, read_planned = self.key, self.name, self.by_count, self._read_planned

        def call(node: Node, attempt: _Attempt) -> bool:
            if len(attempt.orders) >= len(attempt.replayed):  # attempt.step(), inlined: once per operation matched
                budget = attempt.budget  # and Budget.step, inlined: a call costs more than the count
                budget.taken += 1
                if budget.taken > budget.limit:
                    raise BudgetExhausted
            attempt.nodes[key] = node
            if name:
                attempt.bindings[name] = node
            args = node._args
            if node._kwargs:  # the slots behind Node.kwargs and .args: a property call each
                return read_planned(node, attempt)
            read = by_count.get(len(args))
            if read is None:
                read = by_count[len(args)] = self._read_counted(args)
            step, at = read
            if at is None:  # a reader of the whole call
                return step(node, attempt)
            return step(args[at], attempt)  # the one operand, at its position: no reader's frame

        return call

    def _read_counted(self, args: tuple[Any, ...]) -> _Read:
        """How :meth:`_call_step` matches the operands of calls like ``args``: as many arguments, no keywords."""
        plan, by_count = self.signature.count_plan(args)  # type: ignore[union-attr]
        if not by_count:
            return self._read_plain(len(args)), None
        return self._one_operand(plan) or (self._read_by(plan), None)

    def _one_operand(self, plan: BindingPlan | None) -> _Read | None:
        """The step of the pattern's one operand and its position, when calls that bind by ``plan`` give it by
        position and nothing else is to be checked (what :meth:`_read_by` reads in a frame of its own)."""
        if plan is None or self.commutative or len(self.named_steps) != 1:
            return None
        reader = self._reader(plan)
        return None if reader.positions is None else (self.named_steps[0], reader.indices[0])

    def _read_plain(self, count: int) -> Callable[[Node, _Attempt], bool]:
        """How :meth:`_call_step` matches calls of ``count`` arguments without keywords whose binding depends on
        which arguments are lists (``torch.neg`` lists ``neg.int(a)`` beside ``neg(input)``).

        Exact: a plan depends only on the argument count, the keyword names and which arguments are lists
        (:meth:`~fxrules.lang.signatures.CallSignature.plan`), and no value of a type in
        :data:`_NEVER_SEQUENCES` is one, so a call of such values binds as ``count`` Nones do; any other call
        is planned call by call, as :meth:`match_checked` does."""
        plain, read_planned = self._read_by(self.signature.plan((None,) * count, {})), self._read_planned  # type: ignore[union-attr]

        def read(node: Node, attempt: _Attempt) -> bool:
            for value in node._args:
                if type(value) not in _NEVER_SEQUENCES:
                    return read_planned(node, attempt)
            return plain(node, attempt)

        return read

    def _read_by(self, plan: BindingPlan | None) -> Callable[[Node, _Attempt], bool]:
        """How :meth:`_call_step` matches the operands of calls without keywords that bind by ``plan``."""
        if plan is None:
            return self._as_written
        reader = self._reader(plan)
        if reader.positions is None:  # a parameter to check against its default, or none to read
            return self._read_planned
        steps, positions = self.named_steps, reader.indices
        if not self.commutative and len(steps) == 1:  # most operations: no tuple, no loop
            (step,), (at,) = steps, positions
            return lambda node, attempt: step(node._args[at], attempt)
        if not self.commutative and len(steps) == 2:
            (step, next_step), (at, next_at) = steps, positions
            return lambda node, attempt: step(node._args[at], attempt) and next_step(node._args[next_at], attempt)
        if not self.commutative:  # three or more operands, in order: each read at its position, in one loop
            return partial(_match_at, tuple(zip(steps, positions, strict=True)))
        by_name = self._by_name
        if len(steps) == 2:  # a commutative operation of two operands: no reader call, no itemgetter
            at, next_at = positions
            return lambda node, attempt: by_name((node._args[at], node._args[next_at]), attempt)
        read = reader.read
        return lambda node, attempt: by_name(read(node), attempt)  # type: ignore[arg-type]

    def _read_planned(self, node: Node, attempt: _Attempt) -> bool:
        """Match the node's arguments by parameter name as its call binds (plans cached per call shape), else
        as written."""
        signature = self.signature
        # the slots behind Node.args and .kwargs: a property call each, twice per operation matched
        plan = signature.plan(node._args, node._kwargs) if signature is not None else None
        if plan is None:
            return self._as_written(node, attempt)
        values = self._reader(plan).read(node)
        if values is None:
            if attempt.tracer is not None:
                bound = signature.bind(node.args, node.kwargs)  # type: ignore[union-attr]
                if bound is not None:
                    self._trace_unreadable(named_values(self.expected, self.rest, bound), attempt)  # type: ignore[arg-type]
            return False
        return self._by_name(values, attempt)

    def _reader(self, plan: BindingPlan) -> _PlannedReader:
        reader = self.readers.get(id(plan))
        if reader is None:
            reader = self.readers[id(plan)] = _PlannedReader(plan, self.expected, self.rest,  # type: ignore[arg-type]
                                                             self.signature.pack_from)  # type: ignore[union-attr]
        return reader

    def _bind_module_or_attr(self, node: Node, module: torch.nn.Module | None, attempt: _Attempt) -> bool:
        """Bind the module a call calls, or the ``get_attr`` node, to the capture the pattern names it by."""
        name = self.binds
        assert name is not None
        value: Any = node if self.kind is OpKind.ATTR else module
        bindings = attempt.bindings
        if name in bindings and bindings[name] is not value:
            if attempt.tracer is not None:
                attempt.fail("argument", lambda: f"'{name}' is bound to another module", self.template.span)
            return False
        if self.kind is OpKind.MODULE:
            declared = self.declared
            if isinstance(declared, ModuleType) and not declared.fits(value):
                if attempt.tracer is not None:
                    attempt.fail("type", lambda: f"'{name}' must be exactly {declared.cls.__name__}, without "
                                                 f"hooks; found {type(value).__name__}", self.template.span)
                return False
            attempt.modules[name] = str(node.target)
        bindings[name] = value
        return True

    def _trace_unfit(self, value: Any, attempt: _Attempt) -> None:
        """Tell the tracer why ``value`` is not this operation's node: matched already, or another call."""
        if value in attempt.nodes.values():
            attempt.fail("target", lambda: f"node '{value.name}' is already matched by another operation",
                         self.template.span)
            return
        module = attempt.matcher.module_of(value) if value.op == "call_module" else None
        attempt.fail("target", lambda: f"{self._expected()}, found {describe_node(value, module)}", self.template.span)

    def _expected(self) -> str:
        return f"expected {self.template.describe()}"

    def _trace_unreadable(self, values: list[Any] | Unreadable, attempt: _Attempt) -> None:
        """Tell the tracer which parameter the pattern cannot read from the node's call."""
        if not isinstance(values, Unreadable):
            return
        name, given = values.parameter, values.given
        if given is MISSING:
            attempt.fail("argument", lambda: f"argument '{name}' is not given", self.template.span)
        else:
            attempt.fail("argument", lambda: f"argument '{name}' is {show(given)}; the pattern leaves it out, so it "
                                             "must hold its default", self.template.span)

    def _explore(self, node: Node, attempt: _Attempt) -> None:
        """With a tracer: match the node early rejection ruled out (it fails), so that the tracer hears why.
        Explored in copies of the attempt with their own budget: the attempt's steps are as without a tracer."""
        replayed: tuple[int, ...] | None = ()
        while replayed is not None:
            scratch = attempt.scratch(replayed)
            try:
                self.match_checked(node, scratch)
            except _Backtrack:
                pass
            except BudgetExhausted:
                return
            replayed = scratch.next_replay()

    def satisfiers(self) -> Satisfiers:
        """What may be a node this operation matches, for :class:`Satisfiers`."""
        if self.kind is OpKind.MODULE:
            return Satisfiers(modules=True)
        if self.kind is OpKind.ATTR:
            return Satisfiers(attributes=True)
        return Satisfiers(keys=frozenset(((self.op, self.target),)))

    def index_keys(self) -> tuple[tuple[str, Any], ...] | None:
        """The graph index's (op, target) keys of the nodes that call the operation's target; None for modules
        and attributes (the index keys them by name)."""
        return ((self.op, self.target),) if self.kind in (OpKind.FUNCTION, OpKind.METHOD) else None

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
            nodes = groups[0] if among is None and len(groups) == 1 else in_any(groups, among)
            for narrow in self.narrowers:
                if not nodes:  # nothing left to narrow: the operands need not be looked for
                    break
                nodes = narrow(nodes, found)
        if among is None:
            found.of_operation[self.key] = nodes
        return nodes

    def _required_test(self) -> Callable[[Node], bool]:
        """:attr:`has_required`: with one required test (most operations with any), a closure of that test,
        without the loop over the tests."""
        if len(self.required) != 1:
            return self._has_every_required
        (test,) = self.required

        def has_required_argument(node: Node) -> bool:
            for value in node._args:  # the arguments, then the keywords' values: no tuple of both built
                if test(value):
                    return True
            kwargs = node._kwargs
            return bool(kwargs) and any(map(test, kwargs.values()))

        return has_required_argument

    def _has_every_required(self, node: Node) -> bool:
        args, kwargs = node._args, node._kwargs
        for test in self.required:
            for value in args:  # the arguments, then the keywords' values: no tuple of both built
                if test(value):
                    break
            else:
                if not kwargs or not any(map(test, kwargs.values())):
                    return False
        return True


    def _by_name(self, values: tuple[Any, ...], attempt: _Attempt) -> bool:
        if not self.commutative:
            return self.in_order(values, attempt)
        if len(values) >= 2 and values[0] is not values[1]:  # else swapped is the same
            return _choose(((self.in_order, values), (self.swapped, values)), attempt)
        attempt.step()  # the one operand order: an option
        return self.in_order(values, attempt)

    def _as_written(self, node: Node, attempt: _Attempt) -> bool:
        args, kwargs = node.args, node.kwargs
        count = self.positional
        if len(args) < count or (len(args) > count and not self.rest):
            if attempt.tracer is not None:
                attempt.fail("argument", lambda: f"expected {count} positional argument(s), found {len(args)}",
                             self.template.span)
            return False
        if (not self.rest and any(name not in self.keywords for name in kwargs)) or any(
                name not in kwargs for name in self.keywords):
            if attempt.tracer is not None:
                attempt.fail("argument", lambda: f"keyword arguments differ: expected {list(self.keywords)}, found "
                                                 f"{list(kwargs)}", self.template.span)
            return False
        keyword_values = tuple(kwargs[name] for name in self.keywords)
        values = (*args[:count], *keyword_values)
        if self.commutative and len(args) >= 2 and args[0] is not args[1]:  # else swapped is the same
            swapped = (args[1], args[0], *args[2:])
            return _choose(((self.written, values), (self.written, (*swapped[:count], *keyword_values))), attempt)
        if self.commutative:
            attempt.step()  # the one operand order: an option
        return self.written(values, attempt)

    def _required_arguments(self, template: OpTemplate, compiler: _Compiler) -> tuple[Requirement, ...]:
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
        module = attempt.matcher.module_of(node) if node.op == "call_module" else None
        member = self._called_member(node) if module is None else next(
            (m for m in self.module_members if isinstance(module, m.target)), None)
        if member is None:
            if attempt.tracer is not None:
                self._trace_unfit(node, attempt)
            return False
        bound = member.signature.bind(node.args, node.kwargs) \
            if member.signature is not None and self.expected is not None else None
        mapped = map_member_call(member, self.family, bound, module) if bound is not None else None
        if mapped is not None and mapped.bound is None:
            if attempt.tracer is not None:
                attempt.fail("argument", lambda: mapped.reason, self.template.span)
            return False
        attempt.step()  # the node calls a member whose arguments map onto the family's
        attempt.nodes[self.key] = node
        if self.name:
            attempt.bindings[self.name] = node
        if mapped is None:
            return self._as_written(node, attempt)
        values = named_values(self.expected, self.rest, mapped.bound)  # type: ignore[arg-type]
        if isinstance(values, Unreadable):
            if attempt.tracer is not None:
                self._trace_unreadable(values, attempt)
            return False
        return self._by_name(tuple(values), attempt)

    def _expected(self) -> str:
        return f"expected a member of family {self.family.name}"

    def satisfiers(self) -> Satisfiers:
        return Satisfiers(keys=frozenset(self.by_target), modules=bool(self.module_members))

    def index_keys(self) -> tuple[tuple[str, Any], ...] | None:
        """The members' keys; None when a module may be a member (the graph's index keys modules by name)."""
        return None if self.module_members else tuple(self.by_target)

    def _called_member(self, node: Node) -> FamilyMember | None:
        """The first function or method member the node calls: its target, or the target's overload packet."""
        by_target = self.by_target
        target = node.target
        exact = by_target.get((node.op, target))
        packet = getattr(target, "overloadpacket", None)
        of_packet = by_target.get((node.op, packet)) if packet is not None else None
        if exact is None or (of_packet is not None and of_packet[0] < exact[0]):
            exact = of_packet
        return exact[1] if exact is not None else None

    def _required_arguments(self, template: OpTemplate, compiler: _Compiler) -> tuple[Requirement, ...]:
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
                   with_default: set[str] | None) -> tuple[Requirement, ...]:
    """A test per operand call, and per literal whose parameter has no default (none if ``with_default``
    is None): each holds for some argument of a node the operation matches."""
    parameter_of = {id(t): name for name, t in (template.bound or {}).items()}
    tests: list[Requirement] = []
    for operand in template.operands():
        if isinstance(operand, OpTemplate):
            operation = compiler.operation(operand)
            tests.append(operand_call(operation))
            compiler.satisfiers |= operation.satisfiers()
        elif isinstance(operand, Literal) and with_default is not None \
                and parameter_of.get(id(operand)) not in with_default:
            tests.append(literal_argument(operand.value))
            compiler.satisfiers |= Satisfiers(literal_tests=(tests[-1].test,))
    return tuple(tests)


def _certain_failure(templates: tuple[Template, ...], compiler: _Compiler) -> Callable[[tuple[Any, ...]], bool]:
    """A test of values for the steps of ``templates``, matched in order, that is True only where they certainly
    fail without counting a step (or raising): up to an operation whose :attr:`_Operation.may_be_operand` is
    False for its value (its step fails before it counts one, reading nothing earlier steps bind: see
    ``_match_step``), or a literal whose value is a node, every step before it is ``_`` or an untyped capture of
    a node, which counts nothing, and binds or compares the node by identity.  False where it cannot tell."""
    tests: list[Callable[[Any], bool] | None] = []  # per step: its value may pass (None: a quiet step)
    for template in templates:
        if isinstance(template, OpTemplate):
            tests.append(compiler.operation(template).may_be_operand)
        elif isinstance(template, Literal):
            tests.append(_not_a_node)
        elif isinstance(template, Wildcard) or (isinstance(template, Capture) and template.name not in compiler.types):
            tests.append(None)
        else:
            break  # a step that may count steps or raise (a typed capture, a list, a choice): nothing certain after it

    def fails(values: tuple[Any, ...]) -> bool:
        for test, value in zip(tests, values, strict=False):
            if test is not None:
                return not test(value)
            if not isinstance(value, Node):  # an untyped capture of a literal may compare it with ==
                return False
        return False

    return fails


def _not_a_node(value: Any) -> bool:
    return not isinstance(value, Node)


def _choose(options: tuple[tuple[Step, Any], ...], attempt: _Attempt) -> bool:
    """A choice: the first of ``options`` (a step and the value it matches) that matches, in order: a
    commutative operation's operands as given then swapped, the options of ``A | B``, the nodes that may
    be a further output.

    Replayed where an earlier run of the attempt chose (see the module docstring).  A failure after a
    more recent choice that still has options left starts over (:class:`_Backtrack`), so choices are
    explored depth-first.
    """
    orders = attempt.orders
    choice = len(orders)
    last = len(options) - 1
    if choice < len(attempt.replayed):
        taken = attempt.replayed[choice]
        orders.append((taken, last, options))
        if choice + 1 == len(attempt.replayed):  # attempt.step(), inlined: the replay's new option is counted
            attempt.budget.step()
        step, value = options[taken]
        return step(value, attempt)
    bindings, nodes, modules, missing_metadata = attempt.bindings, attempt.nodes, attempt.modules, \
        attempt.missing_metadata
    budget = attempt.budget
    for taken, (step, value) in enumerate(options):
        del orders[choice:]
        budget.taken += 1  # budget.step(), inlined: a call costs more than the count
        if budget.taken > budget.limit:
            raise BudgetExhausted
        # An option may bind before it fails: all but the last bind into copies of what the choice found.
        if taken < last:
            attempt.bindings, attempt.nodes, attempt.modules = dict(bindings), dict(nodes), dict(modules)
        else:
            attempt.bindings, attempt.nodes, attempt.modules = bindings, nodes, modules
        attempt.missing_metadata = missing_metadata
        orders.append((taken, last, options))
        if step(value, attempt):
            return True
        # a more recent choice is open (none was met, most often: no generator then)
        if len(orders) > choice + 1 and any(option < more for option, more, _ in orders[choice + 1:]):
            raise _Backtrack
    return False
