"""A Ctrl-C at a chosen line: a tracer that counts the lines run in the code it is given and raises
``KeyboardInterrupt`` at one of them, and ``apply`` run under it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import torch.fx

import fxrules


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
                      traced: Callable[[CodeType], bool]) -> int:
    """``apply`` with every line of the code ``traced`` accepts counted, raising KeyboardInterrupt at line
    ``index`` (None: not at all); how many lines were counted."""
    interrupter = Interrupter(index, traced)
    sys.settrace(interrupter.call)
    try:
        fxrules.apply(gm, rules)
    finally:
        sys.settrace(None)
    return interrupter.count
