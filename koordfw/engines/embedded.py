"""The embedded in-memory cluster: ``koordfw simulate`` and the Python embedding API.

The engine drives a Scheduler on a VirtualClock. It schedules while the active queue has pods; when
idle it lets binding cycles settle, then advances virtual time to the next deadline (a permit timer,
a backoff expiry, the unschedulable flush) only while that could change an outcome. A run ends when
every pending pod has been tried since the last progress (a bind or an eviction) and no pod is
waiting at permit.
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import structlog

from ..core.admission import ADMISSION_KINDS, Admission, StaticObjects
from ..core.clock import VirtualClock
from ..core.cluster import ClusterState, object_key
from ..core.cluster_view import ReadOnlyCluster, view_of
from ..core.errors import ManifestError
from ..core.events import SchedulerEvents, merge_patch
from ..core.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE
from ..core.manifests import Manifests, load_manifests
from ..core.model import Migration, Node, Pod, pod_from_manifest
from ..core.node_runtime import NodeResources
from ..core.plugins import Registry
from ..core.profile import Profile, load_profile
from ..core.quantity import format_quantity
from ..core.schedule_one import Scheduler
from ..core.state import CycleState
from ..core.status import Status
from ..extension import (
    COLOCATION_CONFIG_KEY,
    CONFIG_NAMESPACE,
    KIND_POD_MIGRATION_JOB,
    KIND_RESERVATION,
    LABEL_METADATA_NAME,
    SLO_CTRL_CONFIG_MAP,
)
from .migration import MigrationController, PodMigrationJob, job_manifest

log = structlog.get_logger("koordfw.embedded")


@attrs.define
class PodResult:
    """What the embedded cluster reports for one pod."""

    node: str | None = None
    reason: str = ""
    annotations: dict[str, str] = attrs.field(factory=dict)
    attempts: int = 0
    #: why the pod was last evicted (preemption, descheduling), kept in front of later reasons
    evicted: str = ""


@attrs.define
class SimulationResult:
    engine: EmbeddedEngine
    seconds: float
    migrations: list[Migration] = attrs.field(factory=list)
    extra: dict[str, Any] = attrs.field(factory=dict)
    pod_order: list[str] = attrs.field(factory=list)  # uids in input order
    #: uid -> (pod, reason) of the pods the admission hooks refused (never created, so never scheduled)
    rejected: dict[str, tuple[Pod, str]] = attrs.field(factory=dict)
    #: the input, for the per-workload section (``Manifests.workload_rows``)
    manifests: Manifests | None = None
    #: uid -> (pod, reason) of the pending pods naming another scheduler (left alone, as live)
    not_ours: dict[str, tuple[Pod, str]] = attrs.field(factory=dict)

    @property
    def scheduler(self) -> Scheduler:
        return self.engine.scheduler

    @property
    def cluster(self) -> ClusterState:
        return self.engine.cluster

    @property
    def results(self) -> dict[str, PodResult]:
        return self.engine.results

    def placements(self) -> dict[str, str | None]:
        """namespace/name → node (None when pending)."""
        out = {}
        for uid in self.pod_order:
            p = self.cluster.pod(uid)
            if p is not None:
                out[p.key] = p.node_name
        return out

    def to_dict(self) -> dict[str, Any]:
        e = self.engine
        pods = []
        for uid in self.pod_order:
            if uid in self.rejected:
                refused, why = self.rejected[uid]
                pods.append({"namespace": refused.namespace, "name": refused.name, "node": None, "phase": "Rejected",
                             "reason": why, "annotations": {}, **_pod_spec_summary(refused)})
                continue
            if uid in self.not_ours:
                other, why = self.not_ours[uid]
                pods.append({"namespace": other.namespace, "name": other.name, "node": None, "phase": "NotOurs",
                             "reason": why, "annotations": {}, **_pod_spec_summary(other)})
                continue
            p = self.cluster.pod(uid)
            if p is None:
                continue
            r = e.results.get(uid)
            bound = bool(p.node_name) and not self.cluster.is_assumed(uid)
            pods.append({"namespace": p.namespace, "name": p.name, "node": p.node_name if bound else None,
                         "phase": "Bound" if bound else "Pending",
                         "reason": "" if bound else (r.reason if r else ""),
                         "annotations": dict(r.annotations) if (r and bound) else {}, **_pod_spec_summary(p)})
        nodes = []
        for v in self.cluster.nodes:
            row = self.cluster.summary_row(v)
            nodes.append({"name": row["name"],
                          "allocatable": {k: format_quantity(k, x) for k, x in row["allocatable"].items()},
                          "requested": {k: format_quantity(k, x) for k, x in row["requested"].items()},
                          "pods": row["pods"]})
            written = e.node_annotations.get(v.name)
            if written:  # what the node_resources plugins wrote (a CPU normalization ratio, ...)
                nodes[-1]["annotations"] = {k: v.node.annotations[k] for k in sorted(written) if k in v.node.annotations}
        n_bound = sum(1 for p in pods if p["phase"] == "Bound")
        scheduled = len(e.bind_events)
        summary: dict[str, Any] = {"bound": n_bound,
                                   "pending": len(pods) - n_bound - len(self.rejected) - len(self.not_ours)}
        if self.rejected:
            summary["rejected"] = len(self.rejected)
        if self.not_ours:
            summary["notOurs"] = len(self.not_ours)
        out = {"pods": pods, "nodes": nodes,
               "summary": {**summary, "seconds": round(self.seconds, 6),
                           "pods_per_second": round(scheduled / self.seconds, 1) if self.seconds > 0 else 0.0}}
        if self.manifests is not None and self.manifests.workloads:
            out["workloads"] = self.manifests.workload_rows(pods)
        claims = claims_report(self.cluster)
        if claims:
            out["claims"] = claims
        if self.migrations:
            out["migrations"] = [attrs.asdict(m) for m in self.migrations]
        if e.migration_controller is not None and e.migration_controller.jobs:
            out["migrationJobs"] = e.migration_controller.report()
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out


def claims_report(cluster: ClusterState) -> list[dict[str, Any]]:
    """The ``claims`` section of a simulation: every PersistentVolumeClaim as the run left it (bound to a
    static PV by volume_binding's pre_bind, or annotated with the node chosen for provisioning)."""
    rows = []
    for key, obj in sorted(cluster.objects_of("PersistentVolumeClaim").items()):
        meta = obj.get("metadata") or {}
        rows.append({"namespace": meta.get("namespace") or "default", "name": meta.get("name") or key,
                     "phase": (obj.get("status") or {}).get("phase") or "Pending",
                     "volumeName": (obj.get("spec") or {}).get("volumeName") or None,
                     "selectedNode": (meta.get("annotations") or {}).get("volume.kubernetes.io/selected-node")})
    return rows


def slo_config_from_objects(cluster: ClusterState) -> dict[str, str] | None:
    """The ``data`` of an input's ``slo-controller-config`` ConfigMap (the one in koordinator-system first,
    else any namespace's), its values as text; None without the ConfigMap."""
    found = [(ns != CONFIG_NAMESPACE, key, obj) for key, obj in cluster.objects_of("ConfigMap").items()
             for ns, _, name in [key.rpartition("/")] if name == SLO_CTRL_CONFIG_MAP]
    if not found:
        return None
    data = min(found, key=lambda t: (t[0], t[1]))[2].get("data")
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def colocation_from_objects(cluster: ClusterState) -> dict[str, Any] | None:
    """The ColocationCfg of an input's ``slo-controller-config`` ConfigMap (the one in koordinator-system
    first, else any namespace's): the JSON object of its ``colocation-config`` key, ``{}`` without the key;
    None without the ConfigMap. A value that is not a JSON object raises ManifestError naming the key."""
    found = [(ns != CONFIG_NAMESPACE, key, obj) for key, obj in cluster.objects_of("ConfigMap").items()
             for ns, _, name in [key.rpartition("/")] if name == SLO_CTRL_CONFIG_MAP]
    if not found:
        return None
    _, key, obj = min(found, key=lambda t: (t[0], t[1]))
    data = obj.get("data") or {}
    where = f"ConfigMap {key}"
    if not isinstance(data, dict):
        raise ManifestError("expected a mapping of strings", obj=where, field="data")
    raw = data.get(COLOCATION_CONFIG_KEY)
    if not raw:
        return {}
    try:
        cfg = json.loads(raw) if isinstance(raw, str) else None
    except ValueError as e:
        raise ManifestError(f"invalid JSON: {e}", obj=where, field=f"data.{COLOCATION_CONFIG_KEY}") from None
    if not isinstance(cfg, dict):
        raise ManifestError("expected a JSON object (Koordinator's ColocationCfg)", obj=where,
                            field=f"data.{COLOCATION_CONFIG_KEY}")
    return cfg


class EmbeddedEngine(SchedulerEvents):
    """The in-memory cluster: drives a Scheduler on a VirtualClock, binds and evicts in memory, and
    keeps what a run reports (per-pod results, bind order, cycle timings, attempts).

    An embedder (a replay, a benchmark, another program) builds it from ``nodes``, ``pods`` and ``objects``
    and drives it through its methods: :meth:`start` / :meth:`stop`, :meth:`add_pod` / :meth:`delete_pod`,
    :meth:`put_object`, :meth:`node_updated`, :meth:`schedule_one` (one cycle) or :meth:`run` / :meth:`drive`
    (until nothing changes), :meth:`evict`; it reads the cluster through :attr:`view` (read-only) and the
    per-pod :attr:`results`. ``scheduler`` and ``cluster`` are the kernel's own (its tests read them); an
    embedder needs neither. ``inline_binding=False`` runs each binding cycle as a task of the task group
    given to :meth:`schedule_one` (a replay that drives the cycles itself, as the live scheduler does)."""

    def __init__(self, registry: Registry, cluster: ClusterState | None = None, *, nodes: Iterable[Node] = (),
                 pods: Iterable[Pod] = (), objects: Iterable[Mapping[str, Any]] = (), seed: int = 0,
                 start_time: float | None = None, inline_binding: bool = True) -> None:
        self.clock = VirtualClock(start_time if start_time is not None else time.time())
        if cluster is None:
            cluster = ClusterState()
        for node in nodes:
            cluster.add_node(node)
        for obj in objects:
            if not isinstance(obj.get("kind"), str) or not obj.get("kind"):
                raise ManifestError("an object needs a kind", obj=str((obj.get("metadata") or {}).get("name")),
                                    field="kind")
            cluster.set_object(obj["kind"], dict(obj))
        for pod in pods:
            cluster.add_pod(pod)
        self.cluster = cluster
        self.results: dict[str, PodResult] = {}
        #: (uid, node) in bind order
        self.bind_events: list[tuple[str, str]] = []
        self.cycle_seconds: list[float] = []
        self.attempt_counts: Counter[str] = Counter()
        #: uid of the pod whose cycle ran last
        self.last_uid = ""
        #: uid → progress when its last attempt failed
        self._tried_at: dict[str, int] = {}
        self.max_attempts = 0
        #: binding cycles run inline (the default: memory binds need no task), or as tasks of the caller's
        #: task group when it drives ``scheduler.schedule_next`` itself
        self.scheduler = Scheduler(registry, cluster, self.clock, engine=self, seed=seed,
                                   inline_binding=inline_binding, events_complete=True)
        #: the in-memory migration controller (``deschedule`` with the reservation plugin loaded)
        self.migration_controller: MigrationController | None = None
        self._jobs_made = 0
        #: the ColocationCfg the node_resources hooks got: the slo-controller-config ConfigMap of the cluster
        #: when they last ran (read then: the cluster may be filled after the engine is made)
        self.colocation: dict[str, Any] | None = None
        #: node name -> the annotation keys node_resources plugins wrote on it (shown by ``koordfw simulate``)
        self.node_annotations: dict[str, set[str]] = {}

    @classmethod
    def from_manifests(cls, registry: Registry, manifests: Manifests, *, seed: int = 0, start_time: float | None = None,
                       inline_binding: bool = True) -> EmbeddedEngine:
        """The engine of a loaded input (:func:`koordfw.inputs.load_manifests`): its nodes, objects and pods as
        given (no admission: :func:`simulate` admits), each object's errors naming its file; the clock at
        ``start_time`` or else the input's newest timestamp."""
        return cls(registry, manifests.to_cluster(), seed=seed, inline_binding=inline_binding,
                   start_time=start_time if start_time is not None else manifests.newest_timestamp())

    # -- the embedding API ------------------------------------------------------------------------
    @property
    def view(self) -> ReadOnlyCluster:
        """The cluster, read-only (what plugins see as ``handle.cluster``: the same object)."""
        return view_of(self.cluster)

    async def start(self, *, enqueue_pending: bool = True) -> None:
        """Every plugin's ``startup`` (a plugin's bad input raised as the user's error), then the pending
        pods the engine was built with queued (``enqueue_pending``), in the order they were given."""
        s = self.scheduler
        await s.startup()
        if enqueue_pending:
            for uid in s.pending_uids():
                await s.enqueue(self.cluster.pods[uid].pod)

    async def stop(self) -> None:
        """Every plugin's ``shutdown``."""
        await self.scheduler.shutdown()

    async def add_pod(self, pod: Pod) -> None:
        """A pod is created: a pending one is queued (its ``pre_enqueue`` run), a bound one accounted on its
        node; the queue hears the event (pods waiting for one like it move)."""
        await self.scheduler.add_pod(pod)

    async def delete_pod(self, uid: str) -> None:
        """A pod is deleted: it leaves the queue or its node (a pod waiting at permit is rejected); its
        node's capacity frees and the queue hears it."""
        await self.scheduler.remove_pod(uid)

    def put_object(self, obj: Mapping[str, Any]) -> None:
        """Create or replace an object of the cluster (a NodeMetric, a CRD, a ConfigMap...), by its ``kind``
        and name; the plugins watching the kind (``handle.watch_objects``) hear the change."""
        kind = obj.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ManifestError("an object needs a kind", field="kind")
        new = dict(obj)
        key = object_key(kind, new.get("metadata") or {})
        old = self.cluster.get_object(kind, key)
        self.cluster.set_object(kind, new)
        self.scheduler.objects.object_changed(kind, key, old, new)

    async def put_node(self, node: Node) -> None:
        """A node is added, or changed (the same name): the queue hears Node/Add or Node/Update, as from the
        live engine's watch; pods that named a node before it existed count on it now."""
        c = self.cluster
        prev = c.node(node.name)
        before = prev.node if prev is not None else None
        if prev is not None:
            c.update_node(node)
        else:
            c.add_node(node)
            for entry in list(c.pods.values()):
                if entry.pod.node_name == node.name and entry.node_index < 0 and not entry.pod.is_terminal:
                    c.add_pod(entry.pod)
        await self.scheduler.cluster_event(NODE_UPDATE if prev is not None else NODE_ADD, before, node)

    async def flush_queue(self) -> None:
        """kube's periodic queue flushes, at the clock's time: pods whose backoff has ended go to the active
        queue, pods unschedulable for longer than the queue's limit are retried."""
        await self.scheduler.flush()

    async def node_updated(self, name: str) -> None:
        """A node changed (its allocatable, labels, taints: written by the engine or the embedder): pods
        waiting for a node update are moved, as kube's queue moves them on a Node/Update event."""
        view = self.cluster.node(name)
        if view is None:
            raise KeyError(f"no node {name!r}")
        await self.scheduler.cluster_event(NODE_UPDATE, view.node, view.node)

    async def schedule_one(self, tg: anyio.abc.TaskGroup) -> Pod | None:
        """One scheduling cycle: the next pod of the active queue is tried (the pod is returned) and, if it
        is placed, bound, inline or (``inline_binding=False``, or a pod waiting at permit) as a task of
        ``tg``, the caller's task group for the run; None when no pod is ready (pods in backoff wait for
        :meth:`drive`, which moves the clock, or :meth:`flush_queue` once the caller has moved it)."""
        return await self.scheduler.schedule_next(tg)

    @property
    def progress(self) -> int:
        """Bumped on every bind and every change that frees capacity (the run's stop rule)."""
        return len(self.bind_events) + self.scheduler.queue.move_requests

    # -- SchedulerEvents ------------------------------------------------------------------------------
    def pod_gated(self, pod: Pod, status: Status) -> None:
        self.results[pod.uid] = PodResult(reason=status.message or f"held by {status.plugin}")

    def cycle_started(self, pod: Pod) -> None:
        self.attempt_counts[pod.uid] += 1
        self.last_uid = pod.uid

    def cycle_finished(self, pod: Pod, seconds: float) -> None:
        self.cycle_seconds.append(seconds)

    def pod_bound(self, pod: Pod, node_name: str, state: CycleState) -> None:
        res = self.results.get(pod.uid)
        if res is None:
            res = self.results[pod.uid] = PodResult()
        res.node, res.reason = node_name, ""
        res.annotations.update(state.annotations)
        res.attempts = self.attempt_counts[pod.uid]
        self.bind_events.append((pod.uid, node_name))

    def attempt_failed(self, pod: Pod) -> None:
        self._tried_at[pod.uid] = self.progress

    async def pod_unschedulable(self, pod: Pod, status: Status) -> None:
        reason = status.message or f"rejected by {status.plugin}"
        res = self.results.setdefault(pod.uid, PodResult())
        res.node, res.reason = None, f"{res.evicted}; then: {reason}" if res.evicted else reason
        res.attempts = self.attempt_counts[pod.uid]

    def pod_removed(self, uid: str) -> None:
        self.results.pop(uid, None)

    async def bind(self, pod: Pod, node_name: str, annotations: Mapping[str, str]) -> bool:
        self.cluster.confirm_bound(pod, node_name, annotations)
        return True

    async def patch_object(self, kind: str, obj: Mapping[str, Any], patch: Mapping[str, Any],
                           precondition: Callable[[Mapping[str, Any]], bool] | None = None) -> dict[str, Any] | None:
        """In memory; a PersistentVolume given a ``claimRef`` to an unbound claim is then bound as kube's PV
        controller binds it (``syncVolume``/``bind``: the PV Bound, the claim's ``volumeName``, its
        ``pv.kubernetes.io/bind-completed`` annotation, phase Bound with the PV's capacity). A claim annotated
        for provisioning stays Pending: the embedded cluster has no provisioner."""
        new = merge_patch(obj, patch)
        if kind != "PersistentVolume":
            return new
        ref = (new.get("spec") or {}).get("claimRef") or {}
        key = f"{ref.get('namespace')}/{ref.get('name')}"
        pvc = self.cluster.get_object("PersistentVolumeClaim", key)
        if pvc is None or (pvc.get("spec") or {}).get("volumeName") \
                or (ref.get("uid") and ref["uid"] != (pvc.get("metadata") or {}).get("uid")):
            return new
        pv_name = (new.get("metadata") or {}).get("name")
        bound = merge_patch(pvc, {
            "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                         "pv.kubernetes.io/bound-by-controller": "yes"}},
            "spec": {"volumeName": pv_name},
            "status": {"phase": "Bound", "accessModes": (new.get("spec") or {}).get("accessModes") or [],
                       "capacity": (new.get("spec") or {}).get("capacity") or {}}})
        self.cluster.set_object("PersistentVolumeClaim", bound)
        self.scheduler.objects.object_changed("PersistentVolumeClaim", key, pvc, bound)
        return {**new, "status": {**(new.get("status") or {}), "phase": "Bound"}}

    async def evict(self, pod: Pod, reason: str) -> bool:
        """Evict in memory: the pod leaves its node and comes back pending (its controller recreates it)."""
        s = self.scheduler
        cur = self.cluster.pod(pod.uid)
        if cur is None or pod.uid in s.placeholders:  # a placeholder exists only in the scheduler: not evicted
            return False
        wp = s.waiting_pods.get(pod.uid)
        if wp is not None:
            wp.reject("", reason)
            return True
        self.cluster.remove_pod(pod.uid)
        plugin_anns = self.results.get(pod.uid, PodResult()).annotations
        anns = {k: v for k, v in cur.annotations.items() if k not in plugin_anns}
        fresh = attrs.evolve(cur, node_name=None, phase="Pending", annotations=anns, nominated_node_name=None)
        self.results[pod.uid] = PodResult(reason=reason, evicted=reason)
        self.cluster.add_pod(fresh)
        await s.enqueue(fresh)
        await s.cluster_event(ASSIGNED_POD_DELETE, cur, None)
        return True

    async def run_migration_jobs(self, plan: list[Migration], *, max_rounds: int = 8) -> None:
        """The plan as PodMigrationJobs (ReservationFirst with a target, else EvictDirectly) run by the migration
        controller in memory: each round reconciles every job, then the cluster is driven (reservations and
        evicted pods scheduled), until every job has ended or nothing changes."""
        if self.migration_controller is None:
            self.migration_controller = MigrationController(EmbeddedMigrationIO(self))
        io = self.migration_controller.io
        running = {f"{(j.get('spec') or {}).get('podRef', {}).get('namespace', 'default')}/"
                   f"{(j.get('spec') or {}).get('podRef', {}).get('name')}"
                   for j in self.cluster.objects_of(KIND_POD_MIGRATION_JOB).values()
                   if ((j.get("status") or {}).get("phase") or "Pending") in ("Pending", "Running")}
        for m in plan:
            pod = self.cluster.pod_by_key(m.pod)
            if pod is None or pod.node_name != m.from_node or m.pod in running:
                continue
            self._jobs_made += 1
            obj = job_manifest(f"{pod.name}-migration-{self._jobs_made}", pod,
                               mode="ReservationFirst" if m.to else "EvictDirectly", target=m.to,
                               reason=m.reason, plugin=m.plugin)
            assert isinstance(io, EmbeddedMigrationIO)
            self.cluster.set_object(KIND_POD_MIGRATION_JOB, io._stamp(obj))
            running.add(m.pod)
        for _ in range(max_rounds):
            before = json.dumps(self.cluster.objects_of(KIND_POD_MIGRATION_JOB), sort_keys=True, default=str)
            jobs = await self.migration_controller.run_once(dict(self.cluster.objects_of(KIND_POD_MIGRATION_JOB)))
            await self.drive()
            if all(j.is_terminal or j.paused for j in jobs):
                break
            after = json.dumps(self.cluster.objects_of(KIND_POD_MIGRATION_JOB), sort_keys=True, default=str)
            if after == before and not self.scheduler.queue.peek_active():
                break

    async def refresh_node_resources(self) -> None:
        """Run the node_resources hooks for every node and merge their results into allocatable."""
        rt = self.scheduler.node_runtime
        if not rt.implements("node_resources"):
            return
        now = self.clock.now()
        self.colocation = colocation_from_objects(self.cluster)
        slo_config = slo_config_from_objects(self.cluster)
        # a node whose annotations a pass changed is computed again, as the manager's node update event
        # reconciles it again (a plugin earlier in profile order may read what a later one wrote)
        names = [v.name for v in self.cluster.nodes]
        for _ in range(3):
            again = []
            for name in names:
                view = self.cluster.node(name)
                if view is None:
                    continue
                before = dict(view.node.annotations)
                res = await rt.run_node_resources(view, self.cluster.pods_on(name), self.cluster.node_metric(name),
                                                  now, None, self.colocation, slo_config)
                self.apply_node_resources(name, res)
                after = self.cluster.node(name)
                if after is not None and dict(after.node.annotations) != before:
                    again.append(name)
            if not again:
                break
            names = again

    def apply_node_resources(self, name: str, res: NodeResources) -> bool:
        """Apply one node's merged ``node_resources`` results to the cluster: the amounts over its allocatable
        and capacity (None, Koordinator's reset, and 0 both leave none of the resource here), the annotations
        and the allocatable override on its Node; the annotations written are remembered for the report.
        True when anything was asked for."""
        if res.amounts:
            self.cluster.set_extra_allocatable(name, {k: 0 if v is None else v for k, v in res.amounts.items()})
        if res.annotations or res.allocatable:
            view = self.cluster.node(name)
            if view is not None:
                node = view.node
                anns = {k: v for k, v in {**node.annotations, **res.annotations}.items() if v is not None}
                self.cluster.update_node(attrs.evolve(node, annotations=anns,
                                                      allocatable={**node.allocatable, **res.allocatable}))
                self.node_annotations.setdefault(name, set()).update(res.annotations)
        return res.wants_write

    async def run(self, *, progress: Callable[[int, int], None] | None = None) -> None:
        """:meth:`start`, the node_resources hooks run on every node, then :meth:`drive` until nothing changes."""
        await self.start(enqueue_pending=False)
        await self.refresh_node_resources()
        s = self.scheduler
        for uid in s.pending_uids():
            await s.enqueue(self.cluster.pods[uid].pod)
        await self.drive(progress=progress)

    async def drive(self, *, progress: Callable[[int, int], None] | None = None) -> None:
        s = self.scheduler
        total = len(s.queue)
        self.max_attempts = 50 * max(total, 1) + 1000
        attempts = 0
        async with anyio.create_task_group() as tg:
            while True:
                if await s.schedule_next(tg):
                    attempts += 1
                    if attempts % 32 == 0:
                        await anyio.lowlevel.checkpoint()
                        if progress is not None:
                            progress(len(self.bind_events), total)
                    if attempts > self.max_attempts:
                        log.warning("simulation stopped: attempt limit reached", attempts=attempts)
                        break
                    continue
                await anyio.wait_all_tasks_blocked()
                await s.flush()
                if s.queue.peek_active():
                    continue
                if s.in_flight_binds > len(s.waiting_pods):
                    await anyio.sleep(0)
                    continue
                deadline = self._next_useful_deadline()
                if deadline is None:
                    break
                self.clock.advance_to(deadline)
                await anyio.wait_all_tasks_blocked()
                await s.flush()
            # nothing left to do: reject any stragglers at permit so their tasks finish
            for wp in list(s.waiting_pods.values()):
                wp.reject("", "simulation ended while waiting at permit")
        if progress is not None:
            progress(len(self.bind_events), total)

    def _next_useful_deadline(self) -> float | None:
        s = self.scheduler
        q = s.queue
        candidates = []
        if s.waiting_pods:
            d = self.clock.next_deadline()
            if d is not None:
                candidates.append(d)
        untried = [u for u in list(q.backoff) + list(q.unschedulable) if self._tried_at.get(u, -1) != self.progress]
        if untried:
            for u in untried:
                info = q.infos[u]
                if u in q.backoff:
                    candidates.append(info.backoff_until)
                elif info.gated or s.hinted(info):
                    # gated pods wait for pre_enqueue to admit them; a pod whose rejecting plugins all
                    # declare queueing hints waits for an event they accept: in memory every change is an
                    # event, so the 5-minute flush (the live queue's safety net) has nothing to find
                    continue
                else:
                    candidates.append(max(info.backoff_until, info.unschedulable_since + q.max_unschedulable))
        if not candidates:
            d = self.clock.next_deadline()
            if d is not None and s.in_flight_binds:
                candidates.append(d)
        return min(candidates) if candidates else None

    async def deschedule_plans(self) -> tuple[dict[str, list[Migration]], list[str]]:
        """Run every plugin's ``deschedule`` once: (plugin → the migrations it planned, each named after
        its plugin unless it named one; one error message per plugin that failed). Nothing is applied."""
        plans, failures = await self.scheduler.node_runtime.run_deschedule(self.cluster)
        return plans, [f"{f.plugin}: {f.message}" for f in failures]

    async def deschedule(self) -> list[Migration]:
        """Run the descheduling plugins once and apply their plan in memory; evicted pods are rescheduled.
        With the reservation plugin loaded, the plan runs as PodMigrationJobs through the live descheduler's
        migration controller (:meth:`run_migration_jobs`)."""
        s = self.scheduler
        plans, _ = await self.deschedule_plans()
        plan = [m for ms in plans.values() for m in ms]
        if s.placeholders:  # placeholder pods (reservations' reserve pods) are never evicted: not a migration
            plan = [m for m in plan if (p := self.cluster.pod_by_key(m.pod)) is None or p.uid not in s.placeholders]
        if "reservation" in s.registry.plugins:
            await self.run_migration_jobs(plan)
            return plan
        for m in plan:
            pod = self.cluster.pod_by_key(m.pod)
            if pod is None or pod.node_name != m.from_node:
                continue
            await self.evict(pod, f"descheduled by {m.plugin}: {m.reason}")
            if m.to:
                fresh = self.cluster.pod_by_key(m.pod)
                if fresh is not None:
                    s.nominate_pending(fresh, m.to)
        await self.drive()
        return plan


class EmbeddedMigrationIO:
    """The migration controller's reads and writes on the embedded cluster: objects in memory, the reservation
    plugin told of the Reservations created and deleted (as a watch would), evictions in memory."""

    def __init__(self, engine: EmbeddedEngine) -> None:
        self.engine = engine
        self.cluster = engine.cluster
        self._n = 0

    def now(self) -> float:
        return self.engine.clock.now()

    def pod(self, namespace: str, name: str) -> Pod | None:
        return self.cluster.pod_by_key(f"{namespace}/{name}")

    def reservation(self, name: str) -> Mapping[str, Any] | None:
        return self.cluster.get_object(KIND_RESERVATION, name)

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._n += 1
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"{obj['kind'].lower()}-{meta['name']}")
        meta.setdefault("creationTimestamp", _iso(self.now()))
        meta.setdefault("resourceVersion", str(self._n))
        return obj

    async def create_reservation(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        existing = self.cluster.get_object(KIND_RESERVATION, name)
        if existing is not None:
            return existing
        obj = self._stamp(copy.deepcopy(obj))
        self.cluster.set_object(KIND_RESERVATION, obj)
        self.engine.scheduler.objects.object_changed(KIND_RESERVATION, name, None, obj)
        return obj

    async def delete_reservation(self, name: str) -> None:
        old = self.cluster.get_object(KIND_RESERVATION, name)
        if old is not None:
            self.cluster.delete_object(KIND_RESERVATION, name)
            self.engine.scheduler.objects.object_changed(KIND_RESERVATION, name, old, None)

    async def set_reservation_ref(self, job: PodMigrationJob, ref: dict[str, str]) -> None:
        cur = copy.deepcopy(self.cluster.get_object(KIND_POD_MIGRATION_JOB, job.name) or {})
        if cur:
            cur.setdefault("spec", {}).setdefault("reservationOptions", {})["reservationRef"] = ref
            self.cluster.set_object(KIND_POD_MIGRATION_JOB, cur)

    async def write_status(self, job: PodMigrationJob, status: dict[str, Any]) -> None:
        cur = self.cluster.get_object(KIND_POD_MIGRATION_JOB, job.name)
        if cur is not None:
            self.cluster.set_object(KIND_POD_MIGRATION_JOB, {**cur, "status": copy.deepcopy(status)})

    async def evict(self, pod: Pod, delete_options: Mapping[str, Any] | None) -> str | None:
        ok = await self.engine.evict(pod, "migrated by a PodMigrationJob")
        return None if ok else "the pod could not be evicted"


def _iso(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_registry(profile: Profile | str | Path | dict | None = None, *, plugins: dict[str, Any] | None = None,
                   disable: Iterable[str] = (), autoload: bool | None = None, strict: bool = False,
                   only: Iterable[str] | None = None) -> Registry:
    """Load plugins (built-ins, entry points, then ``plugins``) and configure them from a profile.

    ``only`` limits the entry-point plugins to those names (the built-ins always load unless disabled).
    """
    from ..core.profile import profile_from_dict

    if isinstance(profile, dict):
        profile = profile_from_dict(profile)
    elif profile is None or isinstance(profile, (str, Path)):
        profile = load_profile(profile)
    return Registry(profile).load(autoload=autoload, disable=set(disable), strict=strict, extra=plugins,
                                  only=set(only) if only is not None else None)


def _pod_spec_summary(p: Pod) -> dict[str, Any]:
    """What admission may have changed of a pod: its labels, priority, scheduler and container requests."""
    spec = (p.raw or {}).get("spec") or {}
    return {"labels": dict(p.labels), "priorityClassName": str(spec.get("priorityClassName") or ""),
            "priority": p.priority, "schedulerName": p.scheduler_name,
            "containers": [{"name": c.name, "requests": {k: format_quantity(k, v) for k, v in c.requests.items()}}
                           for c in p.containers]}


def admission_store(manifests: Manifests) -> StaticObjects:
    """The objects the admission plugins read in a simulation: the input's Namespaces, PriorityClasses and
    ClusterColocationProfiles (a document without apiVersion gets its kind's), and a Namespace for every
    pod namespace the input does not declare, labelled as the API server labels every namespace
    (``kubernetes.io/metadata.name``), which it also adds to the declared ones."""
    store = StaticObjects()
    declared = set()
    for kind, obj in manifests.objects:
        if kind not in ADMISSION_KINDS:
            continue
        obj = {**obj, "apiVersion": obj.get("apiVersion") or ADMISSION_KINDS[kind]}
        if kind == "Namespace":
            meta = obj.get("metadata") or {}
            declared.add(meta.get("name"))
            obj["metadata"] = {**meta, "labels": {**(meta.get("labels") or {}), LABEL_METADATA_NAME: meta.get("name")}}
        store.put(obj)
    for ns in sorted({p.namespace for p in manifests.pods} - declared):
        store.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {LABEL_METADATA_NAME: ns}}})
    return store


