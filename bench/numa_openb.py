"""NUMA topology policy on the openb GPU trace over a mixed-generation cluster (issue 35's Measure section).

    python bench/numa_openb.py                      # the first 3,000 pods of seed 42, 1,213 GPU nodes
    python bench/numa_openb.py --pods 0 --json      # every pod of the trace (1.3 x the GPU capacity)

The cluster is the trace's 1,213 GPU nodes (``openb_node_list_gpu_node.csv``), each with 2 NUMA nodes: a
NodeResourceTopology splitting its CPUs and memory in halves, and a Device whose GPUs sit half on each NUMA
node (a single GPU on NUMA node 0), two per PCIe switch. Even nodes report CPU model "Xeon Old", odd ones
"Xeon New"; slo-controller-config's cpu-normalization-config gives them ratios 1.0 and 1.3, which the
cpu_normalization plugin writes on the nodes before scheduling (the table counts them). The pods are the
trace's (seeded shuffle and resampling of ``koordfw replay openb``), in arrival order.

Two runs, each a fresh engine with cpu_topology, gpu_share and cpu_normalization: every node labelled
``node.koordinator.sh/numa-topology-policy: SingleNUMANode``, and no policy. For each it prints pods placed,
GPU milli allocated, pods/s, and for the policy run the placements that violate SingleNUMANode: a bound pod
whose cpu/memory (``numaNodeResources`` in its resource-status) and GPUs (their Device NUMA nodes) are not
all on one NUMA node, or that has no NUMA assignment at all. The policy's scheduling cost at 5,000 nodes is
``bench/cpu_topology.py``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from koordfw import build_registry
from koordfw.embed import EmbeddedEngine
from koordfw.extension import RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO
from koordfw.inputs import make_node

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "alibaba-gpu-v2023"
POLICY_LABEL = "node.koordinator.sh/numa-topology-policy"
RATIO = "node.koordinator.sh/cpu-normalization-ratio"
ALLOCATED = "scheduling.koordinator.sh/device-allocated"
STATUS = "scheduling.koordinator.sh/resource-status"
MODELS = ("Xeon Old", "Xeon New")


def gpu_numa(gpus: int) -> list[int]:
    """Each GPU's NUMA node: the first half on 0, the rest on 1 (a single GPU on 0)."""
    return [0 if m < (gpus + 1) // 2 else 1 for m in range(gpus)]


def cluster_objects(trace_nodes: list[tuple], policy: str) -> tuple[list[Any], list[dict]]:
    nodes, objects = [], []
    for k, r in enumerate(trace_nodes):
        name, cpu, mem, gpu, model = r
        alloc = {"cpu": f"{cpu}m", "memory": f"{mem}Mi", "pods": "1001"}
        if gpu:
            alloc.update({"nvidia.com/gpu": str(gpu), RESOURCE_GPU: str(100 * gpu), RESOURCE_GPU_CORE: str(100 * gpu),
                          RESOURCE_GPU_MEMORY_RATIO: str(100 * gpu)})
        labels = {"node.koordinator.sh/gpu-model": model} if model else {}
        if policy:
            labels[POLICY_LABEL] = policy
        nodes.append(make_node(name, allocatable=alloc, labels=labels))
        zones = [{"name": f"node-{z}", "type": "Node",
                  "resources": [{"name": "cpu", "capacity": f"{cpu // 2}m", "allocatable": f"{cpu // 2}m"},
                                {"name": "memory", "capacity": f"{mem // 2}Mi", "allocatable": f"{mem // 2}Mi"}]}
                 for z in range(2)]
        objects.append({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
                        "metadata": {"name": name, "annotations": {"node.koordinator.sh/cpu-basic-info": json.dumps(
                            {"cpuModel": MODELS[k % 2], "hyperThreadEnabled": True})}},
                        "zones": zones})
        objects.append({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
                        "spec": {"devices": [{"type": "gpu", "minor": m, "health": True,
                                              "resources": {"koordinator.sh/gpu-core": "100",
                                                            "koordinator.sh/gpu-memory-ratio": "100"},
                                              "topology": {"socketID": n, "nodeID": n, "pcieID": f"pci{n}-{m // 2}"}}
                                             for m, n in enumerate(gpu_numa(gpu))]}})
    cfg = {"enable": True, "ratioModel": {"Xeon Old": {"hyperThreadEnabledRatio": 1.0},
                                          "Xeon New": {"hyperThreadEnabledRatio": 1.3}}}
    objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                    "data": {"cpu-normalization-config": json.dumps(cfg),
                             "colocation-config": json.dumps({"enable": True})}})
    return nodes, objects


