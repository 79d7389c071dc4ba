"""The syntax parser's LALR loop: Lark's parse table, contextual lexer and rule callbacks, run by one loop.

Lark compiles the grammar, builds the parse table and the contextual lexer's scanners, and makes the
callback of every rule; this module only runs them.  Lark's own loop passes each token through three
generators (the contextual lexer, the Indenter post-lexer, the parser's feed) and a ``try`` per table
look-up; for a 500-rule file that layering was most of the parse.  Here one function lexes, lays out
indentation and drives the table, and a ladder step (``?test: or_test``, whose callback returns its one
child unchanged) only moves the state.

It takes Lark's steps and no others: the scanner of the parser's current state matches at the current
position (:meth:`lark.lexer.BasicLexer.next_token`), ignored text is skipped, a keyword's callback retypes
a name, a new line outside brackets yields ``_NL`` and then ``_INDENT`` or ``_DEDENT`` tokens
(:class:`lark.indenter.Indenter`), and each token shifts after the reductions the table asks for
(:meth:`lark.parsers.lalr_parser_state.ParserState.feed_token`).  It stops at the first step that is not
a plain success (no scanner match, no table action, a dedent to no enclosing level) by raising
:class:`Refused`, and the caller parses the text again with Lark's own loop, which raises Lark's error
with its parser state: the messages made from those errors are what they always were.
tests/lang/test_syntax_building.py and tests/lang/test_parser_fuzz.py hold the loop to Lark's results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lark import Lark, Token
from lark.grammar import Rule
from lark.indenter import Indenter
from lark.lexer import BasicLexer, UnlessCallback
from lark.parse_tree_builder import ExpandSingleChild
from lark.parsers.lalr_analysis import Shift


class Refused(Exception):  # noqa: N818 - a signal to the caller, never raised to users
    """The text is not well formed here; Lark's own parse of it says why."""


#: One state's lexer: its scanner's match, its ignored and multi-line terminals, and for a terminal that may be
#: a keyword (a NAME), the keywords it may be: (match, ignored, multiline, {terminal: {text: keyword terminal}}).
_Scanner = tuple[Callable[[str, int], Any], frozenset[str], frozenset[str], dict[str, dict[str, str]]]
#: One rule: how many values it pops, the nonterminal it makes, its callback.
_Reduction = tuple[int, str, Callable[[list[Any]], Any]]


class _Steps:
    """The action of a state, on one terminal, of reducing by a ladder step (``?test: or_test``, whose
    callback returns its one child): only the state moves.

    The steps that follow, on the same terminal, all replace the state on top of the same state below:
    where they end depends on that state alone, so it is worked out once per state below."""

    __slots__ = ("ends", "kind", "origin")

    def __init__(self, origin: str, kind: str) -> None:
        self.origin, self.kind = origin, kind
        self.ends: dict[int, int] = {}  # the state below -> the state the steps end in

    def end(self, actions: dict[int, _Actions], gotos: dict[int, dict[str, int]], below: int) -> int:
        """Where the steps end over the state ``below``: the first state whose action is not a step."""
        step = self
        while True:
            top = gotos[below][step.origin]
            following = actions[top].get(self.kind)
            if type(following) is not _Steps:
                self.ends[below] = top
                return top
            step = following


#: A state's action on a terminal: the state to shift to, a rule to reduce by, or ladder steps.
_Actions = dict[str, "int | _Reduction | _Steps"]


def _scanner(lexer: BasicLexer) -> _Scanner:
    """The parts of one of the contextual lexer's lexers that lexing a token reads.

    Lark private: ``Scanner._mres`` (the compiled alternation of the state's terminals) and the lexer's
    ``callback``, where Lark retypes a name that is a keyword of the state (``UnlessCallback``: the keyword
    terminal whose string the whole name is).  Those keywords are plain strings, so that is a dict look-up.
    """
    mres = lexer.scanner._mres
    if len(mres) != 1:  # Lark splits an alternation of more than 100 terminals
        raise TypeError(f"a lexer of {len(lexer.terminals)} terminals: more than one alternation")
    retype: dict[str, dict[str, str]] = {}
    for kind, callback in lexer.callback.items():
        terminals = callback.scanner.terminals if isinstance(callback, UnlessCallback) else None
        if terminals is None or lexer.g_regex_flags or any(t.pattern.type != "str" or t.pattern.flags
                                                           for t in terminals):
            raise TypeError(f"a lexer callback of {kind} that is not a plain keyword's")
        retype[kind] = {t.pattern.value: t.name for t in terminals}
    return mres[0].match, lexer.ignore_types, lexer.newline_types, retype


def _action(action: Any, arg: Any, kind: str, callbacks: dict[Rule, Callable[[list[Any]], Any]]) -> Any:
    """Lark's (Shift, state) as the state, its (Reduce, rule) as the rule's reduction or ladder steps."""
    if action is Shift:
        return arg
    rule: Rule = arg
    callback = callbacks[rule]
    # Lark's callback of a ``?rule`` of one symbol (not replaced by the syntax builder) returns its one child
    if type(callback) is ExpandSingleChild and len(rule.expansion) == 1:
        return _Steps(rule.origin.name, kind)
    return len(rule.expansion), rule.origin.name, callback


