"""The ``batch_resource`` plugin: a ``node_resources`` hook publishing batch-cpu / batch-memory.

Without a cluster ColocationCfg (``colocation`` None: ``koordfw simulate`` without slo-controller-config)
the strategy is the plugin's args, and a node without a NodeMetric object is left alone (nothing is
known about its usage, and a snapshot may carry the slo-controller's values in node.status already).
With one (``koordfw manager``, or an input holding the ConfigMap) the strategy is that configuration
over Koordinator's defaults (``enable`` false), as koord-manager's: a node without a NodeMetric, with one
older than ``degradeTimeMinutes`` or lacking ``status.updateTime``, or whose colocation is disabled
gets both resources reset (removed from allocatable and capacity: ``None``), as Koordinator's Reset.
The hook returns ``None`` when Koordinator's sync rule (:func:`needs_sync`) says no write is needed.

On the node (``koordfw agent``) the same plugin is koordlet's ``BatchResource`` runtime hook
(:mod:`.runtimehook`): ``runtime_hook`` sets a starting BE pod's (container's) ``cpu.shares``, CFS quota
and memory limit from its batch requests and limits, ``qos_plan`` reconciles them, and ``collect`` reads
the current quotas and memory limits those writes are ordered and compared by. As koordlet's runtime
hooks reconciler, the reconcile runs when its input changed (the pods, their manifests and cgroup dirs,
the rule, the args: its pod-update callback) and otherwise every :data:`RECONCILE_INTERVAL_SECONDS`
(``--runtime-hooks-reconcile-interval``, 10 s); ``collect`` decides, so ``koordfw agent plan`` (no
collect) always plans. The ``batchResource`` arg (Koordinator's feature gate, default true) switches the
node side off.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import attrs
import structlog
from koordfw_prediction.api import risk_report

from koordfw import (
    AgentHandle,
    FileWrite,
    ManifestError,
    NodeState,
    NodeView,
    Pod,
    PodState,
    format_quantity,
    hookimpl,
    warn_once,
)
from koordfw.contract import JSONObject
from koordfw.extension import ANNOTATION_CPU_NORMALIZATION_RATIO, BATCH_CPU, BATCH_MEMORY, COLOCATION_CONFIG_KEY
from koordfw.nodestate import ContainerState, read_cgroup_file

from .calculator import BatchResult, calculate, needs_sync
from .metric import NodeMetricInfo, parse_node_metric
from .runtimehook import (
    RATIO_DIFF_EPSILON,
    Rule,
    cfs_quota_enabled,
    files_to_read,
    parse_ratio,
    pod_writes,
)
from .runtimehook import plan as runtime_plan
from .strategy import ColocationStrategy, from_colocation_config, strategy_for_node

log = structlog.get_logger("koordfw.batch_resource")


def scale_batch_cpu(resources: dict[str, int | None], ratio_text: str | None) -> dict[str, int | None]:
    """``PrepareNodeForResource``: ``kubernetes.io/batch-cpu`` multiplied by the node's cpu normalization ratio
    when it is above 1 (``MultiplyMilliQuant``, then rounded up to an integer as the extended resource must
    be); a missing or unparsable ratio scales nothing."""
    cpu = resources.get(BATCH_CPU)
    if cpu is None or not ratio_text:
        return resources
    try:
        ratio = float(ratio_text)
    except ValueError:
        return resources
    if not ratio > 1.0 or ratio == float("inf"):
        return resources
    milli = int(float(cpu * 1000) * ratio)  # the quantity's milli value, truncated
    resources[BATCH_CPU] = -(-milli // 1000)  # Quantity.Value() rounds up
    return resources


class BatchResource:
    def __init__(self) -> None:
        #: node name → the last calculation, for ``report``
        self.results: dict[str, BatchResult] = {}
        #: bad annotations, labels and NodeMetrics already reported
        self.warned: set = set()
        #: the last valid cluster ColocationCfg (from the engine's ``colocation``) and the text it came from
        self._colocation: ColocationStrategy | None = None
        self._colocation_key: str | None = None
        #: node → (its NodeMetric object, parsed)
        self._metrics: dict[str, tuple[Any, NodeMetricInfo]] = {}
        #: the node side's cpu normalization ratio (the rule's: kept when the annotation turns invalid)
        self._ratio = -1.0
        #: the reconciler's last inputs and when it last ran (the agent's clock)
        self._reconciled: tuple[Any, float] | None = None

    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return ColocationStrategy

    @hookimpl
    def node_resources(self, node: NodeView, pods: list[Pod], metric: JSONObject | None, now: float,
                       last_update: float | None, colocation: JSONObject | None,
                       args: ColocationStrategy) -> dict | None:
        n = getattr(node, "node", node)  # a NodeView or a bare Node
        if colocation is None:
            # no cluster configuration (koordfw simulate without slo-controller-config): the args, and a
            # node without NodeMetric keeps whatever node.status says
            if metric is None:
                return None
            strategy = strategy_for_node(args, n.name, n.labels, n.annotations, self.warned)
        else:
            base = self._cluster_strategy(colocation)
            if base is None:
                return None  # no valid configuration yet: Koordinator does nothing (IsCfgAvailable)
            strategy = strategy_for_node(base, n.name, n.labels, n.annotations, self.warned)
            if not base.enable:
                # isColocationCfgDisabled: the cluster switch wins over any node's strategy
                strategy = attrs.evolve(strategy, enable=False)
        if metric is None:
            result = BatchResult(node=n.name, degraded="colocation disabled" if not strategy.enable
                                 else "no NodeMetric")
        else:
            try:
                info = self._parsed(n.name, metric)
            except ManifestError as e:
                # Koordinator degrades a node without a usable NodeMetric: its batch resources are reset
                warn_once(log, self.warned, (n.name, "NodeMetric", str(e)),
                          "invalid NodeMetric: the node's batch resources are reset", node=n.name, error=str(e))
                result = BatchResult(node=n.name, degraded=f"invalid NodeMetric ({e})")
            else:
                result = calculate(strategy, n, pods, info, now, self.warned)
        self.results[n.name] = result
        new = scale_batch_cpu(dict(result.resources), n.annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO))
        old = {r: n.allocatable.get(r) for r in new}
        if not needs_sync(old, new, last_update=last_update, now=now, strategy=strategy):
            return None
        return new

    def _parsed(self, node: str, metric: Any) -> NodeMetricInfo:
        """The NodeMetric parsed once per object: a live cache replaces the object when it changes, so
        the object itself (held here, so its identity is not reused) is the key."""
        hit = self._metrics.get(node)
        if hit is not None and hit[0] is metric:
            return hit[1]
        info = parse_node_metric(metric)
        self._metrics[node] = (metric, info)
        return info

    def _cluster_strategy(self, colocation: dict) -> ColocationStrategy | None:
        """The ColocationCfg as a strategy, parsed once per distinct value; an invalid one is logged naming
        the field and the previous valid one is kept (None before any)."""
        key = json.dumps(colocation, sort_keys=True, default=str)
        if key != self._colocation_key:
            self._colocation_key = key
            try:
                self._colocation = from_colocation_config(colocation, f"{COLOCATION_CONFIG_KEY}", self.warned)
            except ValueError as e:
                log.error("invalid colocation config; keeping the previous one", error=str(e))
        return self._colocation

    # -- the node side (koordlet's BatchResource runtime hook and its reconciler) ---------------------
    def _rule(self, ns: NodeState) -> Rule:
        """The hook's rule for this node state: ``cfsQuota`` suppression unsets quotas; the node's cpu
        normalization ratio scales them. An invalid ratio is logged and the previous one kept, and a
        change below 0.01 is ignored, as Koordinator's rule does."""
        raw = ns.annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO)
        try:
            ratio = parse_ratio(raw)
        except ValueError as e:
            warn_once(log, self.warned, (ns.name, ANNOTATION_CPU_NORMALIZATION_RATIO, raw),
                      "ignoring invalid node annotation; keeping the previous ratio", node=ns.name,
                      annotation=ANNOTATION_CPU_NORMALIZATION_RATIO, error=str(e))
        else:
            if self._ratio == -1.0 or ratio == -1.0 or abs(self._ratio - ratio) >= RATIO_DIFF_EPSILON:
                self._ratio = ratio
        return Rule(cfs_quota_enabled(ns.config), self._ratio)

    @hookimpl
    def collect(self, node_state: NodeState, args: ColocationStrategy, handle: AgentHandle) -> dict | None:
        """Read the current CFS quota and memory limit of each BE pod's (and container's) cgroup: the
        plan orders quota writes by them and leaves a limit alone that the kernel shows rounded."""
        if not args.batch_resource:
            self._reconciled = None
            return None
        roots = getattr(handle, "roots", None)
        root = roots.get("cgroup") if isinstance(roots, Mapping) else None
        if not root:
            return None
        if not self._reconcile_due(node_state, args, handle):
            return {RECONCILE_KEY: False}
        current = {}
        for path in files_to_read(node_state, node_state.pods, self.warned):
            # two files of every BE pod and container, through the agent's kept descriptors
            data = read_cgroup_file(os.path.join(root, path), 4096)
            if data is None:
                continue  # the cgroup vanished (or has no such file): nothing to order by
            current[path] = data.decode("utf-8", errors="replace").strip()
        return {CURRENT_KEY: current, NodeState.COLLECTED_CGROUPS: current, RECONCILE_KEY: True}

    def _reconcile_due(self, ns: NodeState, args: ColocationStrategy, handle: AgentHandle) -> bool:
        """koordlet's reconciler: when the pods (their manifests, cgroup dirs), the rule or the args changed
        since the last reconcile, else once :data:`RECONCILE_INTERVAL_SECONDS` have passed."""
        now_fn = getattr(handle, "now", None)
        now = float(now_fn()) if callable(now_fn) else None
        inputs = (args, self._rule(ns), ns.cgroup_version, ns.cgroup_driver,
                  tuple([(ps.uid, ps.pod, ps.cgroup_dir, tuple([c.cgroup_dir for c in ps.containers])) for ps in ns.pods]))
        last = self._reconciled
        if (last is not None and now is not None and last[0] == inputs
                and 0 <= now - last[1] < RECONCILE_INTERVAL_SECONDS):
            return False
        self._reconciled = (inputs, now if now is not None else 0.0)
        return True

    @hookimpl
    def qos_plan(self, node_state: NodeState, args: ColocationStrategy) -> list | None:
        """The reconciler: every BE pod's and container's knobs, when ``collect`` found it due (always
        without a collect: ``koordfw agent plan``)."""
        if not args.batch_resource or node_state.metrics.get(RECONCILE_KEY) is False:
            return None
        return runtime_plan(node_state, self._rule(node_state), _current(node_state), self.warned) or None

    @hookimpl
    def runtime_hook(self, event: str, pod: PodState, container: ContainerState | None, node_state: NodeState,
                     args: ColocationStrategy) -> list[FileWrite] | None:
        """A pod start: its pod-level and containers' knobs (PreRunPodSandbox); a container start: that
        container's (PreCreateContainer)."""
        if not args.batch_resource:
            return None
        rule = self._rule(node_state)
        only = container.cgroup_dir if event == "container_start" and container is not None else None
        if event == "container_start" and not only:
            return None
        return pod_writes(node_state, pod, rule, _current(node_state), self.warned, only_container=only) or None

    @hookimpl
    def report(self) -> dict | None:
        if not self.results:
            return None
        rows = []
        for name in sorted(self.results):
            r = self.results[name]
            row: dict[str, Any] = {"node": name,
                                   BATCH_CPU: str(r.batch_cpu),
                                   BATCH_MEMORY: format_quantity("memory", r.batch_memory)}
            if r.degraded:
                row["degraded"] = r.degraded
            else:
                row["policy"] = {"cpu": r.cpu_policy, "memory": r.memory_policy}
                for term in ("capacity", "margin", "reserved", "system_used", "hp_request", "hp_used",
                             "hp_max_used_req"):
                    v = getattr(r, term)
                    row[_camel(term)] = {"cpu": format_quantity("cpu", v["cpu"]),
                                         "memory": format_quantity("memory", v["memory"])}
                if r.risk:
                    row["risk"] = {res: {**risk_report(s), "midRequests": r.mid_requests[res]}
                                   for res, s in r.risk.items()}
            rows.append(row)
        return {"batchResources": rows}


#: ``node_state.metrics`` key of the current values ``collect`` read (path → text)
CURRENT_KEY = "batch_resource.current"
#: ``node_state.metrics`` key: whether this round reconciles (``collect``'s verdict)
RECONCILE_KEY = "batch_resource.reconcile"
#: koordlet's ``--runtime-hooks-reconcile-interval`` default
RECONCILE_INTERVAL_SECONDS = 10.0


def _current(ns: NodeState) -> Mapping[str, str]:
    cur = ns.metrics.get(CURRENT_KEY)
    return cur if isinstance(cur, Mapping) else {}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


__all__ = ["BatchResource", "BatchResult", "ColocationStrategy"]
