"""The scheduling queue, as kube's ``internal/queue/scheduling_queue_test.go`` checks its PriorityQueue:
the active heap, the backoff and unschedulable pools, backoff doubling and its cap, the flush of pods
left unschedulable too long, pods whose cycle saw a cluster event, and queueing hints deciding Queue or
QueueSkip for a cluster event. Every expected value is worked out by hand from the defaults (initial
backoff 1 s, doubling, at most 10 s; 300 s in the unschedulable pool)."""

from __future__ import annotations

import anyio
import attrs
import pytest

from koordfw import ClusterEventWithHint, QueueingHint, Status, hookimpl
from koordfw.core.clock import VirtualClock
from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.core.plugins import Registry
from koordfw.core.queue import SchedulingQueue
from koordfw.core.schedule_one import Scheduler
from koordfw.hints import NODE_ADD, POD_ADD


def by_priority(pod, info):
    return (-pod.priority, info.arrival, info.seq)


def new_queue(**kw) -> SchedulingQueue:
    return SchedulingQueue(by_priority, **kw)


def pools(q: SchedulingQueue, uid: str) -> str:
    """The one pool ``uid`` is in (gated is a subset of unschedulable, reported as gated)."""
    where = [name for name, pool in (("active", q.active), ("backoff", q.backoff), ("in_flight", q.in_flight))
             if uid in pool]
    if uid in q.unschedulable:
        where.append("gated" if uid in q.gated else "unschedulable")
    assert len(where) <= 1, f"{uid} is in {where}"
    return where[0] if where else "absent"


# -- the active heap ------------------------------------------------------------------------------

def test_pop_gives_the_highest_priority_then_the_earliest_arrival():
    q = new_queue()
    low = make_pod("low", priority=1)
    high = make_pod("high", priority=100)
    mid_first = make_pod("mid-first", priority=50)
    mid_second = make_pod("mid-second", priority=50)
    q.add(low, now=0.0)
    q.add(mid_first, now=1.0)
    q.add(high, now=2.0)
    q.add(mid_second, now=3.0)
    assert [q.pop().pod.name for _ in range(4)] == ["high", "mid-first", "mid-second", "low"]
    assert q.pop() is None


def test_pop_marks_the_pod_in_flight_and_counts_the_attempt():
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    info = q.pop()
    assert info.pod is p
    assert info.attempts == 1
    assert pools(q, p.uid) == "in_flight"
    assert not q.peek_active()


def test_adding_a_queued_pod_again_updates_it_without_a_second_entry():
    q = new_queue()
    p = make_pod("p", priority=1)
    q.add(p, now=0.0)
    updated = attrs.evolve(p, labels={"updated": "yes"})
    q.add(updated, now=5.0)
    assert len(q) == 1
    info = q.pop()
    assert info.pod is updated
    assert info.arrival == 0.0  # the first arrival is kept: the pod does not lose its place
    assert q.pop() is None


def test_done_forgets_the_pod():
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    q.pop()
    q.done(p.uid)
    assert len(q) == 0
    assert q.info(p.uid) is None
    assert pools(q, p.uid) == "absent"


# -- outcomes: unschedulable pool or backoff ---------------------------------------------------------

def test_a_rejected_pod_waits_in_the_unschedulable_pool():
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    q.pop()
    q.failed(p.uid, now=7.0, unschedulable=True, plugins=("fit",))
    assert pools(q, p.uid) == "unschedulable"
    info = q.info(p.uid)
    assert info.unschedulable_since == 7.0
    assert info.plugins == ("fit",)


def test_a_pod_that_failed_with_an_error_backs_off():
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    q.pop()
    q.failed(p.uid, now=7.0, unschedulable=False)
    assert pools(q, p.uid) == "backoff"
    assert q.info(p.uid).backoff_until == 8.0  # first attempt: 1 s
    assert q.next_backoff_deadline() == 8.0


def test_a_cluster_event_during_the_cycle_sends_a_rejected_pod_to_backoff():
    """kube's moveRequestCycle: the event may already have helped the pod, so it must not wait for the
    next one in the unschedulable pool."""
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    q.pop()
    q.move_requests += 1  # what Scheduler.cluster_event does for an event that may help
    q.failed(p.uid, now=3.0, unschedulable=True)
    assert pools(q, p.uid) == "backoff"
    assert q.info(p.uid).backoff_until == 4.0


def test_an_event_before_the_pop_does_not_count_for_the_cycle():
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    q.move_requests += 1
    q.pop()
    q.failed(p.uid, now=3.0, unschedulable=True)
    assert pools(q, p.uid) == "unschedulable"


