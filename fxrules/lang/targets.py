"""Resolving dotted names in rule files against an allow-list of tensor operations and constants.

A rule file is data: a name resolves by looking it up, without running any
code, from a fixed set of roots (``torch``, ``nn``, ``F``, ``aten``,
``operator``, ``math``, the ``use`` aliases, and what the caller allowed), and
the object it reaches must belong to :func:`allowed`: the dispatcher's
``aten``/``prims`` operators, the tensor functions and ``Tensor`` methods of
``torch.overrides`` (with the few that leave the tensor world removed),
``nn.Module`` classes of ``torch.nn``, plain constants, the arithmetic of
``operator`` and the functions of ``math``.  Anything else is refused, so a
new torch release adds nothing a rule file can reach unless it is a tensor
operation.  ``docs/security.md`` states the threat model.

Lookups are static (a module's ``__dict__``, ``inspect.getattr_static``), so
resolving a name never imports a module or runs a module ``__getattr__``.
Only the modules the caller names in ``allow=`` are imported.
"""

from __future__ import annotations

import builtins
import difflib
import functools
import importlib
import inspect
import math
import operator
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs
import torch
import torch.overrides

from fxrules.diagnostics import FxrUsageError

#: Packages whose modules a name may pass through without ``allow=`` (what it reaches must still be allowed).
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

#: Operator namespaces a rule may name without ``allow=``.
DEFAULT_OP_NAMESPACES = ("aten", "prims")

UNKNOWN_NAME_HINT = "add 'use MODULE as NAME' or pass allow=[...]"

#: Python builtins a pattern may name: FX records ``x.shape`` as ``getattr(x, "shape")``.
SAFE_BUILTINS: Mapping[str, Any] = {"getattr": builtins.getattr}

#: The namespaces of ``torch.overrides.get_overridable_functions()`` whose functions a rule may call.
FUNCTION_NAMESPACES: tuple[types.ModuleType, ...] = (
    torch, torch.functional, torch.nn.functional, torch.linalg, torch.fft, torch.special,
)

#: ``Tensor`` methods and attributes that ``torch.overrides`` lists but a rule may not name, and why.
REFUSED_TENSOR_NAMES: Mapping[str, str] = {
    "apply_": "it calls a Python callable on every element",
    "map_": "it calls a Python callable on every element",
    "map2_": "it calls a Python callable on every element",
    "register_hook": "it registers a Python callable that autograd calls later",
    "register_post_accumulate_grad_hook": "it registers a Python callable that autograd calls later",
    "backward": "it runs autograd, and with it every hook the model registered",
    "grad_fn": "it is an autograd node, whose methods register hooks",
    "storage": "it leaves the tensor world: a storage's methods share tensor methods' names, not their behaviour",
    "untyped_storage": "it leaves the tensor world: a storage's methods share tensor methods' names, not their "
                       "behaviour",
    "storage_type": "it returns a storage class, not a tensor",
    "numpy": "it leaves the tensor world: an array's methods write files (tofile, dump)",
    "data_ptr": "it exposes a raw memory address",
    "const_data_ptr": "it exposes a raw memory address",
    "share_memory_": "it moves the data into shared memory, a file",
    "module_load": "it is load_state_dict's loading protocol, not a tensor operation",
}

#: Functions that ``torch.overrides`` lists (or that have an ATen operator's name) which a rule may not name.
REFUSED_FUNCTIONS: Mapping[str, str] = {
    "torch.lobpcg": "it calls its 'tracker' argument, a Python callable",
    "torch.nn.functional.triplet_margin_with_distance_loss":
        "it calls its 'distance_function' argument, a Python callable",
    "torch.autocast": "it is a context-manager class that changes global state, not a tensor operation",
    "torch.from_file": "it reads a file",
}

#: Dispatcher operators of ``aten``/``prims`` a rule may not name.
REFUSED_OPERATORS: Mapping[str, str] = {
    "aten::from_file": "it reads a file",
    "aten::_print": "it writes to standard output",
}

