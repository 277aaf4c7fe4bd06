"""Koordinator's LowNodeLoad (``pkg/descheduler/framework/plugins/loadaware``) on a cluster snapshot.

Usage per node comes from its ``NodeMetric``; nodes are classified per pool against low/high
thresholds (absolute percents of allocatable, or deviations from the pool's mean), hot nodes that
stayed hot long enough are drained of their least important pods towards the cold nodes, while the
cold nodes' headroom (``available``) lasts. The prod pass does the same with the koord-prod usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import BoundedCache, ManifestError, canonical, warn_once
from koordfw.extension import (
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    LABEL_POD_QOS,
    PRIORITY_BATCH,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_PROD,
    QOS_BE,
    QOS_CLASSES,
    QOS_LS,
    QOS_LSE,
    QOS_LSR,
    QOS_SYSTEM,
)
from koordfw.inputs import field_mapping, parse_time, raw_allocatable

from .args import AnomalyCondition, LowNodeLoadArgs, NodePool
from .plan import PlanBuilder
from .safety import DELETION_COST, EVICTION_COST, int_annotation, selector_matches

PLUGIN = "low_node_load"

log = structlog.get_logger("koordfw.defrag")

#: node errors already logged (the notes carry them every round); a log line's dedup: process-wide
_WARNED: BoundedCache[str, bool] = BoundedCache(4096)

_CLASS_RANK = {PRIORITY_FREE: 0, PRIORITY_BATCH: 1, PRIORITY_MID: 2, PRIORITY_PROD: 3}
_KUBE_QOS_RANK = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}
_KOORD_QOS_RANK = {QOS_BE: 0, QOS_LS: 1, QOS_LSR: 2, QOS_LSE: 3, QOS_SYSTEM: 3}


@attrs.define
class NodeUsage:
    """One node as LowNodeLoad sees it (canonical ints: cpu milli, memory bytes, pods count)."""

    name: str
    allocatable: dict[str, int]
    usage: dict[str, int]
    prod_usage: dict[str, int]
    #: namespace/name → reported usage of the pods on the node
    pod_usage: dict[str, dict[str, int]]
    schedulable: bool = True


def _res(raw: Any, ctx: str, field: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ManifestError("expected a mapping", obj=ctx, field=field)
    out = {}
    for k, v in raw.items():
        try:
            out[str(k)] = canonical(str(k), v)
        except ValueError as e:
            raise ManifestError(str(e), obj=ctx, field=f"{field}.{k}") from None
    return out


def node_usage(view: Any, cluster: Any, now: float, expiration: float) -> NodeUsage | None:
    """The node's usage from its NodeMetric; ``None`` when the metric is missing or older than
    ``expiration`` seconds. usage = systemUsage + Σ reported usage of the pods on the node (the agent's
    nodeUsage when it reported neither); ``pods`` = number of pods on the node."""
    obj = cluster.node_metric(view.name)
    if obj is None:
        return None
    ctx = f"NodeMetric {view.name}"
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        raise ManifestError("expected a mapping", obj=ctx, field="status")
    try:
        updated = parse_time(status.get("updateTime"), where="status.updateTime")
    except ManifestError as e:
        raise ManifestError(e.detail, obj=ctx, field="status.updateTime") from None
    if updated is None or now - updated > expiration:
        return None
    nm = field_mapping(status.get("nodeMetric"), ctx, "status.nodeMetric")
    parts = {}
    for part in ("systemUsage", "nodeUsage"):
        where = f"status.nodeMetric.{part}"
        parts[part] = _res(field_mapping(nm.get(part), ctx, where).get("resources"), ctx, f"{where}.resources")
    system, reported = parts["systemUsage"], parts["nodeUsage"]
    pods_here = {p.key: p for p in cluster.pods_on(view.name)}
    pod_usage: dict[str, dict[str, int]] = {}
    pods_metric = status.get("podsMetric") or []
    if not isinstance(pods_metric, list):
        raise ManifestError("expected a list", obj=ctx, field="status.podsMetric")
    for i, pm in enumerate(pods_metric):
        if not isinstance(pm, Mapping) or not pm.get("name"):
            raise ManifestError("a pod metric needs a name", obj=ctx, field=f"status.podsMetric[{i}].name")
        key = f"{pm.get('namespace') or 'default'}/{pm['name']}"
        if key in pods_here:
            where = f"status.podsMetric[{i}].podUsage"
            pod_usage[key] = _res(field_mapping(pm.get("podUsage"), ctx, where).get("resources"), ctx,
                                  f"{where}.resources")
    if system or pod_usage:
        usage = dict(system)
        for u in pod_usage.values():
            for r, v in u.items():
                usage[r] = usage.get(r, 0) + v
    else:
        usage = dict(reported)
    usage["pods"] = len(pods_here)
    prod: dict[str, int] = {"pods": 0}
    for key, p in pods_here.items():
        if p.priority_class_with_default == PRIORITY_PROD:
            prod["pods"] += 1
            for r, v in pod_usage.get(key, {}).items():
                prod[r] = prod.get(r, 0) + v
    alloc = dict(view.allocatable)
    try:
        alloc.update(raw_allocatable(view) or {})  # a bad annotation raises ManifestError naming the node
    except (ValueError, RecursionError) as e:
        raise ManifestError(str(e) or type(e).__name__, obj=f"Node {view.name}",
                            field=f"metadata.annotations.{ANNOTATION_NODE_RAW_ALLOCATABLE}") from None
    return NodeUsage(view.name, alloc, usage, prod, pod_usage, schedulable=not view.unschedulable)


def readable_node_usage(view: Any, cluster: Any, now: float, expiration: float, notes: list[str] | None = None,
                        pool: str = "") -> NodeUsage | None:
    """:func:`node_usage`, with a node that cannot be read (malformed NodeMetric or raw-allocatable)
    left out (``None``): a note in ``notes`` and one warning name it and the field; the others go on."""
    try:
        return node_usage(view, cluster, now, expiration)
    except ManifestError as e:
        if notes is not None:
            notes.append(f"{PLUGIN}[{pool}]: node {view.name} left out: {e}")
        warn_once(log, _WARNED, str(e), "node left out of LowNodeLoad", node=view.name, error=str(e))
        return None


def _amount(pod_usage: Mapping[str, int], r: str) -> int:
    """A pod's share of resource ``r`` (a pod counts 1 of ``pods``)."""
    return 1 if r == "pods" else pod_usage.get(r, 0)


