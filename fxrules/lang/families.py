"""Families: how each spelling of an operation maps its arguments onto the family's.

A family's parameters are its first member's.  Every other member's
parameter maps to the family parameter of the same name, else to the one at
the same position (if that one is not taken by name); a member parameter
that maps nowhere must hold its default for the member to match, so
``F.relu(x, inplace=True)`` is not ``relu(x)`` (parameters that only choose an
implementation, such as ``cudnn_enabled`` and ``_stacklevel``, excepted).  A module member (``nn.Softmax``)
takes the family's remaining parameters from its attributes (``dim``), and its
other constructor arguments must hold their defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch

from fxrules.graph.module_data import UnreadableAttribute, module_parameter
from fxrules.lang.ir import Family, FamilyMember, OpKind
from fxrules.lang.signatures import BoundCall, constructor_defaults, holds_default

_MISSING = object()

#: Member parameters that choose how the result is computed or reported, not what it is (``aten.batch_norm``'s
#: ``cudnn_enabled`` has no default; Dynamo inlines ``nn.Softmax`` as ``F.softmax(x, dim, _stacklevel=5)``):
#: they may hold anything where the family has no such parameter.
IMPLEMENTATION_CHOICES = frozenset({"cudnn_enabled", "cudnn_enable", "_stacklevel"})


def family_parameters(family: Family) -> tuple[str, ...]:
    """The family's parameter names: its first member's call parameters (and constructor ones for a module)."""
    primary = family.primary
    names = primary.signature.parameters if primary.signature else ()
    if primary.kind is OpKind.MODULE:
        names += tuple(n for n in constructor_defaults(primary.target) if n not in names)
    return names


def parameter_map(member: FamilyMember, family_params: tuple[str, ...]) -> Mapping[str, str]:
    """Member parameter name -> family parameter name, by name first, then by position."""
    member_params = member.signature.parameters if member.signature else ()
    mapping = {name: name for name in member_params if name in family_params}
    taken = set(mapping.values())
    positional = member.signature.richest.parameters if member.signature else {}
    for position, name in enumerate(member_params):
        if name in mapping or position >= len(family_params):
            continue
        kind = positional[name].kind
        target = family_params[position]
        if target not in taken and kind is not kind.KEYWORD_ONLY:
            mapping[name] = target
            taken.add(target)
    return mapping


@attrs.frozen
class MemberCall:
    """A node's call of one family member, re-expressed in the family's parameters."""

    bound: BoundCall | None  # None: the member's arguments could not be mapped
    reason: str = ""


def map_member_call(
    member: FamilyMember, family: Family, bound: BoundCall, module: torch.nn.Module | None = None
) -> MemberCall:
    """Translate a member call bound to the member's parameters into the family's parameters."""
    family_params = family_parameters(family)
    mapping = parameter_map(member, family_params)
    explicit: dict[str, Any] = {}
    for name, value in bound.explicit.items():
        if name in mapping:
            explicit[mapping[name]] = value
        elif name not in IMPLEMENTATION_CHOICES and not _is_default(bound, member, name, value):
            return MemberCall(None, f"{member} argument '{name}' is not at its default")
    defaults = {mapping[name]: value for name, value in bound.defaults.items() if name in mapping}
    if module is not None:
        try:
            reason = _module_arguments(module, family_params, explicit)
        except UnreadableAttribute as error:  # a property of the user's class: not run
            reason = str(error)
        if reason:
            return MemberCall(None, reason)
    for name, value in family_defaults(family).items():
        defaults.setdefault(name, value)
    return MemberCall(BoundCall(explicit, defaults))


def _module_arguments(module: torch.nn.Module, family_params: tuple[str, ...], explicit: dict[str, Any]) -> str:
    """Add the family parameters a module member holds as attributes to ``explicit`` (``nn.Softmax.dim``),
    read statically as guards read them (no property or ``__getattr__`` of the module runs); the reason the
    module does not match when another constructor argument is not at its default (``nn.ReLU(inplace=True)``)."""
    for name in family_params:
        value = module_parameter(module, name, _MISSING)
        if name not in explicit and value is not _MISSING:
            explicit[name] = value
    for name, default in constructor_defaults(type(module)).items():  # type: ignore[arg-type]  # mypy sees nn.Module classes as unhashable
        value = module_parameter(module, name, _MISSING)
        if name not in family_params and value is not _MISSING and not holds_default(value, default):
            return f"{type(module).__name__}.{name} is {value!r}, not its default {default!r}"
    return ""


def family_defaults(family: Family) -> Mapping[str, Any]:
    """The defaults of the family's parameters: its first member's, and for a module first member, the
    constructor's defaults of the parameters its attributes supply (``inplace=False`` of ``nn.ReLU``)."""
    primary = family.primary
    defaults = dict(primary.signature.defaults) if primary.signature is not None else {}
    if primary.kind is OpKind.MODULE:
        for name, value in constructor_defaults(primary.target).items():
            defaults.setdefault(name, value)
    return defaults


def _is_default(bound: BoundCall, member: FamilyMember, name: str, value: Any) -> bool:
    signature = member.signature
    if signature is None:
        return False
    for overload in signature.overloads:
        parameter = overload.parameters.get(name)
        if parameter is not None and parameter.default is not parameter.empty:
            return holds_default(value, parameter.default)
    return False
