"""Scheduling statuses, mirroring kube-scheduler's ``framework.Status``."""

from __future__ import annotations

import enum

import attrs


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5


@attrs.frozen
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


#: id(untagged status), plugin -> (that status, its copy naming the plugin); keyed by identity because
#: plugins return the same few module-level statuses over and over, and hashing a Status is slow
_TAGGED: dict[tuple[int, str], tuple[Status, Status]] = {}


def as_status(value: object, plugin: str, *, default_code: Code = Code.UNSCHEDULABLE) -> Status:
    """Turn a plugin's return value into a Status.

    ``None``/``True`` mean success, a string is a rejection reason, ``False`` a bare rejection.
    """
    if value is None or value is True:
        return _SUCCESS
    if isinstance(value, Status):
        if value.plugin or value.code is Code.SUCCESS:
            return value
        key = (id(value), plugin)
        hit = _TAGGED.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        if len(_TAGGED) > 4096:
            _TAGGED.clear()
        st = attrs.evolve(value, plugin=plugin)
        _TAGGED[key] = (value, st)
        return st
    if isinstance(value, str):
        return Status(default_code, (value,), plugin)
    if value is False:
        return Status(default_code, (f"rejected by {plugin}",), plugin)
    return Status.error(f"plugin {plugin} returned an unexpected {type(value).__name__}: {value!r}", plugin)
