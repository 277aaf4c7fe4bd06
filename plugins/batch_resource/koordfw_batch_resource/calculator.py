"""The batch resource formula of Koordinator's slo-controller (``noderesource/plugins/batchresource``).

::

    margin      = capacity * (100 - reclaimThresholdPercent) / 100     (int64(float) per resource)
    reserved    = max(capacity - allocatable, node.koordinator.sh/reservation)
    systemUsed  = max(NodeMetric systemUsage + HP host-application usage, reserved)
    byUsage           = max(0, capacity - margin - systemUsed - Σ HP usage)
    byRequest         = max(0, capacity - margin - reserved   - Σ HP request)
    byMaxUsageRequest = max(0, capacity - margin - systemUsed - Σ HP max(usage, request))
    batch-cpu    = byUsage | byMaxUsageRequest              ("request" is not a CPU policy: usage is used)
    batch-memory = byUsage | byRequest | byMaxUsageRequest
    then min(value, capacity * batch<X>ThresholdPercent / 100) when that cap is set

With ``riskBudget`` set (koordfw's risk-budget mode, docs/plugins/risk_budget.md), a resource it lists is
instead ``max(0, A - Σ requests of Running/Pending koord-mid pods)``, ``A`` what Mid + BE may be sold at
risk ε (:func:`koordfw_prediction.api.risk_sizing`, the node's ``reserved`` as above), then capped as above.

HP ("high priority") pods are Running/Pending pods whose priority class (default derived from the QoS
class) is neither koord-batch nor koord-free. All amounts are canonical ints: cpu milli, memory bytes.
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
    BATCH_CPU,
    BATCH_MEMORY,
    MID_CPU,
    MID_MEMORY,
    NODE_METRIC_PROD_USAGE_DISTRIBUTION,
    PRIORITY_BATCH,
    PRIORITY_FREE,
    PRIORITY_MID,
    QOS_LSE,
)
from koordfw.nodestate import parse_reservation

from .metric import CPU, MEMORY, NodeMetricInfo
from .strategy import MAX_USAGE_REQUEST, REQUEST, ColocationStrategy

RESOURCES = (CPU, MEMORY)

log = structlog.get_logger("koordfw.batch_resource")

Res = dict[str, int]


def _zero() -> Res:
    return {CPU: 0, MEMORY: 0}


def _add(a: Res, b: Mapping[str, int]) -> None:
    for r in RESOURCES:
        a[r] += b.get(r, 0)


def _sub(first: Mapping[str, int], *rest: Mapping[str, int]) -> Res:
    return {r: first.get(r, 0) - sum([t.get(r, 0) for t in rest]) for r in RESOURCES}


def _max(a: Mapping[str, int], b: Mapping[str, int]) -> Res:
    return {r: max(a.get(r, 0), b.get(r, 0)) for r in RESOURCES}


def _clamp0(a: Mapping[str, int]) -> Res:
    return {r: max(0, a.get(r, 0)) for r in RESOURCES}


@attrs.frozen
class BatchResult:
    """Every term of the calculation for one node (what ``koordfw simulate`` reports)."""

    node: str
    batch_cpu: int = 0
    batch_memory: int = 0
    #: why the resources were reset to zero ("" when calculated)
    degraded: str = ""
    cpu_policy: str = ""
    memory_policy: str = ""
    capacity: Res = attrs.field(factory=_zero)
    margin: Res = attrs.field(factory=_zero)
    reserved: Res = attrs.field(factory=_zero)
    system_used: Res = attrs.field(factory=_zero)
    hp_request: Res = attrs.field(factory=_zero)
    hp_used: Res = attrs.field(factory=_zero)
    hp_max_used_req: Res = attrs.field(factory=_zero)
    by_usage: Res = attrs.field(factory=_zero)
    by_request: Res = attrs.field(factory=_zero)
    by_max_usage_request: Res = attrs.field(factory=_zero)
    #: the risk-budget mode: resource → what Mid + BE may be sold and from what (None: no distribution)
    risk: Mapping[str, RiskSizing | None] = attrs.field(factory=dict)
    #: the risk-budget mode: Σ requests of the node's Mid pods, taken off the risk amount
    mid_requests: Res = attrs.field(factory=_zero)

    @property
    def resources(self) -> dict[str, int | None]:
        """What the node gets: the amounts, or ``None`` (removed) when degraded, as Koordinator's Reset."""
        if self.degraded:
            return {BATCH_CPU: None, BATCH_MEMORY: None}
        return {BATCH_CPU: self.batch_cpu, BATCH_MEMORY: self.batch_memory}


def _ratio_of(amount: int, percent: int) -> int:
    # util.MultiplyMilliQuant / MultiplyQuant: int64(float64(v) * ratio), truncating toward zero
    return int(float(amount) * (float(percent) / 100.0))


