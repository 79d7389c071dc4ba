"""fxrules: declarative pattern-rewrite rules for PyTorch FX graphs.

Pipeline: ``grammar/fxr.lark`` -> :mod:`fxrules.parser` (syntax tree) ->
:mod:`fxrules.resolve` (rule IR, :mod:`fxrules.ir`) -> :mod:`fxrules.matcher`
-> :mod:`fxrules.rewriter` -> :mod:`fxrules.report`, driven by
:mod:`fxrules.engine`; :mod:`fxrules.loader` reads files and includes.
On top: :mod:`fxrules.verification` (soundness on generated inputs, with
:mod:`fxrules.testing` strategies and :mod:`fxrules.standalone` graphs), the
pytest plugin and :mod:`fxrules.cli`; :mod:`fxrules.pipelines` (a torch.compile
backend and an Inductor pass) and :mod:`fxrules.exported` (``ExportedProgram``
in and out) put ``apply`` into compile pipelines.
"""

from fxrules.convert import replace_pattern, rule_from_functions
from fxrules.diagnostics import (
    Diagnostic,
    FxrApplyError,
    FxrConvergenceError,
    FxrError,
    FxrLoadError,
    FxrLoopWarning,
    FxrSyntaxError,
    FxrUsageError,
    Span,
)
from fxrules.engine import apply, apply_program
from fxrules.exported import RewrittenProgram
from fxrules.formatting import format_text
from fxrules.ir import Rule, RuleSet
from fxrules.loader import load, parse
from fxrules.pipelines import backend, inductor_pass
from fxrules.report import Report
from fxrules.verification import VerifyReport, verify

__all__ = [
    "Diagnostic",
    "FxrApplyError",
    "FxrConvergenceError",
    "FxrError",
    "FxrLoadError",
    "FxrLoopWarning",
    "FxrSyntaxError",
    "FxrUsageError",
    "Report",
    "RewrittenProgram",
    "Rule",
    "RuleSet",
    "Span",
    "VerifyReport",
    "apply",
    "apply_program",
    "backend",
    "format_text",
    "inductor_pass",
    "load",
    "parse",
    "replace_pattern",
    "rule_from_functions",
    "verify",
]
