"""The job queue over elastic quota (issue 34 point 3) on the live scheduler against the fake API server: of two
PodGroup jobs of one queue, the one that fits its quota binds whole; the other waits whole (no pod bound, each
pod PodScheduled=False naming its queue, its PodGroup's ``status.queueUnit`` Enqueued, the first's admitted,
written with the object since the PodGroup has no status subresource) and binds whole once the first job's pods
are deleted."""

from __future__ import annotations

import anyio
from job_queue_live_testkit import CONFIG, quota
from kube_testkit import SCHED, node, pod, running, wait_for

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.fake_apiserver import FakeApiServer

PG_LABEL = "pod-group.scheduling.sigs.k8s.io"


def pod_group(name: str, ns: str, members: int) -> dict:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"minMember": members, "scheduleTimeoutSeconds": 30}}


def job(api: FakeApiServer, name: str, ns: str, members: int, cpu: str = "1") -> None:
    api.create(pod_group(name, ns, members))
    for i in range(members):
        api.create(pod(f"{name}-{i}", cpu=cpu, ns=ns, labels={PG_LABEL: name}))


def ours(api: FakeApiServer, ns: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in api.pods()
            if p["spec"].get("schedulerName") == SCHED and p["metadata"]["namespace"] == ns}


def bound(api: FakeApiServer, ns: str, prefix: str) -> int:
    return sum(1 for n, p in ours(api, ns).items() if n.startswith(prefix) and p["spec"].get("nodeName"))


def condition(p: dict) -> dict | None:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def queue_unit(api: FakeApiServer, name: str, ns: str) -> dict:
    pg = api.get("podgroups", name, ns) or {}
    return (pg.get("status") or {}).get("queueUnit") or {}


async def test_a_job_binds_whole_or_waits_whole_in_its_queue(api, client):
    api.create(node("n0", cpu="16"))
    api.create(quota("team-a", 3))
    api.create(quota("team-b", 3))
    job(api, "a1", "team-a", 2)
    job(api, "a2", "team-a", 2)  # 2 + 2 cores > team-a's 3: waits whole behind a1
    eng = KubeSchedulerEngine(build_registry(CONFIG, autoload=True, only={"elastic_quota", "gang", "job_queue"}),
                              client, flush_interval=0.1)
    async with running(eng):
        def a2_held() -> bool:
            conds = [condition(ours(api, "team-a")[f"a2-{i}"]) for i in range(2)]
            return all(c is not None and c["status"] == "False" and "waits in queue team-a" in c["message"]
                       for c in conds)
        await wait_for(lambda: bound(api, "team-a", "a1-") == 2 and a2_held())
        await wait_for(lambda: queue_unit(api, "a2", "team-a").get("phase") == "Enqueued"
                       and queue_unit(api, "a1", "team-a").get("phase") == "Running")
        await anyio.sleep(0.5)  # a2 stays whole-pending: none of its pods is bound meanwhile
        assert bound(api, "team-a", "a2-") == 0
        for i in range(2):
            c = condition(ours(api, "team-a")[f"a2-{i}"])
            assert c["reason"] == "Unschedulable"
            assert c["message"].startswith("job team-a/a2 waits in queue team-a (position 1): quota team-a: cpu ")
        unit = queue_unit(api, "a2", "team-a")
        assert unit["queue"] == "team-a" and unit["position"] == 1 and "quota team-a" in unit["message"]
        assert (api.get("podgroups", "a2", "team-a")["spec"]["minMember"]) == 2  # the object kept whole
        for i in range(2):
            api.delete("pods", f"a1-{i}", "team-a")
        await wait_for(lambda: bound(api, "team-a", "a2-") == 2)
        await wait_for(lambda: queue_unit(api, "a2", "team-a").get("phase") == "Running")
    assert not eng.scheduler.waiting_pods
