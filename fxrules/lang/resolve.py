"""Syntax tree to rule IR: name resolution, argument binding, and every load-time check.

Each rule is checked when it is built, not when it fires (as egg's
``Rewrite::new`` does): unknown targets and families, names the replacement
uses but the pattern does not bind, unused ``given`` declarations, names
assigned twice, output counts that differ, unknown types, guards over unbound
names, calls their target does not take (checked against its signature), and
captures spelt like ``True``/``False``/``None``.  Problems are collected in a :class:`DiagnosticSink` so one load
reports all of them.
"""

from __future__ import annotations

import inspect
import math
import operator
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from fxrules.diagnostics import DiagnosticSink, Span, did_you_mean
from fxrules.lang import syntax_tree as st
from fxrules.lang.bounds import MAX_INT_BITS, MAX_LENGTH, LiteralTooLarge, bounded
from fxrules.lang.families import family_parameters
from fxrules.lang.guards import GuardBuilder
from fxrules.lang.ir import (
    AltTemplate,
    AttrType,
    Capture,
    CaptureType,
    DimRest,
    DimSymbol,
    Family,
    FamilyMember,
    Guard,
    HelperTemplate,
    Literal,
    ModuleType,
    NodeType,
    OpKind,
    OpTemplate,
    Rule,
    ScalarType,
    SeqTemplate,
    SequenceType,
    SliceTemplate,
    Template,
    TensorType,
    Tolerance,
    Wildcard,
    describe_target,
)
from fxrules.lang.signatures import (
    CallSignature,
    Mismatch,
    constructor_defaults,
    function_signature,
    method_signature,
    module_call_signature,
)
from fxrules.lang.syntax_tree import dotted_parts
from fxrules.lang.targets import (
    SAFE_BUILTINS,
    UNKNOWN_NAME_HINT,
    Namespace,
    ResolutionError,
    allowed,
    is_value,
)

_aten = torch.ops.aten

