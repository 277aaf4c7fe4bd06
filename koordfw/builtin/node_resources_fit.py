"""node_resources_fit: requests against allocatable (kube's NodeResourcesFit), vectorised.

Filter: every resource the pod requests (``pods`` counts one) must fit in allocatable − requested,
extended resources included (``kubernetes.io/batch-cpu``, GPUs, ...). Score, by ``scoringStrategy``:
``LeastAllocated`` (default; spread), ``MostAllocated`` (binpack) or ``BalancedAllocation`` (even use
across resources), each over ``resources`` with weights (default cpu and memory, weight 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import attrs
import numpy as np

from koordfw import (
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    NODE_UPDATE,
    POD_DELETE,
    BoundedCache,
    ClusterEventWithHint,
    ClusterView,
    FilterBatchResult,
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

_STRATEGIES = {"leastallocated": "LeastAllocated", "least_allocated": "LeastAllocated",
               "mostallocated": "MostAllocated", "most_allocated": "MostAllocated",
               "balancedallocation": "BalancedAllocation", "balanced_allocation": "BalancedAllocation"}


@attrs.define
class ResourceWeight:
    name: str
    weight: int = 1


def _strategy(value: object) -> str:
    key = str(value).lower()
    if key not in _STRATEGIES:
        raise ValueError(f"unknown scoring strategy {value!r}; use LeastAllocated, MostAllocated or BalancedAllocation")
    return _STRATEGIES[key]


@attrs.define
class Args:
    scoring_strategy: str = attrs.field(default="LeastAllocated", converter=_strategy)
    resources: list[ResourceWeight] = attrs.field(factory=lambda: [ResourceWeight("cpu"), ResourceWeight("memory")])
    ignored_resources: list[str] = attrs.field(factory=list)


@hookimpl
def plugin_args() -> type[Args]:
    return Args


def _needed(pod: Pod, cluster: ClusterView, args: Args) -> tuple[np.ndarray, np.ndarray]:
    vec = cluster.request_vector(pod)
    need = np.flatnonzero(vec)
    if args.ignored_resources:
        skip = {cluster.resource_index(r) for r in args.ignored_resources}
        need = np.array([i for i in need.tolist() if i not in skip], dtype=np.int64)
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


def _score_columns(cluster: ClusterView, args: Args, stash: Stash) -> tuple[np.ndarray, np.ndarray, int]:
    """(column indices, weights, their sum) of ``args.resources`` in ``cluster``, kept in ``stash`` while
    the args object and the cluster stay the same objects (a resource column, once added, keeps its
    index); the entry holds both, so neither is another object's."""
    got = stash.get(_SCORE_COLUMNS, None)
    if got is None or got[0] is not args or got[1] is not cluster:
        cols = np.array([cluster.resource_index(r.name) for r in args.resources], dtype=np.int64)
        weights = np.array([r.weight for r in args.resources], dtype=np.int64)
        got = stash[_SCORE_COLUMNS] = (args, cluster, cols, weights, int(weights.sum()))
    return got[2], got[3], got[4]


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
    vec = cluster.request_vector(pod)
    cols, weights, wsum = _score_columns(cluster, args, handle.stash)
    if wsum <= 0:
        return None
    alloc = _cells(cluster.allocatable, nodes.idx, cols)
    req = _saturating_add(_cells(cluster.requested, nodes.idx, cols), vec[cols])
    safe = np.where(alloc > 0, alloc, 1)
    if args.scoring_strategy == "BalancedAllocation":
        frac = np.minimum(req / safe, 1.0)
        frac = np.where(alloc > 0, frac, np.nan)
        std = np.nan_to_num(np.nanstd(frac, axis=1), nan=0.0)
        return ((1.0 - std) * 100).astype(np.int64)
    if args.scoring_strategy == "MostAllocated":
        per = np.where(alloc > 0, _percent(np.minimum(req, alloc), safe), 0)
    else:
        per = np.where((alloc > 0) & (req <= alloc), _percent(np.maximum(alloc - req, 0), safe), 0)
    return (per * weights).sum(axis=1) // wsum


#: above this, ``amount * 100`` no longer fits int64
_EXACT_LIMIT = (2**63 - 1) // 100


def _percent(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``part * 100 // whole`` exactly (kube's integer arithmetic), without int64 overflow for
    quantities near 2^63 (a node advertising exabytes)."""
    if part.size and int(part.max()) > _EXACT_LIMIT:
        return (part.astype(object) * 100 // whole.astype(object)).astype(np.int64)
    return part * 100 // whole