def pool_resources(pool: NodePool, prod: bool = False) -> list[str]:
    lo, hi = (pool.prod_low_thresholds, pool.prod_high_thresholds) if prod else (pool.low_thresholds,
                                                                                pool.high_thresholds)
    return sorted(set(lo) | set(hi) | {"memory"})


def thresholds(pool: NodePool, nodes: list[NodeUsage], prod: bool = False) -> dict[str, tuple[dict, dict]]:
    """node name → (low, high) absolute thresholds per resource (``int64(pct·0.01·allocatable)``)."""
    lo_pct, hi_pct = ((pool.prod_low_thresholds, pool.prod_high_thresholds) if prod
                      else (pool.low_thresholds, pool.high_thresholds))
    res = pool_resources(pool, prod)
    out: dict[str, tuple[dict, dict]] = {}
    if pool.use_deviation_thresholds:
        avg = {}
        for r in res:
            vals = [100.0 * (n.prod_usage if prod else n.usage).get(r, 0) / n.allocatable[r]
                    for n in nodes if n.allocatable.get(r)]
            avg[r] = sum(vals) / len(vals) if vals else 0.0
        low = {r: (max(0.0, avg[r] - lo_pct[r]) if lo_pct.get(r) else 100.0) for r in res}
        high = {r: (min(100.0, avg[r] + hi_pct[r]) if hi_pct.get(r) else 100.0) for r in res}
    else:
        low = {r: lo_pct.get(r, 100.0) for r in res}
        high = {r: hi_pct.get(r, 100.0) for r in res}
    for n in nodes:
        out[n.name] = ({r: int(low[r] * 0.01 * n.allocatable.get(r, 0)) for r in res},
                       {r: int(high[r] * 0.01 * n.allocatable.get(r, 0)) for r in res})
    return out


