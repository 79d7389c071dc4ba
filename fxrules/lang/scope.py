"""File-level declarations to a :class:`Scope`: ``use`` aliases, ``family`` and ``commutative`` lines.

The scope is what every rule of a file resolves its names against; the
loader copies it per file so an include cannot leak its aliases upwards.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from fxrules.diagnostics import DiagnosticSink, Span
from fxrules.lang import syntax_tree as st
from fxrules.lang.ir import Family, FamilyMember, OpKind
from fxrules.lang.targets import Namespace, ResolutionError


@attrs.define
class Scope:
    """What the items of one file declared so far: names, families, commutative targets."""

    namespace: Namespace
    families: dict[str, Family]
    commutative: set[Any]

    def copy(self) -> Scope:
        return Scope(self.namespace, dict(self.families), set(self.commutative))


class ScopeResolver:
    """Resolves file-level items (``use``, ``family``, ``commutative``) into a :class:`Scope`."""

    def __init__(self, sink: DiagnosticSink, scope: Scope) -> None:
        self.sink = sink
        self.scope = scope

    def resolve_dotted(self, dotted: st.Dotted | tuple[str, ...], span: Span, *, containers: bool = False) -> Any:
        parts = dotted.parts if isinstance(dotted, st.Dotted) else dotted
        try:
            return self.scope.namespace.resolve(parts, containers=containers)
        except ResolutionError as error:
            where = span
            if error.index > 0:  # point at the part that failed: torch.serialization.os
                offset = len(".".join(parts[: error.index])) + 1
                where = attrs.evolve(span, column=span.column + offset)
            self.sink.error(where, error.message, error.hint)
            return None

    def use(self, item: st.Use) -> None:
        value = self.resolve_dotted(item.module, item.module.span, containers=True)
        if value is not None:
            alias = item.alias or item.module.parts[-1]
            self.scope.namespace = self.scope.namespace.with_alias(alias, value)

    def commutative(self, item: st.CommutativeDecl) -> None:
        for dotted in item.targets:
            if len(dotted.parts) == 1 and dotted.parts[0] in self.scope.families:
                self.scope.commutative.add(dotted.parts[0])
                continue
            member = self.member(dotted)
            if member is not None:
                self.scope.commutative.add(member.target if member.kind is OpKind.FUNCTION else member.key)

    def family(self, item: st.FamilyDecl) -> None:
        declared = self.scope.families.get(item.name)
        if declared is not None and declared.span.file == item.span.file:
            # The same declaration seen again is a file included twice (a diamond of includes): it counts once.
            if declared.span != item.span:
                self.sink.error(item.span, f"family '{item.name}' is declared twice in this file")
            return
        members = [m for m in (self.member(d) for d in item.members) if m is not None]
        if len(members) == len(item.members):
            self.scope.families[item.name] = Family(item.name, tuple(members), item.span)

    def member(self, dotted: st.Dotted) -> FamilyMember | None:
        """A target in a family or ``commutative`` line: a function, ``torch.Tensor.NAME`` or a module class."""
        value = self.resolve_dotted(dotted, dotted.span)
        if value is None:
            return None
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            return FamilyMember(OpKind.MODULE, value, dotted.span)
        name = tensor_method_name(self.scope.namespace, dotted.parts, value)
        if name is not None:
            return FamilyMember(OpKind.METHOD, name, dotted.span)
        if callable(value):
            return FamilyMember(OpKind.FUNCTION, value, dotted.span)
        self.sink.error(dotted.span, f"'{dotted}' is a value, not an operation")
        return None


def tensor_method_name(namespace: Namespace, parts: tuple[str, ...], value: Any) -> str | None:
    """The method name when ``parts`` names a ``torch.Tensor`` method (``torch.Tensor.relu``, or an alias
    that ``use torch.Tensor.relu as r`` made): FX records its calls as ``call_method`` nodes."""
    if len(parts) >= 2:
        try:
            return parts[-1] if namespace.resolve(parts[:-1], containers=True) is torch.Tensor else None
        except ResolutionError:
            return None
    name = getattr(value, "__name__", None)
    return name if isinstance(name, str) and getattr(torch.Tensor, name, None) is value else None
