"""Queueing hints: ``events_to_register`` decides which cluster events move a pod a plugin rejected."""

from __future__ import annotations

import anyio

from koordfw import ClusterEventWithHint, QueueingHint, Status, build_registry, hookimpl
from koordfw.core.cluster import ClusterState
from koordfw.embed import EmbeddedEngine
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD
from koordfw.inputs import make_node, make_pod
from koordfw.testing import ClusterBuilder, schedule

ALLOC = {"cpu": "4", "memory": "8Gi", "pods": "10"}


def engine_with(plugins: dict, nodes: list[str] = ("n0",)) -> EmbeddedEngine:
    cluster = ClusterState()
    for n in nodes:
        cluster.add_node(make_node(n, allocatable=ALLOC))
    return EmbeddedEngine(build_registry(None, autoload=False, plugins=plugins), cluster, start_time=0.0)


async def try_all(engine: EmbeddedEngine) -> None:
    async with anyio.create_task_group() as tg:
        while await engine.scheduler.schedule_next(tg) is not None:
            pass


async def started_with_tried(engine: EmbeddedEngine, *pods) -> None:
    """Start the scheduler, queue ``pods`` and try each once."""
    await engine.scheduler.startup()
    for p in pods:
        engine.cluster.add_pod(p)
        await engine.scheduler.enqueue(p)
    await try_all(engine)


class NeedsWideNode:
    """Rejects nodes not labelled ``wide``; a new node helps only pods that want one (``wants: wide``)."""

    def __init__(self) -> None:
        self.hint_calls = 0

    @hookimpl
    def filter(self, pod, node):
        return None if node.labels.get("wide") else Status.unschedulable("not wide")

    @hookimpl
    def events_to_register(self):
        def only_wide_pods(pod, old, new):
            self.hint_calls += 1
            return QueueingHint.QUEUE if pod.labels.get("wants") == "wide" else QueueingHint.QUEUE_SKIP

        return [ClusterEventWithHint(NODE_ADD, only_wide_pods)]


def test_hook_events_to_register_moves_only_the_pods_its_hint_queues():
    plugin = NeedsWideNode()
    eng = engine_with({"wide": plugin})

    async def run():
        s = eng.scheduler
        a = make_pod("a", requests={"cpu": "1"}, labels={"wants": "wide"})
        b = make_pod("b", requests={"cpu": "1"})
        await started_with_tried(eng, a, b)
        assert set(s.queue.unschedulable) == {a.uid, b.uid}
        node = make_node("n1", allocatable=ALLOC, labels={"wide": "1"})
        eng.cluster.add_node(node)
        await s.cluster_event(NODE_ADD, None, node)
        # the hint queued a and left b; the other registered-less events would not reach either
        assert a.uid in s.queue.active or a.uid in s.queue.backoff
        assert b.uid in s.queue.unschedulable
        assert plugin.hint_calls == 2

    anyio.run(run)


def test_hook_events_to_register_an_event_it_did_not_register_moves_nothing():
    eng = engine_with({"wide": NeedsWideNode()})

    async def run():
        s = eng.scheduler
        a = make_pod("a", requests={"cpu": "1"}, labels={"wants": "wide"})
        await started_with_tried(eng, a)
        # a pod leaving a node frees room, but the only plugin that rejected a did not register that
        await s.cluster_event(ASSIGNED_POD_DELETE, make_pod("gone", node_name="n0"), None)
        assert a.uid in s.queue.unschedulable

    anyio.run(run)


def test_hook_events_to_register_without_it_a_plugin_gets_the_default_events():
    class Full:
        @hookimpl
        def filter(self, pod, node):
            return Status.unschedulable("full")

    eng = engine_with({"full": Full()})

    async def run():
        s = eng.scheduler
        a = make_pod("a", requests={"cpu": "1"})
        await started_with_tried(eng, a)
        assert "full" not in s.hints
        await s.cluster_event(ASSIGNED_POD_DELETE, make_pod("gone", node_name="n0"), None)
        assert a.uid not in s.queue.unschedulable

    anyio.run(run)


