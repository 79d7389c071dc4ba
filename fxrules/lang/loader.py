"""Loading rule files: ``parse`` and ``load``, includes, the prelude, and the content cache.

``load`` resolves a path, or the name of a bundled ruleset, parses it, follows
its ``include``s (relative to the including file, then among the bundled
rulesets; ``.fxr`` files only; cycles are errors naming the cycle), and
returns a :class:`RuleSet`.  Each file is read, parsed and resolved once per
load however often it is included (a second include of it adds nothing new:
its rules and declarations are in already).  Results are cached by the
content of every file involved, so calling ``apply(gm, "fusions.fxr")`` in a
loop parses once.

Rule files are UTF-8.  Bytes that are not, a lone surrogate in text given to
``parse``, and an included file that cannot be read (a name too long, no
permission) are load errors at the offending byte or at the include's quoted
path, never raw ``UnicodeError`` or ``OSError``.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from fxrules.diagnostics import (
    Diagnostic,
    DiagnosticSink,
    FxrLoadError,
    FxrSyntaxError,
    FxrUsageError,
    Span,
)
from fxrules.lang import bundled
from fxrules.lang import syntax_tree as st
from fxrules.lang.ir import Family, Rule, RuleSet
from fxrules.lang.parser import parse_partial
from fxrules.lang.resolve import RuleResolver, Scope, ScopeResolver
from fxrules.lang.targets import Namespace, allow_entries


@attrs.frozen
class SourceFile:
    """One rule file's text and where it came from (a path on disk, or a bundled name)."""

    name: str  # what diagnostics print
    text: str
    directory: Path | None  # where its own includes are looked up first

    @property
    def identity(self) -> str:
        return str(self.directory / Path(self.name).name) if self.directory else self.name

    def current_text(self) -> str | None:
        """The file's text as it is now (None if it is gone, or unreadable: loading it again says why)."""
        if self.directory is None:
            fresh = _read_bundled(Path(self.name).name)
            return fresh.text if fresh else None
        path = self.directory / Path(self.name).name
        try:
            return _read_path(path).text
        except (OSError, ValueError, FxrLoadError):
            return None


def _read_bundled(name: str) -> SourceFile | None:
    try:
        entry = bundled.ruleset(name)
    except (OSError, ValueError):  # a name no file can have (too long, a NUL): not a bundled ruleset
        return None
    if entry is None:
        return None
    return SourceFile(f"rulesets/{name}", entry.read_text(encoding="utf-8"), None)


def _read_path(path: Path) -> SourceFile:
    """The file as UTF-8 text; FxrLoadError at its first byte that is not UTF-8, OSError if it cannot be read."""
    data = _regular_file_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FxrLoadError([_undecodable(str(path), data, error)]) from None
    # an editor's byte-order mark is no text (Python's own source files may start with one), and its
    # columns are counted without it
    return SourceFile(str(path), text.removeprefix("\ufeff"), path.resolve().parent)


