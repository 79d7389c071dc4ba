"""Driving a real model from the command line: inputs from specs, three ways to trace, a loadable result.

An input spec is ``DTYPE[SIZES]`` with an optional value range: ``int64[2,16]`` (token ids),
``int64[2,16]:0..1000`` (ids from 0 to 999: the range is half-open, as ``torch.randint``'s),
``float32[4,3]``, ``float32[8]:-1..1``, ``bool[2,16]``, ``float32[]`` (a 0-dim tensor).  Values are drawn
from a fixed seed, so two runs see the same inputs.  Without a range, integers are drawn from 0..10 and
floats from the standard normal distribution.

A model is traced with ``torch.fx.symbolic_trace`` (``symbolic``), ``torch.export.export`` (``export``:
an aten-level program) or ``torch._dynamo.export`` (``dynamo``: the torch-level graph a ``torch.compile``
backend sees).  The rewritten result is saved as ``torch.export.save`` of an ``ExportedProgram`` (a
``.pt2`` file, loaded back with ``torch.export.load``), or as ``GraphModule.to_folder`` (any other path:
a folder holding ``module.py`` and the weights).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

from fxrules.diagnostics import FxrError, FxrUsageError, did_you_mean
from fxrules.engine.report import counted
from fxrules.verification.options import DTYPES

#: ``--trace``: how a model becomes a graph.
TRACES = ("symbolic", "export", "dynamo")
#: The most elements an input may have (a typo such as ``int64[20000,20000]`` would take gigabytes).
MAX_ELEMENTS = 1 << 28
#: The range integers are drawn from when a spec gives none (half-open).
DEFAULT_INTEGER_RANGE = (0, 10)
SEED = 0

_SPEC = re.compile(r"(?P<dtype>\w+)\[(?P<sizes>[^\]]*)\](?::(?P<low>[^.]+)\.\.(?P<high>.+))?")
_NUMBER = re.compile(r"-?\d+(\.\d*)?")
Traced = torch.fx.GraphModule | ExportedProgram


class FxrModelError(FxrError):
    """The model could not be built, traced or saved (its own code raised)."""


def example_inputs(specs: Sequence[str], seed: int = SEED) -> list[torch.Tensor]:
    """One tensor per spec, drawn from ``seed``; a bad spec is an :class:`FxrUsageError` naming it."""
    generator = torch.Generator().manual_seed(seed)
    return [_example_input(spec, generator) for spec in specs]


def _example_input(spec: str, generator: torch.Generator) -> torch.Tensor:
    found = _SPEC.fullmatch(spec.replace(" ", ""))
    if found is None:
        raise FxrUsageError(f"--input {spec!r}: write DTYPE[SIZES] with an optional range, as in "
                            "int64[2,16] or int64[2,16]:0..1000")
    name, sizes_text, low, high = found["dtype"], found["sizes"], found["low"], found["high"]
    if name not in DTYPES:
        hint = did_you_mean(name, DTYPES)
        raise FxrUsageError(f"--input {spec!r}: unknown dtype {name!r}" + (f"; {hint}" if hint else "")
                            + f" (known: {', '.join(DTYPES)})")
    dtype = DTYPES[name]
    sizes = _sizes(spec, sizes_text)
    if low is None or high is None:
        return _draw(dtype, sizes, None, generator)
    if dtype is torch.bool or not (_NUMBER.fullmatch(low) and _NUMBER.fullmatch(high)):
        raise FxrUsageError(f"--input {spec!r}: a range is LOW..HIGH of two numbers, for a number dtype")
    bounds = (float(low), float(high)) if dtype.is_floating_point or dtype.is_complex else (int(float(low)),
                                                                                             int(float(high)))
    if not bounds[0] < bounds[1]:
        raise FxrUsageError(f"--input {spec!r}: the range {low}..{high} is empty (it holds LOW, not HIGH)")
    if not (dtype.is_floating_point or dtype.is_complex):
        limits = torch.iinfo(dtype)
        if bounds[0] < limits.min or bounds[1] - 1 > limits.max:
            raise FxrUsageError(f"--input {spec!r}: the range {low}..{high} does not fit {name} "
                                f"({limits.min}..{limits.max + 1})")
    return _draw(dtype, sizes, bounds, generator)


def _sizes(spec: str, text: str) -> tuple[int, ...]:
    parts = [part for part in text.split(",")] if text else []
    if not all(part.isdigit() for part in parts):
        raise FxrUsageError(f"--input {spec!r}: sizes are whole numbers separated by commas, as in [2,16]")
    sizes = tuple(int(part) for part in parts)
    elements = 1
    for size in sizes:
        elements *= size
    if elements > MAX_ELEMENTS:
        raise FxrUsageError(f"--input {spec!r}: {elements} elements is more than the {MAX_ELEMENTS} allowed")
    return sizes


def _draw(dtype: torch.dtype, sizes: tuple[int, ...], bounds: tuple[Any, Any] | None,
          generator: torch.Generator) -> torch.Tensor:
    if dtype is torch.bool:
        return torch.randint(0, 2, sizes, generator=generator).bool()
    if dtype.is_floating_point or dtype.is_complex:
        values = torch.randn(sizes, generator=generator, dtype=torch.float64)
        if bounds is not None:
            values = bounds[0] + (bounds[1] - bounds[0]) * torch.rand(sizes, generator=generator,
                                                                      dtype=torch.float64)
        return values.to(dtype)
    low, high = bounds if bounds is not None else DEFAULT_INTEGER_RANGE
    return torch.randint(low, high, sizes, generator=generator, dtype=dtype)


def input_shape_spec(text: str) -> str:
    """``--input-shape 2,3`` as an input spec: a float32 tensor of those sizes."""
    if not re.fullmatch(r"\d+(,\d+)*", text.replace(" ", "")):
        raise FxrUsageError(f"--input-shape {text!r}: sizes are whole numbers separated by commas, as in 2,3 "
                            "(or use --input 'float32[2,3]')")
    return f"float32[{text}]"


def import_object(spec: str, option: str) -> Any:
    """``package.module:name`` (the working directory comes first on the import path), or the module itself
    for ``package.module``; an :class:`FxrUsageError` naming ``option`` if it cannot be imported."""
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise FxrUsageError(f"{option} {spec!r}: write package.module or package.module:name")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise FxrUsageError(f"{option} {spec!r}: cannot import {module_name}: {error}") from None
    except Exception as error:  # the module's own code raised on import
        raise FxrModelError(f"{option} {spec!r}: importing {module_name} raised {_one_line(error)}") from None
    if not attribute:
        return module
    if not hasattr(module, attribute):
        hint = did_you_mean(attribute, [name for name in vars(module) if not name.startswith("_")])
        raise FxrUsageError(f"{option} {spec!r}: {module_name} has no {attribute!r}" + (f"; {hint}" if hint else ""))
    return getattr(module, attribute)


def build_model(spec: str) -> torch.nn.Module:
    """The module ``--model package.module:factory`` names: the object, or what calling the factory returns."""
    if ":" not in spec:
        raise FxrUsageError(f"--model {spec!r}: write package.module:factory (or :instance)")
    found = import_object(spec, "--model")
    if callable(found) and not isinstance(found, torch.nn.Module):
        try:
            found = found()
        except Exception as error:
            raise FxrModelError(f"--model {spec!r}: the factory raised {_one_line(error)}") from None
    if not isinstance(found, torch.nn.Module):
        raise FxrUsageError(f"--model {spec!r}: expected an nn.Module or a factory returning one, got "
                            f"{type(found).__name__}")
    return found.eval()


def user_functions(specs: Sequence[str]) -> tuple[dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]]:
    """The helpers and predicates of the modules ``--helpers`` names (their ``HELPERS`` and ``PREDICATES``
    mappings; a later module's name wins)."""
    helpers: dict[str, Callable[..., Any]] = {}
    predicates: dict[str, Callable[..., Any]] = {}
    for spec in specs:
        module = import_object(spec, "--helpers")
        found = {name: getattr(module, name, None) for name in ("HELPERS", "PREDICATES")}
        if all(value is None for value in found.values()):
            raise FxrUsageError(f"--helpers {spec!r}: the module has neither HELPERS nor PREDICATES (mappings of "
                                "names to functions)")
        for name, value in found.items():
            if value is not None and not isinstance(value, Mapping):
                raise FxrUsageError(f"--helpers {spec!r}: {name} must be a mapping of names to functions, got "
                                    f"{type(value).__name__}")
        helpers.update(found["HELPERS"] or {})
        predicates.update(found["PREDICATES"] or {})
    return helpers, predicates


def trace(model: torch.nn.Module, how: str, inputs: Sequence[torch.Tensor]) -> Traced:
    """``model`` as a graph module (``symbolic``, ``dynamo``) or an exported program (``export``)."""
    if how != "symbolic" and not inputs:
        raise FxrUsageError(f"--trace {how} runs the model: give its inputs with --input")
    try:
        if how == "export":
            return torch.export.export(model, tuple(inputs))
        if how == "dynamo":
            return torch._dynamo.export(model)(*inputs).graph_module
        return model if isinstance(model, torch.fx.GraphModule) else torch.fx.symbolic_trace(model)
    except Exception as error:  # the model's code, as the tracer saw it
        others = " or ".join(other for other in TRACES if other != how)
        raise FxrModelError(f"cannot trace the model with --trace {how}: {_one_line(error)} (--trace {others} "
                            "may trace it)") from None


def graph_of(traced: Traced) -> torch.fx.GraphModule:
    return traced.graph_module if isinstance(traced, ExportedProgram) else traced


def check_input_count(traced: Traced, inputs: Sequence[torch.Tensor]) -> None:
    """A wrong number of ``--input`` is a usage error that names the model's inputs."""
    if isinstance(traced, ExportedProgram) or not inputs:
        return
    names = [node.name for node in traced.graph.find_nodes(op="placeholder")]
    if len(names) != len(inputs):
        raise FxrUsageError(f"the model takes {counted(len(names), 'input')} ({', '.join(names) or 'none'}), but "
                            f"{len(inputs)} --input were given")


def save(result: Traced, path: Path, inputs: Sequence[torch.Tensor]) -> None:
    """``result`` as a ``.pt2`` program (a graph module is exported on ``inputs`` first) or a folder."""
    try:
        if path.suffix == ".pt2":
            if isinstance(result, ExportedProgram):
                program = result
            elif inputs:
                program = torch.export.export(result, tuple(inputs))
            else:
                raise FxrUsageError(f"--output {path}: saving a .pt2 program exports the graph: give --input")
            torch.export.save(program, path)
            return
        module = result.module() if isinstance(result, ExportedProgram) else result
        if type(module.graph._codegen) is not torch.fx.graph.CodeGen:
            # Dynamo's and export's modules flatten their arguments with a pytree spec, which to_folder drops
            raise FxrUsageError(f"--output {path}: this graph module flattens its inputs with a pytree spec, which "
                                "a folder cannot hold; save it as a .pt2 program")
        module.to_folder(path, "Rewritten")
    except FxrError:
        raise
    except Exception as error:
        raise FxrModelError(f"cannot save the result to {path}: {_one_line(error)}") from None


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