async def admit_pods(manifests: Manifests, registry: Registry, *, seed: int = 0,
                     clock: VirtualClock | None = None) -> tuple[list[Pod], dict[str, tuple[Pod, str]]]:
    """Run the pod admission hooks (``mutate_pod`` then ``validate_pod``, operation CREATE) on every pending
    pod of ``manifests`` as the API server would when it is created. Returns the pods to create (the
    admitted ones in place of the input's) and the refused ones (uid -> (pod, reason)); ``manifests`` is
    not changed. Pods already bound to a node were admitted when they were created and are kept as they are."""
    adm = Admission(registry, admission_store(manifests), clock=clock, seed=seed)
    if not adm.active:
        return list(manifests.pods), {}
    rejected: dict[str, tuple[Pod, str]] = {}
    admitted: list[Pod] = []
    for pod in manifests.pods:
        if pod.node_name or pod.raw is None:
            admitted.append(pod)
            continue
        out = await adm.admit(dict(pod.raw), "CREATE")
        if not out.allowed:
            rejected[pod.uid] = (pod, f"admission: {out.message}")
            continue
        if not out.patch:
            admitted.append(pod)
            continue
        try:
            new = pod_from_manifest(out.pod)
        except ManifestError as e:  # the API server validates the mutated pod: a 422, the pod is not created
            rejected[pod.uid] = (pod, f"admission: the admitted pod is invalid: {e}")
            continue
        admitted.append(new)
    return admitted, rejected


