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
extent its parent measures) or a token.  A rule's callback here does, in one call, what Lark's chain of
callbacks did around the builder: it keeps the children Lark's tree builder would keep (:func:`_slots`),
passes on the one child of a ``?rule`` and calls the builder.  Where the grammar fixes which children
measure a rule and which are kept (most rules), that is worked out once per rule (:func:`_plain_reducer`).
A repetition Lark inlines extends its tree in place (:func:`_extender`); the other rules Lark inlines
(``_add_op``) and the ladder steps keep Lark's own callbacks.  The loop that calls them is
:mod:`fxrules.lang.lalr`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

import attrs
from lark import Lark, Token, Tree
from lark.grammar import Rule, Terminal

from fxrules.diagnostics import Span
from fxrules.lang.lalr import LalrLoop, Refused
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
    """What the callbacks of one parser share: the builder of the parse under way.  One parse at a time per
    parser (:meth:`SyntaxParser.parse` holds the lock)."""

    def __init__(self) -> None:
        self.builder = SyntaxBuilder("<string>")


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
        return children[0].span  # a rule of one rule, a step of the expression ladder's sort
    first, last = children[0] if children else None, children[-1] if children else None
    # the common cases first, each what _start and _end give: a reduced rule, or a token not of the layout
    if first.__class__ is Built:
        start: tuple[int, int] | None = first.span.line, first.span.column
    elif first.__class__ is Token and first.type not in _LAYOUT:
        start = first.line or 0, first.column or 0
    else:
        start = _start(children)
    if last.__class__ is Built:
        end: tuple[int | None, int | None] | None = last.span.end_line, last.span.end_column
    elif last.__class__ is Token and last.type not in _LAYOUT:
        end = last.end_line, last.end_column
    else:
        end = _end(reversed(children))
    if start is None or end is None:
        return None
    return Span(filename, start[0], start[1], end[0], end[1])


#: Where a rule's kept values come from: the index of a child, whether it is a rule Lark inlines (its
#: children are spliced in), or None for an optional part not written (``maybe_placeholders``).
_Slot = tuple[int, bool] | None


def _slots(rule: Rule, placeholders: bool) -> list[_Slot]:
    """What Lark's tree builder keeps of ``rule``'s children, in order (lark.parse_tree_builder's child
    filter): tokens the grammar drops (punctuation, keywords) left out, ``_rule`` children spliced in,
    and with ``placeholders`` (Lark's ``maybe_placeholders``) a None where an optional part is not written."""
    absent = (placeholders and rule.options.empty_indices) or [False] * len(rule.expansion)  # True: not here
    slots: list[_Slot] = []
    symbols = iter(enumerate(rule.expansion))
    for missing in absent:
        if missing:
            slots.append(None)
            continue
        index, symbol = next(symbols)
        if rule.options.keep_all_tokens or not (isinstance(symbol, Terminal) and symbol.filter_out):
            slots.append((index, not symbol.is_term and symbol.name.startswith("_")))
    return slots


def _kept(slots: list[_Slot], children: list[Any]) -> list[Any]:
    """The children Lark's tree builder would keep (see :func:`_slots`)."""
    kept: list[Any] = []
    for slot in slots:
        if slot is None:
            kept.append(None)
        elif slot[1]:
            kept += children[slot[0]].children
        else:
            kept.append(children[slot[0]])
    return kept


