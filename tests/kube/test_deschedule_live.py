"""Descheduling on a live cluster: reserve the target, evict through the Eviction API, land the
replacement on the target; PDBs honoured; dry-run by default."""

from __future__ import annotations

import anyio
import pytest
from kube_testkit import SCHED, MoveWeb, node, pdb, pod, running, wait_for, web

from koordfw import Migration, hookimpl
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import ApiError, KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.fake_apiserver import FakeApiServer


class PreferN0:
    @hookimpl
    def score(self, nodes):
        return {n.name: 100 if n.name == "n0" else 0 for n in nodes}


@pytest.fixture
async def client_graceful():
    """A fake with the real server's graceful deletion; grace periods long enough that only
    ``finish_deletions()`` (the kubelet's confirmation) ends them."""
    async with FakeApiServer(bookmark_interval=0.2, graceful_deletes=True) as api, \
            KubeClient(api.url, qps=0) as c:
        yield api, c


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
        assert any(p.name == "web-0-reservation" for pods in eng.scheduler.nominator.by_node_index().values() for p in pods)
        api.create(web("web-1"))  # the ReplicaSet's replacement; scoring alone would pick n0
        await wait_for(lambda: (api.get("pods", "web-1", "default") or {}).get("spec", {}).get("nodeName"))
    assert api.get("pods", "web-1", "default")["spec"]["nodeName"] == "n1"
    assert not eng.scheduler.nominator and eng.descheduler.reservations == {}
    assert [o.result for o in eng.descheduler.history][:1] == ["evicted"]


async def test_pdb_blocks_the_eviction_and_the_reservation_is_released(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0", labels={"app": "web"}))
    api.create(pdb("web-pdb", {"app": "web"}, 0))
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: any(o.result.startswith("blocked") for o in eng.descheduler.history))
    assert api.evictions == []
    assert api.get("pods", "web-0", "default")["spec"]["nodeName"] == "n0"
    assert eng.descheduler.history[0].result == "blocked: disruption budget"
    assert not eng.scheduler.nominator and eng.descheduler.reservations == {}