def is_under(usage: Mapping[str, int], low: Mapping[str, int]) -> bool:
    return all(usage.get(r, 0) <= v for r, v in low.items())


def is_over(usage: Mapping[str, int], high: Mapping[str, int]) -> bool:
    return any(usage.get(r, 0) > v for r, v in high.items())


@attrs.define
class Classified:
    low: list[str] = attrs.field(factory=list)
    both_low: list[str] = attrs.field(factory=list)
    prod_high: list[str] = attrs.field(factory=list)
    sources: list[str] = attrs.field(factory=list)
    prod_low: list[str] = attrs.field(factory=list)


def classify(pool: NodePool, nodes: list[NodeUsage]) -> tuple[Classified, dict, dict]:
    """Koordinator's categories for the nodes of one pool, plus the node and prod thresholds."""
    th = thresholds(pool, nodes)
    pth = thresholds(pool, nodes, prod=True) if pool.prod_configured else {}
    c = Classified()
    for n in nodes:
        low, high = th[n.name]
        under = n.schedulable and is_under(n.usage, low)
        over = is_over(n.usage, high)
        p_under = p_over = False
        if pth:
            plow, phigh = pth[n.name]
            p_under = is_under(n.prod_usage, plow)
            p_over = is_over(n.prod_usage, phigh)
        if under and p_under:
            c.both_low.append(n.name)
        elif under and not p_over:
            c.low.append(n.name)
        if p_over:
            c.prod_high.append(n.name)
        if over:
            c.sources.append(n.name)
        elif not under and p_under:
            c.prod_low.append(n.name)
    return c, th, pth


class AnomalyTracker:
    """Consecutive-abnormality detection per (pool, pass, node), kept across rounds by the plugin."""

    def __init__(self) -> None:
        self.state: dict[tuple, list[float]] = {}  # key → [abnormal rounds, normal rounds, last seen]

    def mark(self, key: tuple, over: bool, now: float, cond: AnomalyCondition) -> bool:
        st = self.state.get(key)
        if st is None or (cond.timeout and now - st[2] > cond.timeout):
            st = [0, 0, now]
        if over:
            st[0] += 1
            st[1] = 0
        else:
            st[1] += 1
            if st[1] >= max(cond.consecutive_normalities, 1):
                st[0] = 0
        st[2] = now
        self.state[key] = st
        return over and st[0] >= max(cond.consecutive_abnormalities, 1)

    def reset(self, key: tuple) -> None:
        self.state.pop(key, None)


