"""Hypothesis strategies that build random torch.fx graphs in which every spelling of an operation really appears.

Graphs are built node by node with the ``torch.fx.Graph`` API, never traced, so
``torch.neg(x)``, ``operator.neg(x)``, ``x.neg()`` and ``aten.neg.default(x)``
are four different nodes, and ``nn.ReLU`` submodules (fresh, shared, nested under ``blocks.``)
are real ``call_module`` nodes.  Every input is a 3x3 float32 tensor; the only
shape-changing operation is ``sum(..., keepdim=True)``, whose 3x1 / 1x3 / 1x1
results broadcast with everything else, so every generated graph runs.

* :func:`graphs` -- random DAGs: operands drawn from every value built so far
  (shared subexpressions, ``x * x``), identity sites the rules target (``x * 1``,
  ``neg(neg(x))``, ``transpose`` twice, ...), near misses (``x * 1.0``,
  ``torch.add(x, 0, alpha=2)``), unrelated operations, and several outputs.
* :func:`site_graphs` -- graphs made of isolated sites: every site reads fresh
  ``sin`` barrier nodes and feeds ``cos`` barrier nodes or the output, so one
  site's rewrite can neither create nor destroy a match at another site.
* :func:`with_metadata` -- a generated graph with shape metadata on every node, on none, or on some.
* :func:`inputs` -- input tensors for a generated graph, special values included.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F  # noqa: N812 - the spelling the rules use
from hypothesis import strategies as st
from torch.fx.passes.shape_prop import ShapeProp

SHAPE = (3, 3)
Node = torch.fx.Node
aten = torch.ops.aten


class GraphBuilder:
    """A graph under construction, and the root module its ``call_module`` nodes refer to."""

    def __init__(self, n_inputs: int) -> None:
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.root.blocks = torch.nn.Module()
        self.inputs = [self.graph.placeholder(f"x{i}") for i in range(n_inputs)]
        self.values: list[Node] = list(self.inputs)

    def function(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> Node:
        return self._add(self.graph.call_function(target, args, kwargs))

    def method(self, name: str, *args: Any, **kwargs: Any) -> Node:
        return self._add(self.graph.call_method(name, args, kwargs))

    def module(self, factory: type[torch.nn.Module], x: Node, place: str) -> Node:
        """Call a ``factory()`` submodule: a ``new`` one, the first ``shared`` one of its type, or a ``nested`` one."""
        owner = self.root.blocks if place == "nested" else self.root
        existing = [n for n, m in owner.named_children() if type(m) is factory]
        if place == "shared" and existing:
            name = existing[0]
        else:
            name = f"{factory.__name__.lower()}{len(owner._modules)}"
            owner.add_module(name, factory())
        target = f"blocks.{name}" if place == "nested" else name
        return self._add(self.graph.call_module(target, (x,)))

    def _add(self, node: Node) -> Node:
        self.values.append(node)
        return node

    def sinks(self, start: int = 0) -> list[Node]:
        """Operation nodes (among ``values[start:]``) that nothing uses yet."""
        return [n for n in self.values[start:] if n.op != "placeholder" and not n.users]

    def build(self, outputs: list[Node], as_tuple: bool) -> GeneratedGraph:
        # each output through exp, which no rule names: an identity rewrite of a returned value would make the
        # graph return its input, which the rewriter refuses (skip reason 'alias'), and no reference predicts that
        outputs = [self.graph.call_function(torch.exp, (node,)) for node in outputs]
        result = tuple(outputs) if as_tuple or len(outputs) != 1 else outputs[0]
        self.graph.output(result)
        self.graph.lint()
        return GeneratedGraph(torch.fx.GraphModule(self.root, self.graph), len(self.inputs))


class GeneratedGraph:
    """A generated graph module and its number of inputs; shown as its code (and its nodes' shape metadata,
    when it has some) when hypothesis reports it."""

    def __init__(self, gm: torch.fx.GraphModule, n_inputs: int) -> None:
        self.gm = gm
        self.n_inputs = n_inputs

    def __repr__(self) -> str:
        modules = {name: type(m).__name__ for name, m in self.gm.named_modules() if name and not m._modules}
        metadata = {n.name: _show_metadata(n) for n in self.gm.graph.nodes if n.meta}
        shown = f"\nmetadata: {metadata}" if metadata else ""
        return f"GeneratedGraph(modules={modules}){self.gm.code}{shown}"


def _show_metadata(node: Node) -> str:
    tensor_meta = node.meta.get("tensor_meta")
    if tensor_meta is not None:
        return f"{tuple(tensor_meta.shape)} {tensor_meta.dtype}"
    return f"type {node.meta['type'].__name__}" if "type" in node.meta else "none"


# ---------------------------------------------------------------- spellings

Spelling = Callable[[GraphBuilder, Node], Node]


def _fn(target: Callable[..., Any], *extra: Any, **kwargs: Any) -> Spelling:
    return lambda b, x: b.function(target, x, *extra, **kwargs)


def _fn_first(target: Callable[..., Any], constant: Any) -> Spelling:
    """``1 * x``: the constant written first."""
    return lambda b, x: b.function(target, constant, x)


def _meth(name: str, *extra: Any, **kwargs: Any) -> Spelling:
    return lambda b, x: b.method(name, x, *extra, **kwargs)


def _mod(factory: type[torch.nn.Module], place: str) -> Spelling:
    return lambda b, x: b.module(factory, x, place)


def _cat(*extra: Any, as_tuple: bool = False, target: Callable[..., Any] = torch.cat, **kwargs: Any) -> Spelling:
    return lambda b, x: b.function(target, (x,) if as_tuple else [x], *extra, **kwargs)


#: Every spelling of each single-operand operation the generator uses.
SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "neg": (_fn(torch.neg), _fn(operator.neg), _meth("neg"), _fn(aten.neg.default)),
    "relu": (_fn(torch.relu), _fn(F.relu), _fn(F.relu, inplace=False), _meth("relu"), _fn(aten.relu.default),
             _mod(torch.nn.ReLU, "new"), _mod(torch.nn.ReLU, "shared"), _mod(torch.nn.ReLU, "nested")),
    "sigmoid": (_fn(torch.sigmoid), _meth("sigmoid"), _mod(torch.nn.Sigmoid, "new")),
    "tanh": (_fn(torch.tanh), _meth("tanh"), _mod(torch.nn.Tanh, "shared")),
    "contiguous": (_meth("contiguous"),),
    "mul_one": (_fn(operator.mul, 1), _fn_first(operator.mul, 1), _fn(torch.mul, 1), _fn_first(torch.mul, 1),
                _meth("mul", 1)),
    "add_zero": (_fn(operator.add, 0), _fn_first(operator.add, 0), _fn(torch.add, 0), _meth("add", 0),
                 _fn(aten.add.Tensor, 0)),
    "sub_zero": (_fn(operator.sub, 0), _fn(torch.sub, 0), _meth("sub", 0)),
    "div_one": (_fn(operator.truediv, 1.0), _fn(torch.div, 1.0), _meth("div", 1.0)),
    "cat_single": (_cat(), _cat(0), _cat(dim=1), _cat(-1, as_tuple=True), _cat(target=torch.concat),
                   _cat(target=aten.cat.default)),
    "near_miss": (_fn(operator.mul, 1.0), _fn(operator.mul, 2), _fn(operator.add, 1), _fn(torch.add, 0, alpha=2),
                  _fn(operator.truediv, 1), _fn(operator.sub, -0.0), _fn(torch.transpose, 0, 0)),
    "sum_keepdim": (_fn(torch.sum, 0, keepdim=True), _fn(torch.sum, -1, keepdim=True), _meth("sum", 1, keepdim=True),
                    _meth("sum", dim=0, keepdim=True)),
}

#: Two-operand spellings (the operands may be one node: ``x * x``).
BINARY: tuple[Callable[[GraphBuilder, Node, Node], Node], ...] = (
    lambda b, x, y: b.function(operator.add, x, y),
    lambda b, x, y: b.function(torch.add, x, y),
    lambda b, x, y: b.method("add", x, y),
    lambda b, x, y: b.function(operator.mul, x, y),
    lambda b, x, y: b.function(torch.mul, x, y),
    lambda b, x, y: b.method("mul", x, y),
    lambda b, x, y: b.function(operator.sub, x, y),
)

TRANSPOSE_DIMS = ((0, 1), (1, 0), (-2, -1), (0, -1))
#: Operations drawn twice in a row (a rule site) with independently drawn spellings.
TWICE = ("neg", "relu", "contiguous", "transpose", "sum_keepdim")


def transpose_spellings(dims: tuple[int, int]) -> tuple[Spelling, ...]:
    return _fn(torch.transpose, *dims), _meth("transpose", *dims), _fn(aten.transpose.int, *dims)


@st.composite
def _spelling(draw: st.DrawFn, family: str, dims: tuple[int, int] | None = None) -> Spelling:
    if family == "transpose":
        return draw(st.sampled_from(transpose_spellings(dims or draw(st.sampled_from(TRANSPOSE_DIMS)))))
    return draw(st.sampled_from(SPELLINGS[family]))


@st.composite
def _operand(draw: st.DrawFn, b: GraphBuilder) -> Node:
    """Usually the latest value (deep chains), often any earlier one (shared subexpressions)."""
    last = len(b.values) - 1
    return b.values[draw(st.one_of(st.just(last), st.integers(0, last)))]


def _twice(draw: st.DrawFn, b: GraphBuilder, family: str, x: Node) -> Node:
    """The same operation twice; transposes and sums with the same dims, so the rule's site really appears."""
    if family == "transpose":
        dims = draw(st.sampled_from(TRANSPOSE_DIMS))
        return draw(_spelling(family, dims))(b, draw(_spelling(family, dims))(b, x))
    if family == "sum_keepdim":
        spelling = draw(st.sampled_from(SPELLINGS[family]))
        return spelling(b, spelling(b, x))
    return draw(_spelling(family))(b, draw(_spelling(family))(b, x))


