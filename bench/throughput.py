"""Scheduling throughput of the kernel with the built-in plugins on synthetic clusters.

    python bench/throughput.py --nodes 5000 --pods 10000 --json
    python bench/throughput.py --table            # 500, 1,000, 5,000, 10,000 nodes
    python bench/throughput.py --nodes 10000 --pods 100000 --json   # memory: 100k pods placed
    python bench/throughput.py --scenario cpu-topology   # 1,000 NUMA nodes, 20% LSR: plugin on vs off
    python bench/throughput.py --scenario topology       # 5,000 nodes: kube's scheduler_perf workloads
    python bench/throughput.py --nodes 5000 --pods 10000 --binds /tmp/binds.txt   # placements, to diff two trees

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


async def _run(nodes: int, pods: int, seed: int, binds: str | None = None) -> dict:
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
    if binds:  # one "uid node" line per bind, in bind order: identical files mean identical placements
        with open(binds, "w") as f:
            f.writelines(f"{uid} {node}\n" for uid, node in engine.bind_events)
    return {
        "nodes": nodes, "pods": pods, "bound": bound, "seconds": round(wall, 3),
        "pods_per_second": round(pods / wall, 1),
        "p50_ms": round(float(np.percentile(cycles, 50)) * 1000, 3),
        "p99_ms": round(float(np.percentile(cycles, 99)) * 1000, 3),
        "kernel_overhead_pct": round(100 * (cycle_total - plugin_in_cycle) / cycle_total, 1) if cycle_total else 0.0,
        # the kernel's own time per pod (cycle time outside plugin calls): issue 31's before/after figure
        "kernel_us_per_pod": round(1e6 * (cycle_total - plugin_in_cycle) / max(bound, 1), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def run(nodes: int, pods: int, seed: int = 1, binds: str | None = None) -> dict:
    return anyio.run(_run, nodes, pods, seed, binds)


# -- kube-scheduler's scheduler_perf workloads (test/integration/scheduler_perf/*/performance-config.yaml) --------
#: kube's CI floor for each workload at 5,000 nodes (pods/s, Go, 16 threads)
KUBE_THRESHOLDS = {"SchedulingBasic": 680, "SchedulingPodAntiAffinity": 60, "TopologySpreading": 460,
                   "SchedulingPodAffinity": 35}
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def _anti(j: int, ns: str) -> object:
    # pod-with-pod-anti-affinity.yaml: color=green, required anti-affinity to color=green on the hostname
    return make_pod(f"anti-{ns}-{j}", ns, labels={"color": "green"}, requests={"cpu": "100m", "memory": "500Mi"},
                    affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": HOST,
                        "namespaceSelector": {}}]}})


def _spread(j: int, ns: str) -> object:
    # pod-with-topology-spreading.yaml: color=blue, maxSkew 5 over zones, DoNotSchedule
    return make_pod(f"spread-{ns}-{j}", ns, labels={"color": "blue"}, requests={"cpu": "100m", "memory": "500Mi"},
                    topologySpreadConstraints=[{"maxSkew": 5, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                                "labelSelector": {"matchLabels": {"color": "blue"}}}])


def _affinity(j: int, ns: str) -> object:
    # pod-with-pod-affinity.yaml: color=blue, required affinity to color=blue in the zone
    return make_pod(f"aff-{ns}-{j}", ns, labels={"color": "blue"}, requests={"cpu": "100m", "memory": "500Mi"},
                    affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"color": "blue"}}, "topologyKey": ZONE,
                        "namespaceSelector": {}}]}})


def _plain(j: int, ns: str) -> object:
    return make_pod(f"plain-{ns}-{j}", ns, requests={"cpu": "100m", "memory": "500Mi"})


WORKLOADS = {  # name: (kube's workload, init pod maker, measured pod makers (cycled))
    "basic": ("SchedulingBasic", _plain, (_plain,)),
    "anti-affinity": ("SchedulingPodAntiAffinity", _anti, (_anti,)),
    "topology-spread": ("TopologySpreading", _plain, (_spread,)),
    "pod-affinity": ("SchedulingPodAffinity", _affinity, (_affinity,)),
    # 30% anti-affinity, 30% zone spread, 40% plain
    "mix-30-30": ("", _plain, (_anti, _spread, _plain, _anti, _spread, _plain, _anti, _spread, _plain, _plain)),
}


async def _run_workload(name: str, nodes: int, init: int, measure: int, seed: int) -> dict:
    kube, make_init, makers = WORKLOADS[name]
    cluster = ClusterState()
    for i in range(nodes):
        cluster.add_node(make_node(f"node-{i}", allocatable={"cpu": "4", "memory": "32Gi", "pods": "110"},
                                   labels={HOST: f"node-{i}", ZONE: f"zone-{i % 3}"}))
    rng = np.random.default_rng(seed)
    # init pods bound directly (scheduler_perf creates them before measuring), one per node at random
    for j, i in enumerate(rng.permutation(nodes)[:init].tolist()):
        p = make_init(j, "init")
        cluster.add_pod(p)
        cluster.assume(p, f"node-{i}")
    pending = [makers[j % len(makers)](j, "measure") for j in range(measure)]
    registry = build_registry(None, autoload=False)
    engine = EmbeddedEngine(registry, cluster, seed=seed, start_time=1_000_000.0)
    for p in pending:
        cluster.add_pod(p)
    gc.collect()
    t0 = time.perf_counter()
    await engine.run()
    wall = time.perf_counter() - t0
    cycles = np.array(engine.cycle_seconds)
    return {"workload": name, "kube_workload": kube, "nodes": nodes, "init_pods": init, "pods": measure,
            "bound": len(engine.bind_events), "seconds": round(wall, 3), "pods_per_second": round(measure / wall, 1),
            "p50_ms": round(float(np.percentile(cycles, 50)) * 1000, 3),
            "p99_ms": round(float(np.percentile(cycles, 99)) * 1000, 3),
            "kube_threshold": KUBE_THRESHOLDS.get(kube)}


def topology_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="kube scheduler_perf workloads through the built-ins")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--init-pods", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = [anyio.run(_run_workload, w, a.nodes, a.init_pods, a.pods, a.seed) for w in (a.workload or list(WORKLOADS))]
    if a.json:
        print(json.dumps(rows))
        return 0
    print(f"{'workload':<18} {'kube workload':<26} {'pods/s':>9} {'kube floor':>10} {'ratio':>6} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'bound':>6}")
    for r in rows:
        floor = r["kube_threshold"]
        ratio = f"{r['pods_per_second'] / floor:.1f}x" if floor else ""
        print(f"{r['workload']:<18} {r['kube_workload']:<26} {r['pods_per_second']:>9} {floor or '':>10} {ratio:>6} "
              f"{r['p50_ms']:>7} {r['p99_ms']:>7} {r['bound']:>6}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--scenario" in argv:
        i = argv.index("--scenario")
        scenario, rest = argv[i + 1] if i + 1 < len(argv) else "", argv[:i] + argv[i + 2:]
        if scenario == "cpu-topology":  # the cpu_topology plugin's side-by-side run (bench/cpu_topology.py)
            sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
            import cpu_topology

            return cpu_topology.main(rest)
        if scenario == "topology":
            return topology_main(rest)
        if scenario != "builtins":
            print(f"unknown scenario {scenario!r}: use builtins, topology or cpu-topology", file=sys.stderr)
            return 2
        argv = rest
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--binds", metavar="FILE", help="write the bind events (uid node, one a line, in bind order)")
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
        for col in ("nodes", "pods/s", "p50 ms", "p99 ms", "kernel overhead %", "kernel µs/pod", "peak RSS MB"):
            t.add_column(col, justify="right")
        for r in rows:
            t.add_row(str(r["nodes"]), str(r["pods_per_second"]), str(r["p50_ms"]), str(r["p99_ms"]),
                      str(r["kernel_overhead_pct"]), str(r["kernel_us_per_pod"]), str(r["peak_rss_mb"]))
        Console().print(t)
        return 0
    res = run(a.nodes, a.pods, a.seed, a.binds)
    print(json.dumps(res) if a.json else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
