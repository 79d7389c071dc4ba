"""A rule's ``pattern:`` section to templates: what a pattern may say and what its names bind.

Only a pattern binds names: a bare name is a capture (its ``given`` type
decides whether it matches a value, an attribute or is refused as a
module that must be called); ``_`` matches anything; ``...`` as the last
argument matches the remaining ones; ``A | B`` is a choice; ``name = ...``
must name an operation and cannot reuse a ``given`` capture.  A name
spelt one edit away from ``True``/``False``/``None`` is refused, since it
would be a capture that matches anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fxrules.diagnostics import DiagnosticSink, Span
from fxrules.lang import syntax_tree as st
from fxrules.lang.binding import Bindings, SectionResolver, misspelt_constant
from fxrules.lang.ir import (
    AltTemplate,
    AttrType,
    Capture,
    ModuleType,
    OpKind,
    OpTemplate,
    SeqTemplate,
    SliceTemplate,
    Template,
    Wildcard,
    describe_target,
)
from fxrules.lang.scope import Scope


class PatternResolver(SectionResolver):
    """Resolves a pattern, recording in the shared bindings the captures it uses and the names it assigns."""

    section = "pattern"

    def __init__(self, sink: DiagnosticSink, scope: Scope, bindings: Bindings) -> None:
        super().__init__(sink, scope, bindings)
        self.assigned = self.bindings.interior  # the pattern's names are the rule's interior nodes

    def bound_name(self, expr: st.Name) -> Template:
        name = expr.id
        if name in self.bindings.interior:
            return self.bindings.interior[name]
        if name in self.scope.families:
            return self.error(expr.span, f"'{name}' names a family, not a value")
        constant = misspelt_constant(name) if name not in self.types else None
        if constant is not None:  # `inplace=Ture` would silently be a capture that matches anything
            # Bound all the same: a replacement using it is not a second error.
            self.bindings.used_captures.add(name)
            return self.error(expr.span, f"'{name}' would be a capture matching anything; did you mean {constant}?",
                              f"declare '{name}' in given: if a capture is meant")
        self.bindings.used_captures.add(name)
        declared = self.types.get(name)
        if isinstance(declared, AttrType):
            return OpTemplate(OpKind.ATTR, None, (), (), expr.span, binds=name)
        if isinstance(declared, ModuleType):
            return self.error(expr.span, f"'{name}' is a module capture: call it, as in {name}(x)")
        return Capture(name, expr.span)

    def underscore(self, expr: st.Name) -> Template:
        return Wildcard(expr.span)

    def partial_operation(self, kind: OpKind, target: Any, args: list[st.Expr], keywords: tuple[st.Keyword, ...],
                          span: Span, binds: str | None, ellipsis: st.EllipsisExpr) -> Template:
        return self.bind_operation(kind, target, args, keywords, span, binds, rest=True)

    def unsigned_call(self, kind: OpKind, target: Any) -> None:
        self.bindings.notes.append(f"arguments of {describe_target(kind, target)} are compared as written "
                                   "(no signature)")

    def assignment_problem(self, name: str) -> str | None:
        if name not in self.assigned and name in self.types:
            return f"'{name}' is declared in given: as a capture and cannot be assigned"
        return super().assignment_problem(name)

    def unnamed_value(self, statement: st.Assign) -> None:
        self.error(statement.value.span, f"'{statement.name} = ...' in a pattern must name an operation")

    def t_Alternatives(self, expr: st.Alternatives) -> Template:  # noqa: N802 - dispatched by class name
        return AltTemplate(tuple(self.template(o) for o in expr.options), expr.span)

    def t_HelperCall(self, expr: st.HelperCall) -> Template:  # noqa: N802
        for argument in (*expr.args, *(k.value for k in expr.keywords)):
            self.template(argument)  # its captures still count as bound: one error, not two
        return self.error(expr.span, f"helper '@{expr.name}' may only be called in a replacement")


def always_bound(outputs: Iterable[Template], interior: Mapping[str, Template],
                 dims: Callable[[str], Iterable[str]]) -> set[str]:
    """The names every match of a pattern binds: the captures with the ``dims`` of their types, and the
    ``interior`` names of templates, outside any ``A | B`` or bound by each of its options (a name one option
    binds alone is unbound when another option matched)."""
    named: dict[int, set[str]] = {}
    for name, template in interior.items():
        named.setdefault(id(template), set()).add(name)
    known: dict[int, frozenset[str]] = {}  # by template: options may share a named operation

    def bound(template: Template) -> frozenset[str]:
        found = known.get(id(template))
        if found is not None:
            return found
        if isinstance(template, Capture):
            found = frozenset((template.name, *dims(template.name)))
        elif isinstance(template, AltTemplate):
            found = frozenset.intersection(*map(bound, template.options)) if template.options else frozenset()
        elif isinstance(template, OpTemplate):
            own = () if template.binds is None else (template.binds, *dims(template.binds))
            found = frozenset(own).union(*map(bound, template.operands()))
        elif isinstance(template, SeqTemplate):
            found = frozenset().union(*map(bound, template.items))
        elif isinstance(template, SliceTemplate):
            found = frozenset().union(*map(bound, (template.start, template.stop, template.step)))
        else:
            found = frozenset()
        found = found.union(named.get(id(template), ()))
        known[id(template)] = found
        return found

    return set().union(*map(bound, outputs))
