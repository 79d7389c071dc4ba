"""Reading the plain data of a user's module without running its code.

A captured module is the user's object: a property of its class could do
anything, and ``nn.Module``'s own ``__getattr__`` is Python code too.  Guards
and families read module attributes only through here: parameters, buffers,
submodules, the instance ``__dict__`` and plain class attributes.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


class UnreadableAttribute(Exception):  # noqa: N818 - a guard error, not a program error
    """The module has no such attribute, or it is code (a property, a method) rather than data."""


#: What a guard may read from a captured module: plain data, tensors, and submodules (``m.conv.groups``).
MODULE_DATA = (bool, int, float, complex, str, type(None), torch.dtype, torch.device, torch.layout,
               torch.memory_format, torch.Tensor, torch.nn.Module)
_ABSENT = object()


def read_module_attribute(module: torch.nn.Module, attr: str) -> Any:
    """``module.attr`` read without running any code of the module: its parameters, buffers and submodules,
    its instance ``__dict__``, or a plain class attribute, never a property, method or ``__getattr__``.

    A captured module is the user's object: a property of its class could do anything, and ``nn.Module``'s
    own ``__getattr__`` is Python code too.  Only plain data comes back; anything else is
    :class:`UnreadableAttribute`.
    """
    value = _static_module_attribute(module, attr)
    if value is _ABSENT:
        raise UnreadableAttribute(f"'{type(module).__name__}' has no attribute '{attr}'")
    if not _is_module_data(value):
        kind = "a property" if isinstance(value, property) else (
            "a method" if callable(value) else f"a {type(value).__name__}")
        raise UnreadableAttribute(f"'{type(module).__name__}.{attr}' is {kind}; guards read plain data attributes only "
                         "(numbers, bools, strings, None, tuples of them, tensors, submodules)")
    return value


def module_parameter(module: torch.nn.Module, attr: str, default: Any) -> Any:
    """A family parameter held by a module (``nn.Softmax.dim``), read as a guard reads it: ``default`` when the
    module has no such attribute or it is a method; :class:`UnreadableAttribute` when it is a property or other code."""
    value = _static_module_attribute(module, attr)
    if value is _ABSENT or (callable(value) and not _is_module_data(value)
                            and not isinstance(value, property | staticmethod | classmethod)):
        return default
    return read_module_attribute(module, attr)


def _static_module_attribute(module: torch.nn.Module, attr: str) -> Any:
    state = vars(module)
    for store in ("_parameters", "_buffers", "_modules"):
        entries = state.get(store)
        if isinstance(entries, dict) and attr in entries:
            return entries[attr]
    if attr in state:
        return state[attr]
    return inspect.getattr_static(type(module), attr, _ABSENT)


def _is_module_data(value: Any) -> bool:
    if isinstance(value, tuple | list):
        return all(_is_module_data(item) for item in value)
    return isinstance(value, MODULE_DATA)