def _regular_file_bytes(path: Path) -> bytes:
    """The bytes of a regular file.  A named pipe, device or socket may never end (a FIFO called x.fxr waits
    for a writer): it is opened without blocking and refused, checked on the open descriptor itself."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(descriptor, True)
        return file.read()


def _undecodable(name: str, data: bytes, error: UnicodeDecodeError) -> Diagnostic:
    """Where the first byte that is not UTF-8 stands (its line, and its column in characters)."""
    start = data.rfind(b"\n", 0, error.start) + 1
    end = data.find(b"\n", error.start)
    line = data[start:end if end >= 0 else len(data)].decode("utf-8", errors="replace").rstrip("\r")
    column = len(data[start:error.start].decode("utf-8", errors="replace")) + 1
    span = Span(name, data.count(b"\n", 0, error.start) + 1, column)
    return Diagnostic(span, f"byte 0x{data[error.start]:02x} is not UTF-8 ({error.reason}): rule files must be "
                            "UTF-8", line, "save the file as UTF-8")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_characters(source: SourceFile) -> None:
    """Text given to ``parse`` may hold lone surrogates, which are no characters (no file can hold them)."""
    if source.text.isascii():  # a surrogate is not ASCII; most rule files are, and this is a C-speed test
        return
    found = _SURROGATE.search(source.text)
    if found is None:
        return
    start = source.text.rfind("\n", 0, found.start()) + 1
    end = source.text.find("\n", found.start())
    line = _SURROGATE.sub("\ufffd", source.text[start:end if end >= 0 else len(source.text)])
    span = Span(source.name, source.text.count("\n", 0, found.start()) + 1, found.start() - start + 1)
    raise FxrLoadError([Diagnostic(span, f"lone surrogate U+{ord(found.group()):04X} is not a character: rule "
                                         "text must be valid Unicode", line)])


@functools.cache
def _prelude_scope() -> Scope:
    """The families every file starts with, from the bundled ``prelude.fxr``."""
    source = _read_bundled(bundled.PRELUDE)
    assert source is not None, "the bundled prelude.fxr is missing"
    scope = Scope(Namespace.create(), {}, set())
    _Loading(()).resolve(source, scope)
    return scope


#: How deep includes may nest: each level is a few Python frames, and Python's recursion limit is not a
#: message a rule author can act on.
MAX_INCLUDE_DEPTH = 64


@attrs.define
class _Loading:
    """One ``load``: the include chain (for cycles) and the files read (for the cache)."""

    allow: tuple[str, ...]
    chain: list[str] = attrs.Factory(list)
    files: dict[str, SourceFile] = attrs.Factory(dict)
    resolved: dict[str, list[Rule]] = attrs.Factory(dict)  # by identity: each file is resolved once per load

    def resolve(self, source: SourceFile, scope: Scope) -> list[Rule]:
        """Resolve one file's items into rules, updating ``scope`` with its declarations."""
        self.files[source.identity] = source
        self.chain.append(source.identity)
        self.resolved[source.identity] = []  # a file whose errors were reported once adds nothing the next time
        try:
            _check_characters(source)
            syntax, syntax_errors = parse_partial(source.text, source.name)
            sink = DiagnosticSink(source.text, source.name)
            sink.extend(syntax_errors)  # and go on: the well-formed items may have errors of their own
            rules = self._items(syntax, source, scope, sink)
            rules = _without_overridden(rules, source, sink)
            sink.raise_if_any(FxrSyntaxError if syntax_errors else FxrLoadError)
            self.resolved[source.identity] = rules
            return rules
        finally:
            self.chain.pop()

    def _items(self, syntax: st.File, source: SourceFile, scope: Scope, sink: DiagnosticSink) -> list[Rule]:
        rules: list[Rule] = []
        items = ScopeResolver(sink, scope)
        declared: dict[str, Span] = {}
        for item in syntax.items:
            if isinstance(item, st.RuleDecl):
                if item.name in declared:  # whether or not either resolves: names key the report
                    sink.error(item.name_span,
                               f"duplicate rule name '{item.name}' (first defined at {declared[item.name]})",
                               "rule names key the report: give each rule its own")
                    continue
                declared[item.name] = item.name_span
            if isinstance(item, st.Use):
                items.use(item)
            elif isinstance(item, st.FamilyDecl):
                items.family(item)
            elif isinstance(item, st.CommutativeDecl):
                items.commutative(item)
            elif isinstance(item, st.Include):
                rules += self._include(item, source, scope, sink)
            else:
                try:
                    rule = RuleResolver(sink, scope, item).resolve()
                except RecursionError:  # Python's own limit: the rule is reported, not the interpreter
                    sink.error(item.name_span, f"rule {item.name} nests expressions too deeply to resolve")
                    continue
                if rule is not None:
                    rules.append(rule)
        return rules

    def _include(self, item: st.Include, source: SourceFile, scope: Scope, sink: DiagnosticSink) -> list[Rule]:
        if not item.path.endswith(".fxr"):
            sink.error(item.span, f"include must name a .fxr file, not '{item.path}'")
            return []
        try:
            included = self._find_include(item.path, source)
        except FxrLoadError as error:  # not UTF-8: shown where the bad byte is
            sink.extend(error.diagnostics)
            return []
        except (OSError, ValueError) as error:
            sink.error(item.path_span, f"cannot read included file '{_shortened(item.path)}': {_reason(error)}")
            return []
        if included is None:
            sink.error(item.span, f"included file '{_shortened(item.path)}' not found",
                       f"looked next to {source.name} and among the bundled rulesets: {bundled.ruleset_names()}")
            return []
        if len(self.chain) >= MAX_INCLUDE_DEPTH:
            sink.error(item.span, f"includes are nested more than {MAX_INCLUDE_DEPTH} files deep")
            return []
        if included.identity in self.chain:
            cycle = [*self.chain[self.chain.index(included.identity):], included.identity]
            sink.error(item.span, "include cycle: " + " -> ".join(Path(c).name for c in cycle))
            return []
        if included.identity in self.resolved:  # its rules and declarations are in already
            return self.resolved[included.identity]
        try:
            return self.resolve(included, scope)
        except FxrLoadError as error:
            sink.extend(error.diagnostics)
            return []

    def _find_include(self, path: str, source: SourceFile) -> SourceFile | None:
        """The included file, read once per load; OSError or ValueError when it exists but cannot be read."""
        if source.directory is not None:
            candidate = source.directory / path
            # A symlink named x.fxr must lead to a .fxr file too: its text would be shown in diagnostics.
            if candidate.exists() and candidate.resolve().suffix == ".fxr":  # a directory fails when read
                read = self.files.get(str(candidate.resolve().parent / candidate.name))
                return read or _read_path(candidate)
        bundled_name = f"rulesets/{path}"
        return self.files.get(bundled_name) or _read_bundled(path)


