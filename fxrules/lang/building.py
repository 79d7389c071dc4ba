"""The syntax tree built during the parse: Lark's reductions call :class:`~fxrules.lang.syntax_tree.SyntaxBuilder`.

Lark's own way to give nodes positions (``propagate_positions``) walks the children of every
reduction, the single-child steps of the expression ladder included, and a second pass then turns its
tree into syntax nodes: together they were most of the time a large file took to parse.  Here each
reduction makes its syntax node at once, with its span worked out from the values it reduced, by the
rule Lark uses, so every span is what Lark's would be:

* a node spans from the start of its first child to the end of its last, tokens the grammar drops
  (``(``, ``return``, ``"None"``) included and layout tokens (new lines, indentation) left out;
* a rule that passes its one child through (``?atom: "(" test ")"``) keeps the child's own span, but a
  parent measures it by all it read: ``(a).b`` starts at ``(``, its ``a`` at ``a``.

Each value on the parser's stack is a :class:`Built` (the rule's name, what the builder returned, the
extent its parent measures) or a token.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

from lark import Lark, Token, Tree
from lark.grammar import Rule

from fxrules.diagnostics import Span
from fxrules.lang.syntax_tree import File, SyntaxBuilder

_LAYOUT = frozenset({"_NL", "_INDENT", "_DEDENT"})


class Built:
    """A reduced rule on the parser's stack: its name (as Lark's tree would be called), the syntax
    builder's value, and the extent a parent measures it by."""

    __slots__ = ("data", "span", "value")

    def __init__(self, data: str, value: Any, span: Span) -> None:
        self.data = data
        self.value = value
        self.span = span


class LiteralError(Exception):
    """A literal Python cannot hold (an integer of too many digits): where it is, and why."""

    def __init__(self, span: Span, reason: Exception) -> None:
        super().__init__(str(reason))
        self.span = span


class _Parse:
    """What the callbacks of one parser share: the builder of the parse under way and the span of the
    reduction under way.  One parse at a time per parser (:meth:`SyntaxParser.parse` holds the lock)."""

    def __init__(self) -> None:
        self.builder = SyntaxBuilder("<string>")
        self.span: Span | None = None


def _start(values: Iterable[Any]) -> tuple[int, int] | None:
    for value in values:
        if value.__class__ is Built:
            return value.span.line, value.span.column
        if isinstance(value, Token):
            if value.type not in _LAYOUT:
                return value.line or 0, value.column or 0
        elif isinstance(value, Tree):  # a rule Lark inlines into its parent (``_add_op``, repetitions)
            found = _start(value.children)
            if found is not None:
                return found
    return None


def _end(values: Iterable[Any]) -> tuple[int | None, int | None] | None:
    for value in values:
        if value.__class__ is Built:
            return value.span.end_line, value.span.end_column
        if isinstance(value, Token):
            if value.type not in _LAYOUT:
                return value.end_line, value.end_column
        elif isinstance(value, Tree):
            found = _end(reversed(value.children))
            if found is not None:
                return found
    return None


def _extent(filename: str, children: list[Any]) -> Span | None:
    """From the start of the first positioned child to the end of the last (None if there is none)."""
    if len(children) == 1 and children[0].__class__ is Built:
        return children[0].span  # the common case: a step of the expression ladder
    start, end = _start(children), _end(reversed(children))
    if start is None or end is None:
        return None
    return Span(filename, start[0], start[1], end[0], end[1])


def _maker(name: str, parse: _Parse) -> Callable[[list[Any]], Built]:
    """The callback Lark calls with the kept children of a reduction of ``name``."""
    method = getattr(SyntaxBuilder, name)

    def make(children: list[Any]) -> Built:
        values = [child.value if child.__class__ is Built else child for child in children]
        span = parse.span
        try:
            return Built(name, method(parse.builder, span, *values), span)  # type: ignore[arg-type]
        except ValueError as error:  # int() of more digits than Python converts
            raise LiteralError(span or Span(parse.builder.filename, 1, 1), error) from None

    return make


def _builder_callbacks(parse: _Parse) -> SimpleNamespace:
    """One callback per rule the syntax builder makes a node for, as Lark's ``transformer=`` wants them."""
    names = [name for name, value in vars(SyntaxBuilder).items() if not name.startswith("_") and callable(value)]
    return SimpleNamespace(**{name: _maker(name, parse) for name in names})


def _measured(reduce: Callable[[list[Any]], Any], parse: _Parse) -> Callable[[list[Any]], Any]:
    """Lark's callback of a rule (filtering its children, passing one child through, calling the builder),
    given the span of every child the rule read first."""

    def callback(children: list[Any]) -> Any:
        span = parse.span = _extent(parse.builder.filename, children)
        result = reduce(children)
        if result.__class__ is Built and result.span is not span and span is not None:
            return Built(result.data, result.value, span)  # a child passed through: measured by all read
        return result

    return callback


def _measure_every_reduction(parser: Lark, parse: _Parse) -> None:
    """Give each of ``parser``'s rule callbacks the span of what it reduced.

    Lark private: ``Lark._callbacks`` is the dict (rule -> callback) its LALR parser calls, the same
    object, so replacing its entries takes effect.  tests/lang/test_syntax_building.py fails if a Lark
    release stops calling them (every span would then be wrong).
    """
    callbacks: dict[Any, Callable[[list[Any]], Any]] = parser._callbacks
    for rule, reduce in list(callbacks.items()):
        if isinstance(rule, Rule) and not (rule.alias or rule.origin.name).startswith("_") and not _passes_on(rule):
            callbacks[rule] = _measured(reduce, parse)


def _passes_on(rule: Rule) -> bool:
    """Whether ``rule`` is a step of a ladder (``?test: or_test``): it returns its one child as it is, span
    and all, so Lark's callback is kept (half of all reductions are such steps)."""
    return rule.options.expand1 and not rule.alias and len(rule.expansion) == 1 and not rule.expansion[0].is_term


class SyntaxParser:
    """A Lark parser whose result is the syntax tree (:class:`~fxrules.lang.syntax_tree.File`)."""

    def __init__(self, make: Callable[..., Lark]) -> None:
        """``make(transformer=...)`` makes the Lark parser of the grammar (from its tables or from it)."""
        self._parse = _Parse()
        self.lark = make(transformer=_builder_callbacks(self._parse))
        _measure_every_reduction(self.lark, self._parse)
        self._lock = threading.RLock()

    def parse(self, text: str, filename: str) -> File:
        """The syntax tree of ``text``; Lark's errors, or :class:`LiteralError`, when it has none."""
        with self._lock:
            self._parse.builder = SyntaxBuilder(filename)
            result = self.lark.parse(text)
        assert isinstance(result, Built) and isinstance(result.value, File), result
        return result.value
