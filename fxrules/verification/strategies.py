"""Hypothesis strategies for a rule's inputs: tensors, literals and modules that fit its pattern.

Public, for use in your own hypothesis tests::

    @given(fxrules.verification.strategies.examples(rule))
    def test_my_rule(example): ...

What is drawn for each capture is everything the matcher accepts there (``apply`` matches a node whatever
its dtype, shape or layout), narrowed only by what the rule declares:

* tensors: every dtype (:data:`ALL_DTYPES`) unless the ``given`` type lists some; ranks 0 to 3 and sizes
  that include 0 and 8 (so ``K % 8 == 0`` holds often); size-1 dims that broadcast; contiguous,
  column-major and channels-last layouts, and views into a larger base;
* ``given`` tensor types: their dims (symbolic dims drawn once and shared, ``...`` as 0-2 extra dims);
  an input of a module gets the rank and dtype (float32) that module takes;
* literal captures: from their ``given`` type, or from the annotation of the parameter they are passed to
  (``dim0: int``);
* module captures: built by a factory that sees the module's actual input, with random parameters, in eval
  mode (:func:`register_module`).

Element values are mostly small numbers, sometimes values at the edges of the dtype: ``nan``, ``inf``,
``-inf``, ``-0.0``, halfway values, subnormals, and magnitudes near the dtype's overflow (the integer
dtypes' extremes).  ``@finite_inputs()`` drops the non-finite and near-overflow ones.  Inputs on which the
pattern raises or the guard is false are rejected.

:class:`DrawSettings` narrows what is drawn (the largest side, the dtypes); :class:`Rejections` counts why
inputs were discarded.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import math
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import torch
import torch.fx
from hypothesis import assume, reject
from hypothesis import strategies as st

from fxrules.graph.metadata import MissingMetadata, TensorInfo
from fxrules.lang.ir import (
    Capture,
    DimRest,
    DimSymbol,
    OpKind,
    OpTemplate,
    Rule,
    ScalarType,
    SequenceType,
    TensorType,
    walk,
)
from fxrules.match.guards import GuardError, holds
from fxrules.match.primitives import unify_dims
from fxrules.rewrite.standalone import (
    ConstantsInterpreter,
    PatternGraph,
    PatternGraphs,
    attribute_names,
    input_names,
    replacement_dims,
)

#: Every dtype a graph's tensor may have, float32 first (hypothesis shrinks toward it).
ALL_DTYPES = (torch.float32, torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.complex128)
#: Halfway values (0.5, -1.5, 2.5) are where rounding rules go wrong (round half to even vs floor(x + 0.5)):
#: random floats almost never hit them.
HALFWAY_FLOATS = (0.5, -1.5, 2.5)
FINITE_SPECIALS = (-0.0, 0.0, 1.0, -1.0, 100.0, *HALFWAY_FLOATS)
SPECIAL_FLOATS = (math.nan, math.inf, -math.inf, *FINITE_SPECIALS)
#: Sizes of a dim: small ones twice as likely, 8 and 16 so that guards like ``K % 8 == 0`` hold, and 0.
SIZES = (1, 2, 3, 4, 1, 2, 3, 4, 8, 16, 0)
#: Memory layouts of a drawn tensor, the plain one first (hypothesis shrinks toward it).
LAYOUTS = ("contiguous", "permuted", "view")


def edge_values(dtype: torch.dtype, finite: bool) -> tuple[float, ...]:
    """Values at the edges of ``dtype``: near overflow, subnormal, the extremes of an integer dtype.

    ``finite`` (a rule's ``@finite_inputs()``) keeps the subnormals only: such a rule claims soundness for
    finite inputs of a moderate size, where nothing overflows.
    """
    if dtype == torch.bool:
        return (0, 1)
    if not (dtype.is_floating_point or dtype.is_complex):
        bounds = torch.iinfo(dtype)
        return (bounds.min, bounds.max, bounds.max - 1, 0, -1 if bounds.min < 0 else 1)
    info = torch.finfo(dtype)
    subnormal = (info.smallest_normal / 2, -info.smallest_normal / 4)
    if finite:
        return subnormal
    return (*subnormal, info.max, -info.max, info.max / 2, float(info.max) * 0.75)


#: The largest magnitude drawn for a rule with ``@finite_inputs()``, which claims finite inputs of a moderate size.
MODERATE_MAGNITUDE = max(abs(value) for value in FINITE_SPECIALS)


def in_drawn_domain(rule: Rule, values: Mapping[str, Any], dtypes: tuple[torch.dtype, ...] | None = None) -> bool:
    """Whether ``values`` are inputs of the kind verify draws for ``rule``: tensors and dtypes of ``dtypes``
    (the draw settings' dtypes; None: any), any value, except that a rule with ``@finite_inputs()`` takes
    only finite floats of a moderate size (:data:`MODERATE_MAGNITUDE`)."""
    if dtypes is not None and any((value.dtype if isinstance(value, torch.Tensor) else value) not in dtypes
                                  for value in values.values() if isinstance(value, torch.Tensor | torch.dtype)):
        return False
    if not rule.finite_inputs:
        return True
    floats = [value for value in values.values()
              if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())]
    return all(bool((torch.view_as_real(t) if t.is_complex() else t).double().abs().le(MODERATE_MAGNITUDE).all())
               for t in floats)  # NaN is not <= anything


Draw = Callable[[st.SearchStrategy[Any]], Any]
ModuleFactory = Callable[[Draw, torch.Tensor], torch.nn.Module]


@attrs.frozen
class ModuleSpec:
    """How to build a module capture: the input ranks it takes and a factory fitting an actual input."""

    ranks: tuple[int, ...]
    factory: ModuleFactory


_MODULES: dict[type, ModuleSpec] = {}


def register_module(cls: type, ranks: tuple[int, ...], factory: ModuleFactory) -> None:
    """Teach input generation to build ``cls``: ``factory(draw, input_tensor) -> module`` for inputs of ``ranks``."""
    _MODULES[cls] = ModuleSpec(ranks, factory)


class NoGeneratorError(LookupError):
    """A capture cannot be drawn: no module factory is registered for its type, or the draw settings leave
    none of its declared dtypes."""


@attrs.frozen
class DrawSettings:
    """What may be drawn: the largest size of a dim, the largest rank of an untyped tensor and, when given, the
    only dtypes a tensor capture takes (a declared capture keeps those of its declared dtypes among them)."""

    max_side: int = 8
    max_rank: int = 3
    dtypes: tuple[torch.dtype, ...] | None = None

    @property
    def sides(self) -> st.SearchStrategy[int]:
        """The size of one drawn dim: often small (1 to 4), else up to ``max_side``, and often a multiple of 8
        (a guard such as ``K % 8 == 0``, common in rules for fused kernels, must be satisfiable)."""
        return _sides(self.max_side)

    def narrow(self, name: str, accepted: tuple[torch.dtype, ...]) -> tuple[torch.dtype, ...]:
        """The dtypes capture ``name`` is drawn with, of those it ``accepted``."""
        if self.dtypes is None:
            return accepted
        kept = tuple(dtype for dtype in accepted if dtype in self.dtypes)
        if not kept:
            raise NoGeneratorError(f"{name} is declared as {_dtype_names(accepted)}; the dtypes to draw "
                                   f"({_dtype_names(self.dtypes)}) include none of them")
        return kept


@functools.cache
def _sides(max_side: int) -> st.SearchStrategy[int]:
    sizes = [st.integers(1, min(max_side, 4)), st.integers(1, max_side)]
    aligned = [size for size in (8, 16) if size <= max_side]
    return st.one_of(*sizes, *([st.sampled_from(aligned)] if aligned else []))


# Strategies drawn from on every example are built once: hypothesis validates each new strategy object on its
# first draw, which cost more than the draws themselves.
_BOOLEANS = st.booleans()
_SEEDS = st.integers(0, 2**16)
_LAYOUTS = st.sampled_from(LAYOUTS)
_TENSOR_BASES = st.sampled_from(("zeros", "random", "random", "edge"))
_BROADCASTS = st.sampled_from(("same", "same", "same", "suffix", "ones"))


_SLICE_BOUNDS = st.one_of(st.none(), st.integers(-3, 3))
_REDUCTIONS = st.sampled_from(("mean", "sum", "none"))
_INT_LISTS = st.lists(st.integers(-3, 3), min_size=1, max_size=2)
_SCALARS = st.one_of(st.integers(-3, 3), st.floats(-4, 4))  # a literal passed as a Scalar


@functools.cache
def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@functools.cache
def _dim_lists(rank: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True)


@functools.cache
def _literal_floats(finite: bool) -> st.SearchStrategy[float]:
    """A float literal: ordinary, special, or at float32's edges (only finite ones for ``@finite_inputs()``)."""
    specials = (*(FINITE_SPECIALS if finite else SPECIAL_FLOATS), *edge_values(torch.float32, finite))
    return st.one_of(st.floats(-4, 4), st.sampled_from(specials))


@functools.cache
def _sizes(max_side: int) -> st.SearchStrategy[int]:
    return st.sampled_from(tuple(s for s in SIZES if s <= max_side))


@functools.cache
def _shared_dtypes(dtypes: tuple[torch.dtype, ...]) -> st.SearchStrategy[torch.dtype]:
    """The dtype most tensors of an example take: float32 half the time (the dtype most rules are written
    for), else any of ``dtypes``."""
    return st.one_of(st.just(torch.float32) if torch.float32 in dtypes else st.nothing(), st.sampled_from(dtypes))


def _dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(str(dtype).removeprefix("torch.") for dtype in dtypes)


@attrs.define
class Rejections:
    """Why drawn inputs were discarded, with the last error of each kind: how verify explains a rule that
    (almost) no input reaches."""

    pattern_raised: int = 0
    guard_raised: int = 0
    guard_false: int = 0
    pattern_error: str = ""
    guard_error: str = ""


def module_spec(cls: type) -> ModuleSpec:
    for base in cls.__mro__:
        if base in _MODULES:
            return _MODULES[base]
    raise NoGeneratorError(f"no input generator for {cls.__name__}: "
                           "register one with fxrules.verification.strategies.register_module")


@attrs.frozen
class Example:
    """One generated input of a rule: graph inputs by name, and the module captures."""

    values: Mapping[str, Any]  # graph inputs and Attr captures, by capture name
    modules: Mapping[str, torch.nn.Module]
    seed: int
    attributes: tuple[str, ...] = ()  # which of the values are Attr captures (buffers, not inputs)
    expected: Any = None  # what the pattern computed on these inputs (it ran to instantiate the modules)
    left: Mapping[str, Any] = attrs.Factory(dict)  # the graph inputs as the pattern left them (it ran on these)
    #: the graph the pattern ran as (it reads the constants from :meth:`constants` through a
    #: :class:`~fxrules.rewrite.standalone.ConstantsInterpreter`), shared by every example of the rule
    pattern: PatternGraph | None = attrs.field(default=None, eq=False, repr=False)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """What hypothesis prints for a drawn example: the short description, not every field."""
        printer.text("; ".join(self.describe()))

    def constants(self) -> dict[str, torch.nn.Module | torch.Tensor]:
        """What the standalone graphs' root holds: module captures and Attr tensors."""
        return {**self.modules, **{name: self.values[name] for name in self.attributes}}

    def describe(self) -> list[str]:
        """One line per input: its dtype, shape, strides and whether it is a view, then its values."""
        lines = [f"{name}: {describe_tensor(value)}" if isinstance(value, torch.Tensor) else f"{name} = {value!r}"
                 for name, value in self.values.items()]
        lines += [f"{name} = {module!r} (parameters from torch.manual_seed({self.seed}))"
                  for name, module in self.modules.items()]
        return lines


def describe_tensor(tensor: torch.Tensor) -> str:
    """``Tensor[2, 3] torch.int64 strides (1, 2), a view at offset 1 of a base of 12 = [[...]]``."""
    layout = "" if tensor.is_contiguous() else f" strides {tensor.stride()}"
    if tensor._base is not None:
        layout += f", a view at offset {tensor.storage_offset()} of a base of {tensor._base.numel()}"
    return f"Tensor{list(tensor.shape)} {tensor.dtype}{layout} = {_show_tensor(tensor)}"


def _show_tensor(tensor: torch.Tensor) -> str:
    if tensor.numel() > 24:
        return f"<{tensor.numel()} values>"
    return repr(tensor.tolist())


# ---------------------------------------------------------------- roles of captures


def _role_of_parameter(parameter: inspect.Parameter) -> str:
    """How to draw a literal passed to ``parameter``: by its annotation, refined by its name.

    A dim is drawn among the input's dims, a size as a reshape of the input's shape, a permutation as one:
    drawn at random, such literals would almost never be valid and the examples would be rejected.
    """
    annotation, name = parameter.annotation, parameter.name
    text = str(annotation)
    if "Tensor" in text or annotation is torch.Tensor:
        if name == "running_var":  # a variance: drawn without negative values, as a batch norm keeps it
            return "variance"
        return "tensor_list" if "List" in text else "tensor"
    if "List[int]" in text or "list[int]" in text:
        if name in {"size", "shape"}:
            return "shape"
        if name in {"stride", "dilation", "padding", "output_padding"}:  # of a convolution or pooling
            return name
        return "permutation" if name == "dims" else "dims" if "dim" in name else "int_list"
    if annotation is int or text in {"int", "Optional[int]", "typing.Optional[int]"}:
        if "dtype" in name:
            return "dtype"
        if name == "groups":
            return "groups"
        return "dim" if "dim" in name else "int"
    if annotation is float or "float" in text:
        return "float"
    if annotation is bool:
        return "bool"
    return "tensor"


def capture_roles(rule: Rule) -> dict[str, str]:
    """What each untyped capture should be drawn as, from the parameters it is passed to."""
    roles: dict[str, str] = {}
    for output in rule.pattern:
        for template in walk(output):
            if not isinstance(template, OpTemplate) or template.signature is None:
                continue
            parameters = template.signature.richest.parameters
            # compared as written (no binding): the richest overload's parameters, by position
            bound = template.bound or dict(zip(parameters, template.args, strict=False))
            for name, argument in bound.items():
                if isinstance(argument, Capture) and argument.name not in roles and name in parameters:
                    roles[argument.name] = _role_of_parameter(parameters[name])
            if getattr(template.target, "__name__", "") == "getitem":
                index = template.args[1] if len(template.args) > 1 else None
                if isinstance(index, Capture):
                    roles[index.name] = "int"
    return roles


def module_input_ranks(rule: Rule) -> dict[str, tuple[int, ...]]:
    """Captures passed straight into a module capture take that module's input ranks."""
    ranks: dict[str, tuple[int, ...]] = {}
    for output in rule.pattern:
        for template in walk(output):
            if isinstance(template, OpTemplate) and template.kind is OpKind.MODULE and template.args:
                first = template.args[0]
                if isinstance(first, Capture) and isinstance(template.target, type):
                    ranks[first.name] = module_spec(template.target).ranks
    return ranks


@attrs.frozen
class _Captures:
    """What is fixed per rule about drawing its inputs, derived once rather than for every example: walking
    the rule's templates for each drawn value once took most of the drawing time."""

    rule: Rule
    inputs: tuple[str, ...]  # graph inputs, in the standalone graphs' order
    attributes: tuple[str, ...]  # buffers of the standalone graphs' root
    dims: tuple[str, ...]  # symbolic dims the replacement uses as values
    roles: Mapping[str, str]
    module_ranks: Mapping[str, tuple[int, ...]]

    @classmethod
    def of(cls, rule: Rule) -> _Captures:
        return cls(rule, input_names(rule), attribute_names(rule), replacement_dims(rule), capture_roles(rule),
                   module_input_ranks(rule))


# ---------------------------------------------------------------- values


@functools.cache
def _element(dtype: torch.dtype, finite: bool) -> st.SearchStrategy[Any]:
    if dtype == torch.bool:
        return st.booleans()
    edges = st.sampled_from(edge_values(dtype, finite))
    if not (dtype.is_floating_point or dtype.is_complex):
        return st.one_of(st.integers(-5, 5), edges)
    specials = st.sampled_from(FINITE_SPECIALS if finite else SPECIAL_FLOATS)
    # ties drawn on their own too: the edges and specials around them would make them rare
    return st.one_of(st.floats(-4, 4, width=32), specials, st.sampled_from(HALFWAY_FLOATS), edges)


def _carrier(dtype: torch.dtype) -> torch.dtype:
    """The dtype a tensor of ``dtype`` is built in: wide enough for every value drawn for it."""
    if dtype.is_complex:
        return torch.complex128
    return torch.float64 if dtype.is_floating_point else torch.int64


def _layout(draw: Draw, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values in a drawn memory layout: as is; permuted in memory (channels-last for 4-D,
    column-major for 2-D and more); or a view into a larger base whose other elements differ (so that a
    write outside the view shows)."""
    layout = draw(_LAYOUTS)
    if layout == "permuted" and tensor.ndim == 4:
        return tensor.contiguous(memory_format=torch.channels_last)
    if layout == "permuted" and tensor.ndim >= 2:  # not a view: its own storage, laid out column-major
        strides = tensor.transpose(-1, -2).contiguous().transpose(-1, -2).stride()
        return torch.empty_strided(tensor.shape, strides, dtype=tensor.dtype).copy_(tensor)
    if layout != "contiguous":
        base = torch.stack([torch.ones_like(tensor), tensor], dim=-1)
        return base[..., 1]
    return tensor


def replica(value: Any) -> Any:
    """A copy of ``value`` with the same strides (and, for a view, a base of its own in the same place):
    what each side of a rule runs on, so that neither sees what the other wrote."""
    if isinstance(value, list | tuple):
        return type(value)(replica(v) for v in value)
    if not isinstance(value, torch.Tensor):
        return value
    if value._base is None:
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype).copy_(value)
    base = value._base.clone()
    return base.as_strided(value.shape, value.stride(), value.storage_offset())


def _reshaped(draw: Draw, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape with as many elements as ``base``: itself, reversed, flattened, with -1, or two dims merged."""
    options = [base, base[::-1], (math.prod(base),), (-1,)]
    if len(base) > 1:
        options.append((base[0] * base[1], *base[2:]))
        options.append((*base[:-1], -1))
    return tuple(draw(st.sampled_from(options)))


def _broadcast_variant(draw: Draw, base: tuple[int, ...]) -> tuple[int, ...]:
    kind = draw(_BROADCASTS)
    if kind == "suffix" and base:
        return base[draw(_integers(1, len(base))):]
    if kind == "ones" and base:
        return tuple(1 if draw(_BOOLEANS) else size for size in base)
    return base


@attrs.define
class _Drawer:
    """Draws every input of one rule for one example.

    Shapes share what they can: one base shape for untyped tensors, one size per symbolic dim, one tuple
    of leading dims for every ``...``, and one dtype that most tensors take, so that most draws are inputs
    the pattern accepts.
    """

    draw: Draw
    captures: _Captures
    settings: DrawSettings
    dims: dict[str, int] = attrs.Factory(dict)
    base: tuple[int, ...] = ()
    rest: tuple[int, ...] | None = None
    dtype: torch.dtype = torch.float32

    @property
    def rule(self) -> Rule:
        return self.captures.rule

    def values(self) -> dict[str, Any]:
        square = self.draw(_BOOLEANS)
        rank = self.draw(_integers(0, self.settings.max_rank))
        side = self.size()
        self.base = tuple(side if square else self.size() for _ in range(rank))
        self.dtype = self.draw(_shared_dtypes(self.untyped_dtypes))
        captures = self.captures
        values = {name: self.value(name, captures.roles.get(name, "tensor"), captures.module_ranks.get(name))
                  for name in (*captures.inputs, *captures.attributes) if name not in captures.dims}
        for name in captures.dims:  # drawn with the tensors whose types name them
            values[name] = self.dims[name] if name in self.dims else self.draw(self.settings.sides)
        return values

    @property
    def untyped_dtypes(self) -> tuple[torch.dtype, ...]:
        """What a tensor capture without declared dtypes takes: every dtype, or those of the settings."""
        return self.settings.dtypes or ALL_DTYPES

    def size(self) -> int:
        return self.draw(_sizes(self.settings.max_side))

    def symbol_size(self) -> int:
        """A fresh size, or half the time one another symbol already has: a pattern often needs two dims to
        agree (the input channels of a convolution and of its weight), and independent draws rarely do."""
        if self.dims and self.draw(_BOOLEANS):
            return self.draw(st.sampled_from(tuple(sorted(set(self.dims.values())))))  # a tuple: cached
        return self.size()

    def tensor_dtype(self, allowed: tuple[torch.dtype, ...] = ()) -> torch.dtype:
        """One of ``allowed`` (every dtype when empty): mostly the example's shared dtype, sometimes another
        (mixed dtypes promote)."""
        if allowed:
            return self.dtype if self.dtype in allowed else self.draw(st.sampled_from(allowed))
        dtypes = self.untyped_dtypes
        return self.dtype if self.draw(_integers(0, 7)) else self.draw(st.sampled_from(dtypes))

    def value(self, name: str, role: str, module_ranks: tuple[int, ...] | None) -> Any:
        declared = self.rule.types.get(name)
        if isinstance(declared, TensorType) and declared.or_none and self.draw(_BOOLEANS):
            return None
        attribute = name in self.captures.attributes  # a buffer that helpers read: contiguous
        if isinstance(declared, TensorType):
            dtype = self.tensor_dtype(self.settings.narrow(name, declared.dtypes) if declared.dtypes else ())
            shape = self.shape(declared) if declared.dims is not None else _broadcast_variant(self.draw, self.base)
            tensor = self.tensor(shape, dtype, laid_out=not attribute)
            if role == "variance" and not (dtype == torch.bool or dtype.is_complex):  # as a batch norm keeps it
                return tensor.abs()
            return tensor
        if isinstance(declared, ScalarType):
            return self.literal(declared.name)
        if isinstance(declared, SequenceType) and declared.element != "Tensor":  # a literal: a shape, say
            items = self.draw(st.lists(st.integers(-2, 4), min_size=0, max_size=3))
            return tuple(items) if declared.name == "tuple" else items
        if isinstance(declared, SequenceType) or role == "tensor_list":
            count = self.draw(_integers(1, 3))
            return [self.tensor(self.base, self.tensor_dtype()) for _ in range(count)]
        if role not in {"tensor", "tensor_list", "variance"} and declared is None:
            return self.literal(role)
        if module_ranks is not None:  # a module's parameters are float32: other dtypes only raise
            rank = self.draw(st.sampled_from(module_ranks))
            return self.tensor(tuple(self.draw(self.settings.sides) for _ in range(rank)), torch.float32)
        return self.tensor(_broadcast_variant(self.draw, self.base), self.tensor_dtype(), laid_out=not attribute)

    def shape(self, declared: TensorType) -> tuple[int, ...]:
        shape: list[int] = []
        for dim in declared.dims or ():
            if isinstance(dim, DimSymbol):
                if dim.name not in self.dims:
                    self.dims[dim.name] = self.symbol_size()
                shape.append(self.dims[dim.name])
            elif isinstance(dim, DimRest):
                if self.rest is None:
                    count = self.draw(_integers(0, 2))
                    self.rest = tuple(self.draw(self.settings.sides) for _ in range(count))
                shape += self.rest
            else:
                shape.append(dim)
        return tuple(shape)

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype, laid_out: bool = True) -> torch.Tensor:
        """Zeros, small seeded random values, or values near the dtype's overflow (or subnormal), with a few
        drawn elements (often nan, inf, -0.0 or an edge value) set on top; then laid out in memory.

        Drawing every element through hypothesis is slow for 4-D inputs; a seed plus a few overrides is fast,
        still varied, and shrinks to zeros with the one element that matters.
        """
        count = math.prod(shape)
        finite = self.rule.finite_inputs
        base = self.draw(_TENSOR_BASES)
        generator = torch.Generator().manual_seed(self.draw(_SEEDS))
        carrier = _carrier(dtype)
        if base == "zeros" or (dtype == torch.bool and base == "edge"):
            tensor = torch.zeros(count, dtype=carrier)
        elif not (dtype.is_floating_point or dtype.is_complex):
            low, high = (0, 2) if dtype == torch.bool else (0, 6) if dtype == torch.uint8 else (-5, 6)
            tensor = torch.randint(low, high, (count,), generator=generator)
            if base == "edge":
                tensor *= torch.iinfo(dtype).max // 8
        else:
            tensor = torch.randn(count, generator=generator, dtype=carrier) * 2
            if base == "edge":  # magnitudes near overflow, or subnormal ones
                tensor *= max(abs(v) for v in edge_values(dtype, finite)) / 8
        if count:
            element = _element(dtype, finite)
            for _ in range(self.draw(_integers(0, min(count, 4)))):
                tensor[self.draw(_integers(0, count - 1))] = self.draw(element)
        tensor = torch.empty(shape, dtype=dtype).copy_(tensor.reshape(shape))  # not a view of the flat tensor
        return _layout(self.draw, tensor) if laid_out else tensor

    def literal(self, kind: str) -> Any:
        rank = max(len(self.base), 1)
        draw = self.draw
        strategies: dict[str, Callable[[], Any]] = {
            "int": lambda: draw(_integers(-3, 3)),
            "dim": lambda: draw(_integers(-rank, rank - 1)),
            "dims": lambda: draw(_dim_lists(rank)),
            "permutation": lambda: tuple(draw(st.permutations(range(len(self.base))))),
            "shape": lambda: _reshaped(draw, self.base),
            "dtype": lambda: draw(st.sampled_from(self.untyped_dtypes)),
            "slice": lambda: slice(draw(_SLICE_BOUNDS), draw(_SLICE_BOUNDS)),
            "float": lambda: draw(_literal_floats(self.rule.finite_inputs)),
            "bool": lambda: draw(_BOOLEANS),
            "str": lambda: draw(_REDUCTIONS),
            "int_list": lambda: draw(_INT_LISTS),
            # one value for every spatial dim, as convolutions accept it
            "stride": lambda: [draw(_integers(1, 2))],
            "dilation": lambda: [draw(_integers(1, 2))],
            "padding": lambda: [draw(_integers(0, 1))],
            "output_padding": lambda: [0],  # only a transposed convolution may have another
            "groups": lambda: draw(_integers(1, 2)),
        }
        return strategies.get(kind, lambda: draw(_SCALARS))()


class _Instantiating(ConstantsInterpreter):
    """Runs a pattern graph, building each module capture on its first call from its actual input.

    It also keeps the values of the pattern's named interior nodes, which guards may read.
    """

    def __init__(self, pattern: PatternGraph, attributes: Mapping[str, Any], draw: Draw, types: Mapping[str, Any],
                 seed: int) -> None:
        super().__init__(pattern.module, attributes)
        self.built: dict[str, torch.nn.Module] = {}
        self.draw = draw
        self.types = types
        self.seed = seed
        self.watched = {node: name for name, node in pattern.interior.items()}
        self.interior: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n in self.watched:
            self.interior[self.watched[n]] = result
        return result

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        name = str(target)
        if name not in self.built:
            declared = self.types[name]
            torch.manual_seed(self.seed + len(self.built))
            module = module_spec(declared.cls).factory(self.draw, args[0])
            module.eval()
            self.built[name] = module
        return self.built[name](*args, **kwargs)


@attrs.frozen
class PatternRun:
    """The pattern run on one example: its output, its inputs as it left them, the modules it built and the
    interior values guards read."""

    output: Any
    inputs: Mapping[str, Any]
    modules: Mapping[str, torch.nn.Module]
    interior: Mapping[str, Any]
    pattern: PatternGraph


def _run_pattern(captures: _Captures, pattern: PatternGraph, draw: Draw, values: Mapping[str, Any], seed: int,
                 rejections: Rejections) -> PatternRun | None:
    """Run the pattern (its graph for the example's choice of alternatives) on replicas of the inputs; None
    where it raises (the input is outside the rule's domain)."""
    attributes = {name: values[name] for name in captures.attributes}
    runner = _Instantiating(pattern, attributes, draw, captures.rule.types, seed)
    inputs = {name: replica(values[name]) for name in captures.inputs}
    try:
        with torch.no_grad():
            output = runner.run(*inputs.values())
    except Exception as error:
        rejections.pattern_raised += 1
        rejections.pattern_error = f"{type(error).__name__}: {error}"
        return None
    return PatternRun(output, inputs, runner.built, runner.interior, pattern)


def _completed(captures: _Captures, run: PatternRun, values: Mapping[str, Any], dims: Mapping[str, int], seed: int,
               rejections: Rejections) -> Example | None:
    """The example of ``values`` on which the pattern ran as ``run``, or None where the guard does not allow it."""
    dims = dict(dims)
    for name, declared in captures.rule.types.items():
        if isinstance(declared, TensorType) and declared.dims and values.get(name) is not None:
            dims.update(_dims_of(declared, values[name]))
    if not guard_allows(captures.rule, {**values, **run.interior}, run.modules, dims, rejections):
        return None
    return Example(values, run.modules, seed, captures.attributes, run.output, run.inputs, run.pattern)


def guard_allows(rule: Rule, values: Mapping[str, Any], modules: Mapping[str, torch.nn.Module],
                 dims: Mapping[str, int], rejections: Rejections | None = None) -> bool:
    """Evaluate the rule's guard on concrete inputs, interior values and modules.

    Conditions on the graph's structure (``num_users``, ``is_computed``, ``is_mutated``) protect against
    aliasing, not values: verification, which checks values, takes them as holding (one user, computed,
    not mutated). A guard that raises does not allow the input, as ``apply`` skips such a match.
    """
    rejections = rejections if rejections is not None else Rejections()
    if rule.guard is None:
        return True
    scope: dict[str, Any] = {**dims, **modules}
    for name, value in values.items():
        scope[name] = _assumed_structure(value) if isinstance(value, torch.Tensor) else value
    try:
        allowed = holds(rule.guard, lambda name: scope[name])
    except (GuardError, MissingMetadata, KeyError) as error:
        rejections.guard_raised += 1
        rejections.guard_error = str(error)
        return False
    rejections.guard_false += not allowed
    return allowed


def examples(rule: Rule, settings: DrawSettings | None = None, choice: Mapping[int, int] | None = None,
             rejections: Rejections | None = None) -> st.SearchStrategy[Example]:
    """Inputs of ``rule`` within ``settings`` that its pattern (with the ``choice`` of its alternatives)
    accepts and its guard allows, each with the pattern's output on it; ``rejections`` counts the others."""
    settings = settings or DrawSettings()
    rejections = rejections if rejections is not None else Rejections()
    captures = _Captures.of(rule)
    patterns = PatternGraphs(rule, choice)

    # The rule is closed over, not passed as an argument: hypothesis would pretty-print the whole
    # rule IR into the strategy's repr on every example (which once cost minutes per rule).
    @st.composite
    def example(draw: Draw) -> Example:
        drawer = _Drawer(draw, captures, settings)
        values = drawer.values()
        seed = draw(_SEEDS)
        run = _run_pattern(captures, patterns.get(values), draw, values, seed, rejections)
        completed = None if run is None else _completed(captures, run, values, drawer.dims, seed, rejections)
        if completed is None:  # the pattern rejects the input, or the guard does: outside the rule's domain
            reject()
        return completed

    return example()


def example_of(rule: Rule, values: Mapping[str, Any], choice: Mapping[int, int] | None = None) -> Example | None:
    """The example of given graph inputs (a rule without module captures), completed as a drawn one is (the
    pattern's output and the inputs as it leaves them); None where the pattern raises or the guard does not
    allow them."""
    captures = _Captures.of(rule)
    run = _run_pattern(captures, PatternGraphs(rule, choice).get(values), _no_modules, values, 0, Rejections())
    return None if run is None else _completed(captures, run, values, {}, 0, Rejections())


def _no_modules(strategy: st.SearchStrategy[Any]) -> Any:
    raise NoGeneratorError("example_of builds no module capture: give a rule without one")


@attrs.define
class _Pin:
    """Who is inside :func:`without_local_constants` (concurrent callers pin once), and what it replaced."""

    lock: threading.Lock = attrs.Factory(threading.Lock)
    depth: int = 0
    replaced: tuple[Any, ...] = ()


_PIN = _Pin()
#: The internals of hypothesis.internal.conjecture.providers that without_local_constants replaces.
_PINNED_NAMES = ("_get_local_constants", "CONSTANTS_CACHE")


@contextlib.contextmanager
def without_local_constants() -> Iterator[bool]:
    """While inside, hypothesis draws mix in no number read from the caller's own source files.

    Hypothesis (6.x) now and then draws a constant found in the *local* modules that are imported (any module
    outside site-packages and the standard library: the user's code, fxrules itself run from a checkout), so
    the same rule and seed would draw other inputs under pytest than on the command line, or after an
    unrelated import.  This pins its private module cache of those constants to empty, and gives it a
    private cache of the permitted constants (its own mixes the local ones in), restoring both on the way
    out.  Yields whether the pin holds: if a later hypothesis renames these internals, verify still runs,
    unpinned, and the test of draw determinism fails to say so.
    """
    try:
        providers = importlib.import_module("hypothesis.internal.conjecture.providers")
        current = tuple(getattr(providers, name) for name in _PINNED_NAMES)
        empty, cache = providers.Constants(), type(current[1])(1024)
    except (ImportError, AttributeError, TypeError):
        yield False
        return
    with _PIN.lock:
        if not _PIN.depth:
            _PIN.replaced = current
            _assign(providers, (lambda: empty), cache)
        _PIN.depth += 1
    try:
        yield True
    finally:
        with _PIN.lock:
            _PIN.depth -= 1
            if not _PIN.depth:
                _assign(providers, *_PIN.replaced)


def _assign(module: types.ModuleType, *values: Any) -> None:
    for name, value in zip(_PINNED_NAMES, values, strict=True):
        setattr(module, name, value)


def _assumed_structure(value: torch.Tensor) -> TensorInfo:
    info = TensorInfo(tuple(value.shape), value.dtype, value.device, value.requires_grad, users=1, computed=True)
    info.mutated = False
    return info


def _dims_of(declared: TensorType, tensor: torch.Tensor) -> dict[str, int]:
    return unify_dims(declared.dims or (), tuple(tensor.shape), {}) or {}


# ---------------------------------------------------------------- bundled module factories


def _conv(cls: type, spatial: int) -> ModuleFactory:
    def factory(draw: Draw, x: torch.Tensor) -> torch.nn.Module:
        channels = x.shape[1] if x.ndim == spatial + 2 else x.shape[0]
        groups = draw(st.sampled_from([g for g in (1, 2, 3) if channels % g == 0]))
        out = groups * draw(st.integers(1, 3))
        smallest = min(x.shape[-spatial:])
        kernel = draw(st.integers(1, max(1, min(3, smallest))))
        return cls(channels, out, kernel, groups=groups, bias=draw(st.booleans()),
                   padding=draw(st.integers(0, 1)), stride=draw(st.integers(1, 2)))

    return factory


def _batch_norm(cls: type) -> ModuleFactory:
    def factory(draw: Draw, x: torch.Tensor) -> torch.nn.Module:
        features = x.shape[1] if x.ndim > 1 else x.shape[0]
        bn = cls(features)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
        return bn

    return factory


def _last_dim(build_module: Callable[[Draw, int], torch.nn.Module]) -> ModuleFactory:
    def factory(draw: Draw, x: torch.Tensor) -> torch.nn.Module:
        return build_module(draw, x.shape[-1] if x.ndim else 1)

    return factory


def _group_norm(draw: Draw, x: torch.Tensor) -> torch.nn.Module:
    channels = x.shape[1]
    groups = draw(st.sampled_from([g for g in (1, 2, 3) if channels % g == 0]))
    return torch.nn.GroupNorm(groups, channels)


def _embedding(draw: Draw, x: torch.Tensor) -> torch.nn.Module:
    assume(not x.dtype.is_floating_point and bool((x >= 0).all()))
    return torch.nn.Embedding(int(x.max()) + 1 if x.numel() else 1, draw(st.integers(1, 4)))


def _plain(cls: type, **kwargs: Any) -> ModuleFactory:
    return lambda draw, x: cls(**kwargs)


register_module(torch.nn.Conv1d, (3,), _conv(torch.nn.Conv1d, 1))
register_module(torch.nn.Conv2d, (4,), _conv(torch.nn.Conv2d, 2))
register_module(torch.nn.Conv3d, (5,), _conv(torch.nn.Conv3d, 3))
register_module(torch.nn.BatchNorm1d, (2, 3), _batch_norm(torch.nn.BatchNorm1d))
register_module(torch.nn.BatchNorm2d, (4,), _batch_norm(torch.nn.BatchNorm2d))
register_module(torch.nn.BatchNorm3d, (5,), _batch_norm(torch.nn.BatchNorm3d))
register_module(torch.nn.Linear, (1, 2, 3),
                _last_dim(lambda draw, n: torch.nn.Linear(n, draw(st.integers(1, 4)), bias=draw(st.booleans()))))
register_module(torch.nn.LayerNorm, (1, 2, 3), _last_dim(lambda draw, n: torch.nn.LayerNorm(n)))
register_module(torch.nn.GroupNorm, (3, 4), _group_norm)
register_module(torch.nn.Embedding, (1, 2), _embedding)
register_module(torch.nn.Softmax, (1, 2, 3),
                lambda draw, x: torch.nn.Softmax(dim=draw(st.integers(-x.ndim, x.ndim - 1))))
register_module(torch.nn.Dropout, (1, 2, 3), lambda draw, x: torch.nn.Dropout(draw(st.floats(0, 0.9))))
for _activation in (torch.nn.ReLU, torch.nn.GELU, torch.nn.SiLU, torch.nn.Sigmoid, torch.nn.Tanh, torch.nn.Identity,
                    torch.nn.Flatten, torch.nn.ReLU6, torch.nn.LeakyReLU, torch.nn.Hardswish):
    register_module(_activation, (1, 2, 3, 4), _plain(_activation))
