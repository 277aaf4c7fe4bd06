"""The back half of a scheduling cycle for a pod another scheduler placed (the extender's ``bind``
verb, kube-scheduler having filtered and scored through the extender): the same points as a cycle,
run on the one node given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import Pod
from .state import CycleState
from .status import Status

if TYPE_CHECKING:
    from .schedule_one import Scheduler


async def reserve_placed(s: Scheduler, pod: Pod, node_name: str) -> tuple[Status, CycleState]:
    """The back half of a cycle for a pod that another scheduler placed on ``node_name`` (the
    extender's ``bind`` verb): pre_filter, the filters on that node, assume, reserve, pre_bind.

    On success the pod stays assumed on the node with its reservations held, and
    ``state.annotations`` holds what pre_bind plugins wrote; the caller binds, then calls
    :func:`release_placed` if the binding fails. On failure nothing is left reserved or assumed and
    the status names the plugin. permit is not run: the other scheduler ran its own permit phase,
    and a wait here would hold its bind call open.
    """
    fw = s.framework
    state = CycleState()
    i = s.cluster.node_index(node_name)
    if i is None:
        return Status.unresolvable(f"node {node_name} not found"), state
    known = s.cluster.pod(pod.uid)
    if pod.node_name or (known is not None and known.node_name):
        where = pod.node_name or (known.node_name if known is not None else "")
        return Status.unresolvable(f"pod {pod.key} is already on node {where}"), state
    st, candidates = await fw.run_pre_filter(pod, state)
    if not st.ok:
        return st, state
    if candidates is not None and node_name not in candidates:
        return Status.unresolvable(f"node {node_name} is not in the pre_filter node set"), state
    st = await fw.run_filters_on_node(pod, node_name, state)
    if not st.ok:
        return st, state
    node = s.cluster.views[i]
    s.assume(pod, node_name)
    st = await fw.run_reserve(pod, node, state)
    if st.ok:
        st = await fw.run_pre_bind(pod, node, state)
    if not st.ok:
        await s.unreserve_and_forget(pod, node, state)
    return st, state

async def release_placed(s: Scheduler, pod: Pod, node_name: str, state: CycleState) -> None:
    """Undo :func:`reserve_placed` after a failed binding: unreserve in reverse order, forget."""
    i = s.cluster.node_index(node_name)
    if i is not None:
        await s.unreserve_and_forget(pod, s.cluster.views[i], state)
