"""The tables of issue 20 from ``koordfw replay colocation`` (docs/benchmarks.md, "Colocation replay").

    .venv/bin/python bench/colocation_replay.py [--days 7] [--knobs] [--nodes-search] [--json]

1. The main table: the shipped week at the default size, kubernetes mode against koordfw mode with the
   recommended profile (profiling on), and koordfw mode with Koordinator's defaults (no profiling).
2. ``--nodes-search``: the nodes kubernetes mode needs to deliver the batch CPU-hours koordfw mode
   delivers on the default cluster (kubernetes mode rerun with more nodes, the same jobs: the batch
   sample is fixed from the default node count), and the saving.
3. ``--knobs``: koordfw mode as the operator's knobs move: cpuReclaimThresholdPercent, the suppress
   threshold, load_aware's cpu usage threshold.
4. ``--seeds 1,2,3,4,5,6,7,42 --kube-nodes 67-73``: the node comparison averaged over batch samples: for each seed
   (a different sample of the hour's jobs, and the schedulers' seed) koordfw mode on the default cluster
   and kubernetes mode on each node count of the range; the first count whose mean batch CPU-hours reach
   koordfw mode's mean (only these rows are run); ``--jobs 2`` runs two replays at a time.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import anyio
from koordfw_colocation_replay import (
    Replay,
    batch_fraction,
    default_nodes,
    koordinator_profile,
    load_batch,
    load_ls,
    reclaim_percent,
    recommended_profile,
)

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
GiB = 2**30
KEYS = ("cpu_utilisation_mean", "cpu_utilisation_p95", "allocation_mean", "batch_instances_completed",
        "batch_cpu_hours", "batch_wait_p50_s", "batch_wait_p99_s", "be_throttled_cpu_hours", "evictions",
        "ls_starved_slots", "node_over_capacity_slot_fraction", "node_slots_above_suppress_threshold_fraction",
        "executor_pods_created", "wall_seconds")


class Runner:
    """Runs replays as ``koordfw replay colocation`` does: the batch sample of each profile is the one the
    command draws for it on the default cluster (``--batch-load 1`` of the batch resources the profile's
    reclaim threshold leaves), whatever node count a row runs on."""

    def __init__(self, ls, tasks, default_n):
        self.ls, self.tasks, self.n = ls, tasks, default_n
        self._frac: dict[int, float] = {}

    def frac(self, profile):
        reclaim = reclaim_percent(profile)
        if reclaim not in self._frac:
            self._frac[reclaim] = batch_fraction(self.ls, self.tasks, self.n, 32.0, 1.0, reclaim)[0]
        return self._frac[reclaim]

    def __call__(self, mode, nodes, profile, seed=42):
        r = Replay(self.ls, self.tasks, mode=mode, nodes=nodes, node_cpu=32.0, node_memory=128 * GiB,
                   slots=self.ls.slots, batch_fraction=self.frac(profile), seed=seed, profile=profile)
        res = anyio.run(r.run)
        return {k: res.summary[k] for k in KEYS} | {"nodes": nodes}


def with_knob(profile, plugin, key, value):
    p = copy.deepcopy(profile)
    p.setdefault("pluginConfig", {}).setdefault(plugin, {})[key] = value
    return p


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--knobs", action="store_true")
    ap.add_argument("--nodes-search", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seeds", help="comma-separated seeds for the seed-averaged node comparison")
    ap.add_argument("--kube-nodes", default="67-73", help="kubernetes mode's node counts for --seeds (A-B)")
    ap.add_argument("--jobs", type=int, default=1, help="replays run at once for --seeds (forked processes)")
    a = ap.parse_args()
    from koordfw.log import configure

    configure("console", "warning")
    t0 = time.perf_counter()
    ls = load_ls(DATA / "bitbrains-rnd-2013-07", days=a.days)
    tasks = load_batch(DATA / "alibaba-batch-v2018")
    n = default_nodes(ls, 32.0, 128 * GiB)
    run = Runner(ls, tasks, n)
    rows: dict[str, dict] = {}
    if a.seeds:
        return seed_averaged(run, n, [int(x) for x in a.seeds.split(",")], a.kube_nodes, a.json, t0, a.jobs)
    rows["kubernetes"] = run("kubernetes", n, recommended_profile())
    rows["koordfw (recommended)"] = run("koordfw", n, recommended_profile())
    rows["koordfw (Koordinator defaults)"] = run("koordfw", n, koordinator_profile())
    if a.nodes_search:
        goal = rows["koordfw (recommended)"]["batch_cpu_hours"]
        lo, prev = n, n
        for extra in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0):
            k = round(n * (1 + extra))
            r = run("kubernetes", k, recommended_profile())
            rows[f"kubernetes, {k} nodes"] = r
            if r["batch_cpu_hours"] >= goal:
                lo = k
                # then node by node inside the bracket: the first count that delivers as much
                for j in range(prev + 1, k):
                    r = run("kubernetes", j, recommended_profile())
                    rows[f"kubernetes, {j} nodes"] = r
                    if r["batch_cpu_hours"] >= goal:
                        lo = j
                        break
                break
            prev = k
        rows["_nodes"] = {"koordfw_nodes": n, "kubernetes_nodes_for_same_batch_cpu_hours": lo,
                          "fewer_nodes_fraction": round(1 - n / lo, 3) if lo > n else 0.0}
    if a.knobs:
        # Koordinator's defaults with one knob moved; then from them to the recommended profile one step at
        # a time (profiling on at the median, BECPUEvict, the two thresholds), and the recommended profile
        # without BECPUEvict
        base = koordinator_profile()
        for plugin, key, values in (("batch_resource", "cpuReclaimThresholdPercent", (50, 70)),
                                    ("be_suppress", "cpuSuppressThresholdPercent", (55, 75)),
                                    ("load_aware", "usageThresholds", ({"cpu": 80, "memory": 95},))):
            for v in values:
                rows[f"{plugin}.{key}={v}"] = run("koordfw", n, with_knob(base, plugin, key, v))
        rec = recommended_profile()
        step = copy.deepcopy(base)
        step["pluginConfig"]["resource_profile"] = copy.deepcopy(rec["pluginConfig"]["resource_profile"])
        rows["+ resource_profile (cpuPercentile=50)"] = run("koordfw", n, step)
        step["pluginConfig"]["eviction"] = copy.deepcopy(rec["pluginConfig"]["eviction"])
        rows["+ BECPUEvict (60 / 80)"] = run("koordfw", n, step)
        if with_knob(with_knob(step, "batch_resource", "cpuReclaimThresholdPercent", 65),
                     "be_suppress", "cpuSuppressThresholdPercent", 70) != rec:
            raise SystemExit("the steps do not lead to the recommended profile")
        rows["+ reclaim 65, suppress 70 (the recommended profile)"] = rows["koordfw (recommended)"]
        no_cpu_evict = copy.deepcopy(rec)
        del no_cpu_evict["pluginConfig"]["eviction"]
        rows["recommended without BECPUEvict"] = run("koordfw", n, no_cpu_evict)
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(f"{'row':<44}" + "".join(f"{k[:10]:>12}" for k in KEYS))
        for name, r in rows.items():
            if name.startswith("_"):
                print(name, r)
                continue
            print(f"{name:<44}" + "".join(f"{r[k]:>12}" for k in KEYS))
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


_RUN: list = []  # the Runner, for the forked workers of --jobs (they have this process's memory)


def _one(job):
    mode, nodes, seed = job
    return job, _RUN[0](mode, nodes, recommended_profile(), seed=seed)


def seed_averaged(run, n, seeds, kube_nodes, as_json, t0, jobs=1) -> int:
    lo, hi = (int(x) for x in kube_nodes.split("-"))
    # the long koordfw runs first, so that with --jobs the short ones fill the end
    work = [("koordfw", n, s) for s in seeds] + [("kubernetes", k, s) for k in range(lo, hi + 1) for s in seeds]
    done: dict[tuple, dict] = {}
    _RUN[:] = [run]
    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for job, r in pool.imap_unordered(_one, work):
                done[job] = r
                print(f"{job}: {r['batch_cpu_hours']:,.0f} batch CPU-h", file=sys.stderr)
    else:
        done.update(map(_one, work))
    koord = {s: done[("koordfw", n, s)] for s in seeds}
    goal = sum(r["batch_cpu_hours"] for r in koord.values()) / len(seeds)
    kube: dict[int, dict[int, dict]] = {}
    means: dict[int, float] = {}
    first = None
    for k in range(lo, hi + 1):
        kube[k] = {s: done[("kubernetes", k, s)] for s in seeds}
        means[k] = sum(r["batch_cpu_hours"] for r in kube[k].values()) / len(seeds)
        print(f"kubernetes {k} nodes: mean batch CPU-h {means[k]:,.0f} (koordfw {goal:,.0f} on {n})", file=sys.stderr)
        if first is None and means[k] >= goal:
            first = k
    doc = {"seeds": seeds, "koordfw_nodes": n, "koordfw_batch_cpu_hours_mean": round(goal, 1),
           "koordfw": {str(s): r for s, r in koord.items()},
           "kubernetes": {str(k): {str(s): r for s, r in v.items()} for k, v in kube.items()},
           "kubernetes_nodes_for_same_mean_batch_cpu_hours": first,
           "fewer_nodes_fraction": round(1 - n / first, 3) if first else None}
    if as_json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        print(f"koordfw, {n} nodes, per seed: " + ", ".join(f"{s}: {r['batch_cpu_hours']:,.0f}" for s, r in koord.items())
              + f"; mean {goal:,.0f} CPU-h")
        for k, v in kube.items():
            print(f"kubernetes, {k} nodes: " + ", ".join(f"{s}: {r['batch_cpu_hours']:,.0f}" for s, r in v.items())
                  + f"; mean {means[k]:,.0f}")
        print(f"first node count at koordfw's mean: {first} ({doc['fewer_nodes_fraction']} fewer)")
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
