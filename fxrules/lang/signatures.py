"""Argument normalization: which parameter each argument of a call binds, with defaults.

``torch.sum(c, -1)``, ``torch.sum(c, dim=-1)`` and
``torch.sum(c, dim=-1, keepdim=False)`` are one call.  Signatures come from
``torch.fx.operator_schemas.get_signature_for_torch_op`` (torch builtins and
aten overloads) or ``inspect.signature`` (Python functions, module
``forward``s).  A target with several overloads normalizes when every
overload that accepts the arguments assigns them to the same parameter
names; otherwise the call is compared as written and the caller records it.
A call that no overload accepts at all is a :class:`Mismatch`, which says why
(an unknown keyword, a positional argument too many, required ones left out)
for the load error.

Each target's signatures are found once per process, and each signature's
binding plans and mismatches once per call shape: they depend on nothing
but the target (torch's registry of schemas, a function's own signature).
"""

from __future__ import annotations

import enum
import functools
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import torch
from torch.fx.operator_schemas import get_signature_for_torch_op

#: Tensor methods that take their sizes or dims as ``*args``: ``x.view(2, 3)`` is ``x.view((2, 3))``.
VARARG_METHODS = frozenset({"view", "reshape", "permute", "expand", "repeat", "tile", "flip", "new_zeros",
                            "new_ones", "new_empty", "size_as"})

_NO_DEFAULT = inspect.Parameter.empty
_NO_OVERLOAD = object()
_AMBIGUOUS = object()
class _Unplanned(enum.Enum):
    """No plan yet for a call shape (``None`` is a plan: the call does not bind); an enum so that mypy narrows."""

    UNPLANNED = enum.auto()


_UNPLANNED: Final = _Unplanned.UNPLANNED


@attrs.frozen
class BoundCall:
    """A call's arguments by parameter name, and the defaults of the parameters it left out."""

    explicit: Mapping[str, Any]
    defaults: Mapping[str, Any]  # of every parameter that has one, given or not

    def value(self, parameter: str, missing: Any) -> Any:
        if parameter in self.explicit:
            return self.explicit[parameter]
        return self.defaults.get(parameter, missing)


@attrs.frozen(eq=False)
class BindingPlan:
    """How every call of one shape binds: which argument each parameter takes, and the defaults."""

    packed: bool  # the arguments from ``CallSignature.pack_from`` on are one tuple: x.view(2, 3)
    slots: tuple[tuple[str, int | str], ...]  # (parameter, argument index or keyword), in parameter order
    defaults: Mapping[str, Any]  # of every parameter that has one, given or not


