"""Throughput cost of the cpu_topology plugin: the same cluster and pods, plugin enabled vs disabled.

    python bench/cpu_topology.py                       # 1,000 nodes, 5,000 pods, 20% LSR
    python bench/cpu_topology.py --nodes 1000 --pods 10000 --json
    python bench/cpu_topology.py --nodes 5000 --pods 10000 --numa-policy SingleNUMANode   # issue 35's NUMA cost

With ``--numa-policy P`` both runs have the plugin on and a NodeResourceTopology per node (4 NUMA zones of 16
CPUs and 64 GiB); the second also labels every node ``node.koordinator.sh/numa-topology-policy: P``, so the
difference is the cost of the NUMA hint merge (filter, score, reserve) and the pods it refuses.

Nodes: 2 sockets × 2 NUMA nodes × 16 cores × 2 threads (64 CPUs) with the CPU topology annotation.
Pods: 20% LSR koord-prod with whole-core requests (1, 2, 4 or 8 CPUs; a quarter of them SpreadByPCPUs),
the rest LS services with fractional requests. Both modes go through the embedded kernel with the
built-in plugins; each run is a fresh process and the modes alternate (best of ``--repeat``), since a
shared machine's load otherwise decides the ratio. Prints pods/s side by side, the cost in %, and the
share of the enabled run's wall time spent inside cpu_topology's hooks (a load-independent check).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time

import anyio
import numpy as np
from koordfw_cpu_topology.topology import detail_for_test, topology_annotation

from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.engines.embedded import EmbeddedEngine, build_registry

LS_SHAPES = [("100m", "128Mi"), ("250m", "512Mi"), ("500m", "1Gi"), ("1", "2Gi"), ("2", "4Gi")]
LSR_CPUS = [1, 2, 4, 8]


def build(nodes: int, pods: int, lsr_share: float, seed: int, numa: str = "") -> tuple[ClusterState, list]:
    """``numa``: "" (no NodeResourceTopology), "nrt" (one per node, no policy) or a NUMA topology policy."""
    rng = np.random.default_rng(seed)
    ann = {"node.koordinator.sh/cpu-topology": topology_annotation(detail_for_test(2, 2, 16, 2))}
    cluster = ClusterState()
    zones = [{"name": f"node-{z}", "type": "Node",
              "resources": [{"name": "cpu", "capacity": "16", "allocatable": "16"},
                            {"name": "memory", "capacity": "64Gi", "allocatable": "64Gi"}]} for z in range(4)]
    for i in range(nodes):
        labels = {"kubernetes.io/hostname": f"node-{i}"}
        if numa not in ("", "nrt"):
            labels["node.koordinator.sh/numa-topology-policy"] = numa
        cluster.add_node(make_node(f"node-{i}", allocatable={"cpu": "64", "memory": "256Gi", "pods": "250"},
                                   annotations=ann, labels=labels))
        if numa:
            cluster.set_object("NodeResourceTopology", {"apiVersion": "topology.node.k8s.io/v1alpha1",
                                                        "kind": "NodeResourceTopology",
                                                        "metadata": {"name": f"node-{i}"}, "zones": zones})
    out = []
    for j in range(pods):
        if rng.random() < lsr_share:
            cpu = str(LSR_CPUS[int(rng.integers(len(LSR_CPUS)))])
            anns = {}
            if rng.random() < 0.25:
                anns["scheduling.koordinator.sh/resource-spec"] = '{"preferredCPUBindPolicy":"SpreadByPCPUs"}'
            req = {"cpu": cpu, "memory": "2Gi"}
            out.append(make_pod(f"lsr-{j}", "bench", requests=req, limits=req, annotations=anns, priority=9500,
                                labels={"koordinator.sh/qosClass": "LSR"}))
        else:
            cpu, mem = LS_SHAPES[int(rng.integers(len(LS_SHAPES)))]
            out.append(make_pod(f"ls-{j}", "bench", requests={"cpu": cpu, "memory": mem}, priority=9500,
                                labels={"koordinator.sh/qosClass": "LS"}))
    return cluster, out


async def _run(nodes: int, pods: int, lsr_share: float, seed: int, enabled: bool, numa: str = "") -> dict:
    cluster, pending = build(nodes, pods, lsr_share, seed, numa)
    registry = build_registry(None, only={"cpu_topology"}) if enabled else build_registry(None, autoload=False)
    engine = EmbeddedEngine(registry, cluster, seed=seed, start_time=1_000_000.0)
    for p in pending:
        cluster.add_pod(p)
    gc.collect()
    t0 = time.perf_counter()
    await engine.run()
    wall = time.perf_counter() - t0
    s = engine.scheduler
    cpusets = sum(1 for e in cluster.pods.values()
                  if "scheduling.koordinator.sh/resource-status" in e.pod.annotations)
    plugin_seconds = sum(sec for (plugin, _), (_, sec) in s.caller.durations.items() if plugin == "cpu_topology")
    return {"enabled": enabled, "nodes": nodes, "pods": pods, "bound": len(engine.bind_events), "cpusets": cpusets,
            "seconds": round(wall, 3), "pods_per_second": round(pods / wall, 1),
            "plugin_share_pct": round(100 * plugin_seconds / wall, 1),
            "p99_ms": round(float(np.percentile(np.array(engine.cycle_seconds), 99)) * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--lsr", type=float, default=0.2, help="share of LSR pods (default 0.2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode, alternating; the best is kept")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--numa-policy", default="", help="compare the plugin without and with this NUMA topology "
                    "policy on every node (None, BestEffort, Restricted, SingleNUMANode)")
    ap.add_argument("--one", choices=("on", "off"), help=argparse.SUPPRESS)
    ap.add_argument("--numa", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        res = anyio.run(_run, a.nodes, a.pods, a.lsr, a.seed, a.one == "on", a.numa)
        print(json.dumps(res))
        return 0
    rows: dict[str, dict] = {}
    for _ in range(a.repeat):  # alternate so that load from other jobs hits both modes alike
        for mode in ("off", "on"):
            extra = []
            if a.numa_policy:  # both with the plugin: without vs with the policy
                extra = ["--one", "on", "--numa", "nrt" if mode == "off" else a.numa_policy]
            else:
                extra = ["--one", mode]
            outp = subprocess.run([sys.executable, __file__, "--nodes", str(a.nodes), "--pods", str(a.pods),
                                   "--lsr", str(a.lsr), "--seed", str(a.seed), *extra],
                                  check=True, capture_output=True, text=True).stdout
            r = json.loads(outp.strip().splitlines()[-1])
            if mode not in rows or r["pods_per_second"] > rows[mode]["pods_per_second"]:
                rows[mode] = r
    cost = 100 * (1 - rows["on"]["pods_per_second"] / rows["off"]["pods_per_second"])
    if a.json:
        print(json.dumps({"disabled": rows["off"], "enabled": rows["on"], "cost_pct": round(cost, 1)}))
        return 0
    print(f"{a.nodes} nodes (2×2×16×2), {a.pods} pods, {a.lsr:.0%} LSR"
          + (f"; plugin on in both, NUMA policy {a.numa_policy} in the second" if a.numa_policy else ""))
    print(f"{'':10}{'pods/s':>10}{'p99 ms':>10}{'bound':>8}{'cpusets':>9}")
    names = (("no policy", "off"), (a.numa_policy, "on")) if a.numa_policy else (("disabled", "off"), ("enabled", "on"))
    for label, mode in names:
        r = rows[mode]
        print(f"{label:10}{r['pods_per_second']:>10}{r['p99_ms']:>10}{r['bound']:>8}{r['cpusets']:>9}")
    print(f"cost: {cost:.1f}% of throughput (best of {a.repeat} alternating runs per mode); "
          f"time inside cpu_topology hooks: {rows['on']['plugin_share_pct']}% of the enabled run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
