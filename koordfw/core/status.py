"""Scheduling statuses, mirroring kube-scheduler's ``framework.Status``."""

from __future__ import annotations

import enum

import attrs

from .memo import BoundedCache


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5


@attrs.frozen(cache_hash=True)
class Status:
    """The outcome of one plugin call (or of a whole cycle).

    ``plugin`` names the plugin that produced a non-success status; ``timeout`` is set for WAIT.
    """

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str | None = None
    timeout: float | None = None

    # constructors -------------------------------------------------------------------------------
    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def error(cls, reason: str, plugin: str | None = None) -> Status:
        return cls(Code.ERROR, (reason,), plugin)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str | None = None) -> Status:
        return cls(Code.UNSCHEDULABLE, tuple(reasons), plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str | None = None) -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, tuple(reasons), plugin)

    @classmethod
    def wait(cls, timeout: float, reason: str = "") -> Status:
        return cls(Code.WAIT, (reason,) if reason else (), None, float(timeout))

    @classmethod
    def skip(cls) -> Status:
        return _SKIP

    # predicates ---------------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def is_rejection(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return ", ".join(r for r in self.reasons if r)

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin else attrs.evolve(self, plugin=plugin)

    def __str__(self) -> str:
        who = f"{self.plugin}: " if self.plugin else ""
        return f"{self.code.name}({who}{self.message})"


_SUCCESS = Status()
_SKIP = Status(Code.SKIP)


#: (untagged status, plugin) -> its copy naming the plugin: plugins return the same few module-level
#: statuses over and over. Keyed by value (a Status is frozen and caches its hash), so equal statuses share
#: one copy; process-wide, as the answer depends on the key alone
_TAGGED: BoundedCache[tuple[Status, str], Status] = BoundedCache(4096)


def as_status(value: object, plugin: str, *, default_code: Code = Code.UNSCHEDULABLE) -> Status:
    """Turn a plugin's return value into a Status.

    ``None``/``True`` mean success, a string is a rejection reason, ``False`` a bare rejection.
    """
    if value is None or value is True:
        return _SUCCESS
    if isinstance(value, Status):
        if value.plugin or value.code is Code.SUCCESS:
            return value
        key = (value, plugin)
        st = _TAGGED.get(key)
        if st is None:
            st = _TAGGED[key] = attrs.evolve(value, plugin=plugin)
        return st
    if isinstance(value, str):
        return Status(default_code, (value,), plugin)
    if value is False:
        return Status(default_code, (f"rejected by {plugin}",), plugin)
    return Status.error(f"plugin {plugin} returned an unexpected {type(value).__name__}: {value!r}", plugin)
