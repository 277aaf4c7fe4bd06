"""The agent's local time series: a numpy ring buffer of usage samples per series, and koordlet's
aggregations over a time window (``pkg/koordlet/metriccache``: ``avg``, ``p50``/``p90``/``p95``/``p99``).

A series is one node, the system, a pod or a host application; each sample is ``(t, cpu milli, memory
bytes)``, a missing value is NaN (the first round has no CPU rate). The buffer keeps the last
``capacity`` samples; the store sizes it from the longest window asked for and the round interval.

A series of few samples (``SMALL_CAPACITY`` or less, e.g. the colocation replay's 5-minute slots over a
15-minute window) is a :class:`SmallSeries`: the same buffer and figures without numpy, because numpy's
per-call overhead (about a microsecond an operation) dominates there; the agent's 1-second rounds keep numpy.
"""

from __future__ import annotations

import array
import functools
import math
import operator
from collections.abc import Iterable, Sequence

import numpy as np

#: the columns of a sample
CPU, MEMORY = 0, 1
COLUMNS = ("cpu", "memory")

#: koordlet's AggregationType names (apis/extension/constants.go) and the percentile each takes
AGGREGATIONS: dict[str, float | None] = {"avg": None, "p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


#: series of at most this many samples are kept without numpy (:class:`SmallSeries`)
SMALL_CAPACITY = 16


@functools.lru_cache(maxsize=4096)
def percentile_index(n: int, p: float) -> int:
    """The index koordlet's ``fieldPercentileOfMetricList`` reads in ``n`` ascending-sorted values:
    ``int(float32(n) * float32(p)) - 1``, at least 0; the float32 product is Go's."""
    return max(int(np.float32(n) * np.float32(p)) - 1, 0)


def percentile(values: np.ndarray, p: float) -> float:
    """koordlet's ``fieldPercentileOfMetricList``: the ascending-sorted value at :func:`percentile_index`."""
    return float(np.sort(values)[percentile_index(len(values), p)])


def aggregate(values: np.ndarray, kind: str) -> float:
    """``kind`` (``avg`` or a percentile name) of a non-empty 1-D array."""
    p = AGGREGATIONS[kind]
    if p is None:
        return float(values.sum() / len(values))
    return percentile(values, p)


def pairwise_sum(values: Sequence[float]) -> float:
    """``np.add.reduce`` of ``values`` in Python, bit for bit: numpy adds a pairwise sum to its identity 0.0."""
    return 0.0 + _pairwise(values)


def _pairwise(a: Sequence[float]) -> float:
    # numpy's pairwise_sum (loops_utils.h): sequential below 8 values (from -0.0), 8 interleaved
    # accumulators up to 128 then the rest in order, halves (at a multiple of 8) above
    n = len(a)
    if n < 8:
        return functools.reduce(operator.add, a, -0.0)
    if n <= 128:
        whole = n - n % 8
        r = [functools.reduce(operator.add, a[j:whole:8]) for j in range(8)]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        return functools.reduce(operator.add, a[whole:], res)
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a[:n2]) + _pairwise(a[n2:])


def make_series(capacity: int) -> Series | SmallSeries:
    """A ring buffer of ``capacity`` samples: :class:`SmallSeries` up to ``SMALL_CAPACITY``, else :class:`Series`."""
    return SmallSeries(capacity) if capacity <= SMALL_CAPACITY else Series(capacity)


def _refilled(out: Series | SmallSeries, t: np.ndarray, v: np.ndarray) -> Series | SmallSeries:
    """``out`` with the newest of the samples ``t``, ``v`` (oldest first) added."""
    cap = out.capacity
    for ti, vi in zip(t[-cap:], v[-cap:], strict=True):
        out.add(float(ti), None if math.isnan(vi[CPU]) else float(vi[CPU]),
                None if math.isnan(vi[MEMORY]) else float(vi[MEMORY]))
    return out


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

    def resized(self, capacity: int) -> Series | SmallSeries:
        """A series of ``capacity`` (see :func:`make_series`) holding the newest samples of this one."""
        return _refilled(make_series(capacity), *self.ordered())

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


