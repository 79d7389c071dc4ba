"""The safety checks of a rewrite, listed once: what makes a complete match unusable, each with its skip reason.

* :data:`SAFETY_CHECKS` lists every check, in the order they run; each has a name, the
  :class:`~fxrules.match.skips.SkipReason` it skips with, and the :class:`Stage` it runs at (what it
  needs to know decides when it can run).
* :func:`run_checks` runs the checks of one stage on a subject: a check returns None when the rewrite
  is safe, else a detail (a string, or a function writing it: most details are never shown), and the
  loop raises :class:`~fxrules.match.skips.Skip` with the check's reason.  The ``match`` stage's loop
  (:meth:`Found.refusal`) returns that skip instead: the matcher goes on to the next structural match.
* The matcher runs the ``match`` stage on each structural match (after the types and the guard, which
  are the rule's own conditions, not safety); the driver the ``pass`` stage; the rewriter the
  ``emit`` and ``splice`` stages.  ``docs/language.md`` §14 shows :func:`checks_table` (a test keeps
  the two equal).

Example: ``x * 1 => x`` at ``y = x * 1`` with ``y.add_(1)`` later passes every check until
``in_place_write``, at the ``splice`` stage: the rewrite is skipped with reason ``in-place write``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Container, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import torch
import torch.fx
from torch.fx.operator_schemas import normalize_function

from fxrules.graph.autocast import AutocastRegions, casts, changed_dtype, describe
from fxrules.graph.metadata import (
    GraphEffects,
    alias_class,
    aliased_inputs,
    changes_an_argument,
    in_place_writer,
    may_write_in_place,
    nodes_of,
    possible_writers,
    view_base,
    writes_into,
    writing_arguments,
    written_values,
)
from fxrules.graph.subgraphs import OUTSIDE
from fxrules.lang.ir import (
    AltTemplate,
    Capture,
    Literal,
    OpKind,
    OpTemplate,
    Rule,
    SeqTemplate,
    SliceTemplate,
    Template,
    children,
    pattern_templates,
    walk,
)
from fxrules.match.skips import Skip, SkipReason
from fxrules.memo import per_object

if TYPE_CHECKING:
    from fxrules.match.primitives import Match

Node = torch.fx.Node

#: What a check returns when the rewrite is not safe: why, or a function that writes why.
Detail = str | Callable[[], str]

#: How many of a node's escaping users a skip's detail names.
ESCAPING_NAMED = 5


class Stage(enum.Enum):
    """When a check runs; the value is the name the docs show."""

    MATCH = "match"  # on each structural match, while matching: a skip makes the matcher try the next way
    PASS = "pass"  # on the match found, against the rewrites of the pass so far (the driver)
    EMIT = "emit"  # before the replacement is built (the rewriter)
    SPLICE = "splice"  # on the built replacement, before it replaces anything: a skip undoes what was built


@attrs.define
class Found:
    """A structural match, as the ``match`` stage sees it: one per matcher, refilled by :meth:`refusal` for each
    match (an object per match would be one more allocation on the hot path, and more garbage collection)."""

    retired: Mapping[Node, None]  # rewritten away: no longer users of anything
    module_of: Callable[[Node], torch.nn.Module | None]
    rule: Rule | None = None
    nodes: Mapping[int, Node] = attrs.Factory(dict)  # id(OpTemplate) -> the node it matched
    matched: set[Node] = attrs.Factory(set)  # the same nodes
    outputs: tuple[Node | None, ...] = ()  # the nodes the pattern outputs matched, in order
    bindings: Mapping[str, Any] = attrs.Factory(dict)

    def refusal(self, rule: Rule, checks: tuple[SafetyCheck, ...], nodes: Mapping[int, Node],
                outputs: tuple[Node | None, ...], bindings: Mapping[str, Any]) -> Skip | None:
        """The skip of the first of ``checks`` (the ``match`` stage's of ``rule``, :func:`checks_for`) that refuses
        one structural match of ``rule``, or None.  Returned, not raised as :func:`run_checks` does: the matcher
        goes on to the next structural match, and raises at most one skip per anchor."""
        if not checks:  # most one-operation rules: nothing to fill in
            return None
        self.rule, self.nodes, self.matched, self.outputs, self.bindings = \
            rule, nodes, set(nodes.values()), outputs, bindings
        for check in checks:
            detail = check.test(self)
            if detail is not None:
                return Skip(check.reason, detail)
        return None


@attrs.define
class InPass:
    """The nodes a pass has created so far, and the match found (one per pass, refilled by :meth:`check`),
    as the ``pass`` stage sees them."""

    claimed: set[Node]
    match: Match | None = None

    def check(self, match: Match) -> None:
        """Run the ``pass`` stage on ``match``."""
        self.match = match
        run_checks(PASS_CHECKS, self)  # (each may refuse a match of any rule: no :func:`checks_for` lookup)


@attrs.define
class Splice:
    """A rewrite about to happen: the match, the node the replacement goes before, and, from the ``splice``
    stage on, the replacement's values (one per output) and the nodes made for them.  One per rewriter,
    refilled by :meth:`refill` for each rewrite (as :class:`Found` is per match: an object per rewrite is one
    more allocation on the hot path); a check's detail must therefore not read it later (none does: each
    takes what it names when it runs)."""

    graph: torch.fx.Graph
    retired: Mapping[Node, None]  # the transaction's: rewritten away, no longer users of anything
    alias_free: bool  # a subgraph of an operator that refuses outputs aliasing inputs (torch.cond)
    #: the operation a node performs by aten name (its in-place and ``out=`` forms one), as the rewriter
    #: spells operations (:mod:`fxrules.rewrite.aten`, a layer above this one)
    operation_name: Callable[[Node], str | None]
    effects: GraphEffects  # of the graph's nodes, but those made for this splice
    grad_modes: Mapping[Node, bool | str] | None = None  # where the graph has grad-mode regions
    autocast: AutocastRegions | None = None  # where the graph runs under autocast
    values: list[Any] | tuple[()] = ()
    created: list[Node] | tuple[()] = ()
    match: Match = attrs.field(init=False)  # set by :meth:`refill`
    anchor: Node = attrs.field(init=False)  # the earliest output
    _pairs: list[tuple[Node, Node]] | None = attrs.field(default=None, init=False)

    def refill(self, match: Match, anchor: Node) -> None:
        """Make this the splice of ``match`` before ``anchor``, at the ``emit`` stage (no values, no regions)."""
        self.match, self.anchor = match, anchor
        self.values = self.created = ()
        self.grad_modes = self.autocast = self._pairs = None

    def pairs(self) -> list[tuple[Node, Node]]:
        """(output, existing node it would share memory with) for each output replaced by a value that
        exists already or is a view of one: ``x * 1 => x`` makes it ``x``, ``reshape(reshape(x, a), b) =>
        reshape(x, b)`` a view of ``x``; a sequence's nodes each (a user's ``(x, y)[0]`` is ``x``).  Not when it
        was a view of that value already (``x.t().t() => x``): nothing a write could see changes.  Found once, for
        the two checks that read them."""
        if self._pairs is None:
            new = set(self.created)
            self._pairs = [(output, existing)
                           for output, value in zip(self.match.outputs, self.values, strict=True)
                           for item in nodes_of(value) if item is not output
                           for existing in _existing_aliases(item, new)
                           if view_base(existing) is not view_base(output)]
        return self._pairs


#: What a graph may hold that some checks need to refuse anything (:attr:`SafetyCheck.needs`), as bits: a node that
#: may write in place (in the graph, or among the replacement's nodes), grad-mode regions, autocast regions, a
#: matched node that may have side effects (:func:`_writes_nothing`).
WRITERS, GRAD_MODES, AUTOCAST, EFFECTS = 1, 2, 4, 8


@attrs.frozen
class SafetyCheck:
    """One safety check: its name, the reason it skips with, when it runs, what it refuses (for the docs), and
    the rules it may refuse a match of."""

    name: str
    reason: SkipReason
    stage: Stage
    refuses: str
    test: Callable[[Any], Detail | None]  # the stage's subject -> None (safe) or why not
    #: rule -> whether ``test`` can return a detail for any match of it, decided from the rule alone; a check
    #: that cannot is not run for that rule (:func:`checks_for`; a ``pass`` check runs for every rule).  None: it
    #: may, for every rule.  Each one says why it is exact: a wrong False would let through what the check refuses.
    may_refuse: Callable[[Rule], bool] | None = None
    #: what the graph or the match must hold (bits of :data:`WRITERS`...) for ``test`` to refuse anything: without
    #: it, ``test`` returns None (each says why), and an ``emit`` or ``splice`` stage does not call it
    #: (:meth:`StageChecks.given`)
    needs: int = 0


@attrs.frozen
class StageChecks:
    """The checks of one stage that may refuse a match of one rule, in order (:func:`checks_for`): ``all``, and
    those a rewrite needs given what its graph holds (:meth:`given`)."""

    all: tuple[SafetyCheck, ...]

    def given(self, facts: int) -> tuple[SafetyCheck, ...]:
        """The checks whose :attr:`~SafetyCheck.needs` ``facts`` (bits of :data:`WRITERS`...) holds: the others
        return None (each says why) where the graph and the match hold only these facts.  The rewriter asks once
        per rule and graph, for each value the facts it cannot know in advance (in-place writers) may take."""
        return tuple(check for check in self.all if check.needs & facts == check.needs)


@attrs.frozen
class RuleChecks:
    """The checks of each stage that may refuse a match of one rule (the ``pass`` stage's may refuse any)."""

    match: StageChecks
    emit: StageChecks
    splice: StageChecks
    writes_nothing: bool  # :func:`_writes_nothing` of the rule

    def effects(self, nodes: tuple[Node, ...], effects: GraphEffects) -> int:
        """:data:`EFFECTS` when a match of the rule, ``nodes`` one of them, may have side effects in the graph of
        ``effects``, else 0.  The same for every match of the rule in that graph: where the rule
        :func:`writes nothing <_writes_nothing>`, each operation binds a function or method call of one target,
        whose purity is decided per target (:meth:`~fxrules.graph.metadata.GraphEffects.impure_calls`); the
        rewriter asks once per rule and graph."""
        return 0 if self.writes_nothing and not effects.impure_calls(nodes) else EFFECTS


@per_object
def checks_for(rule: Rule) -> RuleChecks:
    """The checks of each stage to run on the matches of ``rule``: the stage's, but those that cannot refuse
    any (:attr:`SafetyCheck.may_refuse`), decided once per rule (in a rewrite, a check that returns at once
    costs about as much as one that tests something: calling it)."""
    match, emit, splice = (StageChecks(tuple(check for check in checks
                                             if check.may_refuse is None or check.may_refuse(rule)))
                           for checks in (MATCH_CHECKS, EMIT_CHECKS, SPLICE_CHECKS))
    return RuleChecks(match, emit, splice, _writes_nothing(rule))


def run_checks(checks: tuple[SafetyCheck, ...], subject: Any) -> None:
    """Run ``checks`` (one stage's, or :func:`checks_for` one rule's) on ``subject``; raise the first one's
    :class:`Skip` that fails."""
    for check in checks:
        detail = check.test(subject)
        if detail is not None:
            raise Skip(check.reason, detail)


# ---------------------------------------------------------------- what a rule's pattern certainly matches


#: The operations whose match matches each of their operands against the node's arguments (an attribute's
#: ``get_attr`` node has none; a helper is no pattern operation).
_READS_OPERANDS = (OpKind.FUNCTION, OpKind.METHOD, OpKind.MODULE, OpKind.FAMILY)


def _operations(rule: Rule) -> list[OpTemplate]:
    """The pattern's operations, each once."""
    return list({id(t): t for t in pattern_templates(rule) if isinstance(t, OpTemplate)}.values())


def _certainly_below(operation: OpTemplate) -> list[Template]:
    """The templates every match of ``operation`` matches below it: its operands, theirs, and so on, through
    lists and slices; not inside ``A | B`` (one option matches) nor below an attribute (nothing is read).
    Each one it matches to a value in the arguments of ``operation``'s node or of a node that is an input of
    that one, directly or not: a node among them is defined before ``operation``'s node, and is not computed
    from it."""
    found: dict[int, Template] = {}
    stack = list(children(operation)) if operation.kind in _READS_OPERANDS else []
    while stack:
        current = stack.pop()
        if current is None or id(current) in found or isinstance(current, AltTemplate):
            continue
        found[id(current)] = current
        if isinstance(current, SeqTemplate | SliceTemplate) or (
                isinstance(current, OpTemplate) and current.kind in _READS_OPERANDS):
            stack += children(current)
    return list(found.values())


def _node_names(rule: Rule) -> set[str]:
    """The names the pattern binds to nodes it matches or to modules (``n = ...``, an attribute, a module): a
    replacement names them as captures."""
    return {name for op in _operations(rule) for name in (op.name, op.binds) if name}


def _capture_names(templates: list[Template] | tuple[Template, ...]) -> set[str]:
    return {t.name for t in templates if isinstance(t, Capture)}


# ---------------------------------------------------------------- the match stage


def _escaping_user(found: Found) -> Detail | None:
    matched = found.matched
    if len(matched) < 2:
        return None
    outputs, retired = found.outputs, found.retired
    first: Node | None = None  # the escaping node first in graph order, found in one pass without a list
    for node in matched:
        if node in outputs or (first is not None and node._sort_key > first._sort_key):
            continue
        for user in node.users:  # a live user outside the match (a loop: asked of nearly every match)
            if user not in matched and user not in retired:
                first = node
                break
    if first is None:
        return None
    return lambda: escaping_detail(first, matched, retired)


def pair_refusal(nodes: Mapping[int, Node], output: Node, retired: Mapping[Node, None]) -> Skip | None:
    """:meth:`Found.refusal` of a match of two nodes, ``output`` its one output, for a rule whose only ``match``
    check is ``escaping_user`` (:data:`ESCAPING_ONLY`): the same skip, or None, without filling the Found in nor
    building the matched set unless it refuses (the commonest refusal: ``neg(neg(x))`` of a shared ``neg``).
    Exact: :func:`_escaping_user` passes over the output and reads the users of the other node alone, which
    escape when one is neither matched (the output, or that node) nor retired; its detail names that node, of
    the same two matched nodes."""
    first, second = nodes.values()
    inner = second if first is output else first
    for user in inner.users:
        if user is not output and user is not inner and user not in retired:
            return Skip(SkipReason.ESCAPING_USER, partial(escaping_detail, inner, (first, second), retired))
    return None


def _may_escape(rule: Rule) -> bool:
    """Exact: a match binds one node per operation of the pattern (:attr:`Found.nodes` is keyed by operation), so
    a pattern of one operation matches one node, and :func:`_escaping_user` refuses nothing below two."""
    return len(_operations(rule)) >= 2


def escaping_detail(node: Node, matched: Container[Node], retired: Mapping[Node, None]) -> str:
    """The escaping users by name, the first few only: a node may have thousands (a shared input), and the
    detail is one line of the report.  ``matched``: the match's nodes (a pair's as a tuple: no set is made for a
    detail most reports never write)."""
    escaping = [u.name for u in node.users if u not in matched and u not in retired]
    named = ", ".join(escaping[:ESCAPING_NAMED])
    more = len(escaping) - ESCAPING_NAMED
    return f"'{node.name}' is also used by {named}{f' and {more} more' if more > 0 else ''} outside the match"


def _impure(found: Found) -> Detail | None:
    assert found.rule is not None
    for template in _maybe_unnamed(found.rule):
        node = found.nodes.get(id(template))
        if node is not None and not _named_exactly(template, node, found.module_of) and node.is_impure():
            return f"'{node.name}' has side effects and the pattern does not name its target"
    return None


@per_object
def _maybe_unnamed(rule: Rule) -> tuple[OpTemplate, ...]:
    """The pattern's operations that may match a node without naming its exact target (modules by base
    class, attributes): only these need the purity check."""
    return tuple(template for output in rule.pattern for template in walk(output)
                 if isinstance(template, OpTemplate) and template.kind in (OpKind.MODULE, OpKind.ATTR))


def _may_be_impure(rule: Rule) -> bool:
    """Exact: :func:`_impure` looks only at the operations :func:`_maybe_unnamed` lists."""
    return bool(_maybe_unnamed(rule))


def _named_exactly(template: OpTemplate, node: Node, module_of: Callable[[Node], torch.nn.Module | None]) -> bool:
    if template.kind is OpKind.MODULE:
        return type(module_of(node)) is template.target
    return template.kind in (OpKind.FUNCTION, OpKind.METHOD, OpKind.FAMILY)


def _cycle(found: Found) -> Detail | None:
    matched = found.matched
    captured = [v for v in found.bindings.values() if isinstance(v, Node) and v not in matched]
    if _depends_on(captured, matched):
        return "a capture depends on a node of the match; rewriting would create a cycle"
    return None


def _may_cycle(rule: Rule) -> bool:
    """Exact: False when one operation, the base, is certainly below every other (each one's node is computed
    from the base's, which is then the earliest node of any match) and every capture is certainly below the
    base (:func:`_certainly_below`: each node bound to one is defined before the base's).  Then no capture comes
    after the earliest matched node, and :func:`_depends_on` returns False before it searches.  Without a
    capture, nothing :func:`_cycle` reads is there: the other bindings are matched nodes (``n = ...``, an
    attribute), modules and sizes.  ``neg(neg(x))`` and ``sigmoid(x) * x`` have a base; ``relu(n) * n`` does not.
    """
    names = _capture_names(pattern_templates(rule))
    if not names:
        return False
    operations = _operations(rule)
    below = {id(op): {id(t) for t in _certainly_below(op)} for op in operations}
    for base in operations:
        if all(other is base or id(base) in below[id(other)] for other in operations):
            return not names <= _capture_names(_certainly_below(base))
    return True


def _depends_on(captured: list[Node], matched: set[Node]) -> bool:
    """True when a captured node is computed from a matched node (searching only after the earliest match)."""
    if not captured or not matched:
        return False
    earliest = min([n._sort_key for n in matched])  # FX keeps a sortable position on every node
    stack = [c for c in captured if c._sort_key > earliest]
    if not stack:  # the usual case: every capture comes before the match
        return False
    seen: set[Node] = set()
    while stack:
        node = stack.pop()
        if node in matched:
            return True
        if node in seen:
            continue
        seen.add(node)
        stack.extend(n for n in node.all_input_nodes if n._sort_key > earliest or n in matched)
    return False


# ---------------------------------------------------------------- the pass stage


def _overlap(in_pass: InPass) -> Detail | None:
    assert in_pass.match is not None
    if not in_pass.claimed.isdisjoint(in_pass.match.nodes):
        return "part of this match was created by another rewrite in this pass"
    return None


# ---------------------------------------------------------------- the emit stage


def _several_outputs(rule: Rule) -> bool:
    """Exact for the checks that return at once for a match of one output: a match has an output node per
    output of the pattern (a complete match binds every output)."""
    return len(rule.pattern) > 1


def _captured_late(splice: Splice) -> Detail | None:
    """Every capture is an argument of a matched node, and every matched node comes before a single output:
    only a pattern with several outputs can capture a node defined after its first."""
    match, anchor = splice.match, splice.anchor
    if len(match.outputs) == 1:
        return None
    late = [v.name for v in match.bindings.values()
            if isinstance(v, Node) and v not in match.nodes and v._sort_key > anchor._sort_key]
    if late:
        return f"captured {', '.join(late)} defined after the first output '{anchor.name}'"
    return None


def _written_between(splice: Splice) -> Detail | None:
    """The match reads a capture where its matched users are, the replacement where the first output is: a write
    into the capture (or a view or alias of it) between the two, either way, would reach only one of them
    (``r = x.relu(); x.add_(1); r.relu()`` made ``x.relu()`` after the write; a later output of several reading
    ``x`` after a write, the replacement before it)."""
    if not splice.effects.writers_exist():  # most graphs: no write anywhere
        return None
    match, anchor = splice.match, splice.anchor
    matched = set(match.nodes)
    for value in match.bindings.values():
        for capture in value if isinstance(value, list | tuple) else (value,):
            if not isinstance(capture, Node) or capture in matched:
                continue
            reads = [user._sort_key for user in capture.users if user in matched] + [anchor._sort_key]
            first, last = min(reads), max(reads)
            if not splice.effects.writers_between(first, last):  # no write there at all: no aliases to search
                continue
            for member in alias_class(capture):
                for user in possible_writers(member):
                    if first < user._sort_key < last and user not in matched and writes_into(user, member):
                        return f"'{user.name}' writes into '{capture.name}' in place between where the match reads " \
                               f"it and '{anchor.name}', where the replacement would"
    return None


# ---------------------------------------------------------------- the splice stage


def _no_change(splice: Splice) -> Detail | None:
    """The result is the computation it replaces: each output replaced by itself, or by new nodes of the same
    ops and targets as the matched ones, with the same arguments (after normalization: ``torch.sum(x, -1)`` is
    ``torch.sum(x, dim=-1)``), down to the same existing nodes.  Spliced, it would change nothing but node
    names, and match again in the next pass, forever: ``aten.sin.default(x) => aten.sin(x)`` in an aten-level
    graph, where the packet is emitted as the overload it matched."""
    match, created = splice.match, splice.created
    values: Sequence[Any] = splice.values  # one per output, at the splice stage
    outputs = match.outputs
    # one output (most rules) without a zip: a strict one costs as much as the tests of the loop
    pairs = ((values[0], outputs[0]),) if len(outputs) == 1 else tuple(zip(values, outputs, strict=True))
    for value, output in pairs:
        if value is not output and not (isinstance(value, Node) and value.op == output.op
                                        and value.target == output.target and value in created
                                        and not _uses_another_node(value, output, created)):
            return None  # the first tests of _same_value, which would fail: the usual replacement differs here
    new = set(created)
    seen: dict[Node, Node] = {}
    for value, output in pairs:
        if not _same_value(value, output, new, seen):
            return None
    if not created:
        return "the replacement is the matched node itself"
    return lambda: (f"the replacement computes '{match.anchor.name}' as the match does: "
                    f"{', '.join(_target_name(n) for n in created)} of the same arguments")


def _may_be_unchanged(rule: Rule) -> bool:
    """Exact: :func:`_no_change` refuses only when every output is replaced by itself or by a new node of its op
    and target; False when some output's replacement is neither, whatever the match: a literal (not a node), a
    list, a slice, or a capture certainly below the output's operation (:func:`_certainly_below`: a node
    defined before the output's, so neither the output nor new).  Not a name the pattern gives a node
    (``n = torch.neg(x)``: ``n`` may be the output itself)."""
    if len(rule.pattern) != len(rule.replacement):
        return True
    node_names = _node_names(rule)
    for output, replacement in zip(rule.pattern, rule.replacement, strict=True):
        if isinstance(replacement, SeqTemplate | SliceTemplate) or (
                isinstance(replacement, Literal) and not isinstance(replacement.value, Node)):
            return False
        if isinstance(replacement, Capture) and replacement.name not in node_names \
                and isinstance(output, OpTemplate) and replacement.name in _capture_names(_certainly_below(output)):
            return False
    return True


def _target_name(node: Node) -> str:
    """A node's target as the generated code names it (``torch.relu``, ``aten.sin.default``), a method by its name:
    never a builtin's repr, whose memory address would make the detail differ from run to run."""
    if isinstance(node.target, str | torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(node.target)  # a method's name; an aten operator as the rules write it (aten.sin.default)
    try:
        return torch.fx.node._get_qualified_name(node.target)
    except Exception:  # an object FX cannot name: its type's name, still without an address
        return getattr(node.target, "__name__", type(node.target).__name__)


def _same_value(value: Any, old: Any, new: set[Node], seen: dict[Node, Node]) -> bool:
    """Whether ``value`` (an argument of the replacement) computes what ``old`` (one of the match) does."""
    if value is old:
        return True
    if isinstance(value, list | tuple):
        return type(value) is type(old) and len(value) == len(old) \
            and all(_same_value(v, o, new, seen) for v, o in zip(value, old, strict=True))
    if isinstance(value, torch.Tensor):  # a tensor argument written into a graph: the same object or not
        return False
    if not isinstance(value, Node):
        return not isinstance(old, Node | list | tuple) and type(value) is type(old) \
            and (value == old or (isinstance(value, float) and math.isnan(value) and math.isnan(old)))
    if value not in new or not isinstance(old, Node):
        return False
    if value in seen:
        return seen[value] is old
    if value.op != old.op or value.target != old.target:
        return False
    if _uses_another_node(value, old, new):
        return False  # whether the arguments are bound to names or not, one of them is the same as none of old's
    seen[value] = old
    for normalize in (False, True):
        new_args, old_args = _arguments(value, normalize), _arguments(old, normalize)
        if new_args is None or old_args is None:
            break
        if new_args.keys() == old_args.keys() and all(_same_value(new_args[k], old_args[k], new, seen)
                                                      for k in new_args):
            return True
    del seen[value]  # assumed while comparing its arguments (a DAG shares nodes); not the same after all
    return False


def _uses_another_node(value: Node, old: Node, new: Container[Node]) -> bool:
    """``value`` has an existing node as an argument that is no argument of ``old``: however both calls' arguments
    are bound to names (as written, or by parameter name), that one can be the same as no argument of ``old`` (an
    existing node is the same only as itself, and binding fills in no node)."""
    olds: set[int] | None = None  # by identity: an argument may be a tensor, whose == is elementwise
    # a loop, not any(), the slots behind Node.args and .kwargs, no tuple of both without keywords, and a set of
    # map(id): asked at most rewrites that make a node of the output's target
    for argument in _arguments_of(value):
        if isinstance(argument, Node) and argument not in new:
            if olds is None:
                olds = set(map(id, _arguments_of(old)))
            if id(argument) not in olds:
                return True
    return False


def _arguments_of(node: Node) -> tuple[Any, ...]:
    """A call's arguments, then its keywords' values."""
    kwargs = node._kwargs
    return (*node._args, *kwargs.values()) if kwargs else node._args


def _arguments(node: Node, normalize: bool) -> dict[Any, Any] | None:
    """A call's arguments as written (by position and keyword), or ``normalize``d: by parameter name, defaults
    filled in, where its target's schema binds them unambiguously (else None)."""
    if not normalize:
        return {**dict(enumerate(node.args)), **node.kwargs}
    if node.op != "call_function":
        return None
    try:
        pair = normalize_function(node.target, node.args, node.kwargs,  # type: ignore[arg-type]
                                  normalize_to_only_use_kwargs=True)
    except RuntimeError:  # several schemas bind the arguments (torch.neg of a tensor or a number)
        return None
    return None if pair is None else dict(pair.kwargs)


def _effects_kept(splice: Splice) -> Detail | None:
    """A node of the match that has an effect beyond its result (an in-place write, ``copy_``, ``out=``, an
    assertion) would be removed, and the replacement has no node performing the same effect: the same
    operation (as written or as an aten operator of the same name) writing into the same tensor, or for an
    effect that writes nothing, the same call.  A write into a tensor the match itself made (``x.clone()
    .add_(1)``, not a view of anything outside) is seen only through the match's outputs, which the
    replacement replaces.  Random operations (``torch.rand``, dropout in training) may be removed: a pattern
    names them on purpose, and the ``impure`` check refuses a match that would remove one it does not name."""
    match, has_side_effects = splice.match, splice.effects.has_side_effects
    for node in match.nodes:  # nearly every match: no node has an effect, and no list is needed
        if has_side_effects(node, False):  # False: impure_random
            break
    else:
        return None
    effectful = [node for node in match.nodes if has_side_effects(node, False)]
    kept = {value for value in splice.values if isinstance(value, Node)}
    matched = set(match.nodes)
    for node in effectful:
        if node in kept:
            continue
        written = _written(node)
        if isinstance(written, Node) and view_base(written) in matched:
            continue
        if not any(_same_effect(node, new, written, splice.operation_name) for new in splice.created):
            into = f" writes into '{written.name}'" if isinstance(written, Node) else " has side effects"
            return f"'{node.name}'{into}, and the replacement, which would remove it, does not do the same"
    return None


@per_object
def _writes_nothing(rule: Rule) -> bool:
    """Exact: whether no node a match of the pattern binds may write in place.  Every operation is a method call or
    a call of one function (not an overload packet, which matches its ``out=`` overloads too, nor a higher-order
    operator), without ``...``, of a target that writes only where its arguments say so
    (:func:`~fxrules.graph.metadata.writing_arguments`: ``inplace=True``, a node given to ``out=``...), and the
    pattern names none of those arguments: left out, the node's hold their defaults (language.md §5, Defaults),
    which write nothing.  No ``A | B`` either: every operation binds a node of its target in every match, so the
    targets' purity, decided per target, is found once per rule in an apply
    (:meth:`~fxrules.graph.metadata.GraphEffects.impure_calls`).  ``torch.sigmoid(x) * x`` writes nothing;
    ``torch.add(x, y, out=o)``, ``torch.add(x, y, ...)`` and ``x.add_(y)`` may."""
    if any(isinstance(template, AltTemplate) for template in pattern_templates(rule)):
        return False
    return all(_call_writes_nothing(operation) for operation in _operations(rule))


def _call_writes_nothing(operation: OpTemplate) -> bool:
    if operation.rest or operation.kind not in (OpKind.FUNCTION, OpKind.METHOD) or isinstance(
            operation.target, torch._ops.OpOverloadPacket | torch._ops.HigherOrderOperator):
        return False
    writing = writing_arguments(operation.kind.value, operation.target)
    if writing is None:
        return False
    position, keywords = writing
    named = {name for name, _ in operation.kwargs} | set(operation.bound or ())
    return not ({"inplace", *keywords} & named or (position is not None and len(operation.args) > position))


def _written(node: Node) -> Any:
    """The tensor a node with side effects writes into (``out=``, else its first argument), or None."""
    out = node.kwargs.get("out")
    if isinstance(out, Node):
        return out
    if changes_an_argument(node):
        return node.args[0] if node.args else None
    return None


def _same_effect(node: Node, new: Node, written: Any, operation_name: Callable[[Node], str | None]) -> bool:
    if new.target != node.target and operation_name(new) != operation_name(node):
        return False
    if written is None:
        return new.args == node.args and new.kwargs == node.kwargs
    new_written = _written(new)
    return isinstance(new_written, Node) and view_base(new_written) is view_base(written)


def _used_late(splice: Splice) -> Detail | None:
    """The new nodes go before the earliest output, but an interior node the replacement reuses may come
    after it (an ancestor of a later output only), and a reused node may replace an output defined before
    it; spliced anyway, the graph would fail ``lint()`` and the whole ``apply`` with it."""
    outputs, anchor = splice.match.outputs, splice.anchor
    if len(outputs) == 1:
        return None
    new = set(splice.created)
    late = {used.name: None for node in splice.created for used in node.all_input_nodes
            if used not in new and used._sort_key > anchor._sort_key}
    late.update((value.name, None) for value, output in zip(splice.values, outputs, strict=True)
                if isinstance(value, Node) and value not in new and value._sort_key > output._sort_key)
    if late:
        return (f"the replacement uses {', '.join(late)}, defined after the output it would replace or after "
                f"the first output '{anchor.name}'")
    return None


def _literal_receiver(splice: Splice) -> Detail | None:
    """The generated code would not compile (``1.contiguous()``), and it is generated at the commit, whose
    failure undoes the whole ``apply``; refused now, only this rewrite is skipped."""
    retired, outputs = splice.retired, splice.match.outputs
    values: Sequence[Any] = splice.values  # one per output, at the splice stage
    if len(outputs) == 1 and isinstance(values[0], Node):  # most rewrites (x * 1 => x): the loop's one exit, unzipped
        return None
    for output, value in zip(outputs, values, strict=True):
        if isinstance(value, Node):
            continue
        for user in output.users:
            if user.op == "call_method" and user.args and user.args[0] is output and user not in retired:
                return f"'{user.name}' calls .{user.target}() on '{output.name}', which the replacement makes the " \
                       f"literal {value!r}"
    return None


def _may_replace_by_a_literal(rule: Rule) -> bool:
    """Exact: :func:`_literal_receiver` looks only at outputs replaced by no node; False when every output's
    replacement is a call the rewriter makes a node of, whatever the match (or skips): a method, a module, a
    function but ``getattr`` (of a module capture: a plain attribute is read as a literal) and the ``operator``
    functions (done at once on plain numbers: ``c * 1`` of a literal ``c``)."""
    return not all(isinstance(output, OpTemplate) and (
        output.kind in (OpKind.METHOD, OpKind.MODULE) or (
            output.kind is OpKind.FUNCTION and output.target is not getattr
            and getattr(output.target, "__module__", None) != "_operator")) for output in rule.replacement)


def _grad_mode(splice: Splice) -> Detail | None:
    """A rewrite may not move a computation into another grad mode, nor make a value computed without grad
    one that may require it where it is used outside the region: the values are equal, but gradients
    would flow where they did not (or stop where they flowed).  Within the region nothing records them.
    New nodes go before the anchor, in its mode."""
    modes = splice.grad_modes
    if modes is None:
        return None
    anchor_mode = modes.get(splice.anchor, OUTSIDE)
    for node in splice.match.nodes:
        if modes.get(node, OUTSIDE) not in (OUTSIDE, anchor_mode):
            return f"'{node.name}' is computed with grad {_enabled(modes[node])} and the replacement would be " \
                   f"computed with grad {_enabled(anchor_mode)}"
    created = splice.created
    for output, value in zip(splice.match.outputs, splice.values, strict=True):
        if isinstance(value, Node) and value not in created and modes.get(output) is False \
                and modes.get(value, OUTSIDE) is not False \
                and any(modes.get(user, OUTSIDE) is not False for user in output.users if user not in created):
            return f"'{output.name}' is computed with grad disabled, and '{value.name}', which would replace it " \
                   "where grad is not disabled, is not: it may require grad"
    return None


def _enabled(mode: bool | str) -> str:
    return "enabled" if mode is True else "disabled"


def _autocast(splice: Splice) -> Detail | None:
    """Autocast casts the inputs of the operations on its lists, so a rewrite that keeps a dtype elsewhere may
    change it there (``matmul(a, w) + b => addmm(b, a, w)``: bfloat16 in place of float32).  The match may not
    span two autocast states; in one that casts, the match and the replacement run on fake tensors under it:
    every output must keep its dtypes, and a new node autocast casts must have a matched counterpart of that
    dtype (:func:`~fxrules.graph.autocast.changed_dtype`).  New nodes go before the anchor, in its state."""
    regions = splice.autocast
    if regions is None:
        return None
    match, states = splice.match, regions.states(splice.anchor)
    for node in match.nodes:
        if node.op != "get_attr" and regions.states(node) != states:
            return f"'{node.name}' is computed {describe(regions.states(node))} and the replacement would be " \
                   f"computed {describe(states)}"
    if not any(casts(state) for state in states):
        return None
    return changed_dtype(match.nodes, match.outputs, splice.values, splice.created, states)


def _in_place_write(splice: Splice) -> Detail | None:
    """The write would reach both the output and the value it would share memory with."""
    if not splice.effects.writers_exist() and not _any_writes(splice.created):
        return None  # no node could write: the aliases need no search (nor the pairs)
    for output, existing in splice.pairs():
        for node in (output, existing):
            write = in_place_writer(node)
            if write is not None:
                aliases = alias_class(node)
                written = next(value for value in written_values(write) if value in aliases)
                relation = "which reads the memory of" if written.op == "get_attr" else "a view of"
                where = f"'{node.name}'" if written is node else f"'{written}', {relation} '{node.name}',"
                return f"'{write.name}' writes into {where} in place, and the replacement would make " \
                       f"'{output.name}' share memory with '{existing.name}'"
    return None


def _any_writes(nodes: list[Node] | tuple[()]) -> bool:
    for node in nodes:  # noqa: SIM110 - a loop: any() would add a generator on a hot path (every rewrite)
        if may_write_in_place(node):
            return True
    return False


def _alias(splice: Splice) -> Detail | None:
    """A caller writing into a returned result would write into the graph's input, attribute or other
    result it now shares memory with; a higher-order operator refuses such a subgraph outright."""
    outputs = splice.match.outputs
    # told before any exit: every rewrite must be (GraphEffects keeps the returned values' classes current)
    may_be_returned = splice.effects.rewriting(outputs, splice.values, splice.created)
    for output in outputs:
        if output in may_be_returned:
            break
    else:  # no returned value in any output's alias class: whatever replaces it, a caller sees no new alias
        return None
    returned: set[Node] | None = None
    for output, existing in splice.pairs():
        returned = set(splice.graph.output_node().all_input_nodes) if returned is None else returned
        if returned.isdisjoint(alias_class(output)):
            continue
        exposed = next((n for n in alias_class(existing) if n.op in ("placeholder", "get_attr") or n in returned),
                       None)
        if exposed is None:
            continue
        if splice.alias_free:
            return f"the subgraph would return '{existing.name}' (or a view of it) in place of '{output.name}', " \
                   "an alias of its input or of another output, which higher-order operators refuse"
        kind = {"placeholder": "the graph input", "get_attr": "the attribute"}.get(exposed.op, "the returned value")
        return f"'{output.name}' is returned, and the replacement would make it share memory with {kind} " \
               f"'{exposed.name}': a caller writing into the result would change it"
    return None


def _existing_aliases(value: Node, new: set[Node]) -> list[Node]:
    """The existing nodes a replacement value may share memory with: the value itself when it exists
    already, else the existing inputs its new views lead to (``reshape(x, b)``: ``x``)."""
    found: list[Node] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if node not in new:
            found.append(node)
        else:
            stack += aliased_inputs(node)
    return found


#: Every safety check of a rewrite, in the order they run.
SAFETY_CHECKS = (
    SafetyCheck("escaping_user", SkipReason.ESCAPING_USER, Stage.MATCH,
                "a matched node other than an output is used outside the match (the rewrite would delete it)",
                _escaping_user, _may_escape),
    SafetyCheck("impure", SkipReason.IMPURE, Stage.MATCH,
                "the match contains an impure node whose target the pattern does not name exactly", _impure,
                _may_be_impure),
    SafetyCheck("cycle", SkipReason.CYCLE, Stage.MATCH,
                "a capture is computed from a matched node", _cycle, _may_cycle),
    SafetyCheck("overlap", SkipReason.OVERLAP, Stage.PASS,
                "the match contains a node another rewrite of the pass created", _overlap),
    SafetyCheck("captured_late", SkipReason.ORDER, Stage.EMIT,
                "a pattern with several outputs captures a node defined after its first output", _captured_late,
                _several_outputs),
    SafetyCheck("written_between", SkipReason.IN_PLACE_WRITE, Stage.EMIT,
                "a capture is written in place between a matched node reading it and the output the replacement "
                "goes before (the replacement would read another value)", _written_between, needs=WRITERS),
    SafetyCheck("no_change", SkipReason.NO_CHANGE, Stage.SPLICE,
                "the replacement is the matched output itself, or computes it as the match does (the same "
                "operations of the same arguments)", _no_change, _may_be_unchanged),
    SafetyCheck("effects_kept", SkipReason.IMPURE, Stage.SPLICE,
                "a matched node with an effect beyond its result (an in-place write, out=, an assertion) would be "
                "removed, and the replacement does not perform the same effect", _effects_kept, needs=EFFECTS),
    SafetyCheck("used_late", SkipReason.ORDER, Stage.SPLICE,
                "a replacement of several outputs uses a node defined after the output it replaces, or after "
                "the first output", _used_late, _several_outputs),
    SafetyCheck("literal_receiver", SkipReason.LITERAL_RECEIVER, Stage.SPLICE,
                "an output replaced by a literal is the receiver of a method call", _literal_receiver,
                _may_replace_by_a_literal),
    SafetyCheck("grad_mode", SkipReason.GRAD_MODE, Stage.SPLICE,
                "the match spans two grad modes, or a value computed without grad would replace one used where "
                "grad is enabled", _grad_mode, needs=GRAD_MODES),
    SafetyCheck("autocast", SkipReason.AUTOCAST, Stage.SPLICE,
                "the match spans two autocast states, or under autocast an output's dtype would change, or a new "
                "node would be cast to a dtype no matched node of its operation computes in", _autocast,
                needs=AUTOCAST),
    SafetyCheck("in_place_write", SkipReason.IN_PLACE_WRITE, Stage.SPLICE,
                "an output would share memory with an existing value, and the graph writes into either in place",
                _in_place_write, needs=WRITERS),
    SafetyCheck("alias", SkipReason.ALIAS, Stage.SPLICE,
                "a returned output would share memory with a graph input, an attribute or another returned value",
                _alias),
)

#: The ``match`` stage's checks of a rule whose matches only ``escaping_user`` may refuse (see :func:`pair_refusal`).
ESCAPING_ONLY = tuple(check for check in SAFETY_CHECKS if check.name == "escaping_user")

#: The checks of each stage, in order.
MATCH_CHECKS, PASS_CHECKS, EMIT_CHECKS, SPLICE_CHECKS = (
    tuple(check for check in SAFETY_CHECKS if check.stage is stage) for stage in Stage)


def checks_table() -> str:
    """The Markdown table of every check, in order, as the docs show it."""
    rows = [f"| `{check.name}` | {check.stage.value} | `{check.reason.value}` | {check.refuses} |"
            for check in SAFETY_CHECKS]
    return "\n".join(["| check | stage | reason | refuses |", "| --- | --- | --- | --- |", *rows])
