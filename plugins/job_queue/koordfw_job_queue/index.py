"""The jobs kept from one cluster change to the next, for the admission pass that runs at every change.

:func:`~koordfw_job_queue.jobs.collect_jobs` sorts and places every pod at every pass; :class:`JobIndex` gives the
same jobs by looking only at what changed: the pods whose object is not the one seen last time (added, bound,
deleted, relabelled: the cluster replaces a pod's object on every change), the gangs those pods are in (their spec
is read again from their first pod by key), and every gang when the PodGroups change. Only the jobs those touch
are built again (:func:`~koordfw_job_queue.jobs.build_job`, as ``collect_jobs`` builds them); the others keep
their :class:`~koordfw_job_queue.jobs.Job` and what it has computed (its minimum, its pending requests).
"""

from __future__ import annotations

from koordfw_elastic_quota.api import QuotaFigures
from koordfw_gang.api import GangSpec, gang_id_of, group_id_of

from koordfw import ClusterView, Pod

from .jobs import Job, Place, build_job, loose_place, spec_of


class JobIndex:
    """Every job with a non-terminal pod, updated from the pods that changed since the last call."""

    def __init__(self, workload_kinds: tuple[str, ...]) -> None:
        self.workload_kinds = workload_kinds
        #: uid → the pod object last seen (terminal ones included: a change of phase is a new object)
        self._seen: dict[str, Pod] = {}
        #: uid → its gang id, for a non-terminal pod of a gang
        self._gang_of: dict[str, str] = {}
        #: gang id → its non-terminal pods
        self._gang_pods: dict[str, dict[str, Pod]] = {}
        #: gang id → its spec (from its first pod by key) and its job (``None``: no valid spec, no job)
        self._specs: dict[str, GangSpec | None] = {}
        self._gang_job: dict[str, str] = {}
        #: uid → (pod, place), for a non-terminal pod without a gang
        self._loose: dict[str, tuple[Pod, Place]] = {}
        #: job id → its gangs, and its pods without a gang
        self._job_gangs: dict[str, set[str]] = {}
        self._job_loose: dict[str, set[str]] = {}
        self._jobs: dict[str, Job] = {}
        #: job id → the key of its first pod (the order of the jobs, as collect_jobs lists them)
        self._first: dict[str, str] = {}
        #: uid → job id, for every pod of a job
        self.uids: dict[str, str] = {}
        self._pod_groups = -1
        self._quotas = -1

    # -- what changed ----------------------------------------------------------------------------------
    def _drop(self, uid: str, dirty_gangs: set[str], dirty_jobs: set[str]) -> None:
        gid = self._gang_of.pop(uid, None)
        if gid is not None:
            pods = self._gang_pods[gid]
            del pods[uid]
            if not pods:
                del self._gang_pods[gid]
            dirty_gangs.add(gid)
            return
        loose = self._loose.pop(uid, None)
        if loose is not None:
            jid = loose[1][0]
            self._job_loose[jid].discard(uid)
            dirty_jobs.add(jid)

    def _add(self, p: Pod, dirty_gangs: set[str], dirty_jobs: set[str]) -> None:
        gid = gang_id_of(p)
        if gid:
            self._gang_of[p.uid] = gid
            self._gang_pods.setdefault(gid, {})[p.uid] = p
            dirty_gangs.add(gid)
            return
        place = loose_place(p, self.workload_kinds)
        self._loose[p.uid] = (p, place)
        self._job_loose.setdefault(place[0], set()).add(p.uid)
        dirty_jobs.add(place[0])

    def _respec(self, gid: str, cluster: ClusterView, dirty_jobs: set[str], pods_changed: bool) -> None:
        """Read the gang's spec again from its first pod by key; move it to the job that spec names. Its job is
        built again when its pods or its spec changed."""
        pods = self._gang_pods.get(gid)
        before = self._specs.get(gid)
        spec = None
        if pods:
            spec = spec_of(min(pods.values(), key=lambda p: p.key), cluster)
            self._specs[gid] = spec
        else:
            self._specs.pop(gid, None)
        if not pods_changed and spec == before:
            return
        jid = group_id_of(spec.groups) if spec is not None else None
        old = self._gang_job.get(gid)
        if old is not None:
            dirty_jobs.add(old)
            if old != jid:
                self._job_gangs[old].discard(gid)
        if jid is None:
            self._gang_job.pop(gid, None)
        else:
            self._gang_job[gid] = jid
            self._job_gangs.setdefault(jid, set()).add(gid)
            dirty_jobs.add(jid)

    def _rebuild(self, jid: str, figures: QuotaFigures, first_seen: dict[str, float], now: float) -> None:
        old = self._jobs.pop(jid, None)
        if old is not None:
            for p in old.pods:
                if self.uids.get(p.uid) == jid:
                    del self.uids[p.uid]
        self._first.pop(jid, None)
        placed: list[tuple[Pod, str, int]] = []
        for gid in self._job_gangs.get(jid, ()):
            spec = self._specs[gid]
            assert spec is not None
            placed.extend((p, gid, spec.min_member) for p in self._gang_pods[gid].values())
        for uid in self._job_loose.get(jid, ()):
            p, (_, gang, need) = self._loose[uid]
            placed.append((p, gang, need))
        if not placed:
            self._job_gangs.pop(jid, None)
            self._job_loose.pop(jid, None)
            return
        placed.sort(key=lambda t: t[0].key)
        self._jobs[jid] = build_job(jid, placed, self._specs, figures, first_seen, now)
        self._first[jid] = placed[0][0].key
        for p, _, _ in placed:
            self.uids[p.uid] = jid

    # -- the jobs ---------------------------------------------------------------------------------------
    def jobs(self, cluster: ClusterView, figures: QuotaFigures, first_seen: dict[str, float],
             now: float) -> dict[str, Job]:
        """The jobs as :func:`~koordfw_job_queue.jobs.collect_jobs` gives them for this cluster (same jobs, same
        order); ``first_seen`` is kept as it keeps it."""
        dirty_gangs: set[str] = set()
        dirty_jobs: set[str] = set()
        seen = self._seen
        entries = cluster.pods
        for uid in [u for u in seen if u not in entries]:
            self._drop(uid, dirty_gangs, dirty_jobs)
            del seen[uid]
        for uid, e in entries.items():
            p = e.pod
            if seen.get(uid) is p:
                continue
            self._drop(uid, dirty_gangs, dirty_jobs)
            seen[uid] = p
            if not p.is_terminal:
                self._add(p, dirty_gangs, dirty_jobs)
        for gid in dirty_gangs:
            self._respec(gid, cluster, dirty_jobs, pods_changed=True)
        pod_groups = cluster.objects_generation("PodGroup")
        if pod_groups != self._pod_groups:  # a PodGroup's spec may have changed: every gang's is read again
            self._pod_groups = pod_groups
            for gid in set(self._gang_pods) - dirty_gangs:
                self._respec(gid, cluster, dirty_jobs, pods_changed=False)
        quotas = cluster.objects_generation("ElasticQuota")
        if quotas != self._quotas:  # the queue of every job is looked up again
            self._quotas = quotas
            dirty_jobs |= set(self._jobs)
        for jid in dirty_jobs:
            # a job built again starts from the pods it has now (its age stays: first_seen is kept)
            self._rebuild(jid, figures, first_seen, now)
        return {jid: self._jobs[jid] for jid in sorted(self._jobs, key=self._first.__getitem__)}
