"""What the live engines write and when: pre_bind annotations inside the Binding, no write from a replica
that does not lead, nominatedNodeName cleared when a nomination ends, optional kinds that RBAC refuses,
/healthz, and the fake API server's answers for UID mismatches (checked against kube-apiserver)."""

from __future__ import annotations

import aiohttp
import anyio
import pytest
from kube_testkit import SCHED, MoveWeb, captured_logs, node, pod, running, wait_for

from koordfw import hookimpl
from koordfw.core.model import pod_from_manifest
from koordfw.core.status import Status
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.binder import KubeBinder
from koordfw.engines.kube.client import ApiError, KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine, NotLeading
from koordfw.engines.kube.health import start_health_server, unhealthy_reason
from koordfw.engines.kube.reflector import Reflector
from koordfw.engines.kube.writer import Writer
from koordfw.extension import SLO_GROUP_VERSION

RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Annotator:
    @hookimpl
    def pre_bind(self, pod, node):
        return {RESOURCE_STATUS: f'{{"node":"{node.name}"}}', "keep": "overwritten"}


# -- binding ----------------------------------------------------------------------------------------
async def test_fake_binding_copies_its_annotations_onto_the_pod(api, client):
    api.create(pod("p", annotations={"keep": "old", "other": "x"}))
    api.create(pod("g", annotations={"keep": "old"}, schedulingGates=[{"name": "wait"}]))
    body = {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": "p", "namespace": "default", "annotations": {"keep": "new", "added": "1"}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n0"}}
    await client.request("POST", "/api/v1/namespaces/default/pods/p/binding", body=body)
    p = api.get("pods", "p", "default")
    assert p["spec"]["nodeName"] == "n0"
    assert p["metadata"]["annotations"] == {"keep": "new", "other": "x", "added": "1"}
    body["metadata"]["name"] = "g"
    with pytest.raises(ApiError) as ei:
        await client.request("POST", "/api/v1/namespaces/default/pods/g/binding", body=body)
    assert ei.value.status == 409
    assert api.get("pods", "g", "default")["metadata"]["annotations"] == {"keep": "old"}  # nothing half-written


async def test_pre_bind_annotations_land_with_the_binding_in_one_write(api, client):
    api.create(node("n0"))
    api.create(pod("p", annotations={"keep": "old", "other": "x"}))
    reg = build_registry(None, autoload=False, plugins={"annotator": Annotator()})
    eng = KubeSchedulerEngine(reg, client)
    async with running(eng):
        await wait_for(lambda: eng.binder.bound == 1)
    path = "/api/v1/namespaces/default/pods/p"
    assert ("PATCH", path) not in api.requests and ("POST", path + "/binding") in api.requests
    writes = [(etype, obj) for _, plural, etype, obj, _ in api.history
              if plural == "pods" and obj["metadata"]["name"] == "p"]
    first_update = next(obj for etype, obj in writes if etype == "MODIFIED")
    assert first_update["spec"]["nodeName"] == "n0"
    assert first_update["metadata"]["annotations"] == {RESOURCE_STATUS: '{"node":"n0"}', "keep": "overwritten",
                                                       "other": "x"}


# -- leadership -------------------------------------------------------------------------------------
async def test_writer_writes_nothing_while_not_leading(api, client):
    p = pod_from_manifest(api.create(pod("p")))
    leading = [False]
    w = Writer(client, None, controller=SCHED, instance="a", leading=lambda: leading[0])
    w.unschedulable(p, "Unschedulable", "no room")
    await w.drain()
    w.scheduled(p, "n0")
    await w.drain()
    # the status patch, the FailedScheduling and the Scheduled event
    assert w.not_leading_dropped == 3 and w.status_patches == 0 and w.events_sent == 0
    assert not any(m in ("PATCH", "POST") for m, _ in api.requests)
    leading[0] = True
    w.unschedulable(p, "Unschedulable", "still no room")
    await w.drain()
    assert w.status_patches == 1 and w.events_sent == 1


async def test_binder_checks_leadership_before_every_attempt(api, client):
    p = pod_from_manifest(api.create(pod("p")))
    api.fail(500, count=1, method="POST", path="/binding")
    calls = []

    def check(what):
        calls.append(what)
        if len(calls) > 1:
            raise NotLeading(f"not the leader any more: not {what}")

    binder = KubeBinder(client, backoff=0.0, check=check)
    with pytest.raises(NotLeading):
        await binder(p, "n0", {})
    assert calls == ["binding default/p", "binding default/p"]
    assert [m for m, path in api.requests if path.endswith("/binding")] == ["POST"]  # the retry was not sent
    assert api.get("pods", "p", "default")["spec"].get("nodeName") is None


