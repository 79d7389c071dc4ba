"""Load-time warnings for rules that would fire forever.

Each rule's replacement is built as a standalone graph (captures as
placeholders) and every rule is matched against its nodes.  A rule whose
pattern matches its own replacement, and two rules each matching the
other's replacement, are reported before anything loops.  Where the match
cannot be decided without shape metadata or module values (a typed capture,
a guard), the pattern's operations alone decide, the types and the guard
assumed to hold: the matcher skips such a match for ``missing metadata`` or
``guard error`` only once its structure matched, so the skip counts as a
match.  The warning is a prompt to check, not a verdict.  Rules
whose replacement calls a helper are not checked (helpers run only on real
modules).

The check costs time linear in the rules, not quadratic: a replacement at
whose operations no rule would be tried (none anchored there, or none whose
required argument, an operand's operation, can be among the replacement's
operations) is not built at all, and at a node of a built
one only the rules filed under the node's anchor key *and* one argument their
pattern output requires (an operand's operation, or a literal that cannot
come from a default) are tried, as the engine narrows its candidates.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

import torch
import torch.fx

from fxrules.diagnostics import Diagnostic, Span
from fxrules.lang.ir import (
    AltTemplate,
    AnchorKey,
    Capture,
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
    anchor_keys,
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
from fxrules.rewrite.standalone import replacement_graph

#: Skip reasons that depend on values a standalone graph does not have.
UNDECIDED = frozenset({SkipReason.MISSING_METADATA, SkipReason.GUARD_ERROR})

#: What an argument of a node is, for the index: ("call", anchor key) of an operand, ("literal", value).
Feature = tuple[str, Hashable]

_LITERAL_TYPES = (int, float, bool, str, type(None))


def loop_warnings(ruleset: RuleSet) -> tuple[Diagnostic, ...]:
    """Warnings for self-matching rules and pairs of rules that undo each other."""
    index = _RuleFilter(ruleset)
    matches: dict[str, set[str]] = {}
    for rule in ruleset:
        if _uses_helper(rule):
            continue
        if not index.may_anchor_in(rule):
            matches[rule.name] = set()
            continue
        built = _replacement_graph(rule)
        if built is not None:
            matches[rule.name] = _rules_matching(built, index)
    by_name = {rule.name: rule for rule in ruleset}
    found = []
    unchanged = set()
    for rule in ruleset:
        warning = _no_change_warning(rule)
        if warning is not None:
            found.append(warning)
            unchanged.add(rule.name)
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
    if len(rule.pattern) != len(rule.replacement) or _uses_helper(rule) or _folds(rule):
        return None
    for loose in (False, True):
        if all(all(_same_computation(option, replacement, loose) for option in _options(pattern))
               for pattern, replacement in zip(rule.pattern, rule.replacement, strict=True)):
            where = ("in an ExportedProgram and Inductor's post-grad pass, where every operation is spelled as an "
                     "aten operator, its replacement computes what its pattern matches: every match there")  \
                if loose else "its replacement computes what its pattern matches: every match"
            return _warning(rule.span, f"rule {rule.name}: {where} is skipped as `no change`",
                            "an overload packet is emitted as the overload it matched; a family as its member "
                            "for the graph's level" if not loose else "in a GraphModule its targets are "
                            "emitted as written")
    return None


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


@per_object  # asked twice of each rule
def _uses_helper(rule: Rule) -> bool:
    return any(isinstance(t, HelperTemplate) or (isinstance(t, OpTemplate) and isinstance(t.target, HelperTemplate))
               for t in replacement_templates(rule))


def _replacement_graph(rule: Rule) -> tuple[torch.nn.Module, torch.fx.Graph] | None:
    modules = {name: torch.nn.Identity() for name, t in rule.types.items() if isinstance(t, ModuleType)}
    try:
        return replacement_graph(rule, modules, {})
    except Exception:  # a replacement that cannot be built symbolically is not checked
        return None


def _rules_matching(built: tuple[torch.nn.Module, torch.fx.Graph], index: _RuleFilter) -> set[str]:
    root, graph = built
    matcher = Matcher(root)
    found: set[str] = set()
    for node in graph.nodes:
        for rule in index.rules_at(root, node):
            if rule.name in found:
                continue
            try:
                if matcher.match(rule, node) is not None:
                    found.add(rule.name)
            except Skip as skip:
                if skip.reason in UNDECIDED:
                    found.add(rule.name)
    return found


class _RuleFilter:
    """The rules that may match at a node: filed by the anchor keys of their pattern output and by one
    argument the output requires, the one shared by the fewest rules (``None``: it requires none)."""

    def __init__(self, ruleset: RuleSet) -> None:
        self.ruleset = ruleset
        self.order = {rule.name: position for position, rule in enumerate(ruleset)}
        entries = {rule.name: list(_index_entries(rule)) for rule in ruleset}
        sharing: dict[tuple[AnchorKey, Feature], int] = {}
        for options in entries.values():
            for keys, requirements in options:
                for key in keys:
                    for features in requirements:
                        for feature in features:
                            sharing[key, feature] = sharing.get((key, feature), 0) + 1
        self.buckets: dict[tuple[AnchorKey, Feature | None], list[Rule]] = {}
        for rule in ruleset:
            for keys, requirements in entries[rule.name]:
                chosen = min(requirements, key=lambda fs: sum(sharing[k, f] for k in keys for f in fs),
                             default=(None,))
                for key in keys:
                    for chosen_feature in chosen:
                        self.buckets.setdefault((key, chosen_feature), []).append(rule)
        self.required: dict[AnchorKey, set[Feature | None]] = {}
        for key, wanted in self.buckets:
            self.required.setdefault(key, set()).add(wanted)
        self.anchors_modules = any(op == "call_module" for op, _ in self.required)

    def may_anchor_in(self, rule: Rule) -> bool:
        """Whether some rule may be tried at a node of ``rule``'s replacement graph (False only when certain):
        one anchored at a node's key, whose required argument (if any) the graph may hold."""
        keys = _emitted_keys(rule)
        if keys is None:
            return True
        # a module capture is an nn.Identity in the standalone graph, whatever class the rule declares
        if self.anchors_modules and any(op == "call_module" for op, _ in keys):
            return True
        return any(_may_hold(feature, keys) for key in keys for feature in self.required.get(key, ()))

    def rules_at(self, gm: torch.nn.Module, node: torch.fx.Node) -> list[Rule]:
        """The rules that may match at ``node``, in file order."""
        keys = node_keys(gm, node)
        if not keys:
            return []
        features: list[Feature | None] = [None]
        for value in (*node.args, *node.kwargs.values()):
            features += _features_of(gm, value)
        found = {rule.name: rule for key in keys for feature in features
                 for rule in self.buckets.get((key, feature), ())}
        return sorted(found.values(), key=lambda rule: self.order[rule.name])


