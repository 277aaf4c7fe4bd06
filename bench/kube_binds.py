"""End-to-end binds per second of ``koordfw scheduler`` against the fake API server on loopback.

The fake runs in its own process with 1,000 nodes and 5,000 pending pods; the live scheduler engine
lists and watches it, schedules and POSTs the bindings. Measured from the moment the caches are synced
to the 5,000th successful binding, at the default client limit (50 QPS / burst 100, target >= 45/s)
and with the limit raised (target >= 300/s).
Usage: python bench/kube_binds.py [--nodes 1000] [--pods 5000] [--raised-qps 1000] [--skip-default]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import anyio

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.fake_apiserver import FakeApiServer

SCHED = "koordfw-scheduler"


async def serve(args: argparse.Namespace) -> None:
    async with FakeApiServer(history=1_000_000, bookmark_interval=5) as api:
        for i in range(args.nodes):
            alloc = {"cpu": "64", "memory": "256Gi", "pods": "110"}
            api.create({"kind": "Node", "metadata": {"name": f"node-{i:04d}"}, "spec": {},
                        "status": {"capacity": alloc, "allocatable": alloc}})
        for j in range(args.pods):
            api.create({"kind": "Pod", "metadata": {"name": f"pod-{j:05d}", "namespace": "bench"},
                        "spec": {"schedulerName": SCHED, "containers": [
                            {"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]}})
        print(json.dumps({"url": api.url}), flush=True)
        await anyio.sleep_forever()


async def run_once(args: argparse.Namespace, qps: float, burst: int) -> tuple[float, int, float]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", "--nodes", str(args.nodes), "--pods", str(args.pods)],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = json.loads(proc.stdout.readline())["url"]
        client = KubeClient(url, qps=qps, burst=burst)
        events = KubeClient(url, qps=qps, burst=burst)
        eng = KubeSchedulerEngine(build_registry(None, autoload=False), client, event_client=events)
        async with anyio.create_task_group() as tg:
            tg.start_soon(eng.run)
            await eng.started.wait()
            t0 = time.perf_counter()
            while eng.binder.bound < args.pods:
                await anyio.sleep(0.05)
            dt = time.perf_counter() - t0
            eng.stop()
        await client.close()
        await events.close()
        return args.pods / dt, eng.binder.bound, dt
    finally:
        proc.terminate()
        proc.wait()


async def main(args: argparse.Namespace) -> None:
    print(f"live scheduler -> fake API server (own process), {args.nodes} nodes, {args.pods} pods")
    if not args.skip_default:
        rate, n, dt = await run_once(args, 50, 100)
        print(f"  default limit 50 QPS / burst 100: {rate:7.1f} binds/s  ({n} binds in {dt:.1f} s; target >= 45/s: "
              f"{'met' if rate >= 45 else 'NOT met'})")
    rate, n, dt = await run_once(args, args.raised_qps, args.raised_qps)
    print(f"  raised limit {args.raised_qps:g} QPS:          {rate:7.1f} binds/s  ({n} binds in {dt:.1f} s; target >= 300/s: "
          f"{'met' if rate >= 300 else 'NOT met'})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--raised-qps", type=float, default=1000)
    ap.add_argument("--skip-default", action="store_true")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    anyio.run(serve if a.serve else main, a)
