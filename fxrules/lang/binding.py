"""What patterns and replacements share: names, expressions, calls and their arguments bound to signatures.

:class:`SectionResolver` turns the expressions of one rule section into
templates of :mod:`fxrules.lang.ir`.  It resolves dotted names against the
scope, resolves calls to their targets (functions, tensor methods, module
captures, families, ``getattr``), binds each call's arguments to its
target's signature (reporting a call its target cannot take, with the caret
on the argument at fault), marks commutative targets, and folds literal
arithmetic within the literal bound.  What only one side allows or means
(``_``, ``...``, ``A | B``, ``@helper(...)``, and what a bare name stands
for) is decided by the subclasses :class:`~fxrules.lang.pattern.PatternResolver`
and :class:`~fxrules.lang.replacement.ReplacementResolver`, through the
abstract methods at the top of the class.  :class:`Bindings` is what the
two sides of one rule share.
"""

from __future__ import annotations

import abc
import functools
import inspect
import math
import operator
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import torch

from fxrules.diagnostics import DiagnosticSink, Span, did_you_mean
from fxrules.lang import syntax_tree as st
from fxrules.lang.bounds import MAX_INT_BITS, MAX_LENGTH, LiteralTooLarge, bounded
from fxrules.lang.ir import (
    AltTemplate,
    CaptureType,
    Family,
    HelperTemplate,
    Literal,
    ModuleType,
    OpKind,
    OpTemplate,
    SeqTemplate,
    SliceTemplate,
    Template,
    TensorType,
    Wildcard,
    describe_target,
)
from fxrules.lang.scope import Scope, ScopeResolver, tensor_method_name
from fxrules.lang.signatures import (
    BindingPlan,
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

CONSTANT_NAMES: dict[str, float] = {"nan": math.nan, "inf": math.inf}

#: The ``t_`` method of each (resolver class, expression class), None when there is none.
_HANDLERS: dict[tuple[type, type], Any] = {}
_UNKNOWN = object()


def partly_bound_error(name: str) -> tuple[str, str]:
    """The error and hint at ``name``, which only some options of a pattern's ``A | B`` bind, where a guard or a
    replacement reads it."""
    return (f"'{name}' is bound by only some alternatives of the pattern",
            "bind it in every option of 'A | B', or write one rule per option")


@attrs.define
class Bindings:
    """What the sections of one rule share: the ``given`` types, and the names the pattern binds."""

    types: dict[str, CaptureType]
    untyped: set[str]  # given: names whose type was wrong (already reported)
    interior: dict[str, Template] = attrs.Factory(dict)  # names the pattern assigns
    used_captures: set[str] = attrs.Factory(set)
    # captures and interior names only some options of an ``A | B`` bind (unbound when another matched)
    partly_bound: set[str] = attrs.Factory(set)
    notes: list[str] = attrs.Factory(list)
    failures: set[int] = attrs.Factory(set)  # ids of the stand-ins for expressions that had an error

    def dim_symbols(self) -> set[str]:
        """The symbolic dims of the ``given`` tensor types (``M`` of ``Tensor[M, K]``): bound by a match."""
        return {s for t in self.types.values() if isinstance(t, TensorType) for s in t.symbols()}

    def dims_of(self, capture: str) -> tuple[str, ...]:
        """The symbolic dims the ``given`` type of ``capture`` carries (a match binding it binds them)."""
        declared = self.types.get(capture)
        return tuple(declared.symbols()) if isinstance(declared, TensorType) else ()

    def note_always_bound(self, always: set[str]) -> None:
        """Given the names (and dims) every match binds, note the rest the pattern binds as :attr:`partly_bound`."""
        self.partly_bound = (self.used_captures | self.interior.keys() | self.dim_symbols()) - always


class SectionResolver(abc.ABC):
    """Resolves the statements of one rule section into templates, reporting problems to the sink."""

    #: The section's name in messages (``pattern:``, ``replace:``).
    section: str

    def __init__(self, sink: DiagnosticSink, scope: Scope, bindings: Bindings) -> None:
        self.sink = sink
        self.scope = scope
        self.bindings = bindings
        self.types = bindings.types
        self.assigned: dict[str, Template] = {}  # the names this section assigns

    # ---------------------------------------------------------------- what each side decides

    @abc.abstractmethod
    def bound_name(self, expr: st.Name) -> Template:
        """A name that is neither a constant nor in the namespace: a capture, or a name assigned earlier."""

    @abc.abstractmethod
    def underscore(self, expr: st.Name) -> Template:
        """The name ``_``."""

    @abc.abstractmethod
    def partial_operation(self, kind: OpKind, target: Any, args: list[st.Expr], keywords: tuple[st.Keyword, ...],
                          span: Span, binds: str | None, ellipsis: st.EllipsisExpr) -> Template:
        """A call whose last argument is ``...`` (``args`` without it)."""

    @abc.abstractmethod
    def t_Alternatives(self, expr: st.Alternatives) -> Template:  # noqa: N802 - dispatched by class name
        """A choice ``A | B``."""

    @abc.abstractmethod
    def t_HelperCall(self, expr: st.HelperCall) -> Template:  # noqa: N802
        """A helper call ``@name(...)``."""

    @abc.abstractmethod
    def unsigned_call(self, kind: OpKind, target: Any) -> None:
        """A call whose target has no signature, so its arguments stay as written."""

    def assignment_problem(self, name: str) -> str | None:
        """Why ``name = ...`` may not be written here, if it may not."""
        return f"'{name}' is assigned twice" if name in self.assigned else None

    @abc.abstractmethod
    def unnamed_value(self, statement: st.Assign) -> None:
        """``name = value`` where the value is not an operation (that the name could label)."""

    # ---------------------------------------------------------------- errors

    def error(self, span: Span, message: str, hint: str | None = None) -> Wildcard:
        self.sink.error(span, message, hint)
        return self.failed(span)

    def failed(self, span: Span) -> Wildcard:
        """The stand-in for an expression that already has an error: later checks do not repeat it."""
        placeholder = Wildcard(span)
        self.bindings.failures.add(id(placeholder))
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


    # ---------------------------------------------------------------- statements

    def statements(self, statements: tuple[st.Statement, ...]) -> tuple[Template, ...]:
        outputs: tuple[Template, ...] = ()
        returned = False
        for statement in statements:
            if returned:
                self.error(statement.span, f"statement after 'return' in {self.section}:")
                continue
            if isinstance(statement, st.Assign):
                self.assign(statement)
            else:
                outputs = tuple(self.template(value) for value in statement.values)
                returned = True
        if not returned and statements:
            self.error(statements[-1].span, f"the {self.section}: section has no 'return'")
        return outputs

    def assign(self, statement: st.Assign) -> None:
        name = statement.name
        problem = self.assignment_problem(name)
        if problem is not None:
            self.error(statement.span, problem)
            return
        if self.scope.namespace.is_root(name) or name == "_":
            self.error(statement.span, f"cannot assign to '{name}'")
            return
        value = self.template(statement.value)
        named = _named(value, name)
        if named is None:
            self.unnamed_value(statement)
        self.assigned[name] = value if named is None else named

    # ---------------------------------------------------------------- expressions

    def template(self, expr: st.Expr) -> Template:
        key = (type(self), type(expr))
        handler = _HANDLERS.get(key, _UNKNOWN)
        if handler is _UNKNOWN:  # what a class's getattr finds never changes: looked up once per pair
            handler = _HANDLERS[key] = getattr(type(self), "t_" + type(expr).__name__, None)
        if handler is None:
            return self.guard_only(expr)
        return handler(self, expr)  # type: ignore[no-any-return]

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
            return self.underscore(expr)
        if name in CONSTANT_NAMES:
            return Literal(CONSTANT_NAMES[name], expr.span)
        if self.is_namespace_path((name,)):  # torch, or a short name from 'use torch.float16 as half'
            return self.namespace_value((name,), expr.span)
        return self.bound_name(expr)

    def t_Constant(self, expr: st.Constant) -> Template:  # noqa: N802
        return Literal(expr.value, expr.span)

    def t_EllipsisExpr(self, expr: st.EllipsisExpr) -> Template:  # noqa: N802
        return self.error(expr.span, "'...' may only stand as the last argument of a call in a pattern")

    def t_ListExpr(self, expr: st.ListExpr) -> Template:  # noqa: N802
        return SeqTemplate(tuple(self.template(i) for i in expr.items), expr.span)

    def t_TupleExpr(self, expr: st.TupleExpr) -> Template:  # noqa: N802
        return SeqTemplate(tuple(self.template(i) for i in expr.items), expr.span, is_tuple=True)

    def t_BinOp(self, expr: st.BinOp) -> Template:  # noqa: N802
        target = BINARY_OPERATORS[expr.op]
        return self.operation(OpKind.FUNCTION, target, [expr.left, expr.right], (), expr.span)

    def t_UnaryOp(self, expr: st.UnaryOp) -> Template:  # noqa: N802
        number = number_literal(expr)
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
        name = parts[0]
        return self.scope.namespace.is_root(name) and name not in self.assigned and name not in self.bindings.interior

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
            self.bindings.used_captures.add(name)
            return self.operation(OpKind.MODULE, declared.cls, list(expr.args), expr.keywords, expr.span, binds=name)
        if name in self.scope.families:
            family = self.scope.families[name]
            return self.operation(OpKind.FAMILY, family, list(expr.args), expr.keywords, expr.span)
        if name in SAFE_BUILTINS:
            return self.call_getattr(func, expr)
        if name in self.bindings.untyped:  # its type was already reported as wrong
            self.bindings.used_captures.add(name)
            return self.failed_call(expr, func.span)
        if name.startswith("__"):
            return self.failed_call(expr, func.span, f"'{name}': dunder names are not allowed in rule files")
        if name in self.types or name in self.bindings.interior or name in self.assigned:
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
        method = tensor_method_name(self.scope.namespace, parts, value)
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
        if args and isinstance(args[-1], st.EllipsisExpr):
            return self.partial_operation(kind, target, args[:-1], keywords, span, binds, args[-1])
        return self.bind_operation(kind, target, args, keywords, span, binds, rest=False)

    def bind_operation(self, kind: OpKind, target: Any, args: list[st.Expr], keywords: tuple[st.Keyword, ...],
                       span: Span, binds: str | None, *, rest: bool) -> Template:
        """The operation's arguments resolved, then bound to its target's signature (``rest``: given in part)."""
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
            keywords = dict(kwargs)
            plan = signature.plan(args, keywords, partial=rest)
            if plan is None:
                mismatch = signature.mismatch(len(args), list(keywords), partial=rest)
                if mismatch is not None:
                    return self.call_error(kind, target, signature, mismatch, (args, span, keyword_spans or {}))
                self.bindings.notes.append(f"arguments of {describe_target(kind, target)} are compared as written "
                                  "(no overload binds them unambiguously)")
            else:
                bound = _bound_templates(plan, signature, args, keywords, span)
        elif kind is not OpKind.ATTR and not isinstance(target, HelperTemplate):
            self.unsigned_call(kind, target)
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


def _named(value: Template, name: str) -> Template | None:
    """``value`` labelled ``name`` when it is an operation or a choice of operations, else None."""
    if isinstance(value, OpTemplate):
        return attrs.evolve(value, name=name)
    options = [o for o in value.options if isinstance(o, OpTemplate)] if isinstance(value, AltTemplate) else []
    if isinstance(value, AltTemplate) and len(options) == len(value.options):
        return attrs.evolve(value, options=tuple(attrs.evolve(o, name=name) for o in options))
    return None


def _bound_templates(plan: BindingPlan, signature: CallSignature, args: tuple[Template, ...],
                     kwargs: Mapping[str, Template], span: Span) -> dict[str, Template]:
    """The arguments by parameter name as ``plan`` binds them (what ``CallSignature.bind`` gives, without
    its defaults); sizes given loose (``x.view(a, b)``) are packed into one sequence template."""
    if plan.packed:
        start = signature.pack_from
        assert start is not None  # a plan packs only where the signature says sizes may come loose
        args = (*args[:start], SeqTemplate(tuple(args[start:]), span, is_tuple=True))
    return {name: args[key] if isinstance(key, int) else kwargs[key] for name, key in plan.slots}


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
    primary = family.primary
    if primary.kind is not OpKind.MODULE:
        return primary.signature
    return _module_family_signature(primary.target)


@functools.cache
def _module_family_signature(cls: Any) -> CallSignature | None:  # an nn.Module class (mypy sees those unhashable)
    """The signature of a family whose first member is the module class ``cls``: a fact of the class alone (a
    family's parameters are its first member's), so found once per class, with its binding plans."""
    forward = module_call_signature(cls)
    if forward is None:
        return None
    defaults = constructor_defaults(cls)
    names = [n for n in defaults if n not in forward.parameters]
    return CallSignature(tuple(_with_attributes(o, names, defaults) for o in forward.overloads))


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


def misspelt_constant(name: str) -> str | None:
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


def number_literal(expr: st.Expr) -> float | int | None:
    """The value of a number written as one (``3``, ``-1.5``, ``inf``), else None."""
    if isinstance(expr, st.Constant) and isinstance(expr.value, int | float) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, st.UnaryOp):
        inner = number_literal(expr.operand)
        if inner is not None:
            return -inner if expr.op == "-" else inner
    if isinstance(expr, st.Name) and expr.id in CONSTANT_NAMES:
        return CONSTANT_NAMES[expr.id]
    return None
