"""The language: ``.fxr`` text to checked, immutable rule IR.

``parser`` (Lark grammar to syntax tree) -> ``resolve`` (names against the
allow-list of ``targets``, calls bound by ``signatures``, ``guards`` and
``families`` checked) -> ``ir`` (what every later layer executes);
``loader`` drives it for files, includes and the prelude.  Nothing here
looks at a graph or runs a rule.
"""

import sys


def _import_lark() -> None:
    """Import Lark without the optional ``regex`` package, unless something imported it already.

    Lark imports ``regex`` whenever it is installed (it comes with ``transformers``), which costs about 90 ms,
    a sixth of loading a 500-rule file; it uses it only for grammars with Unicode categories (``\\p{L}``) or
    ``Lark(..., regex=True)``, and ours has neither.  A ``None`` entry in ``sys.modules`` makes ``import regex``
    raise ``ImportError`` while Lark's modules run, which Lark takes as "not installed"; the entry is removed
    at once, so a later ``import regex`` imports it as usual."""
    if "lark" in sys.modules or "regex" in sys.modules:
        return
    sys.modules["regex"] = None  # type: ignore[assignment]
    try:
        import lark  # noqa: F401 - imported here for the modules of this package
    finally:
        del sys.modules["regex"]


_import_lark()
