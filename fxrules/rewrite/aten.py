"""How a replacement's operations are spelled at each graph level (:class:`Level`).

A replacement emits the targets its text names.  Two things are re-spelled:

* a family emits the member that fits the graph's level: its first member in
  a torch-level graph, its first ``aten`` member that takes the arguments in
  an aten-level one (``relu`` as ``aten.relu.default``, the arguments mapped
  by the family's parameter names), else its first member;
* in an aten-level graph an overload packet (``aten.sum``) is emitted as the
  overload PyTorch itself would call (``aten.sum.dim_IntList`` for
  ``aten.sum(x, [-1])``), from the arguments' metadata.

A consumer that requires aten operators (an ``ExportedProgram``, whose
verifier refuses anything else, and Inductor's post-grad pass) marks the graph
(:data:`ATEN_GRAPH`): there every torch function, method or operator is
emitted as the aten operator of the same name (``torch.sum(x, -1)`` as
``aten.sum.dim_IntList``), and what has none (a submodule call, a function
aten lacks) raises :class:`NoAtenSpelling`, which the rewriter turns into a
``no aten spelling`` skip.  The mark's value holds the operators that
consumer has already decomposed, which replacements may not bring back.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx

from fxrules.graph.metadata import MissingMetadata, fake_value
from fxrules.lang.families import family_parameters, parameter_map
from fxrules.lang.ir import Family, FamilyMember, OpKind, describe_target

#: ``operator`` functions and the aten operators they stand for on tensors.
_OPERATOR_NAMES = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
    operator.floordiv: "floor_divide", operator.matmul: "matmul", operator.neg: "neg", operator.pow: "pow",
    operator.abs: "abs", operator.mod: "remainder", operator.lt: "lt", operator.le: "le", operator.gt: "gt",
    operator.ge: "ge", operator.eq: "eq", operator.ne: "ne", operator.and_: "bitwise_and",
    operator.or_: "bitwise_or", operator.xor: "bitwise_xor", operator.invert: "bitwise_not",
}


#: ``GraphModule.meta`` key set by a consumer that requires aten operators (an ``ExportedProgram`` being
#: rewritten, Inductor's post-grad pass, whose graphs hold Inductor's own lowerings too, so detection
#: would not say aten-level); its value holds the operators the consumer has decomposed, which a
#: replacement may not emit.
ATEN_GRAPH = "fxrules_aten_graph"


class NoAtenSpelling(Exception):  # noqa: N818 - a condition the rewriter turns into a skip
    """A replacement operation has no aten operator to stand for it."""


class Level(enum.Enum):
    """How a graph's replacements are spelled."""

    TORCH = "torch-level"  # targets as written; a family emits its first member
    ATEN = "aten-level"  # targets as written; a family emits an aten member, a packet its overload
    ATEN_ONLY = "aten operators only"  # every operation as an aten operator, or skipped


def graph_level(gm: torch.nn.Module, graph: torch.fx.Graph) -> Level:
    """The level replacements in ``graph`` (owned by ``gm``) are spelled at."""
    if ATEN_GRAPH in getattr(gm, "meta", {}):
        return Level.ATEN_ONLY
    return Level.ATEN if is_aten_graph(graph) else Level.TORCH


Spelled = tuple[OpKind, Any, tuple[Any, ...], dict[str, Any]]


