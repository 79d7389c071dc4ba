"""Load-time warnings for rules that would fire forever.

Each rule's replacement is built as a standalone graph (captures as
placeholders) and rules are matched against its nodes.  A rule whose
pattern matches its own replacement, and two rules each matching the
other's replacement, are reported before anything loops.  Where the match
cannot be decided without shape metadata or module values (a typed capture,
a guard), the pattern's operations alone decide, the types and the guard
assumed to hold: the matcher skips such a match for ``missing metadata`` or
``guard error`` only once its structure matched, so the skip counts as a
match.  The warning is a prompt to check, not a verdict.  Rules
whose replacement calls a helper are not checked (helpers run only on real
modules).

Only what can end in a warning is built and tried, so the check costs time
linear in the rules, not quadratic.  Which rules may match a replacement
graph is told from the text (:class:`_Reach`: the anchor keys of the nodes
the graph may hold, and which arguments a node of each key may have), as
the engine narrows its candidates, and one step further: a rule may match
only where a node of its anchor key has the arguments its pattern output
requires (an operand's operation, or a literal that cannot come from a
default), and an operand's node those its operation requires in turn.  Of
those rules, a match matters only for the rule itself (it may match its own
replacement) and for a rule whose pattern the first may match in turn (a
pair may undo each other): a replacement no such rule may match is not
built at all, and at a node of one that is built only those rules are
tried, and only where the node has their anchor key and every argument they
require.  The warnings are those of the plain check, which builds every
replacement and tries every rule at every node (tests/engine/
test_loop_warnings.py compares the two).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator
from typing import Any, NamedTuple, TypeGuard

import attrs
import torch
import torch.fx

from fxrules.diagnostics import Diagnostic, Span
from fxrules.lang.ir import (
    AltTemplate,
    AnchorKey,
    Capture,
    Family,
    HelperTemplate,
    Literal,
    ModuleType,
    OpKind,
    OpTemplate,
    Rule,
    RuleSet,
    ScalarType,
    SeqTemplate,
    Template,
    matching_order,
    pattern_templates,
    replacement_templates,
    walk,
)
from fxrules.lang.signatures import CallSignature
from fxrules.match.matcher import Matcher, node_keys
from fxrules.match.skips import Skip, SkipReason
from fxrules.memo import per_object
from fxrules.rewrite.aten import aten_name
from fxrules.rewrite.standalone import (
    dead_as_emitted,
    never_folds,
    replacement_graph,
)

#: Skip reasons that depend on values a standalone graph does not have.
UNDECIDED = frozenset({SkipReason.MISSING_METADATA, SkipReason.GUARD_ERROR})

#: What an argument of a node is, for the index: ("call", anchor key) of an operand, ("literal", value).
Feature = tuple[str, Hashable]

_LITERAL_TYPES = (int, float, bool, str, type(None))

#: The keys of a module capture's node: the check's graphs call an ``nn.Identity`` for every module capture.
_MODULE_KEYS = tuple(("call_module", cls) for cls in torch.nn.Identity.__mro__)


def loop_warnings(ruleset: RuleSet) -> tuple[Diagnostic, ...]:
    """Warnings for self-matching rules and pairs of rules that undo each other."""
    found = []
    unchanged = set()
    for rule in ruleset:
        warning = _no_change_warning(rule)
        if warning is not None:
            found.append(warning)
            unchanged.add(rule.name)
    index = _RuleFilter(ruleset)
    matches: dict[str, set[str]] = {}
    for rule in ruleset:
        if _uses_helper(rule):
            continue
        deciding = index.deciding(rule, unchanged)
        if not deciding:  # whatever matches its replacement, no warning can come of it
            matches[rule.name] = set()
            continue
        built = _replacement_graph(rule)
        if built is not None:
            matches[rule.name] = _rules_matching(built, deciding, index)
    by_name = {rule.name: rule for rule in ruleset}
    for name, matched in matches.items():
        span = by_name[name].span
        if name in matched and name not in unchanged:  # skipped as `no change`, it cannot fire forever
            found.append(_warning(span, f"rule {name}: its pattern matches its own replacement, so it may fire "
                                        "forever", "apply stops at max_passes with an error"))
        for other in sorted(matched - {name}):
            if name < other and name in matches.get(other, set()):
                found.append(_warning(span, f"rules {name} and {other} undo each other, so they may fire forever",
                                      f"{other} is at {by_name[other].span}"))
    return tuple(found)


def _no_change_warning(rule: Rule) -> Diagnostic | None:
    """A warning for a rule whose replacement is its pattern, but for spellings that denote the same operator:
    an overload packet and its overloads, a family and its members (everywhere), and, where aten operators
    are required, a torch function or method and the aten operator of its name.  Every match of such a rule
    is skipped as ``no change``, everywhere or where aten operators are required."""
    # the loose test first: it holds wherever the strict one does, and fails for almost every rule
    if len(rule.pattern) != len(rule.replacement) or _uses_helper(rule) or _folds(rule) \
            or not _same_outputs(rule, loose=True):
        return None
    if _same_outputs(rule, loose=False):
        return _warning(rule.span, f"rule {rule.name}: its replacement computes what its pattern matches: every "
                        "match is skipped as `no change`", "an overload packet is emitted as the overload it "
                        "matched; a family as its member for the graph's level")
    return _warning(rule.span, f"rule {rule.name}: in an ExportedProgram and Inductor's post-grad pass, where every "
                    "operation is spelled as an aten operator, its replacement computes what its pattern matches: "
                    "every match there is skipped as `no change`", "in a GraphModule its targets are emitted as "
                    "written")


def _same_outputs(rule: Rule, loose: bool) -> bool:
    """Whether each output of the replacement computes what the pattern's matches (``loose``: where aten is
    required, :func:`_same_operator`)."""
    return all(all(_same_computation(option, replacement, loose) for option in _options(pattern))
               for pattern, replacement in zip(rule.pattern, rule.replacement, strict=True))


#: Capture types whose values are numbers: ``operator`` arithmetic on them (and on number literals) is
#: computed at rewrite time, so the replacement is a literal, not the operation its pattern matched.
_NUMBER_TYPES = frozenset({"int", "float", "bool", "Scalar"})


def _folds(rule: Rule) -> bool:
    """Whether every output of the replacement is ``operator`` arithmetic on numbers, folded when it is spliced."""
    def folded(template: Template) -> bool:
        if isinstance(template, Literal):
            return isinstance(template.value, int | float | bool)
        if isinstance(template, Capture):
            kind = rule.types.get(template.name)
            return isinstance(kind, ScalarType) and kind.name in _NUMBER_TYPES
        return (isinstance(template, OpTemplate) and getattr(template.target, "__module__", None) == "_operator"
                and not template.rest and all(folded(argument) for argument in _arguments(template).values()))
    return all(isinstance(output, OpTemplate) and folded(output) for output in rule.replacement)


def _options(template: Template) -> tuple[Template, ...]:
    return template.options if isinstance(template, AltTemplate) else (template,)


def _same_computation(pattern: Template, replacement: Template, loose: bool) -> bool:
    """Whether ``replacement`` computes what ``pattern`` matches (``loose``: where aten is required)."""
    if isinstance(pattern, Capture) and isinstance(replacement, Capture):
        return pattern.name == replacement.name
    if isinstance(pattern, OpTemplate) and isinstance(replacement, Capture):
        return pattern.name == replacement.name  # an interior the pattern named, given back as it was
    if isinstance(pattern, Literal) and isinstance(replacement, Literal):
        return type(pattern.value) is type(replacement.value) and pattern.value == replacement.value
    if isinstance(pattern, SeqTemplate) and isinstance(replacement, SeqTemplate):
        return len(pattern.items) == len(replacement.items) and all(
            _same_computation(p, r, loose) for p, r in zip(pattern.items, replacement.items, strict=True))
    if not (isinstance(pattern, OpTemplate) and isinstance(replacement, OpTemplate)) \
            or pattern.rest or not _same_operator(pattern, replacement, loose):
        return False
    ours, theirs = _arguments(pattern), _arguments(replacement)
    return ours.keys() == theirs.keys() and all(_same_computation(ours[k], theirs[k], loose) for k in ours)


def _same_operator(pattern: OpTemplate, replacement: OpTemplate, loose: bool) -> bool:
    """Whether ``replacement`` emits the one target ``pattern`` matches (an overload packet resolves to its
    overload, a family emits its first or its first aten member); ``loose``: or, where aten is required, a
    function or method spelled as that aten operator."""
    if pattern.kind is OpKind.FAMILY or isinstance(pattern.target, torch._ops.OpOverloadPacket):
        return False  # it matches other spellings too, which the replacement changes
    target = pattern.target
    for kind, emitted in _emitted(replacement):
        if (kind, emitted) == (pattern.kind, target) or emitted is getattr(target, "overloadpacket", None):
            return True
        if loose and isinstance(target, torch._ops.OpOverload) and aten_name(kind, emitted) == aten_name(
                pattern.kind, target):
            return True
    return False


def _emitted(template: OpTemplate) -> list[tuple[OpKind, Any]]:
    """The targets an operation may emit: itself, or a family's first member and its first aten member."""
    if template.kind is not OpKind.FAMILY:
        return [(template.kind, template.target)]
    members = template.target.members
    aten = [m for m in members if isinstance(m.target, torch._ops.OpOverload)][:1]
    return [(m.kind, m.target) for m in (members[0], *aten)]


