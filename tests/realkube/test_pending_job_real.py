"""Why is my job pending (issue 34 point 6) on the real kube-apiserver v1.20.2: a PodGroup gang short of
members stays pending, and its PodGroup gets the one message, in ``status.conditions`` (written with the object:
Koordinator's PodGroup CRD has no status subresource) and as an ``events.k8s.io/v1`` Event regarding the
PodGroup, both written by the live scheduler."""

from __future__ import annotations

from pathlib import Path

import anyio
from realkube_testkit import pod, wait_until

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine

NS = "pj"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


async def test_a_gang_short_of_members_says_why_on_its_podgroup_and_in_an_event(kube_plane):
    kube_plane.apply_file(DEPLOY / "00-crd-podgroup.yaml")
    kube_plane.add_node("pj-n0", cpu="4", memory="8Gi")
    kube_plane.create_namespace(NS)
    kube_plane.apply({"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
                      "metadata": {"name": "train", "namespace": NS},
                      "spec": {"minMember": 3, "scheduleTimeoutSeconds": 30}})
    async with kube_plane.client() as c:
        eng = KubeSchedulerEngine(build_registry(None, autoload=True, only={"gang"}), c, flush_interval=0.1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(eng.run)
            with anyio.fail_after(60):
                await eng.started.wait()
                for i in range(2):  # two members of three
                    wait_until(lambda i=i: kube_plane.apply(pod(f"train-{i}", NS, labels={
                        "pod-group.scheduling.sigs.k8s.io": "train"})) is not None, what=f"train-{i} created")

                def condition() -> dict | None:
                    pg = kube_plane.request("GET", f"/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{NS}/podgroups/train")
                    conds = (pg.get("status") or {}).get("conditions") or []
                    return conds[0] if conds else None

                # The first member's cycle may write "1 of the 3" before the second exists: wait for the
                # message about both members, the one that stays.
                while (cond := await anyio.to_thread.run_sync(condition)) is None or "2 of the 3" not in cond["message"]:
                    await anyio.sleep(0.2)

                def events() -> list[dict]:
                    items = kube_plane.request("GET", f"/apis/events.k8s.io/v1/namespaces/{NS}/events")["items"]
                    return [e for e in items if (e.get("regarding") or {}).get("kind") == "PodGroup"]

                while not (evs := [e for e in await anyio.to_thread.run_sync(events) if e.get("note") == cond["message"]]):
                    await anyio.sleep(0.2)
            eng.stop()
    assert cond["type"] == "Unschedulable" and cond["status"] == "True" and cond["reason"] == "GangSize", cond
    assert "0/3" in cond["message"] or "GangSize" in cond["message"], cond
    ev = evs[0]
    assert ev["type"] == "Warning" and ev["reason"] == "Unschedulable" and ev["note"] == cond["message"]
    assert ev["regarding"]["name"] == "train" and ev["regarding"]["apiVersion"] == "scheduling.sigs.k8s.io/v1alpha1"
    assert ev["regarding"].get("uid")
    for i in range(2):
        assert not kube_plane.request("GET", f"/api/v1/namespaces/{NS}/pods/train-{i}")["spec"].get("nodeName")
