"""Per-cycle state shared by the plugins of one pod's scheduling cycle, with typed keys.

As kube's ``framework.CycleState`` (``Read``/``Write`` by ``StateKey``) and pytest's ``Stash``
(``StashKey[T]``): a plugin declares a module-level ``KEY: StateKey[MyState] = StateKey("plugin/what")``
and reads back exactly the type it wrote. Keys are compared by identity, so two plugins can never
collide on a name, and plain strings are refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
D = TypeVar("D")

__all__ = ["CycleState", "StateKey"]


class StateKey(Generic[T]):
    """A typed key of :class:`CycleState`; ``name`` is for messages and ``repr`` only."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


def _check(key: object) -> None:
    if not isinstance(key, StateKey):
        raise TypeError(f"CycleState keys are StateKey objects, not {type(key).__name__} ({key!r})")


class CycleState:
    """Scratch space of one pod's cycle (kube's CycleState).

    ``annotations`` collects what pre_bind plugins ask to be written on the pod; ``skip_filter`` and
    ``skip_score`` hold the plugins whose pre_filter/pre_score returned Skip (their filter/score does
    not run for this pod).
    """

    __slots__ = ("_data", "annotations", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[StateKey[Any], Any] = {}
        self.annotations: dict[str, str] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()

    def __getitem__(self, key: StateKey[T]) -> T:
        _check(key)
        try:
            return self._data[key]
        except KeyError:
            raise KeyError(f"{key.name} is not in the cycle state") from None

    def __setitem__(self, key: StateKey[T], value: T) -> None:
        _check(key)
        self._data[key] = value

    def __delitem__(self, key: StateKey[Any]) -> None:
        _check(key)
        del self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[StateKey[Any]]:
        return iter(self._data)

    @overload
    def get(self, key: StateKey[T]) -> T | None: ...
    @overload
    def get(self, key: StateKey[T], default: D) -> T | D: ...
    def get(self, key: StateKey[T], default: Any = None) -> Any:
        _check(key)
        return self._data.get(key, default)

    @overload
    def pop(self, key: StateKey[T]) -> T | None: ...
    @overload
    def pop(self, key: StateKey[T], default: D) -> T | D: ...
    def pop(self, key: StateKey[T], default: Any = None) -> Any:
        _check(key)
        return self._data.pop(key, default)

    def clone(self) -> CycleState:
        """A shallow copy (kube's ``CycleState.Clone``), for what-if runs that must not touch this one."""
        c = CycleState()
        c._data = dict(self._data)
        c.annotations = dict(self.annotations)
        c.skip_filter = set(self.skip_filter)
        c.skip_score = set(self.skip_score)
        return c

    def __repr__(self) -> str:
        return f"CycleState({', '.join(k.name for k in self._data)})"