def _arguments(template: OpTemplate) -> dict[Any, Template]:
    """An operation's arguments by position and keyword, ``input`` and ``self`` one name."""
    named = {("self" if name == "input" else name): value for name, value in template.kwargs}
    return {**dict(enumerate(template.args)), **named}


@per_object  # asked of each rule, and of each rule a replacement may start a match of
def _uses_helper(rule: Rule) -> bool:
    return any(isinstance(t, HelperTemplate) or (isinstance(t, OpTemplate) and isinstance(t.target, HelperTemplate))
               for t in replacement_templates(rule))


def _replacement_graph(rule: Rule) -> tuple[torch.nn.Module, torch.fx.Graph] | None:
    modules = {name: torch.nn.Identity() for name, t in rule.types.items() if isinstance(t, ModuleType)}
    try:
        return replacement_graph(rule, modules, {})
    except Exception:  # a replacement that cannot be built symbolically is not checked
        return None


def _rules_matching(built: tuple[torch.nn.Module, torch.fx.Graph], rules: list[Rule], index: _RuleFilter) -> set[str]:
    """Which of ``rules`` match (or are undecided at) some node of the graph: each tried only where the node has
    its anchor key and every argument it requires (a node it matches has them)."""
    root, graph = built
    matcher = Matcher(root)
    found: set[str] = set()
    for node in graph.nodes:
        keys = node_keys(root, node)
        if not keys:
            continue
        features = _features_of(root, node)
        for rule in rules:
            if rule.name in found or not index.may_start(rule, keys, features):
                continue
            try:
                if matcher.match(rule, node) is not None:
                    found.add(rule.name)
            except Skip as skip:
                if skip.reason in UNDECIDED:
                    found.add(rule.name)
    return found


