"""GangGroup all-or-nothing (issue 34 point 1) on the real kube-apiserver v1.20.2: two gang groups of two gangs
each, room for one group: one whole group binds with Koordinator's bind-gang-* annotations, every member of the
other is PodScheduled=False at once (none parked at Permit for its 30 s waiting time), never a partial group."""

from __future__ import annotations

import json

import anyio
from realkube_testkit import pod, pods, wait_until

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine

NS = "gg"
GANG = "gang.scheduling.koordinator.sh"
BIND_GROUP = "internal.scheduling.koordinator.sh/bind-gang-group-id"
BIND_COUNT = "internal.scheduling.koordinator.sh/bind-gang-member-count"


def rejected(p: dict) -> bool:
    c = next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)
    return c is not None and c["status"] == "False" and bool(c.get("reason"))


async def test_two_gang_groups_for_room_for_one(kube_plane):
    kube_plane.add_node("gg-n0", cpu="4", memory="8Gi")
    kube_plane.create_namespace(NS)
    ga, gb = [f"{NS}/a1", f"{NS}/a2"], [f"{NS}/b1", f"{NS}/b2"]
    async with kube_plane.client() as c:
        eng = KubeSchedulerEngine(build_registry(None, autoload=True, only={"gang"}), c, flush_interval=0.1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(eng.run)
            with anyio.fail_after(60):
                await eng.started.wait()
                t0 = anyio.current_time()
                for g, groups in (("a1", ga), ("a2", ga), ("b1", gb), ("b2", gb)):
                    for i in range(2):
                        ann = {f"{GANG}/name": g, f"{GANG}/min-available": "2", f"{GANG}/groups": json.dumps(groups),
                               f"{GANG}/waiting-time": "30s"}
                        wait_until(lambda g=g, i=i, ann=ann: kube_plane.apply(pod(f"{g}-{i}", NS, cpu="1",
                                                                                  annotations=ann)) is not None,
                                   what=f"{g}-{i} created")

                def settled() -> list[dict] | None:
                    ps = pods(kube_plane, NS)
                    return ps if len(ps) == 8 and all(p["spec"].get("nodeName") or rejected(p) for p in ps) else None

                while (ps := await anyio.to_thread.run_sync(settled)) is None:
                    await anyio.sleep(0.2)
                assert not eng.scheduler.waiting_pods
                elapsed = anyio.current_time() - t0
            eng.stop()
    assert elapsed < 30
    bound = sorted(p["metadata"]["name"] for p in ps if p["spec"].get("nodeName"))
    assert len(bound) == 4 and len({n[0] for n in bound}) == 1  # one whole group, never a partial one
    group = ",".join(ga if bound[0][0] == "a" else gb)
    for p in ps:
        if p["metadata"]["name"] in bound:
            assert p["metadata"]["annotations"][BIND_GROUP] == group
            assert p["metadata"]["annotations"][BIND_COUNT] == "4"
    losers = [p for p in ps if p["metadata"]["name"] not in bound]
    assert all(rejected(p) for p in losers)
    assert any(next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")["message"]
               .startswith('GangGroup "') for p in losers)
