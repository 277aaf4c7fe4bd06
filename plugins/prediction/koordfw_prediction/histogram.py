"""Koordinator's decaying histograms (``pkg/util/histogram``, itself the Vertical Pod Autoscaler's).

* :class:`ExponentialOptions`: bucket ``i`` starts at ``firstBucketSize * (ratio^i - 1) / (ratio - 1)``; the
  number of buckets covers ``maxValue`` (``NewExponentialHistogramOptions``).
* :class:`Histogram`: bucket weights, total weight, min/max non-empty bucket; ``percentile(p)`` is the
  *end* of the first bucket where the cumulative weight reaches ``p * total`` (the start of the last
  bucket when that is the last one).
* :class:`DecayingHistogram`: a sample at time ``t`` weighs ``2^((t - reference) / halfLife)``: a sample
  one half-life older counts half. When ``t`` is more than 100 half-lives past the reference, the
  reference moves to ``t`` (rounded to the half-life) and every weight is scaled down, as Go's
  ``shiftReferenceTimestamp``.
* Checkpoints (``HistogramCheckpoint``): ``{"referenceTimestamp", "bucketWeights": {bucket: uint32},
  "totalWeight"}``, weights scaled so the largest is 10000 (``MaxCheckpointWeight``): bounded in size
  whatever the history.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from typing import Any

import attrs

#: ``MaxCheckpointWeight``
MAX_CHECKPOINT_WEIGHT = 10000
#: ``maxDecayExponent``
MAX_DECAY_EXPONENT = 100


def _log(base: float, x: float) -> float:
    return math.log(x) / math.log(base)


@attrs.frozen
class ExponentialOptions:
    """``exponentialHistogramOptions``."""

    num_buckets: int
    first_bucket_size: float
    ratio: float
    epsilon: float

    @classmethod
    def new(cls, max_value: float, first_bucket_size: float, ratio: float, epsilon: float) -> ExponentialOptions:
        """``NewExponentialHistogramOptions``."""
        if max_value <= 0 or first_bucket_size <= 0 or ratio <= 1 or epsilon <= 0:
            raise ValueError("maxValue, firstBucketSize and epsilon must be > 0.0, ratio must be > 1.0")
        n = int(math.ceil(_log(ratio, max_value * (ratio - 1) / first_bucket_size + 1))) + 1
        return cls(n, first_bucket_size, ratio, epsilon)

    def find_bucket(self, value: float) -> int:
        if value < self.first_bucket_size:
            return 0
        b = int(_log(self.ratio, value * (self.ratio - 1) / self.first_bucket_size + 1))
        return min(b, self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        if not 0 <= bucket < self.num_buckets:
            raise IndexError(f"index {bucket} out of range [0..{self.num_buckets - 1}]")
        if bucket == 0:
            return 0.0
        return self.first_bucket_size * (math.pow(self.ratio, bucket) - 1) / (self.ratio - 1)


@attrs.frozen
class LinearOptions:
    """``linearHistogramOptions`` (Koordinator's tests use it; the predictor's histograms are exponential)."""

    num_buckets: int
    bucket_size: float
    epsilon: float

    @classmethod
    def new(cls, max_value: float, bucket_size: float, epsilon: float) -> LinearOptions:
        """``NewLinearHistogramOptions``."""
        if max_value <= 0 or bucket_size <= 0 or epsilon <= 0:
            raise ValueError("maxValue and bucketSize must both be positive")
        return cls(int(math.ceil(max_value / bucket_size)) + 1, bucket_size, epsilon)

    def find_bucket(self, value: float) -> int:
        return min(max(int(value / self.bucket_size), 0), self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        if not 0 <= bucket < self.num_buckets:
            raise IndexError(f"index {bucket} out of range [0..{self.num_buckets - 1}]")
        return bucket * self.bucket_size


Options = ExponentialOptions | LinearOptions


def _round(x: float) -> int:
    """Go's ``round`` of the histogram package: ``int(math.Floor(x + 0.5))``."""
    return int(math.floor(x + 0.5))


