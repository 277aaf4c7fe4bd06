"""The scheduling cost of reservations: pods/s at 1,000 nodes with 1,000 Available reservations vs none.

    python bench/reservations.py --json                 # 1,000 nodes, 5,000 pods, 1,000 reservations
    python bench/reservations.py --nodes 1000 --pods 5000 --reservations 1000 --rounds 2

Three runs per round, each in a fresh process, in turn: the built-ins alone (``builtins``), the built-ins and
the reservation plugin with no Reservation (``plugin``), and with ``--reservations`` Reservations already
placed, one per node, 2 cpu / 4Gi each, owned by ``app=svc-<i>`` (``reservations``); half of the pods are
owners of one of them (``app=svc-<j mod 2N>``), so the run covers the restore, the per-reservation fit,
the nomination and the allocation as well as pods for which nothing matches. Prints pods/s and the per-pod
cycle p50/p99 (ms) of each, and the ratios to ``builtins``.
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

from koordfw import build_registry
from koordfw.embed import EmbeddedEngine
from koordfw.inputs import load_objects, make_node, make_pod

POD_SHAPES = [("100m", "128Mi", 30), ("250m", "512Mi", 25), ("500m", "1Gi", 20), ("1", "2Gi", 15), ("2", "4Gi", 7),
              ("4", "8Gi", 3)]


def reservation(i: int) -> dict:
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": f"r-{i}", "uid": f"uid-r-{i}", "creationTimestamp": "2026-11-01T00:00:00Z"},
            "spec": {"template": {"spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": "2", "memory": "4Gi"}}}]}},
                "owners": [{"labelSelector": {"matchLabels": {"app": f"svc-{i}"}}}], "ttl": "0s"},
            "status": {"phase": "Available", "nodeName": f"node-{i}", "allocatable": {"cpu": "2", "memory": "4Gi"}}}


async def _run(variant: str, nodes: int, pods: int, reservations: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    manifests = load_objects([reservation(i) for i in range(reservations)] if variant == "reservations" else [])
    manifests.nodes.extend(make_node(f"node-{i}", allocatable={"cpu": "32", "memory": "128Gi", "pods": "250"})
                           for i in range(nodes))
    weights = np.array([w for *_, w in POD_SHAPES], dtype=float)
    choice = rng.choice(len(POD_SHAPES), size=pods, p=weights / weights.sum())
    owners_of = max(2 * reservations, 2)
    for j in range(pods):
        cpu, mem, _ = POD_SHAPES[choice[j]]
        manifests.pods.append(make_pod(f"pod-{j}", "bench", requests={"cpu": cpu, "memory": mem},
                                       labels={"app": f"svc-{j % owners_of}"}))
    cluster = manifests.to_cluster()
    registry = build_registry(None, autoload=variant != "builtins", only=set() if variant == "builtins" else {"reservation"})
    engine = EmbeddedEngine(registry, cluster, seed=seed, start_time=1_800_000_000.0)
    gc.collect()
    t0 = time.perf_counter()
    await engine.run()
    wall = time.perf_counter() - t0
    cycles = np.array(engine.cycle_seconds)
    allocated = sum(1 for p in cluster.all_pods()
                    if "scheduling.koordinator.sh/reservation-allocated" in p.annotations)
    return {"variant": variant, "nodes": nodes, "pods": pods,
            "reservations": reservations if variant == "reservations" else 0,
            "bound": len(engine.bind_events), "allocated_from_reservations": allocated, "seconds": round(wall, 3),
            "pods_per_second": round(len(engine.bind_events) / wall, 1),
            "p50_ms": round(float(np.percentile(cycles, 50)) * 1000, 3),
            "p99_ms": round(float(np.percentile(cycles, 99)) * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--reservations", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.variant:  # one run, in this process
        print(json.dumps(anyio.run(_run, a.variant, a.nodes, a.pods, a.reservations, a.seed)))
        return 0
    runs: dict[str, list[dict]] = {"builtins": [], "plugin": [], "reservations": []}
    for _ in range(a.rounds):
        for variant in runs:
            out = subprocess.run([sys.executable, __file__, "--variant", variant, "--nodes", str(a.nodes), "--pods",
                                  str(a.pods), "--reservations", str(a.reservations), "--seed", str(a.seed)],
                                 check=True, capture_output=True, text=True).stdout
            runs[variant].append(json.loads(out.strip().splitlines()[-1]))
    best = {v: max(rs, key=lambda r: r["pods_per_second"]) for v, rs in runs.items()}
    base = best["builtins"]["pods_per_second"]
    summary = {"runs": runs, "best": best,
               "ratio_to_builtins": {v: round(r["pods_per_second"] / base, 3) for v, r in best.items()}}
    if a.json:
        print(json.dumps(summary))
    else:
        for v, r in best.items():
            print(f"{v:13s} {r['pods_per_second']:9.1f} pods/s  p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
                  f"x{summary['ratio_to_builtins'][v]}  (allocated from reservations: {r['allocated_from_reservations']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
