"""Extender round-trip latency: filter + prioritize over HTTP with 1,000 nodes in NodeNames mode.

The extender keeps its cluster cache from the fake API server (1,000 nodes, 3,000 running pods), and a
client posts kube-scheduler-shaped requests on loopback. Prints p50/p90/p99 of one filter+prioritize
pair (target: p99 < 10 ms). Usage: python bench/kube_extender.py [--nodes 1000] [--requests 500] [--all-plugins]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import aiohttp
import anyio

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.extender import Extender, ExtenderServer
from koordfw.testing.fake_apiserver import FakeApiServer


def node(i: int) -> dict:
    alloc = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return {"kind": "Node", "metadata": {"name": f"node-{i:04d}", "labels": {"zone": f"z{i % 3}"}},
            "spec": {}, "status": {"capacity": alloc, "allocatable": alloc}}


def pod(name: str, node_name: str | None = None, cpu: str = "500m") -> dict:
    spec = {"schedulerName": "default-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "bench"}, "spec": spec}


async def serve(args: argparse.Namespace) -> None:
    """The extender process (as kube-scheduler would reach it): cache from the fake API server."""
    from koordfw.log import configure

    configure("json", "warning")  # logs to stderr: stdout carries the handshake line
    async with FakeApiServer(history=100_000, bookmark_interval=30) as api:
        for i in range(args.nodes):
            api.create(node(i))
        for j in range(args.nodes * 3):
            api.create(pod(f"run-{j}", f"node-{j % args.nodes:04d}", cpu=f"{(j % 7) + 1}"))
        client = KubeClient(api.url, qps=0)
        reg = build_registry(None, autoload=True if args.all_plugins else False)
        ext = Extender(reg, client=client)
        srv = ExtenderServer(ext, prefix="colo")
        port = await srv.start("127.0.0.1", 0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(srv.run_cache)
            for r in ext.reflectors:
                await r.synced.wait()
            print(json.dumps({"port": port, "plugins": sorted(reg.plugins)}), flush=True)
            await anyio.sleep_forever()


async def main(args: argparse.Namespace) -> None:
    cmd = [sys.executable, __file__, "--serve", "--nodes", str(args.nodes)] + (["--all-plugins"] if args.all_plugins else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        hello = json.loads(proc.stdout.readline())
        port = hello["port"]
        names = [f"node-{i:04d}" for i in range(args.nodes)]
        lat = []
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            for k in range(args.requests + 20):
                p = pod(f"web-{k}")
                p["metadata"]["uid"] = f"uid-web-{k}"
                body = json.dumps({"Pod": p, "Nodes": None, "NodeNames": names})
                t0 = time.perf_counter()
                async with http.post("/colo/filter", data=body, headers={"Content-Type": "application/json"}) as r:
                    out = json.loads(await r.read())
                kept = out["NodeNames"]
                body2 = json.dumps({"Pod": p, "Nodes": None, "NodeNames": kept})
                async with http.post("/colo/prioritize", data=body2, headers={"Content-Type": "application/json"}) as r:
                    scores = json.loads(await r.read())
                dt = time.perf_counter() - t0
                assert len(scores) == len(kept) and not out["Error"]
                if k >= 20:  # warm-up
                    lat.append(dt * 1000)
    finally:
        proc.terminate()
        proc.wait()
    lat.sort()
    q = statistics.quantiles(lat, n=100)
    print(f"extender filter+prioritize, {args.nodes} nodes (NodeNames mode), {len(lat)} round trips, "
          f"extender in its own process; plugins: {', '.join(hello['plugins'])}")
    print(f"  p50 {q[49]:.2f} ms   p90 {q[89]:.2f} ms   p99 {q[98]:.2f} ms   max {lat[-1]:.2f} ms   "
          f"(target p99 < 10 ms: {'met' if q[98] < 10 else 'NOT met'})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--all-plugins", action="store_true", help="load every installed plugin, not only the built-ins")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    anyio.run(serve if a.serve else main, a)
