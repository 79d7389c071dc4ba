"""Syntax tree to rule IR: one rule resolved section by section, and the checks that span its sections.

Each rule is checked when it is built, not when it fires (as egg's
``Rewrite::new`` does).  :class:`RuleResolver` runs the steps in order and
holds the checks that need more than one section:

1. ``given:`` declarations to capture types (:mod:`fxrules.lang.given`);
2. the pattern (:mod:`fxrules.lang.pattern`): what it matches and binds;
3. the ``where`` guard, over the names the pattern bound (:mod:`fxrules.lang.guards`);
4. the replacement (:mod:`fxrules.lang.replacement`): what it builds from them;
5. here: output counts that differ, a pattern output that is no operation,
   ``given`` names the pattern does not use, and the decorators.

Both sections share :mod:`fxrules.lang.binding` (names, calls and their
arguments bound to signatures).  Problems are collected in a
:class:`DiagnosticSink` so one load reports all of them.  File-level items
(``use``, ``family``, ``commutative``) are resolved by
:class:`~fxrules.lang.scope.ScopeResolver`, re-exported here with
:class:`~fxrules.lang.scope.Scope` and the constants the docs and
highlighter read.
"""

from __future__ import annotations

from fxrules.diagnostics import DiagnosticSink, Span
from fxrules.lang import syntax_tree as st
from fxrules.lang.binding import NOT_LITERAL, Bindings, folded_literal, number_literal
from fxrules.lang.given import SCALAR_TYPES, SEQUENCE_TYPES, GivenResolver
from fxrules.lang.guards import GuardBuilder
from fxrules.lang.ir import AltTemplate, Guard, OpTemplate, Rule, Template, Tolerance
from fxrules.lang.pattern import PatternResolver, always_bound
from fxrules.lang.replacement import ReplacementResolver
from fxrules.lang.scope import Scope, ScopeResolver

__all__ = ["NOT_LITERAL", "SCALAR_TYPES", "SEQUENCE_TYPES", "RuleResolver", "Scope", "ScopeResolver",
           "folded_literal"]


class RuleResolver:
    """Builds one :class:`Rule` from its declaration, reporting problems to the sink."""

    def __init__(self, sink: DiagnosticSink, scope: Scope, decl: st.RuleDecl) -> None:
        self.sink = sink
        self.scope = scope
        self.decl = decl

    def resolve(self) -> Rule | None:
        errors_before = len(self.sink.diagnostics)
        decl = self.decl
        given = GivenResolver(self.sink, self.scope)
        for declaration in decl.given:
            given.declare(declaration)
        bindings = Bindings(given.types, given.untyped)
        pattern = PatternResolver(self.sink, self.scope, bindings).statements(decl.pattern)
        if not bindings.failures:  # a stand-in for an expression in error binds nothing: one error, not two
            bindings.note_always_bound(always_bound(pattern, bindings.interior, bindings.dims_of))
        guard = self.guard(decl.where, bindings) if decl.where else None
        replacement = ReplacementResolver(self.sink, self.scope, bindings).statements(decl.replace)
        self.check_rule(pattern, replacement, bindings, given)
        tolerance, finite, grad_check = self.decorators()
        if len(self.sink.diagnostics) > errors_before:
            return None
        return Rule(
            name=decl.name, span=decl.name_span, pattern=pattern, replacement=replacement, types=dict(given.types),
            guard=guard, docstring=decl.docstring, tolerance=tolerance, finite_inputs=finite,
            grad_check=grad_check,
            notes=tuple(dict.fromkeys(bindings.notes)),
        )

    def guard(self, conditions: tuple[st.Expr, ...], bindings: Bindings) -> Guard | None:
        bound = set(bindings.used_captures) | set(bindings.interior) | bindings.dim_symbols()
        builder = GuardBuilder(self.sink, bound, ScopeResolver(self.sink, self.scope), bindings.partly_bound)
        return builder.build(conditions)

    def check_rule(self, pattern: tuple[Template, ...], replacement: tuple[Template, ...], bindings: Bindings,
                   given: GivenResolver) -> None:
        decl = self.decl
        if pattern and replacement and len(pattern) != len(replacement):
            span = _return_span(decl.replace) or decl.span
            self.sink.error(span, f"the pattern returns {len(pattern)} value(s) but the replacement returns "
                                  f"{len(replacement)}")
        for output in pattern:
            if not _is_operation(output) and id(output) not in bindings.failures:
                self.sink.error(output.span, "the pattern has no operation to match: it must call something",
                                "a rule's pattern is anchored at an operation, e.g. 'torch.neg(torch.neg(x)) => x'")
        for name, span in given.declared_at.items():
            if name not in bindings.used_captures and name not in given.untyped:
                self.sink.error(span, f"'{name}' is declared in given: but the pattern does not use it")

    def decorators(self) -> tuple[Tolerance | None, bool, bool]:
        """``@tolerance(atol=, rtol=)``, ``@finite_inputs()`` and ``@no_grad_check()``: how the rule is
        verified (its tolerance, whether it draws finite inputs only, whether it compares gradients)."""
        tolerance = None
        flags = {"finite_inputs": False, "no_grad_check": False}
        for decorator in self.decl.decorators:
            if decorator.name in flags:
                if decorator.args or decorator.keywords:
                    self.sink.error(decorator.span, f"@{decorator.name} takes no arguments")
                flags[decorator.name] = True
            elif decorator.name == "tolerance":
                tolerance = self.tolerance(decorator)
            else:
                self.sink.error(decorator.span, f"unknown decorator '@{decorator.name}'",
                                "the decorators are @tolerance(atol=..., rtol=...), @finite_inputs() and "
                                "@no_grad_check()")
        return tolerance, flags["finite_inputs"], not flags["no_grad_check"]

    def tolerance(self, decorator: st.Decorator) -> Tolerance:
        values: dict[str, float | None] = {"atol": None, "rtol": None}
        for keyword in decorator.keywords:
            number = number_literal(keyword.value)
            if keyword.name not in values or number is None:
                self.sink.error(keyword.span, "@tolerance takes atol=NUMBER and rtol=NUMBER")
                continue
            values[keyword.name] = number
        if decorator.args:
            self.sink.error(decorator.args[0].span, "@tolerance takes atol=NUMBER and rtol=NUMBER")
        return Tolerance(values["atol"], values["rtol"])


def _is_operation(template: Template) -> bool:
    if isinstance(template, AltTemplate):
        return all(_is_operation(o) for o in template.options)
    return isinstance(template, OpTemplate)


def _return_span(statements: tuple[st.Statement, ...]) -> Span | None:
    for statement in statements:
        if isinstance(statement, st.Return):
            return statement.span
    return None