@attrs.frozen(eq=False, slots=False)
class CallSignature:
    """The candidate signatures of one target and how to bind a call to them."""

    overloads: tuple[inspect.Signature, ...]
    pack_from: int | None = None  # sizes given as *args from this position on: x.view(2, 3), torch.ones(2, 3)
    wrapper: inspect.Signature | None = None  # a Python function's own, beside its op's schema (torch.einsum)

    @property
    def parameters(self) -> tuple[str, ...]:
        """Parameter names of the overload with the most of them (``out`` aside), in order.

        torch.mean lists ``mean(input, *, dtype)`` first; a family named after it takes ``dim`` too.
        """
        if not self.overloads:
            return ()
        return tuple(p for p in self.richest.parameters if p != "out")

    @property
    def richest(self) -> inspect.Signature:
        """The tensor overload with the most parameters (``out`` aside); aten's scalar ones (log(a, b)) do not count."""
        candidates = [o for o in self.overloads if _takes_tensor_first(o)] or list(self.overloads)
        return max(candidates, key=lambda o: len([p for p in o.parameters if p != "out"]))

    @functools.cached_property
    def defaults(self) -> Mapping[str, Any]:
        """Every parameter default that all overloads agree on."""
        return _agreed_defaults(list(self.overloads))

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any], partial: bool = False) -> BoundCall | None:
        """Bind a call, or None when no overload accepts it or the overloads disagree.

        ``partial`` accepts a call that leaves out required parameters (a pattern ending in ``...``).
        """
        plan = self.plan(args, kwargs, partial)
        if plan is None:
            return None
        if plan.packed:
            args = (*args[: self.pack_from], tuple(args[self.pack_from:]))
        return BoundCall({name: args[key] if isinstance(key, int) else kwargs[key] for name, key in plan.slots},
                         plan.defaults)

    def plan(self, args: Sequence[Any], kwargs: Mapping[str, Any], partial: bool = False) -> BindingPlan | None:
        """How a call of this shape binds, or None when it does not bind unambiguously.

        How a call binds depends only on its argument count, its keyword names and which arguments are
        lists, so the outcome is planned once per such shape and replayed (inspect's binding is slow).
        Which arguments are lists matters only where overloads disagree (view(size) or view(dtype));
        where they do not, the plan is found by the counts alone, without looking at the arguments.
        """
        counts = _counts(args, kwargs, partial)
        plan = self._plans_by_counts.get(counts, _UNPLANNED)
        if plan is not _UNPLANNED:
            return plan
        shape = (*counts, tuple(map(_is_sequence, args)))
        plan = self._plans.get(shape, _UNPLANNED)
        if plan is _UNPLANNED:
            plan, lists_matter = self._plan(args, kwargs, partial)
            self._plans[shape] = plan
            if not lists_matter:
                self._plans_by_counts[counts] = plan
        return plan

    def count_plan(self, args: Sequence[Any]) -> tuple[BindingPlan | None, bool]:
        """:meth:`plan` of a call of ``args`` without keywords, and whether every call of as many arguments
        and no keywords binds by that plan (which arguments are lists does not decide it)."""
        plan = self.plan(args, {})
        return plan, _counts(args, {}, False) in self._plans_by_counts

    def mismatch(self, positional: int, keywords: Sequence[str], partial: bool = False) -> Mismatch | None:
        """Why no overload accepts a call with ``positional`` arguments and these keywords (None when one
        does, or when torch's argument parser may accept what its schemas do not: ``axis=`` for ``dim=``).

        The answer depends on nothing else, so it is found once per such call shape (a rule file writes
        the same ambiguous call in rule after rule)."""
        key = (positional, tuple(keywords), partial)
        if key not in self._mismatches:
            self._mismatches[key] = self._mismatch(positional, keywords, partial)
        return self._mismatches[key]

    def _mismatch(self, positional: int, keywords: Sequence[str], partial: bool) -> Mismatch | None:
        if self._accepts(positional, keywords, partial):
            return None
        names = {name for overload in self.overloads for name in overload.parameters}
        if any(ALIASES.get(keyword) in names for keyword in keywords):
            return None
        unknown = [k for k in keywords if k not in names]
        if unknown and not self._any_kind(inspect.Parameter.VAR_KEYWORD):
            return Mismatch(keyword=unknown[0])
        most = max(map(_positional_count, self.overloads))
        if positional > most and all(_loose_sizes_from(o) is None for o in self.overloads):
            return Mismatch(extra=int(most))  # finite: no overload takes *args here
        if not partial:
            fitting = [o for o in self.overloads if _positional_count(o) >= positional
                       and all(k in o.parameters for k in keywords)]
            missing = min((_missing(o, positional, keywords) for o in fitting), key=len, default=())
            if missing:
                return Mismatch(missing=missing)
        return Mismatch()

    def _accepts(self, positional: int, keywords: Sequence[str], partial: bool) -> bool:
        signatures = (*self.overloads, *([self.wrapper] if self.wrapper is not None else []))
        for signature in signatures:
            binder = signature.bind_partial if partial else signature.bind
            counts = [positional]
            loose = _loose_sizes_from(signature) if self.pack_from is None else self.pack_from
            if loose is not None and positional > loose:
                counts.append(loose + 1)  # x.view(2, 3) is x.view((2, 3))
            for count in counts:
                try:
                    binder(*([None] * count), **dict.fromkeys(keywords))
                except TypeError:
                    continue
                return True
        return False

    def _any_kind(self, kind: Any) -> bool:
        return any(p.kind is kind for o in self.overloads for p in o.parameters.values())

    @functools.cached_property
    def _plans(self) -> dict[tuple[Any, ...], BindingPlan | None]:
        return {}

    @functools.cached_property
    def _plans_by_counts(self) -> dict[tuple[Any, ...], BindingPlan | None]:
        return {}

    @functools.cached_property
    def _mismatches(self) -> dict[tuple[Any, ...], Mismatch | None]:
        return {}

    def _plan(self, args: Sequence[Any], kwargs: Mapping[str, Any],
              partial: bool) -> tuple[BindingPlan | None, bool]:
        """The plan, and whether it depends on which arguments are lists."""
        packed = False
        bound, lists_matter = self._bind(args, kwargs, partial)
        start = self.pack_from
        if bound is _NO_OVERLOAD and start is not None and len(args) > start:  # x.view(2, 3) is x.view((2, 3))
            packed, args = True, (*args[:start], tuple(args[start:]))
            bound, lists_matter = self._bind(args, kwargs, partial)
        if not isinstance(bound, tuple):
            return None, lists_matter
        overload, names, defaults = bound
        positional = [p for p in overload.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        source: dict[str, int | str] = {p.name: i for i, p in enumerate(positional[: len(args)])}
        source.update({k: k for k in kwargs})
        return BindingPlan(packed, tuple((name, source[name]) for name in names), defaults), lists_matter

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any], partial: bool) -> tuple[Any, bool]:
        """(an accepting overload, bound parameter names, defaults), _NO_OVERLOAD when no overload accepts
        the call, or _AMBIGUOUS when they disagree; and whether which arguments are lists decided it."""
        bindings = []
        for overload in self.overloads:
            try:
                binder = overload.bind_partial if partial else overload.bind
                bindings.append((overload, binder(*args, **kwargs)))
            except TypeError:
                continue
        if not bindings:
            return _NO_OVERLOAD, False
        names = list(bindings[0][1].arguments)
        if any(list(bound.arguments) != names for _, bound in bindings[1:]):
            # aten also lists scalar overloads (neg.int(a)); a graph's tensor op binds as the tensor overload does.
            bindings = [(sig, bound) for sig, bound in bindings if _takes_tensor_first(sig) and _plausible(bound)]
            if not bindings:
                return _AMBIGUOUS, True
            names = list(bindings[0][1].arguments)
            if any(list(bound.arguments) != names for _, bound in bindings[1:]):
                return _AMBIGUOUS, True
            return (bindings[0][0], names, _agreed_defaults([sig for sig, _ in bindings])), True
        return (bindings[0][0], names, _agreed_defaults([sig for sig, _ in bindings])), False


