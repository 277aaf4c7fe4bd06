"""The live secondary scheduler: reflectors feed the kernel, the kernel schedules, the API binds.

One ``Scheduler`` (the same kernel as ``koordfw simulate``) runs on a RealClock. Reflectors keep every
non-terminal pod, every node and the NodeMetric objects in its cache; the scheduling loop pops pods
whose ``spec.schedulerName`` is ours; binding cycles run concurrently, bounded so that a rate-limited
API applies backpressure to the loop instead of timing binds out. Unschedulable pods get a
PodScheduled=False condition and a FailedScheduling event; bound pods a Scheduled event.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import structlog

from ...core.clock import RealClock
from ...core.cluster import ClusterState
from ...core.events import EventLog, SchedulerEvents
from ...core.model import Pod
from ...core.plugins import Registry
from ...core.schedule_one import Scheduler
from ...core.state import CycleState
from ...core.status import Status
from ...extension import SCHEDULING_GROUP_VERSION, SLO_GROUP_VERSION
from .binder import BindDropped, BindGated, KubeBinder
from .cache import ClusterFeeder
from .client import ApiError, KubeClient
from .discovery import VersionedReflector
from .health import api_health, unhealthy_reason
from .leader import LeaderElector, NotLeading
from .reflector import Reflector
from .writer import Writer
from .writer import _now as _now_iso

log = structlog.get_logger("koordfw.kube")

__all__ = ["KubeSchedulerEngine", "NotLeading", "build_cache", "default_identity"]

#: kube-scheduler's informer selector: all non-terminal pods
NON_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"

#: other kinds kept in the cache: kind -> API path (optional: a cluster without the CRD is fine)
#: the other kinds plugins read, each watched when its API exists (a missing CRD is skipped quietly)
DEFAULT_OBJECTS = {
    "NodeMetric": f"/apis/{SLO_GROUP_VERSION}/nodemetrics",
    # policy/v1 from Kubernetes 1.21, policy/v1beta1 before (and only, up to 1.20): the version is discovered
    # (discovery.VersionedReflector), as client-go's informers are chosen by the server's groups
    "PodDisruptionBudget": "/apis/policy/{version}/poddisruptionbudgets",
    "PodGroup": "/apis/scheduling.sigs.k8s.io/v1alpha1/podgroups",
    "ElasticQuota": "/apis/scheduling.sigs.k8s.io/v1alpha1/elasticquotas",
    "Device": f"/apis/{SCHEDULING_GROUP_VERSION}/devices",
    # the reservation plugin keeps their status (handle.update_object_status: PUT .../reservations/<name>/status)
    "Reservation": f"/apis/{SCHEDULING_GROUP_VERSION}/reservations",
    # the live descheduler's migrations (deschedule.py: PodMigrationJobs, run by engines/migration.py)
    "PodMigrationJob": f"/apis/{SCHEDULING_GROUP_VERSION}/podmigrationjobs",
    # the network_topology plugin's layers (its tree of blocks and spines from the nodes' labels)
    "ClusterNetworkTopology": f"/apis/{SCHEDULING_GROUP_VERSION}/clusternetworktopologies",
    "NodeResourceTopology": "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies",
    # what kube-scheduler's own informers watch for its plugins (namespaceSelector terms, the default
    # topology spread selector, the volume plugins); system:kube-scheduler and system:volume-scheduler grant them
    "Namespace": "/api/v1/namespaces",
    "Service": "/api/v1/services",
    "ReplicationController": "/api/v1/replicationcontrollers",
    "ReplicaSet": "/apis/apps/v1/replicasets",
    "StatefulSet": "/apis/apps/v1/statefulsets",
    "PersistentVolumeClaim": "/api/v1/persistentvolumeclaims",
    "PersistentVolume": "/api/v1/persistentvolumes",
    "StorageClass": "/apis/storage.k8s.io/v1/storageclasses",
    "CSINode": "/apis/storage.k8s.io/v1/csinodes",
}


class ApiEventRecorder(EventLog):
    """A plugin's ``handle.events.eventf`` as an ``events.k8s.io/v1`` Event on the API server (through the
    writer's event queue), besides the in-memory log. ``regarding`` is ``"Kind namespace/name"``, ``"Kind name"``
    (cluster-scoped) or ``"namespace/name"`` (a Pod); a kind the scheduler does not watch is only logged."""

    def __init__(self, engine: KubeSchedulerEngine) -> None:
        super().__init__()
        self.engine = engine

    def eventf(self, regarding: str, type: str, reason: str, message: str) -> None:
        super().eventf(regarding, type, reason, message)
        ref = self.reference(regarding)
        if ref is not None:
            self.engine.writer.object_event(ref, type, reason, "Scheduling", message)

    def reference(self, regarding: str) -> dict[str, str] | None:
        kind, _, key = regarding.partition(" ") if " " in regarding else ("Pod", "", regarding)
        cluster = self.engine.cluster
        if kind == "Pod":
            pod = cluster.pod_by_key(key)
            ns, _, name = key.rpartition("/")
            return {"apiVersion": "v1", "kind": "Pod", "namespace": ns or "default", "name": name,
                    **({"uid": pod.uid} if pod is not None else {})}
        base = self.engine.object_paths.get(kind)
        if base is None or "{version}" in base:
            return None
        parts = base.split("/")  # /api/v1/<plural> or /apis/<group>/<version>/<plural>
        api_version = "v1" if parts[1] == "api" else f"{parts[2]}/{parts[3]}"
        ns, _, name = key.rpartition("/")
        obj = cluster.get_object(kind, key) or {}
        uid = (obj.get("metadata") or {}).get("uid")
        return {"apiVersion": api_version, "kind": kind, "name": name, **({"namespace": ns} if ns else {}),
                **({"uid": uid} if uid else {})}


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


def build_cache(registry: Registry, client: KubeClient, *, scheduler_name: str | None, seed: int = 0,
                objects: dict[str, str] | None = None, watch_timeout: int = 300,
                engine: SchedulerEvents | None = None) -> tuple[Scheduler, ClusterFeeder, list[Reflector]]:
    """A Scheduler over an empty cluster plus the reflectors that fill it (not started)."""
    sched = Scheduler(registry, ClusterState(), RealClock(), engine=engine, seed=seed)
    sched.objects.live = False  # watchers hear of objects once the caches have synced (replay_objects)
    sched.responsible_for = scheduler_name
    feeder = ClusterFeeder(sched, scheduler_name=scheduler_name)
    refl = [Reflector(client, "/api/v1/nodes", feeder.on_node, name="nodes", watch_timeout=watch_timeout),
            Reflector(client, "/api/v1/pods", feeder.on_pod, field_selector=NON_TERMINAL, name="pods",
                      watch_timeout=watch_timeout)]
    for kind, path in (DEFAULT_OBJECTS if objects is None else objects).items():
        cls = VersionedReflector if "{version}" in path else Reflector
        refl.append(cls(client, path, feeder.object_handler(kind), name=kind, optional=True,
                        watch_timeout=watch_timeout))
    return sched, feeder, refl


class KubeSchedulerEngine(SchedulerEvents):
    """Run with ``await engine.run()``; ``engine.stop()`` asks for a graceful stop."""

    def __init__(self, registry: Registry, client: KubeClient, *, scheduler_name: str | None = None,
                 event_client: KubeClient | None = None, seed: int = 0, identity: str | None = None,
                 leader_elector: LeaderElector | None = None, max_in_flight_binds: int | None = None,
                 objects: dict[str, str] | None = None, watch_timeout: int = 300,
                 flush_interval: float = 1.0, deschedule_interval: float = 0.0, deschedule_dry_run: bool = True,
                 max_evictions_per_minute: int = 10, reservation_ttl: float = 300.0,
                 unhealthy_after: float = 120.0) -> None:
        """``unhealthy_after``: ``/healthz`` fails once the API has been unreachable (or the caches
        unsynced since the start) for longer than this many seconds, timed on ``client.clock``."""
        self.client = client
        self.scheduler_name = scheduler_name or registry.profile.scheduler_name
        self.identity = identity or default_identity()
        # alive: a pod the watch reported deleted (gone from the cache) is never bound: v1.20's API server
        # ignores the Binding's uid and would bind a same-named successor
        self.binder = KubeBinder(client, check=self._check_leading,
                                 alive=lambda p: self.scheduler.cluster.pod(p.uid) is not None)
        self.unhealthy_after = unhealthy_after
        self._run_started: float | None = None
        #: pods whose nomination the kernel held when they last failed (written to the API)
        self._nominated: set[str] = set()
        #: kind → collection path of the other objects cached (status writes go to <path>/<name>/status)
        self.object_paths = dict(DEFAULT_OBJECTS if objects is None else objects)
        #: handle.patch_object's PATCHes written, and the 409 Conflicts they met
        self.object_patches = 0
        self.object_patch_conflicts = 0
        self.scheduler, self.feeder, self.reflectors = build_cache(
            registry, client, scheduler_name=self.scheduler_name, seed=seed, objects=objects,
            watch_timeout=watch_timeout, engine=self)
        self.preempted = 0
        self.attempt_counts: Counter[str] = Counter()
        self.cluster = self.scheduler.cluster
        self.elector = leader_elector
        self.writer = Writer(client, event_client, controller=self.scheduler_name, instance=self.identity,
                             leading=self.may_write)
        # plugins' handle.events reach the API server (and the in-memory log)
        self.scheduler.recorder = ApiEventRecorder(self)
        self.feeder.nomination_ended = self.writer.clear_nomination
        qps = client.limiter.qps
        self.max_in_flight = max_in_flight_binds or max(16, int(qps * 2) if qps > 0 else 256)
        self.flush_interval = flush_interval
        self.dropped: set[str] = set()
        self.started = anyio.Event()  # caches synced and (if electing) leading
        self._stop = anyio.Event()
        self._wake = anyio.Event()
        self.feeder.wakeup = self._wake
        self._bind_slots = anyio.Condition()
        self.stopped_reason = ""
        self.descheduler = None
        if deschedule_interval > 0:
            from .deschedule import LiveDescheduler

            self.descheduler = LiveDescheduler(self.scheduler, client, interval=deschedule_interval,
                                               dry_run=deschedule_dry_run,
                                               max_evictions_per_minute=max_evictions_per_minute,
                                               reservation_ttl=reservation_ttl, leading=self.may_write,
                                               migration_jobs=self._migration_jobs)

    def _migration_jobs(self) -> bool:
        """Plans become PodMigrationJobs when the API serves them and this profile schedules Reservations."""
        refl = next((r for r in self.reflectors if r.name == "PodMigrationJob"), None)
        return (refl is not None and refl.available and refl.synced.is_set()
                and "reservation" in self.scheduler.registry.plugins)

    # -- SchedulerEvents ------------------------------------------------------------------------------
    def pod_enqueued(self, pod: Pod) -> Pod | None:
        return self.descheduler.replacement_for(pod) if self.descheduler is not None else None

    def cycle_started(self, pod: Pod) -> None:
        self.attempt_counts[pod.uid] += 1

    def nomination_cleared(self, pod: Pod) -> None:
        """A higher-priority preemptor took the node this pod was nominated to: clear
        ``status.nominatedNodeName`` on it now, as kube-scheduler's ClearNominatedNodeName."""
        self._nominated.discard(pod.uid)
        self.writer.clear_nomination(pod)

    def pod_bound(self, pod: Pod, node_name: str, state: CycleState) -> None:
        self._nominated.discard(pod.uid)
        self.writer.scheduled(pod, node_name)
        self.feeder.resync(pod.uid)

    async def bind(self, pod: Pod, node_name: str, annotations: Mapping[str, str]) -> bool:
        return await self._bind(pod, node_name, dict(annotations))

    def object_status_written(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A plugin's ``handle.update_object_status``: PUT the object's ``/status`` (the writer coalesces and
        retries on conflicts)."""
        path = self._object_path(kind, obj)
        if path is None:
            log.warning("not writing the status of an object of a kind not watched", kind=kind)
            return
        self.writer.object_status(path + "/status", dict(obj))

    def _object_path(self, kind: str, obj: Mapping[str, Any]) -> str | None:
        base = self.object_paths.get(kind)
        if base is None:
            return None
        if "{version}" in base:  # a kind whose version discovery picks: the one its reflector watches
            refl = next((r for r in self.reflectors if r.name == kind), None)
            if not isinstance(refl, VersionedReflector) or not refl.version:
                return None
            base = refl.path
        meta = obj.get("metadata") or {}
        if meta.get("namespace"):
            group, plural = base.rsplit("/", 1)
            return f"{group}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        return f"{base}/{meta['name']}"

    async def patch_object(self, kind: str, obj: Mapping[str, Any], patch: Mapping[str, Any],
                           precondition: Callable[[Mapping[str, Any]], bool] | None = None,
                           attempts: int = 5) -> dict[str, Any] | None:
        """A plugin's ``handle.patch_object``: a JSON merge PATCH carrying the cached ``resourceVersion``; on a
        409 Conflict the object is read again and, while ``precondition`` holds of it (and its uid is the
        cached one's), patched at its new version (client-go's ``RetryOnConflict``). None: not written."""
        path = self._object_path(kind, obj)
        meta = obj.get("metadata") or {}
        what = f"{kind} {meta.get('namespace', '') + '/' if meta.get('namespace') else ''}{meta.get('name')}"
        if path is None:
            log.warning("not writing an object of a kind not watched", kind=kind)
            return None
        rv = meta.get("resourceVersion")
        for _ in range(attempts):
            if not self.may_write():
                log.info("not leading: not writing", what=what)
                return None
            body = {**patch, "metadata": {**(patch.get("metadata") or {}),
                                          **({"resourceVersion": rv} if rv else {})}}
            try:
                out: dict[str, Any] = await self.client.request("PATCH", path, body=body,
                                                                content_type="application/merge-patch+json")
                self.object_patches += 1
                return out
            except ApiError as e:
                if e.status == 404:
                    return None
                if e.status != 409:
                    log.warning("could not patch an object", what=what, error=str(e))
                    return None
                self.object_patch_conflicts += 1
            try:
                cur = await self.client.request("GET", path)
            except ApiError as g:
                log.warning("could not re-read an object to patch it", what=what, error=str(g))
                return None
            if (cur.get("metadata") or {}).get("uid") != meta.get("uid") or (
                    precondition is not None and not precondition(cur)):
                return None  # recreated, or changed so that the patch no longer applies
            rv = (cur.get("metadata") or {}).get("resourceVersion")
        log.warning("could not patch an object: it kept changing", what=what)
        return None

    async def evict(self, pod: Pod, reason: str) -> bool:
        """Preemption (and any plugin's handle.evict) deletes through the API, never in memory."""
        return await self._preempt_victim(pod, reason)

    def pod_gated(self, pod: Pod, st: Status) -> None:
        # kube-scheduler writes nothing for a PreEnqueue rejection; koordfw says why the pod waits (a job held by
        # its queue, a gang short of members) on its PodScheduled condition, as for any unschedulable pod
        if pod.uid in self.dropped or self.cluster.pod(pod.uid) is None or pod.uid in self.feeder.gated:
            return
        self.writer.held(pod, st.message or f"held by {st.plugin}")

    async def pod_unschedulable(self, pod: Pod, st: Status) -> None:
        uid = pod.uid
        if uid in self.dropped or self.cluster.pod(uid) is None and uid not in self.feeder.gated:
            # deleted, recreated, terminating or bound elsewhere: forget it, write nothing
            self.dropped.discard(uid)
            self._nominated.discard(uid)
            self.scheduler.queue.done(uid)
            self.writer.forget(uid)
            self.feeder.resync(uid)
            return
        self.feeder.resync(uid)
        if uid in self.feeder.gated:
            self.scheduler.queue.done(uid)
            self.cluster.remove_pod(uid)
            return
        reason = "Unschedulable" if st.is_rejection else "SchedulerError"
        nominated = self._kernel_nomination(uid)
        if nominated is not None:
            self._nominated.add(uid)
        elif uid in self._nominated:
            # the kernel dropped the nomination it held (the pod was assumed, then reserve, permit or
            # binding failed): clear it on the pod, as kube-scheduler's clearNominatedNode does
            self._nominated.discard(uid)
            nominated = ""
        self.writer.unschedulable(pod, reason, st.message or f"rejected by {st.plugin}", nominated)

    def _kernel_nomination(self, uid: str) -> str | None:
        """The node the kernel's nominator holds ``uid`` on, if any."""
        for pods in self.scheduler.nominator.by_node_index().values():
            for p in pods:
                if p.uid == uid:
                    return p.nominated_node_name
        return None

    async def _preempt_victim(self, pod: Pod, reason: str) -> bool:
        """kube-scheduler's PrepareCandidate for one victim: a victim of ours waiting at permit is
        rejected there; any other gets the ``DisruptionTarget`` condition and is deleted through the API
        (UID precondition, the pod's own grace period). The cache drops it when the watch says it is gone,
        so its room counts as taken until then and the nominated preemptor waits for it."""
        wp = self.scheduler.waiting_pods.get(pod.uid)
        if wp is not None:
            wp.reject("", reason)
            return True
        self._check_leading(f"preempting {pod.key}")
        base = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        cond = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": f"{self.scheduler_name}: {reason}", "lastTransitionTime": _now_iso()}
        try:
            await self.client.request("PATCH", base + "/status", body={"status": {"conditions": [cond]}},
                                      content_type="application/strategic-merge-patch+json")
        except ApiError as e:
            if e.status == 404:
                return True  # already gone
            log.warning("could not mark the victim", pod=pod.key, error=str(e))
        self._check_leading(f"deleting the preemption victim {pod.key}")
        try:
            await self.client.request("DELETE", base, body={"apiVersion": "v1", "kind": "DeleteOptions",
                                                            "preconditions": {"uid": pod.uid}})
        except ApiError as e:
            if e.status == 404:
                return True
            log.warning("could not delete a preemption victim", pod=pod.key, error=str(e))
            return False
        self.preempted += 1
        self.writer.event(pod, "Normal", "Preempted", "Preempting", reason)
        log.info("preempted", pod=pod.key, reason=reason)
        return True

    def may_write(self) -> bool:
        """Whether this replica may write to the API now: no election, or it leads."""
        return self.elector is None or self.elector.is_leader

    def _check_leading(self, what: str) -> None:
        """Refuse an API write once leadership is lost: another replica may be scheduling already
        (kube-scheduler exits at that instant; here the binds in flight fail and requeue while the
        engine stops)."""
        if self.elector is not None and self.started.is_set() and not self.elector.is_leader:
            raise NotLeading(f"not the leader any more: not {what}")

    async def _bind(self, pod: Pod, node_name: str, annotations: dict) -> bool:
        self._check_leading(f"binding {pod.key}")
        try:
            return await self.binder(pod, node_name, annotations)
        except BindDropped as e:
            log.info("dropping pod", pod=pod.key, reason=str(e))
            self.dropped.add(pod.uid)
            raise
        except BindGated:
            self.feeder.gated[pod.uid] = dict(pod.raw or {})
            raise

    # -- running ------------------------------------------------------------------------------------
    def stop(self, reason: str = "stop requested") -> None:
        self.stopped_reason = self.stopped_reason or reason
        self._stop.set()
        self._wake.set()

    async def wait_synced(self) -> None:
        for r in self.reflectors:
            await r.synced.wait()

    async def run(self) -> None:
        """Run until ``stop()``: in-flight binds finish, queued status patches and events are written."""
        self._run_started = self.client.clock()
        await self.scheduler.startup()
        try:
            async with anyio.create_task_group() as bg:
                for r in self.reflectors:
                    bg.start_soon(r.run)
                bg.start_soon(self.writer.run)
                await self.wait_synced()
                if self.elector is not None:
                    with anyio.CancelScope() as acquiring:
                        bg.start_soon(self._cancel_on_stop, acquiring)
                        await self.elector.acquire()
                    if self._stop.is_set():
                        bg.cancel_scope.cancel()
                        return
                    bg.start_soon(self._hold_leadership)
                # plugins watching objects (handle.watch_objects) hear of what was listed, nodes and pods there
                self.scheduler.objects.replay_objects()
                # pods queued while the other caches were still listing passed pre_enqueue against part of them
                await self.scheduler.recheck_pre_enqueue()
                log.info("scheduling", scheduler=self.scheduler_name, nodes=self.cluster.num_nodes,
                         pending=len(self.scheduler.queue))
                self.started.set()
                if self.descheduler is not None:
                    bg.start_soon(self.descheduler.run, self._stop)
                async with anyio.create_task_group() as binds:
                    await self._loop(binds)
                    for wp in list(self.scheduler.waiting_pods.values()):
                        wp.reject("", "scheduler shutting down")
                await self.writer.drain()
                bg.cancel_scope.cancel()
        finally:
            if self.elector is not None:
                with anyio.CancelScope(shield=True):
                    await self.elector.release()
            with anyio.CancelScope(shield=True):
                await self.scheduler.shutdown()

    async def _cancel_on_stop(self, scope: anyio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()

    async def _hold_leadership(self) -> None:
        assert self.elector is not None
        await self.elector.hold()
        self.stop("lost leadership")

    async def _loop(self, binds: anyio.abc.TaskGroup) -> None:
        s = self.scheduler
        last_flush = 0.0
        n = 0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_flush >= self.flush_interval:
                last_flush = now
                await s.flush()
            if s.in_flight_binds - len(s.waiting_pods) >= self.max_in_flight:
                await anyio.sleep(0.002)
                continue
            if await s.schedule_next(binds):
                n += 1
                if n % 16 == 0:
                    await anyio.sleep(0)  # let the reflectors and binds run
                continue
            self._wake = anyio.Event()
            self.feeder.wakeup = self._wake
            with anyio.move_on_after(self._idle_timeout()):
                await self._wake.wait()

    def _idle_timeout(self) -> float:
        q = self.scheduler.queue
        d = q.next_backoff_deadline()
        if d is None:
            return self.flush_interval
        return max(0.01, min(self.flush_interval, d - time.time()))

    # -- reporting ----------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        absent = sorted(r.name for r in self.reflectors if not r.available)
        return {"synced": all(r.synced.is_set() for r in self.reflectors), "scheduling": self.started.is_set(),
                "leader": None if self.elector is None else self.elector.is_leader,
                "nodes": self.cluster.num_nodes, "queued": len(self.scheduler.queue),
                "bound": self.binder.bound, "inFlightBinds": self.scheduler.in_flight_binds,
                "absentKinds": absent, **api_health(self.client)}

    def unhealthy_reason(self) -> str | None:
        """Why ``/healthz`` should fail now, or None (see ``health.unhealthy_reason``)."""
        unsynced = [r.name for r in self.reflectors if not r.synced.is_set()]
        return unhealthy_reason(self.client, unsynced=unsynced, started_at=self._run_started,
                                after=self.unhealthy_after)
