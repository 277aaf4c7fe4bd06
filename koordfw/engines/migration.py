"""Koordinator's PodMigrationJob (``scheduling.koordinator.sh/v1alpha1``) and its migration controller
(``pkg/descheduler/controllers/migration``), for the live descheduler.

A job moves one pod (``spec.podRef``):

* **ReservationFirst** (the default): a Reservation is created from the pod (its template the pod's
  metadata and spec, owned by the pod's controller, ``allocateOnce``, the job's ttl, the
  ``app.kubernetes.io/created-by`` label) on the planned target (the template's ``nodeName``, which the
  reservation plugin turns into ``reservation-node``) or, without one, anywhere but the pod's node
  (Koordinator's skip-node affinity); ``spec.reservationOptions.reservationRef`` names it. Once it is
  Available the pod is evicted (``pods/eviction`` with ``spec.deleteOptions``); the job is Succeeded
  when the reservation has an owner (the controller's replacement pod allocated from it), with
  ``status.podRef`` that pod. A reservation that fails (expired, deleted) fails the job.
* **EvictDirectly**: the pod is evicted, the job Succeeded.

``spec.paused`` jobs are left alone; a job older than ``spec.ttl`` (default 5 minutes) fails with
``Timeout`` and deletes the reservation it created if nothing consumed it. Arbitration: a Pending job
starts only while fewer than ``max_per_node`` jobs migrate pods off the same node, ``max_per_namespace``
in its namespace (0: no limit) and ``max_per_workload`` of the same controller; it waits otherwise.

The controller's reads and writes go through a :class:`MigrationIO` (the live descheduler's: the API).
:func:`job_from_manifest` reads a job; a malformed field raises :class:`~koordfw.ManifestError` naming the
job and the field.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

import attrs
import structlog

from ..core.errors import ManifestError
from ..core.model import Pod, parse_time
from ..core.quantity import parse_duration
from ..extension import (
    ANNOTATION_RESERVATION_ALLOCATED,
    KIND_POD_MIGRATION_JOB,
    KIND_RESERVATION,
    LABEL_CREATED_BY,
    LABEL_RESERVATION_ORDER,
    POD_MIGRATION_MODE_EVICT_DIRECTLY,
    POD_MIGRATION_MODE_RESERVATION_FIRST,
    SCHEDULING_GROUP_VERSION,
)

log = structlog.get_logger("koordfw.migration")

PENDING, RUNNING, SUCCEEDED, FAILED, ABORTED = "Pending", "Running", "Succeeded", "Failed", "Aborted"
TERMINAL = (SUCCEEDED, FAILED, ABORTED)
MODES = (POD_MIGRATION_MODE_RESERVATION_FIRST, POD_MIGRATION_MODE_EVICT_DIRECTLY)
#: the migration controller's default job timeout (MigrationControllerArgs.DefaultJobTTL)
DEFAULT_JOB_TTL = 300.0
#: who created a Reservation (reservation.DefaultCreator is koord-descheduler)
CREATOR = "koordfw-descheduler"

# condition types and reasons (pod_migration_job_types.go)
COND_RESERVATION_CREATED = "ReservationCreated"
COND_RESERVATION_SCHEDULED = "ReservationScheduled"
COND_EVICTION = "Eviction"
COND_POD_BOUND_RESERVATION = "PodBoundReservation"
REASON_TIMEOUT = "Timeout"
REASON_FAILED_CREATE_RESERVATION = "FailedCreateReservation"
REASON_RESERVATION_EXPIRED = "ReservationExpired"
REASON_MISSING_POD = "MissingPod"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_MISSING_RESERVATION = "MissingReservation"
REASON_FORBIDDEN_MIGRATE_POD = "ForbiddenMigratePod"
REASON_EVICTING = "Evicting"
REASON_FAILED_EVICT = "FailedEvict"
REASON_EVICT_COMPLETE = "EvictComplete"
REASON_WAIT_FOR_POD_BIND_RESERVATION = "WaitForPodBindReservation"


def _fail(name: str, field: str, message: str) -> ManifestError:
    return ManifestError(message, obj=f"{KIND_POD_MIGRATION_JOB} {name}", field=field)


@attrs.define
class PodMigrationJob:
    """A PodMigrationJob as read: the spec, and the status the controller keeps."""

    name: str
    uid: str
    creation: float | None
    pod_namespace: str
    pod_name: str
    pod_uid: str
    mode: str = POD_MIGRATION_MODE_RESERVATION_FIRST
    ttl: float = DEFAULT_JOB_TTL
    paused: bool = False
    reservation_ref: dict[str, str] | None = None
    reservation_template: dict[str, Any] | None = None
    delete_options: dict[str, Any] | None = None
    phase: str = PENDING
    status: dict[str, Any] = attrs.field(factory=dict)

    @property
    def pod_key(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"

    @property
    def is_terminal(self) -> bool:
        return self.phase in TERMINAL


def job_from_manifest(obj: Mapping[str, Any]) -> PodMigrationJob:
    """Read a PodMigrationJob; a malformed field raises ManifestError naming the job and the field."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "?")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise _fail(name, "spec", "required: a mapping with podRef")
    ref = spec.get("podRef")
    if not isinstance(ref, Mapping):
        raise _fail(name, "spec.podRef", "required: the pod to migrate (namespace, name)")
    for k in ("namespace", "name", "uid"):
        if ref.get(k) is not None and not isinstance(ref[k], str):
            raise _fail(name, f"spec.podRef.{k}", f"expected a string, got {type(ref[k]).__name__}")
    if not ref.get("name"):
        raise _fail(name, "spec.podRef.name", "required")
    mode = spec.get("mode") or POD_MIGRATION_MODE_RESERVATION_FIRST
    if mode not in MODES:
        raise _fail(name, "spec.mode", f"expected ReservationFirst or EvictDirectly, got {mode!r}")
    ttl = DEFAULT_JOB_TTL
    if spec.get("ttl") is not None:
        try:
            ttl = parse_duration(spec["ttl"], allow_negative=False)
        except ValueError as e:
            raise _fail(name, "spec.ttl", str(e)) from None
        if ttl == 0:
            ttl = DEFAULT_JOB_TTL
    paused = spec.get("paused", False)
    if not isinstance(paused, bool):
        raise _fail(name, "spec.paused", f"expected true or false, got {paused!r}")
    opts = spec.get("reservationOptions") or {}
    if not isinstance(opts, Mapping):
        raise _fail(name, "spec.reservationOptions", "expected a mapping")
    rref = opts.get("reservationRef")
    if rref is not None and (not isinstance(rref, Mapping) or not isinstance(rref.get("name"), str) or not rref["name"]):
        raise _fail(name, "spec.reservationOptions.reservationRef.name", "required: the Reservation's name")
    template = opts.get("template")
    if template is not None and not isinstance(template, Mapping):
        raise _fail(name, "spec.reservationOptions.template", "expected a mapping (a Reservation's metadata and spec)")
    delete = spec.get("deleteOptions")
    if delete is not None and not isinstance(delete, Mapping):
        raise _fail(name, "spec.deleteOptions", "expected a mapping (metav1.DeleteOptions)")
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        raise _fail(name, "status", "expected a mapping")
    phase = status.get("phase") or PENDING
    if phase not in (PENDING, RUNNING, *TERMINAL):
        raise _fail(name, "status.phase", f"expected one of Pending, Running, Succeeded, Failed, Aborted, got {phase!r}")
    return PodMigrationJob(
        name=name, uid=str(meta.get("uid") or ""),
        creation=parse_time(meta.get("creationTimestamp"), obj=f"{KIND_POD_MIGRATION_JOB} {name}",
                            field="metadata.creationTimestamp"),
        pod_namespace=str(ref.get("namespace") or "default"), pod_name=str(ref["name"]), pod_uid=str(ref.get("uid") or ""),
        mode=mode, ttl=ttl, paused=paused, reservation_ref=dict(rref) if rref is not None else None,
        reservation_template=copy.deepcopy(dict(template)) if template is not None else None,
        delete_options=dict(delete) if delete is not None else None, phase=phase, status=copy.deepcopy(dict(status)))


