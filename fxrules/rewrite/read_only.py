"""A helper sees the module's parameters, buffers and submodules read-only.

A helper receives the real modules a rule captured and the real tensors of ``get_attr`` captures.  A
change it made to them (``bn.weight.mul_(2)``, ``conv.extra = ...``) would be outside the undo log: an
``apply`` that then fails, or is interrupted, could not leave the module as it was, and one that succeeds
would have changed what the rest of the model computes.  While a helper runs, :func:`read_only` refuses
every tensor operation that writes into the storage of those tensors, before it writes; and after the
helper returns or raises, the modules' attributes (parameters, buffers, submodules, plain attributes) are
compared with what they were, put back if they changed, and the change reported.  Writes that bypass
torch's dispatcher (through ``.numpy()`` or a raw pointer) are not seen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class ArgumentWriteError(RuntimeError):
    """A helper tried to change a module or tensor it was given."""


@contextlib.contextmanager
def read_only(helper: str, values: Iterable[Any]) -> Iterator[None]:
    """While the body runs (helper ``helper``'s call), the modules and tensors among ``values`` cannot be
    written in place, and a change to the modules' attributes is undone and raises :class:`ArgumentWriteError`."""
    values = list(values)
    modules = [sub for value in values if isinstance(value, torch.nn.Module) for sub in value.modules()]
    tensors = {_storage(t): name for value in values for name, t in _tensors(value) if _storage(t)}
    saved = [(module, _attributes(module)) for module in modules]
    try:
        if tensors:
            with _RefuseWrites(helper, tensors):
                yield
        else:
            yield
    finally:
        changed = [_restore(module, attributes) for module, attributes in saved
                   if not _same(attributes, _attributes(module))]
    if changed:
        raise ArgumentWriteError(f"helper '@{helper}' changed the attributes of {', '.join(changed)} it was given "
                               "(put back); a helper must return new values, not change its arguments")


class _RefuseWrites(TorchDispatchMode):
    """Raises :class:`ArgumentWriteError` before an operation writes into one of the protected storages."""

    def __init__(self, helper: str, storages: dict[int, str]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves TorchDispatchMode.__init__ unannotated
        self.helper = helper
        self.storages = storages

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        for written in _written(func, args, kwargs):
            name = self.storages.get(_storage(written))
            if name is not None:
                raise ArgumentWriteError(f"helper '@{self.helper}' tried to write in place into {name} ({func}); "
                                       "a helper must return new values, not change its arguments")
        return func(*args, **kwargs)


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[torch.Tensor]:
    """The tensors ``func`` writes into, by its schema."""
    for index, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[index] if index < len(args) else kwargs.get(argument.name)
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, torch.Tensor):
                yield item


def _tensors(value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield "a tensor", value
    elif isinstance(value, torch.nn.Module):
        kind = type(value).__name__
        for name, tensor in [*value.named_parameters(), *value.named_buffers()]:
            yield f"{kind}.{name}", tensor


def _storage(tensor: torch.Tensor) -> int:
    """The address of the tensor's data (0 for a tensor with none, such as a fake or meta tensor's)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


_KINDS = ("_parameters", "_buffers", "_modules")


def _attributes(module: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """The module's plain attributes, parameters, buffers and submodules, each a shallow copy by name."""
    return {"__dict__": dict(vars(module)), **{kind: dict(getattr(module, kind)) for kind in _KINDS}}


def _same(saved: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> bool:
    """Every attribute is the same object it was (a new one that compares equal is still a change)."""
    return all(saved[kind].keys() == now[kind].keys() and all(value is now[kind][name] for name, value in
                                                               saved[kind].items()) for kind in saved)


def _restore(module: torch.nn.Module, saved: dict[str, dict[str, Any]]) -> str:
    """Put the module's attributes back as ``saved``; the module named for the report."""
    vars(module).clear()
    vars(module).update(saved["__dict__"])
    for kind in _KINDS:
        container = getattr(module, kind)
        container.clear()
        container.update(saved[kind])
    return f"a {type(module).__name__}"
