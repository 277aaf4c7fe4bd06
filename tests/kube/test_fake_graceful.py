"""The fake API server's opt-in graceful pod deletion: DELETE and the Eviction API set
``deletionTimestamp`` (MODIFIED), keep the pod on its node for the grace period, then DELETED."""

from __future__ import annotations

import datetime as dt

import anyio
import pytest
from kube_testkit import node, pdb, pod

from koordfw.engines.kube.client import ApiError, KubeClient
from koordfw.testing.fake_apiserver import FakeApiServer

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
async def gapi():
    async with FakeApiServer(bookmark_interval=0.2, graceful_deletes=True, grace_scale=0.01) as server:
        yield server


@pytest.fixture
async def gclient(gapi):
    async with KubeClient(gapi.url, qps=0) as c:
        yield c


def bound(api, name="a", **spec):
    api.create(node("n0"))
    return api.create(pod(name, node_name="n0", **spec))


async def status_of(coro) -> int:
    try:
        await coro
        return 200
    except ApiError as e:
        return e.status


def ts(s: str) -> dt.datetime:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


async def test_watch_sees_modified_with_deletion_timestamp_then_deleted(gapi, gclient):
    created = bound(gapi)
    events = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async def watch():
                async for ev in gclient.watch("/api/v1/pods", {"resourceVersion": created["metadata"]["resourceVersion"]},
                                              timeout=10):
                    events.append((anyio.current_time(), ev))
                    if ev["type"] == "DELETED":
                        tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await anyio.sleep(0.1)
            before = dt.datetime.now(dt.UTC).replace(microsecond=0)
            reply = await gclient.request("DELETE", f"{PODS}/a")
            sent = anyio.current_time()
    assert reply["metadata"]["deletionGracePeriodSeconds"] == 30  # the default when nothing says otherwise
    assert [ev["type"] for _, ev in events] == ["MODIFIED", "DELETED"]
    (t_mod, mod), (t_del, gone) = events
    meta = mod["object"]["metadata"]
    # deletionTimestamp is when the pod will be gone: now + the grace period
    assert (ts(meta["deletionTimestamp"]) - before).total_seconds() in (30, 31)
    assert meta["deletionGracePeriodSeconds"] == 30
    assert mod["object"]["spec"]["nodeName"] == "n0"
    assert gone["object"]["metadata"]["uid"] == created["metadata"]["uid"]
    assert t_del - sent >= 0.25  # 30 s scaled by 0.01, not at once


async def test_get_during_the_grace_period_returns_the_terminating_pod(gapi, gclient):
    bound(gapi)
    gapi.grace_scale = 100.0  # long enough that only finish_deletions() ends it
    await gclient.request("DELETE", f"{PODS}/a")
    got = await gclient.request("GET", f"{PODS}/a")
    assert got["metadata"]["deletionTimestamp"] and got["spec"]["nodeName"] == "n0"
    assert gapi.terminating() == ["default/a"]
    # a second delete without a shorter period changes nothing (no new resourceVersion)
    again = await gclient.request("DELETE", f"{PODS}/a")
    assert again["metadata"]["resourceVersion"] == got["metadata"]["resourceVersion"]
    assert gapi.finish_deletions() == ["default/a"]
    assert await status_of(gclient.request("GET", f"{PODS}/a")) == 404
    assert gapi.terminating() == []


@pytest.mark.parametrize("how", ["query", "body"])
async def test_grace_period_zero_deletes_at_once(gapi, gclient, how):
    bound(gapi)
    if how == "query":
        await gclient.request("DELETE", f"{PODS}/a", params={"gracePeriodSeconds": 0})
    else:
        await gclient.request("DELETE", f"{PODS}/a", body={"kind": "DeleteOptions", "gracePeriodSeconds": 0})
    assert gapi.get("pods", "a", "default") is None
    # deletionTimestamp is written first (grace 0), then the pod goes, as the registry does
    assert [h[2] for h in gapi.history if h[1] == "pods"] == ["ADDED", "MODIFIED", "DELETED"]


