"""The cluster feeder against kube-scheduler's cache rules: pod updates and node deletion."""

import anyio
from kube_testkit import SCHED, node, pod

from koordfw.core.clock import VirtualClock
from koordfw.core.cluster import ClusterState
from koordfw.core.schedule_one import Scheduler
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.cache import ClusterFeeder


def meta(obj: dict, uid: str, rv: str) -> dict:
    obj["metadata"].update(uid=uid, resourceVersion=rv)
    return obj


async def feeder() -> tuple[Scheduler, ClusterFeeder]:
    s = Scheduler(build_registry(None, autoload=False), ClusterState(), VirtualClock(100.0))
    f = ClusterFeeder(s, scheduler_name=SCHED)
    await f.on_node("ADDED", meta(node("n1", cpu="1"), "n-uid", "1"), None)
    return s, f


async def unschedulable_pod() -> tuple[Scheduler, ClusterFeeder, dict]:
    """A pod that fits nowhere, after its first attempt (unschedulable, backing off)."""
    s, f = await feeder()
    big = meta(pod("big", cpu="2"), "p1", "2")
    await f.on_pod("ADDED", big, None)
    async with anyio.create_task_group() as tg:
        await s.schedule_next(tg)
    assert "p1" in s.queue.unschedulable
    return s, f, big


async def test_an_updated_unschedulable_pod_waits_out_its_backoff():
    s, f, big = await unschedulable_pod()
    big["metadata"]["labels"] = {"touched": "1"}  # a controller touches the pod during its backoff
    await f.on_pod("MODIFIED", meta(big, "p1", "3"), None)
    assert "p1" in s.queue.backoff and "p1" not in s.queue.active
    s.clock.advance(60.0)
    s.queue.flush_backoff(s.clock.now())
    assert "p1" in s.queue.active


async def test_an_updated_unschedulable_pod_past_its_backoff_is_active_at_once():
    s, f, big = await unschedulable_pod()
    s.clock.advance(60.0)
    big["metadata"]["labels"] = {"touched": "1"}
    await f.on_pod("MODIFIED", meta(big, "p1", "3"), None)
    assert "p1" in s.queue.active
    # a status-only update (our own PodScheduled patch) moves nothing
    async with anyio.create_task_group() as tg:
        await s.schedule_next(tg)
    assert "p1" in s.queue.unschedulable
    big["status"] = {"conditions": [{"type": "PodScheduled", "status": "False"}]}
    await f.on_pod("MODIFIED", meta(big, "p1", "4"), None)
    assert "p1" in s.queue.unschedulable


async def test_pods_survive_their_node_being_deleted_and_re_registered():
    s, f = await feeder()
    n_old = meta(node("n1", cpu="2"), "n-uid", "1")
    await f.on_node("MODIFIED", n_old, None)
    await f.on_pod("ADDED", meta(pod("running", cpu="2", node_name="n1", scheduler="other"), "p1", "2"), None)
    assert s.cluster.node("n1").requested["cpu"] == 2000
    await f.on_node("DELETED", n_old, n_old)
    assert s.cluster.node("n1") is None and s.cluster.pod("p1").node_name == "n1"
    await f.on_node("ADDED", meta(node("n1", cpu="2"), "n-uid-2", "5"), None)
    assert s.cluster.node("n1").requested["cpu"] == 2000  # not an empty node to overcommit
