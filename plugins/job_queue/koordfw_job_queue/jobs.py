"""Jobs and the admission pass. A job is a gang group (every gang of it, through ``koordfw_gang.api``) or a
pod without a gang; its queue is its quota (``koordfw_elastic_quota.api``). The pass walks the waiting jobs
in fair order between queues (lowest dominant share of the quota first, then the oldest head job) and admits
each job whose whole minimum fits its quota and every ancestor (``reserved + minimum ≤ min(runtime, max)``)."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

import attrs
from koordfw_elastic_quota.api import QuotaFigures
from koordfw_gang.api import (
    GangDefinitionError,
    GangSpec,
    gang_id_of,
    group_id_of,
    is_crd_gang,
    spec_from_pod,
    spec_from_pod_group,
)

from koordfw import ClusterView, Pod
from koordfw.extension import QUEUE_POLICY_BLOCK


@attrs.define
class Job:
    """One job as the cluster has it now. A job is built once and not changed after (a pod that changes makes
    a new Job), so what is derived from its members is computed once."""

    id: str
    queue: str
    priority: int
    created: float
    #: gang id → its member pods (a pod without a gang: its own key)
    members: dict[str, list[Pod]]
    #: gang id → its minMember (1 for a pod without a gang)
    minimum: dict[str, int]
    #: why the job cannot be admitted yet whatever the quota says ("" when complete)
    incomplete: str = ""
    #: the PodGroup keys of its CRD gangs (their status shows the queue state live)
    pod_groups: list[str] = attrs.field(factory=list)
    _derived: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False, eq=False)

    @property
    def pods(self) -> list[Pod]:
        return [p for ms in self.members.values() for p in ms]

    def min_request(self) -> dict[str, int]:
        """The requests of each gang's first ``minMember`` members (by name): what must fit to run at all."""
        out = self._derived.get("min_request")
        if out is None:
            out = self._derived["min_request"] = {}
            for gid, ms in self.members.items():
                for p in sorted(ms, key=lambda p: p.name)[: self.minimum.get(gid, 1)]:
                    for r, v in p.requests.items():
                        out[r] = out.get(r, 0) + v
        return dict(out)

    def pending_request(self) -> dict[str, int]:
        out = self._derived.get("pending_request")
        if out is None:
            out = self._derived["pending_request"] = {}
            for p in self.pods:
                if not p.node_name:
                    for r, v in p.requests.items():
                        out[r] = out.get(r, 0) + v
        return dict(out)

    def bound(self) -> int:
        n = self._derived.get("bound")
        if n is None:
            n = self._derived["bound"] = sum(1 for p in self.pods if p.node_name)
        return int(n)

    def running(self) -> bool:
        """Every gang has at least its minimum bound."""
        return all(sum(1 for p in ms if p.node_name) >= self.minimum.get(g, 1) for g, ms in self.members.items())


def spec_of(pod: Pod, cluster: ClusterView) -> GangSpec | None:
    """The gang spec a pod's gang has (its PodGroup's, or its annotations'), ``None`` when it is missing or
    invalid."""
    gid = gang_id_of(pod)
    try:
        if is_crd_gang(pod):
            pg = cluster.get_object("PodGroup", gid)
            return None if pg is None else spec_from_pod_group(gid, pg)
        return spec_from_pod(pod)
    except GangDefinitionError:
        return None  # the gang plugin holds such pods with the definition's error


#: the controller kinds whose pods are one job (batch/v1 Job and the training / big-data operators' kinds)
WORKLOAD_KINDS = ("Job", "TFJob", "PyTorchJob", "MPIJob", "XGBoostJob", "PaddleJob", "SparkApplication", "RayJob")

#: one pod's place in its job: (job id, gang key, the gang's minimum; 0: every pod of the workload)
Place = tuple[str, str, int]


def loose_place(p: Pod, workload_kinds: tuple[str, ...]) -> Place:
    """The place of a pod without a gang: its workload's job, or a job of its own."""
    if p.controller is not None and p.controller.kind in workload_kinds:
        jid = f"{p.controller.kind} {p.namespace}/{p.controller.name}"
        return jid, jid, 0  # its minimum: every pod of the workload (set by build_job)
    return p.key, p.key, 1


