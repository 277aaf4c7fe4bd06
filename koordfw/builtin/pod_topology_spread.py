"""pod_topology_spread: kube-scheduler's PodTopologySpread
(``pkg/scheduler/framework/plugins/podtopologyspread/{common,filtering,scoring,plugin}.go``).

Constraints are the pod's ``topologySpreadConstraints`` (``labelSelector`` with ``matchLabelKeys``
merged in from the pod's labels; ``minDomains`` default 1; ``nodeAffinityPolicy`` default Honor,
``nodeTaintsPolicy`` default Ignore). A pod without constraints gets the default constraints
(``defaultingType: System``: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway; ``List``: the
profile's ``defaultConstraints``) with kube's ``DefaultSelector``: the selectors of the Services that
select the pod, and of its controller when that is a ReplicationController, ReplicaSet or StatefulSet
the cluster knows. The embedded cluster knows the Services, ReplicaSets, StatefulSets and
ReplicationControllers of its input, the live caches watch them; a pod whose owner is not among them (a
bare pod, a Deployment's pods in an input without their ReplicaSet) has no default constraints, as in
kube when the listers do not find the owner.

Filter (DoNotSchedule constraints): the node must have every constraint's key (else
UnschedulableAndUnresolvable, "node(s) didn't match pod topology spread constraints (missing required
label)"), and ``matching pods in the node's domain + (1 if the pod matches the selector) − global
minimum <= maxSkew`` (else Unschedulable, "node(s) didn't match pod topology spread constraints").
Domains are those of the eligible nodes: nodes with every constraint's key that pass the constraint's
inclusion policies (node affinity / nodeSelector, untolerated NoSchedule/NoExecute taints); the global
minimum is 0 when fewer than ``minDomains`` domains exist. Matching pods: same namespace, not
terminating, matching the selector (an empty or missing selector matches none).

Score (ScheduleAnyway constraints): per node ``round(Σ count·log(domains + 2) + maxSkew − 1)`` over the
constraints whose key it has (hostname: the node's own pods), then ``100·(max + min − s)/max``; nodes
missing a key of the pod's own constraints score 0.

Per-node counts of matching pods are numpy columns kept current from the nodes that changed; nodes
changed after pre_filter (preemption's victims) are recounted, and pods nominated with at least the
pod's priority count on their node (kube's AddPod for nominated pods).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import attrs
import numpy as np

from koordfw import (
    BoundedCache,
    ClusterEventWithHint,
    ClusterView,
    CycleState,
    Handle,
    NodeBatch,
    Pod,
    QueueingHint,
    StateKey,
    Status,
    hookimpl,
)
from koordfw.hints import ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE
from koordfw.inputs import selector_matches

from ._topology import Domains, TallyCache, freeze, merge_label_keys
from .inter_pod_affinity import nominated_on
from .node_selector import node_matches

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REASON = Status.unschedulable("node(s) didn't match pod topology spread constraints")
LABEL_REASON = Status.unresolvable("node(s) didn't match pod topology spread constraints (missing required label)")

#: kube's systemDefaultConstraints
SYSTEM_DEFAULT_CONSTRAINTS: tuple[dict[str, Any], ...] = (
    {"topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 3},
    {"topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 5},
)


def _defaulting(v: str) -> str:
    if v not in ("System", "List"):
        raise ValueError(f"defaultingType must be System or List, got {v!r}")
    return v


def _check_defaults(_i: Any, _a: Any, v: list[dict[str, Any]]) -> None:
    for j, c in enumerate(v):
        if not isinstance(c, dict):
            raise ValueError(f"defaultConstraints[{j}]: expected a mapping")
        if c.get("labelSelector") is not None:
            raise ValueError(f"defaultConstraints[{j}].labelSelector: not allowed (the selector comes from the pod's "
                             "Services and controller)")
        if not isinstance(c.get("maxSkew"), int) or isinstance(c.get("maxSkew"), bool) or c["maxSkew"] < 1:
            raise ValueError(f"defaultConstraints[{j}].maxSkew: expected an integer >= 1")
        if not isinstance(c.get("topologyKey"), str) or not c["topologyKey"]:
            raise ValueError(f"defaultConstraints[{j}].topologyKey: expected a label key")
        if c.get("whenUnsatisfiable") not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ValueError(f"defaultConstraints[{j}].whenUnsatisfiable: DoNotSchedule or ScheduleAnyway")


@attrs.define
class Args:
    """kube's PodTopologySpreadArgs."""

    default_constraints: list[dict[str, Any]] = attrs.field(factory=list, validator=_check_defaults)
    defaulting_type: str = attrs.field(default="System", converter=_defaulting)


