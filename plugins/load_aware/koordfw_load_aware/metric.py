"""Reading a Koordinator ``NodeMetric`` for load-aware scheduling.

Quantities become canonical ints (cpu milli-cores, everything else units). A malformed field raises
:class:`koordfw.ManifestError` naming the NodeMetric and the field path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import ManifestError
from koordfw import parse_duration as _parse_duration
from koordfw.inputs import field_list, field_mapping, node_metric_name, read_node_metric, resource_map

#: Koordinator's default ``spec.metricCollectPolicy.reportIntervalSeconds``
DEFAULT_REPORT_INTERVAL_SECONDS = 60
#: the longest report interval accepted (~31 years): a larger one, or a non-finite one, is malformed
MAX_REPORT_INTERVAL_SECONDS = 10**9

def parse_duration(value: Any, *, where: str) -> float:
    """A Go ``metav1.Duration`` ("5m0s", "300s", "1h") or a number of seconds → seconds."""
    try:
        return _parse_duration(value)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def resources(raw: Any, *, obj: str, field: str) -> dict[str, int]:
    return resource_map(raw, obj=obj, field=field)


@attrs.frozen
class MetricInfo:
    name: str
    update_time: float | None
    report_interval: float
    #: ``status.nodeMetric.nodeUsage.resources`` (None when the agent reported no node usage)
    node_usage: Mapping[str, int] | None
    system_usage: Mapping[str, int]
    #: [(duration seconds, {aggregation type: {resource: amount}})] from ``aggregatedNodeUsages``
    aggregated: tuple[tuple[float, Mapping[str, Mapping[str, int]]], ...]
    #: namespace/name → usage
    pod_usage: Mapping[str, Mapping[str, int]]
    #: namespace/name → ``podsMetric[].priority`` when reported
    pod_priority: Mapping[str, str]

    def aggregated_usage(self, duration: float | None, agg_type: str) -> Mapping[str, int] | None:
        """``getTargetAggregatedUsage``: the entry of exactly ``duration``, or with no duration the
        longest one that has data for ``agg_type``; ``None`` when there is none."""
        best: Mapping[str, int] | None = None
        best_d = 0.0
        for d, usages in self.aggregated:
            usage = usages.get(agg_type)
            if not usage:
                continue
            if duration:
                if d == duration:
                    return usage
            elif d > best_d:
                best, best_d = usage, d
        return best


def parse_node_metric(obj: Mapping[str, Any]) -> MetricInfo:
    _, ctx = node_metric_name(obj)
    spec = field_mapping(obj.get("spec"), ctx, "spec")
    policy = field_mapping(spec.get("metricCollectPolicy"), ctx, "spec.metricCollectPolicy")
    interval = policy.get("reportIntervalSeconds")
    if interval is None:
        interval = DEFAULT_REPORT_INTERVAL_SECONDS
    elif (isinstance(interval, bool) or not isinstance(interval, (int, float)) or not math.isfinite(interval)
          or not 0 <= interval <= MAX_REPORT_INTERVAL_SECONDS):
        raise ManifestError(f"expected a number of seconds in [0, {MAX_REPORT_INTERVAL_SECONDS}], got "
                            f"{str(interval)[:40]}", obj=ctx, field="spec.metricCollectPolicy.reportIntervalSeconds")
    m = read_node_metric(obj)
    aggregated = []
    for i, a in enumerate(field_list(m.node_metric.get("aggregatedNodeUsages"), ctx,
                                     "status.nodeMetric.aggregatedNodeUsages")):
        where = f"status.nodeMetric.aggregatedNodeUsages[{i}]"
        a = field_mapping(a, ctx, where)
        try:
            d = _parse_duration(a.get("duration")) if a.get("duration") is not None else 0.0
        except ValueError as e:
            raise ManifestError(str(e), obj=ctx, field=f"{where}.duration") from None
        usages = {}
        for t, rm in field_mapping(a.get("usage"), ctx, f"{where}.usage").items():
            rm = field_mapping(rm, ctx, f"{where}.usage.{t}")
            usages[str(t)] = resources(rm.get("resources"), obj=ctx, field=f"{where}.usage.{t}.resources")
        aggregated.append((d, usages))
    return MetricInfo(name=m.name, update_time=m.update_time, report_interval=float(interval),
                      node_usage=m.node_usage or None, system_usage=m.system_usage, aggregated=tuple(aggregated),
                      pod_usage={p.key: p.usage for p in m.pods},
                      pod_priority={p.key: p.priority for p in m.pods if p.priority})
