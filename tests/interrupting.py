"""A Ctrl-C at a chosen line: a tracer that counts the lines run in the code it is given and raises
``KeyboardInterrupt`` at one of them, and ``apply`` run under it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import pytest
import torch.fx

import fxrules
from fxrules.match.guards import Predicates


class Interrupter:
    """A tracer (``sys.settrace(interrupter.call)``) counting the lines run in the code ``traced`` accepts and
    raising KeyboardInterrupt at line ``index`` (None: never): a Ctrl-C at a chosen line."""

    def __init__(self, index: int | None, traced: Callable[[CodeType], bool]) -> None:
        self.index, self.traced, self.count = index, traced, 0

    def _line(self, frame: FrameType, event: str, _: Any) -> Callable[..., Any]:
        if event == "line":
            if self.count == self.index:
                raise KeyboardInterrupt
            self.count += 1
        return self._line

    def call(self, frame: FrameType, event: str, _: Any) -> Callable[..., Any] | None:
        return self._line if self.traced(frame.f_code) else None


def in_file(path: str) -> Callable[[CodeType], bool]:
    """The code of one source file (a module's ``__file__``)."""
    return lambda code: code.co_filename == path


def under(directory: str) -> Callable[[CodeType], bool]:
    """The code of the source files under ``directory``."""
    prefix = os.path.join(directory, "")
    return lambda code: code.co_filename.startswith(prefix)


def apply_interrupted(gm: torch.fx.GraphModule, rules: fxrules.RuleSet, index: int | None,
                      traced: Callable[[CodeType], bool], predicates: Predicates | None = None) -> int:
    """``apply`` (with the user ``predicates``) with every line of the code ``traced`` accepts counted, raising
    KeyboardInterrupt at line ``index`` (None: not at all); how many lines were counted."""
    interrupter = Interrupter(index, traced)
    sys.settrace(interrupter.call)
    try:
        fxrules.apply(gm, rules, predicates=predicates)
    finally:
        sys.settrace(None)
    return interrupter.count


def interrupt_at_every_line(make: Callable[[], torch.fx.GraphModule], rules: fxrules.RuleSet,
                            traced: Callable[[CodeType], bool],
                            expect: Callable[[torch.fx.GraphModule], Callable[[], None]],
                            predicates: Predicates | None = None) -> int:
    """``apply`` of ``rules`` (with the user ``predicates``) to a fresh module from ``make`` interrupted at each
    line of the code ``traced`` accepts in turn: the interrupt must propagate, and the check ``expect`` made of
    the fresh module before its apply must then hold (its failure names the line).  Returns how many lines
    there were."""
    lines = apply_interrupted(make(), rules, None, traced, predicates)
    for index in range(lines):
        gm = make()
        check = expect(gm)
        with pytest.raises(KeyboardInterrupt):
            apply_interrupted(gm, rules, index, traced, predicates)
        try:
            check()
        except AssertionError as error:
            raise AssertionError(f"interrupted at line {index} of {lines}") from error
    return lines