def safety_margin(strategy: ColocationStrategy, capacity: Mapping[str, int]) -> Res:
    """``getNodeSafetyMargin``: negative when a reclaim threshold exceeds 100 %."""
    return {CPU: _ratio_of(capacity.get(CPU, 0), 100 - strategy.cpu_reclaim_threshold_percent),
            MEMORY: _ratio_of(capacity.get(MEMORY, 0), 100 - strategy.memory_reclaim_threshold_percent)}


#: batch amounts are int64 allocatable values
INT64_MAX = 2**63 - 1


def annotation_reservation(node_name: str, annotations: Mapping[str, str], warned: set | None = None) -> Res:
    """``GetNodeReservationFromAnnotation``: ``reservedCPUs`` (a cpuset) wins over ``resources.cpu``.
    An invalid annotation is logged naming the node and ignored, as Koordinator does."""
    raw = annotations.get(ANNOTATION_NODE_RESERVATION)
    out = _zero()
    try:
        # the kernel's parser: reservedCPUs (bounded, overlaps counted once) already decides the cpu amount
        reserved = parse_reservation(raw, node_name).resources
    except ValueError as e:
        warn_once(log, warned, (node_name, ANNOTATION_NODE_RESERVATION, raw), "ignoring invalid node annotation",
                  node=node_name, annotation=ANNOTATION_NODE_RESERVATION, error=str(e))
        return _zero()
    for r in (CPU, MEMORY):
        if r in reserved:
            out[r] = reserved[r]
    return out


def is_high_priority(pod: Any) -> bool:
    return pod.priority_class_with_default not in (PRIORITY_BATCH, PRIORITY_FREE)


def degrade_reason(strategy: ColocationStrategy, metric: NodeMetricInfo | None, now: float) -> str:
    """``isDegradeNeeded``: no metric, no updateTime, or a metric at least degradeTimeMinutes old."""
    if not strategy.enable:
        return "colocation disabled"
    if metric is None:
        return "no NodeMetric"
    if metric.update_time is None:
        return "NodeMetric has no status.updateTime"
    if now > metric.update_time + strategy.degrade_time_minutes * 60:  # Go's now.After(updateTime + degrade)
        return f"NodeMetric older than degradeTimeMinutes ({strategy.degrade_time_minutes})"
    return ""


def calculate(strategy: ColocationStrategy, node: Any, pods: Iterable[Any], metric: NodeMetricInfo | None,
              now: float, warned: set | None = None) -> BatchResult:
    """Batch resources of one node. ``node`` is a :class:`koordfw.Node` (name, labels, annotations,
    capacity, allocatable), ``pods`` the pods on it, ``strategy`` already resolved for the node."""
    reason = degrade_reason(strategy, metric, now)
    if reason:
        return BatchResult(node=node.name, degraded=reason)
    assert metric is not None
    pods = list(pods)
    pod_metrics = {pm.key: pm for pm in metric.pods}
    # the HP sums, one pod at a time (cpu, memory as plain ints: the same sums as adding Res dicts)
    req_cpu = req_mem = used_cpu = used_mem = max_cpu = max_mem = 0
    listed = set()
    for pod in pods:
        key = pod.key
        pm = pod_metrics.get(key)
        if pm is not None:
            listed.add(key)
        if pod.phase not in ("Running", "Pending") or not is_high_priority(pod):
            continue
        requests = pod.requests
        rc, rm = requests.get(CPU, 0), requests.get(MEMORY, 0)
        req_cpu += rc
        req_mem += rm
        if pm is None:
            used_cpu += rc
            used_mem += rm
            continue
        usage = pm.usage
        uc, um = usage.get(CPU, 0), usage.get(MEMORY, 0)
        # LSE pods hold their CPUs exclusively: their cpu is never reclaimable
        used_cpu += rc if pod.qos_class == QOS_LSE else uc
        used_mem += um
        max_cpu += max(rc, uc)
        max_mem += max(rm, um)
    # usage reported for pods the scheduler no longer lists still occupies the node
    for key, pm in pod_metrics.items():
        if key in listed or pm.priority in (PRIORITY_BATCH, PRIORITY_FREE):
            continue
        uc, um = pm.usage.get(CPU, 0), pm.usage.get(MEMORY, 0)
        used_cpu += uc
        used_mem += um
        max_cpu += uc
        max_mem += um
    hp_request = {CPU: req_cpu, MEMORY: req_mem}
    hp_used = {CPU: used_cpu, MEMORY: used_mem}
    hp_max = {CPU: max_cpu, MEMORY: max_mem}

    capacity = {r: node.capacity.get(r, 0) for r in RESOURCES}
    allocatable = {r: node.allocatable.get(r, 0) for r in RESOURCES}
    margin = safety_margin(strategy, capacity)
    system = _zero()
    _add(system, metric.system_usage)
    _add(system, metric.host_app_hp_usage)
    reserved = _max(_clamp0(_sub(capacity, allocatable)), annotation_reservation(node.name, node.annotations, warned))
    system = _max(system, reserved)

    by_usage = _clamp0(_sub(capacity, margin, system, hp_used))
    by_request = _clamp0(_sub(capacity, margin, reserved, hp_request))
    by_max = _clamp0(_sub(capacity, margin, system, hp_max))

    cpu_policy = MAX_USAGE_REQUEST if strategy.cpu_calculate_policy == MAX_USAGE_REQUEST else "usage"
    batch_cpu = by_max[CPU] if cpu_policy == MAX_USAGE_REQUEST else by_usage[CPU]
    mem_policy = strategy.memory_calculate_policy
    batch_mem = {REQUEST: by_request, MAX_USAGE_REQUEST: by_max}.get(mem_policy, by_usage)[MEMORY]
    risk: dict[str, RiskSizing | None] = {}
    mid_req = _zero()
    if strategy.risk_budget:
        risk, mid_req = risk_amounts(strategy.risk_budget, strategy.risk_combination, capacity, reserved, pods,
                                     metric.usage_distribution, node.name, warned)
        if CPU in risk:
            batch_cpu = _risk_batch(risk[CPU], mid_req[CPU])
        if MEMORY in risk:
            batch_mem = _risk_batch(risk[MEMORY], mid_req[MEMORY])
    if strategy.batch_CPU_threshold_percent is not None:
        batch_cpu = min(batch_cpu, _ratio_of(capacity[CPU], strategy.batch_CPU_threshold_percent))
    if strategy.batch_memory_threshold_percent is not None:
        batch_mem = min(batch_mem, _ratio_of(capacity[MEMORY], strategy.batch_memory_threshold_percent))
    # a reclaim threshold far above 100 % makes the margin hugely negative: keep the results int64
    batch_cpu, batch_mem = min(batch_cpu, INT64_MAX), min(batch_mem, INT64_MAX)
    return BatchResult(node=node.name, batch_cpu=batch_cpu, batch_memory=batch_mem, cpu_policy=cpu_policy,
                       memory_policy=mem_policy, capacity=capacity, margin=margin, reserved=reserved,
                       system_used=system, hp_request=hp_request, hp_used=hp_used, hp_max_used_req=hp_max,
                       by_usage=by_usage, by_request=by_request, by_max_usage_request=by_max, risk=risk,
                       mid_requests=mid_req)


