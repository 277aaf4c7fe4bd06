"""Descheduling on a live cluster: reserve the target, evict through the Eviction API, land the
replacement on the target; PDBs honoured; dry-run by default."""

from __future__ import annotations

import contextlib

import anyio
from conftest import SCHED, node, pod

from koordfw import Migration, hookimpl
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine

OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "rs-uid-1", "controller": True}


class MoveWeb:
    """Proposes moving web-0 from n0 to n1 while it sits on n0."""

    @hookimpl
    def deschedule(self, cluster):
        p = cluster.pod_by_key("default/web-0")
        if p is None or p.node_name != "n0":
            return None
        return [Migration(pod="default/web-0", from_node="n0", to="n1", reason="rebalance")]


class PreferN0:
    @hookimpl
    def score(self, nodes):
        return {n.name: 100 if n.name == "n0" else 0 for n in nodes}


async def wait_for(pred, timeout: float = 15.0) -> None:
    with anyio.fail_after(timeout):
        while not pred():
            await anyio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(eng):
    async with anyio.create_task_group() as tg:
        tg.start_soon(eng.run)
        await eng.started.wait()
        yield
        eng.stop()


def web(name, **kw):
    p = pod(name, "1", **kw)
    p["metadata"]["ownerReferences"] = [OWNER]
    return p


def engine(client, *, dry_run=False):
    reg = build_registry(None, autoload=False, plugins={"move": MoveWeb(), "prefer_n0": PreferN0()})
    return KubeSchedulerEngine(reg, client, deschedule_interval=0.2, deschedule_dry_run=dry_run)


async def test_migration_reserves_target_evicts_and_replacement_lands_there(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: api.evictions == [("default", "web-0")])
        assert api.get("pods", "web-0", "default") is None
        # the target is held for the replacement: a lower pod cannot take it meanwhile
        assert any(p.name == "web-0-reservation" for pods in eng.scheduler.nominated.values() for p in pods.values())
        api.create(web("web-1"))  # the ReplicaSet's replacement; scoring alone would pick n0
        await wait_for(lambda: (api.get("pods", "web-1", "default") or {}).get("spec", {}).get("nodeName"))
    assert api.get("pods", "web-1", "default")["spec"]["nodeName"] == "n1"
    assert eng.scheduler.nominated == {} and eng.descheduler.reservations == {}
    assert [o.result for o in eng.descheduler.history][:1] == ["evicted"]


async def test_pdb_blocks_the_eviction_and_the_reservation_is_released(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0", labels={"app": "web"}))
    api.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web-pdb", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}}, "status": {"disruptionsAllowed": 0}})
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: any(o.result.startswith("blocked") for o in eng.descheduler.history))
    assert api.evictions == []
    assert api.get("pods", "web-0", "default")["spec"]["nodeName"] == "n0"
    assert eng.descheduler.history[0].result == "blocked: disruption budget"
    assert eng.scheduler.nominated == {} and eng.descheduler.reservations == {}


async def test_dry_run_is_the_default_and_evicts_nothing(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    eng = engine(client, dry_run=True)
    async with running(eng):
        await wait_for(lambda: len(eng.descheduler.history) >= 2)
    assert api.evictions == [] and {o.result for o in eng.descheduler.history} == {"dry-run"}
    assert eng.scheduler.nominated == {}


async def test_fake_eviction_answers(api, client):
    from koordfw.engines.kube.client import ApiError

    api.create(node("n0"))
    created = api.create(pod("a", node_name="n0", scheduler=SCHED))

    async def evict(name, uid=None):
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        try:
            await client.request("POST", f"/api/v1/namespaces/default/pods/{name}/eviction", body=body)
            return 201
        except ApiError as e:
            return e.status

    assert await evict("missing") == 404
    assert await evict("a", uid="not-the-uid") == 409
    assert await evict("a", uid=created["metadata"]["uid"]) == 201
    assert api.get("pods", "a", "default") is None