def build_job(jid: str, placed: list[tuple[Pod, str, int]], specs: Mapping[str, GangSpec | None],
              figures: QuotaFigures, first_seen: dict[str, float], now: float) -> Job:
    """The job ``jid`` of its non-terminal pods ``placed`` (each with its gang key and minimum), in key order."""
    job: Job | None = None
    for p, gang, need in placed:
        if job is None:
            seen = first_seen.setdefault(jid, now)
            job = Job(jid, figures.name_of(p), p.priority, p.creation_timestamp or seen, {}, {})
        job.priority = max(job.priority, p.priority)
        if p.creation_timestamp is not None:
            job.created = min(job.created, p.creation_timestamp)
        job.members.setdefault(gang, []).append(p)
        job.minimum[gang] = need
        if is_crd_gang(p) and (gid := gang_id_of(p)) and gid not in job.pod_groups:
            job.pod_groups.append(gid)
    assert job is not None, f"job {jid} without a pod"
    for gang in job.members:
        if job.minimum[gang] == 0:  # a workload: all of its pods
            job.minimum[gang] = len(job.members[gang])
    groups = {g for gid in job.members if (s := specs.get(gid)) is not None for g in s.groups} or set(job.members)
    missing = sorted(groups - set(job.members))
    short = [f"{g} has {len(job.members[g])}/{job.minimum[g]}" for g in sorted(job.members)
             if len(job.members[g]) < job.minimum[g]]
    if missing:
        job.incomplete = f"gang(s) {', '.join(missing)} of the group have no pod yet"
    elif short:
        job.incomplete = "not all members exist: " + "; ".join(short)
    return job


def collect_jobs(cluster: ClusterView, figures: QuotaFigures, first_seen: dict[str, float], now: float,
                 workload_kinds: tuple[str, ...] = WORKLOAD_KINDS) -> dict[str, Job]:
    """Every job with a non-terminal pod, from every pod (:class:`~koordfw_job_queue.index.JobIndex` keeps the
    same jobs from one cluster change to the next). A gang whose definition is missing or invalid is no job (the
    gang plugin holds its pods); its spec is read from the gang's first pod by key. Pods without a gang whose
    controller is of one of ``workload_kinds`` are one job, ``"<Kind> namespace/name"``, whose minimum is all
    of its pods; any other pod is a job of its own. ``first_seen`` (job id → time) is updated and gives a job's
    age when its pods carry no creation time."""
    specs: dict[str, GangSpec | None] = {}
    placed: dict[str, list[tuple[Pod, str, int]]] = {}
    for p in sorted(cluster.all_pods(), key=lambda p: p.key):
        if p.is_terminal:
            continue
        gid = gang_id_of(p)
        if gid:
            if gid not in specs:
                specs[gid] = spec_of(p, cluster)
            spec = specs[gid]
            if spec is None:
                continue
            jid, gang, need = group_id_of(spec.groups), gid, spec.min_member
        else:
            jid, gang, need = loose_place(p, workload_kinds)
        placed.setdefault(jid, []).append((p, gang, need))
    return {jid: build_job(jid, ps, specs, figures, first_seen, now) for jid, ps in placed.items()}


def fmt_res(r: str, v: int) -> str:
    if r == "cpu":
        return f"{v / 1000:g}"
    if r in ("memory", "ephemeral-storage"):
        return f"{v / 2**30:g}Gi"
    return str(v)


@attrs.define
class PassResult:
    """What one admission pass decided."""

    admitted: list[str] = attrs.field(factory=list)  # newly admitted, in order
    #: job id → why it waits
    reasons: dict[str, str] = attrs.field(factory=dict)
    #: queue → the waiting job ids in queue order
    waiting: dict[str, list[str]] = attrs.field(factory=dict)
    #: quota → reserved (used + the pending requests of admitted jobs, subtree included)
    reserved: dict[str, dict[str, int]] = attrs.field(factory=dict)
    #: queue → its dominant share after the pass
    share: dict[str, float] = attrs.field(factory=dict)


def dominant_share(q: str, reserved: Mapping[str, Mapping[str, int]], figures: QuotaFigures) -> float:
    """DRF's dominant share of a quota: the largest ``reserved / min`` over the resources of its min (of its
    max when it has no min); 0 for a quota without either."""
    base = {r: v for r, v in figures.min.get(q, {}).items() if v > 0} or {
        r: v for r, v in figures.max.get(q, {}).items() if v > 0}
    res = reserved.get(q, {})
    return max((res.get(r, 0) / v for r, v in base.items()), default=0.0)


