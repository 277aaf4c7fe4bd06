"""Job-level preemption for gangs (issue 34 point 2) against the real kube-apiserver v1.20.2: a gang's one
preemption marks (DisruptionTarget) and deletes the victims of the whole job and nominates every member
(status.nominatedNodeName). With no kubelet the victims stay terminating, so the job waits for them: no second
preemption evicts the other node's pods (Koordinator's "terminating pod on the nominated node" rule). Once the
victims are gone (the test confirms their deletion as a kubelet would), the gang binds whole where it was
nominated."""

from __future__ import annotations

from contextlib import suppress

import anyio
from realkube_testkit import apply_pod, pod

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.control_plane import ControlPlane, ControlPlaneError

NS = "gp"
GANG = "gang.scheduling.koordinator.sh"
PROFILE = {"plugins": {"postFilter": {"enabled": ["gang", "default_preemption"]}},
           "pluginConfig": {"gang": {"enablePreemption": True}}}
CLASSES = {"gp-low": 1, "gp-high": 1000}


def get(plane: ControlPlane, name: str) -> dict:
    return plane.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}")


async def test_gang_preempts_once_waits_for_its_victims_and_binds_whole(kube_plane):
    for name, value in CLASSES.items():
        kube_plane.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": value})
    try:
        for n in ("gp-n0", "gp-n1"):
            kube_plane.add_node(n, cpu="2", memory="4Gi")
        kube_plane.create_namespace(NS)
        for n in ("gp-n0", "gp-n1"):
            for k in ("a", "b"):
                apply_pod(kube_plane, pod(f"low-{n}-{k}", NS, cpu="1", nodeName=n, scheduler="default-scheduler",
                                          priorityClassName="gp-low"))
        ann = {f"{GANG}/name": "train", f"{GANG}/min-available": "2", f"{GANG}/waiting-time": "30s"}
        victims = ("low-gp-n0-a", "low-gp-n0-b")
        async with kube_plane.client() as c:
            registry = build_registry(PROFILE, autoload=True, only={"gang"})
            eng = KubeSchedulerEngine(registry, c, flush_interval=0.1)
            async with anyio.create_task_group() as tg:
                tg.start_soon(eng.run)
                with anyio.fail_after(60):
                    await eng.started.wait()
                    for i in range(2):
                        apply_pod(kube_plane, pod(f"train-{i}", NS, cpu="1", annotations=ann,
                                                  priorityClassName="gp-high"))
                    while eng.preempted < 2:
                        await anyio.sleep(0.05)
                    # both members nominated to gp-n0 (cost tie, first by name), its two pods terminating
                    while not all((get(kube_plane, f"train-{i}").get("status") or {}).get("nominatedNodeName")
                                  == "gp-n0" for i in range(2)):
                        await anyio.sleep(0.05)
                    for v in victims:
                        obj = get(kube_plane, v)
                        assert obj["metadata"].get("deletionTimestamp")
                        conds = {x["type"]: x for x in (obj.get("status") or {}).get("conditions") or []}
                        assert conds["DisruptionTarget"]["reason"] == "PreemptionByScheduler"
                    # the job waits for its victims: later attempts preempt nothing more
                    await anyio.sleep(3)
                    assert eng.preempted == 2
                    for k in ("a", "b"):
                        assert not get(kube_plane, f"low-gp-n1-{k}")["metadata"].get("deletionTimestamp")
                    assert not any(get(kube_plane, f"train-{i}")["spec"].get("nodeName") for i in range(2))
                    reasons = [r["reason"] for r in registry.plugin("gang")._jobs.history]
                    assert reasons[0] == "preempt success" and len(reasons) > 1
                    assert set(reasons[1:]) == {"not eligible due to terminating pod on the nominated node."}
                    # what the kubelet would do: confirm the deletions; the gang then binds where it was nominated
                    for v in victims:
                        kube_plane.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{v}",
                                           {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
                    while not all(get(kube_plane, f"train-{i}")["spec"].get("nodeName") for i in range(2)):
                        await anyio.sleep(0.05)
                eng.stop()
        assert {get(kube_plane, f"train-{i}")["spec"]["nodeName"] for i in range(2)} == {"gp-n0"}
        assert eng.preempted == 2
    finally:
        for name in CLASSES:
            with suppress(ControlPlaneError):
                kube_plane.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
