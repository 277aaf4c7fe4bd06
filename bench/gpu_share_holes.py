"""Where the unallocated GPUs are when arrived GPU requests reach 100 % of capacity (FGD paper protocol).

At that point the unallocated GPU share equals the GPU demand of the pods that failed, and it is all
free GPU milli on the nodes. This sorts that free milli, slot by slot, into why no failed pod could use it:

* ``too small``: less free on the GPU than any failed pod asks of one GPU (by the size left, so the
  190-milli remainders beside 810-milli pods show as one line);
* ``stranded by CPU`` / ``stranded by memory``: some failed pod's share fits the GPU, but no such pod
  fits the node's CPU (or, with CPU, its memory);
* ``usable``: some failed pod fits the GPU, the node's CPU and its memory; zero in a one-pass run
  without departures (room only shrinks after a pod fails), shown as a check.

Only the failed pods that ask for one GPU (a share or a whole one) take part in the slot-by-slot test.

It also lists the failed pods by shape. The run is the same as ``koordfw replay openb`` up to that pod.

For scale it packs the shared-GPU pods that arrived by then alone, GPU by GPU (no nodes, CPU or memory,
every pod placed, as many GPUs as needed): online by best fit in arrival order, online by fgdlp's
configuration packing (:mod:`koordfw_gpu_share.lp`, with the trace's share distribution, as the replay
gives it), and offline by best fit after sorting them largest first. It reports the milli left on
partly used GPUs as % of capacity: what share packing by itself leaves, before any other constraint.

Usage: .venv/bin/python bench/gpu_share_holes.py [--workload default] [--policy fgdcap] [--seeds 42-43]
       [--top 8] [--json]
"""

from __future__ import annotations

import argparse
import bisect
import json
from collections import Counter

import anyio
import anyio.lowlevel
import numpy as np
from koordfw_gpu_share import lp
from koordfw_gpu_share.replay import parse_seeds, prepare_trace, start_replay

DATA = "/work/shared/data/alibaba-gpu-v2023"


def best_fit_gaps(shares: list[int]) -> list[int]:
    """Pack GPU shares (milli < 1000) one by one into the partly used GPU with the least room that holds
    the share, else a fresh GPU; the gaps left on partly used GPUs."""
    gaps: list[int] = []  # sorted
    for x in shares:
        i = bisect.bisect_left(gaps, x)
        g = (gaps.pop(i) if i < len(gaps) else 1000) - x
        if g > 0:
            bisect.insort(gaps, g)
    return gaps


def configuration_gaps(shares: list[int], dist: dict[int, int]) -> list[int]:
    """fgdlp's rule on shares alone: the oldest GPU waiting for the size, else a fresh GPU opened for
    the configuration furthest behind the LP; sizes the distribution lacks go by best fit."""
    packer = lp.Packer(weights=lp.solve(dist))
    left: dict[tuple[int, int], int] = {}
    for x in shares:
        slot = None
        if packer.covers(x):
            slot = next(iter(packer.waiting_slots(x, left)), None)
            if slot is None:
                slot = (len(left), 0)
                left[slot] = 1000
                packer.open(slot, x, packer.next_config(x))
            else:
                packer.fill(slot, x)
        else:
            fits = [sl for sl, v in left.items() if v >= x]
            slot = min(fits, key=lambda sl: left[sl]) if fits else (len(left), 0)
            left.setdefault(slot, 1000)
        left[slot] -= x
    return [v for v in left.values() if v > 0]