#: ``operator`` functions that are not arithmetic, comparison or indexing: each reaches any attribute or calls
#: any value (``attrgetter("__class__.__repr__.__globals__")`` walked from a tensor to ``exec``).
REFUSED_OPERATOR_FUNCTIONS: Mapping[str, str] = {
    "attrgetter": "it reads any attribute, dunders included",
    "itemgetter": "it builds a callable",
    "methodcaller": "it calls any method by name",
    "call": "it calls its argument",
    "length_hint": "it calls its argument's __length_hint__",
}

#: Values a rule may name whatever module they come from: they are data, never called.
CONSTANT_TYPES: tuple[type, ...] = (
    bool, int, float, complex, str, type(None), torch.dtype, torch.layout, torch.memory_format, torch.device,
)

#: Where a private name is an operator's, not an implementation detail: ``aten._native_batch_norm_legit``.
OP_NAMESPACES = (torch._ops._Ops, torch._ops._OpNamespace, torch._ops.OpOverloadPacket)
OPERATORS = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
_MISSING = object()


class ResolutionError(Exception):
    """A name did not resolve; ``index`` says which dotted part failed."""

    def __init__(self, message: str, index: int, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.index = index
        self.hint = hint


# ---------------------------------------------------------------- the allowed set


@attrs.frozen
class AllowedSet:
    """Every object a rule may name without ``allow=`` (plain constants aside), built once by :func:`allowed`."""

    functions: Mapping[int, Any]  # id -> torch, F, linalg, fft, special, operator and math functions
    function_names: Mapping[str, int]  # every dotted name of a default namespace that reaches one -> its id
    tensor_names: frozenset[str]  # Tensor methods and attributes
    operators: frozenset[str]  # "aten::add": dispatcher operators of the default namespaces
    removed: Mapping[str, str]  # what torch.overrides or the dispatcher offers that was left out, and why

    def has_function(self, value: Any) -> bool:
        return self.functions.get(id(value), _MISSING) is value

    def tensor_method(self, name: str) -> bool:
        return name in self.tensor_names and callable(inspect.getattr_static(torch.Tensor, name, None))


@functools.cache
def allowed() -> AllowedSet:
    """The allowed set, derived from ``torch.overrides`` and the dispatcher's registry (built on first use)."""
    dispatcher = _dispatcher_operators()
    builder = _Builder({**REFUSED_OPERATORS, **REFUSED_MODULE_CLASSES})
    refused = {id(_lookup(dotted)): dotted for dotted in REFUSED_FUNCTIONS}
    for dotted, function in _torch_functions(dispatcher):
        canonical = refused.get(id(function))
        builder.add(dotted, function, (canonical, REFUSED_FUNCTIONS[canonical]) if canonical else None)
    for module, refusals in ((operator, REFUSED_OPERATOR_FUNCTIONS), (math, {})):
        for name in getattr(module, "__all__", None) or dir(module):
            dotted = f"{module.__name__}.{name}"
            if callable(value := getattr(module, name)):
                builder.add(dotted, value, (dotted, refusals[name]) if name in refusals else None)
    tensor_names = set()
    for name in _tensor_names(dispatcher):  # each once: what a name adds does not depend on how often it is listed
        if name in REFUSED_TENSOR_NAMES:
            builder.removed[f"torch.Tensor.{name}"] = REFUSED_TENSOR_NAMES[name]
        elif not name.startswith("_"):
            tensor_names.add(name)
            if callable(method := getattr(torch.Tensor, name)):  # 'use torch.Tensor.relu as r': a value
                builder.add(f"torch.Tensor.{name}", method, None)
    operators = frozenset([op for op in dispatcher if op.partition("::")[0] in DEFAULT_OP_NAMESPACES]) - set(
        REFUSED_OPERATORS)
    return AllowedSet(builder.functions, builder.names, frozenset(tensor_names), operators, builder.removed)


@attrs.define
class _Builder:
    """Collects the functions of the allowed set, and what was left out with why."""

    removed: dict[str, str]
    functions: dict[int, Any] = attrs.Factory(dict)
    names: dict[str, int] = attrs.Factory(dict)

    def add(self, dotted: str, value: Any, refusal: tuple[str, str] | None) -> None:
        """Add ``value`` (reached as ``dotted``) unless it is private or refused (``refusal``: name, reason)."""
        if refusal:
            self.removed[refusal[0]] = refusal[1]
        elif not dotted.rsplit(".", 1)[-1].startswith("_"):
            self.functions[id(value)] = value
            self.names[dotted] = id(value)


def _lookup(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return vars(sys.modules[module])[name]


def _dispatcher_operators() -> frozenset[str]:
    """``"ns::name"`` of every operator registered with the dispatcher (TorchScript-only ones such as
    ``aten::save``, which writes a file, are not: they are interpreter built-ins, not tensor operations)."""
    return frozenset([name.partition(".")[0] for name in torch._C._dispatch_get_all_op_names()])


def _torch_functions(dispatcher: frozenset[str]) -> Iterator[tuple[str, Any]]:
    """The tensor functions of torch's namespaces: those ``__torch_function__`` dispatches
    (``torch.overrides``), and the C functions named after an ATen operator that it leaves out because they
    take no tensor (factories such as ``torch.zeros``) or write one in place (``torch.relu_``)."""
    overridable = torch.overrides.get_overridable_functions()
    for namespace in FUNCTION_NAMESPACES:
        listed = {id(f) for f in overridable.get(namespace, ())}
        for name, value in vars(namespace).items():
            if (id(value) in listed or (inspect.isbuiltin(value) and f"aten::{name}" in dispatcher)
                    or _own_function(namespace, value)):
                yield f"{namespace.__name__}.{name}", value


def _own_function(namespace: types.ModuleType, value: Any) -> bool:
    """A Python function that ``torch.nn.functional`` defines itself: every one is a tensor function, though
    ``torch.overrides`` calls a few "ignored" (``F.sigmoid``, ``F.tanh``, ``F.hardswish``) because they leave
    ``__torch_function__`` to the tensor method they call."""
    return (namespace is torch.nn.functional and inspect.isfunction(value)
            and value.__module__ == torch.nn.functional.__name__)


def _tensor_names(dispatcher: frozenset[str]) -> dict[str, None]:
    """``Tensor`` methods and attributes ``torch.overrides`` lists, and methods named after an ATen operator
    it leaves out (``new_zeros``, ``stride``, ``unflatten``): each name once, in the order first found.

    ``torch.overrides`` lists most names several times (``add`` and its property-like kin), and nearly every
    ATen-named method is listed already; only the others are looked up (statically, which is slow)."""
    names: dict[str, None] = {}
    for key, functions in torch.overrides.get_overridable_functions().items():
        if key is torch.Tensor:
            names.update(dict.fromkeys(f.__name__ for f in functions if hasattr(f, "__name__")))
        elif not isinstance(key, types.ModuleType) and isinstance(getattr(key, "__name__", None), str):
            names[key.__name__] = None  # a property: 'shape', 'dtype', ...
    for name in dir(torch.Tensor):
        if name not in names and f"aten::{name}" in dispatcher and callable(inspect.getattr_static(torch.Tensor, name)):
            names[name] = None
    return names


#: ``torch.nn`` module classes a rule may not name: they talk to other processes.
REFUSED_MODULE_CLASSES: Mapping[str, str] = {
    "torch.nn.parallel": "its classes start threads and talk to other processes (torch.distributed)",
    "torch.nn.SyncBatchNorm": "in training it exchanges statistics with other processes (torch.distributed)",
}


def is_module_class(value: Any) -> bool:
    """An ``nn.Module`` subclass defined in ``torch.nn``, except those of :data:`REFUSED_MODULE_CLASSES`."""
    return (isinstance(value, type) and issubclass(value, torch.nn.Module)
            and _in_packages(value.__module__, ("torch.nn",))
            and not _in_packages(value.__module__, ("torch.nn.parallel",)) and value is not torch.nn.SyncBatchNorm)


def is_constant(value: Any) -> bool:
    """Plain data a rule may name: numbers, strings, None, dtypes, layouts, memory formats, devices."""
    return isinstance(value, CONSTANT_TYPES)


def is_value(obj: Any) -> bool:
    """Dotted names that stand for values rather than callables are literals (``torch.float16``, ``math.pi``)."""
    return isinstance(obj, bool | int | float | str | torch.dtype | torch.memory_format | torch.layout)


# ---------------------------------------------------------------- what the caller allows


@attrs.frozen
class Allowance:
    """What ``allow=`` adds: packages whose public objects are allowed, operator namespaces, single objects."""

    packages: tuple[str, ...] = ()
    op_namespaces: tuple[str, ...] = ()
    objects: Mapping[int, Any] = attrs.field(factory=dict)
    roots: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def create(cls, allow: Iterable[Any]) -> Allowance:
        packages: list[str] = []
        op_namespaces: list[str] = []
        objects: dict[int, Any] = {}
        roots: dict[str, Any] = {}
        for entry in allow_entries(allow):
            value = _allowed_object(entry)
            if isinstance(value, torch._ops._OpNamespace):  # a module too: tested first
                op_namespaces.append(value.name)
                continue
            if isinstance(value, types.ModuleType):
                packages.append(value.__name__)
                top = value.__name__.split(".")[0]
            else:
                objects[id(value)] = value
                top = str(getattr(value, "__module__", None) or "").split(".")[0]
            if top in sys.modules:
                roots.setdefault(top, sys.modules[top])
        return cls(tuple(packages), tuple(op_namespaces), objects, roots)

    def has_object(self, value: Any) -> bool:
        return self.objects.get(id(value), _MISSING) is value


def allow_entries(allow: Iterable[Any]) -> tuple[Any, ...]:
    """The entries of ``allow=``, each a dotted name, a module, an operator namespace or a callable
    (:class:`FxrUsageError` for anything else, and for one string where a list was meant)."""
    if isinstance(allow, str):
        raise FxrUsageError(f"allow={allow!r}: allow= takes a list of entries (allow=[{allow!r}]), not one string")
    entries = tuple(allow)
    for entry in entries:
        if isinstance(entry, str):
            if not all(part.isidentifier() for part in entry.split(".")):
                raise FxrUsageError(f"allow=[{entry!r}]: {entry!r} is not a dotted name")
        elif not (isinstance(entry, types.ModuleType) or callable(entry)):
            raise FxrUsageError(f"allow=[{entry!r}]: expected a dotted name, a module, an operator namespace or "
                                f"a callable, not a {type(entry).__name__}")
    return entries


def _allowed_object(entry: Any) -> Any:
    """An ``allow=`` entry as an object: a module name is imported (the caller trusts it), an operator
    namespace is ``"torch.ops.NAME"``, a dotted name is looked up after importing its module."""
    if not isinstance(entry, str):
        return entry
    if entry.startswith("torch.ops.") and entry.count(".") == 2:
        return getattr(torch.ops, entry.split(".")[2])
    error: Exception | None = None
    parts = entry.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError as failure:
            error = error or failure
            continue
        try:
            return functools.reduce(getattr, parts[cut:], value)
        except AttributeError as failure:
            error = failure
            break
    raise FxrUsageError(f"allow=[{entry!r}]: cannot import {entry!r}: {error}")


# ---------------------------------------------------------------- resolution


def _in_packages(module_name: str | None, packages: Iterable[str]) -> bool:
    if not module_name:
        return False
    return any(module_name == p or module_name.startswith(p + ".") for p in packages)


def _suggest(name: str, candidates: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(name, [c for c in candidates if not c.startswith("__")], n=1, cutoff=0.75)
    return close[0] if close else None


@attrs.frozen
class Namespace:
    """The names one rule file can reach: roots, ``use`` aliases and what the caller allowed."""

    roots: Mapping[str, Any]
    allowance: Allowance = attrs.field(factory=Allowance)
    # what each dotted name resolved to (by parts and ``containers``): a file names the same few targets in
    # rule after rule, and the roots of a namespace never change (``with_alias`` makes a new one)
    _resolved: dict[tuple[tuple[str, ...], bool], Any] = attrs.field(factory=dict, init=False, eq=False,
                                                                      repr=False)

    @classmethod
    def create(cls, allow: Iterable[Any] = ()) -> Namespace:
        allowance = Allowance.create(allow)
        return cls({**allowance.roots, **DEFAULT_ROOTS}, allowance)

    @property
    def packages(self) -> tuple[str, ...]:
        """Packages whose modules a name may pass through."""
        return BUILTIN_PACKAGES + self.allowance.packages + tuple(self.allowance.roots)

    def with_alias(self, alias: str, value: Any) -> Namespace:
        return Namespace({**self.roots, alias: value}, self.allowance)

    def is_root(self, name: str) -> bool:
        return name in self.roots

    def resolve(self, parts: tuple[str, ...], *, containers: bool = False) -> Any:
        """The object a dotted name stands for, or :class:`ResolutionError`.

        Modules and operator namespaces resolve as themselves (the caller says they are not values);
        ``torch.Tensor`` resolves only when ``containers`` is set (``use torch.Tensor as T``), since calling
        it is not a tensor operation.
        """
        key = (parts, containers)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(parts, containers)
        return self._resolved[key]

    def _resolve(self, parts: tuple[str, ...], containers: bool) -> Any:
        head = parts[0]
        if head not in self.roots:
            raise ResolutionError(f"unknown name '{head}'", 0, _unknown_root_hint(head, self.roots))
        value = self.roots[head]
        for index in range(1, len(parts)):
            value = self._step(value, parts, index)
        if value is torch.Tensor and containers:
            return value
        if not (isinstance(value, types.ModuleType | torch._ops._OpNamespace) or self.allows(value)):
            raise self._refused(parts, value, len(parts) - 1)
        return value

    def allows(self, value: Any) -> bool:
        """True when a rule may name ``value``: the allowed set, plus what ``allow=`` added."""
        if is_constant(value) or is_module_class(value) or allowed().has_function(value):
            return True
        if isinstance(value, OPERATORS):
            return self._allows_operator(value)
        if self.allowance.has_object(value):
            return True
        origin = getattr(value, "__module__", None)
        return (callable(value) and isinstance(origin, str) and _in_packages(origin, self.allowance.packages)
                and not str(getattr(value, "__name__", "")).startswith("_"))

    def check_method(self, name: str) -> None:
        """Raise :class:`ResolutionError` unless a rule may call the tensor method ``name`` (``x.name()``)."""
        if allowed().tensor_method(name) or self.allowance.has_object(getattr(torch.Tensor, name, None)):
            return
        static = inspect.getattr_static(torch.Tensor, name, None)
        reason = allowed().removed.get(f"torch.Tensor.{name}") or (
            None if callable(static) else "it is an attribute, not a method")
        raise ResolutionError(f"'.{name}()' is not a tensor operation that rule files may call", 0,
                              f"{reason + '; ' if reason else ''}if you trust it, pass allow=['torch.Tensor.{name}']")

    def check_attribute(self, name: str) -> None:
        """Raise :class:`ResolutionError` unless a rule may read ``x.name`` (``getattr(x, "name")``): any public
        name except the ``Tensor`` attributes and methods outside the allowed set (``x.grad_fn``, ``x.numpy``)."""
        if inspect.getattr_static(torch.Tensor, name, _MISSING) is _MISSING or name in allowed().tensor_names:
            return
        if self.allowance.has_object(getattr(torch.Tensor, name)):
            return
        reason = allowed().removed.get(f"torch.Tensor.{name}")
        raise ResolutionError(f"'.{name}' is not a tensor attribute that rule files may read", 0,
                              f"{reason + '; ' if reason else ''}if you trust it, pass allow=['torch.Tensor.{name}']")

    def _allows_operator(self, op: Any) -> bool:
        packet = op.overloadpacket if isinstance(op, torch._ops.OpOverload) else op
        name = packet._qualified_op_name
        namespace = name.split("::")[0]
        return name in allowed().operators or namespace in self.allowance.op_namespaces

    def _step(self, value: Any, parts: tuple[str, ...], index: int) -> Any:
        part = parts[index]
        dotted = ".".join(parts[: index + 1])
        if part.startswith("__") and not _is_dunder_operator(value, part):
            raise ResolutionError(f"'{dotted}': dunder names are not allowed in rule files", index)
        if part.startswith("_") and not isinstance(value, OP_NAMESPACES):  # torch._utils, torch._C, ...
            raise ResolutionError(f"'{dotted}': private names are not allowed in rule files", index,
                                  "private names are allowed only for operators: aten._to_copy")
        if value is torch.Tensor:
            return self._tensor_step(parts, index)
        if isinstance(value, torch._ops._Ops):
            if part not in (*DEFAULT_OP_NAMESPACES, *self.allowance.op_namespaces):
                raise ResolutionError(f"'{dotted}' is an operator namespace that rule files may not reach", index,
                                      f"pass allow=['{dotted if parts[0] == 'torch' else 'torch.ops.' + part}'] "
                                      "to use its operators")
            return getattr(value, part)
        if isinstance(value, torch._ops._OpNamespace):
            return self._operator_step(value, parts, index)
        if isinstance(value, torch._ops.OpOverloadPacket) and part in value.overloads():
            return getattr(value, part)
        if isinstance(value, types.ModuleType):  # after the operator namespaces, which are modules too
            return self._module_step(value, parts, index)
        raise self._refused(parts, None, index)

    def _module_step(self, module: types.ModuleType, parts: tuple[str, ...], index: int) -> Any:
        part = parts[index]
        dotted = ".".join(parts[: index + 1])
        child = vars(module).get(part, _MISSING)  # static: a module __getattr__ may import
        if child is _MISSING and _in_packages(module.__name__, self.allowance.packages):
            child = _import_submodule(f"{module.__name__}.{part}")
        if child is _MISSING:
            suggestion = _suggest(part, [n for n, v in vars(module).items()
                                         if not n.startswith("_") and self._nameable(v)])
            prefix = ".".join(parts[:index])
            hint = (f"did you mean '{prefix}.{suggestion}'?" if suggestion else
                    f"if it is a module, pass allow=['{_real_name(parts[: index + 1], self.roots)}'] to use it")
            raise ResolutionError(f"unknown target '{dotted}'", index, hint)
        if isinstance(child, types.ModuleType) and not _in_packages(child.__name__, self.packages):
            raise ResolutionError(f"'{dotted}' is the module '{child.__name__}', which rule files may not reach",
                                  index, f"pass allow=['{child.__name__}'] to use it")
        return child

    def _nameable(self, value: Any) -> bool:
        return isinstance(value, types.ModuleType) or self.allows(value)

    def _tensor_step(self, parts: tuple[str, ...], index: int) -> Any:
        part = parts[index]
        if allowed().tensor_method(part) or self.allowance.has_object(getattr(torch.Tensor, part, None)):
            return getattr(torch.Tensor, part)
        if hasattr(torch.Tensor, part):
            raise self._refused(parts, None, index)
        suggestion = _suggest(part, allowed().tensor_names)
        raise ResolutionError(f"unknown target '{'.'.join(parts[: index + 1])}'", index,
                              f"did you mean '{'.'.join(parts[:index])}.{suggestion}'?" if suggestion else None)

    def _operator_step(self, namespace: Any, parts: tuple[str, ...], index: int) -> Any:
        part = parts[index]
        try:
            return getattr(namespace, part)  # the dispatcher's registry: no Python code of the rule file runs
        except AttributeError:
            names = [o.split("::")[1] for o in allowed().operators if o.startswith(f"{namespace.name}::")]
            suggestion = _suggest(part, names)
            prefix = ".".join(parts[:index])
            raise ResolutionError(f"unknown target '{'.'.join(parts[: index + 1])}'", index,
                                  f"did you mean '{prefix}.{suggestion}'?" if suggestion else None) from None

    def _refused(self, parts: tuple[str, ...], value: Any, index: int) -> ResolutionError:
        dotted = ".".join(parts[: index + 1])
        reason = refusal_reason(dotted, value, self.roots)
        real = _real_name(parts[: index + 1], self.roots)
        return ResolutionError(f"'{dotted}' is not a tensor operation or constant that rule files may name", index,
                               f"{reason + '; ' if reason else ''}if you trust it, pass allow=['{real}']")


def _is_dunder_operator(namespace: Any, name: str) -> bool:
    """Whether ``namespace.name`` is an operator named like a dunder (``aten.__and__``, which torch.export records
    for ``a & b``): looked up in the dispatcher's registry, which runs no Python code of the rule file."""
    if not isinstance(namespace, torch._ops._OpNamespace) or not name.endswith("__"):
        return False
    return bool(torch._C._jit_get_schemas_for_operator(f"{namespace.name}::{name}"))


def refusal_reason(dotted: str, value: Any, roots: Mapping[str, Any]) -> str | None:
    """Why a refused name is not in the allowed set, when the allowed set left it out on purpose."""
    real = _real_name(tuple(dotted.split(".")), roots)
    removed = allowed().removed
    if real in removed:
        return removed[real]
    if isinstance(value, OPERATORS):
        packet = value.overloadpacket if isinstance(value, torch._ops.OpOverload) else value
        return removed.get(packet._qualified_op_name, "it is not an operator of the dispatcher")
    return None


def _real_name(parts: tuple[str, ...], roots: Mapping[str, Any]) -> str:
    """``F.relu`` as ``torch.nn.functional.relu``: the name to pass to ``allow=``."""
    root = roots.get(parts[0])
    if isinstance(root, torch._ops._OpNamespace):  # a module too: tested first
        return ".".join(("torch.ops", root.name, *parts[1:]))
    if isinstance(root, types.ModuleType):
        return ".".join((root.__name__, *parts[1:]))
    return ".".join(parts)


def _unknown_root_hint(head: str, roots: Mapping[str, Any]) -> str:
    hint_name = _suggest(head, roots)
    if hint_name:
        return f"did you mean '{hint_name}'?"
    if head in sys.modules:  # a module rule files may not reach unless the caller allows it
        return f"pass allow=['{head}'] to use it"
    return UNKNOWN_NAME_HINT


def _import_submodule(name: str) -> Any:
    """A submodule of a package the caller allowed, imported on first use (the caller trusts the package)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return _MISSING


# ---------------------------------------------------------------- enumeration, for the docs and the tests


def allowed_names() -> dict[str, list[str]]:
    """One dotted name for every object of the allowed set, by namespace (what ``docs/security.md`` counts).

    Plain constants are listed for the default roots only; constants of other ``torch`` modules are allowed
    too (they are data).
    """
    allowed_set = allowed()
    groups: dict[str, list[str]] = {key: [] for key in (
        "aten ops", "prims ops", "torch functions", "F functions", "Tensor methods", "Tensor attributes",
        "nn modules", "constants", "operator", "math")}
    for op in sorted(allowed_set.operators):
        namespace, name = op.split("::")
        if not name.startswith("__"):  # aten.__and__ cannot be written: rule files refuse dunder names
            groups[f"{namespace} ops"].append(f"torch.ops.{namespace}.{name}")
    seen: dict[str, set[int]] = {key: set() for key in groups}
    for dotted, identity in sorted(allowed_set.function_names.items()):
        group = _group_of(dotted)
        if identity not in seen[group]:  # torch.functional.split is torch.split: one function
            seen[group].add(identity)
            groups[group].append(dotted)
    groups["Tensor attributes"] = sorted(f"torch.Tensor.{n}" for n in allowed_set.tensor_names
                                         if not allowed_set.tensor_method(n))
    groups["nn modules"] = sorted({f"torch.nn.{c.__name__}" for c in vars(torch.nn).values() if is_module_class(c)}
                                  | set(_module_class_names()))
    for root in (torch, math):
        groups["constants"] += sorted(f"{root.__name__}.{n}" for n, v in vars(root).items()
                                      if not n.startswith("_") and is_constant(v))
    return groups


def _group_of(dotted: str) -> str:
    if dotted.startswith("torch.nn.functional."):
        return "F functions"
    if dotted.startswith("torch.Tensor."):
        return "Tensor methods"
    if dotted.startswith(("operator.", "math.")):
        return dotted.split(".", maxsplit=1)[0]
    return "torch functions"


def _module_class_names() -> Iterator[str]:
    """``torch.nn`` classes that ``torch.nn`` itself does not export (``torch.nn.utils.parametrize....``)."""
    exported = {id(v) for v in vars(torch.nn).values()}
    for name, module in list(sys.modules.items()):
        if _in_packages(name, ("torch.nn",)) and module is not None:
            for value in vars(module).values():
                if not is_module_class(value) or id(value) in exported or value.__module__ != name:
                    continue
                if not any(part.startswith("_") for part in (*name.split("."), value.__name__)):  # nameable
                    yield f"{name}.{value.__name__}"
