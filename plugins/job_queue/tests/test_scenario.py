"""The job queue on whole clusters (the embedded engine): a job admitted whole or waiting whole, the fair order
between two teams' queues, and borrowed capacity reclaimed whole job by whole job."""

from __future__ import annotations

import anyio
from job_queue_testkit import bound_by_job, engine, gang, job_pods, quota, report


def test_a_job_is_admitted_whole_or_waits_whole():
    # team-a may use 6 cores: job a1 (4 pods × 1 core) fits; a2 (4 more) does not fit beside it and waits
    # whole (none of its pods bound, each held with the queue's reason) until a1 leaves, then runs whole
    async def run():
        e = engine(gang("team-a", "a1", 4) + gang("team-a", "a2", 4, t=1), [quota("team-a", 6, 6)])
        await e.run()
        first = bound_by_job(e)
        rep = await report(e)
        reason = e.results[[p.uid for p in e.view.all_pods() if p.name == "a2-0"][0]].reason
        for p in [p for p in e.view.all_pods() if p.name.startswith("a1-")]:
            await e.delete_pod(p.uid)
        await e.drive()
        return first, rep, reason, bound_by_job(e)

    first, rep, reason, after = anyio.run(run)
    assert first == {"a1": 4, "a2": 0}
    assert "job team-a/a2 waits in queue team-a (position 1)" in reason
    assert "quota team-a: cpu reserved 4 + job minimum 4 > " in reason
    units = {u["job"]: u for u in rep["queueUnits"]}
    assert units["team-a/a1"]["phase"] == "Running" and units["team-a/a2"]["phase"] == "Enqueued"
    assert rep["jobQueues"][0] == {"queue": "team-a", "share": 0.667, "admitted": 1, "waiting": 1,
                                   "reserved": {"cpu": "4", "memory": "4Gi"}}
    assert after == {"a2": 4}


def test_fair_order_between_queues_by_dominant_share_then_age():
    # 8 cores, two teams of min 4 each (max 8). Team a's jobs are all older, but after a1 runs team a's share
    # is 1 and team b's 0, so b1 goes before a2 although a2 is older; then a2 (share 1 vs 1: older head)
    async def run():
        pods = (gang("team-a", "a1", 4, t=0) + gang("team-a", "a2", 4, t=1) + gang("team-a", "a3", 4, t=2)
                + gang("team-b", "b1", 4, t=5) + gang("team-b", "b2", 4, t=6))
        e = engine(pods, [quota("team-a", 4, 8), quota("team-b", 4, 8)], nodes=1)
        await e.run()
        return e, await report(e)

    e, rep = anyio.run(run)
    assert bound_by_job(e) == {"a1": 4, "a2": 0, "a3": 0, "b1": 4, "b2": 0}
    waiting = [(u["job"], u["position"]) for u in rep["queueUnits"] if u["phase"] == "Enqueued"]
    assert waiting == [("team-a/a2", 1), ("team-a/a3", 2), ("team-b/b2", 1)]


def test_borrowed_capacity_is_reclaimed_whole_job_by_whole_job():
    # team a borrows all 8 cores with two 4-pod jobs while b is idle; b's job arrives: a's runtime falls to its
    # min 4, so the newest admitted job of a (a2) is evicted whole, a1 keeps running whole, b1 then runs
    async def run():
        e = engine(gang("team-a", "a1", 4, t=0) + gang("team-a", "a2", 4, t=1),
                   [quota("team-a", 4, 8), quota("team-b", 4, 8)], nodes=1)
        await e.run()
        before = bound_by_job(e)
        for p in gang("team-b", "b1", 4, t=50):
            await e.add_pod(p)
        await e.drive()
        held = bound_by_job(e)
        plan = await e.deschedule()
        return before, held, plan, bound_by_job(e), await report(e)

    before, held, plan, after, rep = anyio.run(run)
    assert before == {"a1": 4, "a2": 4}
    assert held == {"a1": 4, "a2": 4, "b1": 0}
    assert sorted(m.pod for m in plan) == [f"team-a/a2-{i}" for i in range(4)]
    assert all("job team-a/a2 reclaimed whole" in m.reason for m in plan)
    assert after == {"a1": 4, "a2": 0, "b1": 4}
    assert rep["jobReclaims"][0]["job"] == "team-a/a2" and rep["jobReclaims"][0]["pods"] == 4


def test_a_workloads_pods_are_one_job_admitted_whole():
    """Two batch Jobs of 4 pods × 1 core without any gang, in a queue that holds 6 cores: the first is admitted
    whole (4 bound); the second waits whole (0 bound, not 2 of 4) under its workload's name, until the first's
    pods leave. A ReplicaSet's pods are not of a workload kind by default: each is a job of its own, so 2 of 3
    fit beside a Job of 4."""
    async def run():
        e = engine(job_pods("team-a", "etl-1", 4) + job_pods("team-a", "etl-2", 4, t=1), [quota("team-a", 6, 6)])
        await e.run()
        bound = {n: sum(1 for p in e.view.all_pods() if p.name.startswith(n) and p.node_name) for n in ("etl-1", "etl-2")}
        rep = await report(e)
        reason = e.results[[p.uid for p in e.view.all_pods() if p.name == "etl-2-0"][0]].reason
        for p in [p for p in e.view.all_pods() if p.name.startswith("etl-1")]:
            await e.delete_pod(p.uid)
        await e.drive()
        after = sum(1 for p in e.view.all_pods() if p.name.startswith("etl-2") and p.node_name)
        e2 = engine(job_pods("team-a", "etl-1", 4) + job_pods("team-a", "web", 3, t=1, kind="ReplicaSet"),
                    [quota("team-a", 6, 6)])
        await e2.run()
        web = sum(1 for p in e2.view.all_pods() if p.name.startswith("web") and p.node_name)
        return bound, rep, reason, after, web

    bound, rep, reason, after, web = anyio.run(run)
    assert bound == {"etl-1": 4, "etl-2": 0}
    assert "job Job team-a/etl-2 waits in queue team-a (position 1)" in reason
    units = {u["job"]: u for u in rep["queueUnits"]}
    assert units["Job team-a/etl-1"]["phase"] == "Running" and units["Job team-a/etl-2"]["phase"] == "Enqueued"
    assert after == 4 and web == 2
