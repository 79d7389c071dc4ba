"""Loading rule files for use: the language's loader, then the load-time loop check.

The loop check (:mod:`fxrules.engine.loops`) builds each replacement as a
graph and matches rules against it, so it needs the matcher and the
rewriter, which the language layer must not import.  ``fxrules.load`` and
``fxrules.parse`` are the functions here; the loader's cache hands back the
same checked rule set for unchanged files, so each warning is issued once.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import attrs

from fxrules.diagnostics import FxrLoopWarning
from fxrules.engine.loops import loop_warnings
from fxrules.lang import loader
from fxrules.lang.ir import RuleSet
from fxrules.memo import per_object


def load(path_or_name: str | Path, allow: Iterable[str] = ()) -> RuleSet:
    """Load a rule file by path, or a bundled ruleset by name (``"algebra.fxr"``)."""
    return _loop_checked(loader.load(path_or_name, allow))


def parse(text: str, filename: str = "<string>", allow: Iterable[str] = ()) -> RuleSet:
    """Parse and resolve ``.fxr`` text (its includes are looked up among the bundled rulesets)."""
    return _loop_checked(loader.parse(text, filename, allow))


@per_object
def _loop_checked(ruleset: RuleSet) -> RuleSet:
    checked = attrs.evolve(ruleset, warnings=ruleset.warnings + loop_warnings(ruleset))
    for warning in checked.warnings:
        warnings.warn(warning.render(), FxrLoopWarning, stacklevel=5)  # the caller of load/parse
    return checked
