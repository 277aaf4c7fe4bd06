"""The usage profile of workload templates: decaying histograms of usage / request, as Koordinator's
peak predictor (``pkg/koordlet/prediction``: p95 CPU, p98 memory, a 10 % safety margin, histogram half-lives
of 12 h for CPU and 24 h for memory) and the VPA recommender it follows keep them.

A *template* is what the pods of one workload share (a Job's pod template, a batch task's shape). A sample
is one pod's (or a group of equal pods') measured usage against its request, weighted (pods × seconds);
the histogram of the ratio ``usage / request`` gets weights that grow as ``2 ** (t / halfLife)`` (VPA's
trick: the same as decaying old samples, without touching them). A recommendation is the ratio's
percentile × (1 + safety margin) × the request, once a template has :attr:`ProfileArgs.min_weight` of
samples; a template without enough falls back to the next, coarser key the caller gives (e.g. task →
task class → everything), and to the request itself when none has.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import attrs
import numpy as np

#: the ratio histogram: geometric buckets from 1 % to 20× the request, 3 % wide (VPA uses 5 % buckets)
RATIO_MIN, RATIO_MAX, BUCKET_GROWTH = 0.01, 20.0, 1.03
_EDGES = np.exp(np.arange(math.log(RATIO_MIN), math.log(RATIO_MAX) + math.log(BUCKET_GROWTH), math.log(BUCKET_GROWTH)))
NBUCKETS = len(_EDGES)
#: reference time of the growing weights is moved forward (the weights rescaled) past this exponent
_MAX_EXPONENT = 60.0


def _percent(inst: object, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
        raise ValueError(f"{attribute.name}: a percentage in (0, 100], got {value!r}")


def _non_negative(inst: object, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
        raise ValueError(f"{attribute.name}: a finite number >= 0, got {value!r}")


def _positive(inst: object, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"{attribute.name}: a finite number > 0, got {value!r}")


@attrs.frozen
class ProfileArgs:
    """``pluginConfig.resource_profile``. Defaults: Koordinator's peak predictor."""

    #: right-size BE pods at admission (the profile keeps learning either way)
    enable: bool = True
    cpu_percentile: float = attrs.field(default=95.0, validator=_percent)
    memory_percentile: float = attrs.field(default=98.0, validator=_percent)
    safety_margin_percent: float = attrs.field(default=10.0, validator=_non_negative)
    cpu_half_life_hours: float = attrs.field(default=12.0, validator=_positive)
    memory_half_life_hours: float = attrs.field(default=24.0, validator=_positive)
    #: samples (pod-seconds) a template needs before it is used: 10 pod-minutes
    min_weight: float = attrs.field(default=600.0, validator=_non_negative)
    #: a recommendation never goes below this share of the request (a floor against a bad profile)
    min_ratio: float = attrs.field(default=0.05, validator=_positive)
    #: nor above this multiple of it: 1 (the default) only ever lowers a request, the owner's request being
    #: the ceiling; above 1 a workload using more than it asks for gets a larger request
    max_ratio: float = attrs.field(default=1.0, validator=_positive)


@attrs.frozen
class Recommendation:
    """A right-sized request: ``cpu`` milli and ``memory`` bytes, and the template key that gave each
    (``""``: no profile, the request kept)."""

    cpu: int
    memory: int
    cpu_key: str = ""
    memory_key: str = ""


_EDGE_LIST = _EDGES.tolist()


