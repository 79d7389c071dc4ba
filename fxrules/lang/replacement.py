"""A rule's ``replace:`` section to templates: what a replacement may build from what the pattern bound.

A bare name in a replacement must be bound already: assigned earlier in
the replacement, captured or assigned by the pattern, or a symbolic dim of
a ``given`` tensor type; otherwise it is an error with a suggestion.
``@helper(...)`` calls are allowed here only; ``_``, ``...`` and ``A | B``
only match, so a replacement cannot build them.
"""

from __future__ import annotations

import sys
from typing import Any

from fxrules.diagnostics import Span, did_you_mean
from fxrules.lang import syntax_tree as st
from fxrules.lang.binding import SectionResolver, misspelt_constant, partly_bound_error
from fxrules.lang.ir import Capture, HelperTemplate, OpKind, Template


class ReplacementResolver(SectionResolver):
    """Resolves a replacement against the bindings its pattern left."""

    section = "replace"

    def bound_name(self, expr: st.Name) -> Template:
        name = expr.id
        if name in self.assigned:
            return self.assigned[name]
        bindings = self.bindings
        if name in bindings.partly_bound:
            return self.error(expr.span, *partly_bound_error(name))
        if name in bindings.interior or name in bindings.used_captures or name in bindings.dim_symbols():
            return Capture(name, expr.span)
        bound = [*self.assigned, *bindings.interior, *bindings.used_captures, *bindings.dim_symbols()]
        hint = f"or, for the module '{name}', pass allow=['{name}']" if name in sys.modules else None
        constant = misspelt_constant(name)
        suggestion = f"did you mean {constant}?" if constant else did_you_mean(name, bound)
        return self.error(expr.span, f"'{name}' is not bound by the pattern",
                          " ".join(filter(None, [suggestion, hint])) or None)

    def underscore(self, expr: st.Name) -> Template:
        return self.error(expr.span, "'_' matches anything in a pattern; a replacement cannot build it")

    def partial_operation(self, kind: OpKind, target: Any, args: list[st.Expr], keywords: tuple[st.Keyword, ...],
                          span: Span, binds: str | None, ellipsis: st.EllipsisExpr) -> Template:
        return self.error(ellipsis.span, "'...' may only appear in a pattern")

    def unsigned_call(self, kind: OpKind, target: Any) -> None:
        """Nothing to note: a replacement builds the call as written and compares nothing."""

    def unnamed_value(self, statement: st.Assign) -> None:
        """Any value may be named in a replacement: the name is only shorthand for it."""

    def t_Alternatives(self, expr: st.Alternatives) -> Template:  # noqa: N802 - dispatched by class name
        return self.error(expr.span, "alternatives 'A | B' may only appear in a pattern")

    def t_HelperCall(self, expr: st.HelperCall) -> Template:  # noqa: N802
        args = tuple(self.template(a) for a in expr.args)
        kwargs = tuple((k.name, self.template(k.value)) for k in expr.keywords)
        return HelperTemplate(expr.name, args, kwargs, expr.span)
