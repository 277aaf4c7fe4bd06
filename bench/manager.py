"""``koordfw manager``'s node-resources controller: time per node of a resync pass at 1,000 nodes.

The fake API server runs in its own process with 1,000 nodes (32 cores, 128 GiB), 20 running pods per
node (14 prod LS, 6 koord-batch BE, requests 500m-2 cores) and one NodeMetric per node that reports
every pod's usage; the slo-controller-config ConfigMap enables colocation. The manager (the
batch_resource and gpu_share plugins, client QPS unlimited) lists and watches it; then, on an injected
clock, four passes over every node are timed:

* first: the first pass after start, every node's batch resources written (1,000 status PATCHes);
* steady: a resync with nothing changed (the plugins compute, Koordinator's rule says no write);
* expired: a resync past updateTimeThresholdSeconds with the same values (a sync, but no PATCH: the node
  already holds them);
* reconfigured: the ConfigMap's cpuReclaimThresholdPercent 60 -> 70, every node rewritten, measured from
  the ConfigMap update to the last node's PATCH.

Usage: python bench/manager.py [--nodes 1000] [--pods-per-node 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import sys
import time

import anyio

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.manager import KubeManager
from koordfw.engines.kube.noderesource import NodeResourceController
from koordfw.extension import BATCH_CPU
from koordfw.log import configure
from koordfw.testing.fake_apiserver import FakeApiServer

NS = "koordinator-system"
CONFIG = "slo-controller-config"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def serve(args: argparse.Namespace) -> None:
    rng = random.Random(42)
    now = time.time()
    async with FakeApiServer(history=1_000_000, bookmark_interval=5) as api:
        api.create({"kind": "ConfigMap", "metadata": {"name": CONFIG, "namespace": NS},
                    "data": {"colocation-config": json.dumps({"enable": True})}}, "configmaps")
        for i in range(args.nodes):
            name = f"node-{i:04d}"
            res = {"cpu": "32", "memory": "128Gi", "pods": "110"}
            alloc = {"cpu": "31", "memory": "124Gi", "pods": "110"}
            api.create({"kind": "Node", "metadata": {"name": name}, "spec": {},
                        "status": {"capacity": res, "allocatable": alloc}}, "nodes")
            pods_metric = []
            for j in range(args.pods_per_node):
                batch = j % 10 >= 7
                cpu = rng.choice((500, 1000, 2000))
                pname = f"{name}-p{j:02d}"
                labels = {"koordinator.sh/qosClass": "BE" if batch else "LS"}
                if batch:
                    req = {"kubernetes.io/batch-cpu": str(cpu), "kubernetes.io/batch-memory": "2Gi"}
                else:
                    req = {"cpu": f"{cpu}m", "memory": "2Gi"}
                api.create({"kind": "Pod", "metadata": {"name": pname, "namespace": "bench", "labels": labels},
                            "spec": {"nodeName": name, "schedulerName": "default-scheduler",
                                     "priorityClassName": "koord-batch" if batch else "koord-prod",
                                     "priority": 5500 if batch else 9500,
                                     "containers": [{"name": "c", "resources": {"requests": req}}]},
                            "status": {"phase": "Running"}}, "pods")
                used = int(cpu * rng.uniform(0.2, 0.9))
                pods_metric.append({"namespace": "bench", "name": pname,
                                    "priority": "koord-batch" if batch else "koord-prod",
                                    "podUsage": {"resources": {"cpu": f"{used}m", "memory": "1Gi"}}})
            api.create({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                        "status": {"updateTime": _iso(now),
                                   "nodeMetric": {"nodeUsage": {"resources": {"cpu": "10", "memory": "40Gi"}},
                                                  "systemUsage": {"resources": {"cpu": "1", "memory": "4Gi"}}},
                                   "podsMetric": pods_metric}}, "nodemetrics")
        print(json.dumps({"url": api.url, "now": now}), flush=True)
        await anyio.sleep_forever()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def main(args: argparse.Namespace) -> None:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", "--nodes", str(args.nodes),
                             "--pods-per-node", str(args.pods_per_node)], stdout=subprocess.PIPE, text=True)
    try:
        hello = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        clock = Clock(hello["now"] + 60)
        client = KubeClient(hello["url"], qps=0)
        ctl = NodeResourceController(resync_period=86400)
        m = KubeManager(build_registry(None, only=["batch_resource", "gpu_share"]), client, controllers=[ctl],
                        clock=clock)
        results: dict[str, tuple[float, int]] = {}
        async with anyio.create_task_group() as tg:
            t_start = time.perf_counter()
            tg.start_soon(m.run)
            await m.started.wait()
            t_synced = time.perf_counter()
            while ctl.ctx is None:
                await anyio.sleep(0.001)
            t0 = t_synced  # the controller starts with the first pass as soon as the manager leads
            await ctl.settled()
            results["first"] = (time.perf_counter() - t0, ctl.writes)
            for name, advance in (("steady", 0.0), ("expired", 301.0)):
                clock.t += advance
                writes = ctl.writes
                t0 = time.perf_counter()
                ctl.resync()
                await ctl.settled()
                results[name] = (time.perf_counter() - t0, ctl.writes - writes)
            writes = ctl.writes
            t0 = time.perf_counter()
            await client.request("PATCH", f"/api/v1/namespaces/{NS}/configmaps/{CONFIG}",
                                 body={"data": {"colocation-config": json.dumps(
                                     {"enable": True, "cpuReclaimThresholdPercent": 70})}},
                                 content_type="application/merge-patch+json")
            while ctl.writes - writes < args.nodes:
                await anyio.sleep(0.005)
            await ctl.settled()
            results["reconfigured"] = (time.perf_counter() - t0, ctl.writes - writes)
            batch = [n.allocatable.get(BATCH_CPU) for n in (v.node for v in m.cluster.nodes)]
            m.stop()
        await client.close()
    finally:
        proc.terminate()
        proc.wait()
    pods = args.nodes * args.pods_per_node
    print(f"manager: {args.nodes} nodes, {pods} pods, {args.nodes} NodeMetrics "
          f"(caches synced in {t_synced - t_start:.2f} s)")
    print(f"{'pass':<14}{'seconds':>9}{'ms/node':>10}{'PATCHes':>9}")
    for name, (sec, writes) in results.items():
        print(f"{name:<14}{sec:>9.3f}{1000 * sec / args.nodes:>10.3f}{writes:>9}")
    have = [b for b in batch if b is not None]
    print(f"batch-cpu on {len(have)} nodes, min {min(have)} max {max(have)} milli-cores")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    configure(level="warning")
    anyio.run(serve if a.serve else main, a)