def test_failed_for_a_forgotten_pod_is_ignored():
    q = new_queue()
    q.failed("no-such-uid", now=1.0, unschedulable=True)
    assert len(q) == 0 and not q.unschedulable and not q.backoff


# -- backoff: doubling, cap, flush -------------------------------------------------------------------

@pytest.mark.parametrize(("attempts", "seconds"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0),
                                                   (40, 10.0)])
def test_backoff_doubles_from_one_second_up_to_ten(attempts, seconds):
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    for _ in range(attempts):
        q.requeue_now(p.uid)
        info = q.pop()
    assert info.attempts == attempts
    assert q.backoff_duration(info) == seconds


def test_backoff_follows_the_configured_initial_and_max():
    q = new_queue(initial_backoff=0.5, max_backoff=3.0)
    p = make_pod("p")
    q.add(p, now=0.0)
    seen = []
    for _ in range(5):
        q.requeue_now(p.uid)
        seen.append(q.backoff_duration(q.pop()))
    assert seen == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_flush_backoff_moves_only_the_pods_whose_backoff_ended():
    q = new_queue()
    a, b = make_pod("a"), make_pod("b")
    q.add(a, now=0.0)
    q.add(b, now=0.0)
    q.pop()  # a
    q.pop()  # b
    q.failed(a.uid, now=10.0, unschedulable=False)  # until 11
    q.requeue_now(b.uid)
    q.pop()  # b, second attempt
    q.failed(b.uid, now=10.0, unschedulable=False)  # until 12
    assert q.next_backoff_deadline() == 11.0
    assert q.flush_backoff(10.999) == 0
    assert q.flush_backoff(11.0) == 1
    assert pools(q, a.uid) == "active" and pools(q, b.uid) == "backoff"
    assert q.next_backoff_deadline() == 12.0
    assert q.flush_backoff(12.0) == 1
    assert pools(q, b.uid) == "active"
    assert q.next_backoff_deadline() is None


def test_requeue_now_skips_the_backoff():
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    q.pop()
    q.failed(p.uid, now=0.0, unschedulable=False)
    q.requeue_now(p.uid)
    assert pools(q, p.uid) == "active"


# -- the unschedulable pool: leftover flush, move on events -----------------------------------------

def test_pods_unschedulable_for_five_minutes_are_flushed():
    q = new_queue()
    old, young = make_pod("old"), make_pod("young")
    for p in (old, young):
        q.add(p, now=0.0)
        q.pop()
    q.failed(old.uid, now=100.0, unschedulable=True)
    q.failed(young.uid, now=200.0, unschedulable=True)
    assert q.flush_unschedulable_leftover(399.9) == []
    assert [i.pod.name for i in q.flush_unschedulable_leftover(400.0)] == ["old"]
    assert sorted(i.pod.name for i in q.flush_unschedulable_leftover(500.0)) == ["old", "young"]


def test_move_goes_to_backoff_while_the_backoff_runs_then_to_active():
    q = new_queue()
    p = make_pod("p")
    q.add(p, now=0.0)
    q.pop()
    q.failed(p.uid, now=20.0, unschedulable=True)  # backoff_until 21
    info = q.info(p.uid)
    q.move_to_active_or_backoff(info, now=20.5)
    assert pools(q, p.uid) == "backoff"
    q.failed(p.uid, now=30.0, unschedulable=True)  # still attempt 1: backoff_until 31
    q.move_to_active_or_backoff(q.info(p.uid), now=31.0)
    assert pools(q, p.uid) == "active"


def test_a_gated_pod_is_held_until_it_is_added_again():
    q = new_queue()
    p = make_pod("p")
    q.add_gated(p, now=4.0, reason="waiting for gate", plugins=("scheduling_gates",))
    assert pools(q, p.uid) == "gated"
    info = q.info(p.uid)
    assert (info.gated, info.gate_reason, info.unschedulable_since) == (True, "waiting for gate", 4.0)
    assert q.pop() is None
    q.add(p, now=5.0)
    assert pools(q, p.uid) == "active"
    assert q.info(p.uid).gated is False
    assert q.pop().pod is p


# -- queueing hints: which cluster events move a rejected pod ----------------------------------------

class RejectsUntilWide:
    """Rejects every node not labelled ``wide``; only a new wide node may help (its hint)."""

    def __init__(self, hint_calls: list[str]) -> None:
        self.hint_calls = hint_calls

    @hookimpl
    def filter(self, pod, node):
        return None if node.labels.get("wide") else Status.unschedulable("not wide")

    @hookimpl
    def events_to_register(self):
        def hint(pod, old, new):
            self.hint_calls.append(new.name)
            return QueueingHint.QUEUE if new.labels.get("wide") else QueueingHint.QUEUE_SKIP
        return [ClusterEventWithHint(NODE_ADD, hint)]


