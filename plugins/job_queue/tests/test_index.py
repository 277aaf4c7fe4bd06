"""The job queue's pass keeps its jobs and quota figures from one cluster change to the next (JobIndex,
QuotaFiguresCache): at every pass of a seeded run with churn (jobs finishing and arriving, a PodGroup and a quota
edited, a pod finishing), they equal what collect_jobs and quota_figures compute from every pod."""

from __future__ import annotations

import random

import anyio
import attrs
import pytest
from job_queue_testkit import T0, engine, gang, job_pods, quota, report
from koordfw_elastic_quota.api import QuotaFiguresCache, quota_figures
from koordfw_job_queue.index import JobIndex
from koordfw_job_queue.jobs import collect_jobs

from koordfw.core.model import make_pod

GANG = "gang.scheduling.koordinator.sh"
FIGURES = ("min", "max", "runtime", "used", "parent")


def pod_group(ns: str, name: str, members: int) -> dict:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": {"minMember": members}}


def crd_gang(ns: str, name: str, size: int, t: float) -> list:
    return [attrs.evolve(make_pod(f"{name}-{i}", ns, requests={"cpu": "1", "memory": "1Gi"},
                                  labels={"pod-group.scheduling.sigs.k8s.io": name}), creation_timestamp=T0 + t)
            for i in range(size)]


def gang_group(ns: str, names: tuple[str, str], size: int, t: float) -> list:
    groups = '["' + '","'.join(f"{ns}/{n}" for n in names) + '"]'
    out = []
    for name in names:
        for p in gang(ns, name, size, t=t):
            out.append(attrs.evolve(p, annotations={**p.annotations, f"{GANG}/groups": groups}))
    return out


@pytest.fixture
def checked(monkeypatch):
    """Every JobIndex.jobs and QuotaFiguresCache.figures call compared with the full computation: the number of
    calls and the differences found (recorded, not raised: the scheduler would catch a plugin's exception)."""
    out: dict = {"jobs": 0, "figures": 0, "differences": []}
    jobs, figures = JobIndex.jobs, QuotaFiguresCache.figures

    def differ(what: str, got, want) -> None:
        if got != want:
            out["differences"].append((what, got, want))

    def checked_jobs(self, cluster, figs, first_seen, now):
        before = dict(first_seen)
        got = jobs(self, cluster, figs, first_seen, now)
        want = collect_jobs(cluster, figs, before, now, workload_kinds=self.workload_kinds)
        differ("order", list(got), list(want))
        differ("jobs", got, want)
        differ("first_seen", first_seen, before)
        differ("uids", self.uids, {p.uid: j.id for j in want.values() for p in j.pods})
        for jid in set(got) & set(want):
            g, w = got[jid], want[jid]
            differ(f"derived {jid}", (g.min_request(), g.pending_request(), g.bound()),
                   (w.min_request(), w.pending_request(), w.bound()))
        out["jobs"] += 1
        return got

    def checked_figures(self, cluster, args=None):
        got = figures(self, cluster, args)
        want = quota_figures(cluster, args)
        differ("figures", got is None, want is None)
        if got is not None and want is not None:
            for f in FIGURES:
                differ(f, getattr(got, f), getattr(want, f))
        out["figures"] += 1
        return got

    monkeypatch.setattr(JobIndex, "jobs", checked_jobs)
    monkeypatch.setattr(QuotaFiguresCache, "figures", checked_figures)
    return out


def test_the_kept_jobs_and_figures_equal_the_recomputed_ones_through_churn(checked):
    rng = random.Random(7)

    async def run():
        pods = (gang("team-a", "a1", 3, t=0) + gang("team-a", "a2", 4, t=1) + gang("team-b", "b1", 2, t=2)
                + gang_group("team-b", ("g1", "g2"), 2, t=3) + crd_gang("team-a", "pg1", 3, t=4)
                + job_pods("team-b", "etl", 3, t=5)
                + [make_pod("loose-0", "team-a", requests={"cpu": "1"}), make_pod("other-0", "misc",
                                                                                   requests={"cpu": "1"})]
                + [make_pod("bad-0", "team-a", requests={"cpu": "1"},
                            annotations={f"{GANG}/name": "bad", f"{GANG}/min-available": "x"})])
        e = engine(pods, [quota("team-a", 6, 10), quota("team-b", 4, 10)], nodes=2, cpu=8)
        e.put_object(pod_group("team-a", "pg1", 3))
        await e.run()
        for step in range(12):
            bound = [p for p in e.view.all_pods() if p.node_name and not p.name.startswith(("pg1", "other"))]
            for p in rng.sample(bound, min(len(bound), rng.randint(1, 4))):
                await e.delete_pod(p.uid)
            for p in gang("team-a" if step % 2 else "team-b", f"n{step}", rng.randint(1, 4), t=10 + step):
                await e.add_pod(p)
            await e.drive()
            await report(e)
            # one change alone between two passes: each must be seen without any pod changing
            if step == 3:
                e.put_object(pod_group("team-a", "pg1", 2))  # the PodGroup's minimum: its job's changes
            elif step == 6:
                e.put_object(quota("misc", 2, 4))  # a new quota: the pods of its namespace change queue
            elif step == 8:
                p = next(p for p in e.view.all_pods() if p.node_name)
                await e.add_pod(attrs.evolve(p, phase="Succeeded"))  # a pod finishes in place
            await report(e)

    anyio.run(run)
    assert checked["jobs"] > 20 and checked["figures"] > 20
    assert checked["differences"] == []