# ---------------------------------------------------------------- rule sites and graphs

Site = Callable[[st.DrawFn, GraphBuilder, Callable[[], Node]], None]


def _site_twice(family: str) -> Site:
    def site(draw: st.DrawFn, b: GraphBuilder, fresh: Callable[[], Node]) -> None:
        _twice(draw, b, family, fresh())

    return site


def _site_single(family: str) -> Site:
    def site(draw: st.DrawFn, b: GraphBuilder, fresh: Callable[[], Node]) -> None:
        draw(_spelling(family))(b, fresh())

    return site


def _site_neg_times_neg(draw: st.DrawFn, b: GraphBuilder, fresh: Callable[[], Node]) -> None:
    left, right = draw(_spelling("neg"))(b, fresh()), draw(_spelling("neg"))(b, fresh())
    draw(st.sampled_from(BINARY[3:6]))(b, left, right)


def _site_neg_squared(draw: st.DrawFn, b: GraphBuilder, fresh: Callable[[], Node]) -> None:
    n = draw(_spelling("neg"))(b, fresh())
    draw(st.sampled_from(BINARY[3:6]))(b, n, n)


def _site_two_negs(draw: st.DrawFn, b: GraphBuilder, fresh: Callable[[], Node]) -> None:
    x = fresh()
    draw(_spelling("neg"))(b, x)
    draw(_spelling("neg"))(b, x)


