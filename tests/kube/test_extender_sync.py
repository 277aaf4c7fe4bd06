"""Until its cluster cache has synced, the extender answers every verb with an error in the form
kube-scheduler reads (pkg/scheduler/extender.go): filter and bind with the ``Error`` field of their
reply, prioritize and preempt (no such field) with a non-200 status; never "not in the extender's cache"
for every node. Checked against the fake API server with the pods LIST failing."""

from __future__ import annotations

import json

import aiohttp
import anyio
from kube_testkit import node, pod

from koordfw import hookimpl
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.extender import Extender, ExtenderServer


class Reserving:
    """A plugin with a reserve hook: bind then runs reserve/pre_bind against the cache."""

    @hookimpl
    def reserve(self, pod, node, state):
        return None


async def post(http, path, body):
    async with http.post(path, data=json.dumps(body), headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


async def test_verbs_answer_errors_until_the_cache_has_synced(api):
    for i in range(2):
        api.create(node(f"n{i}", cpu="4"))
    web = api.create(pod("web"))
    stuck = api.fail(500, method="GET", path="/api/v1/pods")  # the pods LIST fails until removed
    reg = build_registry(None, autoload=False, plugins={"reserving": Reserving()})
    async with KubeClient(api.url, qps=0) as client:
        ext = Extender(reg, client=client)
        srv = ExtenderServer(ext)
        port = await srv.start("127.0.0.1", 0)
        filter_args = {"Pod": pod("web", cpu="1"), "Nodes": None, "NodeNames": ["n0", "n1"]}
        bind_args = {"PodName": "web", "PodNamespace": "default", "PodUID": web["metadata"]["uid"], "Node": "n1"}
        preempt_args = {"Pod": pod("web"), "NodeNameToVictims": None,
                        "NodeNameToMetaVictims": {"n0": {"Pods": [], "NumPDBViolations": 0}}}
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http, anyio.create_task_group() as tg:
                # before the reflectors run at all: nothing has synced
                status, out = await post(http, "/filter", filter_args)
                assert status == 200 and out["NodeNames"] == [] and out["FailedNodes"] == {}
                assert "has not synced yet" in out["Error"] and "nodes" in out["Error"] and "pods" in out["Error"]

                tg.start_soon(srv.run_cache)
                for r in ext.reflectors:
                    if r.name != "pods":
                        await r.synced.wait()
                assert ext.scheduler.cluster.num_nodes == 2  # the nodes are in, the pods are not
                status, out = await post(http, "/filter", filter_args)
                assert status == 200 and out["NodeNames"] == [] and out["FailedAndUnresolvableNodes"] == {}
                assert out["Error"] == ("the extender's cluster cache has not synced yet (still listing pods); "
                                        "kube-scheduler will retry the pod")
                status, out = await post(http, "/prioritize", filter_args)
                assert status == 503 and "not synced" in out["Error"]
                status, out = await post(http, "/preempt", preempt_args)
                assert status == 503 and "not synced" in out["Error"]
                status, out = await post(http, "/bind", bind_args)
                assert status == 200 and "not synced" in out["Error"]
                assert "nodeName" not in api.get("pods", "web", "default")["spec"]
                async with http.get("/readyz") as r:
                    assert r.status == 503 and (await r.json())["synced"] is False
                async with http.get("/healthz") as r:
                    assert r.status == 200  # alive all along: liveness must not kill a syncing extender
                # bad input is still a 400, synced or not
                status, out = await post(http, "/filter", {"Pod": 7, "NodeNames": ["n0"]})
                assert status == 400 and "field Pod" in out["Error"]

                api.faults.remove(stuck)
                await next(r for r in ext.reflectors if r.name == "pods").synced.wait()
                status, out = await post(http, "/filter", filter_args)
                assert (status, out["Error"], out["NodeNames"]) == (200, "", ["n0", "n1"])
                status, out = await post(http, "/prioritize", filter_args)
                assert status == 200 and {h["Host"] for h in out} == {"n0", "n1"}
                status, out = await post(http, "/preempt", preempt_args)
                assert status == 200 and set(out["NodeNameToMetaVictims"]) == {"n0"}
                status, out = await post(http, "/bind", bind_args)
                assert (status, out) == (200, {"Error": ""})
                assert api.get("pods", "web", "default")["spec"]["nodeName"] == "n1"
                async with http.get("/readyz") as r:
                    assert r.status == 200
                tg.cancel_scope.cancel()
        finally:
            await srv.stop()


async def test_stateless_extender_has_nothing_to_sync():
    ext = Extender(build_registry(None, autoload=False))
    assert ext.synced and ext.not_synced() is None


async def test_extender_command_serves_health_on_its_own_address():
    """``koordfw extender --health-address``: the kubelet's probes get /healthz and /readyz there while the
    verbs stay on --listen (loopback in deploy/extender)."""
    import re
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "koordfw", "extender", "--listen", "127.0.0.1:0",
                             "--health-address", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        while not (lines and "listening on" in lines[-1]) and len(lines) < 20:
            lines.append(proc.stderr.readline())
        health = re.search(r"health on (http://\S+)/healthz", "".join(lines))
        verbs = re.search(r"listening on (http://\S+)/", "".join(lines))
        assert health and verbs, lines
        async with aiohttp.ClientSession() as http:
            async with http.get(health.group(1) + "/healthz") as r:
                assert r.status == 200 and (await r.json())["mode"] == "stateless"
            async with http.get(health.group(1) + "/readyz") as r:
                assert r.status == 200
            async with http.post(health.group(1) + "/filter", json={}) as r:
                assert r.status in (404, 405)  # only the health routes there
            async with http.get(verbs.group(1) + "/healthz") as r:
                assert r.status == 200
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


async def test_healthz_fails_when_the_cache_stays_unsynced_past_the_limit(api):
    """As the scheduler's: /healthz turns 500 (the kubelet restarts the extender) once its cache has
    been unsynced since the start for longer than --unhealthy-after-seconds, on the client's clock."""
    api.create(node("n0", cpu="4"))
    api.fail(500, method="GET", path="/api/v1/pods")
    now = [1000.0]
    async with KubeClient(api.url, qps=0, clock=lambda: now[0]) as client:
        ext = Extender(build_registry(None, autoload=False), client=client, unhealthy_after=60)
        srv = ExtenderServer(ext)
        port = await srv.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                async with http.get("/healthz") as r:
                    assert r.status == 200
                now[0] += 61
                async with http.get("/healthz") as r:
                    body = await r.json()
                    assert r.status == 500 and "caches not synced" in body["reason"] and "pods" in body["reason"]
        finally:
            await srv.stop()
