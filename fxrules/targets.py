"""Resolving dotted names in rule files to real objects, safely.

A rule file is data: names resolve by attribute lookup from a fixed set of
roots (``torch``, ``nn``, ``F``, ``aten``, ``operator``, ``math``, the
``use`` aliases, and modules the caller allowed).  Nothing is imported except
modules the caller named in ``allow=``; every module passed through and every
object reached must belong to an allowed package, and dunder names are refused.
"""

from __future__ import annotations

import builtins
import difflib
import importlib
import math
import operator
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import torch

#: Packages whose objects a rule may name without ``allow=``.
BUILTIN_PACKAGES = ("torch", "operator", "_operator", "math")

#: Names every rule file sees.
DEFAULT_ROOTS: Mapping[str, Any] = {
    "torch": torch,
    "nn": torch.nn,
    "F": torch.nn.functional,
    "aten": torch.ops.aten,
    "operator": operator,
    "math": math,
}

UNKNOWN_NAME_HINT = "add 'use MODULE as NAME' or pass allow=[...]"

#: Python builtins a pattern may name: FX records ``x.shape`` as ``getattr(x, "shape")``.
SAFE_BUILTINS: Mapping[str, Any] = {"getattr": builtins.getattr}

#: Parts of ``torch`` that import modules, load native libraries, unpickle, download, compile or write
#: files.  A pattern or replacement naming them would run them: ``verify`` executes both sides, and the
#: rewritten model executes the replacement.  Being inside ``torch`` does not make them data.
SIDE_DOOR_MODULES = (
    "torch.hub", "torch.serialization", "torch.package", "torch.utils.cpp_extension", "torch.utils.model_zoo",
    "torch.jit._serialization", "torch._classes", "torch.utils.collect_env",
)
#: ``attrgetter``, ``methodcaller`` and ``call`` reach any attribute and call any value at run time: with them a
#: replacement walked from a tensor to ``exec`` (``operator.attrgetter("__class__.__repr__.__globals__")``).
#: ``.storage()``, ``.untyped_storage()`` and ``.numpy()`` return objects whose methods share tensor methods'
#: names but not their behaviour: ``x.storage().type("pkg.mod")`` imports ``pkg``.
SIDE_DOOR_FUNCTIONS: frozenset[Any] = frozenset({
    torch._ops._Ops.load_library, torch._ops._Ops.import_module, torch.export.load, torch.export.save,
    torch.from_file, operator.attrgetter, operator.methodcaller, *filter(None, [getattr(operator, "call", None)]),
    torch.Tensor.storage, torch.Tensor.untyped_storage, torch.Tensor.numpy,
})
#: Where a private name is an operator's, not an implementation detail: ``aten._native_batch_norm_legit``.
OP_NAMESPACES = (torch._ops._Ops, torch._ops._OpNamespace, torch._ops.OpOverloadPacket)