async def test_dry_run_is_the_default_and_evicts_nothing(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    eng = engine(client, dry_run=True)
    async with running(eng):
        await wait_for(lambda: len(eng.descheduler.history) >= 2)
    assert api.evictions == [] and {o.result for o in eng.descheduler.history} == {"dry-run"}
    assert not eng.scheduler.nominator


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


class MoveBoth:
    """Proposes moving web-0 and web-1 (one ReplicaSet) from n0 to n1 while they sit on n0."""

    @hookimpl
    def deschedule(self, cluster):
        out = []
        for name in ("web-0", "web-1"):
            p = cluster.pod_by_key(f"default/{name}")
            if p is not None and p.node_name == "n0":
                out.append(Migration(pod=f"default/{name}", from_node="n0", to="n1", reason="rebalance"))
        return out


def engine_both(client, *, ttl=300.0):
    reg = build_registry(None, autoload=False, plugins={"move": MoveBoth(), "prefer_n0": PreferN0()})
    return KubeSchedulerEngine(reg, client, deschedule_interval=0.2, deschedule_dry_run=False, reservation_ttl=ttl)


def held(eng):
    """Placeholder names nominated, per node name."""
    return {eng.cluster.views[i].name: sorted(p.name for p in d if p.uid.startswith("reservation-"))
            for i, d in eng.scheduler.nominator.by_node_index().items()}


async def test_two_migrations_of_one_owner_each_hold_their_target_until_their_replacement(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    api.create(web("web-1", node_name="n0"))
    eng = engine_both(client)
    async with running(eng):
        await wait_for(lambda: len(api.evictions) == 2)
        await wait_for(lambda: not eng.scheduler.cluster.pod_by_key("default/web-1"))
        assert held(eng) == {"n1": ["web-0-reservation", "web-1-reservation"]}
        assert [r.placeholder.name for r in eng.descheduler.reservations.values()] == \
            ["web-0-reservation", "web-1-reservation"]
        # the first replacement takes the oldest reservation only; the other keeps holding n1
        api.create(web("web-2"))
        await wait_for(lambda: (api.get("pods", "web-2", "default") or {}).get("spec", {}).get("nodeName"))
        assert held(eng) == {"n1": ["web-1-reservation"]}
        assert [r.placeholder.name for r in eng.descheduler.reservations.values()] == ["web-1-reservation"]
        api.create(web("web-3"))
        await wait_for(lambda: (api.get("pods", "web-3", "default") or {}).get("spec", {}).get("nodeName"))
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in api.pods()} == {"web-2": "n1", "web-3": "n1"}
    assert not eng.scheduler.nominator and eng.descheduler.reservations == {}


async def test_after_the_ttl_no_placeholder_stays_nominated(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    api.create(web("web-1", node_name="n0"))
    eng = engine_both(client, ttl=0.6)
    async with running(eng):
        await wait_for(lambda: len(eng.descheduler.reservations) == 2)
        assert held(eng) == {"n1": ["web-0-reservation", "web-1-reservation"]}
        await wait_for(lambda: not eng.descheduler.reservations and not eng.scheduler.nominator)
        # a replacement arriving after the TTL is scheduled on its merits (PreferN0), not nominated
        api.create(web("web-2"))
        await wait_for(lambda: (api.get("pods", "web-2", "default") or {}).get("spec", {}).get("nodeName"))
    assert api.get("pods", "web-2", "default")["spec"]["nodeName"] == "n0"
    assert not eng.scheduler.nominator


async def test_a_refused_eviction_releases_only_its_own_reservation(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    api.create(web("web-1", node_name="n0", labels={"guarded": "yes"}))
    api.create(pdb("guard", {"guarded": "yes"}, 0))
    eng = engine_both(client)
    async with running(eng):
        # several rounds: web-1 is refused each time, web-0's reservation must survive all of them
        await wait_for(lambda: sum(o.result.startswith("blocked") for o in eng.descheduler.history) >= 3)
        assert api.evictions == [("default", "web-0")]
        assert [r.placeholder.name for r in eng.descheduler.reservations.values()] == ["web-0-reservation"]
        assert held(eng) == {"n1": ["web-0-reservation"]}


async def test_graceful_eviction_the_target_stays_held_while_the_victim_terminates(client_graceful):
    api, client = client_graceful
    api.create(node("n0", cpu="1"))
    api.create(node("n1", cpu="1"))
    api.create(web("web-0", node_name="n0"))
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: api.evictions == [("default", "web-0")])
        # the victim terminates: still on n0 and holding its CPU there, and the watch told the cache so
        await wait_for(lambda: getattr(eng.scheduler.cluster.pod_by_key("default/web-0"), "deletion_timestamp", None))
        assert api.get("pods", "web-0", "default")["spec"]["nodeName"] == "n0"
        assert held(eng) == {"n1": ["web-0-reservation"]}
        # an equal-priority pod arriving in the window finds n0 full and n1 reserved: it waits
        api.create(pod("intruder", "1", scheduler=SCHED))
        await wait_for(lambda: any(o.result == "skipped: the pod is already being migrated"
                                   for o in eng.descheduler.history))
        await anyio.sleep(0.3)
        assert not api.get("pods", "intruder", "default")["spec"].get("nodeName")
        # the ReplicaSet's replacement (created as soon as the victim is terminating) gets the target
        api.create(web("web-1"))
        await wait_for(lambda: (api.get("pods", "web-1", "default") or {}).get("spec", {}).get("nodeName"))
        assert api.get("pods", "web-1", "default")["spec"]["nodeName"] == "n1"
        assert api.get("pods", "web-0", "default")["metadata"]["deletionTimestamp"]
        # the kubelet confirms: the victim goes and its room on n0 is free for the waiting pod
        assert api.finish_deletions() == ["default/web-0"]
        await wait_for(lambda: (api.get("pods", "intruder", "default") or {}).get("spec", {}).get("nodeName"))
    assert api.get("pods", "intruder", "default")["spec"]["nodeName"] == "n0"
    assert api.evictions == [("default", "web-0")]  # never evicted twice while terminating
    assert not eng.scheduler.nominator and eng.descheduler.reservations == {}


async def test_a_lost_eviction_reply_keeps_the_reservation(api, client):
    """The eviction reaches the server but its reply is lost: the target stays held, so the replacement
    still lands on it (releasing it would let the replacement land anywhere)."""
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    real = client.request

    async def lose_eviction_replies(method, path, *a, **kw):
        out = await real(method, path, *a, **kw)
        if path.endswith("/eviction"):
            raise ApiError(0, f"{method} {path}: ServerDisconnectedError")
        return out

    client.request = lose_eviction_replies
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: api.evictions == [("default", "web-0")])
        await wait_for(lambda: bool(eng.descheduler.history))
        assert eng.descheduler.history[0].result.startswith("unknown")
        assert any(p.name == "web-0-reservation" for pods in eng.scheduler.nominator.by_node_index().values() for p in pods)
        api.create(web("web-1"))
        await wait_for(lambda: (api.get("pods", "web-1", "default") or {}).get("spec", {}).get("nodeName"))
    assert api.get("pods", "web-1", "default")["spec"]["nodeName"] == "n1"
    assert not eng.scheduler.nominator