def violations(engine: EmbeddedEngine, device_numa: dict[str, list[int]]) -> tuple[int, int]:
    """(placements not on one NUMA node, bound pods checked)."""
    bad = checked = 0
    for e in engine.view.pods.values():
        p = e.pod
        if not p.node_name:
            continue
        checked += 1
        numa: set[int] = set()
        status = json.loads(p.annotations.get(STATUS, "{}"))
        numa |= {int(n["node"]) for n in status.get("numaNodeResources") or []}
        if ALLOCATED in p.annotations:
            numa |= {device_numa[p.node_name][g["minor"]] for g in json.loads(p.annotations[ALLOCATED])["gpu"]}
        if len(numa) != 1:
            bad += 1
    return bad, checked


async def one_run(trace: Any, n_pods: int, policy: str, seed: int, progress: bool) -> dict:
    from koordfw_gpu_share.replay import _pod

    nodes, objects = cluster_objects(trace.nodes, policy)
    rows = trace.pods[:n_pods] if n_pods else trace.pods
    pods = [_pod(r) for r in rows]
    reg = build_registry({"percentageOfNodesToScore": 100, "disable": ["default_preemption"]},
                         only={"cpu_topology", "gpu_share", "cpu_normalization"})
    engine = EmbeddedEngine(reg, nodes=nodes, pods=pods, objects=objects, seed=seed, start_time=0.0)
    cb = None
    bar = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task(f"policy {policy or 'none'}", total=len(pods))

        def cb(done: int, total: int) -> None:
            bar.update(task, completed=done)
    t0 = time.perf_counter()
    await engine.run(progress=cb)
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.stop()
    device_numa = {r[0]: gpu_numa(r[3]) for r in trace.nodes}
    placed = [e for e in engine.view.pods.values() if e.pod.node_name]
    milli = {r[0]: r[3] * r[4] for r in rows}
    ratios: dict[str, int] = {}
    for v in engine.view.nodes:
        ratios[v.node.annotations.get(RATIO, "-")] = ratios.get(v.node.annotations.get(RATIO, "-"), 0) + 1
    bad, checked = violations(engine, device_numa) if policy else (None, None)
    return {"policy": policy or "none", "pods": len(pods), "placed": len(placed),
            "gpu_milli_placed": sum(milli[e.pod.name] for e in placed),
            "gpu_milli_arrived": sum(milli.values()), "wall_s": round(wall, 2),
            "pods_per_s": round(len(pods) / wall, 1), "violations": bad, "checked": checked, "ratios": ratios}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=3000, help="first N pods of the arrival order (0: all)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from koordfw_gpu_share.replay import prepare_trace

    trace = prepare_trace(a.data / "openb_node_list_gpu_node.csv", a.data / "openb_pod_list_default.csv", a.seed)
    progress = sys.stderr.isatty() and not a.json
    runs = [anyio.run(one_run, trace, a.pods, p, a.seed, progress) for p in ("SingleNUMANode", "")]
    if a.json:
        print(json.dumps(runs, indent=2))
        return 0
    print(f"openb (seed {a.seed}): {len(trace.nodes)} GPU nodes, 2 NUMA nodes each; first {runs[0]['pods']} pods")
    print(f"cpu-normalization-ratio on the nodes: {runs[0]['ratios']}")
    print(f"{'policy':<15}{'placed':>12}{'GPU placed':>14}{'pods/s':>10}{'violations':>12}")
    for r in runs:
        gpu = f"{100 * r['gpu_milli_placed'] / max(r['gpu_milli_arrived'], 1):.1f} %"
        v = "-" if r["violations"] is None else f"{r['violations']}/{r['checked']}"
        print(f"{r['policy']:<15}{r['placed']:>12,}{gpu:>14}{r['pods_per_s']:>10}{v:>12}")
    cost = 100 * (1 - runs[0]["pods_per_s"] / runs[1]["pods_per_s"])
    print(f"throughput cost of SingleNUMANode (with GPU hints) at {len(trace.nodes)} nodes: {cost:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