def _site_escaping(draw: st.DrawFn, b: GraphBuilder, fresh: Callable[[], Node]) -> None:
    """A would-be site whose interior node has a second user: no rule may fire here."""
    family = draw(st.sampled_from(("neg", "relu", "contiguous")))
    inner = draw(_spelling(family))(b, fresh())
    draw(_spelling(family))(b, inner)
    b.function(torch.cos, inner)


SITES: tuple[Site, ...] = (
    *(_site_twice(f) for f in ("neg", "relu", "contiguous", "transpose")),
    *(_site_single(f) for f in ("mul_one", "add_zero", "sub_zero", "div_one", "cat_single", "near_miss",
                                "sigmoid", "tanh")),
    _site_neg_times_neg, _site_neg_squared, _site_two_negs, _site_escaping,
)


def _step(draw: st.DrawFn, b: GraphBuilder) -> None:
    kind = draw(st.sampled_from(("single", "single", "twice", "binary", "site")))
    if kind == "site":
        draw(st.sampled_from(SITES))(draw, b, lambda: draw(_operand(b)))
        return
    x = draw(_operand(b))
    if kind == "binary":
        draw(st.sampled_from(BINARY))(b, x, draw(_operand(b)))
    elif kind == "twice":
        _twice(draw, b, draw(st.sampled_from(TWICE)), x)
    else:
        draw(_spelling(draw(st.sampled_from((*SPELLINGS, "transpose")))))(b, x)


