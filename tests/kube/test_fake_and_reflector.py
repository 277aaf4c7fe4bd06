"""The fake API server's faithfulness (binding answers, paging, selectors, 410 forms) and the reflector."""

from __future__ import annotations

import anyio
import pytest
from kube_testkit import node, pod

from koordfw.engines.kube.client import ApiError, KubeClient
from koordfw.engines.kube.node import NodeMetricPublisher, NodePodSource
from koordfw.engines.kube.ratelimit import TokenBucket
from koordfw.engines.kube.reflector import Reflector
from koordfw.testing.fake_apiserver import FakeApiServer, parse_field_selector


def binding(name, node_name="n0", uid=None, ns="default"):
    meta = {"name": name, "namespace": ns}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}


BIND_CASES = [
    # (name, setup, url name, body, status, message fragment)
    ("ok", None, "p", binding("p"), 201, None),
    ("name mismatch", None, "p", binding("q"), 400, "name in URL does not match name in Binding object"),
    ("no target", None, "p", binding("p", node_name=""), 400, "target.name: Required value"),
    ("missing pod", None, "nope", binding("nope"), 404, 'pods "nope" not found'),
    ("uid mismatch", None, "p", binding("p", uid="other"), 409, "Precondition failed: UID in precondition: other"),
    ("already bound", "bound", "p", binding("p"), 409, 'pod p is already assigned to node "n9"'),
    ("terminating", "terminating", "p", binding("p"), 409, "pod p is being deleted, cannot be assigned to a host"),
    ("gated", "gated", "p", binding("p"), 409, "pod p has non-empty .spec.schedulingGates"),
]


@pytest.mark.parametrize("case,setup,url_name,body,status,msg", BIND_CASES, ids=[c[0] for c in BIND_CASES])
async def test_binding_answers(api, client, case, setup, url_name, body, status, msg):
    spec = {}
    if setup == "bound":
        spec["nodeName"] = "n9"
    if setup == "gated":
        spec["schedulingGates"] = [{"name": "g"}]
    api.create(pod("p", **spec) if "nodeName" not in spec else pod("p", node_name="n9"))
    if setup == "terminating":
        api.mark_terminating("p")
    path = f"/api/v1/namespaces/default/pods/{url_name}/binding"
    if status == 201:
        out = await client.request("POST", path, body=body)
        assert out["kind"] == "Status" and out["status"] == "Success"
        p = api.get("pods", "p", "default")
        assert p["spec"]["nodeName"] == "n0"
        assert {"type": "PodScheduled", "status": "True"}.items() <= p["status"]["conditions"][0].items()
        return
    with pytest.raises(ApiError) as ei:
        await client.request("POST", path, body=body)
    assert ei.value.status == status
    assert msg in ei.value.message
    if status == 409:
        assert ei.value.message.startswith(f'Operation cannot be fulfilled on pods/binding "{url_name}": ')


async def test_list_pages_with_continue_and_expired_continue(api, client):
    for i in range(7):
        api.create(node(f"n{i}"))
    page = await client.request("GET", "/api/v1/nodes", params={"limit": 3})
    assert len(page["items"]) == 3 and page["metadata"]["remainingItemCount"] == 4
    rv = page["metadata"]["resourceVersion"]
    api.create(node("late"))  # not in the snapshot
    names = [n["metadata"]["name"] for n in page["items"]]
    while page["metadata"].get("continue"):
        page = await client.request("GET", "/api/v1/nodes", params={"limit": 3, "continue": page["metadata"]["continue"]})
        assert page["metadata"]["resourceVersion"] == rv
        names += [n["metadata"]["name"] for n in page["items"]]
    assert names == [f"n{i}" for i in range(7)]
    page = await client.request("GET", "/api/v1/nodes", params={"limit": 2})
    api.expire()
    with pytest.raises(ApiError) as ei:
        await client.request("GET", "/api/v1/nodes", params={"limit": 2, "continue": page["metadata"]["continue"]})
    assert ei.value.status == 410 and ei.value.reason == "Expired"


def test_field_selector_parsing():
    assert parse_field_selector("spec.nodeName=,status.phase!=Failed", ("spec.nodeName", "status.phase")) == [
        ("spec.nodeName", "=", ""), ("status.phase", "!=", "Failed")]
    with pytest.raises(ValueError, match="field label not supported: spec.foo"):
        parse_field_selector("spec.foo=1", ("spec.nodeName",))


