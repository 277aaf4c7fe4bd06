"""A lower bound on unallocated GPU % at arrived = 100 % for ANY placement policy (issue 5's target).

At arrived = 100 % of capacity, used = arrived − failed, so the unallocated (free) GPU equals the
failed demand. This script takes the pods that have arrived when the arrived GPU request first reaches
100 % (the replay's tuning and shuffle for each seed) and solves the configuration LP of the GPU
dimension alone: how many GPUs hold each multiset ("pattern") of shared-GPU pods whose milli sum to at
most 1000, plus the GPUs whole-GPU pods take, maximising the GPU milli placed. The LP ignores CPU,
memory, GPU models, node boundaries, multi-GPU pods' need for one node and the arrival order, so the
true optimum can only be worse: the figure is a floor, not an achievable value.

    .venv/bin/python bench/gpu_share_bound.py [--seeds 42-51] [--workload default]

Uses scipy's HiGHS LP solver, which the gpu_share plugin installs (its fgdlp policy solves an LP too).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter

import numpy as np

DATA = "/work/shared/data/alibaba-gpu-v2023"


def patterns(counts: Counter, cap: int = 1000) -> list[tuple[int, ...]]:
    """Every multiset of the shared sizes (at most ``counts[s]`` of size s) with sum ≤ cap."""
    sizes = sorted(counts)
    out: list[tuple[int, ...]] = []

    def rec(i: int, cur: list[int], tot: int) -> None:
        if i == len(sizes):
            if cur:
                out.append(tuple(cur))
            return
        s, k = sizes[i], 0
        while tot + k * s <= cap and k <= counts[s]:
            rec(i + 1, cur + [s] * k, tot + k * s)
            k += 1

    rec(0, [], 0)
    return out


def bound(seed: int, workload: str) -> dict:
    from koordfw_gpu_share.replay import load_trace, tune
    from scipy.optimize import linprog

    nrows, prows = load_trace(f"{DATA}/openb_node_list_gpu_node.csv", f"{DATA}/openb_pod_list_{workload}.csv")
    gpus = sum(r[3] for r in nrows if r[3] > 0)
    capacity = 1000 * gpus
    order = tune(prows, np.random.default_rng(seed), capacity)
    arrived, pods = 0, []
    for r in order:
        if arrived >= capacity:
            break
        arrived += r[3] * r[4]
        pods.append(r)
    shared = Counter(r[4] for r in pods if r[3] == 1 and 0 < r[4] < 1000)
    whole = sum(r[3] for r in pods if r[4] >= 1000)
    pats = patterns(shared)
    sizes = sorted(shared)
    c = -np.array([float(sum(p)) for p in pats] + [1000.0])
    a_ub = [[float(p.count(s)) for p in pats] + [0.0] for s in sizes] + [[1.0] * (len(pats) + 1)]
    b_ub = [float(shared[s]) for s in sizes] + [float(gpus)]
    res = linprog(c, A_ub=np.array(a_ub), b_ub=np.array(b_ub),
                  bounds=[(0, None)] * len(pats) + [(0, whole)], method="highs")
    if res.status != 0:
        raise RuntimeError(f"seed {seed}: LP not solved: {res.message}")
    placed = -res.fun
    # what the 810-milli pods leave beside them that only pods of at most 190 milli can use
    sliver = shared.get(810, 0) * 190 - sum(n * s for s, n in shared.items() if s <= 190)
    return {"seed": seed, "patterns": len(pats), "floor_pct": 100.0 * (capacity - placed) / capacity,
            "sliver_pct": 100.0 * max(sliver, 0) / capacity}


def main() -> int:
    from koordfw_gpu_share.replay import parse_seeds

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workload", default="default")
    a = ap.parse_args()
    rows = []
    for s in parse_seeds(a.seeds):
        r = bound(s, a.workload)
        rows.append(r)
        print(f"seed {s}: floor {r['floor_pct']:.2f}% unallocated (GPU-only LP, {r['patterns']} patterns); "
              f"810-milli pods' unusable remainders {r['sliver_pct']:.2f}%", flush=True)
    if len(rows) > 1:
        print(f"median floor {statistics.median(r['floor_pct'] for r in rows):.2f}%, "
              f"810-milli remainders {statistics.median(r['sliver_pct'] for r in rows):.2f}% over {len(rows)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