async def holes(workload: str, policy: str, seed: int, top: int) -> dict:
    trace = prepare_trace(f"{DATA}/openb_node_list_gpu_node.csv", f"{DATA}/openb_pod_list_{workload}.csv", seed)
    cap = trace.capacity_milli
    engine, plugin, _, pods = await start_replay(trace, policy, seed)
    cluster = engine.view
    row = {p.uid: r for p, r in zip(pods, trace.pods)}
    failed: list[tuple] = []
    shares: list[int] = []
    arrived = 0
    async with anyio.create_task_group() as tg:
        while arrived < cap and (tried := await engine.schedule_one(tg)) is not None:
            r = row[tried.uid]
            arrived += r[3] * r[4]
            if r[3] == 1 and 0 < r[4] < 1000:
                shares.append(r[4])
            if cluster.pods[tried.uid].node_index < 0:
                failed.append(r)
            await anyio.lowlevel.checkpoint()
    await engine.stop()

    inv = plugin.inv
    every = np.arange(cluster.num_nodes)
    cpu_left = plugin.cpu_left(cluster, every)
    m = cluster.resource_index("memory")
    mem_left = cluster.allocatable[every, m] - cluster.requested[every, m]
    # failed pods that use one GPU (a share or a whole one): (per-GPU milli, cpu milli, memory bytes)
    one = [(r[4], r[1], r[2] * 1024 * 1024) for r in failed if r[3] == 1]
    cats: Counter = Counter()
    small: Counter = Counter()
    for i, n in enumerate(trace.nodes):
        for v in inv.left[i][: n[3]].tolist():
            if v <= 0:
                continue
            sized = [f for f in one if f[0] <= v]
            if not sized:
                small[v] += v
            elif any(f[1] <= cpu_left[i] and f[2] <= mem_left[i] for f in sized):
                cats["usable by a failed pod"] += v
            elif any(f[1] <= cpu_left[i] for f in sized):
                cats["stranded by memory"] += v
            else:
                cats["stranded by CPU"] += v
    shapes: Counter = Counter()
    demand: Counter = Counter()
    for r in failed:
        shapes[(r[3], r[4])] += 1
        demand[(r[3], r[4])] += r[3] * r[4]
    pct = 100.0 / cap
    online, offline = best_fit_gaps(shares), best_fit_gaps(sorted(shares, reverse=True))
    configured = configuration_gaps(shares, trace.shares)
    return {"workload": workload, "policy": policy, "seed": seed,
            "unallocated_pct": round(sum(demand.values()) * pct, 3),
            "free_pct": round(float(inv.left.clip(min=0).sum()) * pct, 3),
            "too_small_pct": round(sum(small.values()) * pct, 3),
            "too_small_by_size": [{"left_milli": k, "gpus": round(v / 1000, 1), "pct": round(v * pct, 3)}
                                  for k, v in small.most_common(top)],
            **{k.replace(" ", "_") + "_pct": round(cats[k] * pct, 3)
               for k in ("stranded by CPU", "stranded by memory", "usable by a failed pod")},
            "shares_alone_best_fit_pct": round(sum(online) * pct, 3),
            "shares_alone_best_fit_190_pct": round(190 * online.count(190) * pct, 3),
            "shares_alone_configurations_pct": round(sum(configured) * pct, 3),
            "shares_alone_configurations_190_pct": round(190 * configured.count(190) * pct, 3),
            "shares_alone_best_fit_decreasing_pct": round(sum(offline) * pct, 3),
            "shares_alone_best_fit_decreasing_190_pct": round(190 * offline.count(190) * pct, 3),
            "failed_pods": len(failed),
            "failed_by_shape": [{"gpus": k[0], "milli": k[1], "pods": shapes[k], "gpu_pct": round(v * pct, 3)}
                                for k, v in demand.most_common(top)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="default")
    ap.add_argument("--policy", default="fgdcap")
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--top", type=int, default=8, help="rows per list (default 8)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = [anyio.run(holes, a.workload, a.policy, s, a.top) for s in parse_seeds(a.seeds)]
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for r in out:
        print(f"{r['workload']} {r['policy']} seed {r['seed']}: unallocated {r['unallocated_pct']:.2f}% "
              f"(free {r['free_pct']:.2f}%) = too small {r['too_small_pct']:.2f}% + stranded by CPU "
              f"{r['stranded_by_CPU_pct']:.2f}% + by memory {r['stranded_by_memory_pct']:.2f}% "
              f"+ usable {r['usable_by_a_failed_pod_pct']:.2f}%")
        print("  too small, by milli left on the GPU: " + ", ".join(
            f"{x['left_milli']}: {x['gpus']} GPUs ({x['pct']:.2f}%)" for x in r["too_small_by_size"]))
        print(f"  shares alone, GPU by GPU: online best fit leaves {r['shares_alone_best_fit_pct']:.2f}% "
              f"(190 milli: {r['shares_alone_best_fit_190_pct']:.2f}%), online configurations "
              f"{r['shares_alone_configurations_pct']:.2f}% (190 milli: {r['shares_alone_configurations_190_pct']:.2f}%), "
              f"offline best fit decreasing "
              f"{r['shares_alone_best_fit_decreasing_pct']:.2f}% "
              f"(190 milli: {r['shares_alone_best_fit_decreasing_190_pct']:.2f}%)")
        print(f"  {r['failed_pods']} failed pods, by shape: " + ", ".join(
            f"{x['pods']}×{x['gpus']}×{x['milli']} ({x['gpu_pct']:.2f}%)" for x in r["failed_by_shape"]))


if __name__ == "__main__":
    main()
