"""Scheduling throughput of the kernel with the built-in plugins on synthetic clusters.

    python bench/throughput.py --nodes 5000 --pods 10000 --json
    python bench/throughput.py --table            # 500, 1,000, 5,000, 10,000 nodes
    python bench/throughput.py --nodes 10000 --pods 100000 --json   # memory: 100k pods placed
    python bench/throughput.py --scenario cpu-topology   # 1,000 NUMA nodes, 20% LSR: plugin on vs off

Prints pods/s, per-pod scheduling-cycle p50/p99 (ms), the kernel's overhead (time in scheduling
cycles outside plugin bodies, as % of cycle time) and peak RSS. Runs on one core (one event loop).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time

import anyio
import numpy as np

from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.engines.embedded import EmbeddedEngine, build_registry

POD_SHAPES = [  # (cpu, memory, weight): a mix of small services and larger jobs
    ("100m", "128Mi", 30), ("250m", "512Mi", 25), ("500m", "1Gi", 20), ("1", "2Gi", 15), ("2", "4Gi", 7),
    ("4", "8Gi", 3),
]
NODE_SHAPES = [("16", "64Gi"), ("32", "128Gi"), ("64", "256Gi")]


def build_cluster(nodes: int, pods: int, seed: int) -> tuple[ClusterState, list]:
    rng = np.random.default_rng(seed)
    cluster = ClusterState()
    for i in range(nodes):
        cpu, mem = NODE_SHAPES[i % len(NODE_SHAPES)]
        labels = {"topology.kubernetes.io/zone": f"zone-{i % 3}", "kubernetes.io/hostname": f"node-{i}"}
        taints = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}] if i % 50 == 0 else None
        cluster.add_node(make_node(f"node-{i}", allocatable={"cpu": cpu, "memory": mem, "pods": "250"},
                                   labels=labels, taints=taints))
    weights = np.array([w for *_, w in POD_SHAPES], dtype=float)
    choice = rng.choice(len(POD_SHAPES), size=pods, p=weights / weights.sum())
    out = []
    for j in range(pods):
        cpu, mem, _ = POD_SHAPES[choice[j]]
        spec = {}
        if j % 20 == 0:
            spec["nodeSelector"] = {"topology.kubernetes.io/zone": f"zone-{j % 3}"}
        p = make_pod(f"pod-{j}", "bench", requests={"cpu": cpu, "memory": mem}, priority=int(rng.integers(0, 3)) * 100,
                     **spec)
        out.append(p)
    return cluster, out


async def _run(nodes: int, pods: int, seed: int) -> dict:
    cluster, pending = build_cluster(nodes, pods, seed)
    registry = build_registry(None, autoload=False)
    engine = EmbeddedEngine(registry, cluster, seed=seed, start_time=1_000_000.0)
    for p in pending:
        cluster.add_pod(p)
    s = engine.scheduler
    gc.collect()
    t0 = time.perf_counter()
    await engine.run()
    wall = time.perf_counter() - t0
    cycles = np.array(engine.cycle_seconds)
    # binding runs inline in the embedded engine, so bind-cycle plugins are inside the cycle time too
    plugin_in_cycle = sum(sec for (plugin, hook), (_, sec) in s.caller.durations.items()
                          if hook not in ("startup", "shutdown", "node_resources"))
    cycle_total = float(cycles.sum())
    bound = len(engine.bind_events)
    return {
        "nodes": nodes, "pods": pods, "bound": bound, "seconds": round(wall, 3),
        "pods_per_second": round(pods / wall, 1),
        "p50_ms": round(float(np.percentile(cycles, 50)) * 1000, 3),
        "p99_ms": round(float(np.percentile(cycles, 99)) * 1000, 3),
        "kernel_overhead_pct": round(100 * (cycle_total - plugin_in_cycle) / cycle_total, 1) if cycle_total else 0.0,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def run(nodes: int, pods: int, seed: int = 1) -> dict:
    return anyio.run(_run, nodes, pods, seed)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--scenario" in argv:
        i = argv.index("--scenario")
        scenario, rest = argv[i + 1] if i + 1 < len(argv) else "", argv[:i] + argv[i + 2:]
        if scenario == "cpu-topology":  # the cpu_topology plugin's side-by-side run (bench/cpu_topology.py)
            sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
            import cpu_topology

            return cpu_topology.main(rest)
        if scenario != "builtins":
            print(f"unknown scenario {scenario!r}: use builtins or cpu-topology", file=sys.stderr)
            return 2
        argv = rest
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--table", action="store_true", help="run 500, 1000, 5000 and 10000 nodes (each in a fresh process)")
    a = ap.parse_args(argv)
    if a.table:
        import subprocess

        rows = []
        for n in (500, 1000, 5000, 10000):
            outp = subprocess.run([sys.executable, __file__, "--nodes", str(n), "--pods", str(a.pods), "--json",
                                   "--seed", str(a.seed)], check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(outp))
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"kernel throughput, built-in plugins, {a.pods} pods")
        for col in ("nodes", "pods/s", "p50 ms", "p99 ms", "kernel overhead %", "peak RSS MB"):
            t.add_column(col, justify="right")
        for r in rows:
            t.add_row(str(r["nodes"]), str(r["pods_per_second"]), str(r["p50_ms"]), str(r["p99_ms"]),
                      str(r["kernel_overhead_pct"]), str(r["peak_rss_mb"]))
        Console().print(t)
        return 0
    res = run(a.nodes, a.pods, a.seed)
    print(json.dumps(res) if a.json else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