def _reducer(rule: Rule, placeholders: bool, parse: _Parse) -> Callable[[list[Any]], Any]:
    """The callback of a reduction of ``rule``: the syntax builder's node with the span of all the rule read,
    or, for a ``?rule`` that keeps one child (``?atom: "(" test ")"``), that child, measured by all read."""
    name = rule.alias or rule.origin.name
    slots = _slots(rule, placeholders)
    passes_on = rule.options.expand1 and not rule.alias
    method = getattr(SyntaxBuilder, name, None)
    if method is None and not passes_on:
        raise TypeError(f"the syntax builder has no method for the grammar's rule {name!r}")
    bounds = _bounds(rule)
    if bounds is not None and not passes_on and all(slot is None or not slot[1] for slot in slots):
        picks = tuple(slot[0] if slot else None for slot in slots)
        return _plain_reducer(name, method, bounds, picks, parse)  # type: ignore[arg-type]
    # most rules keep children as they are, by index: no placeholder, nothing spliced in
    indices = None if any(slot is None or slot[1] for slot in slots) else [slot[0] for slot in slots if slot]

    def reduce(children: list[Any]) -> Any:
        span = _extent(parse.builder.filename, children)
        kept = [children[index] for index in indices] if indices is not None else _kept(slots, children)
        if passes_on and len(kept) == 1:
            child = kept[0]
            if child.__class__ is Built and child.span is not span and span is not None:
                return Built(child.data, child.value, span)
            return child
        values = [child.value if child.__class__ is Built else child for child in kept]
        try:
            # span is None only for an empty file's start rule, whose value nothing measures
            return Built(name, method(parse.builder, span, *values), span)  # type: ignore[misc, arg-type]
        except ValueError as error:  # int() of more digits than Python converts
            raise LiteralError(span or Span(parse.builder.filename, 1, 1), error) from None

    return reduce


def _bounds(rule: Rule) -> tuple[int, int] | None:
    """The places of the first and the last child a reduction of ``rule`` is measured by, when the grammar
    fixes them: the children before the first and after the last are layout tokens, always skipped.  None
    when one of them is a ``_rule`` spliced in (how much it holds varies) or there is no such child."""
    positioned = [index for index, symbol in enumerate(rule.expansion)
                  if not (symbol.is_term and symbol.name in _LAYOUT)]
    if not positioned or any(not rule.expansion[index].is_term and rule.expansion[index].name.startswith("_")
                             for index in (positioned[0], positioned[-1])):
        return None
    return positioned[0], positioned[-1]


def _span_setters() -> tuple[Callable[[Span, Any], None], ...]:
    """The setters of :class:`Span`'s slots, in the order of its fields: what its attrs ``__init__`` does, with
    neither the call nor a look-up of each name (nearly every reduction makes a span).  Only while that
    ``__init__`` does nothing else than set each field it is given: checked here, when the module loads."""
    fields = attrs.fields(Span)
    if [field.name for field in fields] != ["file", "line", "column", "end_line", "end_column"] or any(
            field.validator or field.converter or field.on_setattr for field in fields) or hasattr(
            Span, "__attrs_post_init__") or hasattr(Span, "__attrs_pre_init__"):
        raise TypeError("Span's __init__ does more than set its five fields")
    return tuple(getattr(Span, field.name).__set__ for field in fields)


_SET_FILE, _SET_LINE, _SET_COLUMN, _SET_END_LINE, _SET_END_COLUMN = _span_setters()


def _plain_reducer(name: str, method: Callable[..., Any], bounds: tuple[int, int], picks: tuple[int | None, ...],
                   parse: _Parse) -> Callable[[list[Any]], Any]:
    """The callback of a rule that builds a node of children it keeps by index (None for an optional part not
    written), measured from ``bounds``: what :func:`_extent` and :func:`_kept` work out per call, once.

    The children at ``bounds`` are tokens (of a terminal that is not layout) or the values of rules that do
    not start with ``_``: a :class:`Built`, or a token a ``?rule`` passed on.  A token and a span both have
    ``line``, ``column``, ``end_line`` and ``end_column``, so either measures alike, as in :func:`_extent`;
    a value of any other kind has no ``line`` and fails the parse loudly, never measuring it wrong."""
    first, last = bounds
    kept = picks[0] if len(picks) == 1 else None
    take = itemgetter(*picks) if len(picks) > 1 and None not in picks else None  # the kept children, as a tuple
    new_span, new_built = Span.__new__, Built.__new__

    def reduce(children: list[Any]) -> Any:
        builder = parse.builder
        start = children[first]
        if start.__class__ is Built:
            start = start.span
        if first == last and start.__class__ is Span:  # the one child's extent: _extent's span, or one equal to it
            span = start
        else:
            end = children[last]
            if end.__class__ is Built:
                end = end.span
            span = new_span(Span)
            _SET_FILE(span, builder.filename)
            _SET_LINE(span, start.line or 0)
            _SET_COLUMN(span, start.column or 0)
            _SET_END_LINE(span, end.end_line)
            _SET_END_COLUMN(span, end.end_column)
        try:
            if kept is not None:
                child = children[kept]
                value = method(builder, span, child.value if child.__class__ is Built else child)
            elif take is not None:
                value = method(builder, span, *[child.value if child.__class__ is Built else child
                                                for child in take(children)])
            else:
                kept_children = [children[index] if index is not None else None for index in picks]
                value = method(builder, span, *[child.value if child.__class__ is Built else child
                                                for child in kept_children])
        except ValueError as error:  # int() of more digits than Python converts
            raise LiteralError(span, error) from None
        built = new_built(Built)  # Built(name, value, span), without the call of its __init__
        built.data, built.value, built.span = name, value, span
        return built

    return reduce


