"""Reading a Koordinator ``NodeMetric`` (``slo.koordinator.sh/v1alpha1``) into canonical integers.

Only what the batch calculation needs: the update time, system usage, per-pod usage and the usage of
host applications. Quantities become canonical ints (cpu in milli-cores, memory in bytes). A malformed
field raises :class:`koordfw.ManifestError` naming the NodeMetric and the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import ManifestError, field_list, field_mapping, parse_time, resource_map  # noqa: F401

CPU, MEMORY = "cpu", "memory"


def resources(raw: Any, *, obj: str, field: str) -> dict[str, int]:
    """A ResourceList mapping → ``{cpu: milli, memory: bytes}`` (other resources are ignored)."""
    return resource_map(raw, obj=obj, field=field, only=(CPU, MEMORY))


@attrs.frozen
class PodUsage:
    namespace: str
    name: str
    usage: Mapping[str, int]
    #: ``podsMetric[].priority`` when the agent reported it (koord-prod, koord-batch, ...), else ""
    priority: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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


def parse_node_metric(obj: Mapping[str, Any]) -> NodeMetricInfo:
    meta = field_mapping(obj.get("metadata"), "NodeMetric ?", "metadata")
    name = str(meta.get("name", "?"))
    ctx = f"NodeMetric {name}"
    status = field_mapping(obj.get("status"), ctx, "status")
    update = parse_time(status.get("updateTime"), obj=ctx, field="status.updateTime")
    nm = field_mapping(status.get("nodeMetric"), ctx, "status.nodeMetric")
    node_usage_raw = field_mapping(nm.get("nodeUsage"), ctx, "status.nodeMetric.nodeUsage")
    node_usage = resources(node_usage_raw.get("resources"), obj=ctx, field="status.nodeMetric.nodeUsage.resources")
    sys_raw = field_mapping(nm.get("systemUsage"), ctx, "status.nodeMetric.systemUsage")
    system = resources(sys_raw.get("resources"), obj=ctx, field="status.nodeMetric.systemUsage.resources")
    pods = []
    for i, pm in enumerate(field_list(status.get("podsMetric"), ctx, "status.podsMetric")):
        where = f"status.podsMetric[{i}]"
        pm = field_mapping(pm, ctx, where)
        if not pm.get("name"):
            raise ManifestError("a pod metric needs a name", obj=ctx, field=f"{where}.name")
        usage_raw = field_mapping(pm.get("podUsage"), ctx, f"{where}.podUsage")
        pods.append(PodUsage(str(pm.get("namespace") or "default"), str(pm["name"]),
                             resources(usage_raw.get("resources"), obj=ctx, field=f"{where}.podUsage.resources"),
                             str(pm.get("priority") or "")))
    host_hp: dict[str, int] = {}
    for i, hm in enumerate(field_list(status.get("hostApplicationMetric"), ctx, "status.hostApplicationMetric")):
        where = f"status.hostApplicationMetric[{i}]"
        hm = field_mapping(hm, ctx, where)
        if str(hm.get("priority") or "") in ("koord-batch", "koord-free"):
            continue
        usage_raw = field_mapping(hm.get("usage"), ctx, f"{where}.usage")
        for r, v in resources(usage_raw.get("resources"), obj=ctx, field=f"{where}.usage.resources").items():
            host_hp[r] = host_hp.get(r, 0) + v
    return NodeMetricInfo(name=name, update_time=update, has_node_usage=bool(node_usage), node_usage=node_usage,
                          system_usage=system, pods=tuple(pods), host_app_hp_usage=host_hp)
