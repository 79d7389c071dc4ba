"""The parser's LALR tables, built from ``grammar/fxr.lark`` once and shipped as JSON next to it.

Building the parser from the grammar costs 0.1-0.2 s in every process; reading the
tables back costs a few milliseconds.  The file ``grammar/fxr.lark.json`` is data
(JSON, never a pickle) and names the SHA-256 of the grammar text it was built from
and the Lark version that built it: when either differs (an edited grammar, another
Lark) the parser is built from the grammar as before, so stale tables are never used,
only slower.  ``python -m fxrules.lang.tables`` rewrites the file.  Lark numbers the
states in the order of sets, so two builds differ in text but not in what they parse: a
test checks that the shipped tables are stamped with the grammar's hash and parse
files, and report syntax errors, as the parser built from the grammar does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lark
from lark import Lark
from lark.grammar import Rule
from lark.lexer import TerminalDef

from fxrules.lang import bundled

#: The options given when the tables are read back: objects of this process, not data.
RUNTIME_OPTIONS = frozenset({"postlex", "propagate_positions", "transformer", "lexer_callbacks", "tree_class",
                             "_plugins", "regex", "debug", "use_bytes", "g_regex_flags"})

_INT_KEYS = "int_keys"  # JSON object keys are strings: the dicts whose keys were ints say so


def _stamp(grammar: str) -> dict[str, str]:
    return {"grammar_sha256": hashlib.sha256(grammar.encode()).hexdigest(), "lark": lark.__version__}


def tables_text(parser: Lark, grammar: str) -> str:
    """The JSON text of ``parser``'s tables (built from ``grammar``), stamped with the grammar's hash."""
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data["options"] = {name: value for name, value in data["options"].items() if name not in RUNTIME_OPTIONS}
    return json.dumps({**_stamp(grammar), "data": _encoded(data), "memo": _encoded(memo)}, sort_keys=True,
                      separators=(",", ":")) + "\n"


def load_parser(grammar: str, **runtime: Any) -> Lark | None:
    """The parser read from the shipped tables, or None when they are missing or were not built from
    ``grammar`` with this Lark."""
    try:
        shipped = json.loads(bundled.grammar_tables_text(), object_hook=_decoded)
    except (OSError, ValueError):
        return None
    if not isinstance(shipped, dict) or any(shipped.get(key) != value for key, value in _stamp(grammar).items()):
        return None
    # Lark's own reader of serialized tables (its standalone parsers use it too), given a dict: no pickle
    parser: Lark = Lark._load_from_dict(  # type: ignore[no-untyped-call]
        shipped["data"], shipped["memo"], **runtime)
    for terminal in parser.terminals:  # JSON has no sets: the terminals equal the built parser's again
        terminal.pattern.flags = frozenset(terminal.pattern.flags)
    return parser


def _encoded(value: Any) -> Any:
    if isinstance(value, dict):
        encoded = {str(key): _encoded(item) for key, item in value.items()}
        if value and all(isinstance(key, int) for key in value):
            return {_INT_KEYS: encoded}
        return encoded
    if isinstance(value, list | tuple):
        return [_encoded(item) for item in value]
    return value


def _decoded(value: dict[str, Any]) -> dict[Any, Any]:
    """A JSON object as :func:`_encoded` wrote it: a dict whose keys were ints has them again.  JSON's reader
    calls it on each object, innermost first, so the tables are decoded as they are read."""
    if len(value) == 1 and _INT_KEYS in value:
        return {int(key): item for key, item in value[_INT_KEYS].items()}
    return value


def write_tables(build: Callable[[str], Lark], path: Path) -> None:
    """Build the parser from the shipped grammar with ``build`` and write its tables to ``path``."""
    grammar = bundled.grammar_text()
    path.write_text(tables_text(build(grammar), grammar), encoding="utf-8")


if __name__ == "__main__":
    from fxrules.lang.parser import built_parser

    write_tables(built_parser, bundled.grammar_tables_path())
