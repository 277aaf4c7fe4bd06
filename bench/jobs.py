"""Job-level admission: a queue of 200 jobs (gangs sized from the Alibaba batch trace) on 100 nodes shared by two
teams' ElasticQuotas, through the job queue (job_queue + gang + elastic_quota) and through the pod-level baseline
(gang + elastic_quota only, the same jobs).

Jobs: the first 200 jobs of ``../shared/data/alibaba-batch-v2018/batch_task.csv`` (by arrival, then id), each a
Strict gang of its largest task: ``inst_num`` pods capped at 64, ``plan_cpu`` per pod (100 = 1 core) clipped to
0.5-4 cores, 2 GiB per pod, running ``duration_s`` (at least 10 s) once all its pods are bound; jobs alternate
between team-a and team-b and all are queued at t = 0. Nodes: 100 × 8 cores, 32 GiB (the jobs ask
1,324 cores: they queue). Quotas: each team min 400 cores, max 800 (the whole cluster). The clock is
virtual: the engine advances it to the next deadline (backoff, Permit timeout) or job completion.

Reported per mode: jobs admitted per wall second, the virtual time to admit (start) the whole queue, scheduling
attempts per bound pod, partial jobs ever seen running (some but not all pods bound when the engine settles:
must be 0), and the idle capacity while jobs wait (cluster cores free, time-weighted over the periods in which
some job has not started: head-of-line blocking and quota fragmentation).

    .venv/bin/python bench/jobs.py [--jobs 200] [--nodes 100]
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import anyio

from koordfw.embed import EmbeddedEngine, build_registry
from koordfw.inputs import make_node, make_pod

TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "alibaba-batch-v2018" / "batch_task.csv"
T0 = 1_700_000_000.0
CORES, MEM_GI = 8, 32


def load_jobs(n: int) -> list[dict]:
    """The first ``n`` jobs of the hour: (id, pods, milli-cores per pod, duration)."""
    best: dict[str, tuple] = {}
    order: list[tuple[int, str]] = []
    with open(TRACE, newline="") as f:
        for row in csv.DictReader(f):
            jid = row["job_id"]
            inst = int(float(row["inst_num"] or 0))
            if jid not in best:
                order.append((int(row["arrival_s"]), jid))
                best[jid] = (0, 0.0, 0)
            if inst > best[jid][0]:
                best[jid] = (inst, float(row["plan_cpu"] or 0), int(float(row["duration_s"] or 0)))
    out = []
    for _, jid in sorted(order):
        inst, cpu, dur = best[jid]
        if inst <= 0:
            continue
        milli = int(min(4000, max(500, round(cpu * 10 / 500) * 500)))
        out.append({"id": jid.replace("_", "-"), "pods": min(inst, 64), "milli": milli, "duration": max(10, dur)})
        if len(out) == n:
            break
    return out


def quota(name: str, mn: int, mx: int) -> dict:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": name},
            "spec": {"min": {"cpu": str(mn), "memory": f"{mn * 4}Gi"}, "max": {"cpu": str(mx), "memory": f"{mx * 4}Gi"}}}


def job_pods(i: int, job: dict) -> list:
    team = "team-a" if i % 2 == 0 else "team-b"
    ann = {"gang.scheduling.koordinator.sh/name": job["id"],
           "gang.scheduling.koordinator.sh/min-available": str(job["pods"])}
    return [make_pod(f"{job['id']}-{k}", team, requests={"cpu": f"{job['milli']}m", "memory": "2Gi"},
                     annotations=ann) for k in range(job["pods"])]


async def run(jobs: list[dict], nodes: int, with_queue: bool) -> dict:
    plugins = {"elastic_quota", "gang"} | ({"job_queue"} if with_queue else set())
    registry = build_registry({"disable": ["default_preemption"],
                               "pluginConfig": {"elastic_quota": {"monitorAllQuotas": False}}},
                              autoload=True, only=plugins)
    half = nodes * CORES // 2
    pods_of = {j["id"]: job_pods(i, j) for i, j in enumerate(jobs)}
    e = EmbeddedEngine(registry, nodes=[make_node(f"n{k:03d}", allocatable={"cpu": str(CORES), "memory": f"{MEM_GI}Gi",
                                                                           "pods": "110"}) for k in range(nodes)],
                       pods=[p for ps in pods_of.values() for p in ps],
                       objects=[quota("team-a", half, 2 * half), quota("team-b", half, 2 * half)], start_time=T0)
    by_id = {j["id"]: j for j in jobs}
    started: dict[str, float] = {}
    finish: dict[str, float] = {}
    partial_seen: set[str] = set()
    idle_core_s = wait_s = 0.0
    total_milli = nodes * CORES * 1000
    last_t, last_idle, waiting_then = T0, 0.0, True
    wall = time.perf_counter()
    await e.start()
    while True:
        await e.drive()
        now = e.clock.now()
        if waiting_then:
            idle_core_s += last_idle * (now - last_t)
            wait_s += now - last_t
        bound: dict[str, int] = {}
        for p in e.view.all_pods():
            if p.node_name:
                jid = p.annotations["gang.scheduling.koordinator.sh/name"]
                bound[jid] = bound.get(jid, 0) + 1
        for jid, n in bound.items():
            if n == by_id[jid]["pods"] and jid not in started:
                started[jid] = now
                finish[jid] = now + by_id[jid]["duration"]
            elif 0 < n < by_id[jid]["pods"]:
                partial_seen.add(jid)
        used = int(e.view.requested[: e.view.num_nodes, e.view.resource_index("cpu")].sum())
        last_t, last_idle = now, (total_milli - used) / 1000
        waiting_then = len(started) < len(jobs)
        if not waiting_then:
            break
        pending_done = [(t, jid) for jid, t in finish.items() if jid in started and t >= now and jid in pods_of]
        if not pending_done:
            break  # nothing will finish: the rest can never start
        t, _ = min(pending_done)
        e.clock.advance_to(t)
        if waiting_then:
            idle_core_s += last_idle * (t - last_t)
            wait_s += t - last_t
        last_t = t
        for jid in [j for j, ft in finish.items() if ft <= t and j in pods_of]:
            for p in pods_of.pop(jid):
                await e.delete_pod(p.uid)
    wall = time.perf_counter() - wall
    binds = len(e.bind_events)
    makespan = (max(started.values()) - T0) if started else math.inf
    return {"mode": "job queue" if with_queue else "pod-level (gang + quota)", "started": len(started),
            "wall": wall, "jobs_per_s": len(started) / wall if wall else 0.0, "makespan": makespan,
            "attempts_per_pod": sum(e.attempt_counts.values()) / max(binds, 1), "partial": len(partial_seen),
            "idle_cores": idle_core_s / wait_s if wait_s else 0.0, "pods": binds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=100)
    a = ap.parse_args()
    jobs = load_jobs(a.jobs)
    print(f"{len(jobs)} jobs, {sum(j['pods'] for j in jobs):,} pods, "
          f"{sum(j['pods'] * j['milli'] for j in jobs) / 1000:,.0f} cores asked; {a.nodes} nodes × {CORES} cores")
    rows = [anyio.run(run, jobs, a.nodes, True), anyio.run(run, jobs, a.nodes, False)]
    head = ("mode", "jobs started", "jobs/s (wall)", "time to admit all (virtual)", "attempts / bound pod",
            "partial jobs", "idle cores while jobs wait")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([r["mode"], f"{r['started']}/{len(jobs)}", f"{r['jobs_per_s']:.1f}",
                          f"{r['makespan']:,.0f} s", f"{r['attempts_per_pod']:.2f}", str(r["partial"]),
                          f"{r['idle_cores']:,.0f} of {a.nodes * CORES:,}"]))


if __name__ == "__main__":
    main()
