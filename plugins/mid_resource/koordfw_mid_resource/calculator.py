"""The Mid resource formula of koord-manager (``pkg/slo-controller/noderesource/plugins/midresource/plugin.go``
and ``plugins/util/util.go``: ``CalculateMidResourceByPolicy``, ``CalculateMidResourceByStaticMode``).

::

    midReclaimMode "static":
        mid = capacity * midStatic<X>ReservedPercent / 100
    otherwise:
        systemUsed   = NodeMetric systemUsage + usage of host applications above Mid (koord-prod)
        nodeReserved = max(max(capacity - allocatable, 0), node.koordinator.sh/reservation, systemUsed)
        unallocated  = max(capacity - nodeReserved - Σ requests of Running/Pending Prod pods, 0)
        nodeUnused   = capacity - nodeUsage       (0 when nodeUsage lacks cpu or memory)
        mid = max(min(prodReclaimable, nodeUnused), 0) + int(unallocated * midUnallocatedPercent / 100)
    then, both modes:
        mid = min(mid, int(capacity * mid<X>ThresholdPercent / 100))

With ``riskBudget`` set (koordfw's risk-budget mode, not in static mode), a resource it lists is instead
``A``, what Mid + BE may be sold at risk ε (:func:`koordfw_prediction.api.node_risk`, with the static
reserve ``max(capacity - allocatable, node.koordinator.sh/reservation)``), then capped as above.

"Prod" pods are those whose priority class (default derived from the QoS class) is not koord-mid,
koord-batch or koord-free. ``prodReclaimable`` is the NodeMetric's ``status.prodReclaimableMetric.resource``
(0 when absent: Koordinator's "no valid prod reclaimable"). All amounts are canonical ints: cpu milli-cores,
memory bytes. The node is degraded (both resources removed) without a NodeMetric, without
``status.updateTime``, or when it is older than ``degradeTimeMinutes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import structlog
from koordfw_prediction.api import RiskSizing, node_risk

from koordfw import warn_once
from koordfw.extension import (
    ANNOTATION_NODE_RESERVATION,
    MID_CPU,
    MID_MEMORY,
    NODE_METRIC_PROD_USAGE_DISTRIBUTION,
    PRIORITY_BATCH,
    PRIORITY_DEFAULT_VALUES,
    PRIORITY_FREE,
    PRIORITY_MID,
)
from koordfw.inputs import field_list, field_mapping, read_node_metric, resource_map
from koordfw.nodestate import parse_reservation

from .strategy import MID_RECLAIM_MODE_STATIC, MidStrategy

CPU, MEMORY = "cpu", "memory"
RESOURCES = (CPU, MEMORY)
Res = dict[str, int]

log = structlog.get_logger("koordfw.mid_resource")


def _zero() -> Res:
    return {CPU: 0, MEMORY: 0}


@attrs.frozen
class MidMetric:
    """What the Mid calculation reads of a NodeMetric."""

    name: str
    update_time: float | None
    #: ``status.nodeMetric.nodeUsage`` (only the resources present)
    node_usage: Mapping[str, int]
    system_usage: Mapping[str, int]
    #: Σ usage of host applications whose priority is above koord-mid (``GetHostAppHPUsed``)
    host_app_hp_usage: Mapping[str, int]
    #: ``status.prodReclaimableMetric.resource.resources``; None when absent or empty
    prod_reclaimable: Mapping[str, int] | None
    #: ``status.koordfwProdUsageDistribution`` as written (read only in the risk-budget mode)
    usage_distribution: Any = None


def parse_mid_metric(obj: Mapping[str, Any]) -> MidMetric:
    """A NodeMetric object → :class:`MidMetric`; a malformed field raises ManifestError naming it."""
    m = read_node_metric(obj, only=RESOURCES)
    ctx, status = m.ctx, m.status
    mid_value = PRIORITY_DEFAULT_VALUES[PRIORITY_MID]
    host: Res = _zero()
    for i, hm in enumerate(field_list(status.get("hostApplicationMetric"), ctx, "status.hostApplicationMetric")):
        where = f"status.hostApplicationMetric[{i}]"
        hm = field_mapping(hm, ctx, where)
        if PRIORITY_DEFAULT_VALUES.get(str(hm.get("priority") or ""), 0) <= mid_value:
            continue  # only usage of a higher priority than Mid counts (Prod host applications)
        usage = field_mapping(hm.get("usage"), ctx, f"{where}.usage")
        for r, v in resource_map(usage.get("resources"), ctx, f"{where}.usage.resources", RESOURCES).items():
            host[r] += v
    prod: Mapping[str, int] | None = None
    raw = status.get("prodReclaimableMetric")
    if raw is not None:
        pr = field_mapping(raw, ctx, "status.prodReclaimableMetric")
        res = field_mapping(pr.get("resource"), ctx, "status.prodReclaimableMetric.resource")
        if res.get("resources") is not None:
            prod = resource_map(res.get("resources"), ctx, "status.prodReclaimableMetric.resource.resources", RESOURCES)
    return MidMetric(name=m.name, update_time=m.update_time, node_usage=m.node_usage, system_usage=m.system_usage,
                     host_app_hp_usage=host, prod_reclaimable=prod,
                     usage_distribution=status.get(NODE_METRIC_PROD_USAGE_DISTRIBUTION))


@attrs.frozen
class MidResult:
    """Every term of the calculation for one node (what ``koordfw simulate`` reports)."""

    node: str
    mid_cpu: int = 0
    mid_memory: int = 0
    #: why the resources were reset ("" when calculated)
    degraded: str = ""
    mode: str = ""
    #: Koordinator's messages, one per resource (``midAllocatable[CPU(milli-core)]:... = ...``)
    cpu_message: str = ""
    memory_message: str = ""
    capacity: Res = attrs.field(factory=_zero)
    prod_reclaimable: Res = attrs.field(factory=_zero)
    node_unused: Res = attrs.field(factory=_zero)
    node_reserved: Res = attrs.field(factory=_zero)
    unallocated: Res = attrs.field(factory=_zero)
    #: the risk-budget mode: resource → what Mid + BE may be sold and from what (None: no distribution)
    risk: Mapping[str, RiskSizing | None] = attrs.field(factory=dict)

    @property
    def resources(self) -> dict[str, int | None]:
        """What the node gets: the amounts, or ``None`` (removed) when degraded, as Koordinator's Reset."""
        if self.degraded:
            return {MID_CPU: None, MID_MEMORY: None}
        return {MID_CPU: self.mid_cpu, MID_MEMORY: self.mid_memory}


