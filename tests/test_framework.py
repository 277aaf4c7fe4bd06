"""Scheduling-framework semantics, checked against kube-scheduler's rules."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest

from koordfw import Status, hookimpl, normalize
from koordfw.core.schedule_one import num_feasible_nodes_to_find
from koordfw.testing import ClusterBuilder, schedule


@pytest.mark.parametrize("nodes,pct,expected", [
    (50, 0, 50), (99, 0, 99), (100, 0, 100), (1000, 0, 420), (5000, 0, 500), (5625, 0, 281),
    (10000, 0, 500), (6000, 0, 300), (200, 0, 100), (1000, 30, 300), (1000, 5, 100), (1000, 100, 1000),
])
def test_num_feasible_nodes_to_find(nodes, pct, expected):
    assert num_feasible_nodes_to_find(nodes, pct) == expected


@pytest.mark.parametrize("scores,reverse,expected", [
    ([0, 5, 10], False, [0, 50, 100]), ([0, 5, 10], True, [100, 50, 0]), ([0, 0], False, [0, 0]),
    ([0, 0], True, [100, 100]), ([3, 7, 9], False, [33, 77, 100]),
])
def test_default_normalize_score(scores, reverse, expected):
    assert normalize(np.array(scores), reverse=reverse).tolist() == expected


class CountingFilter:
    def __init__(self):
        self.seen = 0

    @hookimpl
    def filter(self, nodes):
        self.seen += len(nodes)


def test_adaptive_search_and_round_robin_start():
    b = ClusterBuilder()
    for i in range(1000):
        b.node(f"n{i}")
    b.pod("p1", cpu="1").pod("p2", cpu="1")
    cf = CountingFilter()
    r = schedule(b, plugins={"count": cf})
    # 1000 nodes → 42% → 420 nodes per pod; the second search starts where the first stopped
    assert cf.seen == 840
    assert r.scheduler.next_start_node_index == 840


def test_search_stops_at_one_node_without_scoring():
    b = ClusterBuilder()
    for i in range(300):
        b.node(f"n{i}")
    b.pod("p", cpu="1")
    profile = {"plugins": {"score": {"disabled": [{"name": "*"}]}}}
    r = schedule(b, profile=profile)
    # without scoring, the search stops at the first feasible node: the round-robin start moves by one
    assert r.scheduler.next_start_node_index == 1


def test_ties_are_broken_by_seeded_random():
    def run(seed):
        b = ClusterBuilder()
        for i in range(8):
            b.node(f"n{i}")
        for j in range(6):
            b.pod(f"p{j}", cpu="1")
        profile = {"plugins": {"score": {"disabled": [{"name": "*"}], "enabled": ["flat"]}},
                   "percentageOfNodesToScore": 100}

        class Flat:
            @hookimpl
            def score(self, nodes):
                return np.full(len(nodes), 50)

        return schedule(b, plugins={"flat": Flat()}, profile=profile, seed=seed).placements()

    assert run(7) == run(7)
    assert len({tuple(run(s).values()) for s in range(6)}) > 1


def test_raising_plugin_fails_only_that_pods_cycle():
    class Boom:
        @hookimpl
        def filter(self, pod, nodes):
            if pod.name == "bad":
                raise RuntimeError("kaboom")

    r = schedule(ClusterBuilder().node("n").pod("good", cpu="1").pod("bad", cpu="1").pod("good2", cpu="1"),
                 plugins={"boom": Boom()})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert d["good"]["phase"] == d["good2"]["phase"] == "Bound"
    assert d["bad"]["phase"] == "Pending"
    assert "plugin boom raised RuntimeError in filter: kaboom" in d["bad"]["reason"]


def test_hanging_async_plugin_times_out_and_others_go_on():
    class Hang:
        @hookimpl
        async def filter(self, pod, nodes):
            if pod.name == "stuck":
                await anyio.sleep_forever()

    t0 = time.monotonic()
    r = schedule(ClusterBuilder().node("n").pod("stuck", cpu="1").pod("ok", cpu="1"), plugins={"hang": Hang()},
                 profile={"pluginTimeoutSeconds": 0.2})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert d["ok"]["phase"] == "Bound"
    assert d["stuck"]["phase"] == "Pending" and "plugin hang timed out after 0.2s in filter" in d["stuck"]["reason"]
    assert time.monotonic() - t0 < 30  # the hang was cut, not waited out


def test_blocking_sync_plugin_in_thread_times_out():
    class Block:
        @hookimpl
        def score(self, pod, nodes):
            if pod.name == "stuck":
                time.sleep(0.5)
            return None

    r = schedule(ClusterBuilder().node("a").node("b").pod("stuck", cpu="1").pod("ok", cpu="1"),
                 plugins={"block": Block()}, profile={"pluginTimeoutSeconds": 0.1, "threadedPlugins": ["block"]})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert d["ok"]["phase"] == "Bound"
    assert "plugin block timed out" in d["stuck"]["reason"]


class Gate:
    """Permit: pods labelled wait=1 wait until a pod named 'opener' is reserved; 'closer' rejects them."""

    def __init__(self, timeout=60.0):
        self.timeout = timeout

    @hookimpl
    def permit(self, pod, handle):
        if pod.labels.get("wait") == "1":
            return Status.wait(self.timeout)
        if pod.name == "opener":
            for wp in handle.iterate_waiting_pods():
                wp.allow("gate")
        if pod.name == "closer":
            for wp in handle.iterate_waiting_pods():
                wp.reject("gate", "closed by closer")
        return None


def test_permit_wait_then_allow_keeps_reservation_meanwhile():
    b = (ClusterBuilder().node("n", cpu="3")
         .pod("w1", cpu="1", labels={"wait": "1"}, priority=10)
         .pod("w2", cpu="1", labels={"wait": "1"}, priority=10)
         .pod("opener", cpu="1", priority=5)
         .pod("late", cpu="1", priority=1))
    r = schedule(b, plugins={"gate": Gate()})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert [d[n]["phase"] for n in ("w1", "w2", "opener")] == ["Bound"] * 3
    # the waiting pods held their CPUs: "late" found the node full
    assert d["late"]["phase"] == "Pending" and "Insufficient cpu" in d["late"]["reason"]


def test_permit_reject_releases_reservation():
    # equal priorities: nobody can preempt, so only the permit rejection is at play
    b = (ClusterBuilder().node("n", cpu="2")
         .pod("w1", cpu="1", labels={"wait": "1"}, priority=10)
         .pod("closer", cpu="1", priority=10)
         .pod("after", cpu="1", priority=10))
    rejected = []

    class Watch:
        @hookimpl
        def unreserve(self, pod, node):
            rejected.append((pod.name, node.name))

    r = schedule(b, plugins={"gate": Gate(), "watch": Watch()})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert rejected[0] == ("w1", "n")
    # the rejection freed w1's CPU, which "after" then got; w1's retry found the node full
    assert d["closer"]["phase"] == "Bound" and d["after"]["phase"] == "Bound"
    assert d["w1"]["phase"] == "Pending" and "Insufficient cpu" in d["w1"]["reason"]


def test_permit_timeout_on_virtual_clock():
    b = ClusterBuilder().node("n", cpu="2").pod("w1", cpu="1", labels={"wait": "1"})
    t0 = time.monotonic()
    r = schedule(b, plugins={"gate": Gate(timeout=600)})
    wall = time.monotonic() - t0
    d = r.to_dict()["pods"][0]
    assert d["phase"] == "Pending"
    assert d["reason"] == "rejected due to timeout after waiting 600s at plugin gate"
    assert r.scheduler.clock.now() >= 1_000_000 + 600 or r.scheduler.clock.virtual
    assert wall < 30
    assert r.to_dict()["nodes"][0]["pods"] == 0  # reservation released


def test_permit_wait_is_capped_at_15_minutes():
    b = ClusterBuilder().node("n").pod("w1", cpu="1", labels={"wait": "1"})
    r = schedule(b, plugins={"gate": Gate(timeout=10_000)})
    assert "after waiting 900s" in r.to_dict()["pods"][0]["reason"]


def test_preemption_evicts_lowest_priority_victims():
    b = (ClusterBuilder().node("n0", cpu="4").node("n1", cpu="4")
         .pod("low-a", cpu="3", priority=1, node="n0")
         .pod("mid-b", cpu="3", priority=50, node="n1")
         .pod("vip", cpu="3", priority=100))
    r = schedule(b)
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert d["vip"]["node"] == "n0"  # lowest victim priority wins the node choice
    assert d["low-a"]["phase"] == "Pending" and d["low-a"]["reason"].startswith("preempted by default/vip on n0")
    assert d["mid-b"]["node"] == "n1"


def test_preemption_reprieves_victims_not_needed():
    b = (ClusterBuilder().node("n0", cpu="4")
         .pod("keep", cpu="1", priority=5, node="n0")
         .pod("go", cpu="2", priority=1, node="n0")
         .pod("vip", cpu="3", priority=100))
    r = schedule(b)
    assert r.placements() == {"default/keep": "n0", "default/go": None, "default/vip": "n0"}


def test_preemption_policy_never_is_respected():
    b = (ClusterBuilder().node("n0", cpu="4")
         .pod("low", cpu="3", priority=1, node="n0")
         .pod("polite", cpu="3", priority=100, preemptionPolicy="Never"))
    r = schedule(b)
    assert r.placements() == {"default/low": "n0", "default/polite": None}


def test_preemption_prefers_nodes_without_pdb_violations():
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "guard", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "guarded"}}}, "status": {"disruptionsAllowed": 0}}
    b = (ClusterBuilder().node("n0", cpu="4").node("n1", cpu="4")
         .pod("guarded", cpu="3", priority=1, node="n0", labels={"app": "guarded"})
         .pod("free", cpu="3", priority=1, node="n1")
         .pod("vip", cpu="3", priority=100).obj(pdb))
    r = schedule(b)
    assert r.placements()["default/vip"] == "n1"
    assert r.placements()["default/guarded"] == "n0"


def test_unschedulable_pod_retried_when_capacity_frees():
    """A pod that did not fit waits; when a victim leaves (preemption of another pod), it is retried."""
    b = (ClusterBuilder().node("n0", cpu="2")
         .pod("low", cpu="2", priority=1, node="n0")
         .pod("medium", cpu="2", priority=50, preemptionPolicy="Never")
         .pod("vip", cpu="1", priority=100))
    r = schedule(b)
    d = {p["name"]: p["phase"] for p in r.to_dict()["pods"]}
    # vip preempts low; medium (which could not preempt) then fits in what is left? it does not: 1 cpu left
    assert d == {"low": "Pending", "medium": "Pending", "vip": "Bound"}


def test_error_status_goes_to_backoff_and_is_retried_after_change():
    attempts = []

    class Flaky:
        @hookimpl
        def filter(self, pod, nodes, handle):
            attempts.append(handle.clock.now())
            if len(attempts) == 1:
                raise RuntimeError("transient")

    b = ClusterBuilder().node("n0").pod("p", cpu="1").pod("low", cpu="1", priority=-5, node="n0")
    r = schedule(b, plugins={"flaky": Flaky()})
    # the first attempt errored; nothing changed in the cluster, so the simulation does not spin on it
    assert r.placements()["default/p"] is None
    assert len(attempts) == 1


def test_nomination_is_dropped_when_the_pod_is_assumed():
    """kube deletes a pod's nomination on assume: while its binding is in flight it must not be counted
    twice (reserved and nominated), or later pods see the node fuller than it is."""
    seen = []

    class Watch:
        @hookimpl
        def reserve(self, pod, handle):
            seen.append((pod.name, {p.uid for p in handle.nominated_pods("n0")}))

    b = (ClusterBuilder().node("n0", cpu="4")
         .pod("low", cpu="3", priority=1, node="n0")
         .pod("vip", cpu="3", priority=100))
    r = schedule(b, plugins={"watch": Watch()})
    assert r.placements()["default/vip"] == "n0"
    vip_uid = r.cluster.pod_by_key("default/vip").uid
    # at vip's reserve, its own nomination is already gone
    assert ("vip", set()) in seen and all(vip_uid not in noms for name, noms in seen if name == "vip")
    assert not r.scheduler.nominator


def test_handle_run_pre_filters_then_filters():
    from koordfw import StateKey

    limit: StateKey[int] = StateKey("needs_pre/limit")

    class NeedsPre:
        @hookimpl
        def pre_filter(self, pod, state):
            state[limit] = int(pod.labels.get("max-index", "99"))

        @hookimpl
        def filter(self, pod, node, state):
            if limit not in state:
                raise KeyError("pre_filter state missing")
            return None if int(node.name[1:]) <= state[limit] else "index too high"

    results = {}

    class Probe:
        @hookimpl
        async def post_bind(self, pod, handle):
            from koordfw import CycleState

            st = CycleState()
            results["pre"] = (await handle.run_pre_filters(pod, st))[0].ok
            results["n0"] = (await handle.run_filters(pod, "n0", st)).ok
            results["n2"] = (await handle.run_filters(pod, "n2", st)).message

    schedule(ClusterBuilder().node("n0").node("n1").node("n2").pod("p", cpu="1", labels={"max-index": "1"}),
             plugins={"needs_pre": NeedsPre(), "probe": Probe()})
    assert results == {"pre": True, "n0": True, "n2": "index too high"}


async def test_every_node_removed_fails_the_pod_instead_of_crashing():
    from koordfw.core.clock import VirtualClock
    from koordfw.core.cluster import ClusterState
    from koordfw.core.model import make_node, make_pod
    from koordfw.core.schedule_one import Scheduler
    from koordfw.embed import SchedulerEvents
    from koordfw.engines.embedded import build_registry

    class Failures(SchedulerEvents):
        def __init__(self):
            self.reasons = {}

        async def pod_unschedulable(self, pod, status):
            self.reasons[pod.uid] = status.message

        async def bind(self, pod, node_name, annotations):
            cluster.confirm_bound(pod, node_name, annotations)

    cluster = ClusterState()
    cluster.add_node(make_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}))
    events = Failures()
    s = Scheduler(build_registry(None, autoload=False), cluster, VirtualClock(0.0), engine=events)
    cluster.remove_node("n1")
    p = make_pod("p", requests={"cpu": "1"})
    await s.add_pod(p)
    async with anyio.create_task_group() as tg:
        assert await s.schedule_next(tg)
    assert events.reasons[p.uid] == "no nodes available to schedule pods"
    cluster.add_node(make_node("n2", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}))
    s.activate([p.uid])
    async with anyio.create_task_group() as tg:
        await s.schedule_next(tg)
    assert cluster.pod(p.uid).node_name == "n2"


def test_pods_of_a_removed_node_stay_known_and_count_again_when_it_returns():
    from koordfw.core.cluster import ClusterState
    from koordfw.core.model import make_node, make_pod

    cluster = ClusterState()
    cluster.add_node(make_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}))
    p = make_pod("running", requests={"cpu": "3"}, node_name="n1")
    cluster.add_pod(p)
    cluster.remove_node("n1")
    assert cluster.node("n1") is None
    assert cluster.pod(p.uid).node_name == "n1" and cluster.pending_pods() == []
    cluster.add_node(make_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}))
    assert cluster.node("n1").requested["cpu"] == 3000
    assert [q.uid for q in cluster.pods_on("n1")] == [p.uid]
    cluster.remove_pod(p.uid)
    assert cluster.node("n1").requested.get("cpu", 0) == 0


def _nominated_pod(name: str, *, cpu: str, priority: int, node: str) -> dict:
    """A pending pod that arrives nominated (status.nominatedNodeName) and fits no node itself."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"priority": priority, "nodeSelector": {"disk": "none-has-it"},
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"nominatedNodeName": node}}