async def _collect(client, params, n, timeout=3.0):
    out = []
    with anyio.move_on_after(timeout):
        async for ev in client.watch("/api/v1/pods", params, timeout=timeout):
            out.append(ev)
            if len([e for e in out if e["type"] != "BOOKMARK"]) >= n:
                break
    return [e for e in out if e["type"] != "BOOKMARK"]


async def test_watch_deleted_when_object_stops_matching(api, client):
    api.create(pod("p"))
    rv = str(api.rv)
    api.update("pods", "p", lambda o: o["spec"].__setitem__("nodeName", "n0"), "default")  # bound: leaves the selector
    api.create(pod("q"))
    evs = await _collect(client, {"resourceVersion": rv, "fieldSelector": "spec.nodeName="}, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [("DELETED", "p"), ("ADDED", "q")]
    assert not evs[0]["object"]["spec"].get("nodeName"), "DELETED carries the old object"
    evs = await _collect(client, {"resourceVersion": rv, "fieldSelector": "spec.nodeName=n0"}, 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [("ADDED", "p")]


@pytest.mark.parametrize("form", ["event", "http"])
async def test_watch_from_compacted_rv_is_410_in_both_forms(form):
    async with FakeApiServer(expired_form=form) as api:
        c = KubeClient(api.url, qps=0)
        api.create(pod("p"))
        old = str(api.rv - 1)
        api.expire()
        api.create(pod("q"))
        if form == "http":
            with pytest.raises(ApiError) as ei:
                await _collect(c, {"resourceVersion": old}, 1)
            assert ei.value.status == 410
        else:
            evs = await _collect(c, {"resourceVersion": old}, 1)
            assert evs[0]["type"] == "ERROR" and evs[0]["object"]["code"] == 410
            assert evs[0]["object"]["reason"] == "Expired"
        await c.close()


async def test_bookmarks_and_timeout(api, client):
    api.create(pod("p"))
    out = []
    async for ev in client.watch("/api/v1/pods", {"resourceVersion": str(api.rv), "allowWatchBookmarks": "true",
                                                  "timeoutSeconds": 1}, timeout=1):
        out.append(ev)
    assert out and all(e["type"] == "BOOKMARK" for e in out)
    assert out[-1]["object"]["metadata"]["resourceVersion"] == str(api.rv)


async def test_reflector_pages_strips_managed_fields_and_synthesises_deletes(api, client):
    for i in range(5):
        p = pod(f"p{i}")
        p["metadata"]["managedFields"] = [{"manager": "kubectl"}]
        api.create(p)
    seen = []

    async def handler(t, obj, old):
        seen.append((t, obj["metadata"]["name"]))
        assert "managedFields" not in obj["metadata"]

    r = Reflector(client, "/api/v1/pods", handler, page_size=2, initial_backoff=0.01)
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.run)
        await r.synced.wait()
        assert sorted(n for _, n in seen) == [f"p{i}" for i in range(5)]
        # the first LIST is at resourceVersion 0, which the watch cache answers whole whatever the limit
        assert sum(1 for m, p in api.requests if p == "/api/v1/pods") == 1
        api.drop_watches()
        api.delete("pods", "p0", "default")
        api.create(pod("p9"))
        api.expire()  # the history of that delete is gone before the reflector comes back
        with anyio.fail_after(5):
            while ("DELETED", "p0") not in seen or ("ADDED", "p9") not in seen:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert r.relists == 2
    assert "p0" not in {o["metadata"]["name"] for o in r.store.values()}


async def test_optional_reflector_on_404_is_synced_and_absent(client):
    async def handler(*a):
        raise AssertionError("no events expected")

    r = Reflector(client, "/apis/example.com/v1/widgets", handler, optional=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.run)
        with anyio.fail_after(3):
            await r.synced.wait()
        tg.cancel_scope.cancel()
    assert not r.available and r.unavailable_reason == "not served (404)" and r.probes == 1


def test_token_bucket_burst_then_rate():
    tb = TokenBucket(qps=10, burst=3)
    assert [tb.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert TokenBucket(qps=0, burst=0).try_acquire()


async def test_token_bucket_waits():
    tb = TokenBucket(qps=50, burst=1)
    t0 = anyio.current_time()
    for _ in range(6):
        await tb.acquire()
    assert anyio.current_time() - t0 >= 0.09


# -- the node agent's side --------------------------------------------------------------------------

async def test_node_pod_source_sees_only_its_node(api, client):
    api.create(pod("mine", node_name="n1", labels={"koordinator.sh/qosClass": "LSR"},
                   annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"0-1"}'}))
    api.create(pod("other", node_name="n2"))
    api.create(pod("pending"))
    src = NodePodSource(client, "n1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(src.run)
        await src.synced.wait()
        [p] = src.pods()
        assert p.name == "mine" and p.qos_class == "LSR"
        assert p.annotations["scheduling.koordinator.sh/resource-status"] == '{"cpuset":"0-1"}'
        api.update("pods", "pending", lambda o: o["spec"].__setitem__("nodeName", "n1"), "default")
        with anyio.fail_after(3):
            while len(await src.wait_changed()) < 2:
                pass
        api.update("pods", "mine", lambda o: o["status"].__setitem__("phase", "Succeeded"), "default")
        with anyio.fail_after(3):
            while [p.name for p in await src.wait_changed()] != ["pending"]:
                pass
        tg.cancel_scope.cancel()


async def test_node_metric_publisher_creates_then_updates(api, client):
    from koordfw.agent.nodemetric import NodeMetricReporter
    from koordfw.core.model import pod_from_manifest
    from koordfw.core.nodestate import NodeState, PodState

    pub = NodeMetricPublisher(client, "n1", report_interval=30)
    p = pod_from_manifest(api.create(pod("web", node_name="n1", labels={"koordinator.sh/qosClass": "LS"})))
    rep = NodeMetricReporter()
    rep.observe(NodeState(name="n1", usage={"cpu": 1500, "memory": 4 * 1024 ** 3},
                          pods=(PodState(uid=p.uid, pod=p, usage={"cpu": 500, "memory": 1024 ** 3}),)), 1000.0)
    await pub.publish(rep.status(1000.0, [p]))
    nm = api.get("nodemetrics", "n1")
    assert nm["apiVersion"] == "slo.koordinator.sh/v1alpha1" and nm["kind"] == "NodeMetric"
    # created with the slo-controller's default collect policy, at the agent's report interval
    assert nm["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] == 30
    assert nm["spec"]["metricCollectPolicy"]["nodeAggregatePolicy"] == {"durations": ["5m0s", "10m0s", "30m0s"]}
    st = nm["status"]
    assert st["nodeMetric"]["nodeUsage"]["resources"] == {"cpu": "1500m", "memory": "4Gi"}
    assert st["podsMetric"] == [{"name": "web", "namespace": "default",
                                 "podUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}},
                                 "priority": "koord-prod", "qos": "LS"}]
    assert st["updateTime"] == "1970-01-01T00:16:40Z"
    rep.observe(NodeState(name="n1", usage={"cpu": 2500, "memory": 1024 ** 3}), 1001.0)
    await pub.publish(rep.status(1001.0, [p]))
    assert api.get("nodemetrics", "n1")["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "2"  # the average
    assert pub.published == 2


async def test_cluster_pod_source_is_the_agents_pod_source(api, client):
    from koordfw.engines.kube.node import ClusterPodSource

    api.create(node("n1", cpu="8"))
    p = api.create(pod("mine", node_name="n1", labels={"koordinator.sh/qosClass": "BE"}))
    src = ClusterPodSource(client, "n1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(src.run)
        await src.wait_synced()
        src.refresh("n1")
        assert src.node is not None and src.node.allocatable["cpu"] == 8000
        assert src.pods[p["metadata"]["uid"]].qos_class == "BE"
        tg.cancel_scope.cancel()


async def test_put_without_resource_version_is_422_for_a_custom_resource_only(api, client):
    """CRDs do not allow unconditional updates (customResourceStrategy); built-in kinds do."""
    slo = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n1"}, "spec": {}}
    api.create(slo)
    with pytest.raises(ApiError) as ei:
        await client.request("PUT", "/apis/slo.koordinator.sh/v1alpha1/nodeslos/n1", body=dict(slo, spec={"x": 1}))
    assert ei.value.status == 422 and "metadata.resourceVersion" in ei.value.message
    cur = api.get("nodeslos", "n1")
    ok = await client.request("PUT", "/apis/slo.koordinator.sh/v1alpha1/nodeslos/n1",
                              body=dict(cur, spec={"x": 1}))
    assert ok["spec"] == {"x": 1}
    api.create(node("n1"))
    n = api.get("nodes", "n1")
    n["metadata"].pop("resourceVersion")
    n["metadata"]["labels"] = {"a": "b"}
    assert (await client.request("PUT", "/api/v1/nodes/n1", body=n))["metadata"]["labels"] == {"a": "b"}
