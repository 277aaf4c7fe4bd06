"""node_unschedulable: nodes with ``spec.unschedulable`` reject pods that do not tolerate
``node.kubernetes.io/unschedulable:NoSchedule`` (kube's NodeUnschedulable)."""

from __future__ import annotations

from koordfw import ClusterEventWithHint, Node, NodeBatch, Pod, QueueingHint, Status, Taint, hookimpl
from koordfw.contract import FilterBatchResult
from koordfw.hints import NODE_ADD, NODE_UPDATE

REASON = Status.unresolvable("node(s) were unschedulable")
_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def _after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
    """A node added or changed helps only if it is schedulable (or the pod tolerates that it is not)."""
    if new is None or not new.unschedulable or any(t.tolerates(_TAINT) for t in pod.tolerations):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@hookimpl
def events_to_register() -> list[ClusterEventWithHint]:
    return [ClusterEventWithHint(NODE_ADD, _after_node_change), ClusterEventWithHint(NODE_UPDATE, _after_node_change)]


@hookimpl
def filter(pod: Pod, nodes: NodeBatch) -> FilterBatchResult:
    mask = nodes.cluster.unschedulable_mask[nodes.idx]
    if not mask.any() or any(t.tolerates(_TAINT) for t in pod.tolerations):
        return None
    return ~mask, REASON