async def test_descheduler_evicts_nothing_while_not_leading(api, client):
    api.create(node("n0"))
    api.create(node("n1"))
    api.create(pod("web-0", node_name="n0"))
    reg = build_registry(None, autoload=False, plugins={"move": MoveWeb()})
    eng = KubeSchedulerEngine(reg, client, deschedule_interval=0.1, deschedule_dry_run=False)
    assert eng.descheduler is not None
    eng.descheduler.leading = lambda: False
    async with running(eng):
        await wait_for(lambda: len(eng.descheduler.history) >= 2)
    assert api.evictions == [] and {o.result for o in eng.descheduler.history} == {"skipped: not the leader"}


# -- nominatedNodeName ------------------------------------------------------------------------------
def _nominated(name, nnn, **kw):
    p = pod(name, **kw)
    p["status"] = {"phase": "Pending", "nominatedNodeName": nnn}
    return p


async def test_a_bound_pod_of_ours_has_its_ended_nomination_cleared(api, client, registry):
    """A server without ClearingNominatedNodeNameAfterBinding leaves nominatedNodeName on a bound pod:
    the scheduler clears it (only on its own pods)."""
    api.create(node("n0"))
    api.create(node("n1"))
    api.create(_nominated("ours", "n1", node_name="n0"))
    api.create(_nominated("theirs", "n1", node_name="n0", scheduler="default-scheduler"))
    eng = KubeSchedulerEngine(registry, client)
    async with running(eng):
        await wait_for(lambda: eng.writer.nominations_cleared == 1)
    assert "nominatedNodeName" not in api.get("pods", "ours", "default")["status"]
    assert api.get("pods", "theirs", "default")["status"]["nominatedNodeName"] == "n1"


async def test_writer_nomination_override_semantics(api, client):
    w = Writer(client, None, controller=SCHED, instance="a")
    keep = pod_from_manifest(api.create(_nominated("keep", "n1")))
    drop = pod_from_manifest(api.create(_nominated("drop", "n1")))
    move = pod_from_manifest(api.create(_nominated("move", "n1")))
    w.unschedulable(keep, "Unschedulable", "no room", None)  # Noop: left as it is
    w.unschedulable(drop, "Unschedulable", "no room", "")  # Override with "": cleared
    w.unschedulable(move, "Unschedulable", "no room", "n2")  # Override: the new node
    await w.drain()
    st = {n: api.get("pods", n, "default")["status"] for n in ("keep", "drop", "move")}
    assert st["keep"]["nominatedNodeName"] == "n1"
    assert "nominatedNodeName" not in st["drop"]
    assert st["move"]["nominatedNodeName"] == "n2"
    assert all(c["reason"] == "Unschedulable" for s in st.values() for c in s["conditions"])
    # nothing to clear: not written
    w.clear_nomination(pod_from_manifest(api.get("pods", "drop", "default")))
    assert w.pending == 0


async def test_engine_clears_a_nomination_the_kernel_dropped(api, client, registry):
    eng = KubeSchedulerEngine(registry, client)
    p = pod_from_manifest(api.create(_nominated("p", "n1")))
    eng.cluster.add_pod(p)
    await eng.pod_unschedulable(p, Status.unschedulable("no room"))
    assert eng.writer._status[p.uid][3] is None  # never nominated by this kernel: left alone
    eng._nominated.add(p.uid)  # the kernel held it at the last failure, holds it no more
    await eng.pod_unschedulable(p, Status.unschedulable("no room"))
    assert eng.writer._status[p.uid][3] == ""
    assert p.uid not in eng._nominated