def _build_every_reduction(parser: Lark, parse: _Parse) -> None:
    """Make each of ``parser``'s rule callbacks build the syntax tree: every rule but the ``_rule`` ones Lark
    inlines into their parent (their trees are spliced in) and the steps of a ladder (``?test: or_test``,
    which pass their one child on as it is, span and all: half of all reductions).

    Lark private: ``Lark._callbacks`` is the dict (rule -> callback) its LALR parser calls, the same
    object, so replacing its entries takes effect.  tests/lang/test_syntax_building.py fails if a Lark
    release stops calling them (every span would then be wrong).
    """
    callbacks: dict[Any, Callable[[list[Any]], Any]] = parser._callbacks
    placeholders = parser.options.maybe_placeholders
    for rule in list(callbacks):
        if not isinstance(rule, Rule):
            continue
        if not (rule.alias or rule.origin.name).startswith("_") and not _passes_on(rule):
            callbacks[rule] = _reducer(rule, placeholders, parse)
        elif rule.expansion[:1] == [rule.origin] and not (rule.alias or rule.options.expand1):
            callbacks[rule] = _extender(_slots(rule, placeholders))


def _extender(slots: list[_Slot]) -> Callable[[list[Any]], Any]:
    """The callback of a left-recursive rule Lark inlines (a repetition: ``__arguments_star_15:
    __arguments_star_15 "," argument``): the tree of the repetition so far, extended in place by the children
    Lark's filter keeps.  Lark's callback makes a new tree of the same name around the same list of children;
    the old tree leaves the parser's stack with the reduction, so extending it makes an equal tree (the same
    name, equal children) without a new one."""
    if slots[:1] != [(0, True)] or None in slots:
        raise TypeError(f"a repetition whose first child is not the repetition so far: {slots}")
    rest = [slot for slot in slots[1:] if slot is not None]

    def extend(children: list[Any]) -> Any:
        tree = children[0]
        kept: list[Any] = tree.children
        for index, spliced in rest:
            if spliced:
                kept += children[index].children
            else:
                kept.append(children[index])
        return tree

    return extend


def _passes_on(rule: Rule) -> bool:
    """Whether ``rule`` is a step of a ladder (``?test: or_test``): Lark's callback returns its one child."""
    return rule.options.expand1 and not rule.alias and len(rule.expansion) == 1 and not rule.expansion[0].is_term


class SyntaxParser:
    """A Lark parser whose result is the syntax tree (:class:`~fxrules.lang.syntax_tree.File`)."""

    def __init__(self, make: Callable[..., Lark]) -> None:
        """``make(propagate_positions=False)`` makes the Lark parser of the grammar (from its tables or from it)."""
        self._parse = _Parse()
        self.lark = make(propagate_positions=False)
        _build_every_reduction(self.lark, self._parse)
        self._loop = LalrLoop(self.lark)
        self._lock = threading.RLock()

    def parse(self, text: str, filename: str) -> File:
        """The syntax tree of ``text``; Lark's errors, or :class:`LiteralError`, when it has none."""
        with self._lock:
            self._parse.builder = SyntaxBuilder(filename)
            try:
                result = self._loop.parse(text)
            except Refused:
                # Lark's own loop parses it again, to raise Lark's error with its parser state
                self._parse.builder = SyntaxBuilder(filename)
                self.lark.parse(text)
                raise AssertionError(f"fxrules' LALR loop refused text Lark parses: {text!r}") from None
        assert isinstance(result, Built) and isinstance(result.value, File), result
        return result.value
