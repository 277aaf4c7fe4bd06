"""Benchmark: job-level preemption for gangs against kube's pod-level preemption (embedded cluster, virtual clock).

A cluster full of low-priority batch work (priorities 1 and 5, jobs of 1-8 two-CPU pods, 30 % of them Strict
gangs, 10 % of the pods labelled ``disable-preemptible``; ``preemptionPolicy: Never``, so that an evicted batch pod
coming back does not preempt in turn), then high-priority gangs (priority 1000, 2-12
members of 2-4 CPU; 10 % are *hopeless*: three 12-CPU members restricted to a zone of two nodes, never
placeable whole). The same input runs three ways:

* ``pod-level``: the default profile (kube's DefaultPreemption for every member);
* ``job-level``: ``enablePreemption`` (Koordinator's coscheduling preemption);
* ``job+whole``: ``enablePreemption`` and ``evictWholeStrictGangs``.

Printed per mode: high gangs bound, pods evicted (at least once), non-preemptible pods evicted, low Strict gangs
left broken (partly bound) at the end, preemption attempts and wall time.

    .venv/bin/python bench/gang_preemption.py [--nodes 200] [--gangs 60] [--seed 7]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time
from typing import Any

import anyio

from koordfw.core.manifests import Manifests
from koordfw.core.model import make_node, pod_from_manifest
from koordfw.engines.embedded import build_registry, run_simulation

G = "gang.scheduling.koordinator.sh"
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
NO_PREEMPT = "scheduling.koordinator.sh/disable-preemptible"
JOB = "scheduling.koordinator.sh/questioned-object-key"
ZONE = "topology.kubernetes.io/zone"
MODES: dict[str, dict[str, Any] | None] = {
    "pod-level": None,
    "job-level": {"plugins": {"postFilter": {"enabled": ["gang", "default_preemption"]}},
                  "pluginConfig": {"gang": {"enablePreemption": True}}},
    "job+whole": {"plugins": {"postFilter": {"enabled": ["gang", "default_preemption"]}},
                  "pluginConfig": {"gang": {"enablePreemption": True, "evictWholeStrictGangs": True}}},
}


def stamp(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def build(n_nodes: int, n_gangs: int, seed: int) -> Manifests:
    rng = random.Random(seed)
    m = Manifests()
    free = []
    for i in range(n_nodes):
        labels = {ZONE: "z-small"} if i < 2 else {}
        m.nodes.append(make_node(f"node-{i:04d}", allocatable={"cpu": "16", "memory": "64Gi", "pods": "110"},
                                 labels=labels))
        free.append(16)
    # low-priority batch jobs, packed node by node to ~95 %
    j = 0
    node = 0
    while node < n_nodes:
        size = rng.randint(1, 8)
        gang = size > 1 and rng.random() < 0.3
        prio = rng.choice((1, 5))
        name = f"batch-{j:04d}"
        j += 1
        for k in range(size):
            while node < n_nodes and free[node] < 2 + (1 if rng.random() < 0.05 else 0):
                node += 1
            if node >= n_nodes:
                break
            free[node] -= 2
            labels = {JOB: name}
            if rng.random() < 0.1:
                labels[NO_PREEMPT] = "true"
            ann = {f"{G}/name": name, f"{G}/min-available": str(size)} if gang else {}
            m.pods.append(pod_from_manifest({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{k}", "namespace": "default", "uid": f"{name}-{k}",
                             "creationTimestamp": stamp(0), "labels": labels, "annotations": ann},
                "spec": {"nodeName": f"node-{node:04d}", "priority": prio, "preemptionPolicy": "Never",
                         "containers": [{"name": "main", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}]},
                "status": {"phase": "Running"}}))
    for g in range(n_gangs):
        hopeless = rng.random() < 0.1
        size, cpu = (3, "12") if hopeless else (rng.randint(2, 12), rng.choice(("2", "3", "4")))
        name = f"train-{g:03d}"
        ann = {f"{G}/name": name, f"{G}/min-available": str(size), f"{G}/waiting-time": "60s"}
        for i in range(size):
            spec: dict[str, Any] = {"priority": 1000,
                                    "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}]}
            if hopeless:
                spec["nodeSelector"] = {ZONE: "z-small"}
            m.pods.append(pod_from_manifest({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{i}", "namespace": "default", "uid": f"{name}-{i}",
                             "creationTimestamp": stamp(3600 + g * 30), "annotations": ann}, "spec": spec}))
    return m


def run(mode: str, n_nodes: int, n_gangs: int, seed: int) -> dict[str, Any]:
    manifests = build(n_nodes, n_gangs, seed)
    labels = {p.uid: p.labels for p in manifests.pods}
    registry = build_registry(MODES[mode], autoload=True, only={"gang"})
    t0 = time.perf_counter()
    result = anyio.run(lambda: run_simulation(manifests, registry, seed=seed))
    wall = time.perf_counter() - t0
    rows = result.extra["gangs"]
    high = [r for r in rows if r["gang"].startswith("default/train-")]
    low_strict = [r for r in rows if r["gang"].startswith("default/batch-") and r["mode"] == "Strict"]
    evicted = [uid for uid, res in result.engine.results.items() if res.evicted]
    history = result.extra.get("jobPreemptions") or []
    return {"mode": mode, "high gangs bound": sum(r["phase"] == "Satisfied" for r in high), "high gangs": len(high),
            "pods evicted": len(evicted),
            "non-preemptible evicted": sum(labels.get(u, {}).get(NO_PREEMPT) == "true" for u in evicted),
            "low Strict gangs broken": sum(r["phase"] == "PartlyBound" for r in low_strict),
            "low Strict gangs": len(low_strict),
            "job preemptions (ok / not helpful)": (sum(h["reason"] == "preempt success" for h in history),
                                                   sum(h["reason"] == "preemption not helpful" for h in history)),
            "pods": len(manifests.pods), "wall s": wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--gangs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    out = [run(mode, a.nodes, a.gangs, a.seed) for mode in MODES]
    print(f"cluster: {a.nodes} nodes x 16 CPU, {out[0]['pods']} pods; {a.gangs} high-priority gangs, seed {a.seed}")
    keys = [k for k in out[0] if k not in ("mode", "pods", "high gangs", "low Strict gangs")]
    print(f"{'':36}" + "".join(f"{r['mode']:>14}" for r in out))
    for k in keys:
        cells = []
        for r in out:
            v = r[k]
            if k == "high gangs bound":
                v = f"{v}/{r['high gangs']}"
            elif k == "low Strict gangs broken":
                v = f"{v}/{r['low Strict gangs']}"
            elif isinstance(v, tuple):
                v = f"{v[0]} / {v[1]}"
            elif isinstance(v, float):
                v = f"{v:.1f}"
            cells.append(f"{v!s:>14}")
        print(f"{k:36}" + "".join(cells))


if __name__ == "__main__":
    main()
