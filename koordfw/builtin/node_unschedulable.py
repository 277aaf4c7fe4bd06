"""node_unschedulable: nodes with ``spec.unschedulable`` reject pods that do not tolerate
``node.kubernetes.io/unschedulable:NoSchedule`` (kube's NodeUnschedulable)."""

from koordfw import Status, hookimpl
from koordfw.core.model import Taint

REASON = Status.unresolvable("node(s) were unschedulable")
_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


@hookimpl
def filter(pod, nodes):
    mask = nodes.cluster.unschedulable_mask[nodes.idx]
    if not mask.any() or any(t.tolerates(_TAINT) for t in pod.tolerations):
        return None
    return ~mask, REASON