class _Option(NamedTuple):
    """One option of a rule's pattern output, for the index: where a match of it may start."""

    keys: tuple[AnchorKey, ...]  # its anchor keys
    required: tuple[frozenset[Feature], ...]  # the arguments it requires (:func:`_required_arguments`)
    operands: tuple[OpTemplate, ...]  # its operands that are operations (:func:`_operand_requirements`)


class _RuleFilter:
    """The rules that may match in a replacement graph: filed by the anchor keys of their pattern output and
    by one argument the output requires, the one shared by the fewest rules (``None``: it requires none), so
    the rules a graph may start a match of are found by its (node key, argument) pairs, each rule once."""

    def __init__(self, ruleset: RuleSet) -> None:
        self.order = {rule.name: position for position, rule in enumerate(ruleset)}
        self.entries = {rule.name: _index_entries(rule) for rule in ruleset}
        sharing: dict[tuple[AnchorKey, Feature], int] = {}
        for options in self.entries.values():
            for keys, requirements, _ in options:
                for key in keys:
                    for features in requirements:
                        for feature in features:
                            sharing[key, feature] = sharing.get((key, feature), 0) + 1
        self.buckets: dict[tuple[AnchorKey, Feature | None], list[Rule]] = {}
        for rule in ruleset:
            for keys, requirements, _ in self.entries[rule.name]:
                chosen = requirements[0] if len(requirements) == 1 else min(
                    requirements, key=lambda fs: sum(sharing[k, f] for k in keys for f in fs), default=(None,))
                for key in keys:
                    for chosen_feature in chosen:
                        self.buckets.setdefault((key, chosen_feature), []).append(rule)
        # per key, the literals rules are filed under there: a graph whose literals are not told may have each
        self.literals: dict[AnchorKey, list[Feature]] = {}
        for key, filed in self.buckets:
            if filed is not None and filed[0] == "literal":
                self.literals.setdefault(key, []).append(filed)
        self.indexed = [rule for rule in ruleset if self.entries[rule.name]]

    def deciding(self, rule: Rule, unchanged: set[str]) -> list[Rule]:
        """The rules, in file order, whose match in ``rule``'s replacement graph could end in a warning: ``rule``
        itself (unless it is skipped as ``no change``), and each rule whose own replacement ``rule`` may match."""
        reach = _reach(rule)
        deciding = []
        for other in self._candidates(reach):
            if not self.may_match(other, reach):
                continue
            if other is rule:
                wanted = rule.name not in unchanged
            else:  # a rule with a helper has no matches of its own (it is not checked), so it is in no pair
                wanted = not _uses_helper(other) and self.may_match(rule, _reach(other))
            if wanted:
                deciding.append(other)
        return sorted(deciding, key=lambda r: self.order[r.name])

    def _candidates(self, reach: _Reach) -> Iterator[Rule]:
        """The rules filed where a graph of ``reach`` may have a node, each once."""
        if reach.keys is None or reach.edges is None:
            yield from self.indexed
            return
        # a rule may_match takes has a node of its anchor key there with its filed feature among the arguments
        filed: list[tuple[AnchorKey, Feature | None]] = [(key, None) for key in reach.keys]
        filed += reach.edges
        if reach.any_literal:
            filed += [(key, feature) for key in reach.keys for feature in self.literals.get(key, ())]
        seen: set[str] = set()
        for place in filed:
            for other in self.buckets.get(place, ()):
                if other.name not in seen:
                    seen.add(other.name)
                    yield other

    def may_match(self, rule: Rule, reach: _Reach) -> bool:
        """Whether ``rule`` may match at some node of a graph of ``reach`` (False only when certain): a node
        has its anchor key, and the arguments it requires; an operand operation's node, those it requires."""
        return any((reach.keys is None or not reach.keys.isdisjoint(option.keys))
                   and reach.may_hold(option.keys, option.required)
                   and all(reach.may_hold(*_operand_requirements(operand)) for operand in option.operands)
                   for option in self.entries[rule.name])

    def may_start(self, rule: Rule, keys: list[AnchorKey], features: set[Feature]) -> bool:
        """Whether ``rule`` may match at a node of anchor keys ``keys`` whose arguments have ``features``."""
        return any(any(key in keys for key in option.keys) and all(not f.isdisjoint(features) for f in option.required)
                   for option in self.entries[rule.name])