class SmallSeries:
    """:class:`Series` without numpy, for a few samples: the same slots, the same window (slot order, so sums
    add in the same order) and bit-identical figures (:func:`pairwise_sum`, :func:`percentile_index`);
    ``ordered`` and ``window`` give numpy arrays as Series does. Each column is an ``array('d')``, contiguous
    doubles as numpy's: in the replay (42 nodes x ~20 series) they cost fewer cache misses than tuples of
    float objects (status measured 20% cheaper). (Only a percentile over values mixing 0.0 and -0.0 could
    pick the other zero: ``sorted`` is stable, ``np.sort`` need not be; usages are never -0.0.)"""

    __slots__ = ("t", "cpu", "memory", "head", "size", "capacity")

    def __init__(self, capacity: int) -> None:
        self.t = array.array("d", [math.nan]) * capacity
        self.cpu = array.array("d", [math.nan]) * capacity
        self.memory = array.array("d", [math.nan]) * capacity
        self.head = 0  # next slot to write
        self.size = 0
        self.capacity = capacity

    def add(self, t: float, cpu: float | None, memory: float | None) -> None:
        i = self.head
        self.t[i] = t
        self.cpu[i] = math.nan if cpu is None else cpu
        self.memory[i] = math.nan if memory is None else memory
        self.head = (i + 1) % self.capacity
        if self.size < self.capacity:
            self.size += 1

    def _arrays(self, slots: list[int]) -> tuple[np.ndarray, np.ndarray]:
        t = np.array([self.t[i] for i in slots], dtype=float)
        v = np.array([(self.cpu[i], self.memory[i]) for i in slots], dtype=float).reshape(len(slots), len(COLUMNS))
        return t, v

    def ordered(self) -> tuple[np.ndarray, np.ndarray]:
        """The samples oldest first (copies)."""
        if self.size < self.capacity:
            return self._arrays(list(range(self.size)))
        return self._arrays([*range(self.head, self.capacity), *range(self.head)])

    def resized(self, capacity: int) -> Series | SmallSeries:
        """A series of ``capacity`` (see :func:`make_series`) holding the newest samples of this one."""
        return _refilled(make_series(capacity), *self.ordered())

    def _slots(self, start: float, end: float) -> list[int]:
        # an unwritten slot's time is NaN: no window holds it
        return [i for i, x in enumerate(self.t) if start <= x <= end]

    def window(self, start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
        """Sample times and values with ``start <= t <= end``."""
        return self._arrays(self._slots(start, end))

    def query(self, start: float, end: float, kind: str) -> tuple[dict[str, float], float] | None:
        """As :meth:`Series.query`."""
        slots = self._slots(start, end)
        if not slots:
            return None
        tt, cc, mm = self.t, self.cpu, self.memory
        t = [tt[i] for i in slots]
        cpu = [cc[i] for i in slots]
        memory = [mm[i] for i in slots]
        p = AGGREGATIONS[kind]
        if p is None:
            cpu_sum, memory_sum = pairwise_sum(cpu), pairwise_sum(memory)
            if cpu_sum == cpu_sum and memory_sum == memory_sum:  # not NaN: no value is missing
                return {"cpu": cpu_sum / len(cpu), "memory": memory_sum / len(memory)}, max(t) - min(t)
        if any(map(math.isnan, cpu)) or any(map(math.isnan, memory)):
            # a missing value: each column over its own samples, the span of the CPU samples' times
            ok = [k for k, c in enumerate(cpu) if not math.isnan(c)]
            memory = [m for m in memory if not math.isnan(m)]
            if not ok or not memory:
                return None
            t, cpu = [t[k] for k in ok], [cpu[k] for k in ok]
        if p is None:
            out = {"cpu": pairwise_sum(cpu) / len(cpu), "memory": pairwise_sum(memory) / len(memory)}
        else:
            out = {"cpu": sorted(cpu)[percentile_index(len(cpu), p)],
                   "memory": sorted(memory)[percentile_index(len(memory), p)]}
        return out, max(t) - min(t)


class MetricStore:
    """Series by key, each keeping the samples of the last ``retention`` seconds at one per ``interval``;
    the keys in ``long_keys`` (node, system) keep ``retention``, the others (pods, host applications, only
    ever averaged over the aggregate duration) ``short_retention`` when given, so many pods cost little."""

    def __init__(self, retention: float, interval: float, *, short_retention: float | None = None,
                 long_keys: Iterable[str] = ()) -> None:
        self.series: dict[str, Series | SmallSeries] = {}
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
            s = self.series[key] = make_series(self._cap_of(key))
        s.add(t, cpu, memory)

    def forget_except(self, keys: Iterable[str]) -> None:
        """Drop the series of pods and host apps that are gone (koordlet excludes deleted pods too)."""
        for k in self.series.keys() - keys:
            del self.series[k]

    def query(self, key: str, start: float, end: float, kind: str) -> tuple[dict[str, float], float] | None:
        s = self.series.get(key)
        return None if s is None else s.query(start, end, kind)