class ResolutionError(Exception):
    """A name did not resolve; ``index`` says which dotted part failed."""

    def __init__(self, message: str, index: int, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.index = index
        self.hint = hint


def _in_packages(module_name: str | None, packages: Iterable[str]) -> bool:
    if not module_name:
        return False
    return any(module_name == p or module_name.startswith(p + ".") for p in packages)


def _suggest(name: str, candidates: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(name, [c for c in candidates if not c.startswith("__")], n=1, cutoff=0.75)
    return close[0] if close else None


def _children(value: Any) -> list[str]:
    try:
        return list(dir(value))
    except Exception:
        return []


@attrs.frozen
class Namespace:
    """The names one rule file can reach: roots, ``use`` aliases and allowed packages."""

    roots: Mapping[str, Any]
    packages: tuple[str, ...]

    @classmethod
    def create(cls, allow: Iterable[str] = ()) -> Namespace:
        allowed = tuple(allow)
        roots = dict(DEFAULT_ROOTS)
        for package in allowed:
            roots.setdefault(package.split(".")[0], _import_allowed(package.split(".")[0]))
        return cls(roots, BUILTIN_PACKAGES + allowed)

    def with_alias(self, alias: str, value: Any) -> Namespace:
        return Namespace({**self.roots, alias: value}, self.packages)

    def is_root(self, name: str) -> bool:
        return name in self.roots

    def resolve(self, parts: tuple[str, ...]) -> Any:
        """The object a dotted name stands for, or :class:`ResolutionError`."""
        head = parts[0]
        if head not in self.roots:
            hint_name = _suggest(head, self.roots)
            if hint_name:
                hint = f"did you mean '{hint_name}'?"
            elif head in sys.modules:  # a module rule files may not reach unless the caller allows it
                hint = f"pass allow=['{head}'] to use it"
            else:
                hint = UNKNOWN_NAME_HINT
            raise ResolutionError(f"unknown name '{head}'", 0, hint)
        value = self.roots[head]
        for index in range(1, len(parts)):
            value = self._step(value, parts, index)
        self._check_origin(value, parts)
        return value

    def _step(self, value: Any, parts: tuple[str, ...], index: int) -> Any:
        part = parts[index]
        dotted = ".".join(parts[: index + 1])
        if part.startswith("__"):
            raise ResolutionError(f"'{dotted}': dunder names are not allowed in rule files", index)
        if part.startswith("_") and not isinstance(value, OP_NAMESPACES):  # torch._utils, torch._C, ...
            raise ResolutionError(f"'{dotted}': private names are not allowed in rule files", index,
                                  "private names are allowed only for operators: aten._to_copy")
        if isinstance(value, types.ModuleType) and _in_packages(f"{value.__name__}.{part}", SIDE_DOOR_MODULES):
            raise _side_door(dotted, index)  # before getattr, which could import it
        try:
            child = getattr(value, part)
        except AttributeError:
            child = self._import_submodule(value, part)
        if child is None:
            suggestion = _suggest(part, _children(value))
            prefix = ".".join(parts[:index])
            hint = f"did you mean '{prefix}.{suggestion}'?" if suggestion else None
            raise ResolutionError(f"unknown target '{dotted}'", index, hint)
        if isinstance(child, types.ModuleType) and not _in_packages(child.__name__, self.packages):
            raise ResolutionError(
                f"'{dotted}' is the module '{child.__name__}', which rule files may not reach", index,
                f"pass allow=['{child.__name__}'] to use it",
            )
        if is_side_door(child):
            raise _side_door(dotted, index)
        return child

    def _import_submodule(self, value: Any, part: str) -> Any:
        if not isinstance(value, types.ModuleType):
            return None
        name = f"{value.__name__}.{part}"
        if not _in_packages(name, self.packages):
            return None
        try:
            return importlib.import_module(name)
        except ImportError:
            return None

    def _check_origin(self, value: Any, parts: tuple[str, ...]) -> None:
        if isinstance(value, bool | int | float | str | type(None) | torch.dtype | torch.memory_format):
            return
        origin = getattr(value, "__module__", None)
        if isinstance(origin, str) and not _in_packages(origin, self.packages) and origin != "builtins":
            raise ResolutionError(
                f"'{'.'.join(parts)}' comes from '{origin}', which rule files may not reach",
                len(parts) - 1, f"pass allow=['{origin.split('.')[0]}'] to use it",
            )


def _side_door(dotted: str, index: int) -> ResolutionError:
    return ResolutionError(f"'{dotted}' loads or runs code or touches files, which rule files may not reach", index)


def is_side_door(value: Any) -> bool:
    """True for the objects of :data:`SIDE_DOOR_MODULES` and :data:`SIDE_DOOR_FUNCTIONS` (bound or not)."""
    if isinstance(value, types.ModuleType):
        origin = value.__name__
    else:
        origin = getattr(value, "__module__", None)
        try:
            if getattr(value, "__func__", value) in SIDE_DOOR_FUNCTIONS:
                return True
        except TypeError:  # unhashable: not one of them
            pass
    return isinstance(origin, str) and _in_packages(origin, SIDE_DOOR_MODULES)


def _import_allowed(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ValueError(f"allow=[{name!r}]: cannot import {name!r}: {error}") from error


def is_value(obj: Any) -> bool:
    """Dotted names that stand for values rather than callables are literals (``torch.float16``, ``math.pi``)."""
    return isinstance(obj, bool | int | float | str | torch.dtype | torch.memory_format | torch.layout)
