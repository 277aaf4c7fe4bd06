"""A client-side token bucket (client-go's ``flowcontrol`` QPS/burst), since no Python client has one."""

from __future__ import annotations

import time

import anyio


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` saved. ``acquire`` reserves a token and sleeps until
    it is due, so waiters are served in arrival order (like golang.org/x/time/rate ``Wait``).
    ``qps <= 0`` disables the limit."""

    def __init__(self, qps: float = 50.0, burst: int = 100) -> None:
        if burst < 1 and qps > 0:
            raise ValueError("burst must be at least 1")
        self.qps, self.burst = float(qps), int(burst)
        self._tokens = float(burst)
        self._last = time.monotonic()
        self.waited_seconds = 0.0

    def _refill(self, now: float) -> None:
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_acquire(self) -> bool:
        if self.qps <= 0:
            return True
        self._refill(time.monotonic())
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        self._refill(time.monotonic())
        self._tokens -= 1
        if self._tokens < 0:
            wait = -self._tokens / self.qps
            self.waited_seconds += wait
            await anyio.sleep(wait)