def _risk_batch(sizing: RiskSizing | None, mid_requests: int) -> int:
    return 0 if sizing is None else max(0, sizing.amount - mid_requests)


def mid_pod_requests(pods: Iterable[Any]) -> Res:
    """Σ requests of the Running/Pending koord-mid pods: their mid-cpu/mid-memory (the webhook's renaming)
    plus any cpu/memory they kept."""
    out = _zero()
    for pod in pods:
        if pod.phase not in ("Running", "Pending") or pod.priority_class_with_default != PRIORITY_MID:
            continue
        req = pod.requests
        out[CPU] += int(req.get(CPU, 0)) + int(req.get(MID_CPU, 0))
        out[MEMORY] += int(req.get(MEMORY, 0)) + int(req.get(MID_MEMORY, 0))
    return out


def risk_amounts(budget: Mapping[str, float], combination: str, capacity: Mapping[str, int],
                 reserved: Mapping[str, int], pods: Iterable[Any], raw_distribution: Any, node_name: str,
                 warned: set | None = None) -> tuple[dict[str, RiskSizing | None], Res]:
    """The risk-budget mode's amounts per budgeted resource (:func:`koordfw_prediction.api.node_risk`; None
    when the NodeMetric has no valid ``koordfwProdUsageDistribution``: nothing is sold then) and the Mid
    pods' requests."""
    out, err = node_risk(budget, combination, capacity, reserved, raw_distribution)
    if err:
        warn_once(log, warned, (node_name, NODE_METRIC_PROD_USAGE_DISTRIBUTION, err),
                  "invalid usage distribution in the NodeMetric: the risk-budget mode sells nothing",
                  node=node_name, error=err)
    return out, mid_pod_requests(pods)


def needs_sync(old: Mapping[str, int | None], new: Mapping[str, int | None], *, last_update: float | None,
               now: float, strategy: ColocationStrategy) -> bool:
    """Koordinator's ``isCommonNodeNeedSync`` + the plugin's ``NeedSync`` (``util.IsResourceDiff``): should a
    live engine rewrite node.status? Yes when it never wrote it, or its last write is more than
    ``updateTimeThresholdSeconds`` old, or when a resource appears, vanishes (absent or ``None``), or moves by
    more than ``resourceDiffThreshold`` of its old value."""
    if last_update is None or now - last_update > strategy.update_time_threshold_seconds:
        return True
    for r in set(old) | set(new):
        a, b = old.get(r), new.get(r)
        if (a is None) != (b is None):
            return True
        if a is not None and b is not None and abs(b - a) > a * strategy.resource_diff_threshold:
            return True
    return False