@st.composite
def graphs(draw: st.DrawFn, max_steps: int = 10, dead_code: bool = False) -> GeneratedGraph:
    """A random DAG with one to three inputs and several outputs.

    Every value nothing uses becomes an output unless ``dead_code``, in which
    case some of them are left dead (they still count as users for matching).
    """
    b = GraphBuilder(draw(st.integers(1, 3)))
    for _ in range(draw(st.integers(1, max_steps))):
        _step(draw, b)
    sinks = b.sinks()
    if dead_code and len(sinks) > 1:
        sinks = draw(st.lists(st.sampled_from(sinks), min_size=1, unique=True))
    extra = draw(st.lists(st.sampled_from(b.values), max_size=2))
    return b.build(sinks + extra, as_tuple=draw(st.booleans()))


@st.composite
def site_graphs(draw: st.DrawFn, max_sites: int = 6) -> GeneratedGraph:
    """A graph of isolated sites: ``sin`` barriers in, the site, ``cos`` barriers (or the output) out.

    No rule used with it may name ``sin`` or ``cos``; then no two matches
    share a node and no rewrite creates or destroys a match elsewhere.
    """
    b = GraphBuilder(draw(st.integers(1, 2)))
    pool = list(b.inputs)
    outputs: list[Node] = []

    def fresh() -> Node:
        return b.function(torch.sin, draw(st.sampled_from(pool)))

    for _ in range(draw(st.integers(1, max_sites))):
        start = len(b.values)
        draw(st.sampled_from(SITES))(draw, b, fresh)
        for sink in b.sinks(start):
            if draw(st.booleans()):
                pool.append(b.function(torch.cos, sink))
            else:
                outputs.append(sink)
    return b.build(outputs + [n for n in b.sinks() if n not in outputs], as_tuple=True)


# ---------------------------------------------------------------- shape metadata

#: Input dtypes for shape propagation: mixed, they make the graph's values of several dtypes.
METADATA_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


@st.composite
def with_metadata(draw: st.DrawFn, graph: GeneratedGraph) -> GeneratedGraph:
    """``graph`` with ShapeProp metadata (inputs of drawn float dtypes) on every node, on none, or on some:
    each of the others has none, or metadata that says its value is not a tensor."""
    coverage = draw(st.sampled_from(("every", "none", "some")))
    if coverage == "none":
        return graph
    example = [torch.ones(SHAPE, dtype=draw(st.sampled_from(METADATA_DTYPES))) for _ in range(graph.n_inputs)]
    ShapeProp(graph.gm).propagate(*example)
    if coverage == "some":
        for node in graph.gm.graph.nodes:
            kept = draw(st.sampled_from(("shape", "none", "not a tensor")))
            if kept != "shape":
                node.meta.pop("tensor_meta", None)
                node.meta.pop("type", None)
            if kept == "not a tensor":
                node.meta["type"] = int
    return graph


# ---------------------------------------------------------------- inputs

_SPECIAL = (0.0, -0.0, 1.0, -1.0, math.nan, math.inf, -math.inf)


@st.composite
def inputs(draw: st.DrawFn, n_inputs: int, special: bool = True) -> list[torch.Tensor]:
    """``n_inputs`` 3x3 float32 tensors; with ``special``, some elements are 0, -0, nan or +-inf."""
    element = st.floats(-8, 8, width=32)
    if special:
        element = st.one_of(element, st.sampled_from(_SPECIAL))
    size = math.prod(SHAPE)
    return [torch.tensor(draw(st.lists(element, min_size=size, max_size=size)), dtype=torch.float32).reshape(SHAPE)
            for _ in range(n_inputs)]
