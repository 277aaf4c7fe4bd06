"""job_queue: Koord-Queue's role over elastic quota. A job's pods are held at ``pre_enqueue`` until the job is
admitted whole; the admission pass (:func:`~koordfw_job_queue.jobs.admission_pass`) runs once per cluster
generation; ``deschedule`` reclaims borrowed capacity whole job by whole job; ``report`` and the PodGroups'
status show the queue."""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
from koordfw_elastic_quota.api import QuotaFigures, QuotaFiguresCache

from koordfw import ClusterEventWithHint, ClusterView, Handle, Migration, Pod, Status, hookimpl
from koordfw.extension import (
    QUEUE_POLICY_BLOCK,
    QUEUE_POLICY_PRIORITY,
    QUEUE_UNIT_PHASE_DEQUEUED,
    QUEUE_UNIT_PHASE_ENQUEUED,
    QUEUE_UNIT_PHASE_RUNNING,
)
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE, POD_ADD, POD_DELETE, ClusterEvent

from .index import JobIndex
from .jobs import WORKLOAD_KINDS, Job, PassResult, admission_pass, fmt_res, reclaim_plan

#: how many reclaims the report keeps (the latest)
HISTORY = 200


def _policy(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value not in (QUEUE_POLICY_PRIORITY, QUEUE_POLICY_BLOCK):
        raise ValueError(f"queuePolicy: expected {QUEUE_POLICY_PRIORITY} or {QUEUE_POLICY_BLOCK}, got {value!r}")


@attrs.define
class JobQueueArgs:
    #: Koord-Queue's Queue ``spec.queuePolicy``: ``Priority`` (a job that does not fit lets the ones behind it
    #: by) or ``Block`` (the head that does not fit holds its queue)
    queue_policy: str = attrs.field(default=QUEUE_POLICY_PRIORITY, validator=_policy)  # queuePolicy
    #: take borrowed capacity back whole job by whole job (``deschedule``)
    reclaim: bool = True  # reclaim
    #: the controller kinds whose pods (without a gang) are one job, admitted whole: all of the workload's
    #: pods must fit (Koord-Queue's and Kueue's batch workloads); other pods are a job each
    workload_kinds: tuple[str, ...] = attrs.field(default=WORKLOAD_KINDS, converter=tuple)  # workloadKinds


class JobQueue:
    """Per-scheduler state: the admitted jobs (id → admission time), the last pass, the reclaim history."""

    def __init__(self) -> None:
        self.admitted: dict[str, float] = {}
        self.first_seen: dict[str, float] = {}
        self._key: int | None = None
        self._figures: QuotaFigures | None = None
        #: the quota figures and the jobs, updated from what changed since the last pass
        self._quota_cache = QuotaFiguresCache()
        self._index: JobIndex | None = None
        self._jobs: dict[str, Job] = {}
        self._uids: dict[str, str] = {}
        self._last = PassResult()
        #: PodGroup key → the queue status last written
        self._written: dict[str, dict[str, Any]] = {}
        self.reclaims: list[dict[str, Any]] = []
        #: jobs being reclaimed: not admitted again (nor taken for admitted by their bound pods) until the last of
        #: their pods has left its node
        self.reclaiming: set[str] = set()
        #: jobs admitted since startup
        self.admitted_total = 0

    @staticmethod
    @hookimpl
    def plugin_args() -> type[JobQueueArgs]:
        return JobQueueArgs

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        # a job leaving frees quota, a new pod may complete a job, nodes change the runtime quotas, a quota or
        # PodGroup change changes what fits: every one may admit a waiting job
        return [ClusterEventWithHint(e) for e in (POD_ADD, POD_DELETE, ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE,
                                                  ClusterEvent("ElasticQuota", "*"), ClusterEvent("PodGroup", "*"))]

    # -- the pass --------------------------------------------------------------------------------------
    def refresh(self, handle: Handle, args: JobQueueArgs) -> QuotaFigures | None:
        """Run the admission pass if the cluster changed since the last one; the quota figures (None without
        ElasticQuota objects: no queue)."""
        cluster = handle.cluster
        key = cluster.generation
        if key == self._key:
            return self._figures
        self._key = key
        figures = self._figures = self._quota_cache.figures(cluster, handle.plugin_args("elastic_quota"))
        if figures is None:
            self._jobs, self._uids, self._last = {}, {}, PassResult()
            return None
        now = handle.now()
        if self._index is None or self._index.workload_kinds != args.workload_kinds:
            self._index = JobIndex(args.workload_kinds)
        jobs = self._index.jobs(cluster, figures, self.first_seen, now)
        for jid in [j for j in self.admitted if j not in jobs]:  # finished or deleted
            del self.admitted[jid]
        for jid in [j for j in self.first_seen if j not in jobs]:
            del self.first_seen[jid]
        self.reclaiming &= {j.id for j in jobs.values() if j.bound()}
        for job in jobs.values():  # bound before this scheduler started (or re-started): admitted already
            if job.id not in self.admitted and job.id not in self.reclaiming and job.bound():
                self.admitted[job.id] = now
        result = admission_pass(jobs, self.admitted, figures, args.queue_policy, hold=self.reclaiming)
        for jid in result.admitted:
            self.admitted[jid] = now
        self.admitted_total += len(result.admitted)
        self._jobs, self._uids, self._last = jobs, self._index.uids, result
        self._write_status(handle)
        return figures

    def _phase(self, job: Job) -> str:
        if job.id not in self.admitted:
            return QUEUE_UNIT_PHASE_ENQUEUED
        return QUEUE_UNIT_PHASE_RUNNING if job.running() else QUEUE_UNIT_PHASE_DEQUEUED

    def unit_status(self, job: Job) -> dict[str, Any]:
        """The job's queue state, shaped as a Koord-Queue QueueUnit status (phase, message) plus its queue and
        position."""
        st: dict[str, Any] = {"queue": job.queue, "phase": self._phase(job)}
        if job.id in self.admitted:
            st["admissionTime"] = _iso(self.admitted[job.id])
        else:
            waiting = self._last.waiting.get(job.queue, [])
            st["position"] = waiting.index(job.id) + 1 if job.id in waiting else 0
            st["message"] = self._last.reasons.get(job.id, "")
        return st

    def _write_status(self, handle: Handle) -> None:
        for job in self._jobs.values():
            self._write_job_status(job, handle)

    def _write_job_status(self, job: Job, handle: Handle) -> None:
        if not job.pod_groups:
            return
        unit = self.unit_status(job)
        for key in job.pod_groups:
            if self._written.get(key) == unit:
                continue
            pg = handle.cluster.get_object("PodGroup", key)
            if pg is None:
                continue
            status = dict(pg.get("status") or {})
            status["queueUnit"] = unit
            if handle.update_object_status("PodGroup", key, status):
                self._written[key] = unit

    # -- hooks -----------------------------------------------------------------------------------------
    @hookimpl
    def post_bind(self, pod: Pod, handle: Handle) -> None:
        """A member of an admitted job bound: once the job runs, its PodGroups say so (Dequeued → Running)
        without waiting for the next admission pass."""
        jid = self._uids.get(pod.uid)
        job = self._jobs.get(jid) if jid is not None else None
        if job is None or not job.pod_groups or job.id not in self.admitted:
            return
        members = {g: [handle.cluster.pod(p.uid) or p for p in ms] for g, ms in job.members.items()}
        job = self._jobs[job.id] = attrs.evolve(job, members=members)
        self._write_job_status(job, handle)

    @hookimpl
    def pre_enqueue(self, pod: Pod, args: JobQueueArgs, handle: Handle) -> Status | None:
        if self.refresh(handle, args) is None:
            return None
        jid = self._uids.get(pod.uid)
        if jid is None or jid in self.admitted:
            return None
        job = self._jobs[jid]
        unit = self.unit_status(job)
        where = f"position {unit['position']}" if unit.get("position") else "waiting"
        return Status.unschedulable(f"job {jid} waits in queue {job.queue} ({where}): {unit['message']}")

    @hookimpl
    def deschedule(self, cluster: ClusterView, args: JobQueueArgs, handle: Handle) -> list[Migration] | None:
        if not args.reclaim or self.refresh(handle, args) is None or self._figures is None:
            return None
        plan = reclaim_plan(self._jobs, self.admitted, self._figures)
        out: list[Migration] = []
        for job, why in plan:
            self.admitted.pop(job.id, None)
            self.reclaiming.add(job.id)
            bound = [p for p in job.pods if p.node_name]
            self.reclaims.append({"time": _iso(handle.now()), "job": job.id, "queue": job.queue,
                                  "pods": len(bound), "reason": why})
            for p in sorted(bound, key=lambda p: p.key):
                out.append(Migration(pod=p.key, from_node=p.node_name or "", to=None,
                                     reason=f"job {job.id} reclaimed whole: {why}"))
        del self.reclaims[:-HISTORY]
        self._key = None  # the next pass sees the reclaimed jobs waiting again
        return out or None

    @hookimpl
    def report(self, args: JobQueueArgs, handle: Handle) -> dict[str, Any] | None:
        figures = self.refresh(handle, args)
        if figures is None:
            return None
        queues = []
        for q in sorted({j.queue for j in self._jobs.values()}):
            js = [j for j in self._jobs.values() if j.queue == q]
            res = self._last.reserved.get(q, {})
            queues.append({"queue": q, "share": round(self._last.share.get(q, 0.0), 3),
                           "admitted": sum(1 for j in js if j.id in self.admitted),
                           "waiting": len(self._last.waiting.get(q, [])),
                           "reserved": {r: fmt_res(r, v) for r, v in sorted(res.items()) if v}})
        units = []
        for job in sorted(self._jobs.values(), key=lambda j: (j.queue, j.created, j.id)):
            row = {"job": job.id, "pods": len(job.pods), "bound": job.bound(), **self.unit_status(job)}
            units.append(row)
        out: dict[str, Any] = {"jobQueues": queues, "queueUnits": units}
        if self.reclaims:
            out["jobReclaims"] = list(self.reclaims)
        return out


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
