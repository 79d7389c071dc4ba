"""Loading rule files for use: the language's loader, then the load-time loop check.

The loop check (:mod:`fxrules.engine.loops`) builds each replacement as a
graph and matches rules against it, so it needs the matcher and the
rewriter, which the language layer must not import.  ``fxrules.load`` and
``fxrules.parse`` are the functions here; the loader's cache hands back the
same checked rule set for unchanged files, so each warning is issued once.

The garbage collector is paused while a file loads: loading allocates hundreds of
thousands of small objects (tokens, tree nodes, IR) and frees few, so each automatic
collection would scan the whole heap, torch's objects included, for almost nothing
(a quarter of a 500-rule file's load time).  It resumes as it was, error or not
(:func:`collector_paused`).
The language layer, the matcher and the rewriter are imported on the first load, inside
that pause too: importing them makes thousands of classes and functions, and with the
collector running that cost as much again.

Each loaded rule gets a digest of its name and its files' text, so a set
made of loaded rules (``RuleSet.select``, or one built by hand) has a
content digest too, which ``inductor_pass`` keys Inductor's cache on.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from fxrules.diagnostics import FxrLoopWarning
from fxrules.memo import per_object

if TYPE_CHECKING:
    from fxrules.lang.ir import RuleSet


def load(path_or_name: str | Path, allow: Iterable[str] = ()) -> RuleSet:
    """Load a rule file by path, or a bundled ruleset by name (``"algebra.fxr"``)."""
    with collector_paused():
        from fxrules.lang import loader  # with the collector paused (see the module docstring)

        return _loop_checked(loader.load(path_or_name, allow))


def parse(text: str, filename: str = "<string>", allow: Iterable[str] = ()) -> RuleSet:
    """Parse and resolve ``.fxr`` text (its includes are looked up among the bundled rulesets)."""
    with collector_paused():
        from fxrules.lang import loader  # with the collector paused (see the module docstring)

        return _loop_checked(loader.parse(text, filename, allow))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic garbage collection inside (see the module docstring); then as it was before.

    Nothing is moved between generations afterwards: ``gc.freeze(); gc.unfreeze()`` would put every object of
    the program, not only the load's, in the oldest generation, where the automatic collections stop freeing a
    program's garbage cycles (a server loading rules in a loop would keep them all)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@per_object
def _loop_checked(ruleset: RuleSet) -> RuleSet:
    from fxrules.engine.loops import loop_warnings  # with the collector paused, as the callers run it

    rules = tuple(attrs.evolve(rule, digest=_rule_digest(ruleset.digest, rule.name)) for rule in ruleset)
    checked = attrs.evolve(ruleset, rules=rules, warnings=ruleset.warnings + loop_warnings(ruleset))
    for warning in checked.warnings:
        warnings.warn(warning.render(), FxrLoopWarning, stacklevel=4)  # the caller of load/parse (past the memo)
    return checked


def _rule_digest(files_digest: str, name: str) -> str:
    return hashlib.sha256(f"{files_digest}:{name}".encode()).hexdigest()