def spelled(level: Level, family: Family | None, kind: OpKind, target: Any, args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> Spelled:
    """The call a replacement operation emits at ``level``: ``target(*args, **kwargs)`` as written (a
    family as its first member, ``kind``/``target``), but for the re-spellings the module docstring lists."""
    if level is Level.ATEN_ONLY:
        if needs_aten_spelling(kind, target, args, kwargs):
            return (OpKind.FUNCTION, *aten_spelling(family, kind, target, args, kwargs))
        return kind, target, args, kwargs
    if level is Level.ATEN and family is not None:
        for member in family.members:
            call = _as_member(family, member, args, kwargs)
            if call is not None:
                return (OpKind.FUNCTION, *call)
    if level is Level.ATEN and isinstance(target, torch._ops.OpOverloadPacket):
        try:
            return kind, _resolve(target, args, kwargs), args, kwargs
        except Exception:
            return kind, target, args, kwargs
    return kind, target, args, kwargs


def is_aten_graph(graph: torch.fx.Graph) -> bool:
    """Whether a graph is aten-level: it calls aten operators, and no torch function, method or module.

    Builtins on sizes (``operator.mul`` of SymInts) and higher-order operators
    may appear in such graphs, and so may the ``_guards_fn`` call of
    ``ExportedProgram.module()`` (a ``torch.export`` ``GuardsFn`` module).
    """
    seen_aten = False
    for node in graph.nodes:
        if node.op == "call_function":
            if isinstance(node.target, torch._ops.OpOverload):
                seen_aten = True
            elif not _allowed_beside_aten(node.target):
                return False
        elif node.op == "call_method":
            return False
        elif node.op == "call_module":
            module = graph.owning_module.get_submodule(str(node.target)) if graph.owning_module else None
            if not isinstance(module, torch.fx.GraphModule) and type(module).__name__ != "GuardsFn":
                return False
    return seen_aten


#: Modules whose functions appear in aten-level graphs: size arithmetic, and the input flattening of
#: ``ExportedProgram.module()``.
_BESIDE_ATEN = {"_operator", "math", "torch.fx.experimental.sym_node", "torch.fx._pytree", "torch.utils._pytree"}


def _allowed_beside_aten(target: Any) -> bool:
    return (isinstance(target, torch._ops.HigherOrderOperator)
            or getattr(target, "__module__", None) in _BESIDE_ATEN
            or target in {torch.sym_float, torch.sym_int, torch.sym_max, torch.sym_min, torch.sym_not})


def needs_aten_spelling(kind: OpKind, target: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether an operation must be re-spelled to live in an aten-level graph."""
    if kind is OpKind.FUNCTION and _allowed_beside_aten(target):
        # operator.add of two sizes stays; operator.add of a tensor becomes aten.add.Tensor, and an operator
        # aten has no counterpart for (x[i] of a tensor) cannot stay either; getitem of a tuple result stays
        if target is operator.getitem and args and _returns_several(args[0]):
            return False
        on_tensors = any(isinstance(_stand_in(a), torch.Tensor) for a in args)
        return on_tensors and getattr(target, "__module__", None) == "_operator"
    return not (kind is OpKind.FUNCTION and isinstance(target, torch._ops.OpOverload))


def _returns_several(value: Any) -> bool:
    """Whether ``value`` is a node of an operator with several results (``aten.var_mean.correction``), so
    ``value[i]`` picks a result, as exported graphs write it, even before the node has metadata."""
    if not isinstance(value, torch.fx.Node):
        return False
    target = value.target
    if isinstance(target, torch._ops.OpOverload):
        return len(target._schema.returns) > 1
    return isinstance(value.meta.get("val"), list | tuple)


def _stand_in(value: Any) -> Any:
    """A value for choosing an overload: a node's FakeTensor, or, without metadata, a tensor (what nodes mostly are)."""
    try:
        return fake_value(value)
    except MissingMetadata:
        return torch.empty(())


def aten_spelling(family: Family | None, kind: OpKind, target: Any, args: tuple[Any, ...],
                  kwargs: Mapping[str, Any]) -> tuple[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any]]:
    """The aten operator and arguments that compute ``target(*args, **kwargs)``; :class:`NoAtenSpelling` if none."""
    if kind is OpKind.MODULE:
        raise NoAtenSpelling("the replacement calls a submodule, which an aten-level graph cannot hold")
    if family is not None:
        for member in family.members:
            call = _as_member(family, member, args, kwargs)
            if call is not None:
                return call
    name = target if kind is OpKind.METHOD else _OPERATOR_NAMES.get(target, getattr(target, "__name__", ""))
    packet = getattr(torch.ops.aten, str(name), None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        raise NoAtenSpelling(f"{_describe(family, kind, target)} has no aten operator of the same name; name a "
                             "family with an aten member in the replacement")
    renamed = _schema_names(kwargs)
    try:
        overload = _resolve(packet, args, renamed)
    except Exception as error:  # PyTorch's RuntimeError: no schema matches
        sizes = args[1:]
        if kind is not OpKind.METHOD or len(sizes) < 2 or not all(isinstance(a, int | torch.fx.Node) for a in sizes):
            raise NoAtenSpelling(f"no overload of aten.{name} accepts the arguments of "
                                 f"{_describe(family, kind, target)}: {str(error).splitlines()[0]}") from error
        args = (args[0], list(sizes))  # x.view(2, 3) is aten.view(x, [2, 3]), as Tensor methods pack sizes
        overload = _resolve(packet, args, renamed)
    positional = [a for a in overload._schema.arguments if not a.kwarg_only]
    for argument, value in zip(positional, args, strict=False):
        if type(value) is int and str(argument.real_type) == "ScalarType":  # x.view(6) is not x.view(float32)
            raise NoAtenSpelling(f"aten.{name}.{overload._overloadname} would take {value} as a dtype; write the "
                                 f"sizes of {_describe(family, kind, target)} as a list")
    named = {**dict(zip([a.name for a in positional], args, strict=False)), **renamed}
    call = _schema_call(overload, named)
    if call is None:
        raise NoAtenSpelling(f"aten.{name}.{overload._overloadname} does not take the arguments "
                             f"{', '.join(named)} of {_describe(family, kind, target)}")
    return call


def aten_name(kind: OpKind, target: Any) -> str | None:
    """The name of the aten operator a call would be spelled as where aten operators are required (``sin``
    for ``torch.sin``, ``Tensor.sin``, ``aten.sin`` and ``aten.sin.default``); None for a module."""
    if isinstance(target, torch._ops.OpOverload):
        target = target.overloadpacket
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target._qualified_op_name).removeprefix("aten::")
    if kind is OpKind.METHOD:
        return str(target)
    if kind is OpKind.FUNCTION:
        return _OPERATOR_NAMES.get(target, getattr(target, "__name__", None))
    return None


def _resolve(packet: torch._ops.OpOverloadPacket, args: tuple[Any, ...],
             kwargs: Mapping[str, Any]) -> torch._ops.OpOverload:
    """The overload PyTorch would call with these arguments (nodes stand in as their metadata)."""
    fakes = torch.fx.node.map_aggregate((args, dict(kwargs)), _stand_in)
    name = torch._C._jit_resolve_packet(packet._qualified_op_name, *fakes[0], **fakes[1])
    overload: torch._ops.OpOverload = getattr(packet, name)
    return overload


def _as_member(family: Family, member: FamilyMember, args: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> tuple[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any]] | None:
    """The family call as a call of one of its aten members, if that member takes its arguments."""
    if not isinstance(member.target, torch._ops.OpOverload) or family.primary.signature is None:
        return None
    bound = family.primary.signature.bind(args, kwargs)
    if bound is None:
        return None
    by_family_name = {family_name: name for name, family_name in
                      parameter_map(member, family_parameters(family)).items()}
    if any(name not in by_family_name for name in bound.explicit):
        return None
    return _schema_call(member.target, {by_family_name[n]: v for n, v in bound.explicit.items()})


def _schema_names(named: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments named as torch's Python signatures name them, named as aten schemas do (``input`` is ``self``)."""
    return {("self" if key == "input" else key): value for key, value in named.items()}


def _schema_call(overload: torch._ops.OpOverload,
                 named: Mapping[str, Any]) -> tuple[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any]] | None:
    """Arguments by name as an aten call: positional up to the last one given, keyword-only ones by keyword."""
    arguments = overload._schema.arguments
    names = {a.name for a in arguments}
    if "input" in named and "input" not in names:
        named = _schema_names(named)
    if set(named) - names:
        return None
    positional: list[Any] = []
    pending: list[Any] = []  # defaults before a later given argument must be written out
    kwargs: dict[str, Any] = {}
    for argument in arguments:
        if argument.name in named:
            if argument.kwarg_only:
                kwargs[argument.name] = named[argument.name]
            else:
                positional += [*pending, named[argument.name]]
                pending = []
        elif not argument.has_default_value():
            return None
        elif not argument.kwarg_only:
            pending.append(argument.default_value)
    return overload, tuple(positional), kwargs


def _describe(family: Family | None, kind: OpKind, target: Any) -> str:
    return f"family {family.name}" if family is not None else describe_target(kind, target)