async def run_simulation(source: Manifests | Sequence[str | Path], registry: Registry, *, seed: int = 0,
                         deschedule: bool | int = False,
                         progress: Callable[[int, int], None] | None = None,
                         all_schedulers: bool = False, now: float | None = None) -> SimulationResult:
    """Schedule every pending pod; then, with ``deschedule`` (True = 1, or a number of cycles), run the
    descheduling plugins that many times, each plan applied and its pods rescheduled before the next.

    As the live scheduler, only pending pods whose ``spec.schedulerName`` is the profile's are scheduled;
    a pod that names another scheduler (in the input, or as admission set it) is left alone and reported
    as not ours. A pod whose input sets no ``schedulerName`` is taken as written for koordfw (the API
    server would default it to ``default-scheduler``: set the profile's name when applying it live).
    ``all_schedulers`` schedules every pod (the preview of moving workloads onto koordfw). The virtual
    clock starts at ``now`` (epoch seconds) or else at the newest time in the input, so that the
    input's NodeMetrics are read as fresh."""
    manifests = source if isinstance(source, Manifests) else load_manifests(source)
    manifests.expand_workloads()  # workloads loaded with load_objects(into=...): their pods, before admission
    # the engine binds the registry (class plugins get scheduler handles), then pods are admitted, then added
    cluster = ClusterState()
    engine = EmbeddedEngine(registry, cluster, seed=seed,
                            start_time=now if now is not None else manifests.newest_timestamp())
    order = [p.uid for p in manifests.pods]
    pods, rejected = await admit_pods(manifests, registry, seed=seed, clock=engine.clock)
    not_ours: dict[str, tuple[Pod, str]] = {}
    if not all_schedulers:
        pods, not_ours = _split_by_scheduler(manifests, pods, registry.profile.scheduler_name)
    attrs.evolve(manifests, pods=pods).to_cluster(cluster)
    t0 = time.perf_counter()
    await engine.run(progress=progress)
    migrations: list[Migration] = []
    for _ in range(int(deschedule)):
        migrations += await engine.deschedule()
    seconds = time.perf_counter() - t0
    extra = await engine.scheduler.node_runtime.run_report()
    await engine.scheduler.shutdown()
    return SimulationResult(engine, seconds, migrations, extra, order, rejected, manifests, not_ours)