BINARY_OPERATORS: dict[str, Callable[..., Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "@": operator.matmul, "**": operator.pow,
}
UNARY_OPERATORS: dict[str, Callable[..., Any]] = {"-": operator.neg, "+": operator.pos}

#: Targets whose first two arguments may come in either order.
COMMUTATIVE_TARGETS: frozenset[Any] = frozenset({
    operator.add, operator.mul, torch.add, torch.mul, _aten.add.Tensor, _aten.add.Scalar, _aten.mul.Tensor,
    _aten.mul.Scalar, _aten.add, _aten.mul, ("call_method", "add"), ("call_method", "mul"), "add", "mul",
})

SCALAR_TYPES = ("int", "float", "bool", "str", "Scalar", "dtype", "slice")
SEQUENCE_TYPES = ("list", "tuple")
CONSTANT_NAMES: dict[str, float] = {"nan": math.nan, "inf": math.inf}


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
            return FamilyMember(OpKind.MODULE, value, module_call_signature(value), dotted.span)  # type: ignore[arg-type]  # mypy sees nn.Module classes as unhashable
        name = _tensor_method_name(self.scope.namespace, dotted.parts, value)
        if name is not None:
            return FamilyMember(OpKind.METHOD, name, method_signature(name), dotted.span)
        if callable(value):
            return FamilyMember(OpKind.FUNCTION, value, function_signature(value), dotted.span)
        self.sink.error(dotted.span, f"'{dotted}' is a value, not an operation")
        return None


def _tensor_method_name(namespace: Namespace, parts: tuple[str, ...], value: Any) -> str | None:
    """The method name when ``parts`` names a ``torch.Tensor`` method (``torch.Tensor.relu``, or an alias
    that ``use torch.Tensor.relu as r`` made): FX records its calls as ``call_method`` nodes."""
    if len(parts) >= 2:
        try:
            return parts[-1] if namespace.resolve(parts[:-1], containers=True) is torch.Tensor else None
        except ResolutionError:
            return None
    name = getattr(value, "__name__", None)
    return name if isinstance(name, str) and getattr(torch.Tensor, name, None) is value else None


class RuleResolver:
    """Builds one :class:`Rule` from its declaration, reporting problems to the sink."""

    def __init__(self, sink: DiagnosticSink, scope: Scope, decl: st.RuleDecl) -> None:
        self.sink = sink
        self.scope = scope
        self.decl = decl
        self.types: dict[str, CaptureType] = {}
        self.interior: dict[str, OpTemplate] = {}
        self.replace_env: dict[str, Template] = {}
        self.used_captures: set[str] = set()
        self.notes: list[str] = []
        self.failures: set[int] = set()
        self.declared_at: dict[str, Span] = {}  # given: names, where they are declared
        self.untyped: set[str] = set()  # given: names whose type was wrong (already reported)
        self.mode = "pattern"

    def error(self, span: Span, message: str, hint: str | None = None) -> Wildcard:
        self.sink.error(span, message, hint)
        return self.failed(span)

    def failed(self, span: Span) -> Wildcard:
        """The stand-in for an expression that already has an error: later checks do not repeat it."""
        placeholder = Wildcard(span)
        self.failures.add(id(placeholder))
        return placeholder

    def failed_call(self, expr: st.Call, span: Span, message: str | None = None, hint: str | None = None) -> Wildcard:
        """A call whose callee is wrong: its arguments are still resolved, so their captures count as bound."""
        if isinstance(expr.func, st.Attribute) and not self.is_namespace_path(dotted_parts(expr.func) or ("",)):
            self.template(expr.func.value)  # the receiver of a method call
        for argument in expr.args:
            if not isinstance(argument, st.EllipsisExpr):
                self.template(argument)
        for keyword in expr.keywords:
            self.template(keyword.value)
        if message is None:
            return self.failed(span)
        return self.error(span, message, hint)

    # ---------------------------------------------------------------- the rule

    def resolve(self) -> Rule | None:
        errors_before = len(self.sink.diagnostics)
        decl = self.decl
        for declaration in decl.given:
            self.declare(declaration)
        pattern = self.statements(decl.pattern, "pattern")
        guard = self.guard(decl.where) if decl.where else None
        self.mode = "replace"
        replacement = self.statements(decl.replace, "replace")
        self.check_rule(pattern, replacement)
        tolerance, finite, grad_check = self.decorators()
        if len(self.sink.diagnostics) > errors_before:
            return None
        return Rule(
            name=decl.name, span=decl.name_span, pattern=pattern, replacement=replacement, types=dict(self.types),
            guard=guard, docstring=decl.docstring, tolerance=tolerance, finite_inputs=finite,
            grad_check=grad_check,
            notes=tuple(dict.fromkeys(self.notes)),
        )

    def check_rule(self, pattern: tuple[Template, ...], replacement: tuple[Template, ...]) -> None:
        decl = self.decl
        if pattern and replacement and len(pattern) != len(replacement):
            span = _return_span(decl.replace) or decl.span
            self.error(span, f"the pattern returns {len(pattern)} value(s) but the replacement returns "
                             f"{len(replacement)}")
        for output in pattern:
            if not _is_operation(output) and id(output) not in self.failures:
                self.error(output.span, "the pattern has no operation to match: it must call something",
                           "a rule's pattern is anchored at an operation, e.g. 'torch.neg(torch.neg(x)) => x'")
        for name, span in self.declared_at.items():
            if name not in self.used_captures and name not in self.untyped:
                self.error(span, f"'{name}' is declared in given: but the pattern does not use it")

    def decorators(self) -> tuple[Tolerance | None, bool, bool]:
        """``@tolerance(atol=, rtol=)``, ``@finite_inputs()`` and ``@no_grad_check()``: how the rule is
        verified (its tolerance, whether it draws finite inputs only, whether it compares gradients)."""
        tolerance = None
        flags = {"finite_inputs": False, "no_grad_check": False}
        for decorator in self.decl.decorators:
            if decorator.name in flags:
                if decorator.args or decorator.keywords:
                    self.error(decorator.span, f"@{decorator.name} takes no arguments")
                flags[decorator.name] = True
            elif decorator.name == "tolerance":
                tolerance = self.tolerance(decorator)
            else:
                self.error(decorator.span, f"unknown decorator '@{decorator.name}'",
                           "the decorators are @tolerance(atol=..., rtol=...), @finite_inputs() and "
                           "@no_grad_check()")
        return tolerance, flags["finite_inputs"], not flags["no_grad_check"]

    def tolerance(self, decorator: st.Decorator) -> Tolerance:
        values: dict[str, float | None] = {"atol": None, "rtol": None}
        for keyword in decorator.keywords:
            number = _number(keyword.value)
            if keyword.name not in values or number is None:
                self.error(keyword.span, "@tolerance takes atol=NUMBER and rtol=NUMBER")
                continue
            values[keyword.name] = number
        if decorator.args:
            self.error(decorator.args[0].span, "@tolerance takes atol=NUMBER and rtol=NUMBER")
        return Tolerance(values["atol"], values["rtol"])

    # ---------------------------------------------------------------- given:

    def declare(self, declaration: st.Declaration) -> None:
        if declaration.name in self.declared_at:
            self.error(declaration.span, f"'{declaration.name}' is declared twice in given:")
            return
        self.declared_at[declaration.name] = declaration.span
        declared = self.type_of(declaration.type)
        if declaration.or_none is not None and declared is not None:
            if isinstance(declared, TensorType):
                declared = attrs.evolve(declared, or_none=True)
            else:
                self.error(declaration.or_none, "only a Tensor type can be '| None' (other literals are "
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
            self.error(element.span, f"{name}[...] takes one element type: Tensor or {', '.join(SCALAR_TYPES)}",
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
            self.error(args[0].span, f"type '{name}' takes no arguments in [...]")
            return None
        known = ["Tensor", *SCALAR_TYPES, *SEQUENCE_TYPES, "Node", "Attr"]
        self.error(expr.name.span, f"unknown type '{name}'",
                   did_you_mean(name, known) or "types are Tensor[...], int, float, bool, str, Scalar, list, "
                                                "tuple, Node, Attr, or an nn.Module subclass such as nn.Conv2d")
        return None

    def module_type(self, cls: type, args: tuple[st.TypeArg, ...], span: Span) -> ModuleType | None:
        """``nn.Conv2d`` (subclasses too) or ``nn.Conv2d[exact]`` (that class only, without hooks)."""
        if not args:
            return ModuleType(cls, span)
        if len(args) == 1 and isinstance(args[0], st.DimName) and args[0].name == "exact":
            return ModuleType(cls, span, exact=True)
        self.error(args[0].span, f"a module type takes only [exact]: {cls.__name__}[exact]",
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
                self.error(arg.span, f"unknown tensor type option '{arg.name}'", "the only option is dtype=")
        if sum(isinstance(d, DimRest) for d in dims) > 1:
            self.error(span, "a tensor type may contain '...' only once")
        has_dims = bool(dims) or (not any(isinstance(a, st.TypeKeyword) for a in args) and bool(args))
        return TensorType(tuple(dims) if has_dims else None, dtypes, span)

    def dtype(self, dotted: st.Dotted) -> Any:
        if len(dotted.parts) == 1 and not isinstance(getattr(torch, dotted.parts[0], None), torch.dtype):
            if hasattr(torch, dotted.parts[0]):
                self.error(dotted.span, f"'{dotted}' is not a dtype")
                return None
            names = [n for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype)]
            self.error(dotted.span, f"unknown dtype '{dotted}'", did_you_mean(dotted.parts[0], names))
            return None
        parts = dotted.parts if len(dotted.parts) > 1 else ("torch", dotted.parts[0])
        value = ScopeResolver(self.sink, self.scope).resolve_dotted(parts, dotted.span)
        if value is not None and not isinstance(value, torch.dtype):
            self.error(dotted.span, f"'{dotted}' is not a dtype")
        return value

    # ---------------------------------------------------------------- statements

    def statements(self, statements: tuple[st.Statement, ...], section: str) -> tuple[Template, ...]:
        outputs: tuple[Template, ...] = ()
        returned = False
        for statement in statements:
            if returned:
                self.error(statement.span, f"statement after 'return' in {section}:")
                continue
            if isinstance(statement, st.Assign):
                self.assign(statement, section)
            else:
                outputs = tuple(self.template(value) for value in statement.values)
                returned = True
        if not returned and statements:
            self.error(statements[-1].span, f"the {section}: section has no 'return'")
        return outputs

    def assign(self, statement: st.Assign, section: str) -> None:
        name = statement.name
        env: dict[str, Any] = self.interior if section == "pattern" else self.replace_env
        if name in env or (section == "pattern" and name in self.types):
            self.error(statement.span, f"'{name}' is assigned twice" if name in env else
                       f"'{name}' is declared in given: as a capture and cannot be assigned")
            return
        if self.scope.namespace.is_root(name) or name == "_":
            self.error(statement.span, f"cannot assign to '{name}'")
            return
        value = self.template(statement.value)
        if isinstance(value, OpTemplate):
            value = attrs.evolve(value, name=name)
        elif isinstance(value, AltTemplate) and all(isinstance(o, OpTemplate) for o in value.options):
            value = attrs.evolve(value, options=tuple(attrs.evolve(o, name=name) for o in value.options
                                                      if isinstance(o, OpTemplate)))  # all are: narrows for mypy
        elif section == "pattern":
            self.error(statement.value.span, f"'{name} = ...' in a pattern must name an operation")
        env[name] = value

    # ---------------------------------------------------------------- expressions

    def template(self, expr: st.Expr) -> Template:
        handler = getattr(self, "t_" + type(expr).__name__, None)
        if handler is None:
            return self.guard_only(expr)
        template: Template = handler(expr)
        return template

    def guard_only(self, expr: st.Expr) -> Template:
        """``not``, ``and``, ``or`` and comparisons belong to guards; their operands still bind captures."""
        if isinstance(expr, st.Not):
            operands: tuple[st.Expr, ...] = (expr.operand,)
            what = "'not'"
        elif isinstance(expr, st.BoolOp):
            operands, what = expr.values, f"'{expr.op}'"
        else:
            assert isinstance(expr, st.Compare)
            operands, what = (expr.left, *expr.comparators), "a comparison"
        for operand in operands:
            self.template(operand)
        return self.error(expr.span, f"{what} may only appear in a guard")

    def t_Name(self, expr: st.Name) -> Template:  # noqa: N802 - dispatched by class name
        name = expr.id
        if name.startswith("__"):
            return self.error(expr.span, f"'{name}': dunder names are not allowed in rule files")
        if name == "_":
            return Wildcard(expr.span) if self.mode == "pattern" else self.error(
                expr.span, "'_' matches anything in a pattern; a replacement cannot build it")
        if name in CONSTANT_NAMES:
            return Literal(CONSTANT_NAMES[name], expr.span)
        if self.is_namespace_path((name,)):  # torch, or a short name from 'use torch.float16 as half'
            return self.namespace_value((name,), expr.span)
        if self.mode == "replace":
            return self.replace_name(expr)
        if name in self.interior:
            return self.interior[name]
        if name in self.scope.families:
            return self.error(expr.span, f"'{name}' names a family, not a value")
        constant = _misspelt_constant(name) if name not in self.types else None
        if constant is not None:  # `inplace=Ture` would silently be a capture that matches anything
            self.used_captures.add(name)  # bound all the same: a replacement using it is not a second error
            return self.error(expr.span, f"'{name}' would be a capture matching anything; did you mean {constant}?",
                              f"declare '{name}' in given: if a capture is meant")
        self.used_captures.add(name)
        declared = self.types.get(name)
        if isinstance(declared, AttrType):
            return OpTemplate(OpKind.ATTR, None, (), (), expr.span, binds=name)
        if isinstance(declared, ModuleType):
            return self.error(expr.span, f"'{name}' is a module capture: call it, as in {name}(x)")
        return Capture(name, expr.span)

    def replace_name(self, expr: st.Name) -> Template:
        name = expr.id
        if name in self.replace_env:
            return self.replace_env[name]
        if name in self.interior or name in self.used_captures or name in self.dim_symbols():
            return Capture(name, expr.span)
        bound = [*self.replace_env, *self.interior, *self.used_captures, *self.dim_symbols()]
        hint = f"or, for the module '{name}', pass allow=['{name}']" if name in sys.modules else None
        constant = _misspelt_constant(name)
        suggestion = f"did you mean {constant}?" if constant else did_you_mean(name, bound)
        return self.error(expr.span, f"'{name}' is not bound by the pattern",
                          " ".join(filter(None, [suggestion, hint])) or None)

    def t_Constant(self, expr: st.Constant) -> Template:  # noqa: N802
        return Literal(expr.value, expr.span)

    def t_EllipsisExpr(self, expr: st.EllipsisExpr) -> Template:  # noqa: N802
        return self.error(expr.span, "'...' may only stand as the last argument of a call in a pattern")

    def t_ListExpr(self, expr: st.ListExpr) -> Template:  # noqa: N802
        return SeqTemplate(tuple(self.template(i) for i in expr.items), expr.span)

    def t_TupleExpr(self, expr: st.TupleExpr) -> Template:  # noqa: N802
        return SeqTemplate(tuple(self.template(i) for i in expr.items), expr.span, is_tuple=True)

    def t_Alternatives(self, expr: st.Alternatives) -> Template:  # noqa: N802
        if self.mode != "pattern":
            return self.error(expr.span, "alternatives 'A | B' may only appear in a pattern")
        return AltTemplate(tuple(self.template(o) for o in expr.options), expr.span)

    def t_BinOp(self, expr: st.BinOp) -> Template:  # noqa: N802
        target = BINARY_OPERATORS[expr.op]
        return self.operation(OpKind.FUNCTION, target, [expr.left, expr.right], (), expr.span)

    def t_UnaryOp(self, expr: st.UnaryOp) -> Template:  # noqa: N802
        number = _number(expr)
        if number is not None:
            return Literal(number, expr.span)
        return self.operation(OpKind.FUNCTION, UNARY_OPERATORS[expr.op], [expr.operand], (), expr.span)

    def t_Subscript(self, expr: st.Subscript) -> Template:  # noqa: N802
        index: Template
        if len(expr.index) == 1:
            index = self.index_item(expr.index[0])
        else:
            index = SeqTemplate(tuple(self.index_item(i) for i in expr.index), expr.span, is_tuple=True)
        value = self.template(expr.value)
        return self.finish_operation(OpKind.FUNCTION, operator.getitem, (value, index), (), expr.span, False)

    def index_item(self, expr: st.Expr) -> Template:
        if not isinstance(expr, st.SliceExpr):
            return self.template(expr)
        parts = [Literal(None, expr.span) if part is None else self.template(part)
                 for part in (expr.start, expr.stop, expr.step)]
        if all(isinstance(p, Literal) for p in parts):
            return Literal(slice(*(p.value for p in parts)), expr.span)  # type: ignore[union-attr]
        return SliceTemplate(parts[0], parts[1], parts[2], expr.span)

    def t_SliceExpr(self, expr: st.SliceExpr) -> Template:  # noqa: N802
        return self.error(expr.span, "a slice 'a:b' may only appear inside [...]")

    def t_Attribute(self, expr: st.Attribute) -> Template:  # noqa: N802
        parts = dotted_parts(expr)
        if parts and self.is_namespace_path(parts):
            return self.namespace_value(parts, expr.span)
        value = self.template(expr.value)
        if expr.attr.startswith("_"):
            return self.error(expr.span, f"'.{expr.attr}': private and dunder attributes are not allowed")
        try:
            self.scope.namespace.check_attribute(expr.attr)
        except ResolutionError as error:
            return self.error(expr.span, error.message, error.hint)
        return self.finish_operation(OpKind.FUNCTION, getattr, (value, Literal(expr.attr, expr.span)), (), expr.span,
                                     False)

    def namespace_value(self, parts: tuple[str, ...], span: Span) -> Template:
        """A name of the namespace used as a value: a literal (``torch.float32``), else an error."""
        value = ScopeResolver(self.sink, self.scope).resolve_dotted(parts, span)
        if value is None:
            return Wildcard(span)
        if is_value(value):
            return Literal(value, span)
        if isinstance(value, types.ModuleType):
            return self.error(span, f"'{'.'.join(parts)}' names a module, not a value")
        return self.error(span, f"'{'.'.join(parts)}' is an operation: call it")

    def is_namespace_path(self, parts: tuple[str, ...]) -> bool:
        bound = self.interior if self.mode == "pattern" else {**self.replace_env, **self.interior}
        return self.scope.namespace.is_root(parts[0]) and parts[0] not in bound

    def t_HelperCall(self, expr: st.HelperCall) -> Template:  # noqa: N802
        if self.mode != "replace":
            for argument in (*expr.args, *(k.value for k in expr.keywords)):
                self.template(argument)  # its captures still count as bound: one error, not two
            return self.error(expr.span, f"helper '@{expr.name}' may only be called in a replacement")
        args = tuple(self.template(a) for a in expr.args)
        kwargs = tuple((k.name, self.template(k.value)) for k in expr.keywords)
        return HelperTemplate(expr.name, args, kwargs, expr.span)

    def t_Call(self, expr: st.Call) -> Template:  # noqa: N802
        func = expr.func
        if isinstance(func, st.HelperCall):
            helper = self.template(func)
            return self.operation(OpKind.MODULE, helper, list(expr.args), expr.keywords, expr.span)
        if isinstance(func, st.Name):
            return self.call_name(func, expr)
        parts = dotted_parts(func)
        if parts and self.is_namespace_path(parts):
            return self.call_target(parts, expr)
        if isinstance(func, st.Attribute):
            return self.call_method(func, expr)
        self.template(func)  # what it calls still binds its captures: one error, not two
        return self.failed_call(expr, func.span, "only functions, methods, modules and families can be called here")

    def call_name(self, func: st.Name, expr: st.Call) -> Template:
        name = func.id
        declared = self.types.get(name)
        if isinstance(declared, ModuleType):
            self.used_captures.add(name)
            return self.operation(OpKind.MODULE, declared.cls, list(expr.args), expr.keywords, expr.span, binds=name)
        if name in self.scope.families:
            family = self.scope.families[name]
            return self.operation(OpKind.FAMILY, family, list(expr.args), expr.keywords, expr.span)
        if name in SAFE_BUILTINS:
            return self.call_getattr(func, expr)
        if name in self.untyped:  # its type was already reported as wrong
            self.used_captures.add(name)
            return self.failed_call(expr, func.span)
        if name.startswith("__"):
            return self.failed_call(expr, func.span, f"'{name}': dunder names are not allowed in rule files")
        if name in self.types or name in self.interior or name in self.replace_env:
            return self.failed_call(expr, func.span,
                                    f"'{name}' is called but is not declared as an nn.Module type in given:",
                                    f"declare it, e.g. '{name}: nn.Conv2d'")
        if self.is_namespace_path((name,)):  # a short name from 'use torch.relu as r'
            return self.call_target((name,), expr)
        return self.failed_call(expr, func.span, f"unknown family '{name}'",
                                did_you_mean(name, self.scope.families) or "declare it with 'family NAME = ...'")

    def call_getattr(self, func: st.Name, expr: st.Call) -> Template:
        """``getattr(x, "shape")``, as FX records ``x.shape``: the name must be written as a string, never a
        capture or a computed value (``getattr(x, operator.add("__cla", "ss__"))`` would reach dunders)."""
        attribute = expr.args[1] if len(expr.args) > 1 else None
        if attribute is not None and not (isinstance(attribute, st.Constant) and isinstance(attribute.value, str)):
            return self.failed_call(expr, attribute.span, "getattr takes an attribute name written as a string")
        if attribute is not None and str(attribute.value).startswith("_"):
            return self.failed_call(expr, func.span, f"'.{attribute.value}': private and dunder attributes are not "
                                                     "allowed")
        if attribute is not None:
            try:
                self.scope.namespace.check_attribute(str(attribute.value))
            except ResolutionError as error:
                return self.failed_call(expr, attribute.span, error.message, error.hint)
        return self.operation(OpKind.FUNCTION, SAFE_BUILTINS[func.id], list(expr.args), expr.keywords, expr.span)

    def call_target(self, parts: tuple[str, ...], expr: st.Call) -> Template:
        resolver = ScopeResolver(self.sink, self.scope)
        value = resolver.resolve_dotted(parts, expr.func.span)
        if value is None:
            return self.failed_call(expr, expr.span)
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            family = next((f.name for f in self.scope.families.values() if f.member_for(("call_module", value))), None)
            return self.failed_call(expr, expr.func.span, f"'{'.'.join(parts)}' is a module class, not a call",
                                    f"declare 'm: {'.'.join(parts)}' in given: and write m(x)"
                                    + (f", or use the family '{family}'" if family else ""))
        method = _tensor_method_name(self.scope.namespace, parts, value)
        if method is not None:
            return self.operation(OpKind.METHOD, method, list(expr.args), expr.keywords, expr.span)
        if not callable(value):
            return self.failed_call(expr, expr.func.span, f"'{'.'.join(parts)}' is a value, not a function")
        return self.operation(OpKind.FUNCTION, value, list(expr.args), expr.keywords, expr.span)

    def call_method(self, func: st.Attribute, expr: st.Call) -> Template:
        name = func.attr
        receiver = func.value
        if isinstance(receiver, st.Name) and receiver.id in sys.modules and receiver.id not in self.types:
            # `os.system(x)` would otherwise read as the method .system of a capture named os.
            return self.failed_call(expr, receiver.span, f"unknown name '{receiver.id}'", UNKNOWN_NAME_HINT)
        if name.startswith("_"):
            return self.failed_call(expr, func.span, f"'.{name}': private and dunder attributes are not allowed")
        name_span = attrs.evolve(func.span, column=(func.span.end_column or 1) - len(name), end_line=None)
        if not hasattr(torch.Tensor, name):
            return self.failed_call(expr, name_span, f"unknown tensor method '.{name}'",
                                    did_you_mean(name, allowed().tensor_names))
        try:
            self.scope.namespace.check_method(name)
        except ResolutionError as error:
            return self.failed_call(expr, name_span, error.message, error.hint)
        return self.operation(OpKind.METHOD, name, [func.value, *expr.args], expr.keywords, expr.span)

    # ---------------------------------------------------------------- operations

    def operation(self, kind: OpKind, target: Any, args: list[st.Expr], keywords: tuple[st.Keyword, ...],
                  span: Span, binds: str | None = None) -> Template:
        rest = bool(args) and isinstance(args[-1], st.EllipsisExpr)
        if rest:
            if self.mode != "pattern":
                return self.error(args[-1].span, "'...' may only appear in a pattern")
            args = args[:-1]
        arg_templates = tuple(self.template(a) for a in args)
        kwarg_templates = tuple((k.name, self.template(k.value)) for k in keywords)
        return self.finish_operation(kind, target, arg_templates, kwarg_templates, span, rest, binds,
                                     {k.name: k.span for k in keywords})

    def finish_operation(self, kind: OpKind, target: Any, args: tuple[Template, ...],
                         kwargs: tuple[tuple[str, Template], ...], span: Span, rest: bool,
                         binds: str | None = None, keyword_spans: Mapping[str, Span] | None = None) -> Template:
        signature = _signature(kind, target)
        bound = None
        if signature is not None:
            call = signature.bind(args, dict(kwargs), partial=rest)
            if call is None:
                mismatch = signature.mismatch(len(args), [name for name, _ in kwargs], partial=rest)
                if mismatch is not None:
                    return self.call_error(kind, target, signature, mismatch, (args, span, keyword_spans or {}))
                self.notes.append(f"arguments of {describe_target(kind, target)} are compared as written "
                                  "(no overload binds them unambiguously)")
            else:  # sizes given loose (x.view(a, b)) were packed into a tuple: a sequence template
                bound = {name: SeqTemplate(tuple(value), span, is_tuple=True) if isinstance(value, tuple) else value
                         for name, value in call.explicit.items()}
        elif kind is not OpKind.ATTR and not isinstance(target, HelperTemplate):
            self.notes.append(f"arguments of {describe_target(kind, target)} are compared as written (no signature)")
        commutative = self.is_commutative(kind, target)
        template = OpTemplate(kind, target, args, kwargs, span, rest=rest, binds=binds, signature=signature,
                              bound=bound, commutative=commutative)
        try:
            folded_literal(template)
        except LiteralTooLarge as error:
            return self.error(span, f"literal too large: {error}",
                              f"literal arithmetic is computed at most to integers of {MAX_INT_BITS} bits and "
                              f"sequences of {MAX_LENGTH} items")
        return template

    def call_error(self, kind: OpKind, target: Any, signature: CallSignature, mismatch: Mismatch,
                   where: tuple[tuple[Template, ...], Span, Mapping[str, Span]]) -> Wildcard:
        """A call its target cannot take, with the caret on the argument at fault (on the call when one is
        missing): an unknown keyword, a positional argument too many, a required argument left out."""
        args, span, keyword_spans = where
        name = _call_name(kind, target)
        parameters = signature.parameters
        listed = f"its parameters are ({', '.join(parameters)})"
        if mismatch.keyword is not None:
            return self.error(keyword_spans.get(mismatch.keyword, span),
                              f"{name}() has no parameter '{mismatch.keyword}'",
                              did_you_mean(mismatch.keyword, parameters) or listed)
        receiver = 1 if kind is OpKind.METHOD else 0  # x.sum(...) counts the tensor it is called on
        if mismatch.extra is not None:
            most = mismatch.extra - receiver
            takes = "takes" if len(signature.overloads) == 1 else "takes at most"
            return self.error(args[mismatch.extra].span,
                              f"{name}() {takes} {most} positional argument{'' if most == 1 else 's'} but "
                              f"{len(args) - receiver} {'was' if len(args) - receiver == 1 else 'were'} given",
                              listed)
        if mismatch.missing:
            quoted = [f"'{m}'" for m in mismatch.missing]
            what = f"argument {quoted[0]}" if len(quoted) == 1 else f"arguments {', '.join(quoted)}"
            return self.error(span, f"{name}() is missing the required {what}", listed)
        return self.error(span, f"{name}() does not take these arguments", listed)

    def is_commutative(self, kind: OpKind, target: Any) -> bool:
        if kind is OpKind.FAMILY:
            key: Any = target.name
        elif kind is OpKind.METHOD:
            key = ("call_method", target)
        else:
            key = target
        try:
            return key in COMMUTATIVE_TARGETS or key in self.scope.commutative
        except TypeError:  # an unhashable target is never commutative
            return False

    # ---------------------------------------------------------------- where:

    def dim_symbols(self) -> set[str]:
        """The symbolic dims of the ``given`` tensor types (``M`` of ``Tensor[M, K]``): bound by a match."""
        return {s for t in self.types.values() if isinstance(t, TensorType) for s in t.symbols()}

    def guard(self, conditions: tuple[st.Expr, ...]) -> Guard | None:
        bound = set(self.used_captures) | set(self.interior) | self.dim_symbols()
        builder = GuardBuilder(self.sink, bound, ScopeResolver(self.sink, self.scope))
        return builder.build(conditions)


def _signature(kind: OpKind, target: Any) -> CallSignature | None:
    if kind is OpKind.FUNCTION:
        return function_signature(target)
    if kind is OpKind.METHOD:
        return method_signature(target)
    if kind is OpKind.MODULE and isinstance(target, type):
        return module_call_signature(target)
    if kind is OpKind.FAMILY:
        return _family_signature(target)
    return None


def _family_signature(family: Family) -> CallSignature | None:
    """Family calls bind to the family's parameters: its first member's, plus module attributes."""
    primary = family.primary.signature
    if primary is None:
        return None
    if family.primary.kind is not OpKind.MODULE:
        return primary
    defaults = constructor_defaults(family.primary.target)
    names = [n for n in family_parameters(family) if n not in primary.parameters]
    return CallSignature(tuple(_with_attributes(o, names, defaults) for o in primary.overloads))


def _with_attributes(forward: inspect.Signature, names: list[str], defaults: Mapping[str, Any]) -> inspect.Signature:
    """A module's ``forward`` signature followed by the constructor attributes ``names``: by position and by
    name after its own parameters (``sm(x, 1)`` of ``family sm = nn.Softmax | torch.softmax``), by name only
    when ``forward`` takes ``*args`` or keyword-only parameters."""
    own = list(forward.parameters.values())
    by_name_only = {p.kind for p in own} & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.KEYWORD_ONLY}
    kind = inspect.Parameter.KEYWORD_ONLY if by_name_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
    attributes = [inspect.Parameter(n, kind, default=defaults.get(n)) for n in names]
    var_keyword = [p for p in own if p.kind is inspect.Parameter.VAR_KEYWORD]
    return forward.replace(parameters=[*(p for p in own if p not in var_keyword), *attributes, *var_keyword])


def _call_name(kind: OpKind, target: Any) -> str:
    """The target as a rule names it: ``F.gelu`` rather than the ``torch._C._nn.gelu`` it is defined as."""
    if kind is OpKind.FAMILY:
        return str(target.name)
    name = getattr(target, "__name__", None)
    for prefix, namespace in (("torch", torch), ("F", torch.nn.functional), ("nn", torch.nn)):
        if kind is not OpKind.METHOD and isinstance(name, str) and getattr(namespace, name, None) is target:
            return f"{prefix}.{name}"
    return describe_target(kind, target)


def _misspelt_constant(name: str) -> str | None:
    """``True``, ``False`` or ``None`` when ``name`` is one edit (a letter added, dropped, changed, or two
    swapped) away from it; names shorter than four letters (``one``) are taken as meant."""
    if len(name) < 4:
        return None
    return next((c for c in ("True", "False", "None") if _one_edit(name, c)), None)


def _one_edit(a: str, b: str) -> bool:
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        differ = [i for i in range(len(a)) if a[i] != b[i]]
        return len(differ) == 1 or (len(differ) == 2 and differ[1] == differ[0] + 1
                                    and a[differ[0]] == b[differ[1]] and a[differ[1]] == b[differ[0]])
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _is_operation(template: Template) -> bool:
    if isinstance(template, AltTemplate):
        return all(_is_operation(o) for o in template.options)
    return isinstance(template, OpTemplate)


def _return_span(statements: tuple[st.Statement, ...]) -> Span | None:
    for statement in statements:
        if isinstance(statement, st.Return):
            return statement.span
    return None


#: Modules whose functions of literals are folded at load time, within the literal bound: the arithmetic of
#: ``operator`` and the pure functions of ``math`` (``math.factorial(10 ** 7)`` is minutes of work).
FOLDED_MODULES = ("_operator", "math")

#: What :func:`folded_literal` returns for a template that is not made of literals alone.
NOT_LITERAL = object()


def folded_literal(template: Template) -> Any:
    """The value of a template made of literals alone (``10 ** 3``, ``[1, 2] * 2``, ``operator.lshift(1, 8)``),
    computed within the literal bound (raises :class:`~fxrules.lang.bounds.LiteralTooLarge`); NOT_LITERAL for
    any other template, and for arithmetic that fails (``1 // 0``: a pattern that never matches)."""
    if isinstance(template, Literal):
        return template.value
    if isinstance(template, SeqTemplate):
        items = [folded_literal(item) for item in template.items]
        if any(item is NOT_LITERAL for item in items):
            return NOT_LITERAL
        return tuple(items) if template.is_tuple else items
    if not (isinstance(template, OpTemplate) and template.kind is OpKind.FUNCTION
            and getattr(template.target, "__module__", None) in FOLDED_MODULES):
        return NOT_LITERAL
    args = [folded_literal(arg) for arg in template.args]
    kwargs = {name: folded_literal(value) for name, value in template.kwargs}
    if any(arg is NOT_LITERAL for arg in (*args, *kwargs.values())):
        return NOT_LITERAL
    try:
        return bounded(template.target, *args, **kwargs)
    except LiteralTooLarge:
        raise
    except Exception:  # 1 // 0, 1 @ 2: not a literal, as before folding was checked
        return NOT_LITERAL


def _number(expr: st.Expr) -> float | int | None:
    if isinstance(expr, st.Constant) and isinstance(expr.value, int | float) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, st.UnaryOp):
        inner = _number(expr.operand)
        if inner is not None:
            return -inner if expr.op == "-" else inner
    if isinstance(expr, st.Name) and expr.id in CONSTANT_NAMES:
        return CONSTANT_NAMES[expr.id]
    return None