def _may_hold(feature: Feature | None, keys: set[AnchorKey]) -> bool:
    """Whether a graph whose operations have anchor keys among ``keys`` may have a node with an argument of
    ``feature`` (None: any node will do).  Literals, modules and attributes are not told from the text."""
    if feature is None or feature[0] == "literal":
        return True
    key = feature[1]
    return key in keys or (isinstance(key, tuple) and key[0] in ("call_module", "get_attr"))


def _index_entries(rule: Rule) -> Iterator[tuple[tuple[AnchorKey, ...], list[frozenset[Feature]]]]:
    """For each option of the pattern output a match starts at: its anchor keys, and the arguments it requires
    (each a set of features of which a matching node has one among its arguments)."""
    output = rule.pattern[matching_order(rule.pattern)[0]]
    for option in output.options if isinstance(output, AltTemplate) else (output,):
        keys = tuple(dict.fromkeys(anchor_keys(option)))
        if keys and isinstance(option, OpTemplate):
            yield keys, _required_arguments(option)


def _required_arguments(template: OpTemplate) -> list[frozenset[Feature]]:
    """What a node the operation matches has among its direct arguments, whichever way its call binds
    (by name, as written, commutative operands swapped): each operand operation, and each literal whose
    parameter has no default.  Nothing for a target taking sizes loose (an operand may be in the tuple)."""
    signature = template.signature
    if template.kind is OpKind.FAMILY:
        members = template.target.members
        if any(m.signature is not None and m.signature.pack_from is not None for m in members):
            return []
        with_default = None  # a member may supply a literal from a default or a module attribute
    elif signature is not None and signature.pack_from is not None:
        return []
    else:
        with_default = _with_default(template) if template.kind in (OpKind.FUNCTION, OpKind.METHOD) else None
    parameter_of = {id(t): name for name, t in (template.bound or {}).items()}
    required: list[frozenset[Feature]] = []
    for operand in template.operands():
        keys = _operation_keys(operand)
        if keys:
            required.append(frozenset(("call", key) for key in keys))
        elif isinstance(operand, Literal) and with_default is not None \
                and parameter_of.get(id(operand)) not in with_default and _indexable(operand.value):
            required.append(frozenset({("literal", operand.value)}))
    return required