def _split_by_scheduler(manifests: Manifests, pods: list[Pod], ours: str) -> tuple[list[Pod], dict[str, tuple[Pod, str]]]:
    """The pods to create in the cluster, and the pending ones another scheduler would schedule (uid ->
    (pod, reason)): their ``schedulerName`` is set (in the input or by admission) and is not ``ours``."""
    inputs = {p.uid: p for p in manifests.pods}
    keep: list[Pod] = []
    not_ours: dict[str, tuple[Pod, str]] = {}
    for p in pods:
        orig = inputs.get(p.uid)
        if orig is None or p.scheduler_name != orig.scheduler_name:
            explicit = True  # admission set it
        elif orig.raw is None:  # built in code: the model's default stands for unset
            explicit = p.scheduler_name != "default-scheduler"
        else:
            spec = orig.raw.get("spec")
            explicit = isinstance(spec, dict) and bool(spec.get("schedulerName"))
        if p.node_name or not explicit or p.scheduler_name == ours:
            keep.append(p)
        else:
            not_ours[p.uid] = (p, f"not ours: spec.schedulerName {p.scheduler_name!r} is not this scheduler's "
                                  f"({ours!r}); left alone as the live scheduler would (--all-schedulers "
                                  f"schedules it)")
    return keep, not_ours


def simulate(source: Manifests | Sequence[str | Path], profile: Profile | str | Path | dict | None = None, *,
             seed: int = 0, plugins: dict[str, Any] | None = None, disable: Iterable[str] = (),
             autoload: bool | None = None, only: Iterable[str] | None = None,
             deschedule: bool | int = False, all_schedulers: bool = False,
             now: float | None = None) -> SimulationResult:
    """Schedule the pending pods of ``source`` (manifest paths or loaded Manifests) that are ours (see
    :func:`run_simulation`; ``all_schedulers``: every one); synchronous."""
    registry = build_registry(profile, plugins=plugins, disable=disable, autoload=autoload, only=only)
    return anyio.run(lambda: run_simulation(source, registry, seed=seed, deschedule=deschedule,
                                            all_schedulers=all_schedulers, now=now))
