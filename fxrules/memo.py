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


def per_object(derive: Callable[[Any], Derived]) -> Callable[[Any], Derived]:
    """``derive(obj)`` computed once per live object ``obj`` (which must support weak references)."""
    cache: dict[int, tuple[weakref.ref[Any], Derived]] = {}

    @functools.wraps(derive)
    def cached(obj: Any) -> Derived:
        key = id(obj)
        entry = cache.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        value = derive(obj)
        cache[key] = (weakref.ref(obj, lambda _: cache.pop(key, None)), value)
        return value

    return cached
