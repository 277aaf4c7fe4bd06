"""The kernel's one cache helper: :class:`BoundedCache` and the :func:`memo` decorator.

A cache here is bounded (an explicit ``maxsize``; when full, the oldest entry goes first: insertion
order, a hit does not refresh it) and keyed by a **stable** key: a value (a quantity string, a tuple
of resource names, a frozen object's fields) or what names one version of an object (its uid and
``resourceVersion``, a cluster's generation counters). Never key one by ``id()``: an id is reused as
soon as its object is collected, so a cache keyed by it answers for another object. A cache of the
engine's objects belongs in the plugin's :class:`~koordfw.Stash` (one per engine), not in a module.
An object with no value to key on (the cluster, a manifest dict the engine hands out until it changes)
is keyed by an :class:`IdentityKey`, which holds it: while the key lives the object does too, so its
identity is never another object's.

A process-wide cache (a module-level ``BoundedCache`` or a ``@memo`` function) is for pure functions
of immutable values only: whatever engine asks, the answer is the same.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Hashable
from typing import Generic, ParamSpec, TypeVar, overload

__all__ = ["BoundedCache", "IdentityKey", "memo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")
P = ParamSpec("P")
R = TypeVar("R")

_MISSING = object()


class BoundedCache(Generic[K, V]):
    """A dict of at most ``maxsize`` entries; adding one to a full cache first drops the oldest added
    (first in, first out). ``cache[key]``, ``cache.get(key)``, ``key in cache``, ``cache[key] = value``,
    ``cache.get_or_set(key, compute)``, ``len(cache)``, ``cache.clear()``. Keys must be stable (see the
    module's docstring: values, uids and generations; never ``id()``)."""

    __slots__ = ("_data", "maxsize")

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"BoundedCache: maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self._data: dict[K, V] = {}

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        """The cached value of ``key``, or ``default``."""
        return self._data.get(key, default)

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __setitem__(self, key: K, value: V) -> None:
        data = self._data
        if key not in data and len(data) >= self.maxsize:
            del data[next(iter(data))]
        data[key] = value

    def get_or_set(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value of ``key``; on a miss, ``compute()`` stored and returned."""
        hit = self._data.get(key, _MISSING)
        if hit is _MISSING:
            hit = self[key] = compute()
        return hit  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()

    def __repr__(self) -> str:
        return f"<BoundedCache {len(self._data)}/{self.maxsize}>"


class IdentityKey:
    """A key standing for objects themselves, in order: ``IdentityKey(cluster, *devices)``. It holds
    them, so none is collected (and its identity reused) while the key lives, and it equals only a key of
    the very same objects: a replaced object, even an equal one, makes a different key. Hashable (by the
    objects' identities) and comparable with ``==``; put it in a tuple with value parts (generations).
    A cluster first stands for its one read-only view, so that the engine's state (``NodeBatch.cluster``)
    and the view plugins get (``handle.cluster``) make the same key."""

    __slots__ = ("_hash", "objects")

    def __init__(self, *objects: object) -> None:
        if objects:
            from .cluster_view import canonical_cluster  # the model (status) imports this module

            first = canonical_cluster(objects[0])
            if first is not objects[0]:
                objects = (first, *objects[1:])
        self.objects = objects
        self._hash: int | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IdentityKey):
            return NotImplemented
        a, b = self.objects, other.objects
        return len(a) == len(b) and all(map(operator.is_, a, b))

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(object.__hash__(o) for o in self.objects))
        return self._hash

    def __repr__(self) -> str:
        return f"IdentityKey({', '.join(type(o).__name__ for o in self.objects)})"


def memo(maxsize: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Cache a pure function of hashable, immutable arguments in a :class:`BoundedCache` of ``maxsize``
    entries (oldest out first), keyed by its positional and keyword arguments' values. The wrapper's
    ``cache`` attribute is the cache (``f.cache.clear()``). An exception is not cached.

    For functions whose answer depends only on the values they are given (parsing a quantity string),
    so the one cache may serve every engine of the process."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        cache: BoundedCache[Hashable, R] = BoundedCache(maxsize)

        @functools.wraps(fn)
        def cached(*args: P.args, **kwargs: P.kwargs) -> R:
            key: Hashable = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            hit = cache.get(key, _MISSING)
            if hit is _MISSING:
                hit = cache[key] = fn(*args, **kwargs)
            return hit  # type: ignore[return-value]

        cached.cache = cache  # type: ignore[attr-defined]
        return cached

    return wrap
