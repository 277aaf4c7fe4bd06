"""node_resources_fit: requests against allocatable (kube's NodeResourcesFit), vectorised.

Filter: every resource the pod requests (``pods`` counts one) must fit in allocatable − requested,
extended resources included (``kubernetes.io/batch-cpu``, GPUs, ...). Score, by ``scoringStrategy``:
``LeastAllocated`` (default; spread), ``MostAllocated`` (binpack), ``RequestedToCapacityRatio`` (kube's
piecewise-linear ``requestedToCapacityRatio.shape`` of utilisation) or ``BalancedAllocation`` (even use
across resources), each over ``resources`` with weights (default cpu and memory, weight 1), with kube's
rules (``resource_allocation.go``): an extended resource (a name with a ``/``, hugepages) the pod does not
request is skipped, a resource the node does not advertise is left out of the weights, and, except for
BalancedAllocation, a container without a cpu or memory request counts kube's non-zero defaults, 100m and
200Mi, on the pod and on the node's pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import attrs
import numpy as np

from koordfw import (
    BoundedCache,
    ClusterEventWithHint,
    ClusterView,
    Handle,
    Node,
    NodeBatch,
    Pod,
    QueueingHint,
    Stash,
    StashKey,
    Status,
    hookimpl,
    memo,
)
from koordfw.contract import FilterBatchResult
from koordfw.embed import cluster_view_of
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE, POD_DELETE

_STRATEGIES = {"leastallocated": "LeastAllocated", "least_allocated": "LeastAllocated",
               "mostallocated": "MostAllocated", "most_allocated": "MostAllocated",
               "requestedtocapacityratio": "RequestedToCapacityRatio",
               "requested_to_capacity_ratio": "RequestedToCapacityRatio",
               "balancedallocation": "BalancedAllocation", "balanced_allocation": "BalancedAllocation"}


@attrs.define
class ResourceWeight:
    name: str
    weight: int = 1


def _strategy(value: object) -> str:
    key = str(value).lower()
    if key not in _STRATEGIES:
        raise ValueError(f"unknown scoring strategy {value!r}; use LeastAllocated, MostAllocated, "
                         f"RequestedToCapacityRatio or BalancedAllocation")
    return _STRATEGIES[key]


def _shape(instance: object, attribute: object, value: RequestedToCapacityRatio) -> None:
    pts = value.shape
    if not pts:
        raise ValueError("requestedToCapacityRatio.shape: expected at least one point")
    for i, p in enumerate(pts):
        if not 0 <= p.utilization <= 100 or not 0 <= p.score <= 10:
            raise ValueError(f"requestedToCapacityRatio.shape[{i}]: utilization in [0, 100] and score in [0, 10]")
        if i and p.utilization <= pts[i - 1].utilization:
            raise ValueError("requestedToCapacityRatio.shape: utilization values must be increasing")


@attrs.define
class UtilizationShapePoint:
    utilization: int
    score: int


@attrs.define
class RequestedToCapacityRatio:
    """kube's RequestedToCapacityRatioParam: ``shape`` points of utilisation (%) to score (0..10)."""

    shape: list[UtilizationShapePoint] = attrs.field(
        factory=lambda: [UtilizationShapePoint(0, 10), UtilizationShapePoint(100, 0)])


@attrs.define
class Args:
    scoring_strategy: str = attrs.field(default="LeastAllocated", converter=_strategy)
    resources: list[ResourceWeight] = attrs.field(factory=lambda: [ResourceWeight("cpu"), ResourceWeight("memory")])
    ignored_resources: list[str] = attrs.field(factory=list)
    #: kube's ignoredResourceGroups: extended resources whose group (the part before the ``/``) is one of
    #: these are not checked by the filter (``example.com`` ignores ``example.com/foo``)
    ignored_resource_groups: list[str] = attrs.field(factory=list)
    requested_to_capacity_ratio: RequestedToCapacityRatio | None = attrs.field(
        default=None, validator=attrs.validators.optional(_shape))


@hookimpl
def plugin_args() -> type[Args]:
    return Args


def _needed(pod: Pod, cluster: ClusterView, args: Args) -> tuple[np.ndarray, np.ndarray]:
    vec = cluster.request_vector(pod)
    need = np.flatnonzero(vec)
    if args.ignored_resources or args.ignored_resource_groups:
        skip = {cluster.resource_index(r) for r in args.ignored_resources}
        groups = set(args.ignored_resource_groups)
        names = cluster.resources
        need = np.array([i for i in need.tolist() if i not in skip
                         and not ("/" in names[i] and names[i].partition("/")[0] in groups)], dtype=np.int64)
    return vec, need


