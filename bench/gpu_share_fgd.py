"""Reproduce the FGD paper's table with ``koordfw replay openb`` (policies × workloads × seeds).

Usage: .venv/bin/python bench/gpu_share_fgd.py [--workloads default,cpu050] [--policies fgd,bestfit]
       [--seeds 42-51] [--procs 2] [--tie-break first]
Prints one line per run as it finishes, then measured medians next to the published ones and the
seconds / pods-per-second of each run. Runs in at most ``--procs`` processes (default 2).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

DATA = "/work/shared/data/alibaba-gpu-v2023"
PAPER = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd")


def _one(job):
    from koordfw_gpu_share.replay import replay

    wl, pol, seed, tb = job
    r = replay(f"{DATA}/openb_node_list_gpu_node.csv", f"{DATA}/openb_pod_list_{wl}.csv", pol, seed, tb)
    return wl, pol, seed, r["unallocated_gpu_pct_at_100"], r["seconds"], r["pods_per_second"]


def main() -> None:
    from koordfw_gpu_share.replay import PUBLISHED, parse_seeds

    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="default")
    ap.add_argument("--policies", default=",".join(PAPER))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--tie-break", default="first", choices=("first", "random"))
    a = ap.parse_args()
    jobs = [(w, p, s, a.tie_break) for w in a.workloads.split(",") for p in a.policies.split(",")
            for s in parse_seeds(a.seeds)]
    t0 = time.perf_counter()
    res = []
    with mp.get_context("spawn").Pool(min(a.procs, 2)) as pool:
        for r in pool.imap_unordered(_one, jobs):
            res.append(r)
            print(f"{r[0]:<12} {r[1]:<11} seed {r[2]}  unallocated {r[3]:6.2f}%  {r[4]:6.1f}s  {r[5]:6.0f} pods/s",
                  flush=True)
    print(f"\n{len(res)} runs in {time.perf_counter() - t0:.0f}s wall, {min(a.procs, 2)} processes")
    print(f"{'workload':<12} {'policy':<11} {'measured':>9} {'published':>9} {'diff':>6} {'runs':>5} {'s/run':>6}")
    for w in a.workloads.split(","):
        for p in a.policies.split(","):
            rs = [r for r in res if r[0] == w and r[1] == p]
            if not rs:
                continue
            m = statistics.median(r[3] for r in rs)
            pub = PUBLISHED.get(w, {}).get(p)
            diff = f"{m - pub:+6.2f}" if pub is not None else "     -"
            pubs = f"{pub:9.2f}" if pub is not None else "        -"
            print(f"{w:<12} {p:<11} {m:9.2f} {pubs} {diff} {len(rs):5d} {statistics.mean(r[4] for r in rs):6.1f}")


if __name__ == "__main__":
    main()
