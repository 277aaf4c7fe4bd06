"""LIST resourceVersion semantics: the fake API server answers resourceVersion / resourceVersionMatch as
kube-apiserver does (validation 422s, the watch cache, exact reads, the "Too large resource version"
504), and the reflector asks for what client-go's reflector asks for (RV=0 first, a relist NotOlderThan
the last RV, a quorum read after a LIST's 410 or too-large answer)."""

from __future__ import annotations

import anyio
import pytest
from kube_testkit import captured_logs, node

from koordfw.engines.kube.client import ApiError
from koordfw.engines.kube.reflector import Reflector
from koordfw.testing.fake_apiserver import FakeApiServer

INVALID = [
    ({"resourceVersionMatch": "NotOlderThan"},
     'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden '
     "unless resourceVersion is provided"),
    ({"resourceVersion": "0", "resourceVersionMatch": "Exact"},
     'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is '
     'forbidden for resourceVersion "0"'),
    ({"resourceVersionMatch": "Sometimes"},
     'ListOptions.meta.k8s.io "" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden '
     'unless resourceVersion is provided, resourceVersionMatch: Unsupported value: "Sometimes": supported values: '
     '"Exact", "NotOlderThan", ""]'),
]


@pytest.mark.parametrize("params,message", INVALID, ids=["match without rv", "exact at 0", "unsupported"])
async def test_list_options_validation_is_422_invalid(api, client, params, message):
    with pytest.raises(ApiError) as ei:
        await client.request("GET", "/api/v1/nodes", params=params)
    assert ei.value.status == 422 and ei.value.reason == "Invalid"
    assert ei.value.message == message
    assert ei.value.body["details"]["kind"] == "ListOptions"
    assert {c["field"] for c in ei.value.body["details"]["causes"]} == {"resourceVersionMatch"}


async def test_list_at_resource_versions(api, client):
    api.create(node("a"))
    rv_a = api.rv
    api.update("nodes", "a", lambda n: n["metadata"]["labels"].__setitem__("v", "2"))
    api.create(node("b"))
    now = api.rv

    async def names(**params):
        out = await client.request("GET", "/api/v1/nodes", params=params)
        return out["metadata"]["resourceVersion"], {n["metadata"]["name"]: n["metadata"]["labels"].get("v")
                                                    for n in out["items"]}

    assert await names() == (str(now), {"a": "2", "b": None})  # quorum read
    assert await names(resourceVersion="0") == (str(now), {"a": "2", "b": None})  # the (current) watch cache
    # NotOlderThan an old RV: the newest state
    assert await names(resourceVersion=str(rv_a), resourceVersionMatch="NotOlderThan") == \
        (str(now), {"a": "2", "b": None})
    # Exact, and etcd's legacy rule (an RV with a limit), read the state at that RV
    assert await names(resourceVersion=str(rv_a), resourceVersionMatch="Exact") == (str(rv_a), {"a": None})
    assert await names(resourceVersion=str(rv_a), limit=10) == (str(rv_a), {"a": None})
    # a bare RV without a limit is NotOlderThan
    assert await names(resourceVersion=str(rv_a)) == (str(now), {"a": "2", "b": None})
    # ahead of the server: the too-large answer, with its cause
    for match in ("NotOlderThan", "Exact"):
        with pytest.raises(ApiError) as ei:
            await client.request("GET", "/api/v1/nodes",
                                 params={"resourceVersion": str(now + 5), "resourceVersionMatch": match})
        e = ei.value
        assert e.status == 504 and e.reason == "Timeout" and e.too_large_resource_version
        assert e.message == f"Timeout: Too large resource version: {now + 5}, current: {now}"
        assert e.body["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}]
    # an exact read of compacted history is gone
    api.expire()
    with pytest.raises(ApiError) as ei:
        await client.request("GET", "/api/v1/nodes", params={"resourceVersion": str(rv_a),
                                                             "resourceVersionMatch": "Exact"})
    assert ei.value.status == 410 and ei.value.reason == "Expired"


async def test_continue_pages_refuse_a_resource_version(api, client):
    for i in range(3):
        api.create(node(f"n{i}"))
    page = await client.request("GET", "/api/v1/nodes", params={"limit": 1})
    with pytest.raises(ApiError) as ei:
        await client.request("GET", "/api/v1/nodes", params={"limit": 1, "continue": page["metadata"]["continue"],
                                                             "resourceVersion": page["metadata"]["resourceVersion"]})
    assert ei.value.status == 400 and "specifying resource version is not allowed when using continue" in \
        ei.value.message
    with pytest.raises(ApiError) as ei:
        await client.request("GET", "/api/v1/nodes", params={"continue": page["metadata"]["continue"],
                                                             "resourceVersion": "1", "resourceVersionMatch": "Exact"})
    assert ei.value.status == 422 and "forbidden when continue is provided" in ei.value.message


async def test_a_frozen_watch_cache_serves_stale_lists_and_too_large(api, client):
    api.create(node("old"))
    frozen = api.freeze_watch_cache()
    api.create(node("new"))
    out = await client.request("GET", "/api/v1/nodes", params={"resourceVersion": "0"})
    assert [n["metadata"]["name"] for n in out["items"]] == ["old"]
    assert out["metadata"]["resourceVersion"] == str(frozen)
    with pytest.raises(ApiError) as ei:
        await client.request("GET", "/api/v1/nodes", params={"resourceVersion": str(api.rv),
                                                             "resourceVersionMatch": "NotOlderThan"})
    assert ei.value.too_large_resource_version and f"current: {frozen}" in ei.value.message
    out = await client.request("GET", "/api/v1/nodes")  # a quorum read is never stale
    assert sorted(n["metadata"]["name"] for n in out["items"]) == ["new", "old"]
    api.thaw_watch_cache()
    out = await client.request("GET", "/api/v1/nodes", params={"resourceVersion": "0"})
    assert len(out["items"]) == 2


def _rv_params(api):
    return [{k: v for k, v in q.items() if k.startswith("resourceVersion") or k == "continue"}
            for plural, q in api.list_queries if plural == "nodes"]


async def _run_reflector(client, events):
    async def handler(t, obj, old):
        events.append((t, obj["metadata"]["name"]))

    return Reflector(client, "/api/v1/nodes", handler, page_size=2, initial_backoff=0.01)


async def test_reflector_lists_at_0_then_relists_not_older_than_the_last_rv(api, client):
    for i in range(3):
        api.create(node(f"n{i}"))
    events: list = []
    r = await _run_reflector(client, events)
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.run)
        with anyio.fail_after(5):
            await r.synced.wait()
        first = _rv_params(api)
        # the first LIST asks the watch cache (RV=0), which answers whole: no continuation page
        assert first == [{"resourceVersion": "0"}]
        api.create(node("n3"))
        with anyio.fail_after(5):
            while ("ADDED", "n3") not in events:
                await anyio.sleep(0.01)
        seen_rv = r.resource_version
        api.expire()  # the watch gets 410: relist from what it has seen, never older
        with anyio.fail_after(5):
            while r.relists < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    relist = _rv_params(api)[len(first)]
    assert relist == {"resourceVersion": seen_rv, "resourceVersionMatch": "NotOlderThan"}
    assert not r.rv_unavailable


