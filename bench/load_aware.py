"""Cost of load_aware and batch_resource on synthetic clusters with a NodeMetric per node.

    python bench/load_aware.py                     # 1,000 and 5,000 nodes, 2,000 pods
    python bench/load_aware.py --nodes 5000 --pods 5000

Schedules the same pods twice, with the built-ins only and with load_aware added, and prints pods/s
of both and the ratio; then times batch_resource's node_resources calculation per node (20 pods each).
"""

from __future__ import annotations

import argparse
import time

import anyio
import numpy as np

from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.engines.embedded import EmbeddedEngine, build_registry

NOW = 1_800_000_000.0


def metric(name: str, rng: np.random.Generator, pods: list) -> dict:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "status": {"updateTime": NOW - 30,
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": f"{int(rng.integers(1000, 20000))}m",
                                                                  "memory": f"{int(rng.integers(4, 60))}Gi"}},
                                      "systemUsage": {"resources": {"cpu": "1", "memory": "2Gi"}}},
                       "podsMetric": [{"namespace": p.namespace, "name": p.name,
                                       "podUsage": {"resources": {"cpu": "300m", "memory": "512Mi"}}} for p in pods]}}


def build(nodes: int, pods: int, seed: int, per_node: int = 0):
    rng = np.random.default_rng(seed)
    cluster = ClusterState()
    for i in range(nodes):
        cluster.add_node(make_node(f"node-{i}", allocatable={"cpu": "32", "memory": "128Gi", "pods": "250"}))
    for i in range(nodes):
        bound = [make_pod(f"ls-{i}-{k}", "svc", requests={"cpu": "1", "memory": "2Gi"}, priority=9500,
                          labels={"koordinator.sh/qosClass": "LS"}, node_name=f"node-{i}") for k in range(per_node)]
        for p in bound:
            cluster.add_pod(p)
        cluster.set_object("NodeMetric", metric(f"node-{i}", rng, bound))
    pending = [make_pod(f"p-{j}", "bench", requests={"cpu": "500m", "memory": "1Gi"}, priority=9500,
                        labels={"koordinator.sh/qosClass": "LS"}) for j in range(pods)]
    return cluster, pending


async def schedule(nodes: int, pods: int, seed: int, plugins: list[str]) -> float:
    cluster, pending = build(nodes, pods, seed)
    registry = build_registry(None, autoload=bool(plugins), only=set(plugins))
    engine = EmbeddedEngine(registry, cluster, seed=seed, start_time=NOW)
    await engine.scheduler.startup()
    for p in pending:
        cluster.add_pod(p)
        await engine.scheduler.enqueue(p)
    t0 = time.perf_counter()
    await engine.drive()
    return pods / (time.perf_counter() - t0)


def batch_calc(nodes: int, seed: int) -> float:
    from koordfw_batch_resource import BatchResource, ColocationStrategy

    cluster, _ = build(nodes, 0, seed, per_node=20)
    plugin, args = BatchResource(), ColocationStrategy()
    t0 = time.perf_counter()
    for v in cluster.nodes:
        plugin.node_resources(node=v, pods=cluster.pods_on(v.name), metric=cluster.node_metric(v.name), now=NOW,
                              args=args)
    return (time.perf_counter() - t0) / nodes * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, action="append")
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(f"{'nodes':>6} {'pods':>6} {'built-ins pods/s':>17} {'+load_aware pods/s':>19} {'ratio':>6} "
          f"{'batch calc us/node':>19}")
    for n in a.nodes or [1000, 5000]:
        base = anyio.run(schedule, n, a.pods, a.seed, [])
        la = anyio.run(schedule, n, a.pods, a.seed, ["load_aware"])
        us = batch_calc(n, a.seed)
        print(f"{n:>6} {a.pods:>6} {base:>17.0f} {la:>19.0f} {la / base:>6.2f} {us:>19.1f}")


if __name__ == "__main__":
    main()
