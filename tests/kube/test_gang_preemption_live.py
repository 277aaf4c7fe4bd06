"""Job-level preemption for gangs (issue 34 point 2) on the live scheduler against the fake API server:
the victims go through the API (DisruptionTarget, DELETE) for the whole job at once and the job binds
whole on the room it was nominated to; a job that preemption cannot place whole deletes nothing; a pod
without a gang keeps kube's pod-level preemption."""

from __future__ import annotations

from kube_testkit import SCHED, node, pod, running, wait_for

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.fake_apiserver import FakeApiServer

GANG = "gang.scheduling.koordinator.sh"
BIND_GROUP = "internal.scheduling.koordinator.sh/bind-gang-group-id"
PROFILE = {"plugins": {"postFilter": {"enabled": ["gang", "default_preemption"]}},
           "pluginConfig": {"gang": {"enablePreemption": True}}}


def registry():
    return build_registry(PROFILE, autoload=True, only={"gang"})


def member(name: str, gang: str, n: int, cpu: str) -> dict:
    return pod(name, cpu=cpu, priority=1000,
               annotations={f"{GANG}/name": gang, f"{GANG}/min-available": str(n), f"{GANG}/waiting-time": "30s"})


def low_pods(api: FakeApiServer) -> None:
    for n in ("n0", "n1"):
        api.create(node(n, cpu="4"))
        for k in ("a", "b"):
            api.create(pod(f"low-{n}-{k}", cpu="2", node_name=n, priority=1, scheduler="other"))


def deleted(api: FakeApiServer) -> list[str]:
    return sorted(path.rsplit("/", 1)[1] for m, path in api.requests if m == "DELETE" and "/pods/" in path)


async def test_a_gang_preempts_as_one_job_and_binds_whole(api, client):
    low_pods(api)
    for i in range(2):
        api.create(member(f"train-{i}", "train", 2, cpu="2"))
    eng = KubeSchedulerEngine(registry(), client, flush_interval=0.1)
    async with running(eng):
        def both_bound() -> bool:
            return all((api.get("pods", f"train-{i}", "default") or {}).get("spec", {}).get("nodeName")
                       for i in range(2))
        await wait_for(both_bound, what="the gang bound")
    # both members on n0 (cost tie, first by name), whose two pods were the victims: marked, then deleted
    assert deleted(api) == ["low-n0-a", "low-n0-b"]
    for v in ("low-n0-a", "low-n0-b"):
        assert ("PATCH", f"/api/v1/namespaces/default/pods/{v}/status") in api.requests
        assert api.get("pods", v, "default") is None
    for i in range(2):
        p = api.get("pods", f"train-{i}", "default")
        assert p["spec"]["nodeName"] == "n0"
        assert p["metadata"]["annotations"][BIND_GROUP] == "default/train"
    assert api.get("pods", "low-n1-a", "default")["spec"]["nodeName"] == "n1"
    assert eng.preempted == 2


async def test_a_job_that_cannot_be_placed_whole_deletes_nothing(api, client):
    low_pods(api)
    for i in range(3):  # three 4-CPU members on two 4-CPU nodes: never placeable whole
        api.create(member(f"sweep-{i}", "sweep", 3, cpu="4"))
    eng = KubeSchedulerEngine(registry(), client, flush_interval=0.1)
    async with running(eng):
        def all_rejected() -> bool:
            pods = [api.get("pods", f"sweep-{i}", "default") for i in range(3)]
            return all(any(c["type"] == "PodScheduled" and c["status"] == "False"
                           for c in (p.get("status") or {}).get("conditions") or []) for p in pods)
        await wait_for(all_rejected, what="the sweep rejected")
    assert deleted(api) == []
    assert eng.preempted == 0
    assert all(not api.get("pods", f"sweep-{i}", "default")["spec"].get("nodeName") for i in range(3))


async def test_a_pod_without_a_gang_keeps_pod_level_preemption(api, client):
    low_pods(api)
    api.create(pod("solo", cpu="4", priority=1000))
    eng = KubeSchedulerEngine(registry(), client, flush_interval=0.1)
    async with running(eng):
        await wait_for(lambda: (api.get("pods", "solo", "default") or {}).get("spec", {}).get("nodeName"),
                       what="solo bound")
    assert deleted(api) == ["low-n0-a", "low-n0-b"] or deleted(api) == ["low-n1-a", "low-n1-b"]
    assert api.get("pods", "solo", "default")["spec"]["schedulerName"] == SCHED


async def test_a_victim_that_cannot_be_deleted_nominates_nobody_and_the_next_attempt_finishes(api, client):
    """Koordinator's "prepare candidates error": one victim's DELETE fails, so no member is nominated;
    the next attempt (the other victim is gone by then) preempts what is left and the gang binds."""
    low_pods(api)
    api.fail(500, method="DELETE", path="/pods/low-n0-b", count=1)
    for i in range(2):
        api.create(member(f"train-{i}", "train", 2, cpu="2"))
    reg = registry()
    eng = KubeSchedulerEngine(reg, client, flush_interval=0.1)
    async with running(eng):
        await wait_for(lambda: all((api.get("pods", f"train-{i}", "default") or {}).get("spec", {}).get("nodeName")
                                   for i in range(2)), what="the gang bound")
    history = reg.plugin("gang")._jobs.history
    assert history[0]["reason"] == "prepare candidates error"
    assert history[0]["message"] == "prepare candidates error: could not evict default/low-n0-b"
    assert history[-1]["reason"] == "preempt success"
    assert {api.get("pods", f"train-{i}", "default")["spec"]["nodeName"] for i in range(2)} == {"n0"}
    assert api.get("pods", "low-n1-a", "default") is not None and api.get("pods", "low-n1-b", "default") is not None