def _operation_keys(template: Template) -> tuple[AnchorKey, ...]:
    """The anchor keys of an operand that is an operation (every option of ``A | B`` one), else ()."""
    options = template.options if isinstance(template, AltTemplate) else (template,)
    if not all(isinstance(o, OpTemplate) for o in options):
        return ()
    return tuple(dict.fromkeys(key for option in options for key in anchor_keys(option)))


def _with_default(template: OpTemplate) -> frozenset[str]:
    signature = template.signature
    return frozenset() if signature is None else _parameters_with_default(signature)


@per_object
def _parameters_with_default(signature: CallSignature) -> frozenset[str]:
    """The parameters of any overload that have a default, once per signature (rules share their targets')."""
    return frozenset(name for overload in signature.overloads for name, parameter in overload.parameters.items()
                     if parameter.default is not parameter.empty)


def _indexable(value: Any) -> bool:
    """A literal found by hashing: ``1``, ``1.0`` and ``True`` share a bucket, which only widens it."""
    return type(value) in _LITERAL_TYPES and not (isinstance(value, float) and math.isnan(value))


def _features_of(gm: torch.nn.Module, value: Any) -> Iterable[Feature]:
    if isinstance(value, torch.fx.Node):
        return [("call", key) for key in node_keys(gm, value)]
    return [("literal", value)] if _indexable(value) else []


def _emitted_keys(rule: Rule) -> set[AnchorKey] | None:
    """The anchor keys of every node the rule's replacement graph may hold, or None when they cannot be
    told from the text: an aten-level graph spells replacements as aten operators the text does not name.

    The graph computes the pattern first (the replacement may reuse its named operations), then drops what
    the replacement does not use: an aten operation anywhere in the pattern can make the graph aten-level.
    """
    keys: set[AnchorKey] = set()
    pattern = [t for t in pattern_templates(rule) if isinstance(t, OpTemplate)]
    if any(isinstance(_emitted_target(t), torch._ops.OpOverload | torch._ops.OpOverloadPacket)
           for t in pattern):
        return None
    interior = {t.name: t for t in pattern if t.name}
    for template in replacement_templates(rule):
        reused = interior.get(template.name) if isinstance(template, Capture) else None
        for operation in walk(reused) if reused is not None else (template,):
            if isinstance(operation, OpTemplate):
                keys.update(anchor_keys(operation))
                packet = getattr(operation.target, "overloadpacket", None)
                if packet is not None:
                    keys.add(("call_function", packet))
    return keys


def _emitted_target(template: OpTemplate) -> Any:
    """The target a template's node calls when emitted: a family emits its first member."""
    return template.target.primary.target if template.kind is OpKind.FAMILY else template.target


def _warning(span: Span, message: str, hint: str) -> Diagnostic:
    return Diagnostic(span, message, hint=hint, severity="warning")
