"""Koordinator's DefaultEstimator (``loadaware/estimator/default_estimator.go``).

For each resource: ``q = max(limit, request)``, with koord-batch / koord-mid pods read from their
``kubernetes.io/batch-*`` / ``mid-*`` resources (integer milli-cores and bytes). ``q == 0`` gives the
defaults (cpu 250m, memory 200Mi, others 0); otherwise ``est = round(q * factor / 100)`` (Go's
math.Round: halves away from zero), capped at the limit when one is set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from koordfw.extension import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY, PRIORITY_BATCH, PRIORITY_MID

DEFAULT_MILLI_CPU = 250
DEFAULT_MEMORY = 200 * 2**20

_TRANSLATE = {
    PRIORITY_BATCH: {"cpu": BATCH_CPU, "memory": BATCH_MEMORY},
    PRIORITY_MID: {"cpu": MID_CPU, "memory": MID_MEMORY},
}


def go_round(x: float) -> int:
    """Go's ``math.Round``: half away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def estimate_resource(pod: Any, resource: str, factor: int) -> int:
    real = _TRANSLATE.get(pod.priority_class_with_default, {}).get(resource, resource)
    limit = pod.limits.get(real, 0)
    q = max(limit, pod.requests.get(real, 0))
    if q == 0:
        if resource == "cpu":
            return DEFAULT_MILLI_CPU
        if resource == "memory":
            return DEFAULT_MEMORY
        return 0
    est = go_round(float(q) * float(factor) / 100)
    if limit > 0 and est > limit:
        est = limit
    return est


def estimate_pod(pod: Any, resources: tuple[str, ...], factors: Mapping[str, int]) -> list[int]:
    """The pod's estimated usage for each of ``resources`` (factor 100 for a resource without one)."""
    return [estimate_resource(pod, r, factors.get(r, 100)) for r in resources]
