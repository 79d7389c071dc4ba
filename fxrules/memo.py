"""Caching what is derived from an immutable object that cannot be hashed (a Rule, a RuleSet), per object.

Rules and rule sets are frozen, but they hold dicts, so they cannot be dict keys; what ``apply``
derives from them (compiled matchers, which templates need a purity check) is kept by object
identity instead, and dropped when the object is collected (so a new object at a reused address
never sees a stale entry).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

Derived = TypeVar("Derived")


class _Entry(weakref.ref[Any]):
    """A cache entry: a weak reference to the object, with its key (the object's id) and what was derived.

    One object per entry, and one callback per cache: a load makes thousands of entries, and a closure per
    entry (a function and a cell besides the reference) cost a microsecond each and as many objects more for
    the collector to scan."""

    __slots__ = ("key", "value")
    key: int
    value: Any


def per_object(derive: Callable[[Any], Derived]) -> Callable[[Any], Derived]:
    """``derive(obj)`` computed once per live object ``obj`` (which must support weak references)."""
    cache: dict[int, _Entry] = {}

    def drop(entry: _Entry) -> None:  # the object died: its address may be reused
        if cache.get(entry.key) is entry:
            del cache[entry.key]

    @functools.wraps(derive)
    def cached(obj: Any) -> Derived:
        key = id(obj)
        entry = cache.get(key)
        if entry is not None and entry() is obj:
            return entry.value  # type: ignore[no-any-return]
        value = derive(obj)
        entry = _Entry(obj, drop)
        entry.key = key
        entry.value = value
        cache[key] = entry
        return value

    return cached
