"""The ``load_aware`` plugin: Koordinator's LoadAware filter and score from NodeMetric usage.

Estimated node usage (``pod_assign_cache.go``)::

    estimated = nodeUsage (or the aggregated pXX usage when configured)
              + Σ over assigned pods that should be estimated of max(0, est(p) - reportedUsage(p))
              + est(incoming pod)
    should be estimated: no usage reported for p, or p assigned after updateTime - reportInterval,
                         or p's estimation window (estimatedSecondsAfter...) reaches past updateTime
    no nodeUsage in the NodeMetric: estimated = Σ est(p) over every assigned pod (+ incoming)

Pods scheduled during a run are "assigned" at ``reserve`` time (``handle.clock.now()``); pods bound
before the run at their PodScheduled condition's lastTransitionTime, or long ago if they have none.

Per-node state (allocatable, thresholds, estimated usage without the incoming pod) lives in numpy
columns indexed like the cluster's node columns and is recomputed only for nodes whose version or
NodeMetric object changed, so a cycle costs one vectorised pass over the candidates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import structlog

from koordfw import BoundedCache, Handle, ManifestError, NodeBatch, Pod, hookimpl, warn_once
from koordfw.extension import ANNOTATION_NODE_RAW_ALLOCATABLE, PRIORITY_PROD
from koordfw.inputs import loads_json, parse_time, raw_allocatable, shorten

from .args import LoadAwareArgs
from .estimator import estimate_pod
from .metric import MetricInfo, parse_duration, parse_node_metric

ANNOTATION_USAGE_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"
REASON_EXPIRED = "node(s) nodeMetric expired"
REASON_USAGE = "node(s) {} usage exceed threshold"
REASON_AGGREGATED = "node(s) {} aggregated usage exceed threshold"
REASON_PROD = "node(s) {} prod usage exceed threshold"

log = structlog.get_logger("koordfw.load_aware")


def _is_prod(pod: Any) -> bool:
    return pod.priority_class_with_default == PRIORITY_PROD


def _condition_time(pod: Any, kind: str) -> float | None:
    raw = pod.raw or {}
    for c in (raw.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind and str(c.get("status", "True")) == "True":
            try:
                return parse_time(c.get("lastTransitionTime"), obj=f"Pod {pod.key}",
                                  field=f"status.conditions[{kind}].lastTransitionTime")
            except ManifestError:
                return None
    return None


class _Profile:
    """``usageThresholdsFilterProfile``: the thresholds that apply to one node."""

    __slots__ = ("aggregated_duration", "aggregated_type", "prod_thresholds", "thresholds")

    def __init__(self, thresholds: Mapping[str, int], prod: Mapping[str, int], agg_type: str = "",
                 agg_duration: float | None = None) -> None:
        self.thresholds, self.prod_thresholds = dict(thresholds), dict(prod)
        self.aggregated_type, self.aggregated_duration = agg_type, agg_duration


def _threshold_map(raw: Any, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping of resource to percent")
    out = {}
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100:
            raise ValueError(f"{where}.{k}: expected an integer percentage in [0, 100], got {shorten(v)}")
        out[str(k)] = v
    return out


def node_profile(args: LoadAwareArgs, node_name: str, annotations: Mapping[str, str],
                 warned: set | None = None) -> _Profile:
    """``generateUsageThresholdsFilterProfile``: the args, overridden per field by the node annotation
    ``scheduling.koordinator.sh/usage-thresholds``. An invalid annotation is logged (naming the node and
    the annotation) and ignored, as Koordinator does."""
    agg = args.aggregated
    prof = _Profile(args.usage_thresholds, args.prod_usage_thresholds)
    if agg is not None and agg.usage_aggregation_type:
        prof.thresholds = dict(agg.usage_thresholds)
        prof.aggregated_type, prof.aggregated_duration = agg.usage_aggregation_type, agg.usage_duration()
    raw = annotations.get(ANNOTATION_USAGE_THRESHOLDS)
    if not raw:
        return prof
    try:
        obj = loads_json(raw)
        if not isinstance(obj, dict):
            raise ValueError("expected a JSON object")
        usage = _threshold_map(obj.get("usageThresholds"), "usageThresholds")
        prod = _threshold_map(obj.get("prodUsageThresholds"), "prodUsageThresholds")
        custom_agg = obj.get("aggregatedUsage")
        if custom_agg is not None:
            if not isinstance(custom_agg, dict):
                raise ValueError("aggregatedUsage: expected a mapping")
            agg_thr = _threshold_map(custom_agg.get("usageThresholds"), "aggregatedUsage.usageThresholds")
            agg_type = str(custom_agg.get("usageAggregationType") or "")
            d = custom_agg.get("usageAggregatedDuration")
            agg_d = parse_duration(d, where="aggregatedUsage.usageAggregatedDuration") if d is not None else None
    except ValueError as e:
        warn_once(log, warned, (node_name, ANNOTATION_USAGE_THRESHOLDS, raw), "ignoring invalid node annotation",
                   node=node_name, annotation=ANNOTATION_USAGE_THRESHOLDS, error=str(e))
        return prof
    if usage:
        prof.thresholds = usage
    if prod:
        prof.prod_thresholds = prod
    if custom_agg is not None:
        prof.thresholds, prof.aggregated_type, prof.aggregated_duration = agg_thr, agg_type, agg_d
    return prof


def node_allocatable(node: Any, warned: set | None = None) -> dict[str, int]:
    """node.status.allocatable, overridden by ``node.koordinator.sh/raw-allocatable`` (JSON ResourceList).
    An annotation that cannot be read (not JSON, too deep, a non-finite, huge or negative quantity) is
    ignored with a warning naming the node and the annotation: the node keeps its allocatable."""
    alloc = dict(node.allocatable)
    try:
        raw = raw_allocatable(node) or {}
        bad = sorted(r for r, v in raw.items() if v < 0)
        if bad:
            raise ValueError(f"negative quantity for {', '.join(bad)}")
    except (ManifestError, ValueError, RecursionError) as e:
        key = ANNOTATION_NODE_RAW_ALLOCATABLE
        warn_once(log, warned, (node.name, key, node.annotations.get(key)),
                   "ignoring invalid node annotation", node=node.name, annotation=key,
                   error=getattr(e, "detail", None) or str(e) or type(e).__name__)
        return alloc
    alloc.update(raw)
    return alloc


class _Columns:
    """Per-node load-aware state, aligned with the cluster's node index."""

    def __init__(self, args: LoadAwareArgs, owner: LoadAware) -> None:
        self.args, self.owner = args, owner
        agg_thr = set(args.aggregated.usage_thresholds) if args.aggregated else set()
        self.res: tuple[str, ...] = tuple(sorted({"cpu", "memory"} | set(args.usage_thresholds)
                                                 | set(args.prod_usage_thresholds) | set(args.weights) | agg_thr))
        self.ri = {r: i for i, r in enumerate(self.res)}
        w = args.weights
        self.weights = np.array([w.get(r, 0) for r in self.res], dtype=np.int64)
        dominant_over = [r for r in self.res if w.get(r, 0) > 0] or ["cpu", "memory"]
        self.dominant_cols = np.array([self.ri[r] for r in dominant_over], dtype=np.int64)
        self.score_agg = (args.aggregated.score_aggregation_type, args.aggregated.score_duration()) if (
            args.aggregated is not None and args.aggregated.score_aggregation_type) else None
        self.need_prod = bool(args.prod_usage_thresholds) or args.score_according_prod_usage
        self.cluster: Any = None
        self.n = 0
        self._alloc_arrays(16)
        self.metric_objs: dict[str, Any] = {}
        #: NodeMetric name -> (the object, its parse): reused while the cluster holds that very object
        self.parsed: BoundedCache[str, tuple[Any, MetricInfo | None]] = BoundedCache(65536)
        self.free_gen = -1
        self.pod_est: dict[str, np.ndarray] = {}

    def _alloc_arrays(self, cap: int) -> None:
        r = len(self.res)
        self.cap = cap
        self.ver = np.full(cap, -1, dtype=np.int64)
        self.has_metric = np.zeros(cap, dtype=bool)
        self.upd = np.full(cap, np.nan)
        self.aggregated = np.zeros(cap, dtype=bool)
        self.has_prod_thr = np.zeros(cap, dtype=bool)
        self.alloc = np.zeros((cap, r), dtype=np.int64)
        self.thr = np.zeros((cap, r), dtype=np.int64)
        self.prod_thr = np.zeros((cap, r), dtype=np.int64)
        self.est_filter = np.zeros((cap, r), dtype=np.int64)
        self.est_score = np.zeros((cap, r), dtype=np.int64)
        self.est_prod = np.zeros((cap, r), dtype=np.int64)

    def _grow(self, n: int) -> None:
        old = {k: getattr(self, k) for k in ("ver", "has_metric", "upd", "aggregated", "has_prod_thr", "alloc", "thr",
                                             "prod_thr", "est_filter", "est_score", "est_prod")}
        cap = self.cap
        while cap < n:
            cap *= 2
        self._alloc_arrays(cap)
        for k, a in old.items():
            getattr(self, k)[: len(a)] = a

    def pod_estimate(self, pod: Any) -> np.ndarray:
        e = self.pod_est.get(pod.uid)
        if e is None:
            e = np.array(estimate_pod(pod, self.res, self.args.estimated_scaling_factors), dtype=np.int64)
            self.pod_est[pod.uid] = e
        return e

    # -- freshness ----------------------------------------------------------------------------------
    def refresh(self, cluster: Any, idx: np.ndarray, now: float) -> None:
        if cluster is not self.cluster:
            self.cluster = cluster
            self.ver[:] = -1
            self.metric_objs.clear()
            self.free_gen = -1
        if cluster.num_nodes > self.cap:
            self._grow(cluster.num_nodes)
        self.n = cluster.num_nodes
        if cluster.free_generation != self.free_gen:
            self._check_metrics(cluster)
            self.free_gen = cluster.free_generation
        stale = idx[cluster.node_version[idx] != self.ver[idx]]
        for i in stale.tolist():
            self._compute_row(cluster, i, now)

    def _check_metrics(self, cluster: Any) -> None:
        """Mark nodes whose NodeMetric object appeared, vanished or was replaced."""
        current = cluster.objects_of("NodeMetric")
        changed = [name for name, obj in current.items() if self.metric_objs.get(name) is not obj]
        changed += [name for name in self.metric_objs if name not in current]
        for name in changed:
            i = cluster.node_index(name)
            if i is not None:
                self.ver[i] = -1
            if name in current:
                self.metric_objs[name] = current[name]
            else:
                self.metric_objs.pop(name, None)

    def _metric(self, obj: Any) -> MetricInfo | None:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = str(meta.get("name")) if isinstance(meta, Mapping) else ""
        hit = self.parsed.get(name)
        if hit is not None and hit[0] is obj:
            return hit[1]
        try:
            info = parse_node_metric(obj)
        except ManifestError as e:
            log.warning("ignoring invalid NodeMetric: load-aware treats the node as having none", error=str(e))
            info = None
        self.parsed[name] = (obj, info)
        return info

    def _vec(self, m: Mapping[str, int] | None) -> np.ndarray:
        m = m or {}
        return np.array([m.get(r, 0) for r in self.res], dtype=np.int64)

    def _compute_row(self, cluster: Any, i: int, now: float) -> None:
        view = cluster.views[i]
        node = view.node
        self.ver[i] = cluster.node_version[i]
        alloc = node_allocatable(node, self.owner.warned)
        self.alloc[i] = [alloc.get(r, 0) for r in self.res]
        prof = node_profile(self.args, node.name, node.annotations, self.owner.warned)
        for name, m in (("usage", prof.thresholds), ("prod", prof.prod_thresholds)):
            extra = set(m) - set(self.res)
            if extra:
                log.warning("ignoring thresholds for resources load-aware does not track", node=node.name,
                            kind=name, resources=sorted(extra))
        self.thr[i] = [prof.thresholds.get(r, 0) for r in self.res]
        self.prod_thr[i] = [prof.prod_thresholds.get(r, 0) for r in self.res]
        self.has_prod_thr[i] = bool(prof.prod_thresholds)
        self.aggregated[i] = bool(prof.aggregated_type)
        obj = cluster.node_metric(node.name)
        info = self._metric(obj) if obj is not None else None
        self.has_metric[i] = info is not None
        if info is None:
            return
        self.upd[i] = np.nan if info.update_time is None else info.update_time
        pods = cluster.pods_on(node.name)
        if prof.aggregated_type:
            base_f = info.aggregated_usage(prof.aggregated_duration, prof.aggregated_type)
        else:
            base_f = info.node_usage
        self.est_filter[i] = self._estimate(cluster, info, base_f, pods, now, prod_only=False)
        if self.score_agg is not None:
            base_s = info.aggregated_usage(self.score_agg[1], self.score_agg[0])
        else:
            base_s = info.node_usage
        self.est_score[i] = self.est_filter[i] if base_s is base_f else self._estimate(
            cluster, info, base_s, pods, now, prod_only=False)
        if self.need_prod:
            prod = self._vec({})
            for key, usage in info.pod_usage.items():
                pr = info.pod_priority.get(key)
                if pr is None:
                    p = cluster.pod_by_key(key)
                    pr = p.priority_class_with_default if p is not None else ""
                if pr == PRIORITY_PROD:
                    prod += self._vec(usage)
            if self.args.prod_usage_include_sys:
                prod += self._vec(info.system_usage)
            self.est_prod[i] = self._estimate(cluster, info, None, pods, now, prod_only=True, base_vec=prod)

    def _estimate(self, cluster: Any, info: MetricInfo, base: Mapping[str, int] | None, pods: list, now: float, *,
                  prod_only: bool, base_vec: np.ndarray | None = None) -> np.ndarray:
        if base is None and base_vec is None:
            out = self._vec({})
            for p in pods:
                if not prod_only or _is_prod(p):
                    out += self.pod_estimate(p)
            return out
        out = (base_vec if base_vec is not None else self._vec(base)).copy()
        for p in pods:
            if prod_only and not _is_prod(p):
                continue
            usage = info.pod_usage.get(p.key)
            if usage is None or self._should_estimate(cluster, p, info, now):
                out += np.maximum(0, self.pod_estimate(p) - self._vec(usage))
        return out

    def _should_estimate(self, cluster: Any, pod: Any, info: MetricInfo, now: float) -> bool:
        upd = info.update_time
        if upd is None:
            return True
        t = self.owner.assigned_at.get(pod.uid)
        if t is None:
            t = now if cluster.is_assumed(pod.uid) else _condition_time(pod, "PodScheduled")
        if t is not None and t > upd - info.report_interval:
            return True
        a = self.args
        if a.estimated_seconds_after_pod_scheduled is not None and t is not None and (
                t + a.estimated_seconds_after_pod_scheduled > upd):
            return True
        if a.estimated_seconds_after_initialized is not None:
            ti = _condition_time(pod, "Initialized")
            if ti is not None and ti + a.estimated_seconds_after_initialized > upd:
                return True
        return False

    def expired(self, idx: np.ndarray, now: float) -> np.ndarray:
        """``isNodeMetricExpired`` for nodes that have a NodeMetric: no updateTime, or too old."""
        upd = self.upd[idx]
        exp = self.args.node_metric_expiration_seconds
        with np.errstate(invalid="ignore"):
            old = (now - upd >= exp) if exp > 0 else np.zeros(len(idx), dtype=bool)
        return np.isnan(upd) | old