# -- optional kinds refused by RBAC -----------------------------------------------------------------
async def test_a_forbidden_optional_kind_is_absent_logged_once_and_reprobed(api, client, registry):
    api.create(node("n0"))
    api.forbid("nodemetrics")
    eng = KubeSchedulerEngine(registry, client, objects={"NodeMetric": f"/apis/{SLO_GROUP_VERSION}/nodemetrics"})
    refl = next(r for r in eng.reflectors if r.name == "NodeMetric")
    refl.probe_interval = 0.05
    with captured_logs() as logs:
        async with running(eng):
            assert eng.health()["synced"] and eng.health()["absentKinds"] == ["NodeMetric"]
            assert refl.unavailable_reason.startswith("forbidden (403): nodemetrics.slo.koordinator.sh is "
                                                      "forbidden: User ")
            await wait_for(lambda: refl.probes >= 3)
            assert eng.unhealthy_reason() is None
            api.allow("nodemetrics")
            api.create({"apiVersion": SLO_GROUP_VERSION, "kind": "NodeMetric", "metadata": {"name": "n0"},
                        "spec": {}})
            await wait_for(lambda: eng.cluster.get_object("NodeMetric", "n0") is not None)
            assert refl.available and eng.health()["absentKinds"] == []
    absent_logs = [e for e in logs if e["event"].startswith("resource unavailable")]
    assert len(absent_logs) == 1


async def test_an_optional_kind_that_becomes_forbidden_empties_its_store(api, client):
    api.create({"apiVersion": SLO_GROUP_VERSION, "kind": "NodeMetric", "metadata": {"name": "n0"}, "spec": {}})
    seen = []

    async def handler(t, obj, old):
        seen.append((t, obj["metadata"]["name"]))

    r = Reflector(client, f"/apis/{SLO_GROUP_VERSION}/nodemetrics", handler, optional=True, probe_interval=0.05,
                  initial_backoff=0.01, max_backoff=0.05, absent_after=0.5)
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.run)
        await wait_for(lambda: ("ADDED", "n0") in seen)
        api.forbid("nodemetrics")
        api.drop_watches()
        # a served kind answering 403 is retried, its store kept, for absent_after seconds (a restarting
        # kube-apiserver answers 403 until its RBAC caches are filled) ...
        await wait_for(lambda: r.denied_since is not None)
        await anyio.sleep(0.2)
        assert r.available and list(r.store) and ("DELETED", "n0") not in seen
        # ... then it is absent
        await wait_for(lambda: ("DELETED", "n0") in seen)
        assert not r.available and r.store == {} and r.synced.is_set()
        tg.cancel_scope.cancel()


async def test_a_forbidden_required_kind_keeps_the_cache_unsynced(api, client, registry):
    api.forbid("nodes")
    eng = KubeSchedulerEngine(registry, client, objects={})
    nodes = next(r for r in eng.reflectors if r.name == "nodes")
    async with anyio.create_task_group() as tg:
        tg.start_soon(eng.run)
        await wait_for(lambda: nodes.errors >= 2)
        assert not nodes.synced.is_set() and not eng.health()["synced"]
        eng.stop()
        tg.cancel_scope.cancel()


# -- /healthz ---------------------------------------------------------------------------------------
async def test_unreachable_api_turns_unhealthy_after_the_configured_time(api):
    clock = Clock()
    async with KubeClient(api.url, qps=0, clock=clock) as c:
        await c.request("GET", "/api/v1/nodes")
        assert c.last_success == 1000.0 and unhealthy_reason(c, after=120) is None
        api.fail(503, count=3)
        clock.t = 1010.0
        for _ in range(2):
            with pytest.raises(ApiError):
                await c.request("GET", "/api/v1/nodes")
            clock.t += 60  # the first failure counts, not the last
        assert c.unreachable_since == 1010.0
        assert unhealthy_reason(c, after=120) is None  # 110 s
        clock.t = 1131.0
        assert unhealthy_reason(c, after=120) == "the API has been unreachable for 121s (more than 120s)"
        with pytest.raises(ApiError):
            await c.request("GET", "/api/v1/nodes")
        await c.request("GET", "/api/v1/nodes")  # it answers again
        assert c.unreachable_since is None and unhealthy_reason(c, after=120) is None
        # a 404 is an answer: the API is reachable
        with pytest.raises(ApiError):
            await c.request("GET", "/api/v1/nodes/nope")
        assert c.unreachable_since is None


