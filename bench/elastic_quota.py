"""elastic_quota overhead: scheduling throughput with and without quotas, and the runtime computation.

    .venv/bin/python bench/elastic_quota.py                 # 200 nodes, 2,000 pods, 8 quotas (2 parents)
    .venv/bin/python bench/elastic_quota.py --pods 5000 --quotas 32

Prints pods/s for the same cluster (a) without ElasticQuota objects (the plugin is idle), (b) with
quotas, plus the time of one full quota-tree refresh (pods → request/used → runtime of every quota).
"""

from __future__ import annotations

import argparse
import time

import anyio
import numpy as np
from koordfw_elastic_quota import Args, ElasticQuota

from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.engines.embedded import EmbeddedEngine, build_registry

NAME = "quota.scheduling.koordinator.sh/name"


def quotas(n: int) -> list[dict]:
    parents = max(1, n // 4)
    out = []
    for p in range(parents):
        out.append({"kind": "ElasticQuota", "metadata": {"name": f"parent-{p}", "namespace": "q",
                    "labels": {"quota.scheduling.koordinator.sh/is-parent": "true"}},
                    "spec": {"min": {"cpu": "10"}, "max": {"cpu": "100000"}}})
    for i in range(n):
        out.append({"kind": "ElasticQuota", "metadata": {"name": f"team-{i}", "namespace": "q",
                    "labels": {"quota.scheduling.koordinator.sh/parent": f"parent-{i % parents}"}},
                    "spec": {"min": {"cpu": str(4 + i % 5)}, "max": {"cpu": str(1000 + 10 * (i % 7))}}})
    return out


def build(nodes: int, pods: int, nq: int, with_quotas: bool, seed: int = 0) -> ClusterState:
    rng = np.random.default_rng(seed)
    c = ClusterState()
    for i in range(nodes):
        c.add_node(make_node(f"node-{i}", allocatable={"cpu": "32", "memory": "128Gi", "pods": "250"}))
    if with_quotas:
        for q in quotas(nq):
            c.set_object("ElasticQuota", q)
    for j in range(pods):
        cpu = ("250m", "500m", "1", "2")[int(rng.integers(4))]
        c.add_pod(make_pod(f"p{j}", "ns", requests={"cpu": cpu, "memory": "1Gi"}, priority=int(rng.integers(3)),
                           labels={NAME: f"team-{j % nq}"}))
    return c


def run(nodes: int, pods: int, nq: int, with_quotas: bool) -> tuple[float, int]:
    registry = build_registry(None, autoload=True, only={"elastic_quota"})
    cluster = build(nodes, pods, nq, with_quotas)

    async def go():
        engine = EmbeddedEngine(registry, cluster, start_time=0.0)
        t0 = time.perf_counter()
        await engine.run()
        return time.perf_counter() - t0, len(engine.bind_events)

    return anyio.run(go)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--quotas", type=int, default=8)
    a = ap.parse_args()
    base_s, base_n = run(a.nodes, a.pods, a.quotas, False)
    q_s, q_n = run(a.nodes, a.pods, a.quotas, True)
    print(f"nodes={a.nodes} pods={a.pods} quotas={a.quotas} (+{max(1, a.quotas // 4)} parents)")
    print(f"  no ElasticQuota objects : {base_n / base_s:8.0f} pods/s ({base_n} bound in {base_s:.2f}s)")
    print(f"  with quotas             : {q_n / q_s:8.0f} pods/s ({q_n} bound in {q_s:.2f}s)  "
          f"ratio {base_s / q_s:.2f}")
    cluster = build(a.nodes, a.pods, a.quotas, True)
    plugin, args = ElasticQuota(), Args()
    plugin.tree(cluster, args)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        cluster.generation += 1  # force a refresh
        plugin.tree(cluster, args)
    print(f"  one tree refresh        : {1000 * (time.perf_counter() - t0) / reps:8.2f} ms "
          f"({a.pods} pods, {a.quotas} quotas)")


if __name__ == "__main__":
    main()
