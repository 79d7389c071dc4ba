"""The language: ``.fxr`` text to checked, immutable rule IR.

``parser`` (Lark grammar to syntax tree) -> ``resolve`` (names against the
allow-list of ``targets``, calls bound by ``signatures``, ``guards`` and
``families`` checked) -> ``ir`` (what every later layer executes);
``loader`` drives it for files, includes and the prelude.  Nothing here
looks at a graph or runs a rule.
"""

import importlib.util
import sys
import types
from typing import Any


class _RegexOnDemand(types.ModuleType):
    """What Lark's modules get for ``regex``: the real package, imported on their first use of it."""

    def __getattr__(self, name: str) -> Any:
        import regex  # type: ignore[import-untyped]

        return getattr(regex, name)


def _import_lark() -> None:
    """Import Lark without executing the optional ``regex`` package, unless something imported either already.

    Lark imports ``regex`` whenever it is installed (it comes with ``transformers``), which costs about 90 ms,
    a sixth of loading a 500-rule file; it uses it only for grammars with Unicode categories (``\\p{L}``) or
    ``Lark(..., regex=True)``, and ours has neither.  So ``import regex`` fails while Lark's modules run (a
    ``None`` entry in ``sys.modules``, removed at once), and where it is installed Lark's two modules that use
    it are then given a stand-in that imports it on first use: a user's ``Lark(..., regex=True)`` works as
    without fxrules.  (A thread importing ``regex`` during those milliseconds would get ``ImportError``.)"""
    if "lark" in sys.modules or "regex" in sys.modules:
        return
    sys.modules["regex"] = None  # type: ignore[assignment]
    try:
        import lark.lark
        import lark.utils
    finally:
        del sys.modules["regex"]
    if importlib.util.find_spec("regex") is not None:
        for module in (lark.lark, lark.utils):
            if hasattr(module, "_has_regex"):
                module.regex = _RegexOnDemand("regex")  # type: ignore[attr-defined]
                module._has_regex = True  # type: ignore[attr-defined]


_import_lark()