async def test_reflector_too_large_relist_falls_back_to_a_quorum_read(api, client):
    """The apiserver the reflector reconnects to has a watch cache behind what the reflector saw (as
    after a failover to a lagging replica): the NotOlderThan relist is too large, the next is a quorum read."""
    api.create(node("n0"))
    events: list = []
    r = await _run_reflector(client, events)
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.run)
        with anyio.fail_after(5):
            await r.synced.wait()
        api.freeze_watch_cache()
        api.create(node("n1"))
        with anyio.fail_after(5):
            while ("ADDED", "n1") not in events:
                await anyio.sleep(0.01)
        seen_rv = r.resource_version
        api.fail(410, count=1, method="GET", path="/api/v1/nodes")  # the re-watch: history gone
        api.drop_watches()
        with anyio.fail_after(5):
            while r.relists < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    params = _rv_params(api)
    assert params[0] == {"resourceVersion": "0"}
    assert params[1] == {"resourceVersion": seen_rv, "resourceVersionMatch": "NotOlderThan"}  # 504
    assert params[2] == {}  # quorum
    assert sorted(o["metadata"]["name"] for o in r.store.values()) == ["n0", "n1"]
    assert not r.rv_unavailable


async def test_reflector_initial_stale_list_catches_up_through_the_watch():
    async with FakeApiServer(bookmark_interval=0.2) as api:
        from koordfw.engines.kube.client import KubeClient

        api.create(node("n0"))
        api.freeze_watch_cache()
        api.create(node("n1"))  # after the cache's RV: the RV=0 list misses it
        async with KubeClient(api.url, qps=0) as client:
            events: list = []
            r = await _run_reflector(client, events)
            async with anyio.create_task_group() as tg:
                tg.start_soon(r.run)
                with anyio.fail_after(5):
                    while ("ADDED", "n1") not in events:
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    assert events[0] == ("ADDED", "n0") and r.relists == 1


async def test_a_quorum_list_that_keeps_failing_backs_off(api, client):
    api.create(node("n0"))
    r = await _run_reflector(client, [])
    api.fail(410, count=6, method="GET", path="/api/v1/nodes")
    with captured_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(r.run)
            with anyio.fail_after(5):
                await r.synced.wait()
            tg.cancel_scope.cancel()
    params = _rv_params(api)
    # the faults answer before the fake records a LIST: one RV=0 attempt (410), then quorum reads
    # that back off between tries until one is served
    assert params == [{}] and r.errors == 6 and not r.rv_unavailable
    events = [e["event"] for e in logs]
    assert events.count("resourceVersion unavailable; re-listing") == 1
    assert events.count("API error; backing off") == 5
    assert [p for m, p in api.requests if p == "/api/v1/nodes"].count("/api/v1/nodes") == 7
