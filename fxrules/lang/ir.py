"""The resolved rule IR: immutable, fully checked rules that the matcher and rewriter execute.

A :class:`Rule` holds its pattern and replacement as *templates*: trees of
:class:`OpTemplate`, :class:`Capture`, :class:`Literal`, ... in which a node
that the source names (``c = torch.cat(...)``) is the same object wherever it
is used, so a template is a use-def DAG.  Targets are real Python objects
(``torch.relu``, ``operator.add``, ``aten.addmm.default``, ``nn.Conv2d``) or
method names.  A :class:`RuleSet` indexes its rules by the graph-node keys
that can anchor them.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from fxrules.diagnostics import Diagnostic, FxrUsageError, Span, did_you_mean
from fxrules.lang.signatures import CallSignature, function_signature, method_signature, module_call_signature
from fxrules.memo import per_object

# ---------------------------------------------------------------- operations and families


class OpKind(enum.Enum):
    """What kind of FX node an operation template stands for."""

    FUNCTION = "call_function"
    METHOD = "call_method"
    MODULE = "call_module"
    ATTR = "get_attr"
    FAMILY = "family"
    HELPER = "helper"  # replacement only: the value a rewrite-time helper returns


#: How the index files a rule: (FX op, target), the target being a callable, a
#: method name, an ``nn.Module`` class, or None for ``get_attr``.
AnchorKey = tuple[str, Any]


@attrs.frozen(eq=False)  # identity equality, as the guards' (see there)
class FamilyMember:
    """One spelling of a family: how it appears in a graph and how its arguments map."""

    kind: OpKind  # FUNCTION, METHOD or MODULE
    target: Any
    span: Span

    @property
    def signature(self) -> CallSignature | None:
        """How its arguments bind, found when first asked (each target's once): most members of the prelude's
        families are never asked, and finding a torch function's signatures is a third of loading the prelude."""
        if self.kind is OpKind.MODULE:
            return module_call_signature(self.target)
        return method_signature(self.target) if self.kind is OpKind.METHOD else function_signature(self.target)

    @property
    def key(self) -> AnchorKey:
        return (self.kind.value, self.target)

    def __str__(self) -> str:
        return describe_target(self.kind, self.target)


@attrs.frozen(eq=False)
class Family:
    """One name for every spelling of an operation; its arguments are its first member's."""

    name: str
    members: tuple[FamilyMember, ...]
    span: Span

    @property
    def primary(self) -> FamilyMember:
        return self.members[0]

    def member_for(self, key: AnchorKey) -> FamilyMember | None:
        for member in self.members:
            if member.key == key:
                return member
        return None


def describe_target(kind: OpKind, target: Any) -> str:
    """The name a user would write for a target: ``torch.relu``, ``Tensor.sum``, ``nn.Conv2d``."""
    if kind is OpKind.METHOD:
        return f"Tensor.{target}"
    if kind is OpKind.FAMILY:
        return f"family {target.name}"
    if kind is OpKind.ATTR:
        return "get_attr"
    if isinstance(target, type):
        return f"{target.__module__}.{target.__qualname__}"
    module = getattr(target, "__module__", None)
    name = getattr(target, "__name__", None) or str(target)
    if module in {"_operator", "operator"}:
        return f"operator.{name}"
    if module and module.startswith("torch._ops"):
        return str(target)
    return f"{module}.{name}" if module and module != "builtins" else name


# ---------------------------------------------------------------- templates


@attrs.frozen
class Capture:
    """A free variable: binds any node or argument value (narrowed by its ``given`` type)."""

    name: str
    span: Span


@attrs.frozen
class Wildcard:
    """``_``: matches anything and binds nothing."""

    span: Span


@attrs.frozen
class Literal:
    """A constant argument: ``1``, ``-1.5``, ``None``, ``"mean"``, ``torch.float16``, ``slice(None)``."""

    value: Any
    span: Span


@attrs.frozen
class SeqTemplate:
    """A list or tuple argument, matched element by element (a list equals a tuple)."""

    items: tuple[Template, ...]
    span: Span
    is_tuple: bool = False
    is_sequence = True  # read by signature binding, which tells list parameters from others


@attrs.frozen
class SliceTemplate:
    """``a:b:c`` inside an index, with a template per part (None when left out)."""

    start: Template
    stop: Template
    step: Template
    span: Span


@attrs.frozen
class AltTemplate:
    """``A | B``: the first alternative that matches wins."""

    options: tuple[Template, ...]
    span: Span


@attrs.frozen(eq=False)
class OpTemplate:
    """An operation: one FX node in the pattern, or one node to emit in the replacement.

    ``args``/``kwargs`` are as written; ``bound`` is the same arguments keyed by
    parameter name when ``signature`` binds them unambiguously (None means
    "compare as written").  ``binds`` is the capture that names the module of a
    ``call_module``, the ``get_attr`` node, or the helper result; ``name`` is the
    interior name a ``x = ...`` statement gave it.  Identity equality: one
    object per written operation, shared where a name is reused.
    """

    kind: OpKind
    target: Any
    args: tuple[Template, ...]
    kwargs: tuple[tuple[str, Template], ...]
    span: Span
    rest: bool = False
    binds: str | None = None
    name: str | None = None
    signature: CallSignature | None = None
    bound: Mapping[str, Template] | None = None
    commutative: bool = False

    def operands(self) -> Iterator[Template]:
        yield from self.args
        for _, value in self.kwargs:
            yield value

    def describe(self) -> str:
        return describe_target(self.kind, self.target)


@attrs.frozen(eq=False)
class HelperTemplate:
    """``@name(args)`` in a replacement: a Python function called at rewrite time."""

    name: str
    args: tuple[Template, ...]
    kwargs: tuple[tuple[str, Template], ...]
    span: Span


Template = Capture | Wildcard | Literal | SeqTemplate | SliceTemplate | AltTemplate | OpTemplate | HelperTemplate


def walk(template: Template) -> Iterator[Template]:
    """Every template below ``template`` (itself included), each shared node once, depth-first, left to right."""
    seen: set[int] = set()
    stack = [template]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(reversed(children(current)))


def children(template: Template) -> tuple[Template, ...]:
    if isinstance(template, OpTemplate | HelperTemplate):
        return (*template.args, *(value for _, value in template.kwargs))
    if isinstance(template, SeqTemplate):
        return template.items
    if isinstance(template, AltTemplate):
        return template.options
    if isinstance(template, SliceTemplate):
        return (template.start, template.stop, template.step)
    return ()


# ---------------------------------------------------------------- types of captures


@attrs.frozen
class DimSymbol:
    name: str


@attrs.frozen
class DimRest:
    """``...`` in a tensor type: any number of leading (or inner) dims."""


TensorDim = DimSymbol | int | DimRest


@attrs.frozen
class TensorType:
    dims: tuple[TensorDim, ...] | None  # None: any rank
    dtypes: tuple[Any, ...] | None  # torch.dtype values; None: any dtype
    span: Span
    or_none: bool = False  # ``Tensor[O] | None``: the literal None fits too (an omitted bias)

    def symbols(self) -> list[str]:
        return [d.name for d in self.dims or () if isinstance(d, DimSymbol)]


@attrs.frozen
class ScalarType:
    """``int``, ``float``, ``bool``, ``str``, ``Scalar`` (int, float or bool), ``dtype`` or ``slice``."""

    name: str
    span: Span


@attrs.frozen
class SequenceType:
    """``list``, ``tuple``, ``list[Tensor]``: a list or tuple argument."""

    name: str
    element: str | None
    span: Span


@attrs.frozen
class NodeType:
    span: Span


@attrs.frozen
class ModuleType:
    """``nn.Conv2d``: a submodule that is an instance of the class (subclasses included);
    ``nn.Conv2d[exact]``: one of exactly that class, without forward hooks."""

    cls: type[Any]  # an nn.Module subclass
    span: Span
    exact: bool = False

    def fits(self, module: Any) -> bool:
        if not self.exact:
            return isinstance(module, self.cls)
        return type(module) is self.cls and not (module._forward_hooks or module._forward_pre_hooks)


@attrs.frozen
class AttrType:
    span: Span


CaptureType = TensorType | ScalarType | SequenceType | NodeType | ModuleType | AttrType


# ---------------------------------------------------------------- guards

# Guard expressions, families and tolerances are told apart by identity (eq=False): nothing compares two by value,
# and the __eq__ and __hash__ attrs would compile for each class are import time every first load pays.


@attrs.frozen(eq=False)
class GuardName:
    """A pattern-bound name, a symbolic dim, or a constant name (``float16``)."""

    name: str
    span: Span


@attrs.frozen(eq=False)
class GuardConst:
    value: Any
    span: Span


@attrs.frozen(eq=False)
class GuardAttr:
    value: GuardExpr
    attr: str
    span: Span


@attrs.frozen(eq=False)
class GuardCall:
    """``len(x)``, ``all(...)``, ``any(...)``, a method: ``x.numel()``, ``x.size(0)``, ``x.dim()``, or a user
    predicate (``predicate``: a name that is no guard function, looked up in ``apply(predicates=...)``)."""

    func: str
    args: tuple[GuardExpr, ...]
    span: Span
    receiver: GuardExpr | None = None
    predicate: bool = False


@attrs.frozen(eq=False)
class GuardIndex:
    value: GuardExpr
    index: GuardExpr
    span: Span


@attrs.frozen(eq=False)
class GuardBinary:
    op: str
    left: GuardExpr
    right: GuardExpr
    span: Span


@attrs.frozen(eq=False)
class GuardUnary:
    op: str  # "-", "+", "not"
    operand: GuardExpr
    span: Span


@attrs.frozen(eq=False)
class GuardBool:
    op: str  # "and" | "or"
    values: tuple[GuardExpr, ...]
    span: Span


@attrs.frozen(eq=False)
class GuardCompare:
    left: GuardExpr
    ops: tuple[str, ...]
    comparators: tuple[GuardExpr, ...]
    span: Span


@attrs.frozen(eq=False)
class GuardSeq:
    items: tuple[GuardExpr, ...]
    span: Span
    is_tuple: bool = False


GuardExpr = (
    GuardName | GuardConst | GuardAttr | GuardCall | GuardIndex | GuardBinary | GuardUnary | GuardBool
    | GuardCompare | GuardSeq
)


@attrs.frozen(eq=False)
class Guard:
    """The ``where`` conditions of a rule (all must hold), the names they read and the user predicates they
    call (whose existence ``apply`` and ``verify`` check)."""

    conditions: tuple[GuardExpr, ...]
    reads: frozenset[str]
    predicates: tuple[GuardCall, ...] = ()


# ---------------------------------------------------------------- rules


@attrs.frozen(eq=False)
class Tolerance:
    atol: float | None
    rtol: float | None


@attrs.frozen(repr=False)
class Rule:
    """One resolved rewrite rule."""

    name: str
    span: Span
    pattern: tuple[Template, ...]  # the outputs; interior nodes are reached through them
    replacement: tuple[Template, ...]
    types: Mapping[str, CaptureType] = attrs.field(factory=dict)
    guard: Guard | None = None
    docstring: str | None = None
    tolerance: Tolerance | None = None
    finite_inputs: bool = False  # sound for finite inputs only: verify draws no nan, inf or near-overflow values
    grad_check: bool = True  # verify compares gradients too (@no_grad_check() turns it off)
    notes: tuple[str, ...] = ()
    digest: str = ""  # sha256 of the rule's name and the text of the files it was loaded from ("": built in Python)

    @property
    def file(self) -> str:
        return self.span.file

    def captures(self) -> set[str]:
        names: set[str] = set()
        for output in self.pattern:
            for template in walk(output):
                if isinstance(template, Capture):
                    names.add(template.name)
                elif isinstance(template, OpTemplate) and template.binds:
                    names.add(template.binds)
        return names

    def anchor_keys(self) -> tuple[AnchorKey, ...]:
        """The keys of the nodes a match starts at: those of the first output in :func:`matching_order`."""
        return anchor_keys(self.pattern[matching_order(self.pattern)[0]])

    def __str__(self) -> str:
        return f"rule {self.name} ({self.span})"

    def __repr__(self) -> str:
        return f"Rule({self.name!r} at {self.span})"


@per_object
def pattern_templates(rule: Rule) -> tuple[Template, ...]:
    """Every template of the rule's pattern, output after output as :func:`walk` yields them (a template two
    outputs share comes once per output), computed once per rule: the load-time loop check asks often."""
    return tuple(template for output in rule.pattern for template in walk(output))


@per_object
def replacement_templates(rule: Rule) -> tuple[Template, ...]:
    """Every template of the rule's replacement, as :func:`pattern_templates` gives the pattern's."""
    return tuple(template for output in rule.replacement for template in walk(output))


def matching_order(pattern: tuple[Template, ...]) -> tuple[int, ...]:
    """The positions of a pattern's outputs in the order a match finds them: an output that another output
    computes from (``return m, v`` where ``v`` uses ``m``) after that one, which binds it; else as ``return``
    names them.  A match starts at the first (its anchor), and finds each later one among the users of
    what it bound, so the order ``return`` names them in does not decide whether a pattern matches."""
    if len(pattern) == 1:  # one output: it is the anchor (the loop below gives (0,) too, after a walk of it)
        return (0,)
    inside = [{j for j, other in enumerate(pattern) if other is not output and any(t is output for t in walk(other))}
              for output in pattern]
    order: list[int] = []
    while len(order) < len(pattern):
        order.append(next(i for i in range(len(pattern)) if i not in order and inside[i] <= set(order)))
    return tuple(order)


def anchor_keys(template: Template) -> tuple[AnchorKey, ...]:
    """The graph-node keys a pattern output can stand at."""
    if isinstance(template, AltTemplate):
        return tuple(key for option in template.options for key in anchor_keys(option))
    if not isinstance(template, OpTemplate):
        return ()
    if template.kind is OpKind.FAMILY:
        return tuple(member.key for member in template.target.members)
    return ((template.kind.value, template.target),)


@attrs.frozen
class RuleSet:
    """Rules in file order (includes in place), indexed by anchor key for the matcher."""

    rules: tuple[Rule, ...]
    source: str = "<rules>"
    warnings: tuple[Diagnostic, ...] = ()
    # sha256 of the text of every file the rules came from; by default, of the rules' own digests (a set made
    # of loaded rules, e.g. by select(), has one), or "" when a rule was built in Python
    digest: str = attrs.field(default=attrs.Factory(lambda self: _digest_of(self.rules), takes_self=True))
    by_anchor: Mapping[AnchorKey, tuple[Rule, ...]] = attrs.field(init=False)

    @by_anchor.default
    def _index(self) -> Mapping[AnchorKey, tuple[Rule, ...]]:
        index: dict[AnchorKey, list[Rule]] = {}
        for rule in self.rules:
            for key in dict.fromkeys(rule.anchor_keys()):
                index.setdefault(key, []).append(rule)
        return {key: tuple(rules) for key, rules in index.items()}

    def __add__(self, other: RuleSet) -> RuleSet:
        """The rules of both, in order; a rule name in both is an error (names key the index and the report)."""
        ours = {rule.name: rule for rule in self.rules}
        for rule in other.rules:
            if rule.name in ours:
                raise FxrUsageError(f"rule {rule.name} is defined twice: at {ours[rule.name].span} and at "
                                    f"{rule.span}; rule names key the report, so give each rule its own")
        both = self.digest and other.digest  # a set with a rule built in Python has no content to key a cache on
        digest = hashlib.sha256(f"{self.digest}+{other.digest}".encode()).hexdigest() if both else ""
        return RuleSet(self.rules + other.rules, f"{self.source}+{other.source}", self.warnings + other.warnings,
                       digest)

    def select(self, only: str | Iterable[str] | None = None, exclude: str | Iterable[str] | None = None, *,
               labels: tuple[str, str] = ("only", "exclude")) -> RuleSet:
        """The rules named by ``only`` (all if None) and not by ``exclude``, in file order.

        Each entry is a rule name or a glob pattern (``fold_*``, ``*_bn``); one that names no rule is an
        error (with the closest name, the option named by its entry of ``labels``), so a typo never
        silently selects nothing.  The selection has its own digest (from its rules'), so
        ``inductor_pass`` can key its cache on it as on a loaded set.
        """
        if only is None and exclude is None:
            return self
        names = [rule.name for rule in self.rules]
        kept = set(_named(only, names, labels[0])) if only is not None else set(names)
        kept -= set(_named(exclude, names, labels[1])) if exclude is not None else set()
        rules = tuple(rule for rule in self.rules if rule.name in kept)
        if len(rules) == len(self.rules):  # every rule: the same set, and the same cache key
            return self
        return RuleSet(rules, f"{self.source}[{len(rules)} of {len(self.rules)} rules]", self.warnings)

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __getitem__(self, name: str) -> Rule:
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)

    def __str__(self) -> str:
        lines = [f"RuleSet {self.source}: {len(self.rules)} rules"]
        lines += [f"  {rule.name:<28} {rule.span}" for rule in self.rules]
        return "\n".join(lines)


def _named(entries: str | Iterable[str], names: list[str], option: str) -> list[str]:
    """The rule names that ``entries`` (names or glob patterns) name; an entry that names none is an error."""
    wanted = [entries] if isinstance(entries, str) else list(entries)
    found: list[str] = []
    for entry in wanted:
        if not isinstance(entry, str):
            raise FxrUsageError(f"{option}: takes rule names or glob patterns, got {type(entry).__name__}")
        matched = [name for name in names if fnmatch.fnmatchcase(name, entry)]
        if not matched:
            kind = "rule matches" if any(character in entry for character in "*?[") else "rule named"
            hint = did_you_mean(entry, names)
            raise FxrUsageError(f"{option}: no {kind} {entry!r} in the rules" + (f"; {hint}" if hint else ""))
        found += matched
    return found


def _digest_of(rules: tuple[Rule, ...]) -> str:
    """A digest of the rules' own (each from its name and its files' text), or "" if one was built in Python."""
    if not rules or any(not rule.digest for rule in rules):
        return ""
    return hashlib.sha256("\n".join(rule.digest for rule in rules).encode()).hexdigest()