class RejectsWithoutHints:
    @hookimpl
    def filter(self, pod, node):
        return Status.unschedulable("never")


class RaisingHint:
    @hookimpl
    def filter(self, pod, node):
        return Status.unschedulable("never")

    @hookimpl
    def events_to_register(self):
        def hint(pod, old, new):
            raise RuntimeError("broken hint")
        return [ClusterEventWithHint(NODE_ADD, hint)]


def scheduler_with(plugin) -> tuple[Scheduler, ClusterState, VirtualClock]:
    cluster = ClusterState()
    cluster.add_node(make_node("narrow"))
    reg = Registry().load(autoload=False, extra={"p": plugin}, only=set())
    clock = VirtualClock(1000.0)
    return Scheduler(reg, cluster, clock), cluster, clock


async def rejected_once(sched: Scheduler, pod) -> None:
    await sched.startup()
    await sched.add_pod(pod)
    async with anyio.create_task_group() as tg:
        assert await sched.schedule_next(tg) is pod
    assert pools(sched.queue, pod.uid) == "unschedulable"


async def test_a_hint_saying_queue_skip_leaves_the_pod_unschedulable():
    calls: list[str] = []
    sched, cluster, clock = scheduler_with(RejectsUntilWide(calls))
    p = make_pod("p")
    await rejected_once(sched, p)
    node = make_node("still-narrow")
    cluster.add_node(node)
    await sched.cluster_event(NODE_ADD, None, node)
    assert calls == ["still-narrow"]
    assert pools(sched.queue, p.uid) == "unschedulable"


async def test_a_hint_saying_queue_moves_the_pod():
    calls: list[str] = []
    sched, cluster, clock = scheduler_with(RejectsUntilWide(calls))
    p = make_pod("p")
    await rejected_once(sched, p)
    clock.advance(1.0)  # the first backoff (1 s) is over: straight to active
    node = make_node("wide", labels={"wide": "yes"})
    cluster.add_node(node)
    await sched.cluster_event(NODE_ADD, None, node)
    assert calls == ["wide"]
    assert pools(sched.queue, p.uid) == "active"


async def test_a_queued_pod_still_in_backoff_moves_to_backoff():
    sched, cluster, clock = scheduler_with(RejectsUntilWide([]))
    p = make_pod("p")
    await rejected_once(sched, p)
    node = make_node("wide", labels={"wide": "yes"})
    cluster.add_node(node)
    await sched.cluster_event(NODE_ADD, None, node)  # at the time of the failure: 1 s of backoff left
    assert pools(sched.queue, p.uid) == "backoff"


async def test_an_event_the_rejecting_plugin_did_not_register_does_not_move_the_pod():
    calls: list[str] = []
    sched, cluster, clock = scheduler_with(RejectsUntilWide(calls))
    p = make_pod("p")
    await rejected_once(sched, p)
    other = make_pod("other")
    await sched.cluster_event(POD_ADD, None, other)
    assert calls == []
    assert pools(sched.queue, p.uid) == "unschedulable"


async def test_a_hint_that_raises_counts_as_queue():
    sched, cluster, clock = scheduler_with(RaisingHint())
    p = make_pod("p")
    await rejected_once(sched, p)
    clock.advance(1.0)
    node = make_node("n2")
    cluster.add_node(node)
    await sched.cluster_event(NODE_ADD, None, node)
    assert pools(sched.queue, p.uid) == "active"


async def test_a_plugin_without_hints_gets_the_default_events_only():
    """DEFAULT_EVENTS: pods leaving, nodes added or updated; a pending pod's arrival is not one."""
    sched, cluster, clock = scheduler_with(RejectsWithoutHints())
    p = make_pod("p")
    await rejected_once(sched, p)
    clock.advance(1.0)
    await sched.cluster_event(POD_ADD, None, make_pod("other"))
    assert pools(sched.queue, p.uid) == "unschedulable"
    node = make_node("n2")
    cluster.add_node(node)
    await sched.cluster_event(NODE_ADD, None, node)
    assert pools(sched.queue, p.uid) == "active"


async def test_leftover_flush_skips_hinted_pods_when_every_change_is_an_event():
    """The embedded cluster (events_complete): only an event a hint accepts can help a hinted pod, so
    the 5-minute flush leaves it; without events_complete it is retried."""
    for complete, expected in ((True, "unschedulable"), (False, "active")):
        sched, cluster, clock = scheduler_with(RejectsUntilWide([]))
        sched.events_complete = complete
        p = make_pod("p")
        await rejected_once(sched, p)
        clock.advance(300.0)
        await sched.flush()
        assert pools(sched.queue, p.uid) == expected, complete
