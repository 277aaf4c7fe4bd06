"""Network-topology-aware gangs (issue 34 point 5) on the real kube-apiserver v1.20.2: deploy/'s
ClusterNetworkTopology CRD and the object ``default`` (spine, block, node), five nodes labelled with their spine
and block (blocks of 2 and 3 nodes), each member asking for a whole node. A PodGroup gang of 3 that must gather
in one block binds whole inside b2, the only block that holds it; a gang of 4 (more than any block holds) stays
pending whole, its pods PodScheduled=False with Koordinator's ``no candidate topology nodes can accommodate job``
message and its PodGroup's condition naming ``NetworkTopology``.

Every wait is for a condition, and nothing assumes which gang or member is tried first: the offer slots in the
refusal depend on that order (b2's are 0 once the first gang is placed), so only what does not is asserted."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import anyio
from network_topology_testkit import BLOCK, CNT, INDEX, MUST_GATHER_BLOCK, PG_LABEL, SPEC, SPINE
from realkube_testkit import apply_pod, pod, pods

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.control_plane import ControlPlaneError

NS = "nt"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CRD = "clusternetworktopologies.scheduling.koordinator.sh"
CNT_PATH = "/apis/scheduling.koordinator.sh/v1alpha1/clusternetworktopologies"
PG_PATH = f"/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{NS}/podgroups"
#: node -> block, all under spine s1
LAYOUT = {"nt-n0": "b1", "nt-n1": "b1", "nt-n2": "b2", "nt-n3": "b2", "nt-n4": "b2"}


def scheduled_condition(p: dict) -> dict | None:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def refused_by_topology(p: dict) -> bool:
    c = scheduled_condition(p)
    return (c is not None and c["status"] == "False"
            and "no candidate topology nodes can accommodate job" in c.get("message", ""))


async def test_a_must_gather_gang_binds_in_one_block_and_one_too_big_for_any_block_waits(kube_plane):
    kube_plane.apply_file(DEPLOY / "00-crd-podgroup.yaml")
    kube_plane.apply_file(DEPLOY / "00-crd-clusternetworktopology.yaml")
    kube_plane.wait_established(CRD)
    kube_plane.apply(CNT)
    try:
        for name, block in LAYOUT.items():
            kube_plane.add_node(name, cpu="4", memory="8Gi", labels={SPINE: "s1", BLOCK: block})
        kube_plane.create_namespace(NS)
        for job, size in (("train", 3), ("big", 4)):
            kube_plane.apply({"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
                              "metadata": {"name": job, "namespace": NS, "annotations": {SPEC: MUST_GATHER_BLOCK}},
                              "spec": {"minMember": size, "scheduleTimeoutSeconds": 30}})
            for i in range(size):
                apply_pod(kube_plane, pod(f"{job}-{i}", NS, cpu="4", memory="1Gi", labels={PG_LABEL: job},
                                          annotations={INDEX: str(i)}))

        def of(job: str) -> list[dict]:
            return [p for p in pods(kube_plane, NS) if p["metadata"]["name"].startswith(f"{job}-")]

        def big_condition() -> dict | None:
            conds = (kube_plane.request("GET", f"{PG_PATH}/big").get("status") or {}).get("conditions") or []
            return conds[0] if conds else None

        def settled() -> tuple[list[dict], list[dict], dict] | None:
            train, big = of("train"), of("big")
            if len(train) != 3 or not all(p["spec"].get("nodeName") for p in train):
                return None
            if len(big) != 4 or not all(refused_by_topology(p) for p in big):
                return None
            cond = big_condition()
            if cond is None or cond.get("reason") != "NetworkTopology":
                return None
            return train, big, cond

        async with kube_plane.client() as c:
            registry = build_registry({"disable": ["default_preemption"]}, autoload=True,
                                      only={"gang", "network_topology"})
            eng = KubeSchedulerEngine(registry, c, flush_interval=0.1)
            async with anyio.create_task_group() as tg:
                tg.start_soon(eng.run)
                with anyio.fail_after(90):
                    await eng.started.wait()
                    while (found := await anyio.to_thread.run_sync(settled)) is None:
                        await anyio.sleep(0.2)
                    await anyio.sleep(1)  # the big gang stays whole-pending
                    still_pending = not any(p["spec"].get("nodeName") for p in of("big"))
                eng.stop()
    finally:
        with suppress(ControlPlaneError):
            kube_plane.request("DELETE", f"{CNT_PATH}/default")
    train, big, cond = found
    placed = {p["spec"]["nodeName"] for p in train}
    assert len(placed) == 3 and {LAYOUT[n] for n in placed} == {"b2"}, placed
    assert still_pending
    for p in big:
        msg = scheduled_condition(p)["message"]
        assert "desiredOfferSlot: 4, " in msg, msg
        assert "topology topologyNode blockLayer/b1: " in msg and "topology topologyNode blockLayer/b2: " in msg, msg
    assert cond["type"] == "Unschedulable" and cond["status"] == "True", cond
    assert cond["message"].startswith(f"GangGroup {NS}/big: 0/4 members bound; NetworkTopology: pod {NS}/big-"), cond
