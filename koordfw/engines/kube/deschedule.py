"""Descheduling on a live cluster: plans from the ``deschedule`` hooks, executed through the Eviction API.

Every ``interval`` seconds the live scheduler's cache is handed to the descheduling plugins (defrag's
``low_node_load``, ``gpu_defrag``, ``cpu_defrag``, elastic_quota's revoker, ...). Each migration is then:

1. **reserved**: the target gets a placeholder nomination with the moving pod's requests and priority,
   so no equal-or-lower pod takes the room (the kernel counts nominated pods while filtering), and the
   pod's controller (its ``ownerReferences`` controller uid) is remembered with the target;
2. **evicted** through ``pods/{name}/eviction`` (UID precondition; ``policy/v1`` or ``policy/v1beta1``,
   whichever the server's discovery says its eviction subresource takes), which honours
   PodDisruptionBudgets (a 429 leaves the pod in place and drops the reservation);
3. when the controller's replacement pod arrives pending, it is **nominated** to the target, which the
   kernel evaluates first; the placeholder is dropped then, or when it expires (``reservation_ttl``).

Reservations are keyed by the evicted pod's UID, so several migrations of one controller's pods hold
their targets side by side. A replacement pod carries nothing naming the pod it replaces, so it takes
the **oldest** reservation of its controller: controllers recreate in the order they see pods go,
and the oldest reservation is the nearest to expiring, so taking it first loses the fewest targets to
the TTL. Every placeholder leaves the nominator when its reservation is consumed, refused, replaced or
expires. A pod whose migration is still in progress (reserved, or already terminating) is not
evicted again. An eviction that got no answer (connection broken, reply lost) may have gone through,
so its reservation is kept (until the replacement takes it or the TTL ends), not released.

Evictions are rate-limited (``max_evictions_per_minute``). ``dry_run`` (the default) plans and logs
without evicting or reserving anything.

**PodMigrationJobs** (when the cluster serves the CRD and the profile loads the reservation plugin,
``migration_jobs``): each planned migration is instead created as a ``PodMigrationJob`` (ReservationFirst,
the target in its reservation template) and the migration controller (:mod:`koordfw.engines.migration`)
runs every job each round: a Reservation owned by the pod's controller holds the target (the reservation
plugin schedules it; it is in the API, so it survives a restart of the scheduler), the pod is evicted once
it is Available, and the replacement allocates from it. A pod with a job still running is not planned
again. The in-memory reservation above is then not used.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import attrs
import structlog

from ...core.model import Migration, Pod, replace_pod
from ...core.schedule_one import Scheduler
from ...extension import KIND_POD_MIGRATION_JOB, KIND_RESERVATION, SCHEDULING_GROUP_VERSION
from ..migration import MigrationController, PodMigrationJob, job_manifest
from .client import ApiError, KubeClient
from .evictor import post_eviction

log = structlog.get_logger("koordfw.kube.deschedule")


def controller_uid(pod: Pod) -> str:
    for ref in ((pod.raw or {}).get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""


@attrs.define
class Reservation:
    target: str
    placeholder: Pod
    expires: float
    owner: str = ""  # the controller uid whose replacement pod consumes it
    victim: str = ""  # uid of the evicted pod (the key in ``LiveDescheduler.reservations``)


@attrs.define
class Outcome:
    migration: Migration
    result: str  # "evicted" | "dry-run" | "blocked: ..." | "skipped: ..."


_RESERVATIONS = f"/apis/{SCHEDULING_GROUP_VERSION}/reservations"
_JOBS = f"/apis/{SCHEDULING_GROUP_VERSION}/podmigrationjobs"


class KubeMigrationIO:
    """The migration controller's reads (the scheduler's cache) and writes (the API)."""

    def __init__(self, scheduler: Scheduler, client: KubeClient) -> None:
        self.scheduler, self.client = scheduler, client

    def now(self) -> float:
        return time.time()

    def pod(self, namespace: str, name: str) -> Pod | None:
        return self.scheduler.cluster.pod_by_key(f"{namespace}/{name}")

    def reservation(self, name: str) -> Mapping[str, Any] | None:
        return self.scheduler.cluster.get_object(KIND_RESERVATION, name)

    async def create_reservation(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            created: dict[str, Any] = await self.client.request("POST", _RESERVATIONS, body=obj)
            return created
        except ApiError as e:
            if e.status != 409:
                raise
            existing: dict[str, Any] = await self.client.request("GET", f"{_RESERVATIONS}/{obj['metadata']['name']}")
            return existing

    async def delete_reservation(self, name: str) -> None:
        try:
            await self.client.request("DELETE", f"{_RESERVATIONS}/{name}")
        except ApiError as e:
            if e.status != 404:
                log.warning("could not delete a migration's reservation", reservation=name, error=str(e))

    async def _read_modify_write(self, job: PodMigrationJob, path: str, change: Callable[[dict], None]) -> None:
        for _ in range(5):
            cur = await self.client.request("GET", f"{_JOBS}/{job.name}")
            if job.uid and (cur.get("metadata") or {}).get("uid") != job.uid:
                return  # deleted and recreated
            change(cur)
            try:
                await self.client.request("PUT", path, body=cur)
                return
            except ApiError as e:
                if e.status != 409:
                    raise
        raise RuntimeError(f"{KIND_POD_MIGRATION_JOB} {job.name}: still conflicting after 5 attempts")

    async def set_reservation_ref(self, job: PodMigrationJob, ref: dict[str, str]) -> None:
        def change(o: dict) -> None:
            o.setdefault("spec", {}).setdefault("reservationOptions", {})["reservationRef"] = ref
        await self._read_modify_write(job, f"{_JOBS}/{job.name}", change)

    async def write_status(self, job: PodMigrationJob, status: dict[str, Any]) -> None:
        def change(o: dict) -> None:
            o["status"] = status
        await self._read_modify_write(job, f"{_JOBS}/{job.name}/status", change)

    async def evict(self, pod: Pod, delete_options: Mapping[str, Any] | None) -> str | None:
        try:
            await post_eviction(self.client, pod.namespace, pod.name, pod.uid, delete_options)
        except ApiError as e:
            if e.status == 404:
                return None
            return "disruption budget" if e.status == 429 else f"{e.status} {e}"
        log.info("evicted for migration", pod=pod.key)
        return None


class LiveDescheduler:
    def __init__(self, scheduler: Scheduler, client: KubeClient, *, interval: float = 60.0, dry_run: bool = True,
                 max_evictions_per_minute: int = 10, reservation_ttl: float = 300.0,
                 clock: Any = time.monotonic, leading: Any = None,
                 migration_jobs: Callable[[], bool] | None = None) -> None:
        """``leading()`` (None: always) is asked before every eviction: a replica that is not the leader
        evicts nothing. ``migration_jobs()`` (None: never) says whether plans become PodMigrationJobs."""
        self.migration_jobs = migration_jobs
        #: how often PodMigrationJobs are reconciled between planning rounds (Koordinator requeues in seconds)
        self.job_interval = min(interval, 2.0)
        self.controller = MigrationController(KubeMigrationIO(scheduler, client))
        self.jobs_created = 0
        self.scheduler, self.client = scheduler, client
        self.leading = leading
        self.interval, self.dry_run = interval, dry_run
        self.max_per_minute = max_evictions_per_minute
        self.ttl = reservation_ttl
        self.clock = clock
        #: evicted pod uid → its reservation, oldest first (dicts keep insertion order)
        self.reservations: dict[str, Reservation] = {}
        self._evicted_at: list[float] = []
        self.history: list[Outcome] = []

    # -- reservations -----------------------------------------------------------------------------
    def _release(self, res: Reservation) -> None:
        """Drop ``res`` and take its placeholder out of the nominator (only if it is still the one held)."""
        if self.reservations.get(res.victim) is res:
            del self.reservations[res.victim]
        self.scheduler.nominator.nominate(res.placeholder, None)

    def replacement_for(self, pod: Pod) -> Pod | None:
        """The engine's ``pod_enqueued``: a recreated pod of an evicted owner, nominated to the target
        reserved for it (the oldest reservation of that owner), or None."""
        owner = controller_uid(pod)
        if not owner:
            return None
        res = next((r for r in self.reservations.values() if r.owner == owner), None)  # the oldest
        if res is None:
            return None
        self._release(res)
        log.info("replacement pod nominated to its reserved target", pod=pod.key, node=res.target,
                 replaces=res.placeholder.key)
        return replace_pod(pod, nominated_node_name=res.target)

    def _reserve(self, pod: Pod, target: str) -> Reservation | None:
        owner = controller_uid(pod)
        if not owner:
            return None  # a bare pod is not recreated: nothing to reserve for
        prev = self.reservations.get(pod.uid)
        if prev is not None:
            self._release(prev)
        placeholder = replace_pod(pod, uid=f"reservation-{pod.uid}", name=f"{pod.name}-reservation", node_name=None,
                                  nominated_node_name=target)
        self.scheduler.nominator.nominate(placeholder, target)
        res = Reservation(target, placeholder, self.clock() + self.ttl, owner=owner, victim=pod.uid)
        self.reservations[pod.uid] = res
        return res

    def expire(self) -> None:
        now = self.clock()
        for res in list(self.reservations.values()):
            if res.expires <= now:
                self._release(res)
                log.info("reservation expired", node=res.target, pod=res.placeholder.key)

    # -- one round ----------------------------------------------------------------------------------
    async def plan(self) -> list[Migration]:
        s = self.scheduler
        plans, _failures = await s.node_runtime.run_deschedule(s.cluster)  # each failure logged by the runtime
        return [m for ms in plans.values() for m in ms]

    def _rate_ok(self) -> bool:
        now = self.clock()
        self._evicted_at = [t for t in self._evicted_at if now - t < 60.0]
        return len(self._evicted_at) < self.max_per_minute

    def _held(self, m: Migration) -> Outcome | None:
        """Why a planned migration does not go ahead this round (a dry run, the rate limit, another
        replica leading), or None when it may."""
        if self.dry_run:
            log.info("would migrate", pod=m.pod, source=m.from_node, target=m.to, plugin=m.plugin, reason=m.reason)
            return Outcome(m, "dry-run")
        if not self._rate_ok():
            return Outcome(m, "skipped: eviction rate limit")
        if self.leading is not None and not self.leading():
            return Outcome(m, "skipped: not the leader")
        return None

    async def run_once(self) -> list[Outcome]:
        if self.migration_jobs is not None and self.migration_jobs():
            return await self._run_jobs()
        self.expire()
        out: list[Outcome] = []
        for m in await self.plan():
            pod = self.scheduler.cluster.pod_by_key(m.pod)
            if pod is None or pod.node_name != m.from_node:
                out.append(Outcome(m, "skipped: the pod is no longer on its source node"))
                continue
            if pod.deletion_timestamp is not None or pod.uid in self.reservations:
                # its eviction was accepted (it is terminating, or the watch has not told us yet):
                # evicting again would only refresh the reservation and spend the rate limit
                out.append(Outcome(m, "skipped: the pod is already being migrated"))
                continue
            held = self._held(m)
            if held is not None:
                out.append(held)
                continue
            res = self._reserve(pod, m.to) if m.to else None
            try:
                await post_eviction(self.client, pod.namespace, pod.name, pod.uid)
            except ApiError as e:
                if e.status == 0:
                    # no answer (the connection broke, the reply was lost): the eviction may have gone
                    # through, so the target stays reserved until the replacement takes it or the TTL ends
                    self._evicted_at.append(self.clock())
                    log.warning("eviction outcome unknown; keeping its reservation", pod=m.pod, error=str(e))
                    out.append(Outcome(m, "unknown: no reply to the eviction; target kept reserved"))
                    continue
                if res is not None:
                    self._release(res)  # this victim's own reservation, no other of its controller
                why = "disruption budget" if e.status == 429 else f"{e.status} {e}"
                log.info("eviction refused", pod=m.pod, status=e.status, error=str(e))
                out.append(Outcome(m, f"blocked: {why}"))
                continue
            self._evicted_at.append(self.clock())
            log.info("evicted for migration", pod=m.pod, source=m.from_node, target=m.to, plugin=m.plugin)
            out.append(Outcome(m, "evicted"))
        self.history.extend(out)
        return out

    async def _run_jobs(self) -> list[Outcome]:
        """A round with PodMigrationJobs: the plan's new migrations become jobs, then every job is reconciled."""
        cluster = self.scheduler.cluster
        jobs = dict(cluster.objects_of(KIND_POD_MIGRATION_JOB))
        migrating = set()
        for obj in jobs.values():
            ref = (obj.get("spec") or {}).get("podRef") or {}
            if ((obj.get("status") or {}).get("phase") or "Pending") in ("Pending", "Running"):
                migrating.add(f"{ref.get('namespace') or 'default'}/{ref.get('name')}")
        out: list[Outcome] = []
        for m in await self.plan():
            pod = cluster.pod_by_key(m.pod)
            if pod is None or pod.node_name != m.from_node:
                out.append(Outcome(m, "skipped: the pod is no longer on its source node"))
                continue
            if pod.uid in self.scheduler.placeholders:
                continue  # a reservation's reserve pod: its plugin owns it
            if m.pod in migrating or pod.deletion_timestamp is not None:
                out.append(Outcome(m, "skipped: the pod is already being migrated"))
                continue
            held = self._held(m)
            if held is not None:
                out.append(held)
                continue
            mode = "ReservationFirst" if m.to else "EvictDirectly"
            body = job_manifest(f"{pod.name}-{uuid.uuid4().hex[:8]}", pod, mode=mode, ttl=self.ttl, target=m.to,
                                reason=m.reason, plugin=m.plugin)
            try:
                created = await self.client.request("POST", _JOBS, body=body)
            except ApiError as e:
                log.warning("could not create a PodMigrationJob", pod=m.pod, error=str(e))
                out.append(Outcome(m, f"blocked: {e.status} {e}"))
                continue
            jobs[created["metadata"]["name"]] = created  # the watch brings it into the cache soon
            migrating.add(m.pod)
            self._evicted_at.append(self.clock())
            self.jobs_created += 1
            log.info("migration job created", job=created["metadata"]["name"], pod=m.pod, source=m.from_node,
                     target=m.to, plugin=m.plugin, mode=mode)
            out.append(Outcome(m, f"job: {created['metadata']['name']}"))
        if not self.dry_run and (self.leading is None or self.leading()):
            await self.controller.run_once(jobs)
        self.history.extend(out)
        return out

    async def reconcile_jobs(self) -> None:
        """Reconcile the PodMigrationJobs between planning rounds (the controller's requeue)."""
        if self.dry_run or (self.leading is not None and not self.leading()):
            return
        await self.controller.run_once(dict(self.scheduler.cluster.objects_of(KIND_POD_MIGRATION_JOB)))

    async def run(self, stop: anyio.Event) -> None:
        """Plan every ``interval``; with PodMigrationJobs, reconcile them every ``job_interval`` meanwhile (a
        ReservationFirst job takes several steps: reserve, wait for Available, evict, wait for the owner)."""
        next_plan = self.clock() + self.interval
        while not stop.is_set():
            jobs = self.migration_jobs is not None and self.migration_jobs()
            wait = max(0.0, next_plan - self.clock())
            with anyio.move_on_after(min(wait, self.job_interval) if jobs else wait):
                await stop.wait()
            if stop.is_set():
                return
            try:
                if self.clock() >= next_plan:
                    next_plan = self.clock() + self.interval
                    await self.run_once()
                elif jobs:
                    await self.reconcile_jobs()
            except Exception as e:  # a failing round must not stop the scheduler
                log.error("descheduling round failed", error=f"{type(e).__name__}: {e}", exc_info=True)