@attrs.frozen
class _Reach:
    """What the nodes of a rule's replacement graph may be: their anchor keys, and which have which arguments
    (None: any, not told from the text); ``any_literal``: a literal argument may be any, not only one told."""

    keys: frozenset[AnchorKey] | None
    edges: frozenset[tuple[AnchorKey, Feature]] | None  # (a node's anchor key, a feature of its arguments)
    any_literal: bool

    def may_hold(self, keys: tuple[AnchorKey, ...], required: tuple[frozenset[Feature], ...]) -> bool:
        """Whether a node of the graph with one of anchor keys ``keys`` may have the arguments ``required`` says:
        for each set of features, an argument of one of them."""
        return all(any(self.may_hold_at(keys, feature) for feature in features) for features in required)

    def may_hold_at(self, keys: tuple[AnchorKey, ...], feature: Feature) -> bool:
        """Whether a node of the graph with one of anchor keys ``keys`` may have an argument of ``feature``."""
        if self.edges is None or (self.any_literal and feature[0] == "literal"):
            return True
        return any((key, feature) in self.edges for key in keys)


@per_object
def _reach(rule: Rule) -> _Reach:
    """What the nodes of the rule's replacement graph (built by :func:`_replacement_graph`) may be.

    Exact to cover every node: the graph holds placeholders (the captures, which have no keys), the nodes of
    the replacement, and the pattern's that may survive dead-code removal (:func:`_surviving`).  An operation
    is emitted as written with the arguments written, a family as its first member (its keys are those of
    every member), unless the graph is aten-level, which only an aten operation of the pattern makes it (the
    pattern is computed first, or the graph holds only placeholders when the first operation is emitted):
    then nothing is told.  A node's keys are its target's and the target's overload packet's, or an
    ``nn.Identity``'s (every module capture is one).  Its arguments are told by :func:`_argument_features`;
    ``operator`` arithmetic that may be folded, and a module capture's attribute, may make any literal.
    """
    operations = [t for t in pattern_templates(rule) if isinstance(t, OpTemplate)]
    if any(isinstance(_emitted_target(t), torch._ops.OpOverload | torch._ops.OpOverloadPacket) for t in operations):
        return _Reach(None, None, any_literal=True)
    keys: set[AnchorKey] = set()
    edges: set[tuple[AnchorKey, Feature]] = set()
    any_literal = False
    attributes = {t.binds for t in operations if t.kind is OpKind.ATTR and t.binds}
    interior = {t.name: t for t in operations if t.name}
    for template in replacement_templates(rule) + _surviving(rule, operations, interior):
        if isinstance(template, OpTemplate):
            own = _keys_of(template)
            keys.update(own)
            for operand in template.operands():
                edges.update((key, feature) for feature in _argument_features(operand, interior, attributes)
                             for key in own)
            if template.target is getattr:  # of a module capture: a get_attr node, or the value read
                keys.add(("get_attr", None))
                any_literal = True
            elif getattr(_emitted_target(template), "__module__", None) == "_operator" and not never_folds(template):
                any_literal = True  # folded: a literal its parent has
    return _Reach(frozenset(keys), frozenset(edges), any_literal)