def most_requested_score(n: NodeUsage, res: list[str], weights: Mapping[str, int]) -> int:
    """``Σ w·min(used, alloc)·1000/alloc / Σ w`` (integer), the source order key."""
    num = den = 0
    for r in res:
        w = weights.get(r, 1)
        alloc = n.allocatable.get(r, 0)
        if alloc <= 0:
            continue
        num += w * (min(n.usage.get(r, 0), alloc) * 1000 // alloc)
        den += w
    return num // den if den else 0


def koord_qos_raw(pod: Any) -> str:
    q = pod.labels.get(LABEL_POD_QOS)
    return q if q in QOS_CLASSES else ""


def pod_sort_key(pod: Any, usage: Mapping[str, int], over_res: list[str], alloc: Mapping[str, int],
                 weights: Mapping[str, int]) -> tuple:
    """``sorter.PodSorter``: ascending = evicted first."""
    u = 0
    for r in over_res:
        a = alloc.get(r, 0)
        if a > 0:
            u += weights.get(r, 1) * usage.get(r, 0) * 1000 // a
    return (_CLASS_RANK.get(pod.priority_class, 4), pod.priority, _KUBE_QOS_RANK.get(pod.kube_qos, 3),
            _KOORD_QOS_RANK.get(koord_qos_raw(pod), 4), int_annotation(pod, DELETION_COST),
            int_annotation(pod, EVICTION_COST), -u, -(pod.creation_timestamp or 0.0), pod.key)


def pool_nodes(cluster: Any, pools: list[NodePool], args: LowNodeLoadArgs) -> dict[str, list[Any]]:
    """Nodes per pool (a node joins the first pool whose selector matches; an empty selector = all)."""
    out: dict[str, list[Any]] = {p.name: [] for p in pools}
    for v in cluster.nodes:
        if args.node_selector and not selector_matches(args.node_selector, v.labels):
            continue
        for p in pools:
            if not p.node_selector or selector_matches(p.node_selector, v.labels):
                out[p.name].append(v)
                break
    return out


def _pod_allowed(pod: Any, args: LowNodeLoadArgs) -> bool:
    ns = args.evictable_namespaces
    if ns is not None:
        if ns.include and pod.namespace not in ns.include:
            return False
        if ns.exclude and pod.namespace in ns.exclude:
            return False
    if args.pod_selectors and not any(selector_matches(s.selector or {}, pod.labels) for s in args.pod_selectors):
        return False
    return True


async def balance(builder: PlanBuilder, args: LowNodeLoadArgs, tracker: AnomalyTracker, now: float,
                  notes: list[str], metrics: dict | None = None) -> None:
    """Plan LowNodeLoad's migrations for every pool into ``builder``."""
    cluster = builder.cluster
    pools = args.pools()
    members = pool_nodes(cluster, pools, args)
    for pool in pools:
        usages = []
        for v in members[pool.name]:
            u = readable_node_usage(v, cluster, now, args.node_metric_expiration_seconds, notes, pool.name)
            if u is not None:
                usages.append(u)
        if not usages:
            notes.append(f"{PLUGIN}[{pool.name}]: no node with a fresh NodeMetric")
            continue
        c, th, pth = classify(pool, usages)
        if metrics is not None:
            metrics[pool.name] = {"nodes": len(usages), "low": len(c.low) + len(c.both_low),
                                  "over": len(c.sources), "prodHigh": len(c.prod_high)}
        by_name = {u.name: u for u in usages}
        if pool.configured:
            await _pass(builder, args, pool, by_name, c.sources, c.low + c.both_low, th, tracker, now, notes,
                        prod=False, total=len(usages))
        if pool.prod_configured:
            await _pass(builder, args, pool, by_name, c.prod_high, c.prod_low + c.both_low, pth, tracker, now,
                        notes, prod=True, total=len(usages))


async def _pass(builder: PlanBuilder, args: LowNodeLoadArgs, pool: NodePool, nodes: dict[str, NodeUsage],
                sources: list[str], targets: list[str], th: dict, tracker: AnomalyTracker, now: float,
                notes: list[str], *, prod: bool, total: int) -> None:
    tag = f"{PLUGIN}[{pool.name}{'/prod' if prod else ''}]"
    cond = pool.anomaly_condition or AnomalyCondition()
    which = "prod_usage" if prod else "usage"
    abnormal = []
    for name in nodes:
        over = name in sources
        if tracker.mark((pool.name, prod, name), over, now, cond) and over:
            abnormal.append(name)
    if not sources:
        notes.append(f"{tag}: no node over its high thresholds")
        return
    if not abnormal:
        notes.append(f"{tag}: no source node abnormal for {cond.consecutive_abnormalities} rounds yet")
        return
    if not targets:
        notes.append(f"{tag}: no node under its low thresholds")
        return
    if len(targets) <= args.number_of_nodes:
        notes.append(f"{tag}: {len(targets)} low node(s) <= numberOfNodes {args.number_of_nodes}")
        return
    if len(targets) == total:
        notes.append(f"{tag}: all nodes are low")
        return
    res = pool_resources(pool, prod)
    weights = {r: pool.resource_weights.get(r, 1) for r in res}
    # targets' usage is copied: nodeFit adds each removable pod's usage to the target it fits (Koordinator)
    t_usage = {t: dict(getattr(nodes[t], which)) for t in targets}
    available = {r: sum(th[t][1][r] - t_usage[t].get(r, 0) for t in targets) for r in res}
    abnormal.sort(key=lambda s: (-most_requested_score(nodes[s], res, weights), s))
    target_order = sorted(targets, key=lambda t: builder.cluster.node_index(t) or 0)
    for src in abnormal:
        n = nodes[src]
        usage = dict(getattr(n, which))
        high = th[src][1]
        over_res = [r for r in res if usage.get(r, 0) > high[r]]
        pods = [p for p in builder.cluster.pods_on(src) if _pod_allowed(p, args)
                and (not prod or p.priority_class_with_default == PRIORITY_PROD)
                and builder.blocked(p) in (None, "round budget exhausted", "per-node budget exhausted",
                                          "per-namespace budget exhausted")]
        pods.sort(key=lambda p: pod_sort_key(p, n.pod_usage.get(p.key, {}), over_res, n.allocatable, weights))
        fit_target: dict[str, str] = {}
        removable = []
        for p in pods:
            pu = n.pod_usage.get(p.key, {})

            def usage_fits(t: str, pu: Mapping[str, int] = pu) -> bool:
                return all(t_usage[t].get(r, 0) + _amount(pu, r) <= th[t][1][r] for r in res)

            to = await builder.first_fit(p, target_order, usage_fits if args.node_fit else None)
            if to is None:
                continue
            if args.node_fit:
                for r in res:
                    t_usage[to][r] = t_usage[to].get(r, 0) + _amount(pu, r)
            fit_target[p.uid] = to
            removable.append(p)
        evicted = 0
        for p in removable:
            if not is_over(usage, high):
                break
            if any(available[r] <= 0 for r in res):
                exhausted = sorted(r for r in res if available[r] <= 0)
                notes.append(f"{tag}: stopped on {src}: target headroom exhausted ({', '.join(exhausted)})")
                return
            if builder.round_left is not None and builder.round_left <= 0:
                notes.append(f"{tag}: round budget exhausted")
                return
            if not builder.node_budget_left(src):
                break
            if builder.blocked(p) is not None:
                continue
            group = builder.gang_members(p)
            pu = n.pod_usage.get(p.key, {})

            async def choose(m: Any, first: str = fit_target[p.uid], lead: Any = p) -> str | None:
                if m is lead:  # its usage was added to its fit target already (the nodeFit side effect)
                    return await builder.first_fit(m, [first] + [t for t in target_order if t != first])
                mu = nodes[m.node_name].pod_usage.get(m.key, {}) if m.node_name in nodes else {}

                def usage_ok(t: str) -> bool:
                    return all(t_usage[t].get(r, 0) + _amount(mu, r) <= th[t][1][r] for r in res)

                to = await builder.first_fit(m, target_order, usage_ok if args.node_fit else None)
                if to is not None and args.node_fit:
                    for r in res:
                        t_usage[to][r] = t_usage[to].get(r, 0) + _amount(mu, r)
                return to

            placed = await builder.place_group(group, choose)
            if placed is None:
                continue
            reason = (f"{src} over its high {'prod ' if prod else ''}thresholds "
                      f"({', '.join(over_res)}); pool {pool.name}")
            builder.add(placed, reason, PLUGIN)
            evicted += len(placed)
            for m, _ in placed:
                mu = nodes[m.node_name].pod_usage.get(m.key, {}) if m.node_name in nodes else {}
                for r in res:
                    available[r] -= _amount(mu, r)
                    if m.node_name == src:
                        usage[r] = usage.get(r, 0) - _amount(mu, r)
        if evicted:
            tracker.reset((pool.name, prod, src))
