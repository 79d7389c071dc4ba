"""Driving a real model from the command line: inputs from specs, three ways to trace, a loadable result.

An input spec is ``DTYPE[SIZES]`` with an optional value range: ``int64[2,16]`` (token ids),
``int64[2,16]:0..1000`` (ids from 0 to 999: the range is half-open, as ``torch.randint``'s),
``float32[4,3]``, ``float32[8]:-1..1``, ``bool[2,16]``, ``float32[]`` (a 0-dim tensor).  Values are drawn
from a fixed seed, so two runs see the same inputs.  Without a range, integers are drawn from 0..10 and
floats from the standard normal distribution.

A model is traced with ``torch.fx.symbolic_trace`` (``symbolic``), ``torch.export.export`` (``export``:
an aten-level program) or ``torch._dynamo.export`` (``dynamo``: the torch-level graph a ``torch.compile``
backend sees).  Whatever the trace, the rewritten result is saved as ``torch.export.save`` of an
``ExportedProgram`` (a ``.pt2`` file, loaded back with ``torch.export.load``; a graph module is exported on
the inputs first), or as ``GraphModule.to_folder`` (any other path: a folder holding ``module.py`` and the
weights; a graph with pytree-flattened inputs is traced again into a plain signature first).
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.fx
from torch.export import ExportedProgram

from fxrules.diagnostics import FxrError, FxrUsageError, did_you_mean
from fxrules.engine.report import counted
from fxrules.rewrite.spelling import respell, spell_publicly
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
_T = TypeVar("_T")


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


def code_of(traced: Traced) -> str:
    """The graph's code with public names, as ``apply`` writes it (:mod:`fxrules.rewrite.spelling`): the
    diff of before and after then shows what the rules changed, not how FX spells a function."""
    return respell(graph_of(traced).code)


def check_input_count(traced: Traced, inputs: Sequence[torch.Tensor]) -> None:
    """A wrong number of ``--input`` is a usage error that names the model's inputs."""
    if isinstance(traced, ExportedProgram) or not inputs:
        return
    names = [node.name for node in traced.graph.find_nodes(op="placeholder")]
    if len(names) != len(inputs):
        raise FxrUsageError(f"the model takes {counted(len(names), 'input')} ({', '.join(names) or 'none'}), but "
                            f"{len(inputs)} --input were given")


def output_path(text: str | None, how: str, inputs: Sequence[torch.Tensor]) -> Path | None:
    """``--output`` checked before any work: its folder exists, and a ``.pt2`` of a symbolic trace has the
    inputs to export it on.  A ``.py`` path gets the code alone, a ``.pt2`` path a program, any other a folder."""
    if text is None:
        return None
    path = Path(text)
    if not path.parent.is_dir():
        raise FxrUsageError(f"--output {path}: the folder {path.parent} does not exist")
    if path.suffix == ".pt2" and how == "symbolic" and not inputs:
        raise FxrUsageError(f"--output {path}: a .pt2 program is the graph exported on example inputs: give "
                            "--input, or save a folder (--output DIR)")
    if path.suffix not in (".pt2", ".py") and path.exists() and not path.is_dir():
        raise FxrUsageError(f"--output {path}: a file of that name exists; a graph module is saved as a folder "
                            "(or give a .pt2 or .py path)")
    return path


def save(result: Traced, path: Path, inputs: Sequence[torch.Tensor]) -> None:
    """``result`` as a ``.pt2`` program (a graph module is exported on ``inputs`` first) or a folder that
    ``import`` loads (``module.py``, whose class ``Rewritten`` takes the model's inputs, and the weights)."""
    if path.suffix == ".pt2":
        program = result if isinstance(result, ExportedProgram) else _attempt(
            lambda: torch.export.export(result, tuple(inputs)), f"cannot export the rewritten graph for --output "
            f"{path}", "save a folder (--output DIR) instead")
        _attempt(lambda: torch.export.save(program, path), f"cannot save the result to {path}")
        return
    module = result.module() if isinstance(result, ExportedProgram) else result
    if type(module.graph._codegen) is not torch.fx.graph.CodeGen:
        module = _attempt(lambda: _with_plain_signature(module), f"cannot write the graph module to the folder "
                          f"{path}", "save a .pt2 program instead")
    _attempt(lambda: _to_folder(module, path), f"cannot save the result to {path}")


def _to_folder(module: torch.fx.GraphModule, path: Path) -> None:
    with warnings.catch_warnings():
        # that a submodule is pickled whole rather than written as code: nothing the user can act on
        warnings.filterwarnings("ignore", "Was not able to save the following children modules as reprs")
        # absolute: to_folder writes the path it is given into module.py, to load the weights from any directory
        module.to_folder(path.resolve(), "Rewritten")


def _with_plain_signature(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``module`` traced again into a graph that takes the model's inputs and returns its outputs as they are.

    Dynamo's and export's graphs flatten their inputs and outputs with pytree specs kept on the module,
    which ``to_folder`` does not write; tracing such a module runs that flattening on proxies, so the new
    graph does the same work with a plain signature."""
    traced = torch.fx.symbolic_trace(module)
    spell_publicly(traced.graph)
    traced.recompile()
    return traced


def _attempt(action: Callable[[], _T], failure: str, instead: str = "") -> _T:
    """``action()``; what it raises becomes an :class:`FxrModelError` saying ``failure`` and what to do
    ``instead``."""
    try:
        return action()
    except FxrError:
        raise
    except Exception as error:
        raise FxrModelError(f"{failure}: {_one_line(error)}" + (f"; {instead}" if instead else "")) from None


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