def _argument_features(operand: Template, interior: dict[str, OpTemplate], attributes: set[str]) -> Iterator[Feature]:
    """What the argument emitted for ``operand`` may be: a node of an operation (a ``getattr`` may be a
    ``get_attr`` node), the interior node a capture names, None for an ``Attr`` capture, a literal (a
    folded one is among the graph's literals, which are then not told); a placeholder or a list is none."""
    if isinstance(operand, AltTemplate):
        for option in operand.options:
            yield from _argument_features(option, interior, attributes)
    elif isinstance(operand, Capture):
        if operand.name in interior:
            yield from (("call", key) for key in _keys_of(interior[operand.name]))
        elif operand.name in attributes:
            yield ("literal", None)
    elif isinstance(operand, Literal):
        if _indexable(operand.value):
            yield ("literal", operand.value)
    elif isinstance(operand, OpTemplate):
        yield from (("call", key) for key in _keys_of(operand))
        if operand.target is getattr or operand.kind is OpKind.ATTR:
            yield ("call", ("get_attr", None))
            yield ("literal", None)


def _surviving(rule: Rule, operations: list[OpTemplate], interior: dict[str, OpTemplate]) -> tuple[Template, ...]:
    """The templates of the pattern whose nodes may be left in the replacement graph.  Where dead-code removal
    drops every pattern node nothing uses (:func:`dead_as_emitted`), those the replacement gives back by name
    and what they are computed from (none where the pattern vanishes, :func:`pattern_vanishes`: it names none
    the replacement uses); else, all."""
    if not all(dead_as_emitted(t) for t in operations):
        return pattern_templates(rule)
    return tuple(template for t in replacement_templates(rule) if isinstance(t, Capture) and t.name in interior
                 for template in walk(interior[t.name]))


def _keys_of(template: OpTemplate) -> tuple[AnchorKey, ...]:
    """The anchor keys a node emitted for ``template`` may have."""
    if template.kind is OpKind.FAMILY:
        return _member_keys(template.target)
    return _node_keys(template.kind.value, template.target)


@per_object  # rules share families (the prelude's): each family's once
def _member_keys(family: Family) -> tuple[AnchorKey, ...]:
    return tuple(key for member in family.members for key in _node_keys(member.kind.value, member.target))


def _node_keys(op: str, target: Any) -> tuple[AnchorKey, ...]:
    """The anchor keys of a node of ``op`` calling ``target`` (:func:`node_keys`), a module an ``nn.Identity``."""
    if op == "call_module":
        return _MODULE_KEYS
    if op == "get_attr":
        return (("get_attr", None),)
    packet = getattr(target, "overloadpacket", None)
    return ((op, target),) if packet is None else ((op, target), ("call_function", packet))


def _index_entries(rule: Rule) -> tuple[_Option, ...]:
    """For each option of the pattern output a match starts at: its anchor keys, and the arguments it requires
    (each a set of features of which a matching node has one among its arguments)."""
    output = rule.pattern[matching_order(rule.pattern)[0]]
    entries = []
    for option in _flat_options(output):
        if isinstance(option, OpTemplate):
            operands = tuple(operand for operand in option.operands() if isinstance(operand, OpTemplate))
            entries.append(_Option(_anchor_keys(option), tuple(_required_arguments(option)), operands))
    return tuple(entries)


@per_object  # asked only of the rules a replacement may start a match of
def _operand_requirements(operand: OpTemplate) -> tuple[tuple[AnchorKey, ...], tuple[frozenset[Feature], ...]]:
    """An operand operation's anchor keys, and the arguments its node requires in turn."""
    return _anchor_keys(operand), tuple(_required_arguments(operand))


