"""The node's ``NodeMetric`` status as koordlet writes it (``pkg/koordlet/statesinformer/impl/states_nodemetric.go``,
types ``apis/slo/v1alpha1/nodemetric_types.go``), from the agent's local time series.

Every round the agent records one sample per series (:meth:`NodeMetricReporter.observe`): the node (CPU
from ``/proc/stat``, memory ``MemTotal - MemAvailable``), each pod and host application (their cgroups),
and the system, ``max(node - Σ pods - Σ host apps, 0)`` as koordlet's system resource collector.
Every ``reportIntervalSeconds`` the reporter builds the status (:meth:`NodeMetricReporter.status`):

* ``nodeMetric.nodeUsage`` and ``systemUsage``: averages over the last ``aggregateDurationSeconds``;
* ``nodeMetric.aggregatedNodeUsages`` / ``aggregatedSystemUsages``: for each of
  ``nodeAggregatePolicy.durations``, ``avg``/``p50``/``p90``/``p95``/``p99`` over that duration, each left
  empty (``{}``) while its samples span less than half the duration (koordlet's cold-start filter);
* ``podsMetric``: each pod with metadata and samples, averaged, with ``priority`` and ``qos`` (the
  defaults Koordinator derives), sorted by namespace and name;
* ``hostApplicationMetric``: the NodeSLO's ``hostApplications`` with samples, sorted by name;
* ``updateTime``: now (RFC 3339, seconds).

The collect policy comes from the NodeMetric's ``spec.metricCollectPolicy`` merged over koordlet's
defaults (:func:`collect_policy`): aggregate 300 s (at least 60), report every 60 s (at least 30),
durations 5m, 10m, 30m. Quantities: CPU ``int64(cores*1000)`` milli, memory ``int64(bytes)``.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..core.errors import ManifestError
from ..core.model import Pod
from ..core.nodestate import HostApp, NodeState
from ..core.quantity import format_quantity, parse_duration
from .timeseries import AGGREGATIONS, MetricStore

#: koordlet's defaults and minimums (states_nodemetric.go)
DEFAULT_AGGREGATE_DURATION_SECONDS = 300
MIN_AGGREGATE_DURATION_SECONDS = 60
DEFAULT_REPORT_INTERVAL_SECONDS = 60
MIN_REPORT_INTERVAL_SECONDS = 30
DEFAULT_AGGREGATE_DURATIONS = (300.0, 600.0, 1800.0)
#: a metric's samples must span this share of the asked window to be reported (validateTimeRangeRatio)
VALIDATE_TIME_RANGE_RATIO = 0.5
MEMORY_POLICIES = ("usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache")
#: the longest duration accepted anywhere in the policy (a day; the ring buffer is sized from it)
MAX_DURATION_SECONDS = 86400.0

NODE, SYSTEM = "node", "system"


def pod_key(uid: str) -> str:
    return f"pod/{uid}"


def app_key(name: str) -> str:
    return f"app/{name}"


@attrs.frozen
class CollectPolicy:
    """``spec.metricCollectPolicy`` with koordlet's defaults filled in (the raw values; see the properties)."""

    aggregate_duration_seconds: int = DEFAULT_AGGREGATE_DURATION_SECONDS
    report_interval_seconds: int = DEFAULT_REPORT_INTERVAL_SECONDS
    #: ``nodeAggregatePolicy.durations`` in seconds, as given (``None``: no aggregated usages)
    durations: tuple[float, ...] | None = DEFAULT_AGGREGATE_DURATIONS
    #: the Go spellings of the durations, written back as ``duration`` of each aggregated usage
    duration_texts: tuple[str, ...] | None = None
    memory_policy: str = "usageWithoutPageCache"

    @property
    def aggregate_seconds(self) -> float:
        return float(max(self.aggregate_duration_seconds, MIN_AGGREGATE_DURATION_SECONDS))

    @property
    def report_seconds(self) -> float:
        return float(max(self.report_interval_seconds, MIN_REPORT_INTERVAL_SECONDS))

    @property
    def retention_seconds(self) -> float:
        """How long samples are kept: the longest window any part of the status reads."""
        return max((self.aggregate_seconds, *(self.durations or ())))


