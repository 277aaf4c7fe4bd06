"""Injectable clocks. The embedded cluster runs on a VirtualClock: timers fire when the engine
advances time, so permit timeouts and backoffs cost no wall time."""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import anyio

if TYPE_CHECKING:
    import asyncio


def _finite(t: float, what: str) -> float:
    """Virtual time must be finite and move when advanced: a time so large that adding a second to it
    changes nothing (beyond 2^52 s) would stop the clock, and the run with it."""
    t = float(t)
    if not math.isfinite(t) or abs(t) >= 2.0**52:
        raise ValueError(f"virtual clock: {what} at {t!r} is not a usable time")
    return t


class TimerHandle:
    __slots__ = ("when", "callback", "cancelled", "_loop_handle")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False
        self._loop_handle: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self._loop_handle is not None:
            self._loop_handle.cancel()


class Clock(Protocol):
    virtual: bool

    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    """Wall-clock time; timers run on the asyncio loop."""

    virtual = False

    def now(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        import asyncio

        h = TimerHandle(when, callback)
        h._loop_handle = asyncio.get_running_loop().call_later(max(0.0, when - time.time()), callback)
        return h

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class VirtualClock:
    """Simulated time. ``advance_to`` moves time forward and runs due timers in order."""

    virtual = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = _finite(start, "start")
        self._timers: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        h = TimerHandle(_finite(when, "a timer"), callback)
        heapq.heappush(self._timers, (when, next(self._seq), h))
        return h

    def next_deadline(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance_to(self, when: float) -> int:
        """Set the time to ``when`` (never backwards), firing every timer due by then. Returns how many fired."""
        when = _finite(when, "advance_to")
        fired = 0
        while self._timers and self._timers[0][0] <= when:
            t, _, h = heapq.heappop(self._timers)
            if h.cancelled:
                continue
            self._now = max(self._now, t)
            fired += 1
            h.callback()
        self._now = max(self._now, when)
        return fired

    def advance(self, seconds: float) -> int:
        return self.advance_to(self._now + seconds)

    async def sleep(self, seconds: float) -> None:
        ev = anyio.Event()
        self.call_at(self._now + seconds, ev.set)
        await ev.wait()
