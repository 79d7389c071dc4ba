"""Reading the sizes of a graph's values without specializing the graph to them.

A size in shape metadata is a plain int when the graph fixes it (a constant, a
parameter's shape, a graph compiled or exported for static shapes) and a
``SymInt`` of the graph's shape environment when it does not (sizes
propagated from ``example_inputs``, a Dynamo graph compiled for dynamic
shapes, an exported program's dynamic dim).  Asking a question about a
symbolic size whose answer the shape environment does not know for every size
(``s0 == 4``, ``int(s0)``) would install a guard: the answer holds for the
example only.  While a graph is rewritten, :class:`Sizes` makes every such
question raise instead, and the places that ask (guards, typed captures,
helpers, replacement literals) turn it into the skip reason ``dynamic size``.
A caller that wants the graph specialized passes ``static_shapes=True``: the
questions are answered from the example sizes.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

if TYPE_CHECKING:
    from torch.fx.experimental import symbolic_shapes

#: How a skip for a dynamic size tells the caller to opt in.
OPT_IN = "pass static_shapes=True to apply (--static-shapes) to specialize the graph to the example sizes"

#: torch's module of shape environments: it imports sympy (over half a second), so it is not imported here.
SYMBOLIC_SHAPES = "torch.fx.experimental.symbolic_shapes"

SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _size_errors() -> tuple[type[BaseException], ...]:
    """The errors a question about a symbolic size raises: a guard refused while sizes are fixed, or a size
    the shape environment has no example value for (data-dependent); none until torch has imported the
    module that defines them, which it does before it makes a symbolic size."""
    module = sys.modules.get(SYMBOLIC_SHAPES)
    if module is None:
        return ()
    return (module._ShapeEnvGuardError, module.GuardOnDataDependentSymNode)


class DynamicSize(Exception):  # noqa: N818 - a condition, like MissingMetadata
    """A rule needs the value of a size that the graph leaves symbolic."""


def is_size_error(error: BaseException) -> bool:
    """Whether ``error`` says that a question needed the value of a symbolic size."""
    return isinstance(error, _size_errors())


def dynamic_size(error: BaseException, what: str) -> DynamicSize:
    """The :class:`DynamicSize` for a size error met while ``what`` (``"the guard"``, ``"helper '@f'"``)."""
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    refused = _size_errors()[:1]
    if refused and isinstance(error, refused):  # "...frozen: Eq(s0, 4) == True"
        message = f"{message.partition(': ')[2]} holds for the example sizes only"
    return DynamicSize(f"{what} depends on a size the graph leaves symbolic ({message}); {OPT_IN}")


def literal(value: Any, what: str) -> Any:
    """``value`` as a literal a graph can hold: symbolic sizes become ints where the shape environment knows
    them (or, with static shapes, from their example values); else :class:`DynamicSize`."""
    if isinstance(value, list | tuple):
        return type(value)(literal(item, what) for item in value)
    if not isinstance(value, SYMBOLIC):
        return value
    kind = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(value)]
    try:
        return kind(value)
    except _size_errors() as error:
        raise dynamic_size(error, what) from None


def shape_env_of(gm: torch.fx.GraphModule) -> symbolic_shapes.ShapeEnv | None:
    """The shape environment of the graph's symbolic sizes, or None when its metadata has none."""
    for node in gm.graph.nodes:
        meta = node.meta
        if not meta:  # most nodes of a graph without metadata (symbolic_trace): one test each
            continue
        value = meta.get("val", meta.get("example_value"))
        if isinstance(value, list | tuple) and value:
            value = value[0]
        fake_mode = getattr(value, "fake_mode", None)
        shape_env: symbolic_shapes.ShapeEnv | None
        if fake_mode is not None and fake_mode.shape_env is not None:
            shape_env = fake_mode.shape_env
            return shape_env
        if isinstance(value, SYMBOLIC):
            shape_env = value.node.shape_env
            return shape_env
    return None


@contextlib.contextmanager
def fixed(gm: torch.fx.GraphModule, static_shapes: bool) -> Iterator[None]:
    """While rewriting ``gm``: a question about a symbolic size raises (see the module docstring), unless
    ``static_shapes``, when it is answered from the example sizes and the graph specialized to them."""
    shape_env = None if static_shapes else shape_env_of(gm)
    if shape_env is None:
        yield
        return
    # each refusal is expected: it becomes a skip, not a warning
    with muted(SYMBOLIC_SHAPES, "failed during evaluate_expr"), shape_env.error_on_new_guards():
        yield


@contextlib.contextmanager
def muted(logger_name: str, prefix: str) -> Iterator[None]:
    """Drop the records of a torch logger whose message starts with ``prefix``: failures fxrules reports
    in its own words."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(prefix)

    logger = logging.getLogger(logger_name)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)