@attrs.frozen
class Constraint:
    """kube's internal ``topologySpreadConstraint``."""

    max_skew: int
    topology_key: str
    selector: Mapping[str, Any] | None
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False

    @property
    def selector_key(self) -> Hashable:
        return freeze(self.selector)


def _constraints(raw: Any, labels: Mapping[str, str], action: str,
                 selector: Mapping[str, Any] | None = None) -> list[Constraint]:
    """kube's filterTopologySpreadConstraints: those with ``whenUnsatisfiable == action``."""
    out = []
    for c in raw:
        if c.get("whenUnsatisfiable") != action:
            continue
        sel = selector if selector is not None else c.get("labelSelector")
        keys = c.get("matchLabelKeys") or []
        if keys and sel is not None:
            sel = merge_label_keys(sel, labels, keys)
        out.append(Constraint(int(c["maxSkew"]), c["topologyKey"], sel, int(c.get("minDomains") or 1),
                              c.get("nodeAffinityPolicy", "Honor") != "Ignore",
                              c.get("nodeTaintsPolicy", "Ignore") == "Honor"))
    return out


def default_selector(pod: Pod, cluster: Any) -> dict[str, Any] | None:
    """kube's helper.DefaultSelector: the Services selecting the pod (their selectors merged), and the
    pod's controller's selector when it is a ReplicationController, ReplicaSet or StatefulSet the cluster
    knows. None when empty."""
    match: dict[str, str] = {}
    for svc in cluster.objects_of("Service").values():
        meta = svc.get("metadata") or {}
        if (meta.get("namespace") or "default") != pod.namespace:
            continue
        sel = (svc.get("spec") or {}).get("selector") or {}
        if isinstance(sel, dict) and sel and all(pod.labels.get(k) == str(v) for k, v in sel.items()):
            match.update({str(k): str(v) for k, v in sel.items()})
    exprs: list[dict[str, Any]] = []
    owner = pod.controller
    if owner is not None:
        gvk = (owner.api_version, owner.kind)
        kinds = {("v1", "ReplicationController"): "ReplicationController", ("apps/v1", "ReplicaSet"): "ReplicaSet",
                 ("apps/v1", "StatefulSet"): "StatefulSet"}
        kind = kinds.get(gvk)
        obj = cluster.get_object(kind, f"{pod.namespace}/{owner.name}") if kind else None
        if obj is not None:
            sel = (obj.get("spec") or {}).get("selector") or {}
            if kind == "ReplicationController":
                if isinstance(sel, dict):
                    match.update({str(k): str(v) for k, v in sel.items()})
            elif isinstance(sel, dict):
                for k, v in (sel.get("matchLabels") or {}).items():
                    exprs.append({"key": str(k), "operator": "In", "values": [str(v)]})
                exprs.extend(sel.get("matchExpressions") or [])
    if not match and not exprs:
        return None
    return {"matchLabels": match, "matchExpressions": exprs}


def _count_matching(ns: str, selector: Mapping[str, Any] | None) -> Any:
    """kube's countPodsMatchSelector over a node's pods."""
    empty = selector is None or not (selector.get("matchLabels") or selector.get("matchExpressions"))

    def count(pods: list[Pod]) -> dict[Hashable, int]:
        if empty:
            return {}
        n = sum(1 for p in pods if p.namespace == ns and p.deletion_timestamp is None
                and selector_matches(selector, p.labels))
        return {0: n} if n else {}

    return count


@attrs.define
class _Filter:
    constraints: list[Constraint]
    versions: np.ndarray
    #: per constraint: per-node counts, eligible mask, per-domain counts, domains present, min
    per_node: list[np.ndarray]
    eligible: list[np.ndarray]
    sums: list[np.ndarray]
    present: list[np.ndarray]
    minimum: list[int]
    self_match: list[bool]
    nominated: dict[int, list[Pod]]


