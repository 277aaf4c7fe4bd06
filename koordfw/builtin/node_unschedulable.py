"""node_unschedulable: nodes with ``spec.unschedulable`` reject pods that do not tolerate
``node.kubernetes.io/unschedulable:NoSchedule`` (kube's NodeUnschedulable)."""

import numpy as np

from koordfw import Status, hookimpl
from koordfw.core.model import Taint

REASON = "node(s) were unschedulable"
_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


@hookimpl
def filter(pod, nodes):
    mask = nodes.cluster.unschedulable_mask[nodes.idx]
    if not mask.any() or any(t.tolerates(_TAINT) for t in pod.tolerations):
        return None
    return {nodes.cluster.views[int(i)].name: Status.unresolvable(REASON) for i in nodes.idx[np.flatnonzero(mask)]}
