"""Reading a Koordinator ``NodeMetric`` (``slo.koordinator.sh/v1alpha1``) into canonical integers.

Only what the batch calculation needs: the update time, system usage, per-pod usage and the usage of
host applications. Quantities become canonical ints (cpu in milli-cores, memory in bytes). A malformed
field raises :class:`koordfw.ManifestError` naming the NodeMetric and the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import ManifestError, canonical, parse_time  # noqa: F401  (parse_time: re-exported)

CPU, MEMORY = "cpu", "memory"


def resources(raw: Any, *, obj: str, field: str) -> dict[str, int]:
    """A ResourceList mapping → ``{cpu: milli, memory: bytes}`` (other resources are ignored)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ManifestError("expected a mapping of resource quantities", obj=obj, field=field)
    out = {}
    for r in (CPU, MEMORY):
        if raw.get(r) is not None:
            try:
                out[r] = canonical(r, raw[r])
            except ValueError as e:
                raise ManifestError(str(e), obj=obj, field=f"{field}.{r}") from None
    return out


def _mapping(raw: Any, obj: str, field: str) -> Mapping:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ManifestError("expected a mapping", obj=obj, field=field)
    return raw


def _list(raw: Any, obj: str, field: str) -> list:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ManifestError("expected a list", obj=obj, field=field)
    return raw


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
    meta = _mapping(obj.get("metadata"), "NodeMetric ?", "metadata")
    name = str(meta.get("name", "?"))
    ctx = f"NodeMetric {name}"
    status = _mapping(obj.get("status"), ctx, "status")
    update = parse_time(status.get("updateTime"), obj=ctx, field="status.updateTime")
    nm = _mapping(status.get("nodeMetric"), ctx, "status.nodeMetric")
    node_usage_raw = _mapping(nm.get("nodeUsage"), ctx, "status.nodeMetric.nodeUsage")
    node_usage = resources(node_usage_raw.get("resources"), obj=ctx, field="status.nodeMetric.nodeUsage.resources")
    sys_raw = _mapping(nm.get("systemUsage"), ctx, "status.nodeMetric.systemUsage")
    system = resources(sys_raw.get("resources"), obj=ctx, field="status.nodeMetric.systemUsage.resources")
    pods = []
    for i, pm in enumerate(_list(status.get("podsMetric"), ctx, "status.podsMetric")):
        where = f"status.podsMetric[{i}]"
        pm = _mapping(pm, ctx, where)
        if not pm.get("name"):
            raise ManifestError("a pod metric needs a name", obj=ctx, field=f"{where}.name")
        usage_raw = _mapping(pm.get("podUsage"), ctx, f"{where}.podUsage")
        pods.append(PodUsage(str(pm.get("namespace") or "default"), str(pm["name"]),
                             resources(usage_raw.get("resources"), obj=ctx, field=f"{where}.podUsage.resources"),
                             str(pm.get("priority") or "")))
    host_hp: dict[str, int] = {}
    for i, hm in enumerate(_list(status.get("hostApplicationMetric"), ctx, "status.hostApplicationMetric")):
        where = f"status.hostApplicationMetric[{i}]"
        hm = _mapping(hm, ctx, where)
        if str(hm.get("priority") or "") in ("koord-batch", "koord-free"):
            continue
        usage_raw = _mapping(hm.get("usage"), ctx, f"{where}.usage")
        for r, v in resources(usage_raw.get("resources"), obj=ctx, field=f"{where}.usage.resources").items():
            host_hp[r] = host_hp.get(r, 0) + v
    return NodeMetricInfo(name=name, update_time=update, has_node_usage=bool(node_usage), node_usage=node_usage,
                          system_usage=system, pods=tuple(pods), host_app_hp_usage=host_hp)