def _without_overridden(rules: list[Rule], source: SourceFile, sink: DiagnosticSink) -> list[Rule]:
    """One rule per name: a file's own rule replaces an included one of that name, a file included twice
    counts once, and any other repeated name is an error."""
    own_names = {rule.name for rule in rules if rule.file == source.name}
    kept: dict[str, Rule] = {}
    for rule in rules:
        if rule.name in own_names and rule.file != source.name:
            continue
        first = kept.get(rule.name)
        if first is None:
            kept[rule.name] = rule
        elif first.span != rule.span:
            sink.error(rule.span, f"duplicate rule name '{rule.name}' (first defined at {first.span})",
                       "rule names key the report: give each rule its own")
    return list(kept.values())


_cache: dict[tuple[str, tuple[str | _Identity, ...]], tuple[list[tuple[SourceFile, str]], RuleSet]] = {}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()  # parse() text may hold any str


def _reason(error: OSError | ValueError) -> str:
    return error.strerror if isinstance(error, OSError) and error.strerror else str(error)


def _shortened(name: str, limit: int = 80) -> str:
    """A name as a message shows it: control characters escaped, an over-long one cut in the middle."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
    return shown if len(shown) <= limit else f"{shown[:limit // 2]}...{shown[-limit // 2:]} ({len(name)} characters)"


def _load_source(source: SourceFile, allow: Iterable[str]) -> RuleSet:
    allowed = allow_entries(allow)
    key = (source.identity, tuple(entry if isinstance(entry, str) else _Identity(entry) for entry in allowed))
    cached = _cache.get(key)
    if cached is not None and _still_current(cached[0], source):
        return cached[1]
    loading = _Loading(allowed)
    base = _prelude_scope().copy()
    base.namespace = Namespace.create(allowed)
    rules = loading.resolve(source, base)
    digests = [(f, _digest(f.text)) for f in loading.files.values()]
    ruleset = RuleSet(tuple(rules), source.name, digest=_digest("\0".join(digest for _, digest in digests)))
    _cache[key] = (digests, ruleset)
    return ruleset


@attrs.frozen(eq=False)
class _Identity:
    """An ``allow=`` object in the load cache's key, by identity: a callable need not be hashable."""

    value: Any

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def _still_current(files: list[tuple[SourceFile, str]], source: SourceFile) -> bool:
    for file, digest in files:
        text = source.text if file.identity == source.identity else file.current_text()
        if text is None or _digest(text) != digest:
            return False
    return True


def parse(text: str, filename: str = "<string>", allow: Iterable[str] = ()) -> RuleSet:
    """Parse and resolve ``.fxr`` text (its includes are looked up among the bundled rulesets)."""
    return _load_source(SourceFile(filename, text, None), allow)


def load(path_or_name: str | Path, allow: Iterable[str] = ()) -> RuleSet:
    """Load a rule file by path, or a bundled ruleset by name (``"algebra.fxr"``)."""
    path = Path(path_or_name)
    try:
        read = _read_path(path) if path.exists() else None  # a directory fails when read
    except (OSError, ValueError) as error:  # a name too long, no permission, a NUL in the name
        raise FxrUsageError(f"cannot read rule file '{_shortened(str(path_or_name))}': {_reason(error)}") from None
    if read is not None:
        return _load_source(read, allow)
    source = _read_bundled(str(path_or_name))
    if source is None and path.parent.name == "rulesets":  # how reports and diagnostics name bundled files
        source = _read_bundled(path.name)
    if source is None:
        known = ", ".join(bundled.ruleset_names())
        raise FxrUsageError(f"no rule file '{path_or_name}': not a file, and not a bundled ruleset ({known})")
    return _load_source(source, allow)


def prelude_families() -> dict[str, Family]:
    """The families of the bundled prelude, by name (every rule file starts with them)."""
    return dict(_prelude_scope().families)
