"""Version skew by discovery against the real kube-apiserver v1.20.2, which serves PodDisruptionBudget and the
Eviction subresource only in ``policy/v1beta1``: koordfw finds that out (GET /apis/policy, /api/v1's pods/eviction),
its preemption honours a v1beta1 PDB whose status the real disruption controller computed, and its evictions go
through in v1beta1 (a policy/v1 body is a 400 there) with the budget's 429 honoured."""

from __future__ import annotations

from contextlib import suppress

import anyio
import pytest
from realkube_testkit import apply_pod, pod, wait_until

from koordfw import Eviction
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import ApiError
from koordfw.engines.kube.discovery import discovery_for, version_refused
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.engines.kube.evictor import NodeEvictor
from koordfw.testing.control_plane import ControlPlane, ControlPlaneError

PDB_V1BETA1 = "/apis/policy/v1beta1"


def pdb(name: str, ns: str, labels: dict, **spec) -> dict:
    return {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": labels}, **spec}}


def pdb_status(plane: ControlPlane, ns: str, name: str) -> dict:
    obj = plane.request("GET", f"{PDB_V1BETA1}/namespaces/{ns}/poddisruptionbudgets/{name}")
    st = dict(obj.get("status") or {})
    st["_current"] = st.get("observedGeneration", 0) >= obj["metadata"].get("generation", 1)
    return st


def run_and_ready(plane: ControlPlane, ns: str, name: str) -> None:
    """What the kubelet would write: the pod Running and Ready (the disruption controller counts only those)."""
    now = "2024-01-01T00:00:00Z"
    plane.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                  {"status": {"phase": "Running", "startTime": now, "conditions": [
                      {"type": "Ready", "status": "True", "lastTransitionTime": now},
                      {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}]}},
                  content_type="application/strategic-merge-patch+json")


async def test_discovery_finds_policy_v1beta1_and_nothing_of_policy_v1(kube_plane):
    with pytest.raises(ControlPlaneError) as e:
        kube_plane.request("GET", "/apis/policy/v1")
    assert e.value.status == 404  # type: ignore[attr-defined]
    async with kube_plane.client() as c:
        disc = discovery_for(c)
        assert await disc.served_versions("policy") == ("v1beta1",)
        assert await disc.version("policy") == "v1beta1"
        assert await disc.eviction_version() == "policy/v1beta1"
        version = await c.request("GET", "/version")
        assert (version["major"], version["minor"]) == ("1", "20")


async def test_a_policy_v1_eviction_is_the_400_that_discovery_recovers_from(kube_plane):
    kube_plane.add_node("vs-e0", cpu="2", memory="4Gi")
    kube_plane.create_namespace("vs-e0")
    apply_pod(kube_plane, pod("p", "vs-e0", nodeName="vs-e0"))
    async with kube_plane.client() as c:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "vs-e0"}}
        with pytest.raises(ApiError) as e:
            await c.request("POST", "/api/v1/namespaces/vs-e0/pods/p/eviction", body=body)
        assert e.value.status == 400 and version_refused(e.value)
        # a client that believed policy/v1 (learnt elsewhere) asks again and evicts in v1beta1
        uid = kube_plane.request("GET", "/api/v1/namespaces/vs-e0/pods/p")["metadata"]["uid"]
        disc = discovery_for(c)
        disc._eviction = "policy/v1"
        from koordfw.engines.kube.evictor import post_eviction

        await post_eviction(c, "vs-e0", "p", uid)
        assert disc._eviction == "policy/v1beta1"
    gone = kube_plane.request("GET", "/api/v1/namespaces/vs-e0/pods/p")
    assert gone["metadata"].get("deletionTimestamp")  # graceful: no kubelet confirms it


