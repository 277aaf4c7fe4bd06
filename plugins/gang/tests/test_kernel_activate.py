"""Kernel regression: ``handle.activate`` must move a pod straight to the active queue, as
kube-scheduler's ``PriorityQueue.Activate`` does (it takes pods out of the unschedulable pool *and* the
backoff queue). The gang plugin re-activates pods it set aside while another gang group was being
scheduled; left in backoff, the embedded engine counted them as already tried and ended the run
without scheduling them."""

from koordfw import build_registry
from koordfw.core.clock import VirtualClock
from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.core.schedule_one import Scheduler


async def test_activate_moves_a_backing_off_pod_to_active():
    cluster = ClusterState()
    cluster.add_node(make_node("n0"))
    pod = make_pod("p", requests={"cpu": "1"})
    cluster.add_pod(pod)
    s = Scheduler(build_registry(autoload=False), cluster, VirtualClock(100.0))
    await s.enqueue(pod)
    info = s.queue.pop()
    # an unschedulable attempt: the pod now backs off for 1 s
    s.queue.failed(pod.uid, s.clock.now(), unschedulable=True)
    assert info.backoff_until > s.clock.now()
    s.handle_for("gang").activate([pod.uid])
    assert pod.uid in s.queue.active
    assert pod.uid not in s.queue.backoff and pod.uid not in s.queue.unschedulable


async def test_activate_leaves_a_gated_pod_gated():
    # kube's Activate re-runs PreEnqueue: a pod a pre_enqueue plugin holds stays out of the active queue
    # (the gang plugin activates every pending member of a group when its round opens)
    cluster = ClusterState()
    cluster.add_node(make_node("n0"))
    pod = make_pod("p", requests={"cpu": "1"})
    cluster.add_pod(pod)
    s = Scheduler(build_registry(autoload=False), cluster, VirtualClock(100.0))
    s.queue.add_gated(pod, s.clock.now(), "held by a test gate")
    s.handle_for("gang").activate([pod.uid])
    assert pod.uid in s.queue.gated and pod.uid not in s.queue.active