def degrade_reason(strategy: MidStrategy, metric: MidMetric | None, now: float) -> str:
    """``isDegradeNeeded`` (and the controller's disabled colocation). A NodeMetric without
    ``prodReclaimableMetric`` is *not* degraded: Mid is then sized from zero reclaimable."""
    if not strategy.enable:
        return "colocation disabled"
    if metric is None:
        return "no NodeMetric"
    if metric.update_time is None:
        return "NodeMetric has no status.updateTime"
    if now > metric.update_time + strategy.degrade_time_minutes * 60:  # now.After(updateTime + degrade)
        return f"NodeMetric older than degradeTimeMinutes ({strategy.degrade_time_minutes})"
    return ""


def _ratio(amount: int, percent: int) -> int:
    # MultiplyMilliQuant / MultiplyQuant / int64(float64(v) * ratio): truncation toward zero
    return int(float(amount) * (float(percent) / 100.0))


def _giga(v: int) -> int:
    """``Quantity.ScaledValue(resource.Giga)``: rounded up to whole 10^9 (as Koordinator's messages print)."""
    return -(-v // 10**9)


def _fmt_ratio(percent: int) -> str:
    """Go's ``%v`` of ``float64(percent)/100``: 1, 0.1, 0.25."""
    v = float(percent) / 100
    return str(int(v)) if v == int(v) else repr(v)


def is_prod(pod: Any) -> bool:
    """Not koord-mid, koord-batch or koord-free (``getUnallocated``'s high priority)."""
    return pod.priority_class_with_default not in (PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE)


def annotation_reservation(node_name: str, annotations: Mapping[str, str], warned: set | None = None) -> Res:
    """``GetNodeReservationFromAnnotation``; an invalid annotation is logged and ignored."""
    out = _zero()
    try:
        reserved = parse_reservation(annotations.get(ANNOTATION_NODE_RESERVATION), node_name).resources
    except ValueError as e:
        warn_once(log, warned, (node_name, ANNOTATION_NODE_RESERVATION), "ignoring invalid node annotation",
                  node=node_name, annotation=ANNOTATION_NODE_RESERVATION, error=str(e))
        return out
    for r in RESOURCES:
        out[r] = reserved.get(r, 0)
    return out


def calculate(strategy: MidStrategy, node: Any, pods: Iterable[Any], metric: MidMetric | None, now: float,
              warned: set | None = None) -> MidResult:
    """Mid resources of one node. ``node`` is a :class:`koordfw.Node` (name, annotations, capacity,
    allocatable), ``pods`` the pods on it, ``strategy`` already resolved for the node."""
    reason = degrade_reason(strategy, metric, now)
    if reason:
        return MidResult(node=node.name, degraded=reason)
    assert metric is not None
    capacity = {r: int(node.capacity.get(r, 0)) for r in RESOURCES}
    cpu_thr, mem_thr = strategy.mid_CPU_threshold_percent, strategy.mid_memory_threshold_percent
    if strategy.mid_reclaim_mode == MID_RECLAIM_MODE_STATIC:
        cpu_pct, mem_pct = strategy.mid_static_CPU_reserved_percent, strategy.mid_static_memory_reserved_percent
        cpu = min(_ratio(capacity[CPU], cpu_pct), _ratio(capacity[CPU], cpu_thr))
        mem = min(_ratio(capacity[MEMORY], mem_pct), _ratio(capacity[MEMORY], mem_thr))
        cpu_msg = (f"midAllocatable[CPU(milli-core)]:{cpu} = min(nodeCapacity:{capacity[CPU]} * staticReservedPercent:"
                   f"{_fmt_ratio(cpu_pct)}, nodeCapacity:{capacity[CPU]} * thresholdRatio:{_fmt_ratio(cpu_thr)})")
        mem_msg = (f"midAllocatable[Memory(GB)]:{_giga(mem)} = min(nodeCapacity:{_giga(capacity[MEMORY])} * "
                   f"staticReservedPercent:{_fmt_ratio(mem_pct)}, nodeCapacity:{_giga(capacity[MEMORY])} * "
                   f"thresholdRatio:{_fmt_ratio(mem_thr)})")
        return MidResult(node=node.name, mid_cpu=cpu, mid_memory=mem, mode=MID_RECLAIM_MODE_STATIC,
                         cpu_message=cpu_msg, memory_message=mem_msg, capacity=capacity)

    prod = {r: (metric.prod_reclaimable or {}).get(r, 0) for r in RESOURCES}
    system = {r: metric.system_usage.get(r, 0) + metric.host_app_hp_usage.get(r, 0) for r in RESOURCES}
    allocatable = {r: int(node.allocatable.get(r, 0)) for r in RESOURCES}
    anno = annotation_reservation(node.name, node.annotations, warned)
    reserved = {r: max(max(capacity[r] - allocatable[r], 0), anno[r], system[r]) for r in RESOURCES}
    prod_alloc = _zero()
    for pod in pods:
        if not is_prod(pod) or pod.phase not in ("Running", "Pending"):
            continue
        req = pod.requests
        for r in RESOURCES:
            prod_alloc[r] += req.get(r, 0)
    unallocated = {r: max(capacity[r] - reserved[r] - prod_alloc[r], 0) for r in RESOURCES}
    valid_usage = CPU in metric.node_usage and MEMORY in metric.node_usage  # IsValidNodeUsage
    unused = {r: capacity[r] - metric.node_usage[r] if valid_usage else 0 for r in RESOURCES}
    pct = strategy.mid_unallocated_percent
    out: Res = {}
    for r, thr in ((CPU, cpu_thr), (MEMORY, mem_thr)):
        v = max(min(prod[r], unused[r]), 0) + int(float(unallocated[r]) * (float(pct) / 100))
        cap = int(float(capacity[r]) * (float(thr) / 100))
        out[r] = min(v, cap)
    risk: dict[str, RiskSizing | None] = {}
    messages: dict[str, str] = {}
    if strategy.risk_budget:
        static = {r: max(max(capacity[r] - allocatable[r], 0), anno[r]) for r in RESOURCES}
        risk, err = node_risk(strategy.risk_budget, strategy.risk_combination, capacity, static,
                              metric.usage_distribution)
        if err:
            warn_once(log, warned, (node.name, NODE_METRIC_PROD_USAGE_DISTRIBUTION, err),
                      "invalid usage distribution in the NodeMetric: the risk-budget mode sells nothing",
                      node=node.name, error=err)
        for r, s in risk.items():
            thr = cpu_thr if r == CPU else mem_thr
            cap = int(float(capacity[r]) * (float(thr) / 100))
            out[r] = min(0 if s is None else s.amount, cap)
            messages[r] = (f"midAllocatable[{r}]:{out[r]} = min(riskAmount:"
                           f"{'none (no distribution)' if s is None else s.explain()}, "
                           f"NodeCapacity:{capacity[r]} * thresholdRatio:{_fmt_ratio(thr)})")
    ratio = _fmt_ratio(pct)
    cpu_msg = (f"midAllocatable[CPU(milli-core)]:{out[CPU]} = min(min(ProdReclaimable:{prod[CPU]}, "
               f"NodeUnused:{unused[CPU]}) + Unallocated:{unallocated[CPU]} * midUnallocatedRatio:{ratio}, "
               f"NodeCapacity:{capacity[CPU]} * thresholdRatio:{_fmt_ratio(cpu_thr)})")
    mem_msg = (f"midAllocatable[Memory(GB)]:{_giga(out[MEMORY])} = min(min(ProdReclaimable:{_giga(prod[MEMORY])}, "
               f"NodeUnused:{_giga(unused[MEMORY])}) + Unallocated:{_giga(unallocated[MEMORY])} * midUnallocatedRatio:"
               f"{ratio}, NodeCapacity:{_giga(capacity[MEMORY])} * thresholdRatio:{_fmt_ratio(mem_thr)})")
    return MidResult(node=node.name, mid_cpu=out[CPU], mid_memory=out[MEMORY], mode="risk" if risk else "policy",
                     cpu_message=messages.get(CPU, cpu_msg), memory_message=messages.get(MEMORY, mem_msg),
                     capacity=capacity, prod_reclaimable=prod, node_unused=unused, node_reserved=reserved,
                     unallocated=unallocated, risk=risk)


def needs_sync(old: Mapping[str, int | None], new: Mapping[str, int | None], *, last_update: float | None,
               now: float, strategy: MidStrategy) -> bool:
    """``isCommonNodeNeedSync`` + the plugin's ``NeedSync`` (``util.IsResourceDiff`` on mid-cpu/mid-memory):
    rewrite node.status when never written, when the last write is older than ``updateTimeThresholdSeconds``,
    or when a resource appears, vanishes or moves by more than ``resourceDiffThreshold`` of its old value."""
    if last_update is None or now - last_update > strategy.update_time_threshold_seconds:
        return True
    for r in set(old) | set(new):
        a, b = old.get(r), new.get(r)
        if (a is None) != (b is None):
            return True
        if a is not None and b is not None and abs(b - a) > a * strategy.resource_diff_threshold:
            return True
    return False


__all__ = ["MidMetric", "MidResult", "calculate", "degrade_reason", "needs_sync", "parse_mid_metric"]
