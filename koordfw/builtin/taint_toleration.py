"""taint_toleration: kube's TaintToleration. Filter on NoSchedule/NoExecute taints; score by the
number of intolerable PreferNoSchedule taints (fewer is better, normalised in reverse)."""

from __future__ import annotations

from typing import Any

import numpy as np

from koordfw import (
    ClusterEventWithHint,
    ClusterView,
    IdentityKey,
    Node,
    NodeBatch,
    Pod,
    QueueingHint,
    Status,
    Taint,
    hookimpl,
    memo,
    normalize,
)
from koordfw.contract import FilterBatchResult
from koordfw.hints import NODE_ADD, NODE_UPDATE


@memo(4096)
def _reason(taint: Taint) -> Status:
    """The Status of an untolerated ``taint`` (a frozen value: one object per taint while cached)."""
    return Status.unresolvable(f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}")


def _after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
    """kube's TaintToleration hint: a node added or changed helps only if the pod tolerates its
    NoSchedule/NoExecute taints."""
    if new is None:
        return QueueingHint.QUEUE
    for t in new.taints:
        if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in pod.tolerations):
            return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


class TaintToleration:
    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._hard: np.ndarray | None = None
        self._soft: np.ndarray | None = None

    def _columns(self, cluster: ClusterView) -> tuple[np.ndarray, np.ndarray]:
        key = (cluster.labels_generation, cluster.num_nodes, IdentityKey(cluster))
        if key != self._key:
            views = cluster.views
            hard = np.fromiter((any(t.effect in ("NoSchedule", "NoExecute") for t in v.node.taints)
                                      for v in views), dtype=bool, count=len(views))
            soft = np.fromiter((any(t.effect == "PreferNoSchedule" for t in v.node.taints) for v in views),
                                     dtype=bool, count=len(views))
            self._key, self._hard, self._soft = key, hard, soft
            return hard, soft
        return self._hard, self._soft  # type: ignore[return-value]  # set with _key

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(NODE_ADD, _after_node_change),
                ClusterEventWithHint(NODE_UPDATE, _after_node_change)]

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch) -> FilterBatchResult:
        hard, _ = self._columns(nodes.cluster)
        if not hard[nodes.idx].any():
            return None
        views = nodes.cluster.views
        ok = np.ones(len(nodes), dtype=bool)
        reasons: list[Status | None] = [None] * len(nodes)
        for j in np.flatnonzero(hard[nodes.idx]).tolist():
            for t in views[int(nodes.idx[j])].node.taints:
                if t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in pod.tolerations):
                    ok[j] = False
                    reasons[j] = _reason(t)
                    break
        return ok, reasons

    @hookimpl
    def pre_score(self, pod: Pod, nodes: NodeBatch) -> Status | None:
        _, soft = self._columns(nodes.cluster)
        if not soft[nodes.idx].any():
            return Status.skip()
        return None

    @hookimpl
    def score(self, pod: Pod, nodes: NodeBatch) -> np.ndarray:
        _, soft = self._columns(nodes.cluster)
        out = np.zeros(len(nodes), dtype=np.int64)
        views = nodes.cluster.views
        prefer_tols = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
        for j, i in enumerate(nodes.idx.tolist()):
            if soft[i]:
                out[j] = sum(1 for t in views[i].node.taints if t.effect == "PreferNoSchedule"
                             and not any(tol.tolerates(t) for tol in prefer_tols))
        return out

    @hookimpl
    def normalize_score(self, scores: np.ndarray) -> np.ndarray:
        return normalize(scores, reverse=True)