def fits_on(pod: Pod, cluster: ClusterView, args: Args, node_name: str) -> bool:
    """Do the pod's requests fit what is free on ``node_name`` now (nominated pods not counted)?"""
    i = cluster.node_index(node_name)
    if i is None:
        return False
    vec, need = _needed(pod, cluster, args)
    return cluster.has_room(i, vec, need)


@hookimpl
def events_to_register(args: Args, handle: Handle) -> list[ClusterEventWithHint]:
    """kube's NodeResourcesFit hints: a pod leaving a node, or a node added or changed, helps a pod it
    rejected only if that node now has room for it (the other nodes did not change); an unassigned pod
    leaving frees room only if it was nominated somewhere."""
    Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP

    def after_assigned_pod_deleted(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        if old is None or not old.node_name:
            return Q
        return Q if fits_on(pod, handle.cluster, args, old.node_name) else SKIP

    def after_pod_deleted(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        return Q if old is None or old.nominated_node_name else SKIP

    def after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        if new is None:
            return Q
        return Q if fits_on(pod, handle.cluster, args, new.name) else SKIP

    return [ClusterEventWithHint(ASSIGNED_POD_DELETE, after_assigned_pod_deleted),
            ClusterEventWithHint(POD_DELETE, after_pod_deleted),
            ClusterEventWithHint(NODE_ADD, after_node_change),
            ClusterEventWithHint(NODE_UPDATE, after_node_change)]


@hookimpl
def filter(pod: Pod, nodes: NodeBatch, args: Args) -> FilterBatchResult:
    cluster = nodes.cluster
    vec, need = _needed(pod, cluster, args)
    if len(need) == 0:
        return None
    idx = nodes.idx
    free = _cells(cluster.allocatable, idx, need) - _cells(cluster.requested, idx, need)
    short = free < vec[need]
    if len(need) < len(_BITS):
        return _verdicts_by_mask(cluster.resources, need, short)
    return _verdicts_by_row(cluster.resources, need, short)


#: bit k of a node's shortage mask: short of the k-th needed resource
_BITS = np.int64(1) << np.arange(63, dtype=np.int64)
#: the needed resources' names -> shortage mask -> its Status (a pure function of the names: process-wide)
_BY_MASK: BoundedCache[tuple[str, ...], dict[int, Status | None]] = BoundedCache(1024)


@memo(4096)
def _reason(key: tuple[str, ...]) -> Status:
    """The Status naming the resources in ``key`` (one object per key while cached, shared by every node
    and call)."""
    return Status.unschedulable(*("Too many pods" if r == "pods" else f"Insufficient {r}" for r in key))


def _verdicts_by_mask(names: Sequence[str], need: np.ndarray, short: np.ndarray) -> FilterBatchResult:
    """``_verdicts_by_row`` for fewer needed resources than an int64 has bits: each node's row of
    ``short`` becomes one integer (numpy does that for all nodes), and each distinct integer is looked
    up once, so the Python work is one look-up a node instead of one step a resource."""
    masks = short @ _BITS[: len(need)]
    if not masks.any():
        return None
    key = tuple(names[c] for c in need.tolist())
    table = _BY_MASK.get(key)
    if table is None:
        table = _BY_MASK[key] = {0: None}  # 0: short of nothing, no reason (at most 2**len(key) masks)
    ms = masks.tolist()
    for m in set(ms) - table.keys():
        table[m] = _reason(tuple(r for b, r in enumerate(key) if m >> b & 1))
    return cast(np.ndarray, masks == 0), [table[m] for m in ms]


def _verdicts_by_row(names: Sequence[str], need: np.ndarray, short: np.ndarray) -> FilterBatchResult:
    """(fits mask, per node the Status naming the needed resources it is short of or ``None``), or
    ``None`` when every node fits."""
    rejected = short.any(axis=1)
    bad = np.flatnonzero(rejected)
    if len(bad) == 0:
        return None
    reasons: list[Status | None] = [None] * len(short)
    for j in bad.tolist():
        reasons[j] = _reason(tuple(names[k] for k in need[short[j]].tolist()))
    return cast(np.ndarray, ~rejected), reasons


#: (args, cluster, column indices, weights, their sum) of the last score, in the plugin's stash (one engine's)
_SCORE_COLUMNS = StashKey[tuple[Any, ...]]()


def _score_columns(cluster: ClusterView, args: Args,
                   stash: Stash) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """(column indices, weights, whether each is an extended resource, the positions of cpu and memory
    among them or -1) of ``args.resources`` in ``cluster``, kept in ``stash`` while the args object and the
    cluster stay the same objects (a resource column, once added, keeps its index); the entry holds both,
    so neither is another object's."""
    key = cluster_view_of(cluster)  # the plugins' read-only view and the state are one cluster
    got = stash.get(_SCORE_COLUMNS, None)
    if got is None or got[0] is not args or got[1] is not key:
        names = [r.name for r in args.resources]
        cols = np.array([cluster.resource_index(n) for n in names], dtype=np.int64)
        weights = np.array([r.weight for r in args.resources], dtype=np.int64)
        scalar = np.array([_is_scalar(n) for n in names], dtype=bool)
        k_cpu = names.index("cpu") if "cpu" in names else -1
        k_mem = names.index("memory") if "memory" in names else -1
        got = stash[_SCORE_COLUMNS] = (args, key, cols, weights, scalar, k_cpu, k_mem)
    return got[2:]


def _is_scalar(name: str) -> bool:
    """kube's IsScalarResourceName: extended, prefixed-native and attachable-volume names (with a ``/``)
    and hugepages; not cpu, memory, ephemeral-storage or pods."""
    return "/" in name or name.startswith("hugepages-")


#: kube's schedutil.DefaultMilliCPURequest and DefaultMemoryRequest: what a container without a cpu or
#: memory request counts for scoring
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 2**20


def _missing(pod: Pod) -> tuple[int, int]:
    """(milli-CPU, bytes) the pod counts for scoring over its requests: the non-zero defaults of its
    containers without a cpu / memory request (kube's NonMissingContainerRequests)."""
    cpu = sum(DEFAULT_MILLI_CPU for c in pod.containers if "cpu" not in c.requests)
    mem = sum(DEFAULT_MEMORY for c in pod.containers if "memory" not in c.requests)
    return cpu, mem


#: (the cluster, node versions seen, per node the defaults its pods add: [cpu, memory]), in the stash
_NON_ZERO = StashKey[list[Any]]()


def _node_missing(cluster: ClusterView, idx: np.ndarray, stash: Stash) -> np.ndarray:
    """Per node of ``idx``, what its pods add as non-zero defaults ([milli-CPU, bytes] rows, kube's
    NodeInfo.NonZeroRequested - Requested), recounted only on nodes whose pods changed."""
    key = cluster_view_of(cluster)  # the plugins' read-only view and the state are one cluster
    got = stash.get(_NON_ZERO, None)
    versions = cluster.node_version
    n = len(versions)
    if got is None or got[0] is not key:
        got = stash[_NON_ZERO] = [key, np.full(0, -1, dtype=np.int64), np.zeros((0, 2), dtype=np.int64)]
    if len(got[1]) < n:
        got[1] = np.concatenate([got[1], np.full(n - len(got[1]), -1, dtype=np.int64)])
        got[2] = np.concatenate([got[2], np.zeros((n - len(got[2]), 2), dtype=np.int64)])
    seen, extra = got[1], got[2]
    stale = idx[seen[idx] != versions[idx]]
    if len(stale):
        views = cluster.views
        for i in stale.tolist():
            cpu = mem = 0
            for p in cluster.pods_on(views[i].name):
                c, m = _missing(p)
                cpu += c
                mem += m
            extra[i] = (cpu, mem)
            seen[i] = versions[i]
    return extra[idx]


def _cells(matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``matrix[np.ix_(rows, cols)]``, several times faster (two ``take`` calls, no index grids)."""
    return matrix.take(rows, axis=0).take(cols, axis=1)


def _saturating_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` for non-negative int64 amounts, capped at the int64 maximum instead of wrapping."""
    out = a + b
    over = out < a
    return np.where(over, np.iinfo(np.int64).max, out) if over.any() else out


@hookimpl
def score(pod: Pod, nodes: NodeBatch, args: Args, handle: Handle) -> np.ndarray | None:
    cluster = nodes.cluster
    cols, weights, scalar, k_cpu, k_mem = _score_columns(cluster, args, handle.stash)  # first: it may add columns
    vec = cluster.request_vector(pod)
    if not len(cols):
        return None
    alloc = _cells(cluster.allocatable, nodes.idx, cols)
    pod_req = vec[cols]  # a new array (fancy indexing), as are the _cells below
    # kube: an extended resource the pod does not request is left out (as if the node had none of it)
    skip = scalar & (pod_req == 0)
    if skip.any():
        alloc = np.where(skip, 0, alloc)
    requested = _cells(cluster.requested, nodes.idx, cols)
    if args.scoring_strategy != "BalancedAllocation" and (k_cpu >= 0 or k_mem >= 0):
        # kube's non-zero defaults (useRequested=false): containers without a cpu / memory request count
        # 100m / 200Mi, on the pod and on the node's pods
        node_extra = _node_missing(cluster, nodes.idx, handle.stash)
        cpu, mem = _missing(pod)
        if k_cpu >= 0:
            pod_req[k_cpu] += cpu
            requested[:, k_cpu] += node_extra[:, 0]
        if k_mem >= 0:
            pod_req[k_mem] += mem
            requested[:, k_mem] += node_extra[:, 1]
    req = _saturating_add(requested, pod_req)
    strategy = args.scoring_strategy
    if strategy in ("LeastAllocated", "MostAllocated") and (alloc > 0).all():
        # every node advertises every resource scored: the weights are the same on every row
        wsum = int(weights.sum())
        if wsum <= 0:
            return np.zeros(len(nodes.idx), dtype=np.int64)
        if strategy == "MostAllocated":
            per = _percent(np.minimum(req, alloc), alloc)
        else:
            per = np.where(req <= alloc, _percent(np.maximum(alloc - req, 0), alloc), 0)
        return (per * weights).sum(axis=1) // wsum
    safe = np.where(alloc > 0, alloc, 1)
    if args.scoring_strategy == "BalancedAllocation":
        frac = np.minimum(req / safe, 1.0)
        frac = np.where(alloc > 0, frac, np.nan)
        with np.errstate(all="ignore"):
            std = np.nan_to_num(np.nanstd(frac, axis=1), nan=0.0)
        return ((1.0 - std) * 100).astype(np.int64)
    # kube: a resource the node does not advertise is left out of the weights
    w = np.where(alloc > 0, weights, 0)
    if args.scoring_strategy == "RequestedToCapacityRatio":
        per = _ratio_scores(np.minimum(_percent(req, safe), 10**6), args.requested_to_capacity_ratio)
        w = np.where(per > 0, w, 0)  # kube counts only resources scoring above 0
        wsum = w.sum(axis=1)
        total = (per * w).sum(axis=1)
        return np.where(wsum > 0, np.floor(total / np.where(wsum > 0, wsum, 1) + 0.5), 0).astype(np.int64)
    if args.scoring_strategy == "MostAllocated":
        per = np.where(alloc > 0, _percent(np.minimum(req, alloc), safe), 0)
    else:
        per = np.where((alloc > 0) & (req <= alloc), _percent(np.maximum(alloc - req, 0), safe), 0)
    wsum = w.sum(axis=1)
    return np.where(wsum > 0, (per * w).sum(axis=1) // np.where(wsum > 0, wsum, 1), 0)


def _ratio_scores(util: np.ndarray, param: RequestedToCapacityRatio | None) -> np.ndarray:
    """kube's buildBrokenLinearFunction over ``util`` (percent, an int array), shape scores × 10."""
    pts = (param or RequestedToCapacityRatio()).shape
    us = [p.utilization for p in pts]
    ss = [p.score * 10 for p in pts]
    out = np.full(util.shape, ss[-1], dtype=np.int64)
    done = np.zeros(util.shape, dtype=bool)
    for i in range(len(pts)):
        hit = ~done & (util <= us[i])
        if i == 0:
            val = np.full(util.shape, ss[0], dtype=np.int64)
        else:
            num = (ss[i] - ss[i - 1]) * (util - us[i - 1])
            val = ss[i - 1] + np.sign(num) * (np.abs(num) // (us[i] - us[i - 1]))  # Go's truncating division
        out = np.where(hit, val, out)
        done |= hit
    return out


#: above this, ``amount * 100`` no longer fits int64
_EXACT_LIMIT = (2**63 - 1) // 100


def _percent(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``part * 100 // whole`` exactly (kube's integer arithmetic), without int64 overflow for
    quantities near 2^63 (a node advertising exabytes)."""
    if part.size and int(part.max()) > _EXACT_LIMIT:
        return (part.astype(object) * 100 // whole.astype(object)).astype(np.int64)
    return part * 100 // whole