class _Layout:
    """The Indenter's work on each new line outside brackets: ``_NL``, then ``_INDENT`` or ``_DEDENT`` tokens."""

    def __init__(self, indenter: Indenter, feed: Callable[[Token], None]) -> None:
        self.indenter, self.feed = indenter, feed
        self.levels = [0]

    def newline(self, token: Token) -> None:
        self.feed(token)
        indenter = self.indenter
        indent_text = token.rsplit("\n", 1)[1]
        indent = indent_text.count(" ") + indent_text.count("\t") * indenter.tab_len
        levels = self.levels
        if indent > levels[-1]:
            levels.append(indent)
            self.feed(Token.new_borrow_pos(indenter.INDENT_type, indent_text, token))
            return
        while indent < levels[-1]:
            levels.pop()
            self.feed(Token.new_borrow_pos(indenter.DEDENT_type, indent_text, token))
        if indent != levels[-1]:
            raise Refused  # a dedent to no enclosing level

    def close(self, last: Token | None) -> None:
        """The dedents at the end of the text (borrowing the place of the lexer's ``last`` token)."""
        while len(self.levels) > 1:
            self.levels.pop()
            dedent = self.indenter.DEDENT_type
            self.feed(Token.new_borrow_pos(dedent, "", last) if last is not None
                      else Token(dedent, "", 0, 0, 0, 0, 0, 0))


class LalrLoop:
    """Parses with the tables, lexers and callbacks of a Lark LALR parser made with an Indenter post-lexer.

    Lark private: ``Lark.parser`` (the frontend) holds the contextual lexer behind the post-lexer and
    the LALR parser whose table and callbacks are read here.  The callbacks are read when the loop is
    made: replace them before.
    """

    def __init__(self, parser: Lark) -> None:
        frontend = parser.parser
        contextual = frontend.lexer.lexer
        self._indenter: Indenter = frontend.lexer.postlexer
        lalr = frontend.parser.parser
        table = lalr.parse_table
        self._start: int = table.start_states["start"]
        self._end: int = table.end_states["start"]
        if not all(isinstance(rule, Rule) for rule in lalr.callbacks):
            raise TypeError("a callback of a terminal: the loop calls only rules' callbacks")
        # Lark's table as two: the action on each terminal, and the state after each nonterminal (its goto)
        nonterminals = {rule.origin.name for rule in lalr.callbacks}
        self._actions: dict[int, _Actions] = {
            state: {kind: _action(action, arg, kind, lalr.callbacks) for kind, (action, arg) in entries.items()
                    if kind not in nonterminals}
            for state, entries in table.states.items()}
        self._gotos: dict[int, dict[str, int]] = {
            state: {kind: arg for kind, (_, arg) in entries.items() if kind in nonterminals}
            for state, entries in table.states.items()}
        self._lexers: dict[int, BasicLexer] = contextual.lexers
        self._scanners: dict[int, _Scanner] = {}  # made on first use: Lark compiles a state's scanner then
        opening, closing = self._indenter.OPEN_PAREN_types, self._indenter.CLOSE_PAREN_types
        self._brackets = {**dict.fromkeys(opening, 1), **dict.fromkeys(closing, -1)}

    def parse(self, text: str) -> Any:
        """What the start rule's callback returned for ``text``, or :class:`Refused`."""
        actions, gotos, end_state = self._actions, self._gotos, self._end
        state_stack: list[int] = [self._start]
        value_stack: list[Any] = []

        def feed(token: Token) -> None:
            kind = token.type
            while True:
                action = actions[state_stack[-1]].get(kind)
                if action is None:
                    raise Refused
                if type(action) is int:
                    state_stack.append(action)
                    value_stack.append(token)
                    return
                if type(action) is _Steps:  # the value stays, only the state moves
                    below = state_stack[-2]
                    top = action.ends.get(below)
                    state_stack[-1] = top if top is not None else action.end(actions, gotos, below)
                    continue
                size, origin, callback = action  # type: ignore[misc]
                if size:
                    children = value_stack[-size:]
                    del value_stack[-size:]
                    del state_stack[-size:]
                else:
                    children = []
                value_stack.append(callback(children))
                state_stack.append(gotos[state_stack[-1]][origin])
                if kind == "$END" and state_stack[-1] == end_state:
                    return

        self._lex(text, state_stack, feed)
        feed(Token("$END", ""))  # never shifted: the place Lark would give it is not read
        if state_stack[-1] != end_state:
            raise Refused
        return value_stack[-1]

    def _scanner(self, state: int) -> _Scanner:
        scanner = self._scanners[state] = _scanner(self._lexers[state])
        return scanner

    def _lex(self, text: str, state_stack: list[int], feed: Callable[[Token], None]) -> None:
        """Lex ``text`` in the parser's state as it goes, feeding every token and the indentation's."""
        scanners, brackets, newline = self._scanners, self._brackets, self._indenter.NL_type
        layout = _Layout(self._indenter, feed)
        pos, line, line_start, length, depth = 0, 1, 0, len(text), 0
        token, new_string = None, str.__new__
        while pos < length:
            state = state_stack[-1]
            match, ignored, multiline, retype = scanners.get(state) or self._scanner(state)
            found = match(text, pos)
            if found is None:
                raise Refused
            end = found.end()
            value, kind = text[pos:end], found.lastgroup
            start_line, column = line, pos - line_start + 1
            if kind in multiline and (newlines := value.count("\n")):
                line += newlines
                line_start = pos + value.rindex("\n") + 1
            if kind in ignored:
                pos = end
                continue
            if kind in retype:
                kind = retype[kind].get(value, kind)
            # Token(...) as Lark's lexer makes it, without the two calls of its constructor (``Token._future_new``
            # sets these eight attributes of the string): a third of lexing was spent there
            token = new_string(Token, value)
            token.type = kind  # one attribute a statement: a tuple of them would be built and taken apart
            token.value = value
            token.start_pos = pos
            token.line = start_line
            token.column = column
            token.end_line = line
            token.end_column = end - line_start + 1
            token.end_pos = end
            pos = end
            if kind == newline:
                if not depth:  # inside brackets a new line is only space
                    layout.newline(token)
                continue
            feed(token)
            if kind in brackets:
                depth += brackets[kind]
                if depth < 0:
                    raise Refused
        layout.close(token)
