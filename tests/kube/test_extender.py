"""The extender verbs with kube-scheduler-shaped JSON (capitalised keys, both nodeCacheCapable modes)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import aiohttp
import anyio
import pytest
from kube_testkit import node, pod

from koordfw import hookimpl
from koordfw.core.status import Status
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.extender import Extender, ExtenderServer, map_score
from koordfw.testing.kube import extender_with_cache


class Boom:
    @hookimpl
    def filter(self, pod, node):
        if pod.labels.get("boom"):
            raise RuntimeError("kaboom")
        return None


class NoGpuNode:
    """Rejects nodes labelled gpu=none as unresolvable (preemption cannot add a GPU)."""

    @hookimpl
    def filter(self, pod, node):
        if node.labels.get("gpu") == "none":
            return Status.unresolvable("node(s) have no GPU", plugin="no_gpu")
        return None


@pytest.fixture
async def stateless():
    reg = build_registry(None, autoload=False, plugins={"boom": Boom(), "no_gpu": NoGpuNode()})
    srv = ExtenderServer(Extender(reg), prefix="colo", max_body=64 * 1024)
    port = await srv.start("127.0.0.1", 0)
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        yield srv, http
    await srv.stop()


def nodes_list(*nodes):
    return {"metadata": {}, "items": list(nodes)}


async def post(http, path, body, raw=None):
    async with http.post(path, data=raw if raw is not None else json.dumps(body),
                         headers={"Content-Type": "application/json"}) as r:
        text = await r.text()
        return r.status, (json.loads(text) if text else None)


async def test_filter_non_cache_mode_returns_full_nodes(stateless):
    _, http = stateless
    body = {"Pod": pod("web", cpu="3"), "Nodes": nodes_list(node("a", cpu="4"), node("b", cpu="2"),
                                                            node("c", cpu="8", labels={"gpu": "none"})),
            "NodeNames": None}
    status, out = await post(http, "/colo/filter", body)
    assert status == 200
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["a"]
    assert out["NodeNames"] is None
    assert set(out["FailedNodes"]) == {"b"} and "cpu" in out["FailedNodes"]["b"]
    assert out["FailedAndUnresolvableNodes"] == {"c": "node(s) have no GPU"}
    assert out["Error"] == ""


async def test_request_keys_are_case_insensitive(stateless):
    _, http = stateless
    body = {"pod": pod("web"), "nodes": {"items": [node("a")]}, "nodenames": None}
    status, out = await post(http, "/colo/filter", body)
    assert status == 200 and [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["a"]


async def test_prioritize_scores_in_0_to_10(stateless):
    _, http = stateless
    body = {"Pod": pod("web", cpu="1", memory="1Gi"),
            "Nodes": nodes_list(node("small", cpu="2", memory="4Gi"), node("big", cpu="32", memory="128Gi")),
            "NodeNames": None}
    status, out = await post(http, "/colo/prioritize", body)
    assert status == 200
    scores = {h["Host"]: h["Score"] for h in out}
    assert set(scores) == {"small", "big"}
    assert all(0 <= s <= 10 for s in scores.values())
    assert scores["big"] > scores["small"]  # least-allocated by default


@pytest.mark.parametrize("total,max_total,want", [(0, 100, 0), (100, 100, 10), (55, 100, 5), (199, 200, 9),
                                                   (300, 200, 10), (5, 0, 0)])
def test_map_score(total, max_total, want):
    assert map_score(total, max_total) == want


async def test_node_names_mode_needs_a_cache(stateless):
    _, http = stateless
    status, out = await post(http, "/colo/filter", {"Pod": pod("web"), "Nodes": None, "NodeNames": ["a"]})
    assert status == 400 and "nodeCacheCapable" in out["Error"]


async def test_malformed_json_is_400_with_message(stateless):
    _, http = stateless
    status, out = await post(http, "/colo/filter", None, raw="{not json")
    assert status == 400 and "malformed JSON" in out["Error"]
    status, out = await post(http, "/colo/filter", [1, 2])
    assert status == 400 and "JSON object" in out["Error"]


async def test_body_size_limit(stateless):
    _, http = stateless
    big = {"Pod": pod("web"), "Nodes": nodes_list(*[node(f"n{i}", labels={"pad": "x" * 60}) for i in range(400)])}
    status, out = await post(http, "/colo/filter", big)
    assert status == 413 and "too large" in out["Error"]


async def test_plugin_error_is_an_error_field(stateless):
    _, http = stateless
    body = {"Pod": pod("web", labels={"boom": "1"}), "Nodes": nodes_list(node("a")), "NodeNames": None}
    status, out = await post(http, "/colo/filter", body)
    assert status == 200 and "kaboom" in out["Error"] and out["FailedNodes"] == {}


async def test_info_names_plugins_needing_state(stateless):
    srv, http = stateless
    async with http.get("/colo/") as r:
        info = await r.json()
    assert info["mode"] == "stateless" and "pluginsNeedingState" in info
    assert "/colo/filter" in info["verbs"]
    async with http.get("/healthz") as r:
        assert r.status == 200
    async with http.get("/metrics") as r:
        assert "koordfw_schedule_attempts" in await r.text() or r.status == 200


def test_kube_schedulers_own_volume_binding_is_not_run_again_at_bind():
    # kube-scheduler's VolumeBinding reserves and pre-binds the volumes before it calls the extender's
    # bind: with the built-ins alone a bind needs no state, and volume_binding runs no binding-cycle hook
    reg = build_registry(None, autoload=False)
    ext = Extender(reg)
    assert not ext.binds_with_state and ext.plugins_needing_state == []
    assert not any(i.plugin == "volume_binding" for h in ("reserve", "unreserve", "pre_bind") for i in reg.impls(h))
    assert "volume_binding" in {i.plugin for i in reg.impls("filter")}  # its filter still answers


async def test_bind_without_client_says_why(stateless):
    _, http = stateless
    status, out = await post(http, "/colo/bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "u",
                                                  "Node": "a"})
    assert status == 200 and "kubeconfig" in out["Error"]


# -- with a cluster cache (the fake API server) --------------------------------------------------

@asynccontextmanager
async def stateful_ctx(api, plugins=None):
    for i in range(3):
        api.create(node(f"n{i}", cpu="4"))
    api.create(pod("hog", cpu="3500m", scheduler="default-scheduler", node_name="n0"))
    async with extender_with_cache(api.url, build_registry(None, autoload=False, plugins=plugins)) as (ext, http):
        yield api, ext, http


async def test_cache_mode_filter_sees_pods_on_nodes(api):
    async with stateful_ctx(api) as (api, _, http):
        body = {"Pod": pod("web", cpu="1"), "Nodes": None, "NodeNames": ["n0", "n1", "n2", "ghost"]}
        status, out = await post(http, "/filter", body)
        assert status == 200
        assert out["NodeNames"] == ["n1", "n2"] and out["Nodes"] is None
        assert set(out["FailedNodes"]) == {"n0", "ghost"}
        status, out = await post(http, "/prioritize", body | {"NodeNames": ["n0", "n1"]})
        assert {h["Host"] for h in out} == {"n0", "n1"}


async def test_bind_verb_binds_with_uid(api):
    async with stateful_ctx(api) as (api, _, http):
        p = api.create(pod("web"))
        args = {"PodName": "web", "PodNamespace": "default", "PodUID": p["metadata"]["uid"], "Node": "n1"}
        status, out = await post(http, "/bind", args)
        assert status == 200 and out == {"Error": ""}
        assert api.get("pods", "web", "default")["spec"]["nodeName"] == "n1"
        status, out = await post(http, "/bind", args | {"Node": "n2"})
        assert "already bound to n1" in out["Error"]


SLOT = "example.com/slot"


class Slots:
    """Two numbered slots per node, like devices: reserve takes the lowest free one (slots of bound pods
    come from their annotation), pre_bind writes it, unreserve gives it back."""

    def __init__(self):
        self.held: dict[str, tuple[str, int]] = {}  # pod uid -> (node, slot)

    def _taken(self, node, me):
        bound = {int(p.annotations[SLOT]) for p in node.cluster.pods_on(node.name)
                 if SLOT in p.annotations and p.uid != me}
        return bound | {s for uid, (n, s) in self.held.items() if n == node.name and uid != me}

    @hookimpl
    def reserve(self, pod, node, state):
        free = sorted({0, 1} - self._taken(node, pod.uid))
        if not free:
            return Status.unschedulable("no free slot")
        self.held[pod.uid] = (node.name, free[0])
        return None

    @hookimpl
    def unreserve(self, pod, node, state):
        self.held.pop(pod.uid, None)

    @hookimpl
    def pre_bind(self, pod, node, state):
        return {SLOT: str(self.held[pod.uid][1])}


async def test_bind_verb_runs_reserve_and_pre_bind(api):
    slots = Slots()
    async with stateful_ctx(api, {"slots": slots}) as (api, _, http):
        uids = {n: api.create(pod(n))["metadata"]["uid"] for n in ("a", "b", "c")}
        for n, want in (("a", "0"), ("b", "1")):
            status, out = await post(http, "/bind", {"PodName": n, "PodNamespace": "default", "PodUID": uids[n],
                                                     "Node": "n1"})
            assert status == 200 and out == {"Error": ""}
            got = api.get("pods", n, "default")
            assert got["spec"]["nodeName"] == "n1" and got["metadata"]["annotations"][SLOT] == want
        status, out = await post(http, "/bind", {"PodName": "c", "PodNamespace": "default", "PodUID": uids["c"],
                                                 "Node": "n1"})
        assert out["Error"] == "no free slot (plugin slots)"
        assert "nodeName" not in api.get("pods", "c", "default")["spec"]
        assert uids["c"] not in slots.held
        # the filters run on the chosen node too: n0 has 0.5 CPU left
        big = api.create(pod("big", cpu="1"))
        status, out = await post(http, "/bind", {"PodName": "big", "PodNamespace": "default",
                                                 "PodUID": big["metadata"]["uid"], "Node": "n0"})
        assert "Insufficient cpu" in out["Error"] and "nodeName" not in api.get("pods", "big", "default")["spec"]
        assert big["metadata"]["uid"] not in slots.held


async def test_bind_verb_releases_the_reservation_when_binding_fails(api):
    slots = Slots()
    async with stateful_ctx(api, {"slots": slots}) as (api, ext, http):
        uid = api.create(pod("web"))["metadata"]["uid"]
        args = {"PodName": "web", "PodNamespace": "default", "PodUID": uid, "Node": "n1"}
        api.fail(403, method="POST", path="/binding", count=1)
        status, out = await post(http, "/bind", args)
        assert "403" in out["Error"] and "nodeName" not in api.get("pods", "web", "default")["spec"]
        assert uid not in slots.held and ext.scheduler.cluster.pod(uid) is None  # nothing left behind
        status, out = await post(http, "/bind", args)  # the slot was given back: the retry gets slot 0
        assert out == {"Error": ""} and api.get("pods", "web", "default")["metadata"]["annotations"][SLOT] == "0"
        # a pod the cache knows on a node is never re-reserved (its accounting stays where it is)
        other = api.create(pod("other", node_name="n2"))
        await anyio.sleep(0.1)
        status, out = await post(http, "/bind", args | {"PodName": "other", "PodUID": other["metadata"]["uid"]})
        assert out["Error"] == "pod default/other is already on node n2"
        assert ext.scheduler.cluster.pod_by_key("default/other").node_name == "n2"
        status, out = await post(http, "/bind", args | {"PodUID": "other-uid"})
        assert "was recreated" in out["Error"]


async def test_preempt_keeps_nodes_where_victims_make_room(api):
    async with stateful_ctx(api) as (api, ext, http):
        hog = api.get("pods", "hog", "default")
        small = api.create(pod("small", cpu="100m", scheduler="default-scheduler", node_name="n1"))
        api.create(pod("keeper", cpu="1", scheduler="default-scheduler", node_name="n1"))
        await anyio.sleep(0.1)
        body = {"Pod": pod("web", cpu="2"), "NodeNameToVictims": None,
                "NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": hog["metadata"]["uid"]}], "NumPDBViolations": 0},
                                          "n1": {"Pods": [{"UID": small["metadata"]["uid"]}], "NumPDBViolations": 0}}}
        status, out = await post(http, "/preempt", body)
        assert status == 200
        assert set(out["NodeNameToMetaVictims"]) == {"n0", "n1"}
        body["Pod"] = pod("web", cpu="3900m")
        status, out = await post(http, "/preempt", body)
        assert set(out["NodeNameToMetaVictims"]) == {"n0"}  # on n1 "keeper" stays: no room even without "small"
