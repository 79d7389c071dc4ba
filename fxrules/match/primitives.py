"""The meaning of matching, piece by piece: what a match binds and counts, and how one value fits one part
of a pattern.  The compiled matcher (:mod:`fxrules.match.compiled`) is built from these, and so is the
interpreter the tests keep as its oracle; neither says on its own what a type, an argument or a step is.

* **match steps** (:class:`Budget`): an operation of the pattern tried at a node that calls its target,
  an option of a choice tried (each option of ``A | B``, each operand order of a commutative operation,
  each node tried as a further output), and a structurally complete match found.  A rule that needs
  more than :data:`MATCH_BUDGET` at an anchor is skipped there with reason ``budget``.
* **a structural match** (:class:`State`): names bound to values, operations to nodes; checked once
  complete (types without metadata, guard, users, purity, cycles) and then a :class:`Match`.
* **a near miss** (:class:`Miss`): the furthest a failed attempt got and the first condition that
  failed there, recorded only when a tracer is attached (``explain=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import torch
import torch.fx

from fxrules.diagnostics import Span
from fxrules.graph.metadata import MissingMetadata, NotATensor, tensor_info
from fxrules.graph.sizes import OPT_IN, is_size_error
from fxrules.lang.ir import (
    AltTemplate,
    AttrType,
    CaptureType,
    DimRest,
    DimSymbol,
    ModuleType,
    NodeType,
    OpTemplate,
    Rule,
    ScalarType,
    SequenceType,
    Template,
    TensorType,
)
from fxrules.lang.signatures import BoundCall, holds_default
from fxrules.match.skips import Skip, SkipReason

#: A parameter or binding that is not there (None may be a value).
MISSING = object()

#: The match steps (see the module docstring) one rule may take at one anchor.  Ordinary rules take
#: a few per pattern operation; the bundled rulesets and the test suite stay below 100.
MATCH_BUDGET = 1_000


class BudgetExhausted(Exception):  # noqa: N818 - a control-flow signal, turned into a ``budget`` skip
    """The current rule took more than its match steps at this anchor."""


class Budget:
    """The match steps one rule has taken at one anchor; :meth:`step` raises :class:`BudgetExhausted` past
    ``limit``.  The compiled matcher and the tests' interpreter count the same steps, except that the
    compiled one never counts inside an operation it has ruled out by its arguments alone (the
    interpreter finds no match there either)."""

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
    :meth:`Matcher.refusal` (same values for the types and guard, same nodes for users and cycles)."""
    return frozenset((name, id(value)) for name, value in bindings.items()), frozenset(map(id, nodes.values()))


class SeenMatches:
    """The structural matches already checked at one anchor, by :func:`binding_key`; kept only once one
    was rejected (the usual first match is used at once, and needs no key).  A rejected match's key is
    found only when another structural match is to be compared with it (most rejected matches are the
    last found): its mappings are kept until then, which neither execution changes once a match is made
    of them (the compiled matcher drops its attempt, the interpreter's states are immutable), and which
    keep the values whose ids the key holds alive."""

    __slots__ = ("keys", "pending")

    def __init__(self) -> None:
        self.keys: set[tuple[frozenset[Any], ...]] = set()
        self.pending: list[tuple[Mapping[str, Any], Mapping[int, torch.fx.Node]]] = []

    def is_new(self, bindings: Mapping[str, Any], nodes: Mapping[int, torch.fx.Node]) -> bool:
        if self.pending:
            self.keys.update(binding_key(*rejected) for rejected in self.pending)
            self.pending.clear()
        return not self.keys or binding_key(bindings, nodes) not in self.keys

    def rejected(self, bindings: Mapping[str, Any], nodes: Mapping[int, torch.fx.Node]) -> None:
        self.pending.append((bindings, nodes))


class Bound(Protocol):
    """What a structural match bound, as :meth:`Matcher.refusal` reads it and a :class:`Match` keeps it: a
    :class:`State` of the interpreter, or the compiled matcher's attempt itself (no copy on the hot path)."""

    @property
    def bindings(self) -> Mapping[str, Any]: ...

    @property
    def nodes(self) -> Mapping[int, torch.fx.Node]: ...

    @property
    def modules(self) -> Mapping[str, str]: ...

    @property
    def missing_metadata(self) -> Skip | None: ...


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



# Not slotted: a frozen slotted class sets each field through object.__setattr__, a dict-backed one writes its
# __dict__ (about 0.5 us less per match, one made per structural match used).
@attrs.frozen(slots=False, init=False)
class Match:
    """A complete match: ready to be rewritten."""

    rule: Rule
    outputs: tuple[torch.fx.Node, ...]
    nodes: tuple[torch.fx.Node, ...]  # every node the pattern's operations matched
    bindings: Mapping[str, Any]
    modules: Mapping[str, str]

    def __init__(self, rule: Rule, outputs: tuple[torch.fx.Node, ...], nodes: tuple[torch.fx.Node, ...],
                 bindings: Mapping[str, Any], modules: Mapping[str, str]) -> None:
        # What attrs would write (no field has a default, converter or validator), without the look-up of the
        # frozen class's __setattr__ its generated __init__ makes and never uses here: about 0.3 us a match.
        fields = self.__dict__
        fields["rule"] = rule
        fields["outputs"] = outputs
        fields["nodes"] = nodes
        fields["bindings"] = bindings
        fields["modules"] = modules

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