def test_a_run_of_401s_is_not_ended_by_events_on_watches_opened_before_it():
    """A revoked token: requests answer 401 while watches opened earlier keep streaming; the process can
    read but not write, so /healthz must not count those events as the API answering."""
    clock = Clock()
    c = KubeClient("https://127.0.0.1:1", qps=0, clock=clock)
    c._answered(401)
    clock.t += 200
    c._answered(200, stream=True)
    assert c.unreachable_since == 1000.0 and c.unauthorized_since == 1000.0 and c.last_success == 1200.0
    assert "401" in (unhealthy_reason(c, after=120) or "")
    c._answered(200)  # a request answered: the credentials work again
    assert c.unreachable_since is None and c.unauthorized_since is None
    c._answered(503)
    c._answered(200, stream=True)  # without a 401, a watch event shows the API is back
    assert c.unreachable_since is None


async def test_healthz_is_500_with_the_reason(api, registry):
    clock = Clock()
    async with KubeClient(api.url, qps=0, clock=clock) as c:
        eng = KubeSchedulerEngine(registry, c, unhealthy_after=30, objects={})
        runner, port = await start_health_server("127.0.0.1", 0, eng.health, eng.started.is_set,
                                                 eng.unhealthy_reason)
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                    assert r.status == 200 and (await r.json())["status"] == "ok"  # not started yet
                eng._run_started = clock.t  # started, caches not synced
                clock.t += 31
                async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                    body = await r.json()
                    assert r.status == 500 and body["status"] == "unhealthy"
                    assert body["reason"] == "caches not synced 31s after the start (more than 30s): nodes, pods"
                for refl in eng.reflectors:
                    refl.synced.set()
                async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                    assert r.status == 200
        finally:
            await runner.cleanup()


def test_unhealthy_after_flag_is_validated(capsys):
    from koordfw.cli import main

    with pytest.raises(SystemExit) as ei:
        main(["scheduler", "--kubeconfig", "x", "--unhealthy-after-seconds", "-5"])
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--unhealthy-after-seconds" in err[-1]


# -- UID mismatches, as kube-apiserver answers them -------------------------------------------------
async def test_uid_mismatch_answers(api, client):
    cur = api.create(pod("p"))
    path = "/api/v1/namespaces/default/pods/p"
    # PATCH: no preconditions; the changed uid fails the update validation (field is immutable)
    with pytest.raises(ApiError) as ei:
        await client.request("PATCH", path, body={"metadata": {"uid": "other", "labels": {"a": "b"}}},
                             content_type="application/merge-patch+json")
    e = ei.value
    assert e.status == 422 and e.reason == "Invalid"
    assert e.message == 'Pod "p" is invalid: metadata.uid: Invalid value: "other": field is immutable'
    assert e.body["details"]["causes"][0]["field"] == "metadata.uid"
    # the same uid is fine
    await client.request("PATCH", path, body={"metadata": {"uid": cur["metadata"]["uid"], "labels": {"a": "b"}}},
                         content_type="application/merge-patch+json")
    # a stale resourceVersion in a patch is the optimistic-concurrency 409
    with pytest.raises(ApiError) as ei:
        await client.request("PATCH", path, body={"metadata": {"resourceVersion": cur["metadata"]["resourceVersion"]}},
                             content_type="application/merge-patch+json")
    assert ei.value.status == 409
    # PUT: the body's uid is a storage precondition, a mismatch is a 409 Conflict
    obj = api.get("pods", "p", "default")
    obj["metadata"]["uid"] = "other"
    with pytest.raises(ApiError) as ei:
        await client.request("PUT", path, body=obj)
    uid = cur["metadata"]["uid"]
    assert ei.value.status == 409 and ei.value.message == (
        'Operation cannot be fulfilled on pods "p": StorageError: invalid object, Code: 4, Key: '
        f"/registry/pods/default/p, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in "
        f"precondition: other, UID in object meta: {uid}")
    # DELETE (and an eviction) with a UID precondition: rest.BeforeDelete's 409, on the kind
    with pytest.raises(ApiError) as ei:
        await client.request("DELETE", path, body={"preconditions": {"uid": "other"}})
    assert ei.value.status == 409 and ei.value.message == (
        f'Operation cannot be fulfilled on Pod "p": the UID in the precondition (other) does not match the UID '
        f"in record ({uid}). The object might have been deleted and then recreated")
    with pytest.raises(ApiError) as ei:
        await client.request("POST", path + "/eviction", body={
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "default"},
            "deleteOptions": {"preconditions": {"uid": "other"}}})
    assert ei.value.status == 409 and "the UID in the precondition (other) does not match" in ei.value.message
    assert api.get("pods", "p", "default") is not None