class Histogram:
    """``histogram``: weights per bucket."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.bucket_weight = [0.0] * options.num_buckets
        self.total_weight = 0.0
        self.min_bucket = options.num_buckets - 1
        self.max_bucket = 0

    def add_sample(self, value: float, weight: float, t: float) -> None:
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        b = self.options.find_bucket(value)
        self.bucket_weight[b] += weight
        self.total_weight += weight
        if b < self.min_bucket and self.bucket_weight[b] >= self.options.epsilon:
            self.min_bucket = b
        if b > self.max_bucket and self.bucket_weight[b] >= self.options.epsilon:
            self.max_bucket = b

    def is_empty(self) -> bool:
        return self.bucket_weight[self.min_bucket] < self.options.epsilon

    def percentile(self, p: float) -> float:
        if self.is_empty():
            return 0.0
        partial = 0.0
        threshold = p * self.total_weight
        b = self.min_bucket
        while b < self.max_bucket:
            partial += self.bucket_weight[b]
            if partial >= threshold:
                break
            b += 1
        if b < self.options.num_buckets - 1:
            return self.options.bucket_start(b + 1)
        return self.options.bucket_start(b)

    def _update_min_max(self) -> None:
        eps, last = self.options.epsilon, self.options.num_buckets - 1
        while self.bucket_weight[self.min_bucket] < eps and self.min_bucket < last:
            self.min_bucket += 1
        while self.bucket_weight[self.max_bucket] < eps and self.max_bucket > 0:
            self.max_bucket -= 1

    def subtract_sample(self, value: float, weight: float, t: float) -> None:
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        b, eps = self.options.find_bucket(value), self.options.epsilon
        self.total_weight = _safe_subtract(self.total_weight, weight, eps)
        self.bucket_weight[b] = _safe_subtract(self.bucket_weight[b], weight, eps)
        self._update_min_max()

    def scale(self, factor: float) -> None:
        if factor < 0:
            raise ValueError("scale factor must be non-negative")
        for b in range(self.min_bucket, self.max_bucket + 1):
            self.bucket_weight[b] *= factor
        self.total_weight *= factor
        self._update_min_max()

    def save(self) -> dict[str, Any]:
        """``SaveToCheckpoint``: weights scaled to at most :data:`MAX_CHECKPOINT_WEIGHT`, zeros dropped."""
        top = max([self.bucket_weight[b] for b in range(self.min_bucket, self.max_bucket + 1)], default=0.0)
        weights: dict[str, int] = {}
        if top > 0:
            ratio = MAX_CHECKPOINT_WEIGHT / top
            for b in range(self.min_bucket, self.max_bucket + 1):
                w = _round(self.bucket_weight[b] * ratio)
                if w > 0:
                    weights[str(b)] = w
        return {"bucketWeights": weights, "totalWeight": self.total_weight}

    def load(self, ck: Mapping[str, Any]) -> None:
        """``LoadFromCheckpoint``: ValueError for a negative total, a bucket out of range or a bad weight."""
        total = ck.get("totalWeight", 0.0)
        if isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total) or total < 0:
            raise ValueError(f"cannot load checkpoint with total weight {total!r}")
        raw = ck.get("bucketWeights") or {}
        if not isinstance(raw, Mapping):
            raise ValueError("bucketWeights: expected a mapping")
        weights: dict[int, int] = {}
        for k, w in raw.items():
            try:
                b = int(k)
            except (TypeError, ValueError):
                raise ValueError(f"bucketWeights: bad bucket {str(k)[:20]!r}") from None
            if not 0 <= b < self.options.num_buckets:
                raise ValueError(f"checkpoint has bucket {b} outside the histogram's {self.options.num_buckets}")
            if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w <= 2**32 - 1:
                raise ValueError(f"bucketWeights[{b}]: expected a uint32, got {str(w)[:20]!r}")
            weights[b] = w
        s = sum(weights.values())
        if s == 0:
            return
        ratio = float(total) / s
        for b, w in weights.items():
            self.min_bucket = min(self.min_bucket, b)
            self.max_bucket = max(self.max_bucket, b)
            self.bucket_weight[b] += w * ratio
        self.total_weight += float(total)


def _safe_subtract(value: float, sub: float, epsilon: float) -> float:
    value -= sub
    return 0.0 if value < epsilon else value


def _rfc3339(t: float) -> str:
    # Go's time.Time JSON (RFC 3339 with nanoseconds trimmed); the zero time is year 1
    if t == ZERO_TIME:
        return "0001-01-01T00:00:00Z"
    return _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat().replace("+00:00", "Z")


def _parse_time(s: Any) -> float:
    if not isinstance(s, str):
        raise ValueError(f"referenceTimestamp: expected an RFC 3339 time, got {str(s)[:30]!r}")
    if s.startswith("0001-01-01T00:00:00"):
        return ZERO_TIME
    try:
        return _dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"referenceTimestamp: expected an RFC 3339 time, got {s[:30]!r}") from None


#: Go's zero ``time.Time`` (0001-01-01T00:00:00Z) in seconds since the Unix epoch: a new histogram's reference
ZERO_TIME = -62135596800.0


class DecayingHistogram(Histogram):
    """``decayingHistogram``: exponentially decaying sample weights, half-life ``half_life`` seconds."""

    def __init__(self, options: Options, half_life: float) -> None:
        super().__init__(options)
        self.half_life = half_life
        self.reference = ZERO_TIME

    def _shift_reference(self, new_ref: float) -> None:
        # time.Round(halfLife): to the nearest multiple of the half-life since Go's zero time (halves away from 0)
        since_zero = new_ref - ZERO_TIME
        q = since_zero / self.half_life
        new_ref = ZERO_TIME + math.floor(q + 0.5) * self.half_life
        exponent = _round((self.reference - new_ref) / self.half_life)
        self.scale(math.ldexp(1.0, exponent))
        self.reference = new_ref

    def _decay_factor(self, t: float) -> float:
        if t > self.reference + self.half_life * MAX_DECAY_EXPONENT:
            self._shift_reference(t)
        return math.pow(2.0, (t - self.reference) / self.half_life)

    def add_sample(self, value: float, weight: float, t: float) -> None:
        super().add_sample(value, weight * self._decay_factor(t), t)

    def save(self) -> dict[str, Any]:
        return {"referenceTimestamp": _rfc3339(self.reference), **super().save()}

    def load(self, ck: Mapping[str, Any]) -> None:
        ref = _parse_time(ck.get("referenceTimestamp", "0001-01-01T00:00:00Z"))
        super().load(ck)
        self.reference = ref
