"""Benchmark: the pod admission webhook's latency for one pod (koordfw manager's /mutate-pod, /validate-pod).

A fake API server on loopback holds --profiles ClusterColocationProfiles (one matches the pod: BE,
koord-batch PriorityClass, labels, a strategic merge patch; the others select other pods), a labelled
Namespace and the PriorityClass; the webhook server (plain HTTP on loopback, its reflectors synced) gets
--requests AdmissionReviews of a two-container Spark-executor-like pod, one at a time over a keep-alive
connection, as the API server sends them. Prints p50/p99/max per request (client-side round trip:
the HTTP request, the JSON decode, the plugin, the JSONPatch and the answer) and the requests per second.

    .venv/bin/python bench/webhook.py [--requests 3000] [--profiles 10]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time

import aiohttp
import anyio

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.webhook import WebhookServer
from koordfw.testing.fake_apiserver import FakeApiServer

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"generateName": "exec-", "namespace": "spark",
                    "labels": {"spark-role": "executor", "spark-app-selector": "spark-1234"}},
       "spec": {"schedulerName": "default-scheduler", "priority": 0,
                "containers": [{"name": "executor", "image": "spark:3.5",
                                "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                              "limits": {"cpu": "2", "memory": "4Gi"}}},
                               {"name": "sidecar", "image": "envoy",
                                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                                              "limits": {"cpu": "1", "memory": "512Mi"}}}]}}


def objects(n_profiles: int) -> list[dict]:
    out: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "spark", "labels": {"colocation": "on"}}},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"},
         "value": 5500},
        {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
         "metadata": {"name": "spark-executors"},
         "spec": {"namespaceSelector": {"matchLabels": {"colocation": "on"}},
                  "selector": {"matchLabels": {"spark-role": "executor"}}, "qosClass": "BE",
                  "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
                  "schedulerName": "koord-scheduler", "labels": {"koordinator.sh/mutated": "true"},
                  "patch": {"spec": {"tolerations": [{"key": "batch", "operator": "Exists"}]}}}}]
    for i in range(n_profiles - 1):
        out.append({"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                    "metadata": {"name": f"other-{i:03d}"},
                    "spec": {"selector": {"matchLabels": {"app": f"other-{i}"}}, "qosClass": "LS"}})
    return out


def review(i: int) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": f"uid-{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "resource": {"group": "", "version": "v1", "resource": "pods"},
                                   "namespace": "spark", "operation": "CREATE", "object": POD}}).encode()


async def main(a: argparse.Namespace) -> None:
    async with FakeApiServer() as api, KubeClient(api.url, qps=0) as client:
        for obj in objects(a.profiles):
            api.create(obj)
        server = WebhookServer(host="127.0.0.1", port=0)
        registry = build_registry({}, only=["colocation_profile"])
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, client, registry)
            await server.listening.wait()
            while server._unsynced():
                await anyio.sleep(0.01)
            bodies = [review(i) for i in range(a.requests + a.warmup)]
            results = {}
            async with aiohttp.ClientSession() as s:
                for path in ("/mutate-pod", "/validate-pod"):
                    url = f"http://127.0.0.1:{server.bound_port}{path}"
                    lat = []
                    t_all = time.perf_counter()
                    for i, body in enumerate(bodies):
                        t0 = time.perf_counter()
                        async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                            out = await r.json()
                        dt = time.perf_counter() - t0
                        if i == 0 and path == "/mutate-pod":
                            ops = json.loads(base64.b64decode(out["response"]["patch"]))
                            assert out["response"]["allowed"] and ops, out
                        if i >= a.warmup:
                            lat.append(dt)
                    wall = time.perf_counter() - t_all
                    lat.sort()
                    results[path] = (statistics.median(lat), lat[int(0.99 * (len(lat) - 1))], lat[-1],
                                     len(bodies) / wall)
            tg.cancel_scope.cancel()
    print(f"webhook, one pod per request, {a.profiles} ClusterColocationProfiles, {a.requests} requests "
          f"(after {a.warmup} warm-up)")
    print(f"{'path':<14} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'req/s':>8}")
    for path, (p50, p99, mx, rps) in results.items():
        print(f"{path:<14} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {mx * 1e3:8.3f} {rps:8.0f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--profiles", type=int, default=10)
    anyio.run(main, p.parse_args())