@attrs.define
class _Score:
    idx: np.ndarray
    ignored: np.ndarray
    constraints: list[Constraint]
    weights: list[float]
    #: per constraint: per-domain counts (None for hostname: the node's own count, in ``own``)
    sums: list[np.ndarray | None]
    own: list[np.ndarray | None]


FILTER_STATE: StateKey[_Filter] = StateKey("pod_topology_spread/filter")
SCORE_STATE: StateKey[_Score] = StateKey("pod_topology_spread/score")


class PodTopologySpread:
    def __init__(self, args: Args) -> None:
        self.args = args
        defaults = SYSTEM_DEFAULT_CONSTRAINTS if args.defaulting_type == "System" else args.default_constraints
        self._default_filter = any(c.get("whenUnsatisfiable") == "DoNotSchedule" for c in defaults)
        self._default_score = any(c.get("whenUnsatisfiable") == "ScheduleAnyway" for c in defaults)
        self._domains = Domains()
        self._tallies = TallyCache(256)
        self._masks: BoundedCache[Hashable, tuple[int, np.ndarray]] = BoundedCache(256)

    @staticmethod
    @hookimpl
    def plugin_args() -> type[Args]:
        return Args

    def _defaults(self) -> tuple[dict[str, Any], ...]:
        if self.args.defaulting_type == "System":
            return SYSTEM_DEFAULT_CONSTRAINTS
        return tuple(self.args.default_constraints)

    @staticmethod
    def _may_default(pod: Pod, cluster: Any) -> bool:
        """Could DefaultSelector find anything: a controller, or Services in the cluster."""
        return pod.controller is not None or bool(cluster.objects_of("Service"))

    def constraints(self, pod: Pod, cluster: Any, action: str) -> tuple[list[Constraint], bool]:
        """(the constraints for ``action``, whether they are the pod's own)."""
        if pod.topology_spread_constraints:
            return _constraints(pod.topology_spread_constraints, pod.labels, action), True
        defaults = [c for c in self._defaults() if c.get("whenUnsatisfiable") == action]
        if not defaults:
            return [], False
        sel = default_selector(pod, cluster)
        if sel is None:
            return [], False
        return _constraints(defaults, pod.labels, action, selector=sel), False

    # -- columns ------------------------------------------------------------------------------------------
    def _counts(self, cluster: ClusterView, pod: Pod, c: Constraint) -> np.ndarray:
        t = self._tallies.get((pod.namespace, c.selector_key), _count_matching(pod.namespace, c.selector))
        col = t.refresh(cluster).get(0)
        n = cluster.num_nodes
        return col[:n] if col is not None else np.zeros(n, dtype=np.int64)

    def _cached_mask(self, key: Hashable, cluster: ClusterView, build: Any) -> np.ndarray:
        gen = cluster.labels_generation
        got = self._masks.get(key)
        if got is None or got[0] != gen or len(got[1]) != cluster.num_nodes:
            got = self._masks[key] = (gen, build())
        return got[1]

    def _affinity_mask(self, pod: Pod, cluster: ClusterView) -> np.ndarray | None:
        """Nodes matching the pod's nodeSelector and required node affinity (None: no such rules)."""
        na = (pod.affinity or {}).get("nodeAffinity") or {}
        terms = (na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        if not pod.node_selector and not terms:
            return None
        if not terms:
            m = np.ones(cluster.num_nodes, dtype=bool)
            for k, v in pod.node_selector.items():
                m &= cluster.label_mask(k, v)
            return m
        return self._cached_mask(("aff", freeze(dict(pod.node_selector)), freeze(terms)), cluster,
                                 lambda: np.fromiter((node_matches(pod, v) for v in cluster.views), dtype=bool,
                                                     count=cluster.num_nodes))

    def _taint_mask(self, pod: Pod, cluster: ClusterView) -> np.ndarray:
        """Nodes without an untolerated NoSchedule/NoExecute taint."""
        def build() -> np.ndarray:
            out = np.ones(cluster.num_nodes, dtype=bool)
            for i, v in enumerate(cluster.views):
                for t in v.node.taints:
                    if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in pod.tolerations):
                        out[i] = False
                        break
            return out

        return self._cached_mask(("taints", pod.tolerations), cluster, build)

    def _has_keys(self, cluster: ClusterView, constraints: list[Constraint]) -> np.ndarray:
        m = cluster.live_mask if cluster.has_removed_nodes else np.ones(cluster.num_nodes, dtype=bool)
        for c in constraints:
            m = m & (self._domains.codes(cluster, c.topology_key) >= 0)
        return m

    def _eligible(self, pod: Pod, cluster: ClusterView, c: Constraint, base: np.ndarray) -> np.ndarray:
        m = base
        if c.honor_affinity:
            aff = self._affinity_mask(pod, cluster)
            if aff is not None:
                m = m & aff
        if c.honor_taints:
            m = m & self._taint_mask(pod, cluster)
        return m

    # -- filter ------------------------------------------------------------------------------------------
    def _filter_state(self, pod: Pod, cluster: ClusterView) -> _Filter | None:
        constraints, _ = self.constraints(pod, cluster, "DoNotSchedule")
        if not constraints:
            return None
        base = self._has_keys(cluster, constraints)
        nominated = nominated_on(pod, cluster)
        st = _Filter(constraints, cluster.node_version.copy(), [], [], [], [], [], [], nominated)
        for c in constraints:
            per_node = self._counts(cluster, pod, c)
            if nominated:
                per_node = per_node.copy()
                count = _count_matching(pod.namespace, c.selector)
                for i, ps in nominated.items():
                    per_node[i] += count(ps).get(0, 0)
            st.per_node.append(per_node)
            st.eligible.append(self._eligible(pod, cluster, c, base))
            st.self_match.append(selector_matches(c.selector, pod.labels))
        self._sum(cluster, st)
        return st

    def _sum(self, cluster: ClusterView, st: _Filter) -> None:
        st.sums, st.present, st.minimum = [], [], []
        for c, per_node, elig in zip(st.constraints, st.per_node, st.eligible):
            codes, values = self._domains.get(cluster, c.topology_key)
            d = codes[elig]
            sums = np.bincount(d, weights=per_node[elig], minlength=len(values)).astype(np.int64) if len(values) \
                else np.zeros(0, dtype=np.int64)
            present = np.bincount(d, minlength=len(values)) > 0 if len(values) else np.zeros(0, dtype=bool)
            ndomains = int(present.sum())
            minimum = int(sums[present].min()) if ndomains else 0
            if ndomains < c.min_domains:
                minimum = 0
            st.sums.append(sums)
            st.present.append(present)
            st.minimum.append(minimum)

    def _recount(self, pod: Pod, st: _Filter, cluster: ClusterView) -> _Filter:
        changed = np.flatnonzero(cluster.node_version != st.versions).tolist()
        out = attrs.evolve(st, versions=cluster.node_version.copy(), per_node=[p.copy() for p in st.per_node])
        for c, per_node in zip(out.constraints, out.per_node):
            count = _count_matching(pod.namespace, c.selector)
            for i in changed:
                per_node[i] = count(cluster.pods_on(cluster.views[i].node.name) + st.nominated.get(i, [])).get(0, 0)
        self._sum(cluster, out)
        return out

    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> Status | None:
        if not pod.topology_spread_constraints and not (self._default_filter and self._may_default(pod, handle.cluster)):
            return Status.skip()
        st = self._filter_state(pod, handle.cluster)
        if st is None:
            return Status.skip()
        state[FILTER_STATE] = st
        return None

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> tuple[np.ndarray, Status | list] | None:
        cluster = nodes.cluster
        st = state.get(FILTER_STATE)
        if st is None or len(st.versions) != cluster.num_nodes:
            st = self._filter_state(pod, cluster)
            if st is None:
                return None
            state[FILTER_STATE] = st
        elif (cluster.node_version != st.versions).any():
            st = state[FILTER_STATE] = self._recount(pod, st, cluster)
        idx = nodes.idx
        ok = np.ones(len(idx), dtype=bool)
        missing_any = np.zeros(len(idx), dtype=bool)
        for k, c in enumerate(st.constraints):
            codes = self._domains.codes(cluster, c.topology_key)[idx]
            missing = (codes < 0) & ok
            missing_any |= missing
            ok &= ~missing
            cnt = np.zeros(len(idx), dtype=np.int64)
            has = codes >= 0
            cnt[has] = st.sums[k][codes[has]]
            ok &= ~(cnt + int(st.self_match[k]) - st.minimum[k] > c.max_skew)
        if ok.all():
            return None
        if not missing_any.any():
            return ok, REASON
        return ok, [LABEL_REASON if m else REASON for m in missing_any.tolist()]

    # -- score -------------------------------------------------------------------------------------------
    @hookimpl
    def pre_score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> Status | None:
        cluster = nodes.cluster
        if not pod.topology_spread_constraints and not (self._default_score and self._may_default(pod, cluster)):
            return Status.skip()
        constraints, own = self.constraints(pod, cluster, "ScheduleAnyway")
        if not constraints or len(nodes) == 0:
            return Status.skip()
        require_all = own or self.args.defaulting_type != "System"
        idx = nodes.idx
        has_all = self._has_keys(cluster, constraints)
        ignored = ~has_all[idx] if require_all else np.zeros(len(idx), dtype=bool)
        base_all = has_all if require_all else (cluster.live_mask if cluster.has_removed_nodes
                                                else np.ones(cluster.num_nodes, dtype=bool))
        kept = idx[~ignored]
        weights: list[float] = []
        sums: list[np.ndarray | None] = []
        owns: list[np.ndarray | None] = []
        for c in constraints:
            per_node = self._counts(cluster, pod, c)
            if c.topology_key == HOSTNAME:
                weights.append(math.log(len(kept) + 2))
                sums.append(None)
                owns.append(per_node[idx])
                continue
            codes, values = self._domains.get(cluster, c.topology_key)
            # domains of the scored nodes ("" for nodes without the key when not all keys are required)
            kc = codes[kept]
            seen = np.zeros(len(values) + 1, dtype=bool)
            seen[np.where(kc >= 0, kc, len(values))] = True
            weights.append(math.log(int(seen.sum()) + 2))
            elig = self._eligible(pod, cluster, c, base_all) & (codes >= 0)
            s = np.bincount(codes[elig], weights=per_node[elig], minlength=len(values)).astype(np.int64) \
                if len(values) else np.zeros(0, dtype=np.int64)
            s[~seen[: len(values)]] = 0
            sums.append(s)
            owns.append(None)
        state[SCORE_STATE] = _Score(idx, ignored, constraints, weights, sums, owns)
        return None

    @hookimpl
    def score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> np.ndarray | None:
        st = state.get(SCORE_STATE)
        if st is None:
            return None
        cluster = nodes.cluster
        idx = nodes.idx
        total = np.zeros(len(idx), dtype=np.float64)
        for c, w, sums, own in zip(st.constraints, st.weights, st.sums, st.own):
            codes = self._domains.codes(cluster, c.topology_key)[idx]
            has = codes >= 0
            if own is not None:
                cnt = own.astype(np.float64)
            else:
                assert sums is not None
                cnt = np.zeros(len(idx), dtype=np.float64)
                cnt[has] = sums[codes[has]]
            total += np.where(has, cnt * w + (c.max_skew - 1), 0.0)
        # Go's math.Round: half away from zero (scores are >= 0)
        out = np.floor(total + 0.5).astype(np.int64)
        out[st.ignored] = 0
        return out

    @hookimpl
    def normalize_score(self, scores: np.ndarray, state: CycleState) -> np.ndarray | None:
        st = state.get(SCORE_STATE)
        if st is None or len(scores) == 0:
            return None
        kept = scores[~st.ignored]
        lo = int(kept.min()) if len(kept) else 0
        hi = int(kept.max()) if len(kept) else 0
        if hi == 0:
            out = np.full(len(scores), 100, dtype=np.int64)
        else:
            out = 100 * (hi + lo - scores) // hi
        out[st.ignored] = 0
        return out

    # -- queueing hints ----------------------------------------------------------------------------------
    @hookimpl
    def events_to_register(self, handle: Handle) -> list[ClusterEventWithHint]:
        """kube's PodTopologySpread events: assigned pods added or deleted (a hint: only pods the
        constraints' selectors count, in the pod's namespace), nodes added or changed."""
        def after_pod_change(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
            other = new or old
            if other is None:
                return QueueingHint.QUEUE
            constraints, _ = self.constraints(pod, handle.cluster, "DoNotSchedule")
            if other.namespace == pod.namespace and any(selector_matches(c.selector, other.labels) for c in constraints):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP

        return [ClusterEventWithHint(ASSIGNED_POD_ADD, after_pod_change),
                ClusterEventWithHint(ASSIGNED_POD_DELETE, after_pod_change),
                ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE)]