def _usage_percent(est: np.ndarray, alloc: np.ndarray) -> np.ndarray:
    # math.Round(float64(used)/float64(total)*100); usage is never negative, so floor(x + 0.5) is Go's Round
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor(est / np.where(alloc > 0, alloc, 1) * 100 + 0.5)


class LoadAware:
    """Metric age is ``now - updateTime`` on a real clock. On a virtual clock (``koordfw simulate``) it is
    measured at the start of the run: the input is a snapshot, and the simulated node agent is taken to
    keep reporting while backoffs and permit waits advance virtual time, so a metric fresh at the start
    does not expire mid-run (and one already stale at the start stays stale)."""

    def __init__(self) -> None:
        #: pod uid → when it was reserved on its node (the engine clock)
        self.assigned_at: dict[str, float] = {}
        self._cols: _Columns | None = None
        self._run_start: float | None = None
        #: bad node annotations already reported
        self.warned: set = set()

    def _metric_now(self, handle: Handle) -> float:
        return self._run_start if self._run_start is not None else handle.clock.now()

    @hookimpl
    def startup(self, handle: Handle) -> None:
        clock = handle.clock
        self._run_start = clock.now() if getattr(clock, "virtual", False) else None

    def columns(self, args: LoadAwareArgs) -> _Columns:
        if self._cols is None or self._cols.args is not args:
            self._cols = _Columns(args, self)
        return self._cols

    @staticmethod
    @hookimpl
    def plugin_args() -> type[LoadAwareArgs]:
        return LoadAwareArgs

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, args: LoadAwareArgs, handle: Handle) -> dict[str, str] | None:
        if pod.is_daemonset:
            return None
        cols = self.columns(args)
        now = handle.clock.now()
        idx = nodes.idx
        cols.refresh(nodes.cluster, idx, now)
        mnow = self._metric_now(handle)
        hm = cols.has_metric[idx]
        if not hm.any():
            return None
        views = nodes.cluster.views
        out: dict[str, str] = {}
        check = hm
        if args.filter_expired_node_metrics:
            expired = hm & cols.expired(idx, mnow)
            if not args.enable_schedule_when_node_metrics_expired:
                for i in idx[expired].tolist():
                    out[views[i].name] = REASON_EXPIRED
            check = hm & ~expired
        e = cols.pod_estimate(pod)
        use_prod = check & cols.has_prod_thr[idx] if _is_prod(pod) else np.zeros(len(idx), dtype=bool)
        for mask, est_col, thr_col, prod in ((check & ~use_prod, cols.est_filter, cols.thr, False),
                                             (use_prod, cols.est_prod, cols.prod_thr, True)):
            if not mask.any():
                continue
            sel = idx[mask]
            alloc, thr = cols.alloc[sel], thr_col[sel]
            usage = _usage_percent(est_col[sel] + e, alloc)
            over = (thr > 0) & (alloc > 0) & (usage > thr)
            for j in np.flatnonzero(over.any(axis=1)).tolist():
                i = int(sel[j])
                r = cols.res[int(np.argmax(over[j]))]  # first resource in sorted order, as Koordinator
                reason = REASON_PROD if prod else (REASON_AGGREGATED if cols.aggregated[i] else REASON_USAGE)
                out[views[i].name] = reason.format(r)
        return out or None

    @hookimpl
    def score(self, pod: Pod, nodes: NodeBatch, args: LoadAwareArgs, handle: Handle) -> np.ndarray | None:
        cols = self.columns(args)
        now = handle.clock.now()
        idx = nodes.idx
        cols.refresh(nodes.cluster, idx, now)
        valid = cols.has_metric[idx]
        if not valid.any():
            return None
        valid &= ~cols.expired(idx, self._metric_now(handle))
        w_sum = int(cols.weights.sum()) + args.dominant_resource_weight
        if not valid.any() or w_sum == 0:
            return None
        est_col = cols.est_prod if (args.score_according_prod_usage and _is_prod(pod)) else cols.est_score
        sel = idx[valid]
        alloc = cols.alloc[sel]
        est = est_col[sel] + cols.pod_estimate(pod)
        least = np.where((alloc > 0) & (est <= alloc), (alloc - est) * 100 // np.where(alloc > 0, alloc, 1), 0)
        total = (least * cols.weights).sum(axis=1)
        if args.dominant_resource_weight:
            total += least[:, cols.dominant_cols].min(axis=1) * args.dominant_resource_weight
        out = np.zeros(len(idx), dtype=np.int64)
        out[valid] = total // w_sum
        return out

    @hookimpl
    def reserve(self, pod: Pod, handle: Handle) -> None:
        self.assigned_at[pod.uid] = handle.clock.now()

    @hookimpl
    def unreserve(self, pod: Pod) -> None:
        self.assigned_at.pop(pod.uid, None)


__all__ = ["LoadAware", "node_allocatable", "node_profile"]
