"""The agent's local time series: a numpy ring buffer of usage samples per series, and koordlet's
aggregations over a time window (``pkg/koordlet/metriccache``: ``avg``, ``p50``/``p90``/``p95``/``p99``).

A series is one node, the system, a pod or a host application; each sample is ``(t, cpu milli, memory
bytes)``, a missing value is NaN (the first round has no CPU rate). The buffer keeps the last
``capacity`` samples; the store sizes it from the longest window asked for and the round interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

#: the columns of a sample
CPU, MEMORY = 0, 1
COLUMNS = ("cpu", "memory")

#: koordlet's AggregationType names (apis/extension/constants.go) and the percentile each takes
AGGREGATIONS: dict[str, float | None] = {"avg": None, "p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def percentile(values: np.ndarray, p: float) -> float:
    """koordlet's ``fieldPercentileOfMetricList``: the ascending-sorted value at
    ``int(float32(n) * float32(p)) - 1`` (at least 0); the float32 product is Go's."""
    s = np.sort(values)
    idx = int(np.float32(len(s)) * np.float32(p)) - 1
    return float(s[max(idx, 0)])


def aggregate(values: np.ndarray, kind: str) -> float:
    """``kind`` (``avg`` or a percentile name) of a non-empty 1-D array."""
    p = AGGREGATIONS[kind]
    if p is None:
        return float(values.sum() / len(values))
    return percentile(values, p)


class Series:
    """A ring buffer of ``(t, cpu, memory)`` samples, oldest overwritten first."""

    __slots__ = ("t", "v", "head", "size")

    def __init__(self, capacity: int) -> None:
        self.t = np.full(capacity, np.nan)
        self.v = np.full((capacity, len(COLUMNS)), np.nan)
        self.head = 0  # next slot to write
        self.size = 0

    @property
    def capacity(self) -> int:
        return len(self.t)

    def add(self, t: float, cpu: float | None, memory: float | None) -> None:
        i = self.head
        self.t[i] = t
        self.v[i, CPU] = np.nan if cpu is None else cpu
        self.v[i, MEMORY] = np.nan if memory is None else memory
        self.head = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def ordered(self) -> tuple[np.ndarray, np.ndarray]:
        """The samples oldest first (copies)."""
        if self.size < self.capacity:
            return self.t[:self.size].copy(), self.v[:self.size].copy()
        order = np.r_[self.head:self.capacity, 0:self.head]
        return self.t[order], self.v[order]

    def resized(self, capacity: int) -> Series:
        """A series of ``capacity`` holding the newest samples of this one."""
        out = Series(capacity)
        t, v = self.ordered()
        for ti, vi in zip(t[-capacity:], v[-capacity:], strict=True):
            out.add(float(ti), None if math.isnan(vi[CPU]) else float(vi[CPU]),
                    None if math.isnan(vi[MEMORY]) else float(vi[MEMORY]))
        return out

    def window(self, start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
        """Sample times and values with ``start <= t <= end``."""
        n = self.size
        t, v = self.t[:n], self.v[:n]
        mask = (t >= start) & (t <= end)
        return t[mask], v[mask]

    def query(self, start: float, end: float, kind: str) -> tuple[dict[str, float], float] | None:
        """(``kind`` of each column over the window, the time range its CPU samples span), or ``None``
        when a column has no sample there (koordlet's query fails then: "metric input is empty")."""
        t, v = self.window(start, end)
        if not len(t):
            return None
        nan = np.isnan(v)
        if not nan.any():
            # every sample has both columns (the agent's usual case): one pass, the same figures
            cpu, mem = v[:, CPU], v[:, MEMORY]
            if kind == "avg":
                return {"cpu": float(cpu.sum() / len(cpu)), "memory": float(mem.sum() / len(mem))}, \
                    float(t.max() - t.min())
            return {"cpu": aggregate(cpu, kind), "memory": aggregate(mem, kind)}, float(t.max() - t.min())
        out: dict[str, float] = {}
        spans = []
        for c, name in enumerate(COLUMNS):
            ok = ~np.isnan(v[:, c])
            if not ok.any():
                return None
            out[name] = aggregate(v[ok, c], kind)
            spans.append(float(t[ok].max() - t[ok].min()))
        return out, spans[CPU]


class MetricStore:
    """Series by key, each keeping the samples of the last ``retention`` seconds at one per ``interval``;
    the keys in ``long_keys`` (node, system) keep ``retention``, the others (pods, host applications, only
    ever averaged over the aggregate duration) ``short_retention`` when given, so many pods cost little."""

    def __init__(self, retention: float, interval: float, *, short_retention: float | None = None,
                 long_keys: Iterable[str] = ()) -> None:
        self.series: dict[str, Series] = {}
        self.long_keys = frozenset(long_keys)
        self._capacity = self._short = 1
        self.configure(retention, interval, short_retention=short_retention)

    def configure(self, retention: float, interval: float, *, short_retention: float | None = None) -> None:
        """Resize every buffer for a new retention or sampling interval (newest samples kept)."""
        step = max(interval, 1e-3)
        cap = int(math.ceil(retention / step)) + 2
        short = cap if short_retention is None else min(cap, int(math.ceil(short_retention / step)) + 2)
        if (cap, short) != (self._capacity, self._short):
            self._capacity, self._short = cap, short
            self.series = {k: s.resized(self._cap_of(k)) for k, s in self.series.items()}

    def _cap_of(self, key: str) -> int:
        return self._capacity if key in self.long_keys else self._short

    @property
    def capacity(self) -> int:
        return self._capacity

    def record(self, key: str, t: float, cpu: float | None, memory: float | None) -> None:
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = Series(self._cap_of(key))
        s.add(t, cpu, memory)

    def forget_except(self, keys: Iterable[str]) -> None:
        """Drop the series of pods and host apps that are gone (koordlet excludes deleted pods too)."""
        keep = set(keys)
        for k in [k for k in self.series if k not in keep]:
            del self.series[k]

    def query(self, key: str, start: float, end: float, kind: str) -> tuple[dict[str, float], float] | None:
        s = self.series.get(key)
        return None if s is None else s.query(start, end, kind)
