"""A rule's ``given:`` section to capture types: ``x: Tensor[M, K, dtype=float16]``, ``m: nn.Linear``, ``n: int``.

Checks made here: names declared twice, unknown types (with a suggestion),
type arguments a type does not take, dtypes that are not dtypes, and
``| None`` on anything but a tensor.  Whether the pattern uses each
declared name is checked once the pattern is resolved (:mod:`fxrules.lang.resolve`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

from fxrules.diagnostics import DiagnosticSink, Span, did_you_mean
from fxrules.lang import syntax_tree as st
from fxrules.lang.ir import (
    AttrType,
    CaptureType,
    DimRest,
    DimSymbol,
    ModuleType,
    NodeType,
    ScalarType,
    SequenceType,
    TensorType,
)
from fxrules.lang.scope import Scope, ScopeResolver

SCALAR_TYPES = ("int", "float", "bool", "str", "Scalar", "dtype", "slice")
SEQUENCE_TYPES = ("list", "tuple")


class GivenResolver:
    """Collects the declarations of one ``given:`` section, reporting problems to the sink."""

    def __init__(self, sink: DiagnosticSink, scope: Scope) -> None:
        self.sink = sink
        self.scope = scope
        self.types: dict[str, CaptureType] = {}
        self.declared_at: dict[str, Span] = {}  # where each name is declared
        self.untyped: set[str] = set()  # names whose type was wrong (already reported)

    def declare(self, declaration: st.Declaration) -> None:
        if declaration.name in self.declared_at:
            self.sink.error(declaration.span, f"'{declaration.name}' is declared twice in given:")
            return
        self.declared_at[declaration.name] = declaration.span
        declared = self.type_of(declaration.type)
        if declaration.or_none is not None and declared is not None:
            if isinstance(declared, TensorType):
                declared = attrs.evolve(declared, or_none=True)
            else:
                self.sink.error(declaration.or_none, "only a Tensor type can be '| None' (other literals are "
                                                     "matched by value: write None in the pattern)")
                declared = None
        if declared is not None:
            self.types[declaration.name] = declared
        else:
            self.untyped.add(declaration.name)

    def sequence_type(self, name: str, args: Sequence[Any], span: Span) -> SequenceType | None:
        """``list``, ``tuple``, or one of them with an element type: ``list[Tensor]``, ``tuple[int]``."""
        if not args:
            return SequenceType(name, None, span)
        element = args[0]
        known = ("Tensor", *SCALAR_TYPES)
        if len(args) > 1 or not isinstance(element, st.DimName) or element.name not in known:
            misspelt = len(args) == 1 and isinstance(element, st.DimName)
            self.sink.error(element.span, f"{name}[...] takes one element type: Tensor or {', '.join(SCALAR_TYPES)}",
                            did_you_mean(str(element.name), known) if misspelt else None)
            return None
        return SequenceType(name, str(element.name), span)

    def type_of(self, expr: st.TypeExpr) -> CaptureType | None:
        name = str(expr.name)
        args = expr.args or ()
        span = expr.span
        if name == "Tensor":
            return self.tensor_type(args, span)
        if name in SCALAR_TYPES and not args:
            return ScalarType(name, span)
        if name in SEQUENCE_TYPES:
            return self.sequence_type(name, args, span)
        if name in ("Node", "Attr") and not args:
            return NodeType(span) if name == "Node" else AttrType(span)
        if expr.name.parts[0] in self.scope.namespace.roots:
            value = ScopeResolver(self.sink, self.scope).resolve_dotted(expr.name, expr.name.span)
            if isinstance(value, type) and issubclass(value, torch.nn.Module):
                return self.module_type(value, args, span)
            if value is None:
                return None
        if args:
            self.sink.error(args[0].span, f"type '{name}' takes no arguments in [...]")
            return None
        known = ["Tensor", *SCALAR_TYPES, *SEQUENCE_TYPES, "Node", "Attr"]
        self.sink.error(expr.name.span, f"unknown type '{name}'",
                        did_you_mean(name, known) or "types are Tensor[...], int, float, bool, str, Scalar, list, "
                                                     "tuple, Node, Attr, or an nn.Module subclass such as nn.Conv2d")
        return None

    def module_type(self, cls: type, args: tuple[st.TypeArg, ...], span: Span) -> ModuleType | None:
        """``nn.Conv2d`` (subclasses too) or ``nn.Conv2d[exact]`` (that class only, without hooks)."""
        if not args:
            return ModuleType(cls, span)
        if len(args) == 1 and isinstance(args[0], st.DimName) and args[0].name == "exact":
            return ModuleType(cls, span, exact=True)
        self.sink.error(args[0].span, f"a module type takes only [exact]: {cls.__name__}[exact]",
                        "exact: that class only (not a subclass, which may compute differently), without hooks")
        return None

    def tensor_type(self, args: tuple[st.TypeArg, ...], span: Span) -> TensorType | None:
        dims: list[Any] = []
        dtypes = None
        for arg in args:
            if isinstance(arg, st.DimName):
                dims.append(DimSymbol(arg.name))
            elif isinstance(arg, st.DimSize):
                dims.append(arg.size)
            elif isinstance(arg, st.DimEllipsis):
                dims.append(DimRest())
            elif arg.name == "dtype":
                dtypes = tuple(self.dtype(value) for value in arg.values)
            else:
                self.sink.error(arg.span, f"unknown tensor type option '{arg.name}'", "the only option is dtype=")
        if sum(isinstance(d, DimRest) for d in dims) > 1:
            self.sink.error(span, "a tensor type may contain '...' only once")
        has_dims = bool(dims) or (not any(isinstance(a, st.TypeKeyword) for a in args) and bool(args))
        return TensorType(tuple(dims) if has_dims else None, dtypes, span)

    def dtype(self, dotted: st.Dotted) -> Any:
        if len(dotted.parts) == 1 and not isinstance(getattr(torch, dotted.parts[0], None), torch.dtype):
            if hasattr(torch, dotted.parts[0]):
                self.sink.error(dotted.span, f"'{dotted}' is not a dtype")
                return None
            names = [n for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype)]
            self.sink.error(dotted.span, f"unknown dtype '{dotted}'", did_you_mean(dotted.parts[0], names))
            return None
        parts = dotted.parts if len(dotted.parts) > 1 else ("torch", dotted.parts[0])
        value = ScopeResolver(self.sink, self.scope).resolve_dotted(parts, dotted.span)
        if value is not None and not isinstance(value, torch.dtype):
            self.sink.error(dotted.span, f"'{dotted}' is not a dtype")
        return value