def test_a_pod_arriving_nominated_is_counted_on_that_node():
    """kube's queue.Add: a pending pod whose status names a nominated node is counted there for pods of
    lower or equal priority (after a scheduler restart its room stays promised)."""
    b = (ClusterBuilder().node("n0", cpu="4")
         .obj(_nominated_pod("vip", cpu="3", priority=100, node="n0"))
         .pod("small", cpu="2", priority=1))
    r = schedule(b)
    assert r.placements() == {"default/vip": None, "default/small": None}
    assert [p.name for p in r.scheduler.nominator.nominated_pods("n0")] == ["vip"]
    # without the nomination the small pod fits
    b = ClusterBuilder().node("n0", cpu="4").pod("small", cpu="2", priority=1)
    assert schedule(b).placements() == {"default/small": "n0"}


def test_preemption_clears_lower_nominations_on_the_chosen_node():
    b = (ClusterBuilder().node("n0", cpu="4")
         .pod("low", cpu="3", priority=1, node="n0")
         .obj(_nominated_pod("mid", cpu="3", priority=50, node="n0"))
         .pod("vip", cpu="3", priority=100))
    r = schedule(b)
    assert r.placements()["default/vip"] == "n0"
    mid = r.cluster.pod_by_key("default/mid")
    assert mid.nominated_node_name is None
    assert "mid" not in [p.name for p in r.scheduler.nominator.nominated_pods("n0")]
