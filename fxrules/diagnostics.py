"""Source spans and the one exception family every fxrules error belongs to.

A diagnostic prints like a compiler's: ``file:line:col: message``, the source
line, a caret under the spot, and an optional hint.  Errors found in one file
are collected and raised together as one :class:`FxrLoadError`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

import attrs


@attrs.frozen
class Span:
    """Where something stands in a rule file (1-based lines and columns)."""

    file: str
    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@attrs.frozen
class Diagnostic:
    """One problem at one place, with the source line to show it in."""

    span: Span
    message: str
    source_line: str | None = None
    hint: str | None = None
    severity: str = "error"  # or "warning"

    def render(self) -> str:
        lines = [f"{self.span}: {self.severity}: {self.message}"]
        if self.source_line is not None:
            lines.append(f"    {self.source_line}")
            lines.append("    " + _caret_indent(self.source_line, self.span.column) + "^")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


def _caret_indent(source_line: str, column: int) -> str:
    """Blanks that bring the caret under ``column``: tabs of the line are kept, so a terminal expands both alike."""
    before = source_line[: max(column - 1, 0)]
    return "".join(c if c == "\t" else " " for c in before) + " " * max(column - 1 - len(before), 0)


class FxrError(Exception):
    """Base class of every error fxrules raises on purpose."""


class FxrLoadError(FxrError):
    """A rule file could not be loaded; carries every diagnostic found in it."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))

    @property
    def first(self) -> Diagnostic:
        return self.diagnostics[0]


class FxrSyntaxError(FxrLoadError):
    """The text is not well-formed ``.fxr``."""


class FxrApplyError(FxrError):
    """Applying rules to a graph failed; the graph was left as it was."""


class FxrConvergenceError(FxrApplyError):
    """Rules kept firing for ``max_passes`` passes; the graph was left as it was.

    ``report`` is the :class:`fxrules.Report` of the passes that ran before they were undone (its
    ``stop_reason`` is ``pass limit``): which rules fired where, pass after pass.
    """

    report: Any = None  # an fxrules.Report, set by apply (this module may not import the engine)


class FxrUsageError(FxrError):
    """An fxrules function was called with arguments it cannot work with."""


class FxrLoopWarning(UserWarning):
    """Rules in a loaded file may fire forever (they match their own or each other's replacements)."""


class DiagnosticSink:
    """Collects the diagnostics of one source text, rendering each with its line."""

    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        # Lines as Lark counts them: "\n" only (str.splitlines would also break at form feeds and the like).
        self._lines = text.replace("\r\n", "\n").split("\n")
        self.diagnostics: list[Diagnostic] = []

    def span(self, line: int, column: int, end_line: int | None = None, end_column: int | None = None) -> Span:
        return Span(self.filename, line, column, end_line, end_column)

    @property
    def line_count(self) -> int:
        return len(self._lines)

    def source_line(self, line: int) -> str | None:
        if 1 <= line <= len(self._lines):
            return self._lines[line - 1]
        return None

    def error(self, span: Span, message: str, hint: str | None = None) -> None:
        line = self.source_line(span.line) if span.file == self.filename else None
        self.diagnostics.append(Diagnostic(span, message, line, hint))

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics.extend(diagnostics)

    def raise_if_any(self, error_class: type[FxrLoadError] = FxrLoadError) -> None:
        if self.diagnostics:
            ordered = sorted(self.diagnostics, key=lambda d: (d.span.file, d.span.line, d.span.column))
            raise error_class(ordered)


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A hint naming the closest candidate, if one is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None