def test_hook_events_to_register_a_hint_that_raises_counts_as_queue():
    class Broken(NeedsWideNode):
        @hookimpl
        def events_to_register(self):
            def boom(pod, old, new):
                raise RuntimeError("bad hint")

            return [ClusterEventWithHint(NODE_ADD, boom)]

    eng = engine_with({"broken": Broken()})

    async def run():
        s = eng.scheduler
        a = make_pod("a", requests={"cpu": "1"})
        await started_with_tried(eng, a)
        await s.cluster_event(NODE_ADD, None, make_node("n1", allocatable=ALLOC))
        assert a.uid not in s.queue.unschedulable

    anyio.run(run)


def test_hook_events_to_register_bad_registrations_fall_back_to_the_defaults():
    class Wrong(NeedsWideNode):
        @hookimpl
        def events_to_register(self):
            return ["Node/Add"]

    eng = engine_with({"wrong": Wrong()})
    anyio.run(eng.scheduler.startup)
    assert "wrong" not in eng.scheduler.hints


def test_node_resources_fit_hint_skips_room_freed_where_the_pod_still_does_not_fit():
    """A 3-CPU pod waits; a 1-CPU pod leaving a node with 1 CPU free leaves 2 free: no retry. A 1-CPU pod
    leaving the node with 2 CPU free leaves 3: the pod is retried and lands."""
    eng = engine_with({}, nodes=["n0", "n1"])

    async def run():
        s = eng.scheduler
        c = eng.cluster
        fillers = {"n0": [("f0", "3"), ("s0", "1")], "n1": [("f1", "2"), ("s1", "1")]}
        for node, pods in fillers.items():
            for name, cpu in pods:
                c.add_pod(make_pod(name, requests={"cpu": cpu}, node_name=node))
        await s.startup()
        big = make_pod("big", requests={"cpu": "3"})
        c.add_pod(big)
        await s.enqueue(big)
        await try_all(eng)
        assert big.uid in s.queue.unschedulable
        await s.remove_pod(c.pod_by_key("default/s0").uid)  # n0: 4 - 3 = 1 free → still no room
        assert big.uid in s.queue.unschedulable
        await s.remove_pod(c.pod_by_key("default/s1").uid)  # n1: 4 - 2 = 2 free → still no room
        assert big.uid in s.queue.unschedulable
        await s.remove_pod(c.pod_by_key("default/f1").uid)  # n1: 4 free → room
        assert big.uid not in s.queue.unschedulable
        eng.clock.advance(20.0)  # past its backoff
        await s.flush()
        await try_all(eng)
        assert c.pod(big.uid).node_name == "n1"

    anyio.run(run)


def test_a_reservation_taken_after_a_pod_failed_does_not_move_it_when_released():
    """The assume sequence: a pod that failed before another pod's reservation was taken saw the cluster
    without it, so that reservation being released cannot help it."""

    class HoldThenReject:
        @hookimpl
        def permit(self, pod):
            return Status.unschedulable("no") if pod.name == "late" else None

    eng = engine_with({"hold": HoldThenReject()})

    async def run():
        s = eng.scheduler
        c = eng.cluster
        await s.startup()
        big = make_pod("big", requests={"cpu": "5"})  # fits nowhere
        c.add_pod(big)
        await s.enqueue(big)
        await try_all(eng)
        assert big.uid in s.queue.unschedulable
        late = make_pod("late", requests={"cpu": "1"})  # assumed, then rejected at permit and forgotten
        c.add_pod(late)
        await s.enqueue(late)
        await try_all(eng)
        assert big.uid in s.queue.unschedulable
        assert late.uid in s.queue.unschedulable

    anyio.run(run)


def test_the_embedded_cluster_does_not_retry_hinted_pods_on_the_5_minute_flush():
    """Every change in memory is an event: a pod rejected only by plugins with hints is tried once, not
    again each time virtual time passes the unschedulable pool's 5-minute flush (a permit wait of 20
    minutes makes virtual time pass four of them)."""

    class Waits:
        @hookimpl
        def permit(self, pod):
            return Status.wait(1200.0) if pod.name == "w" else None

    b = ClusterBuilder().node("n0", cpu="2").pod("big", cpu="4").pod("w", cpu="1")
    r = schedule(b, plugins={"waits": Waits()})
    big = r.cluster.pod_by_key("default/big")
    assert r.engine.clock.now() - r.engine.cycle_seconds[0] > 0
    assert r.results[big.uid].reason.startswith("0/1 nodes are available: 1 Insufficient cpu")
    assert r.engine.attempt_counts[big.uid] == 1
