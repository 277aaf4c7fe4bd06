"""A plugin's engine-lifetime state: the ``stash`` on its handle (pytest's ``Stash`` / ``StashKey``).

Every handle the kernel gives a plugin has a :class:`Stash` of its own: one per plugin per engine (a
scheduler, an agent, an admission engine, a node planner). Two engines in one process never share
one, and a plugin's stash is not another plugin's. A plugin keeps there what lives as long as the
engine (a feedback loop's state, the history of past rounds, caches of the engine's objects) instead of
a module global, which would be shared by every engine of the process::

    HISTORY = koordfw.StashKey[list[float]]()

    @hookimpl
    def collect(node_state, handle):
        handle.stash.setdefault(HISTORY, []).append(node_state.capacity["cpu"])

Keys are objects, compared by identity: a key made at import is the plugin's own, and the value's type
is the key's type parameter, so mypy checks ``handle.stash[HISTORY]`` as ``list[float]``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, cast

__all__ = ["Stash", "StashKey", "new_stash"]

T = TypeVar("T")
D = TypeVar("D")


class StashKey(Generic[T]):
    """A key of a :class:`Stash`: ``StashKey[T]()``, made once (at import); its value has type ``T``.

    Keys are compared by identity: two keys are never the same entry."""

    __slots__ = ()


class Stash:
    """A typed, per-handle store of a plugin's state: ``stash[key] = value``, ``stash[key]``,
    ``stash.get(key, default)``, ``stash.setdefault(key, default)``, ``key in stash``, ``del stash[key]``,
    ``len(stash)``. A missing key raises :class:`KeyError`."""

    __slots__ = ("_storage",)

    def __init__(self) -> None:
        self._storage: dict[StashKey[Any], object] = {}

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._storage[key] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        return cast(T, self._storage[key])

    def get(self, key: StashKey[T], default: D) -> T | D:
        """The value of ``key``, or ``default`` if it has none."""
        try:
            return self[key]
        except KeyError:
            return default

    def setdefault(self, key: StashKey[T], default: T) -> T:
        """The value of ``key``; ``default`` (stored first) if it has none."""
        try:
            return self[key]
        except KeyError:
            self[key] = default
            return default

    def __delitem__(self, key: StashKey[T]) -> None:
        del self._storage[key]

    def __contains__(self, key: StashKey[T]) -> bool:
        return key in self._storage

    def __len__(self) -> int:
        return len(self._storage)

    def __repr__(self) -> str:
        return f"<Stash of {len(self._storage)} entries>"


def new_stash() -> Stash:
    """A new, empty stash: what an engine gives each handle it makes (one per plugin per engine)."""
    return Stash()