class _Histogram:
    __slots__ = ("weights", "ref", "half_life", "_sum", "_pct")

    def __init__(self, half_life: float) -> None:
        self.weights = np.zeros(NBUCKETS)
        self.ref: float | None = None
        self.half_life = half_life
        #: the weights' sum (kept as they are added) and the percentiles asked since the last add
        self._sum = 0.0
        self._pct: dict[float, float] = {}

    def add(self, ratio: float, weight: float, now: float) -> None:
        if self.ref is None:
            self.ref = now
        exp = (now - self.ref) / self.half_life
        if exp > _MAX_EXPONENT:  # rebase: every weight scaled by the same factor, percentiles unchanged
            self.weights *= 2.0 ** (-exp)
            self._sum *= 2.0 ** (-exp)
            self.ref, exp = now, 0.0
        b = bisect.bisect_right(_EDGE_LIST, min(max(ratio, RATIO_MIN), RATIO_MAX)) - 1
        w = weight * 2.0 ** exp
        self.weights[min(max(b, 0), NBUCKETS - 1)] += w
        self._sum += w
        self._pct.clear()

    def total(self, now: float) -> float:
        """The weight in plain pod-seconds at ``now`` (decayed; a ``now`` before the samples counts them
        undecayed)."""
        if self.ref is None:
            return 0.0
        exp = min(max(now - self.ref, 0.0) / self.half_life, 1000.0)
        return self._sum * 2.0 ** (-exp)

    def percentile(self, q: float) -> float:
        """The upper edge of the bucket holding the ``q``-th percentile (as VPA: a conservative estimate)."""
        got = self._pct.get(q)
        if got is None:
            c = np.cumsum(self.weights)
            b = int(np.searchsorted(c, c[-1] * q / 100.0, side="left"))
            b = min(b, NBUCKETS - 1)
            got = self._pct[q] = float(_EDGES[b + 1] if b + 1 < NBUCKETS else _EDGES[b])
        return got


class Profiler:
    """The usage profiles of templates (see the module docstring)."""

    def __init__(self, args: ProfileArgs | None = None) -> None:
        self.args = args or ProfileArgs()
        self._cpu: dict[str, _Histogram] = {}
        self._mem: dict[str, _Histogram] = {}

    def __len__(self) -> int:
        return len(self._cpu.keys() | self._mem.keys())

    def observe(self, keys: Sequence[str], *, now: float, cpu_request: int = 0, cpu_usage: float | None = None,
                memory_request: int = 0, memory_usage: float | None = None, weight: float = 1.0) -> None:
        """One sample, recorded under every key of ``keys`` (the template and its coarser classes):
        ``weight`` pod-seconds of usage against the request (cpu milli, memory bytes). A resource without
        a request or a usage is not recorded."""
        if weight <= 0 or not math.isfinite(weight):
            return
        a = self.args
        for key in keys:
            if cpu_request > 0 and cpu_usage is not None and cpu_usage >= 0:
                h = self._cpu.get(key)
                if h is None:
                    h = self._cpu[key] = _Histogram(a.cpu_half_life_hours * 3600)
                h.add(cpu_usage / cpu_request, weight, now)
            if memory_request > 0 and memory_usage is not None and memory_usage >= 0:
                h = self._mem.get(key)
                if h is None:
                    h = self._mem[key] = _Histogram(a.memory_half_life_hours * 3600)
                h.add(memory_usage / memory_request, weight, now)

    def ratio(self, keys: Sequence[str], resource: str, now: float) -> tuple[float, str] | None:
        """(the recommended request / request ratio, the key it came from) for ``resource`` ("cpu" or
        "memory"): the first key with enough samples, or None."""
        a = self.args
        hists, q = (self._cpu, a.cpu_percentile) if resource == "cpu" else (self._mem, a.memory_percentile)
        for key in keys:
            h = hists.get(key)
            total = h.total(now) if h is not None else 0.0
            if h is not None and total >= a.min_weight and total > 0:
                r = h.percentile(q) * (1.0 + a.safety_margin_percent / 100.0)
                return min(max(r, a.min_ratio), a.max_ratio), key
        return None

    def recommend(self, keys: Sequence[str], *, cpu_request: int, memory_request: int, now: float) -> Recommendation:
        """The right-sized requests (cpu milli, memory bytes, at least 1 each when asked for)."""
        cpu, mem, ck, mk = cpu_request, memory_request, "", ""
        got = self.ratio(keys, "cpu", now) if cpu_request > 0 else None
        if got is not None:
            cpu, ck = max(1, int(math.ceil(cpu_request * got[0]))), got[1]
        got = self.ratio(keys, "memory", now) if memory_request > 0 else None
        if got is not None:
            mem, mk = max(1, int(math.ceil(memory_request * got[0]))), got[1]
        return Recommendation(cpu, mem, ck, mk)