def _counts(args: Sequence[Any], kwargs: Mapping[str, Any], partial: bool) -> tuple[Any, ...]:
    """The key of the plans decided by the argument counts alone (see :meth:`CallSignature.plan`)."""
    return len(args), tuple(kwargs), partial


#: Keywords torch's argument parser takes for a parameter of another name (its NumPy spellings).
ALIASES = {"axis": "dim", "keepdims": "keepdim", "x1": "input", "x2": "other", "a": "input", "x": "input"}


@attrs.frozen
class Mismatch:
    """Why a call binds to no overload: an unknown keyword, a first positional argument too many (its
    index), required parameters left out, or (none of these) a combination no overload takes."""

    keyword: str | None = None
    extra: int | None = None
    missing: tuple[str, ...] = ()


def _loose_sizes_from(signature: inspect.Signature) -> int | None:
    """Where loose sizes start when torch's argument parser takes them for the overload's one positional
    int list (after the tensor a method is called on): ``x.resize_(2, 3)``, ``x.squeeze(0, 1)``."""
    positional = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if positional and positional[0].annotation is torch.Tensor:
        positional = positional[1:]
        start = 1
    else:
        start = 0
    if len(positional) == 1 and "List[int]" in str(positional[0].annotation):
        return start
    return None


def _positional_count(signature: inspect.Signature) -> float:
    kinds = [p.kind for p in signature.parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return math.inf
    return sum(kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for kind in kinds)


def _missing(signature: inspect.Signature, positional: int, keywords: Sequence[str]) -> tuple[str, ...]:
    """The required parameters of ``signature`` a call with these arguments leaves out."""
    missing = []
    for index, (name, parameter) in enumerate(signature.parameters.items()):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or parameter.default is not _NO_DEFAULT:
            continue
        by_position = index < positional and parameter.kind is not parameter.KEYWORD_ONLY
        if not by_position and name not in keywords:
            missing.append(name)
    return tuple(missing)


def _agreed_defaults(overloads: list[inspect.Signature]) -> dict[str, Any]:
    """Parameter defaults on which every accepting overload agrees (given or not: an argument passed
    explicitly at its default is the same call as one that leaves it out)."""
    defaults: dict[str, Any] = {}
    first, *others = overloads
    for name, parameter in first.parameters.items():
        if parameter.default is _NO_DEFAULT:
            continue
        if all(name in o.parameters and _same_default(o.parameters[name].default, parameter.default) for o in others):
            defaults[name] = parameter.default
    return defaults


def _takes_tensor_first(signature: inspect.Signature) -> bool:
    first = next(iter(signature.parameters.values()), None)
    return first is not None and first.annotation is torch.Tensor


def _is_sequence(value: Any) -> bool:
    # Templates of lists (fxrules.lang.ir.SeqTemplate) say so with `is_sequence`.
    return isinstance(value, list | tuple) or getattr(value, "is_sequence", False)


def _plausible(bound: inspect.BoundArguments) -> bool:
    """False when a list is passed where the overload takes no list (view(size) vs view(dtype))."""
    parameters = bound.signature.parameters
    for name, value in bound.arguments.items():
        annotation = str(parameters[name].annotation)
        if _is_sequence(value) and "List" not in annotation and "Tuple" not in annotation:
            return False
    return True


def _takes_sizes_first(overloads: Sequence[inspect.Signature]) -> bool:
    """torch.ones(2, 3) style: the first parameter is a size list."""
    first = next(iter(overloads[0].parameters.values()), None)
    return first is not None and first.name == "size" and "List[int]" in str(first.annotation)


def _same_default(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _without_variadics(signature: inspect.Signature) -> bool:
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return not any(p.kind in variadic for p in signature.parameters.values())


@functools.cache
def _torch_overloads(target: Any) -> tuple[inspect.Signature, ...]:
    """The schemas of a torch function or operator as signatures: once per target, though both
    ``torch.log1p`` and ``Tensor.log1p`` ask (the dispatcher's schemas are read, and converted, every time)."""
    try:
        return tuple(get_signature_for_torch_op(target) or ())
    except (RuntimeError, TypeError, AttributeError):
        return ()


def _python_signature(target: Any, drop_first: bool = False) -> list[inspect.Signature]:
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    if drop_first:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return [signature] if _without_variadics(signature) else []


@functools.cache
def function_signature(target: Any) -> CallSignature | None:
    """The signature of a ``call_function`` target (torch op, aten overload, Python function)."""
    overloads = _torch_overloads(target)
    if overloads:
        return CallSignature(tuple(overloads), pack_from=0 if _takes_sizes_first(overloads) else None,
                             wrapper=_wrapper_signature(target))
    python = _python_signature(target)
    return CallSignature(tuple(python)) if python else None


def _wrapper_signature(target: Any) -> inspect.Signature | None:
    """The signature of a Python function that calls an op (torch.einsum(equation, *operands)), if any."""
    if not inspect.isfunction(target):
        return None
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


@functools.cache
def method_signature(name: str) -> CallSignature | None:
    """The signature of ``Tensor.NAME``, receiver first, from the torch function or aten op of that name."""
    overloads: tuple[inspect.Signature, ...] = ()
    function = getattr(torch, name, None)
    if function is not None and callable(function):
        overloads = _torch_overloads(function)
    if not overloads and hasattr(torch.ops.aten, name):
        overloads = _torch_overloads(getattr(torch.ops.aten, name))
    return CallSignature(tuple(overloads), pack_from=1 if name in VARARG_METHODS else None) if overloads else None


@functools.cache
def module_call_signature(cls: type[torch.nn.Module]) -> CallSignature | None:
    """The signature of calling an instance of an ``nn.Module`` subclass (its ``forward``)."""
    overloads = _python_signature(cls.forward, drop_first=True)
    return CallSignature(tuple(overloads)) if overloads else None


@functools.cache
def constructor_defaults(cls: type[torch.nn.Module]) -> Mapping[str, Any]:
    """The defaults of an ``nn.Module`` subclass's constructor, e.g. ``{"inplace": False}`` for ``nn.ReLU``."""
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return {}
    return {
        name: p.default for name, p in parameters.items()
        if p.default is not _NO_DEFAULT and name not in {"device", "dtype"}
    }


def literal_equal(expected: Any, actual: Any) -> bool:
    """Literal equality of the rule language: same type, ``nan == nan``, ``-0.0 != 0.0``, list == tuple."""
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(expected) == len(actual) and all(map(literal_equal, expected, actual))
    if isinstance(expected, slice) and isinstance(actual, slice):
        return all(literal_equal(getattr(expected, p), getattr(actual, p)) for p in ("start", "stop", "step"))
    if type(expected) is not type(actual):
        return False
    if isinstance(expected, float):
        if math.isnan(expected) or math.isnan(actual):
            return math.isnan(expected) and math.isnan(actual)
        return expected == actual and math.copysign(1.0, expected) == math.copysign(1.0, actual)
    return bool(expected == actual)


def holds_default(value: Any, default: Any) -> bool:
    """An argument the pattern leaves out may be given explicitly, at its default (``alpha=1`` or ``1.0``)."""
    if isinstance(value, torch.fx.Node):
        return False
    if isinstance(value, list | tuple) and isinstance(default, list | tuple):
        return literal_equal(list(default), list(value))
    if default is None or isinstance(default, bool) or value is None or isinstance(value, bool):
        return value is default or (type(value) is type(default) and value == default)
    if isinstance(value, int | float) and isinstance(default, int | float):
        return value == default  # `alpha=1` and `alpha=1.0` are both the default
    return bool(value == default)
