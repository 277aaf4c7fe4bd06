"""Network-topology-aware gangs (issue 34 point 5) on the live scheduler against the fake API server: the
ClusterNetworkTopology ``default`` (spine, block, node), five whole-node-sized nodes in blocks of 2 and 3, a
PodGroup gang of 3 that must gather in one block binds whole inside b2 (the only block that holds it), and a
gang of 4 (more than any block holds) stays pending whole with Koordinator's ``no candidate topology nodes``
message on its pods and ``NetworkTopology`` as the binding constraint on its PodGroup.

Nothing here depends on which gang is tried first: the offer slots in the refusal change with the order, so
only the parts that do not are asserted."""

from __future__ import annotations

import anyio
from kube_testkit import SCHED, node, pod, running, wait_for
from network_topology_testkit import BLOCK, CNT, INDEX, MUST_GATHER_BLOCK, PG_LABEL, SPEC, SPINE

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.fake_apiserver import FakeApiServer

NS = "ai"
#: node -> block; one spine
LAYOUT = {"t0": "b1", "t1": "b1", "t2": "b2", "t3": "b2", "t4": "b2"}


def job(api: FakeApiServer, name: str, members: int) -> None:
    api.create({"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": NS, "annotations": {SPEC: MUST_GATHER_BLOCK}},
                "spec": {"minMember": members, "scheduleTimeoutSeconds": 30}})
    for i in range(members):  # each member takes a whole node
        api.create(pod(f"{name}-{i}", cpu="4", ns=NS, labels={PG_LABEL: name}, annotations={INDEX: str(i)}))


def members(api: FakeApiServer, prefix: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in api.pods()
            if p["spec"].get("schedulerName") == SCHED and p["metadata"]["namespace"] == NS
            and p["metadata"]["name"].startswith(prefix)}


def scheduled_condition(p: dict) -> dict | None:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def refused_by_topology(p: dict) -> bool:
    c = scheduled_condition(p)
    return c is not None and c["status"] == "False" and "no candidate topology nodes can accommodate job" in c["message"]


def pod_group_condition(api: FakeApiServer, name: str) -> dict | None:
    conds = ((api.get("podgroups", name, NS) or {}).get("status") or {}).get("conditions") or []
    return conds[0] if conds else None


async def test_a_must_gather_gang_binds_in_one_block_and_one_too_big_for_any_block_waits(api, client):
    api.create(CNT)
    for name, block in LAYOUT.items():
        api.create(node(name, cpu="4", labels={SPINE: "s1", BLOCK: block}))
    job(api, "train", 3)
    job(api, "big", 4)
    registry = build_registry({"disable": ["default_preemption"]}, autoload=True, only={"gang", "network_topology"})
    eng = KubeSchedulerEngine(registry, client, flush_interval=0.1)
    async with running(eng):
        await wait_for(lambda: all(p["spec"].get("nodeName") for p in members(api, "train-").values()))
        await wait_for(lambda: len(big := members(api, "big-")) == 4 and all(refused_by_topology(p)
                                                                           for p in big.values()))
        await wait_for(lambda: (c := pod_group_condition(api, "big")) is not None and c["reason"] == "NetworkTopology")
        await anyio.sleep(0.5)  # the big gang stays whole-pending
        assert not any(p["spec"].get("nodeName") for p in members(api, "big-").values())
    placed = {p["spec"]["nodeName"] for p in members(api, "train-").values()}
    assert len(placed) == 3 and {LAYOUT[n] for n in placed} == {"b2"}
    for p in members(api, "big-").values():
        msg = scheduled_condition(p)["message"]
        assert "desiredOfferSlot: 4, " in msg, msg
        assert "topology topologyNode blockLayer/b1: " in msg and "topology topologyNode blockLayer/b2: " in msg, msg
    cond = pod_group_condition(api, "big")
    assert cond["type"] == "Unschedulable" and cond["status"] == "True"
    assert cond["message"].startswith(f"GangGroup {NS}/big: 0/4 members bound; NetworkTopology: pod {NS}/big-"), cond
    assert not eng.scheduler.waiting_pods