def output_keys(pattern: tuple[Template, ...]) -> tuple[tuple[int, ...], ...]:
    """For each output of a pattern, the operations (by id) whose node it is, in order: the output's own,
    or the options' of ``A | B``, the first bound of which is the output's node (see :func:`output_nodes`)."""
    def keys(template: Template) -> tuple[int, ...]:
        if isinstance(template, AltTemplate):
            return tuple(key for option in template.options for key in keys(option))
        return (id(template),) if isinstance(template, OpTemplate) else ()

    return tuple(map(keys, pattern))


def output_nodes(keys: tuple[tuple[int, ...], ...],
                 nodes: Mapping[int, torch.fx.Node]) -> tuple[torch.fx.Node | None, ...]:
    """The nodes the outputs of a pattern matched, in order, from its :func:`output_keys` and the nodes its
    operations matched (None for an output not matched)."""
    return tuple(next((nodes[key] for key in options if key in nodes), None) for options in keys)


def users_near(bound: list[torch.fx.Node], mapped: set[torch.fx.Node],
               retired: Mapping[torch.fx.Node, None]) -> list[torch.fx.Node]:
    """The users of ``bound`` that are operations (not the graph's output), not ``mapped``, not ``retired``, in
    the order found."""
    found: dict[torch.fx.Node, None] = {}
    for node in bound:
        for user in node.users:
            if user.op != "output" and user not in mapped and user not in retired:
                found[user] = None
    return list(found)


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
            known = found.get(dim.name, bound.get(dim.name, MISSING))
            if known is not MISSING and known != size:
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
        return Unfit(lambda: f"'{name}' must be a tensor, found {show(value)}")
    try:
        info = tensor_info(value)
    except NotATensor as not_a_tensor:
        reason = str(not_a_tensor)  # the exception's name is unbound once the handler ends
        return Unfit(lambda: f"'{name}' must be a tensor: {reason}")
    except MissingMetadata as missing:
        return Skip(SkipReason.MISSING_METADATA, f"'{name}' needs shape metadata: {missing} "
                                        "(pass example_inputs= to apply, or use torch.export)")
    dtypes, dims = declared.dtypes, declared.dims  # narrowed once: the lambdas below read them later
    if dtypes is not None and info.dtype not in dtypes:
        return Unfit(lambda: f"'{name}' has dtype {info.dtype}, expected one of {', '.join(map(str, dtypes))}")
    if dims is None:
        return {}
    try:
        unified = unify_dims(dims, tuple(info.shape), bound)
    except Exception as error:
        if not is_size_error(error):
            raise
        shape = tuple(info.shape)  # the names of the exception are unbound once the handler ends
        return Skip(SkipReason.DYNAMIC_SIZE,
            lambda: f"'{name}' has shape {shape}: whether it fits {_show_dims(dims)} "
            f"depends on a size the graph leaves symbolic; {OPT_IN}")
    if unified is None:
        return Unfit(lambda: f"'{name}' has shape {tuple(info.shape)}, which does not fit "
                             f"{_show_dims(dims)}")
    return unified


def value_type_problem(name: str, declared: CaptureType, value: Any) -> str | None:
    """Why ``value`` does not fit the declared type of capture ``name`` (None: it fits); not for tensor types."""
    if isinstance(declared, ScalarType):
        if not _scalar_fits(declared.name, value):
            return f"'{name}' must be a {declared.name} literal, found {show(value)}"
    elif isinstance(declared, SequenceType):
        if not isinstance(value, list | tuple) or not all(_element_fits(declared.element, v) for v in value):
            return f"'{name}' must be a {declared.name}, found {show(value)}"
    elif isinstance(declared, NodeType | AttrType | ModuleType) and not isinstance(value, torch.fx.Node):
        return f"'{name}' must be a node, found {show(value)}"
    return None


def same_function(expected: Any, actual: Any) -> bool:
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
        value = bound.value(name, MISSING)
        if value is MISSING:
            return Unreadable(name, MISSING)
        values.append(value)
    return values


def show(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        return f"node '{value.name}'"
    return repr(value)


def _show_dims(dims: tuple[Any, ...]) -> str:
    shown = ["..." if isinstance(d, DimRest) else d.name if isinstance(d, DimSymbol) else str(d) for d in dims]
    return f"Tensor[{', '.join(shown)}]"


def describe_node(node: torch.fx.Node, module: torch.nn.Module | None) -> str:
    if node.op == "call_module" and module is not None:
        return f"call_module {type(module).__name__} '{node.name}'"
    if node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target))
        return f"{name} '{node.name}'"
    return f"{node.op} {node.target} '{node.name}'"

