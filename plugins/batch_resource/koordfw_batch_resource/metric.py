"""Reading a Koordinator ``NodeMetric`` (``slo.koordinator.sh/v1alpha1``) into canonical integers.

Only what the batch calculation needs: the update time, system usage, per-pod usage and the usage of
host applications. Quantities become canonical ints (cpu in milli-cores, memory in bytes). A malformed
field raises :class:`koordfw.ManifestError` naming the NodeMetric and the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koordfw.extension import NODE_METRIC_PROD_USAGE_DISTRIBUTION, PRIORITY_BATCH, PRIORITY_FREE
from koordfw.inputs import PodMetric, field_list, field_mapping, read_node_metric, resource_map

CPU, MEMORY = "cpu", "memory"

#: one ``status.podsMetric[]`` entry (the kernel's reader)
PodUsage = PodMetric


def resources(raw: Any, *, obj: str, field: str) -> dict[str, int]:
    """A ResourceList mapping → ``{cpu: milli, memory: bytes}`` (other resources are ignored)."""
    return resource_map(raw, obj=obj, field=field, only=(CPU, MEMORY))


@attrs.frozen
class NodeMetricInfo:
    name: str
    update_time: float | None
    has_node_usage: bool
    node_usage: Mapping[str, int]
    system_usage: Mapping[str, int]
    pods: tuple[PodUsage, ...]
    #: Σ usage of host applications (``status.hostApplicationMetric``) that are not koord-batch/free
    host_app_hp_usage: Mapping[str, int]
    #: ``status.koordfwProdUsageDistribution`` as written (read only in the risk-budget mode)
    usage_distribution: Any = None


def parse_node_metric(obj: Mapping[str, Any]) -> NodeMetricInfo:
    m = read_node_metric(obj, only=(CPU, MEMORY))
    ctx, status = m.ctx, m.status
    host_hp: dict[str, int] = {}
    for i, hm in enumerate(field_list(status.get("hostApplicationMetric"), ctx, "status.hostApplicationMetric")):
        where = f"status.hostApplicationMetric[{i}]"
        hm = field_mapping(hm, ctx, where)
        if str(hm.get("priority") or "") in (PRIORITY_BATCH, PRIORITY_FREE):
            continue
        usage_raw = field_mapping(hm.get("usage"), ctx, f"{where}.usage")
        for r, v in resources(usage_raw.get("resources"), obj=ctx, field=f"{where}.usage.resources").items():
            host_hp[r] = host_hp.get(r, 0) + v
    return NodeMetricInfo(name=m.name, update_time=m.update_time, has_node_usage=bool(m.node_usage),
                          node_usage=m.node_usage, system_usage=m.system_usage, pods=m.pods, host_app_hp_usage=host_hp,
                          usage_distribution=status.get(NODE_METRIC_PROD_USAGE_DISTRIBUTION))
