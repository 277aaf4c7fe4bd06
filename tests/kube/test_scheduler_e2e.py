"""The live scheduler end to end against the fake API server on loopback.

After every scenario the invariant holds: every pending pod of our scheduler is either bound exactly
once or carries PodScheduled=False with a reason: none lost, none bound twice.
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from kube_testkit import SCHED, node, pod, running, wait_for

from koordfw import hookimpl
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.engines.kube.leader import LeaderElector
from koordfw.testing.fake_apiserver import FakeApiServer


class CpusetAnnotator:
    """A pre_bind plugin writing an annotation, as cpuset/device/gang plugins do."""

    @hookimpl
    def pre_bind(self, pod, node):
        return {"scheduling.koordinator.sh/resource-status": f'{{"node":"{node.name}"}}'}


def ours(api: FakeApiServer) -> list[dict]:
    return [p for p in api.pods() if p["spec"].get("schedulerName") == SCHED]


def settled(api: FakeApiServer) -> bool:
    for p in ours(api):
        if p["metadata"].get("deletionTimestamp"):
            continue
        if p["spec"].get("nodeName"):
            continue
        conds = [c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"]
        if not conds or conds[0]["status"] != "False" or not conds[0].get("reason"):
            return False
    return True


def assert_none_lost_none_twice(api: FakeApiServer) -> None:
    counts = Counter(uid for uid, _ in api.bind_log)
    assert all(c == 1 for c in counts.values()), f"bound twice: {[u for u, c in counts.items() if c > 1]}"
    assert settled(api), "a pending pod is neither bound nor marked PodScheduled=False"
    for p in ours(api):
        if p["spec"].get("nodeName") and "prebound" not in p["metadata"].get("labels", {}):
            assert counts[p["metadata"]["uid"]] == 1


def all_bound(api: FakeApiServer, n: int) -> bool:
    return sum(1 for p in ours(api) if p["spec"].get("nodeName")) >= n


def scheduled_events(api: FakeApiServer) -> Counter:
    return Counter(e["regarding"]["uid"] for e in api.objects["events"].values() if e["reason"] == "Scheduled")


async def test_binds_with_pre_bind_annotations_and_events(api, client):
    reg = build_registry(None, autoload=False, plugins={"cpuset_annotator": CpusetAnnotator()})
    for i in range(3):
        api.create(node(f"n{i}"))
    for i in range(12):
        api.create(pod(f"p{i}"))
    api.create(pod("other", scheduler="default-scheduler"))
    api.create(pod("running", node_name="n0", cpu="1", labels={"prebound": "yes"}))
    eng = KubeSchedulerEngine(reg, client)
    async with running(eng):
        await wait_for(lambda: all_bound(api, 13))
        await wait_for(lambda: len(scheduled_events(api)) == 12)
    for p in ours(api):
        if p["metadata"]["name"] == "running":
            continue
        assert p["metadata"]["annotations"]["scheduling.koordinator.sh/resource-status"] == \
            f'{{"node":"{p["spec"]["nodeName"]}"}}'
        cond = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"][0]
        assert cond["status"] == "True"
    assert api.get("pods", "other", "default")["spec"].get("nodeName") is None
    ev = next(e for e in api.objects["events"].values() if e["reason"] == "Scheduled")
    assert ev["action"] == "Binding" and ev["type"] == "Normal" and ev["reportingController"] == SCHED
    assert ev["note"].startswith("Successfully assigned default/p")
    assert all(c == 1 for c in scheduled_events(api).values())
    assert_none_lost_none_twice(api)


async def test_accounting_sees_pods_of_other_schedulers(api, client, registry):
    api.create(node("n0", cpu="2"))
    api.create(pod("theirs", cpu="1500m", scheduler="default-scheduler", node_name="n0"))
    api.create(pod("mine", cpu="1"))
    eng = KubeSchedulerEngine(registry, client)
    async with running(eng):
        await wait_for(lambda: settled(api))
        await wait_for(lambda: eng.writer.status_patches >= 1)
    p = api.get("pods", "mine", "default")
    assert not p["spec"].get("nodeName")
    cond = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"][0]
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert "Insufficient cpu" in cond["message"] or "cpu" in cond["message"]
    evs = [e for e in api.objects["events"].values() if e["reason"] == "FailedScheduling"]
    assert len(evs) == 1 and evs[0]["type"] == "Warning" and evs[0]["action"] == "Scheduling"


async def test_unschedulable_pod_is_bound_when_room_appears(api, client, registry):
    api.create(node("n0", cpu="1"))
    api.create(pod("big", cpu="2"))
    eng = KubeSchedulerEngine(registry, client, flush_interval=0.1)
    async with running(eng):
        await wait_for(lambda: settled(api) and eng.writer.status_patches == 1)
        # our own status patch must not wake the pod into a hot loop
        await anyio.sleep(0.3)
        attempts = eng.attempt_counts[api.get("pods", "big", "default")["metadata"]["uid"]]
        assert attempts <= 2
        api.create(node("n1", cpu="4"))
        await wait_for(lambda: all_bound(api, 1))
    assert api.get("pods", "big", "default")["spec"]["nodeName"] == "n1"
    assert_none_lost_none_twice(api)


async def test_watch_dropped_mid_stream(api, client, registry):
    for i in range(4):
        api.create(node(f"n{i}"))
    eng = KubeSchedulerEngine(registry, client)
    dropped = 0
    async with running(eng):
        for batch in range(4):
            for i in range(10):
                api.create(pod(f"b{batch}-{i}"))
            await anyio.sleep(0.01)
            dropped += api.drop_watches()
            await anyio.sleep(0.4)  # the reflectors reconnect (after a short backoff)
        await wait_for(lambda: all_bound(api, 40))
    assert dropped >= 4
    pods_refl = next(r for r in eng.reflectors if r.name == "pods")
    assert pods_refl.relists == 1, "a dropped stream resumes from the last resourceVersion, no relist"
    assert pods_refl.watches >= 2
    assert_none_lost_none_twice(api)


@pytest.mark.parametrize("form", ["event", "http"])
async def test_410_during_a_burst(form, client, registry):
    async with FakeApiServer(expired_form=form, bookmark_interval=0.2) as api:
        c = KubeClient(api.url, qps=0)
        for i in range(4):
            api.create(node(f"n{i}", cpu="64"))
        for i in range(10):
            api.create(pod(f"pre-{i}"))
        api.create(pod("doomed", scheduler="default-scheduler", node_name="n0"))
        eng = KubeSchedulerEngine(registry, c)
        async with running(eng):
            await wait_for(lambda: all_bound(api, 10))
            # a burst of changes with the history compacted in the middle, and a delete the watch never shows
            for i in range(10):
                api.create(pod(f"burst-{i}"))
            if form == "http":
                api.drop_watches()  # the reflector is away while changes happen and the history is compacted
            for i in range(10, 15):
                api.create(pod(f"burst-{i}"))
            api.expire()
            api.delete("pods", "doomed", "default")
            for i in range(15, 30):
                api.create(pod(f"burst-{i}"))
            await wait_for(lambda: all_bound(api, 40))
            pods_refl = next(r for r in eng.reflectors if r.name == "pods")
            await wait_for(lambda: pods_refl.relists >= 2)
            # the relist synthesised the delete the watch missed
            assert all(p.name != "doomed" for p in eng.cluster.all_pods())
            uids_api = {p["metadata"]["uid"] for p in api.pods()}
            assert set(eng.cluster.pods) <= uids_api
        await c.close()
        assert_none_lost_none_twice(api)


async def test_409_reply_lost_counts_as_bound(api, client, registry):
    api.create(node("n0"))
    api.lose_binding_replies = 2
    for i in range(3):
        api.create(pod(f"p{i}"))
    eng = KubeSchedulerEngine(registry, client)
    async with running(eng):
        await wait_for(lambda: all_bound(api, 3))
        await wait_for(lambda: len(scheduled_events(api)) == 3)
    assert eng.binder.conflicts_resolved == 2
    assert all(c == 1 for c in scheduled_events(api).values())
    assert_none_lost_none_twice(api)


def _race(api: FakeApiServer, eng: KubeSchedulerEngine, action):
    """Run ``action(pod)`` against the API just before our first binding request for "victim" goes out."""
    real = eng.binder
    done = []

    async def binder(p, node_name, annotations):
        if p.name == "victim" and not done:
            done.append(p.uid)
            action(p)
        return await real(p, node_name, annotations)

    eng.binder = binder


@pytest.mark.parametrize("case", ["bound_elsewhere", "recreated", "terminating", "deleted"])
async def test_409_and_404_drop_the_pod(case, api, client, registry):
    api.create(node("n0"))
    api.create(node("n1"))
    eng = KubeSchedulerEngine(registry, client)

    def act(p):
        if case == "bound_elsewhere":
            other = "n1" if eng.cluster.pod(p.uid).node_name == "n0" else "n0"
            api.update("pods", "victim", lambda o: o["spec"].__setitem__("nodeName", other), "default")
        elif case == "recreated":
            api.delete("pods", "victim", "default")
            api.create(pod("victim", scheduler="default-scheduler"))
        elif case == "terminating":
            api.mark_terminating("victim")
        else:
            api.delete("pods", "victim", "default")

    _race(api, eng, act)
    api.create(pod("victim"))
    api.create(pod("bystander"))
    async with running(eng):
        await wait_for(lambda: api.get("pods", "bystander", "default")["spec"].get("nodeName"))
        await wait_for(lambda: eng.scheduler.in_flight_binds == 0 and not eng.scheduler.queue.infos)
        await anyio.sleep(0.1)
        assert not eng.scheduler.queue.infos, "the dropped pod must not be requeued"
    victim = api.get("pods", "victim", "default")
    assert len(api.bind_log) == 1  # the bystander; "elsewhere" was bound by someone else
    if victim is not None:
        conds = [c for c in victim.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"
                 and c["status"] == "False"]
        assert not conds, "a dropped pod gets no PodScheduled=False"
    if case == "bound_elsewhere":
        # the cache accounts the pod where it really is, once
        cp = eng.cluster.pod(victim["metadata"]["uid"])
        assert cp is not None and cp.node_name == victim["spec"]["nodeName"]
        assert sum(1 for v in eng.cluster.nodes for p in v.pods if p.name == "victim") == 1
    assert eng.writer.status_patches == 0
    assert Counter(u for u, _ in api.bind_log).most_common(1)[0][1] == 1


async def test_409_gated_waits_for_gates_to_go(api, client, registry):
    api.create(node("n0"))
    eng = KubeSchedulerEngine(registry, client)
    _race(api, eng, lambda p: api.update(
        "pods", "victim", lambda o: o["spec"].__setitem__("schedulingGates", [{"name": "g"}]), "default"))
    api.create(pod("victim"))
    async with running(eng):
        await wait_for(lambda: eng.scheduler.in_flight_binds == 0 and "victim" in
                       {o["metadata"]["name"] for o in eng.feeder.gated.values()})
        assert not api.bind_log
        api.update("pods", "victim", lambda o: o["spec"].pop("schedulingGates"), "default")
        await wait_for(lambda: all_bound(api, 1))
    assert_none_lost_none_twice(api)


async def test_pods_gated_from_the_start_are_not_scheduled(api, client, registry):
    api.create(node("n0"))
    api.create(pod("gated", schedulingGates=[{"name": "wait"}]))
    eng = KubeSchedulerEngine(registry, client)
    async with running(eng):
        await anyio.sleep(0.2)
        assert not api.bind_log
        api.update("pods", "gated", lambda o: o["spec"].pop("schedulingGates"), "default")
        await wait_for(lambda: all_bound(api, 1))


async def test_api_returning_500s_for_a_while(api, client, registry):
    for i in range(3):
        api.create(node(f"n{i}"))
    eng = KubeSchedulerEngine(registry, client)
    async with running(eng):
        api.fail(500, seconds=1.0)
        for i in range(20):
            api.create(pod(f"p{i}"))
        api.drop_watches()  # the re-watch meets the 500s too
        await wait_for(lambda: all_bound(api, 20), timeout=30)
        await wait_for(lambda: settled(api))
    assert any(r.errors for r in eng.reflectors)
    assert_none_lost_none_twice(api)


async def test_scheduler_restarted_half_way(api, registry):
    for i in range(4):
        api.create(node(f"n{i}"))
    for i in range(60):
        api.create(pod(f"p{i}"))
    c1 = KubeClient(api.url, qps=40, burst=1)
    eng1 = KubeSchedulerEngine(registry, c1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(eng1.run)
        await wait_for(lambda: len(api.bind_log) >= 15)
        tg.cancel_scope.cancel()  # a crash: nothing finishes gracefully
    await c1.close()
    assert len(api.bind_log) < 60
    c2 = KubeClient(api.url, qps=0)
    eng2 = KubeSchedulerEngine(build_registry(None, autoload=False), c2)
    async with running(eng2):
        await wait_for(lambda: all_bound(api, 60))
    await c2.close()
    assert len(api.bind_log) == 60
    assert_none_lost_none_twice(api)


async def test_graceful_stop_finishes_in_flight_binds(api, registry):
    api.create(node("n0", cpu="64"))
    for i in range(30):
        api.create(pod(f"p{i}"))
    api.slow(0.05, path="/binding")
    c = KubeClient(api.url, qps=0)
    eng = KubeSchedulerEngine(registry, c)
    async with anyio.create_task_group() as tg:
        tg.start_soon(eng.run)
        await wait_for(lambda: len(api.bind_log) >= 3)
        eng.stop()
    # run() returned: every binding it started has finished; none half-done
    assert eng.scheduler.in_flight_binds == 0
    assert len(api.bind_log) == eng.binder.bound
    await c.close()


async def test_rate_limit_caps_binds_per_second(api, registry):
    api.create(node("n0", cpu="64"))
    for i in range(40):
        api.create(pod(f"p{i}"))
    c = KubeClient(api.url, qps=20, burst=1)
    eng = KubeSchedulerEngine(registry, c)
    async with anyio.create_task_group() as tg:
        tg.start_soon(eng.run)
        await eng.started.wait()
        n0, t0 = len(api.bind_log), anyio.current_time()
        await wait_for(lambda: len(api.bind_log) >= n0 + 20)
        dt = anyio.current_time() - t0
        eng.stop()
    await c.close()
    assert dt >= 0.9, f"20 binds at 20 QPS took {dt:.2f}s"


async def test_leader_election_only_the_leader_binds(api, registry):
    api.create(node("n0", cpu="64"))
    c1, c2 = KubeClient(api.url, qps=0), KubeClient(api.url, qps=0)
    kw = dict(namespace="kube-system", name=SCHED, lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)
    e1 = KubeSchedulerEngine(registry, c1, identity="a", leader_elector=LeaderElector(c1, identity="a", **kw))
    e2 = KubeSchedulerEngine(build_registry(None, autoload=False), c2, identity="b",
                             leader_elector=LeaderElector(c2, identity="b", **kw))
    async with anyio.create_task_group() as tg:
        tg.start_soon(e1.run)
        await e1.started.wait()
        tg.start_soon(e2.run)
        await anyio.sleep(0.5)
        assert not e2.started.is_set()
        for i in range(5):
            api.create(pod(f"p{i}"))
        # the fake records the binding before the binder reads the reply: wait for both
        await wait_for(lambda: all_bound(api, 5) and e1.binder.bound == 5)
        assert e2.binder.bound == 0
        e1.stop()  # releases the lease: the standby takes over quickly
        await wait_for(lambda: e2.started.is_set(), timeout=5)
        for i in range(5, 8):
            api.create(pod(f"p{i}"))
        await wait_for(lambda: all_bound(api, 8) and e2.binder.bound == 3)
        assert e1.binder.bound == 5
        e2.stop()
    lease = api.get("leases", SCHED, "kube-system")
    assert lease["spec"]["leaseTransitions"] >= 1
    await c1.close()
    await c2.close()
    assert_none_lost_none_twice(api)