def job_manifest(name: str, pod: Pod, *, mode: str = POD_MIGRATION_MODE_RESERVATION_FIRST, ttl: float | None = None,
                 target: str | None = None, reason: str = "", plugin: str = "") -> dict[str, Any]:
    """A PodMigrationJob for ``pod`` (what the live descheduler creates for a planned migration): a target
    goes into the reservation template's ``nodeName``."""
    spec: dict[str, Any] = {"podRef": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                                       "uid": pod.uid},
                            "mode": mode}
    if ttl is not None:
        spec["ttl"] = f"{int(ttl)}s"
    if target and mode == POD_MIGRATION_MODE_RESERVATION_FIRST:
        spec["reservationOptions"] = {"template": {"spec": {"template": {"spec": {"nodeName": target}}}}}
    annotations = {k: v for k, v in (("koordfw.io/migration-reason", reason), ("koordfw.io/migration-plugin", plugin)) if v}
    return {"apiVersion": SCHEDULING_GROUP_VERSION, "kind": KIND_POD_MIGRATION_JOB,
            "metadata": {"name": name, "annotations": annotations}, "spec": spec}


def _controller_ref(pod: Pod) -> dict[str, Any] | None:
    for ref in ((pod.raw or {}).get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return dict(ref)
    return None


def reservation_owners(pod: Pod) -> list[dict[str, Any]]:
    """GenerateReserveResourceOwners: the pod's controller (its ownerReference and namespace), else the pod
    itself (Koordinator does so for a pending pod; a bare pod is recreated by nobody, so only an engine that
    requeues the evicted pod itself, as the embedded cluster does, can use it)."""
    ctl = _controller_ref(pod)
    if ctl is not None:
        return [{"controller": {**ctl, "namespace": pod.namespace}}]
    return [{"object": {"uid": pod.uid, "kind": "Pod", "name": pod.name, "namespace": pod.namespace}}]


def reservation_for(job: PodMigrationJob, pod: Pod, now: float) -> dict[str, Any]:
    """CreateOrUpdateReservationOptions: the Reservation that reserves ``pod``'s place for ``job`` (named after
    the job's uid unless its template names one)."""
    tmpl = copy.deepcopy(job.reservation_template or {})
    tmeta = dict(tmpl.get("metadata") or {})
    tspec = dict(tmpl.get("spec") or {})
    raw = pod.raw or {}
    pmeta = copy.deepcopy(raw.get("metadata") or {})
    pod_template = dict(tspec.get("template") or {})
    wanted_node = ((pod_template.get("spec") or {}).get("nodeName")) or ""
    spec = copy.deepcopy(raw.get("spec") or {})
    spec.update({k: v for k, v in (pod_template.get("spec") or {}).items() if k != "nodeName"})
    spec.pop("nodeName", None)  # force removed: the reservation requests a new node
    if wanted_node:
        spec["nodeName"] = wanted_node  # the planned target (the reservation plugin's reservation-node)
    elif pod.node_name:  # appendSkipNodeAffinity: anywhere but the pod's node
        skip = {"key": "metadata.name", "operator": "NotIn", "values": [pod.node_name]}
        aff = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        req = aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = req.setdefault("nodeSelectorTerms", [])
        if terms:
            for t in terms:
                t.setdefault("matchFields", []).append(skip)
        else:
            terms.append({"matchFields": [skip]})
    tmeta_pod: dict[str, Any] = {k: dict(pmeta[k]) for k in ("labels", "annotations") if pmeta.get(k)}
    tmeta_pod.get("annotations", {}).pop(ANNOTATION_RESERVATION_ALLOCATED, None)  # the pod's own allocation
    tmeta_pod["namespace"] = pod.namespace
    tspec["template"] = {"metadata": tmeta_pod, "spec": spec}
    if not tspec.get("owners"):
        tspec["owners"] = reservation_owners(pod)
    tspec["allocateOnce"] = True  # a migration's reservation is not reused once consumed
    if tspec.get("ttl") is None and tspec.get("expires") is None:
        tspec["ttl"] = f"{int(job.ttl)}s"
    labels = dict(tmeta.get("labels") or {})
    labels[LABEL_CREATED_BY] = CREATOR
    labels[LABEL_RESERVATION_ORDER] = str(int(now * 1000))
    name = tmeta.get("name") or job.uid or job.name
    return {"apiVersion": SCHEDULING_GROUP_VERSION, "kind": KIND_RESERVATION,
            "metadata": {**{k: v for k, v in tmeta.items() if k not in ("name", "labels")}, "name": name,
                         "labels": labels},
            "spec": tspec}


class MigrationIO(Protocol):
    """What the controller reads and writes (the live descheduler: the scheduler's cache and the API)."""

    def now(self) -> float: ...
    def pod(self, namespace: str, name: str) -> Pod | None:
        """The pod as cached (None once it is gone)."""
    def reservation(self, name: str) -> Mapping[str, Any] | None: ...
    async def create_reservation(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create it (AlreadyExists: return the existing object); raises on another failure."""
    async def delete_reservation(self, name: str) -> None: ...
    async def set_reservation_ref(self, job: PodMigrationJob, ref: dict[str, str]) -> None:
        """Write ``spec.reservationOptions.reservationRef`` on the job object."""
    async def write_status(self, job: PodMigrationJob, status: dict[str, Any]) -> None: ...
    async def evict(self, pod: Pod, delete_options: Mapping[str, Any] | None) -> str | None:
        """Evict ``pod``; None when accepted (or already gone), else why not (a disruption budget, ...)."""


def _now_str(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _workload(pod: Pod) -> str:
    ctl = _controller_ref(pod)
    return f"{pod.namespace}/{ctl.get('uid') or ctl.get('name')}" if ctl else ""


@attrs.define
class MigrationController:
    """Reconciles PodMigrationJobs through ``io`` (see the module docstring)."""

    io: MigrationIO
    max_per_node: int = 2
    max_per_namespace: int = 0
    max_per_workload: int = 1
    #: jobs by name as last written (their status), for the report
    jobs: dict[str, PodMigrationJob] = attrs.field(factory=dict)

    async def run_once(self, objects: Mapping[str, Mapping[str, Any]]) -> list[PodMigrationJob]:
        """Reconcile every job in ``objects`` (name → PodMigrationJob object), running ones first so that
        their completions free arbitration room; returns the jobs."""
        jobs = []
        for name, obj in sorted(objects.items()):
            try:
                jobs.append(job_from_manifest(obj))
            except ManifestError as e:
                log.error("ignoring a PodMigrationJob the controller cannot read", job=name, error=str(e))
        jobs.sort(key=lambda j: (j.phase != RUNNING, j.creation or 0.0, j.name))
        for job in jobs:
            if job.is_terminal or job.paused:
                continue
            try:
                await self.reconcile(job, jobs)
            except Exception as e:  # one job's failure must not stop the others
                log.error("migration job failed to reconcile", job=job.name, error=f"{type(e).__name__}: {e}",
                          exc_info=True)
        self.jobs = {j.name: j for j in jobs}
        return jobs

    # -- status ------------------------------------------------------------------------------------
    async def _update(self, job: PodMigrationJob, *, phase: str | None = None, status: str | None = None,
                      reason: str | None = None, message: str | None = None, node: str | None = None,
                      cond: tuple[str, str, str, str] | None = None, pod_ref: dict[str, str] | None = None) -> None:
        st = copy.deepcopy(job.status)
        now = _now_str(self.io.now())
        for k, v in (("phase", phase), ("status", status), ("reason", reason), ("message", message),
                     ("nodeName", node)):
            if v is not None:
                if v:
                    st[k] = v
                else:
                    st.pop(k, None)
        if pod_ref is not None:
            st["podRef"] = pod_ref
        if cond is not None:
            ctype, cstatus, creason, cmsg = cond
            conds = st.setdefault("conditions", [])
            for c in conds:
                if c.get("type") == ctype:
                    if c.get("status") != cstatus:
                        c["lastTransitionTime"] = now
                    c.update(status=cstatus, reason=creason, message=cmsg, lastProbeTime=now)
                    break
            else:
                conds.append({"type": ctype, "status": cstatus, "reason": creason, "message": cmsg,
                              "lastProbeTime": now, "lastTransitionTime": now})
        st.setdefault("phase", job.phase)
        if st == job.status:
            return
        job.status = st
        job.phase = st["phase"]
        await self.io.write_status(job, st)

    def _cond(self, job: PodMigrationJob, ctype: str) -> dict[str, Any] | None:
        return next((c for c in job.status.get("conditions") or [] if c.get("type") == ctype), None)

    async def _abort(self, job: PodMigrationJob, reason: str, message: str) -> None:
        log.info("migration job failed", job=job.name, pod=job.pod_key, reason=reason, message=message)
        await self._update(job, phase=FAILED, reason=reason, message=message)

    # -- arbitration -------------------------------------------------------------------------------------
    def _admitted(self, job: PodMigrationJob, pod: Pod, jobs: list[PodMigrationJob]) -> str | None:
        """Why the job may not start now (a migration limit reached), or None."""
        per_node: Counter[str] = Counter()
        per_ns: Counter[str] = Counter()
        per_workload: Counter[str] = Counter()
        for other in jobs:
            if other.phase != RUNNING or other is job:
                continue
            per_ns[other.pod_namespace] += 1
            p = self.io.pod(other.pod_namespace, other.pod_name)
            if p is not None and p.node_name:  # still on its source node (terminating, or not yet evicted)
                per_node[p.node_name] += 1
            if p is not None and (w := _workload(p)):
                per_workload[w] += 1
        src = pod.node_name or ""
        if self.max_per_node and per_node[src] >= self.max_per_node:
            return f"node {src} has {per_node[src]} migrating pods (limit {self.max_per_node})"
        if self.max_per_namespace and per_ns[pod.namespace] >= self.max_per_namespace:
            return f"namespace {pod.namespace} has {per_ns[pod.namespace]} migrating pods (limit {self.max_per_namespace})"
        w = _workload(pod)
        if w and self.max_per_workload and per_workload[w] >= self.max_per_workload:
            return f"workload {w} has {per_workload[w]} migrating pods (limit {self.max_per_workload})"
        return None

    # -- one job ----------------------------------------------------------------------------------------
    async def reconcile(self, job: PodMigrationJob, jobs: list[PodMigrationJob] | None = None) -> None:
        """doMigrate for one job."""
        io = self.io
        now = io.now()
        if job.creation is not None and now >= job.creation + job.ttl:
            await self._abort(job, REASON_TIMEOUT, f"Abort job caused by timeout, elapsed time {now - job.creation:.0f}s "
                              f"exceeds {job.ttl:.0f}s")
            if job.reservation_ref is not None:
                r = io.reservation(job.reservation_ref["name"])
                if r is not None and not ((r.get("status") or {}).get("currentOwners")):
                    await io.delete_reservation(job.reservation_ref["name"])
            return
        pod = io.pod(job.pod_namespace, job.pod_name)
        evicted = self._cond(job, COND_EVICTION)
        evicted_ok = evicted is not None and evicted.get("status") == "True"
        if pod is not None and job.pod_uid and pod.uid != job.pod_uid:
            pod = None  # a new pod of the same name: the one to migrate is gone
        if job.phase == PENDING:
            if pod is None or not pod.node_name:
                await self._abort(job, REASON_MISSING_POD, f"Pod {job.pod_key} is missing or not scheduled")
                return
            why = self._admitted(job, pod, jobs or [])
            if why is not None:
                log.debug("migration job waits for arbitration", job=job.name, why=why)
                return
            await self._update(job, phase=RUNNING)
        if job.mode == POD_MIGRATION_MODE_EVICT_DIRECTLY:
            if pod is not None and not evicted_ok:
                why = await io.evict(pod, job.delete_options)
                if why is not None:
                    await self._abort(job, REASON_FAILED_EVICT, why)
                    return
            await self._update(job, phase=SUCCEEDED, status="Complete", reason="",
                               message=f"Pod {job.pod_key} has been evicted",
                               cond=(COND_EVICTION, "True", REASON_EVICT_COMPLETE, ""))
            return
        # ReservationFirst
        if job.reservation_ref is None:
            if pod is None:
                await self._abort(job, REASON_MISSING_POD, f"Pod {job.pod_key} is missing")
                return
            try:
                r = await io.create_reservation(reservation_for(job, pod, now))
            except Exception as e:
                await self._abort(job, REASON_FAILED_CREATE_RESERVATION, f"Failed to create Reservation: {e}")
                return
            ref = {"apiVersion": SCHEDULING_GROUP_VERSION, "kind": KIND_RESERVATION,
                   "name": r["metadata"]["name"], "uid": r["metadata"].get("uid", "")}
            await io.set_reservation_ref(job, ref)
            job.reservation_ref = ref
            await self._update(job, status=COND_RESERVATION_CREATED,
                               cond=(COND_RESERVATION_CREATED, "True", "", f"Reservation {ref['name']} created"))
            return  # the reservation is scheduled meanwhile
        name = job.reservation_ref["name"]
        robj = io.reservation(name)
        if robj is None:
            await self._abort(job, REASON_MISSING_RESERVATION, f"Reservation {name} is missing")
            return
        rst = robj.get("status") or {}
        rphase = rst.get("phase") or "Pending"
        if rphase == "Failed":
            await self._abort(job, REASON_RESERVATION_EXPIRED, f"Reservation {name} is expired or failed")
            return
        owners = rst.get("currentOwners") or []
        if rphase == "Pending" or not rst.get("nodeName"):
            # syncReservationScheduleFailed: the reservation's Unschedulable message goes onto the job (it waits)
            unsched = next((c for c in rst.get("conditions") or [] if c.get("type") == "Scheduled"
                            and c.get("reason") == REASON_UNSCHEDULABLE and c.get("status") == "False"), None)
            if unsched is not None:
                await self._update(job, cond=(COND_RESERVATION_SCHEDULED, "False", REASON_UNSCHEDULABLE,
                                              str(unsched.get("message") or "")))
            return  # not scheduled yet
        node = rst["nodeName"]
        if pod is not None and pod.node_name == node and not evicted_ok:
            await self._abort(job, REASON_FORBIDDEN_MIGRATE_POD, f"Reservation {name} is scheduled on the pod's node {node}")
            await io.delete_reservation(name)
            return
        await self._update(job, node=node, cond=(COND_RESERVATION_SCHEDULED, "True", "", f"Reservation {name} on {node}"))
        if not evicted_ok:
            if pod is not None:
                why = await io.evict(pod, job.delete_options)
                if why is not None:
                    await self._update(job, status=COND_EVICTION, reason=REASON_FAILED_EVICT, message=why,
                                       cond=(COND_EVICTION, "False", REASON_FAILED_EVICT, why))
                    return  # retried at the next round (until the job's ttl)
            await self._update(job, status=COND_EVICTION, reason="", message="",
                               cond=(COND_EVICTION, "True", REASON_EVICT_COMPLETE, f"Pod {job.pod_key} has been evicted"))
            log.info("migration evicted the pod; its target is held", job=job.name, pod=job.pod_key, node=node,
                     reservation=name)
        if not owners:
            await self._update(job, cond=(COND_POD_BOUND_RESERVATION, "False", REASON_WAIT_FOR_POD_BIND_RESERVATION, ""))
            return
        bound = {k: str(owners[0].get(k) or "") for k in ("namespace", "name", "uid")}
        msg = f'Bind Pod "{bound["namespace"]}/{bound["name"]}" in Reservation "{name}"'
        await self._update(job, phase=SUCCEEDED, status="Complete", reason="", message=msg, pod_ref=bound,
                           cond=(COND_POD_BOUND_RESERVATION, "True", "", msg))
        log.info("migration complete", job=job.name, pod=job.pod_key, replacement=f"{bound['namespace']}/{bound['name']}",
                 node=node)

    def report(self) -> list[dict[str, Any]]:
        """The jobs as ``koordfw simulate`` lists migrations."""
        return [{"name": j.name, "pod": j.pod_key, "mode": j.mode, "phase": j.phase,
                 "node": j.status.get("nodeName"), "reason": j.status.get("reason") or None,
                 "reservation": (j.reservation_ref or {}).get("name"),
                 "replacement": (f"{j.status['podRef']['namespace']}/{j.status['podRef']['name']}"
                                 if j.status.get("podRef") else None)}
                for j in sorted(self.jobs.values(), key=lambda j: j.name)]
