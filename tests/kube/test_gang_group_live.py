"""GangGroup all-or-nothing on the live scheduler against the fake API server (issue 34 point 1): one
whole gang group is bound with Koordinator's bind-gang-* annotations, the other is rejected at once
(PodScheduled=False, no member parked at Permit for its 30 s waiting time), and a round re-opened by an
event that helps only one gang of a group still tries, and binds, the whole group."""

from __future__ import annotations

import json

import anyio
from kube_testkit import SCHED, node, pod, running, wait_for

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.fake_apiserver import FakeApiServer

GANG = "gang.scheduling.koordinator.sh"
BIND_GROUP = "internal.scheduling.koordinator.sh/bind-gang-group-id"
BIND_COUNT = "internal.scheduling.koordinator.sh/bind-gang-member-count"


def member(name: str, gang: str, groups: list[str], *, cpu: str = "1", min_available: int = 2) -> dict:
    return pod(name, cpu=cpu, annotations={f"{GANG}/name": gang, f"{GANG}/min-available": str(min_available),
                                           f"{GANG}/groups": json.dumps(groups), f"{GANG}/waiting-time": "30s"})


def ours(api: FakeApiServer) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in api.pods() if p["spec"].get("schedulerName") == SCHED}


def condition(p: dict) -> dict | None:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)


def rejected(p: dict) -> bool:
    c = condition(p)
    return c is not None and c["status"] == "False" and bool(c.get("reason"))


def registry():
    return build_registry(None, autoload=True, only={"gang"})


async def test_two_gang_groups_for_room_for_one(api, client):
    api.create(node("n0", cpu="4"))
    ga, gb = ["default/a1", "default/a2"], ["default/b1", "default/b2"]
    for g, groups in (("a1", ga), ("a2", ga), ("b1", gb), ("b2", gb)):
        for i in range(2):
            api.create(member(f"{g}-{i}", g, groups))
    eng = KubeSchedulerEngine(registry(), client, flush_interval=0.1)
    t0 = anyio.current_time()
    async with running(eng):
        def settled() -> bool:
            pods = ours(api)
            return all(p["spec"].get("nodeName") or rejected(p) for p in pods.values())
        await wait_for(settled)
        assert not eng.scheduler.waiting_pods
    assert anyio.current_time() - t0 < 30
    pods = ours(api)
    bound = sorted(n for n, p in pods.items() if p["spec"].get("nodeName"))
    assert len(bound) == 4 and len({n[0] for n in bound}) == 1  # one whole group, never a partial one
    group = "default/a1,default/a2" if bound[0][0] == "a" else "default/b1,default/b2"
    for n in bound:
        ann = pods[n]["metadata"]["annotations"]
        assert ann[BIND_GROUP] == group and ann[BIND_COUNT] == "4"
    losers = [p for n, p in pods.items() if n not in bound]
    assert all(rejected(p) for p in losers)
    assert any(condition(p)["message"].startswith('GangGroup "') for p in losers)


async def test_round_reopened_for_one_gang_binds_the_whole_group(api, client):
    # n0 full, n1 with 3 CPUs free; group b1 (one 2-CPU pod) + b2 (two 1-CPU pods) needs 4: rejected.
    # Deleting f1 frees 1 CPU on n0: it helps b2's pods, not b1's, yet the whole group is bound.
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(pod("f1", cpu="1", node_name="n0"))
    api.create(pod("f2", cpu="3", node_name="n0"))
    api.create(pod("f3", cpu="1", node_name="n1"))
    groups = ["default/b1", "default/b2"]
    api.create(member("b1-0", "b1", groups, cpu="2", min_available=1))
    for i in range(2):
        api.create(member(f"b2-{i}", "b2", groups))
    eng = KubeSchedulerEngine(registry(), client, flush_interval=0.1)
    async with running(eng):
        names = ("b1-0", "b2-0", "b2-1")
        await wait_for(lambda: all(rejected(ours(api)[n]) for n in names))
        assert not any(ours(api)[n]["spec"].get("nodeName") for n in names)
        t0 = anyio.current_time()
        api.delete("pods", "f1", "default")
        await wait_for(lambda: all(ours(api)[n]["spec"].get("nodeName") for n in names))
        assert anyio.current_time() - t0 < 30
    pods = ours(api)
    assert pods["b1-0"]["spec"]["nodeName"] == "n1"
    for n in names:
        ann = pods[n]["metadata"]["annotations"]
        assert ann[BIND_GROUP] == "default/b1,default/b2" and ann[BIND_COUNT] == "3"