async def test_a_shorter_grace_period_on_a_terminating_pod_shortens_it_and_zero_removes_it(gapi, gclient):
    bound(gapi)
    gapi.grace_scale = 100.0
    await gclient.request("DELETE", f"{PODS}/a")
    short = await gclient.request("DELETE", f"{PODS}/a", params={"gracePeriodSeconds": 5})
    assert short["metadata"]["deletionGracePeriodSeconds"] == 5
    longer = await gclient.request("DELETE", f"{PODS}/a", params={"gracePeriodSeconds": 20})
    assert longer["metadata"]["deletionGracePeriodSeconds"] == 5
    await gclient.request("DELETE", f"{PODS}/a", params={"gracePeriodSeconds": 0})
    assert gapi.get("pods", "a", "default") is None and gapi.terminating() == []


async def test_termination_grace_period_seconds_of_the_pod_is_the_default(gapi, gclient):
    bound(gapi, terminationGracePeriodSeconds=7)
    reply = await gclient.request("DELETE", f"{PODS}/a")
    assert reply["metadata"]["deletionGracePeriodSeconds"] == 7


async def test_unbound_and_terminal_pods_are_deleted_at_once(gapi, gclient):
    gapi.create(pod("pending"))
    gapi.create(pod("done", node_name="n0"))
    gapi.update("pods", "done", lambda p: p["status"].update(phase="Succeeded"), "default")
    await gclient.request("DELETE", f"{PODS}/pending")
    await gclient.request("DELETE", f"{PODS}/done")
    assert gapi.get("pods", "pending", "default") is None and gapi.get("pods", "done", "default") is None


async def test_delete_answers_404_and_uid_precondition_409(gapi, gclient):
    bound(gapi)
    assert await status_of(gclient.request("DELETE", f"{PODS}/missing")) == 404
    assert await status_of(gclient.request("DELETE", f"{PODS}/a", body={"preconditions": {"uid": "other"}})) == 409
    assert gapi.get("pods", "a", "default")["metadata"].get("deletionTimestamp") is None


async def test_eviction_takes_the_same_graceful_path_and_a_terminating_pod_skips_the_budget(gapi, gclient):
    created = bound(gapi, labels={"app": "web"})
    gapi.grace_scale = 100.0
    gapi.create(pdb("pdb", {"app": "web"}, 1))
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a", "namespace": "default"},
            "deleteOptions": {"preconditions": {"uid": created["metadata"]["uid"]}}}
    await gclient.request("POST", f"{PODS}/a/eviction", body=body)
    got = gapi.get("pods", "a", "default")
    assert got["metadata"]["deletionTimestamp"] and got["metadata"]["deletionGracePeriodSeconds"] == 30
    assert got["spec"]["nodeName"] == "n0"
    assert gapi.get("poddisruptionbudgets", "pdb", "default")["status"]["disruptionsAllowed"] == 0
    # evicting it again: already terminating, so the (now exhausted) budget is not consulted or spent
    await gclient.request("POST", f"{PODS}/a/eviction", body=body)
    assert gapi.get("poddisruptionbudgets", "pdb", "default")["status"]["disruptionsAllowed"] == 0
    # the eviction's own grace period is honoured: 0 removes it now
    await gclient.request("POST", f"{PODS}/a/eviction", body=body | {"deleteOptions": {"gracePeriodSeconds": 0}})
    assert gapi.get("pods", "a", "default") is None


async def test_eviction_with_a_bad_grace_period_is_a_400(gapi, gclient):
    bound(gapi)
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"},
            "deleteOptions": {"gracePeriodSeconds": "soon"}}
    assert await status_of(gclient.request("POST", f"{PODS}/a/eviction", body=body)) == 400


async def test_graceful_deletes_are_off_by_default(api, client):
    api.create(node("n0"))
    api.create(pod("a", node_name="n0"))
    await client.request("DELETE", f"{PODS}/a")
    assert api.get("pods", "a", "default") is None


def test_without_a_running_loop_the_deletion_waits_for_finish_deletions():
    api = FakeApiServer(graceful_deletes=True)
    api.create(node("n0"))
    api.create(pod("a", node_name="n0"))
    _, gone = api.request_delete("pods", "a", "default")
    assert not gone and api.get("pods", "a", "default")["metadata"]["deletionTimestamp"]
    assert api.finish_deletions() == ["default/a"] and api.get("pods", "a", "default") is None