def go_duration(seconds: float) -> str:
    """``metav1.Duration`` as Go marshals it: ``5m0s``, ``1h0m0s``, ``30s``, ``1.5s``."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    sec_text = f"{sec:.9f}".rstrip("0").rstrip(".") + "s"
    if h:
        return f"{sign}{int(h)}h{int(m)}m{sec_text}"
    if m:
        return f"{sign}{int(m)}m{sec_text}"
    return sign + sec_text


def _int_seconds(v: Any, ctx: str, field: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_DURATION_SECONDS:
        raise ManifestError(f"expected an integer number of seconds 0..{int(MAX_DURATION_SECONDS)}, got {str(v)[:40]}",
                            obj=ctx, field=field)
    return v


def collect_policy(obj: Mapping[str, Any] | None) -> CollectPolicy:
    """The collect policy of a NodeMetric object (``None``: koordlet's defaults), its
    ``spec.metricCollectPolicy`` unmarshalled over the defaults field by field as koordlet does. A bad
    field raises :class:`ManifestError` naming the NodeMetric and the field."""
    if obj is None:
        return CollectPolicy()
    meta = obj.get("metadata")
    ctx = f"NodeMetric {meta.get('name', '?') if isinstance(meta, Mapping) else '?'}"
    spec = obj.get("spec")
    if spec is None:
        return CollectPolicy()
    if not isinstance(spec, Mapping):
        raise ManifestError("expected a mapping", obj=ctx, field="spec")
    raw = spec.get("metricCollectPolicy")
    if raw is None:
        return CollectPolicy()
    base = "spec.metricCollectPolicy"
    if not isinstance(raw, Mapping):
        raise ManifestError("expected a mapping", obj=ctx, field=base)
    out: dict[str, Any] = {}
    if raw.get("aggregateDurationSeconds") is not None:
        out["aggregate_duration_seconds"] = _int_seconds(raw["aggregateDurationSeconds"], ctx,
                                                         f"{base}.aggregateDurationSeconds")
    if raw.get("reportIntervalSeconds") is not None:
        out["report_interval_seconds"] = _int_seconds(raw["reportIntervalSeconds"], ctx, f"{base}.reportIntervalSeconds")
    if "nodeAggregatePolicy" in raw:
        pol = raw["nodeAggregatePolicy"]
        if pol is None:  # an explicit null: no aggregated usages
            out["durations"] = None
        else:
            if not isinstance(pol, Mapping):
                raise ManifestError("expected a mapping", obj=ctx, field=f"{base}.nodeAggregatePolicy")
            ds = pol.get("durations")
            if ds is not None:
                if not isinstance(ds, list):
                    raise ManifestError("expected a list", obj=ctx, field=f"{base}.nodeAggregatePolicy.durations")
                secs, texts = [], []
                for i, d in enumerate(ds):
                    where = f"{base}.nodeAggregatePolicy.durations[{i}]"
                    try:
                        s = parse_duration(d)
                    except ValueError as e:
                        raise ManifestError(str(e), obj=ctx, field=where) from None
                    if not 0 < s <= MAX_DURATION_SECONDS:
                        raise ManifestError(f"expected a duration above 0 and at most 24h, got {str(d)[:40]}",
                                            obj=ctx, field=where)
                    secs.append(s)
                    texts.append(go_duration(s))
                out["durations"], out["duration_texts"] = tuple(secs), tuple(texts)
    mp = raw.get("nodeMemoryCollectPolicy")
    if mp is not None:
        if mp not in MEMORY_POLICIES:
            raise ManifestError(f"expected one of {', '.join(MEMORY_POLICIES)}, got {str(mp)[:40]}", obj=ctx,
                                field=f"{base}.nodeMemoryCollectPolicy")
        out["memory_policy"] = mp
    return CollectPolicy(**out)


def rfc3339(t: float) -> str:
    """``metav1.Time`` as it marshals: UTC, whole seconds."""
    return _dt.datetime.fromtimestamp(math.floor(t), _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource_list(usage: Mapping[str, float]) -> dict[str, str]:
    """``{"cpu": int64(milli), "memory": int64(bytes)}`` as quantities (what koordlet's NewMilliQuantity/
    NewQuantity give)."""
    return {"cpu": format_quantity("cpu", int(usage["cpu"])), "memory": format_quantity("memory", int(usage["memory"]))}


class NodeMetricReporter:
    """The local time series of one node and the NodeMetric status built from it."""

    def __init__(self, policy: CollectPolicy | None = None, *, sample_interval: float = 1.0) -> None:
        self.policy = policy or CollectPolicy()
        self.sample_interval = sample_interval
        self.store = MetricStore(self.policy.retention_seconds, sample_interval,
                                 short_retention=self.policy.aggregate_seconds, long_keys=(NODE, SYSTEM))
        self.samples = 0
        #: the NodeMetric status fields the plugins' ``collect`` gave in the last round observed
        self.plugin_status: dict[str, Any] = {}

    def set_policy(self, policy: CollectPolicy) -> None:
        """A new collect policy (the NodeMetric's spec changed): the buffers are resized, samples kept."""
        self.policy = policy
        self.store.configure(policy.retention_seconds, self.sample_interval, short_retention=policy.aggregate_seconds)

    def observe(self, ns: NodeState, now: float) -> None:
        """Record one round: node, system, every pod and host application of ``ns``."""
        record = self.store.record
        node_cpu, node_mem = ns.usage.get("cpu"), ns.usage.get("memory")
        record(NODE, now, node_cpu, node_mem)
        keys = {NODE, SYSTEM}
        # pods and host applications alike: each its own series; the system is the node minus all of them
        used_cpu = used_mem = 0.0
        for key, usage in itertools.chain([(pod_key(p.uid), p.usage) for p in ns.pods],
                                          [(app_key(a.name), a.usage) for a in ns.host_apps]):
            keys.add(key)
            cpu, mem = usage.get("cpu"), usage.get("memory")
            if cpu is not None or mem is not None:
                record(key, now, cpu, mem)
            used_cpu += cpu or 0
            used_mem += mem or 0
        if node_cpu is not None or node_mem is not None:
            record(SYSTEM, now,
                   None if node_cpu is None else max(node_cpu - used_cpu, 0.0),
                   None if node_mem is None else max(node_mem - used_mem, 0.0))
        self.store.forget_except(keys)
        self.samples += 1
        self.plugin_status = plugin_status(ns)

    def _usage(self, key: str, start: float, end: float, kind: str, cold_start_filter: bool) -> dict:
        """One ResourceMap: ``{"resources": {...}}``, or ``{}`` without samples (or in cold start)."""
        res = self.store.query(key, start, end, kind)
        if res is None:
            return {}
        values, span = res
        if cold_start_filter and span < (end - start) * VALIDATE_TIME_RANGE_RATIO:
            return {}
        return {"resources": resource_list(values)}

    def _aggregated(self, key: str, now: float) -> list[dict] | None:
        pol = self.policy
        if not pol.durations:
            return None
        out = []
        texts = pol.duration_texts or tuple(go_duration(d) for d in pol.durations)
        for d, text in zip(pol.durations, texts, strict=True):
            out.append({"usage": {kind: self._usage(key, now - d, now, kind, True) for kind in AGGREGATIONS},
                        "duration": text})
        return out

    def status(self, now: float, pods: Iterable[Pod], host_apps: Sequence[HostApp] = (),
               host_app_specs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """The NodeMetric ``status`` at ``now``: ``pods`` are the node's pods with metadata; ``host_apps``
        those of the NodeSLO (``host_app_specs`` by name give their ``priority``/``qos``)."""
        start = now - self.policy.aggregate_seconds
        nm: dict[str, Any] = {"nodeUsage": self._usage(NODE, start, now, "avg", False)}
        agg = self._aggregated(NODE, now)
        if agg is not None:
            nm["aggregatedNodeUsages"] = agg
        nm["systemUsage"] = self._usage(SYSTEM, start, now, "avg", False)
        agg = self._aggregated(SYSTEM, now)
        if agg is not None:
            nm["aggregatedSystemUsages"] = agg
        pods_metric = []
        for p in pods:
            u = self._usage(pod_key(p.uid), start, now, "avg", False)
            if not u:  # koordlet skips a pod whose query fails
                continue
            entry: dict[str, Any] = {"name": p.name, "namespace": p.namespace, "podUsage": u}
            priority = p.priority_class_with_default
            if priority:
                entry["priority"] = priority
            if p.qos_class:
                entry["qos"] = p.qos_class
            pods_metric.append(entry)
        pods_metric.sort(key=lambda e: (e["namespace"], e["name"]))
        status: dict[str, Any] = {"updateTime": rfc3339(now), "nodeMetric": nm}
        if pods_metric:
            status["podsMetric"] = pods_metric
        apps = []
        specs = host_app_specs or {}
        for a in host_apps:
            u = self._usage(app_key(a.name), start, now, "avg", False)
            if not u:
                continue
            entry = {"name": a.name, "usage": u}
            spec = specs.get(a.name) or {}
            for f in ("priority", "qos"):
                if spec.get(f):
                    entry[f] = spec[f]
            apps.append(entry)
        if apps:
            status["hostApplicationMetric"] = sorted(apps, key=lambda e: e["name"])
        return merge_plugin_status(status, self.plugin_status)


#: the status fields the reporter builds itself: a plugin's ``collect`` cannot replace them
OWN_STATUS_FIELDS = frozenset({"updateTime", "nodeMetric", "podsMetric", "hostApplicationMetric"})


def plugin_status(ns: NodeState) -> dict[str, Any]:
    """The NodeMetric status fields the plugins' ``collect`` returned this round under
    :attr:`NodeState.NODE_METRIC_STATUS` (``{}`` when none, or when the value is not a mapping)."""
    raw = ns.metrics.get(NodeState.NODE_METRIC_STATUS)
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): v for k, v in raw.items()}


def merge_plugin_status(status: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` with the plugins' fields added (e.g. the prediction plugin's ``prodReclaimableMetric`` and
    ``prodPeakMetric``, as koordlet's states_nodemetric adds its predictor's); the reporter's own fields
    (:data:`OWN_STATUS_FIELDS`) win, and a ``None`` value leaves a field out."""
    for k, v in extra.items():
        if k not in OWN_STATUS_FIELDS and v is not None:
            status[k] = v
    return status
