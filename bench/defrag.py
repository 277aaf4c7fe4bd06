"""Benchmark: GPU defragmentation by migration on the Alibaba openb trace (FGD paper protocol).

For each seed: replay the ``default`` workload with the ``bestfit`` policy until arrived GPU requests
reach 100 % of capacity, run ``gpu_defrag`` once with a budget of 1 %, 2 % or 5 % of the bound pods,
apply the plan (evict, nominate the planned target, reschedule), then continue the replay to the end
(arrived ≈ 130 %). Baselines: bestfit and FGD without migration. Reports unallocated and fragmented
GPU % before/after the round, pods moved, planning time, and unallocated GPU % at arrived = 130 %.

``--cycles N`` runs N descheduling cycles back to back at the round (plan, evict, reschedule, plan
again), each with 1/N of the budget, as a descheduler loop does when its interval is short against pod
arrivals: a plan never targets a node it takes a pod from, so a move that needs room another move makes
(take a CPU-only pod off a node, then bring a GPU pod to its now usable GPUs) waits for the next cycle.

    .venv/bin/python bench/defrag.py [--seeds 42-43] [--budgets 1,2,5] [--cycles 6] [--json]

Trace replay helpers (tuning, pods, nodes, the target workload, binning) are gpu_share's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import numpy as np
from koordfw_defrag import Args, plan
from koordfw_gpu_share.replay import _node, _pod, bin_curve, parse_seeds, prepare_trace, profile_for

from koordfw import build_registry
from koordfw.core.cluster import ClusterState  # the experiment drops failed pods from the queue: kernel-level
from koordfw.core.schedule_one import Scheduler
from koordfw.embed import EmbeddedEngine

DATA = Path("/work/shared/data/alibaba-gpu-v2023")


async def run(policy: str, seed: int, budget_pct: float | None, nodes_csv: Path, pods_csv: Path,
              min_gain: float = 100.0, rounds: int = 1, cycles: int = 1) -> dict:
    trace = prepare_trace(nodes_csv, pods_csv, seed)
    capacity = trace.capacity_milli
    profile = profile_for(policy, seed, trace.workload)
    only = ["gpu_share"]
    if budget_pct is not None:
        profile["pluginConfig"]["defrag"] = {"gpuDefrag": {"enabled": True, "minGainMilli": min_gain},
                                             "maxMigratingPercentPerRound": budget_pct / (rounds * cycles)}
        only.append("defrag")
    registry = build_registry(profile, only=only)
    gargs = registry.args["gpu_share"]
    cluster = ClusterState()
    for r in trace.nodes:
        cluster.add_node(_node(r))
    # bind inline, as the embedded engine does: a nominated pod is then never counted twice (assumed and
    # still nominated) while its binding task has not run yet
    engine = EmbeddedEngine(registry, cluster, seed=seed, start_time=0.0)
    sched = engine.scheduler
    gpu = registry.plugin("gpu_share")  # class plugins are constructed when an engine binds the registry
    await sched.startup()
    pods = [_pod(r) for r in trace.pods]
    milli_of = {p.uid: r[3] * r[4] for p, r in zip(pods, trace.pods)}
    n = len(pods)
    arrived, used, fragm = np.zeros(n), np.zeros(n), np.zeros(n)
    a_sum = u_sum = 0
    round_info: dict = {}
    # rounds at arrived = 100 %, then evenly up to 125 % (one round = the protocol); each round
    # is `cycles` plans executed one after the other
    marks = [capacity * (1.0 + 0.25 * k / max(rounds - 1, 1)) for k in range(rounds) for _ in range(cycles)]
    infos: list[dict] = []
    t0 = time.perf_counter()

    def state() -> tuple[float, float]:
        u = sum(a.milli for a in gpu.inv.allocs.values())
        f = float(gpu.node_frag_milli(cluster, gargs).sum())
        return 100.0 - 100.0 * u / capacity, 100.0 * f / capacity

    async with anyio.create_task_group() as tg:
        for i, p in enumerate(pods):
            cluster.add_pod(p)
            await sched.enqueue(p)
            await sched.schedule_next(tg)
            if cluster.pods[p.uid].node_index < 0:
                sched.queue.done(p.uid)  # the protocol never retries a failed pod
            a_sum += milli_of[p.uid]
            u_sum += gpu.allocated_milli(p.uid)
            if budget_pct is not None and len(infos) < len(marks) and a_sum >= marks[len(infos)]:
                while len(infos) < len(marks) and a_sum >= marks[len(infos)]:
                    infos.append(await defrag_round(sched, registry, state))
                u_sum = sum(a.milli for a in gpu.inv.allocs.values())
            arrived[i], used[i] = a_sum, u_sum
            fragm[i] = gpu.node_frag_milli(cluster, gargs).sum()
            if i % 64 == 0:
                await anyio.lowlevel.checkpoint()
    if infos:
        round_info = dict(infos[0])
        for k in ("moved", "landed_on_target", "landed_elsewhere", "lost", "plan_seconds"):
            round_info[k] = round(sum(x[k] for x in infos), 3)
        round_info["moved_pct"] = round(100.0 * round_info["moved"] / infos[0]["bound_at_round"], 2)
        round_info["rounds"], round_info["cycles"] = rounds, cycles
        first = infos[:cycles][-1]  # "round: before -> after" spans the first round's cycles
        round_info["round_frag_after"] = first["round_frag_after"]
        round_info["round_unallocated_after"] = first["round_unallocated_after"]
    curve = bin_curve(arrived, used, fragm, capacity)
    at = {c["arrived_pct"]: c for c in curve}
    top = max(at)
    c100, c130 = at.get(100), at[min(130, top)]
    return {"policy": policy, "seed": seed, "budget_pct": budget_pct, "pods": n,
            "unallocated_at_100": round(100 - c100["alloc_pct"], 3), "frag_at_100": round(c100["frag_pct"], 3),
            "unallocated_at_130": round(100 - c130["alloc_pct"], 3), "frag_at_130": round(c130["frag_pct"], 3),
            "seconds": round(time.perf_counter() - t0, 1), **round_info}


async def defrag_round(sched: Scheduler, registry, state) -> dict:
    """One planning round on the live replay state, then the moves applied as the embedded engine does."""
    cluster = sched.cluster
    args: Args = registry.args["defrag"]
    un0, fr0 = state()
    bound = sum(1 for e in cluster.pods.values() if e.node_index >= 0)
    t = time.perf_counter()
    result = await plan(cluster, args, sched.handle_for("defrag"))
    plan_s = time.perf_counter() - t
    landed = elsewhere = lost = 0
    for m in result.migrations:
        p = cluster.pod_by_key(m.pod)
        await sched.engine.evict(p, m.reason)
        sched.nominate_pending(cluster.pod_by_key(m.pod), m.to)
    async with anyio.create_task_group() as tg:
        while await sched.schedule_next(tg):
            pass
    for m in result.migrations:
        p = cluster.pod_by_key(m.pod)
        if p.node_name == m.to:
            landed += 1
        elif p.node_name:
            elsewhere += 1
        else:
            lost += 1
            sched.queue.done(p.uid)
    un1, fr1 = state()
    return {"bound_at_round": bound, "moved": len(result.migrations),
            "moved_pct": round(100.0 * len(result.migrations) / max(bound, 1), 2),
            "landed_on_target": landed, "landed_elsewhere": elsewhere, "lost": lost,
            "plan_seconds": round(plan_s, 3),
            "round_unallocated_before": round(un0, 3), "round_unallocated_after": round(un1, 3),
            "round_frag_before": round(fr0, 3), "round_frag_after": round(fr1, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--budgets", default="1,2,5")
    ap.add_argument("--nodes", default=str(DATA / "openb_node_list_gpu_node.csv"))
    ap.add_argument("--pods", default=str(DATA / "openb_pod_list_default.csv"))
    ap.add_argument("--min-gain", type=float, default=100.0, help="gpuDefrag.minGainMilli (default 100)")
    ap.add_argument("--rounds", type=int, default=1, help="split the budget over N rounds from 100 to 125 %% arrived")
    ap.add_argument("--cycles", type=int, default=1, help="descheduling cycles back to back per round (default 1)")
    ap.add_argument("--no-baselines", action="store_true", help="skip the fgd/bestfit runs without migration")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    seeds = parse_seeds(a.seeds)
    budgets = [float(x) for x in a.budgets.split(",") if x]
    runs = []
    for s in seeds:
        base = [] if a.no_baselines else [("fgd", None), ("bestfit", None)]
        for pol, b in base + [("bestfit", b) for b in budgets]:
            r = anyio.run(lambda pol=pol, s=s, b=b: run(pol, s, b, Path(a.nodes), Path(a.pods), a.min_gain, a.rounds, a.cycles))
            runs.append(r)
            if not a.json:
                label = f"{pol}" + (f"+defrag {b:g}%" + (f"/{a.rounds}r" if a.rounds > 1 else "")
                                                 + (f"x{a.cycles}c" if a.cycles > 1 else "") if b is not None else "")
                extra = (f" moved {r['moved']} ({r['moved_pct']}%) on-target {r['landed_on_target']} "
                         f"elsewhere {r['landed_elsewhere']} lost {r['lost']} plan {r['plan_seconds']}s | round: "
                         f"unalloc {r['round_unallocated_before']:.2f}->{r['round_unallocated_after']:.2f} "
                         f"frag {r['round_frag_before']:.2f}->{r['round_frag_after']:.2f}") if b is not None else ""
                print(f"seed {s} {label:<22} unalloc@100 {r['unallocated_at_100']:6.2f} frag@100 {r['frag_at_100']:6.2f} "
                      f"unalloc@130 {r['unallocated_at_130']:6.2f} frag@130 {r['frag_at_130']:6.2f} "
                      f"({r['seconds']}s){extra}", flush=True)
    if a.json:
        print(json.dumps(runs, indent=1))
        return
    if len(seeds) > 1:
        keys = sorted({(r["policy"], r["budget_pct"]) for r in runs}, key=lambda k: (k[1] is not None, k[1] or 0, k[0]))
        for pol, b in keys:
            rs = [r for r in runs if r["policy"] == pol and r["budget_pct"] == b]
            print(f"median {pol}{'' if b is None else f'+defrag {b:g}%'}: unalloc@130 "
                  f"{statistics.median(r['unallocated_at_130'] for r in rs):.2f} over {len(rs)} seeds")


if __name__ == "__main__":
    main()