def admission_pass(jobs: Mapping[str, Job], admitted: Mapping[str, float], figures: QuotaFigures, policy: str,
                   hold: Set[str] = frozenset()) -> PassResult:
    """Admit the waiting jobs that fit, in fair order between queues (lowest dominant share, then the oldest
    head job, then the queue name); within a queue by priority (highest first), then age, then id. With the
    ``Block`` policy a queue's head that does not fit holds the rest of its queue. Jobs in ``hold`` (being
    reclaimed: some pods still on their nodes) wait."""
    out = PassResult()
    reserved = {q: dict(u) for q, u in figures.used.items()}

    def charge(job: Job, req: Mapping[str, int]) -> None:
        for q in figures.chain(job.queue):
            into = reserved.setdefault(q, {})
            for r, v in req.items():
                into[r] = into.get(r, 0) + v

    queues: dict[str, list[Job]] = {}
    for job in jobs.values():
        if job.id in admitted:
            charge(job, job.pending_request())
        else:
            queues.setdefault(job.queue, []).append(job)
    for js in queues.values():
        js.sort(key=lambda j: (-j.priority, j.created, j.id))

    def why_not(job: Job) -> str | None:
        if job.id in hold:
            return "being reclaimed: waiting for its pods to leave their nodes"
        if job.incomplete:
            return job.incomplete
        need = job.min_request()
        for q in figures.chain(job.queue):
            mx, rt, have = figures.max.get(q, {}), figures.runtime.get(q, {}), reserved.get(q, {})
            for r in sorted(mx):
                limit = min(mx[r], rt.get(r, mx[r]))
                if have.get(r, 0) + need.get(r, 0) > limit:
                    what = "max" if limit == mx[r] else "runtime"
                    return (f"quota {q}: {r} reserved {fmt_res(r, have.get(r, 0))} + job minimum "
                            f"{fmt_res(r, need.get(r, 0))} > {what} {fmt_res(r, limit)}")
        return None

    idx = {q: 0 for q in queues}
    blocked: dict[str, str] = {}
    while True:
        open_ = [q for q in queues if idx[q] < len(queues[q]) and q not in blocked]
        if not open_:
            break
        q = min(open_, key=lambda q: (dominant_share(q, reserved, figures), queues[q][idx[q]].created, q))
        job = queues[q][idx[q]]
        why = why_not(job)
        if why is None:
            out.admitted.append(job.id)
            charge(job, job.pending_request())
            idx[q] += 1
            continue
        out.reasons[job.id] = why
        if policy == QUEUE_POLICY_BLOCK and not job.incomplete:
            blocked[q] = job.id
        idx[q] += 1
    for q, js in queues.items():
        waiting = [j.id for j in js if j.id not in out.admitted]
        out.waiting[q] = waiting
        head = blocked.get(q)
        for jid in waiting:
            if jid not in out.reasons:
                out.reasons[jid] = f"behind job {head} in queue {q} (queuePolicy Block)"
    out.reserved = reserved
    out.share = {q: dominant_share(q, reserved, figures) for q in sorted(set(queues) | set(figures.used))}
    return out


def reclaim_plan(jobs: Mapping[str, Job], admitted: Mapping[str, float], figures: QuotaFigures,
                 ) -> list[tuple[Job, str]]:
    """Borrowed capacity back, job by job: for each quota whose bound usage exceeds its runtime, the admitted
    jobs of it (or below it) with bound pods go, lowest priority, then latest admitted, then newest first, until its usage
    fits; a job goes whole (every bound pod). Returns (job, why)."""
    used = {q: dict(u) for q, u in figures.used.items()}
    out: list[tuple[Job, str]] = []
    gone: set[str] = set()

    def over(q: str) -> str | None:
        rt, mx = figures.runtime.get(q, {}), figures.max.get(q, {})
        for r in sorted(mx):
            limit = min(mx[r], rt.get(r, mx[r]))
            if used[q].get(r, 0) > limit:
                return f"quota {q}: {r} used {fmt_res(r, used[q].get(r, 0))} > runtime {fmt_res(r, limit)}"
        return None

    for q in sorted(used, key=lambda q: (-len(figures.chain(q)), q)):  # leaves before their parents
        why = over(q)
        if why is None:
            continue
        victims = sorted((j for j in jobs.values() if j.id in admitted and j.id not in gone and j.bound()
                          and q in figures.chain(j.queue)), key=lambda j: (j.priority, -admitted[j.id], -j.created, j.id))
        for job in victims:
            if why is None:
                break
            gone.add(job.id)
            out.append((job, why))
            freed: dict[str, int] = {}
            for p in job.pods:
                if p.node_name:
                    for r, v in p.requests.items():
                        freed[r] = freed.get(r, 0) + v
            for anc in figures.chain(job.queue):
                for r, v in freed.items():
                    used[anc][r] = used[anc].get(r, 0) - v
            why = over(q)
    return out


def uid_index(jobs: Mapping[str, Job]) -> dict[str, str]:
    return {p.uid: j.id for j in jobs.values() for p in j.pods}


__all__ = ["Job", "PassResult", "admission_pass", "build_job", "collect_jobs", "dominant_share", "loose_place",
           "reclaim_plan", "spec_of", "uid_index"]