def _flat_options(template: Template) -> Iterator[Template]:
    """The options of ``A | B`` (and of an ``|`` among them), or the template itself."""
    if isinstance(template, AltTemplate):
        for option in template.options:
            yield from _flat_options(option)
    else:
        yield template


def _required_arguments(template: OpTemplate) -> list[frozenset[Feature]]:
    """What a node the operation matches has among its direct arguments, whichever way its call binds
    (by name, as written, commutative operands swapped): each operand operation, and each literal whose
    parameter has no default.  Nothing for a target taking sizes loose (an operand may be in the tuple)."""
    signature = template.signature
    if template.kind is OpKind.FAMILY:
        if _sizes_loose(template.target):
            return []
        with_default = None  # a member may supply a literal from a default or a module attribute
    elif signature is not None and signature.pack_from is not None:
        return []
    else:
        with_default = _with_default(template) if template.kind in (OpKind.FUNCTION, OpKind.METHOD) else None
    parameter_of = {id(t): name for name, t in (template.bound or {}).items()}
    required: list[frozenset[Feature]] = []
    for operand in template.operands():
        features = _call_features(operand)
        if features:
            required.append(features)
        elif isinstance(operand, Literal) and with_default is not None \
                and parameter_of.get(id(operand)) not in with_default and _indexable(operand.value):
            required.append(frozenset({("literal", operand.value)}))
    return required


def _call_features(template: Template) -> frozenset[Feature]:
    """The features of an argument node an operand that is an operation may match (every option of ``A | B``
    one), else none."""
    if isinstance(template, OpTemplate):
        return _family_features(template.target) if template.kind is OpKind.FAMILY else frozenset(
            {("call", (template.kind.value, template.target))})
    options = template.options if isinstance(template, AltTemplate) else ()
    operations = [o for o in options if isinstance(o, OpTemplate)]
    if not operations or len(operations) < len(options):
        return frozenset()
    return frozenset(("call", key) for option in operations for key in _anchor_keys(option))


def _anchor_keys(template: OpTemplate) -> tuple[AnchorKey, ...]:
    """:func:`fxrules.lang.ir.anchor_keys` of an operation, each once (a family's found once per family)."""
    if template.kind is OpKind.FAMILY:
        return _family_keys(template.target)
    return ((template.kind.value, template.target),)


@per_object  # rules share families (the prelude's): what the index asks of each, once
def _family_keys(family: Family) -> tuple[AnchorKey, ...]:
    return tuple(dict.fromkeys(member.key for member in family.members))


@per_object
def _family_features(family: Family) -> frozenset[Feature]:
    return frozenset(("call", key) for key in _family_keys(family))


@per_object
def _sizes_loose(family: Family) -> bool:
    """Whether a member takes sizes loose (``x.view(2, 3)``)."""
    return any(m.signature is not None and m.signature.pack_from is not None for m in family.members)


def _with_default(template: OpTemplate) -> frozenset[str]:
    signature = template.signature
    return frozenset() if signature is None else _parameters_with_default(signature)


@per_object
def _parameters_with_default(signature: CallSignature) -> frozenset[str]:
    """The parameters of any overload that have a default, once per signature (rules share their targets')."""
    return frozenset(name for overload in signature.overloads for name, parameter in overload.parameters.items()
                     if parameter.default is not parameter.empty)


def _indexable(value: Any) -> TypeGuard[int | float | bool | str | None]:
    """A literal found by hashing: ``1``, ``1.0`` and ``True`` share a bucket, which only widens it."""
    return type(value) in _LITERAL_TYPES and not (isinstance(value, float) and math.isnan(value))


def _features_of(gm: torch.nn.Module, node: torch.fx.Node) -> set[Feature]:
    """What the arguments of ``node`` are, for :meth:`_RuleFilter.may_start`."""
    features: set[Feature] = set()
    for value in (*node.args, *node.kwargs.values()):
        if isinstance(value, torch.fx.Node):
            features.update(("call", key) for key in node_keys(gm, value))
        elif _indexable(value):
            features.add(("literal", value))
    return features


def _emitted_target(template: OpTemplate) -> Any:
    """The target a template's node calls when emitted: a family emits its first member."""
    return template.target.primary.target if template.kind is OpKind.FAMILY else template.target


def _warning(span: Span, message: str, hint: str) -> Diagnostic:
    return Diagnostic(span, message, hint=hint, severity="warning")
