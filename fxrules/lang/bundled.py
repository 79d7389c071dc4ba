"""Finds the data files shipped with fxrules: the grammar (and its parser's tables) and the bundled rulesets.

In a wheel they are the subpackages ``fxrules.grammar`` and
``fxrules.rulesets`` (``pyproject.toml`` maps the top-level folders there);
in a source checkout or an editable install they are those top-level folders.
"""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

_CHECKOUT = Path(__file__).resolve().parents[2]


@functools.cache
def _folder(name: str) -> Traversable:
    try:
        return resources.files(f"fxrules.{name}")
    except ModuleNotFoundError:
        return _CHECKOUT / name


def grammar_text() -> str:
    return _folder("grammar").joinpath("fxr.lark").read_text(encoding="utf-8")


#: The parser's tables built from the grammar (:mod:`fxrules.lang.tables`).
GRAMMAR_TABLES = "fxr.lark.json"


def grammar_tables_text() -> str:
    return _folder("grammar").joinpath(GRAMMAR_TABLES).read_text(encoding="utf-8")


def grammar_tables_path() -> Path:
    """Where ``python -m fxrules.lang.tables`` writes the tables (the grammar folder, on disk)."""
    return Path(str(_folder("grammar").joinpath(GRAMMAR_TABLES)))


def ruleset_names() -> list[str]:
    """The bundled rulesets, e.g. ``["algebra.fxr", "fusions.fxr"]`` (the prelude is not one)."""
    return sorted(
        entry.name for entry in _folder("rulesets").iterdir()
        if entry.name.endswith(".fxr") and entry.name != PRELUDE
    )


def ruleset(name: str) -> Traversable | None:
    """A bundled ``.fxr`` file by name, or None.

    Only a plain file name names a bundled ruleset: ``../x.fxr`` or ``/tmp/x.fxr`` would otherwise reach any
    file on disk through the rulesets folder (``include`` falls back to this lookup).
    """
    if not name or name != PurePosixPath(name).name or "\\" in name or name in {".", ".."}:
        return None
    entry = _folder("rulesets").joinpath(name)
    return entry if entry.is_file() else None


#: The families every rule file sees without a ``use`` or ``include``.
PRELUDE = "prelude.fxr"
