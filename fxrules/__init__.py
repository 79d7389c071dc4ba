"""fxrules: declarative pattern-rewrite rules for PyTorch FX graphs.

The package is layered as the pipeline runs (``docs/internals.md``):
:mod:`fxrules.lang` (``.fxr`` text to rule IR) -> :mod:`fxrules.match` ->
:mod:`fxrules.rewrite` -> :mod:`fxrules.engine` (``apply``, reports, loading
with the loop check) -> :mod:`fxrules.verification` and
:mod:`fxrules.integrations` (``torch.compile``, pytest) -> :mod:`fxrules.cli`.

The names below are imported on first use: ``import fxrules`` costs no more
than the diagnostics, so a CLI call or a user's import does not pay for
Dynamo, Inductor or hypothesis until it uses them.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

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

# torch warns when it is imported without NumPy (a fresh venv with torch alone); fxrules needs no NumPy, and
# the first import of torch may be fxrules' own (the CLI's, or a lazy name below), so that warning is not shown
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

if TYPE_CHECKING:
    from fxrules.engine.driver import apply, apply_program
    from fxrules.engine.exported import RewrittenProgram
    from fxrules.engine.loading import load, parse
    from fxrules.engine.report import Report
    from fxrules.integrations.convert import replace_pattern, rule_from_functions
    from fxrules.integrations.pipelines import backend, inductor_pass
    from fxrules.lang.formatting import format_text
    from fxrules.lang.ir import Rule, RuleSet
    from fxrules.verification.prove import ProveReport, prove
    from fxrules.verification.soundness import VerifyReport, verify

#: Each public name and the module that defines it.
_LAZY = {
    "apply": "fxrules.engine.driver",
    "apply_program": "fxrules.engine.driver",
    "RewrittenProgram": "fxrules.engine.exported",
    "load": "fxrules.engine.loading",
    "parse": "fxrules.engine.loading",
    "Report": "fxrules.engine.report",
    "backend": "fxrules.integrations.pipelines",
    "inductor_pass": "fxrules.integrations.pipelines",
    "Rule": "fxrules.lang.ir",
    "RuleSet": "fxrules.lang.ir",
    "VerifyReport": "fxrules.verification.soundness",
    "verify": "fxrules.verification.soundness",
    "ProveReport": "fxrules.verification.prove",
    "prove": "fxrules.verification.prove",
    "format_text": "fxrules.lang.formatting",
    "replace_pattern": "fxrules.integrations.convert",
    "rule_from_functions": "fxrules.integrations.convert",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fxrules' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute read
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Diagnostic",
    "FxrApplyError",
    "FxrConvergenceError",
    "FxrError",
    "FxrLoadError",
    "FxrLoopWarning",
    "FxrSyntaxError",
    "FxrUsageError",
    "ProveReport",
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
    "prove",
    "replace_pattern",
    "rule_from_functions",
    "verify",
]
