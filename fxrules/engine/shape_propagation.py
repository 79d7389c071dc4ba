"""Shape metadata for ``apply(..., example_inputs=...)``: sizes propagated as symbols, nothing real run.

A traced graph is shape-generic: the example inputs show one size of each
dim, not a promise.  Each example tensor becomes a FakeTensor whose every
dim is a symbol of a fresh shape environment (as ``torch.export`` makes a
dynamic dim; sizes 0 and 1 and equal sizes are not merged, since an example
showing them says nothing about other calls), and the graph runs on these
FakeTensors and on fake copies of the module's parameters and buffers.
``node.meta["val"]`` then holds what the graph computes from them: a size
is a plain int only where the graph itself fixes it (a constant, a
parameter's shape, ``x.view(4, 3)``), and a ``SymInt`` elsewhere.  What the
graph's operations need of the sizes for the example to run (broadcast dims
equal) the shape environment records, as ``torch.export`` does.  The run
reasons size-obliviously (torch's ``backed_size_oblivious``): a kernel that
asks whether a dim is 1 only to pick strides gets "no" without a guard, so an
example with a batch of 1 does not fix the batch at 1 for every rule.  Only
an example that runs solely because a dim broadcasts at 1 is propagated
again without it, that dim then fixed at 1, as ``torch.export`` fixes it.

With ``static_shapes=True`` every dim is a plain int, the example's.

Nothing real runs: parameters, buffers, inputs and the random number
generator are never touched.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensor, FakeTensorMode
from torch.fx.experimental import _config as symbolic_config
from torch.fx.experimental.proxy_tensor import snapshot_fake
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils._pytree import tree_map_only

from fxrules.diagnostics import FxrUsageError
from fxrules.graph.sizes import muted

#: The ``node.meta`` keys propagation writes.
_KEYS = ("val",)


def check_example_inputs(gm: torch.fx.GraphModule, example_inputs: Any) -> Sequence[Any]:
    """``example_inputs`` if it is a list or tuple with one value per placeholder; else an FxrUsageError."""
    placeholders = [node.name for node in gm.graph.find_nodes(op="placeholder")]
    if not isinstance(example_inputs, list | tuple):
        kind = "a tensor" if isinstance(example_inputs, torch.Tensor) else f"a {type(example_inputs).__name__}"
        raise FxrUsageError(f"example_inputs must be a list or tuple with one value per graph input "
                            f"({', '.join(placeholders) or 'none'}), got {kind}; for one input write "
                            "example_inputs=[x]")
    if len(example_inputs) != len(placeholders):
        raise FxrUsageError(f"example_inputs has {len(example_inputs)} values, but the graph has "
                            f"{len(placeholders)} inputs ({', '.join(placeholders) or 'none'})")
    return example_inputs


def propagate_shapes(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                     static_shapes: bool = False) -> Callable[[], None]:
    """Set ``node.meta["val"]`` of every node from ``example_inputs`` (see the module docstring); returns what
    puts the nodes' metadata back as it was, for an ``apply`` that fails.  A graph that cannot run on the
    inputs raises an FxrUsageError naming the node and the inputs."""
    before = [(node, {key: node.meta[key] for key in _KEYS if key in node.meta}) for node in gm.graph.nodes]

    def restore_metadata() -> None:
        for node, kept in before:
            for key in _KEYS:
                node.meta.pop(key, None)
            node.meta.update(kept)

    try:
        try:
            # torch adds patch() to its config modules when they are imported, out of sight of its type stubs
            with symbolic_config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
                _propagate(gm, example_inputs, static_shapes)
        except FxrUsageError:  # the example runs only with a size it broadcasts fixed at 1, as torch.export fixes it
            _propagate(gm, example_inputs, static_shapes)
    except BaseException:
        restore_metadata()
        raise
    return restore_metadata


def _propagate(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], static_shapes: bool) -> None:
    fake_mode = FakeTensorMode(shape_env=ShapeEnv(specialize_zero_one=False, duck_shape=False))
    with FakeCopyMode(fake_mode), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's deprecations met copying a pytree codegen
        fake_module = copy.deepcopy(gm)  # parameters and buffers as FakeTensors of the same (static) sizes
    inputs = tree_map_only(torch.Tensor, lambda t: _fake_input(fake_mode, t, static_shapes), example_inputs)
    _Propagation(fake_module, gm.graph, fake_mode, _described(gm, example_inputs)).propagate(inputs)


def _fake_input(fake_mode: FakeTensorMode, tensor: torch.Tensor, static_shapes: bool) -> FakeTensor:
    kind = DimDynamic.STATIC if static_shapes else DimDynamic.DYNAMIC
    context: StatelessSymbolicContext[..., Any] = StatelessSymbolicContext(dynamic_sizes=[kind] * tensor.dim())
    return fake_mode.from_tensor(tensor, symbolic_context=context)


class _Propagation(torch.fx.Interpreter):
    """Runs a graph on FakeTensors (the module's attributes are a fake copy's) and records each value."""

    def __init__(self, fake_module: torch.fx.GraphModule, graph: torch.fx.Graph, fake_mode: FakeTensorMode,
                 inputs: str) -> None:
        super().__init__(fake_module, graph=graph)
        self.extra_traceback = False  # the FxrUsageError names the node
        self.fake_mode = fake_mode
        self.inputs = inputs  # the example inputs described, for an error

    def propagate(self, inputs: Sequence[Any]) -> None:
        with self.fake_mode, muted(fake_tensor.__name__, "failed while attempting to run meta"):
            self.run(*inputs)

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            result = super().run_node(n)
        except Exception as error:
            raise FxrUsageError(self._failure(n, error)) from None
        value = torch.fx.node.map_aggregate(result, _recorded)
        if value is not None:
            n.meta["val"] = value
        return result

    def _failure(self, node: torch.fx.Node, error: Exception) -> str:
        message = str(error).strip().splitlines()
        return (f"shape propagation with example_inputs failed at node '{node.name}' ({node.op} "
                f"{_target_name(node)}) with inputs {self.inputs}: {type(error).__name__}: "
                f"{message[0] if message else ''}")


def _recorded(value: Any) -> Any:
    """What a node's metadata keeps of a value it computed: FakeTensors snapshotted, sizes and numbers."""
    if isinstance(value, FakeTensor):
        return snapshot_fake(value)
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool | int | float | bool):
        return value
    return None


def _described(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str:
    """The example inputs by placeholder: ``x=Tensor(2, 8) float32, n=3``."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    return ", ".join(f"{p.name}={_describe(v)}" for p, v in zip(placeholders, example_inputs, strict=True))


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)} {value.dtype}".replace("torch.", "")
    return repr(value)


def _target_name(node: torch.fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
