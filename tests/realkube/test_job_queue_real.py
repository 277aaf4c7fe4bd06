"""The job queue over elastic quota (issue 34 point 3) on the real kube-apiserver v1.20.2: two ElasticQuotas; of two
PodGroup jobs of one queue, the one that fits its quota binds whole, the other waits whole (no pod bound, each pod
PodScheduled=False naming its queue, its PodGroup's ``status.queueUnit`` Enqueued: written with the object, the
PodGroup CRD having no status subresource, and kept by its schema) and binds whole once the first job's pods are
deleted."""

from __future__ import annotations

from pathlib import Path

import anyio
from job_queue_live_testkit import CONFIG, quota
from realkube_testkit import bound, pod, pods, wait_until

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine

NS = "team-a"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
GROUP = "/apis/scheduling.sigs.k8s.io/v1alpha1"


async def test_a_job_binds_whole_or_waits_whole_in_its_queue(kube_plane):
    kube_plane.apply_file(DEPLOY / "00-crd-podgroup.yaml")
    kube_plane.apply_file(DEPLOY / "00-crd-elasticquota.yaml")
    kube_plane.add_node("jq-n0", cpu="16", memory="32Gi")
    for ns in ("team-a", "team-b"):
        kube_plane.create_namespace(ns)
        kube_plane.apply(quota(ns, 3))
    for job in ("a1", "a2"):  # 2 + 2 cores > team-a's 3: a2 waits whole behind a1
        kube_plane.apply({"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
                          "metadata": {"name": job, "namespace": NS},
                          "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30}})
        for i in range(2):
            wait_until(lambda job=job, i=i: kube_plane.apply(pod(f"{job}-{i}", NS, cpu="1", labels={
                "pod-group.scheduling.sigs.k8s.io": job})) is not None, what=f"{job}-{i} created")

    def unit(job: str) -> dict:
        pg = kube_plane.request("GET", f"{GROUP}/namespaces/{NS}/podgroups/{job}")
        return (pg.get("status") or {}).get("queueUnit") or {}

    def held() -> bool:
        conds = [next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"),
                      None) for p in pods(kube_plane, NS) if p["metadata"]["name"].startswith("a2-")]
        return len(conds) == 2 and all(c is not None and c["status"] == "False"
                                       and "waits in queue team-a" in c.get("message", "") for c in conds)

    async with kube_plane.client() as c:
        registry = build_registry(CONFIG, autoload=True, only={"elastic_quota", "gang", "job_queue"})
        eng = KubeSchedulerEngine(registry, c, flush_interval=0.1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(eng.run)
            with anyio.fail_after(60):
                await eng.started.wait()
                while not (set(bound(kube_plane, NS)) == {"a1-0", "a1-1"} and held()
                           and unit("a2").get("phase") == "Enqueued"):
                    await anyio.sleep(0.2)
                await anyio.sleep(1)  # a2 stays whole-pending
                assert set(bound(kube_plane, NS)) == {"a1-0", "a1-1"}
                for p in pods(kube_plane, NS):
                    if p["metadata"]["name"].startswith("a2-"):
                        c0 = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
                        assert c0["reason"] == "Unschedulable"
                        assert c0["message"].startswith("job team-a/a2 waits in queue team-a (position 1): quota team-a")
                u = unit("a2")
                assert u["queue"] == NS and u["position"] == 1 and u["message"].startswith("quota team-a: cpu ")
                while unit("a1").get("phase") != "Running":  # written once its last member bound (post_bind)
                    await anyio.sleep(0.2)
                for i in range(2):
                    kube_plane.request("DELETE", f"/api/v1/namespaces/{NS}/pods/a1-{i}",
                                       {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
                while set(bound(kube_plane, NS)) != {"a2-0", "a2-1"}:
                    await anyio.sleep(0.2)
                while unit("a2").get("phase") != "Running":
                    await anyio.sleep(0.2)
            eng.stop()