async def test_the_agent_evicts_in_v1beta1_and_honours_the_budgets_429(kube_plane):
    kube_plane.add_node("vs-e1", cpu="4", memory="8Gi")
    kube_plane.create_namespace("vs-evict")
    be = {"koordinator.sh/qosClass": "BE", "app": "spark"}
    for name in ("spark-0", "spark-1"):
        apply_pod(kube_plane, pod(name, "vs-evict", labels=be, nodeName="vs-e1", scheduler="default-scheduler"))
        run_and_ready(kube_plane, "vs-evict", name)
    kube_plane.apply(pdb("spark", "vs-evict", {"app": "spark"}, minAvailable=1))
    st = wait_until(lambda: (s := pdb_status(kube_plane, "vs-evict", "spark"))["_current"]
                    and s.get("currentHealthy") == 2 and s, what="the disruption controller's status")
    assert st["disruptionsAllowed"] == 1
    uids = {n: kube_plane.request("GET", f"/api/v1/namespaces/vs-evict/pods/{n}")["metadata"]["uid"]
            for n in ("spark-0", "spark-1")}
    async with kube_plane.client() as c:
        ev = NodeEvictor(c, "vs-e1")
        out = await ev([Eviction(uids["spark-0"], "vs-evict/spark-0", "memory", "eviction"),
                        Eviction(uids["spark-1"], "vs-evict/spark-1", "memory", "eviction")])
        assert [o.outcome for o in out] == ["evicted", "failed"], [o.detail for o in out]
        assert out[1].detail == "disruption budget"
        assert await discovery_for(c).eviction_version() == "policy/v1beta1"
    p0 = kube_plane.request("GET", "/api/v1/namespaces/vs-evict/pods/spark-0")
    p1 = kube_plane.request("GET", "/api/v1/namespaces/vs-evict/pods/spark-1")
    assert p0["metadata"].get("deletionTimestamp") and not p1["metadata"].get("deletionTimestamp")
    conds = {c["type"]: c for c in p1["status"].get("conditions") or []}
    assert conds["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"  # marked, then refused
    notes = [e["note"] for e in kube_plane.request("GET", "/apis/events.k8s.io/v1/namespaces/vs-evict/events")["items"]
             if e.get("reportingController") == "koordfw-agent"]
    assert any("disruption budget" in n for n in notes), notes


async def test_preemption_honours_a_v1beta1_pdb_the_disruption_controller_computed(kube_plane):
    """``guarded`` (priority 1) is covered by a v1beta1 PDB allowing no disruption, ``free`` (priority 10) is not:
    seeing the PDB, kube's victim selection (and koordfw's) reprieves ``guarded`` first and preempts ``free``; blind
    to it, it would preempt the lower ``guarded``."""
    classes = {"vs-low": 1, "vs-mid": 10, "vs-high": 1000}
    for name, value in classes.items():
        kube_plane.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": value})
    try:
        kube_plane.add_node("vs-p1", cpu="2", memory="4Gi")
        kube_plane.create_namespace("vs-pre")
        apply_pod(kube_plane, pod("guarded", "vs-pre", cpu="1", labels={"app": "g"}, nodeName="vs-p1",
                             scheduler="default-scheduler", priorityClassName="vs-low"))
        apply_pod(kube_plane, pod("free", "vs-pre", cpu="1", nodeName="vs-p1", scheduler="default-scheduler",
                             priorityClassName="vs-mid"))
        kube_plane.apply(pdb("guard", "vs-pre", {"app": "g"}, minAvailable=1))
        wait_until(lambda: pdb_status(kube_plane, "vs-pre", "guard")["_current"], what="the PDB's status")
        assert pdb_status(kube_plane, "vs-pre", "guard")["disruptionsAllowed"] == 0
        async with kube_plane.client() as c:
            eng = KubeSchedulerEngine(build_registry(None, autoload=False), c)
            async with anyio.create_task_group() as tg:
                tg.start_soon(eng.run)
                with anyio.fail_after(20):
                    await eng.started.wait()
                    refl = next(r for r in eng.reflectors if r.name == "PodDisruptionBudget")
                    assert refl.available and refl.path == f"{PDB_V1BETA1}/poddisruptionbudgets"
                    while not any(o["metadata"]["name"] == "guard" for o in eng.cluster.objects_of(
                            "PodDisruptionBudget").values()):
                        await anyio.sleep(0.05)
                    apply_pod(kube_plane, pod("high", "vs-pre", cpu="1", priorityClassName="vs-high"))
                    while not eng.preempted:
                        await anyio.sleep(0.05)
                eng.stop()
        free = kube_plane.request("GET", "/api/v1/namespaces/vs-pre/pods/free")
        guarded = kube_plane.request("GET", "/api/v1/namespaces/vs-pre/pods/guarded")
        assert free["metadata"].get("deletionTimestamp") and not guarded["metadata"].get("deletionTimestamp")
        assert "PodDisruptionBudget" not in eng.health()["absentKinds"]
    finally:
        for name in classes:
            with suppress(ControlPlaneError):
                kube_plane.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
