"""The scheduling and binding cycles (kube's ``pkg/scheduler/schedule_one.go``) over the queue.

One scheduling cycle per pod: pre_filter (Skip disables the matching filter), filter over an adaptive
number of nodes from a round-robin start, post_filter on failure, pre_score/score/normalize_score
with profile weights and a seeded random tie-break, assume + reserve, permit (allow / reject / wait
with per-plugin timers); then a binding cycle (wait on permit → pre_bind → bind → post_bind). A failure
after reserve runs ``unreserve`` in reverse order and forgets the assumed pod. Plugins run through
:class:`~.runtime.Framework`; the engine hears of outcomes through :class:`~.events.SchedulerEvents`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import anyio.abc
import attrs
import numpy as np
import structlog

from .clock import Clock
from .cluster import ClusterState, NodeView
from .errors import ManifestError, PluginLoadError
from .events import EventLog, SchedulerEvents
from .hints import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    POD_ADD,
    POD_DELETE,
    ClusterEvent,
    ClusterEventWithHint,
)
from .model import Pod
from .node_runtime import NodeRuntime
from .nominator import Nominator
from .object_hub import ObjectHub
from .plugins import Registry
from .queue import QueuedPodInfo, SchedulingQueue, rejectors
from .results import NodeStatuses, WaitingPod, fit_error
from .runtime import Framework
from .scheduler_handle import SchedulerHandle
from .state import CycleState, StateKey
from .status import Status

log = structlog.get_logger("koordfw")

MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5

#: the per-node rejections of the cycle's filter search (what post_filter plugins are given)
FILTERED_STATUSES: StateKey[NodeStatuses] = StateKey("koordfw/filtered_statuses")



def num_feasible_nodes_to_find(num_all: int, percentage: int = 0) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind`` (adaptive when ``percentage`` is 0)."""
    if num_all < MIN_FEASIBLE_NODES:
        return num_all
    pct = percentage
    if pct == 0:
        pct = 50 - num_all // 125
        if pct < MIN_FEASIBLE_PERCENTAGE:
            pct = MIN_FEASIBLE_PERCENTAGE
    n = num_all * pct // 100
    return MIN_FEASIBLE_NODES if n < MIN_FEASIBLE_NODES else n


class Scheduler:
    """Queue + cycles over a ClusterState. Engines feed it cluster events and hear back through
    ``engine`` (a :class:`SchedulerEvents`), which also binds and evicts."""

    def __init__(self, registry: Registry, cluster: ClusterState, clock: Clock, *,
                 engine: SchedulerEvents | None = None, seed: int = 0, inline_binding: bool = False,
                 events_complete: bool = False) -> None:
        self.registry, self.cluster, self.clock = registry, cluster, clock
        self.engine: SchedulerEvents = engine if engine is not None else SchedulerEvents()
        #: run binding cycles of pods not waiting at permit inline (the embedded cluster binds in
        #: memory, so a task per pod would only add overhead); live engines bind concurrently
        self.inline_binding = inline_binding
        #: every cluster change reaches the scheduler as an event (the embedded cluster): the 5-minute
        #: flush of the unschedulable pool, the live queue's safety net for missed events, then skips
        #: pods whose rejecting plugins all declare queueing hints (only an event can help them)
        self.events_complete = events_complete
        self.profile = registry.profile
        self.rng = np.random.default_rng(seed)
        self.recorder = EventLog()
        self.nominator = Nominator(cluster)
        self._handles: dict[str, SchedulerHandle] = {}
        registry.bind(self.handle_for)
        self.framework = Framework(registry, cluster, self.nominator, self.handle_for)
        self.caller = self.framework.caller
        #: the points outside the scheduling cycle (startup/shutdown, deschedule, report, node_resources)
        self.node_runtime = NodeRuntime(self.caller)
        self.waiting_pods: dict[str, WaitingPod] = {}
        self.next_start_node_index = 0
        #: share of filtered nodes that passed, over recent cycles (sizes the filter search's chunks)
        self._pass_rate = 1.0
        self._all_idx = np.zeros(0, dtype=np.int64)
        self._all_key: tuple[int, int] = (-1, 0)
        #: bumped on every assume; uid → the value when that pod was assumed (until bound or forgotten)
        self.assume_seq = 0
        self._assumed_at: dict[str, int] = {}
        self.in_flight_binds = 0
        #: placeholder pods (they exist only in this scheduler, e.g. reservations' reserve pods): uid → the
        #: plugin that added them (its bind hook alone binds them)
        self.placeholders: dict[str, str] = {}
        #: the cluster's other objects as plugins watch and write them (``handle.watch_objects``,
        #: ``update_object_status``, ``patch_object``)
        self.objects = ObjectHub(cluster, lambda: self.engine)
        #: the schedulerName this scheduler is responsible for (None: every pod it is given)
        self.responsible_for: str | None = None
        #: placeholder uid → its plugin's ``on_unschedulable`` callback
        self._placeholder_failed: dict[str, Callable[[Pod, Status], None]] = {}
        #: placeholder changes made by sync calls, delivered to the queue at the next scheduling step
        self._deferred: list[tuple[ClusterEvent | None, Pod | None, Pod | None]] = []
        self.queue = SchedulingQueue(self._sort_key, initial_backoff=self.profile.pod_initial_backoff_seconds,
                                     max_backoff=self.profile.pod_max_backoff_seconds,
                                     max_unschedulable=self.profile.pod_max_in_unschedulable_seconds)
        from .. import metrics as _metrics

        self.metrics = _metrics.scheduler_metrics()
        _metrics.track_caller(self.caller)
        self._attempts = {r: self.metrics.attempts.labels(result=r) for r in ("scheduled", "unschedulable", "error")}

    @property
    def hints(self) -> dict[str, list[ClusterEventWithHint]]:
        """Each plugin's registered events (the queue's: it makes the requeue decisions)."""
        return self.queue.hints

    @hints.setter
    def hints(self, value: dict[str, list[ClusterEventWithHint]]) -> None:
        self.queue.hints = value

    @property
    def hint_counts(self) -> dict[str, list[int]]:
        """Hint calls and the moves they allowed or saved, by event (the queue's)."""
        return self.queue.hint_counts

    def hinted(self, info: QueuedPodInfo) -> bool:
        return self.queue.hinted(info)

    def handle_for(self, plugin: str) -> SchedulerHandle:
        """The handle of ``plugin`` (one per plugin and scheduler)."""
        h = self._handles.get(plugin)
        if h is None:
            h = self._handles[plugin] = SchedulerHandle(self, plugin)
        return h

    # -- queue ----------------------------------------------------------------------------------
    def _sort_key(self, pod: Pod, info: QueuedPodInfo) -> Any:
        key = self.framework.queue_sort_key(pod)
        if key is not None:
            return (key, info.arrival, info.seq)
        return ((-pod.priority,), info.arrival, info.seq)

    async def enqueue(self, pod: Pod) -> None:
        """Add a pending pod: pre_enqueue gates it or it joins the active queue."""
        placeholder = pod.uid in self.placeholders
        new = None if placeholder else self.engine.pod_enqueued(pod)
        if new is not None and new is not pod:
            pod = new
            if self.cluster.pod(pod.uid) is not None:
                self.cluster.update_pod_object(pod)
        if pod.nominated_node_name:
            # as kube's queue.Add: a pod that arrives nominated (status.nominatedNodeName, e.g. after a
            # scheduler restart, or a migration's replacement) is counted on that node meanwhile
            self.nominator.nominate(pod, pod.nominated_node_name)
        st = await self.framework.run_pre_enqueue(pod)
        now = self.clock.now()
        if st.ok:
            self.queue.add(pod, now)
        else:
            self.queue.add_gated(pod, now, st.message, plugins=rejectors(st))
            if not placeholder:
                self.engine.pod_gated(pod, st)

    async def _pre_enqueue_again(self, pod: Pod) -> Status:
        """pre_enqueue again for a gated pod; the engine hears the newest reason of one still held."""
        st = await self.framework.run_pre_enqueue(pod)
        if not st.ok and pod.uid not in self.placeholders:
            self.engine.pod_gated(pod, st)
        return st

    async def recheck_pre_enqueue(self) -> None:
        """pre_enqueue again for every queued, untried pod once the live caches synced (a gate may have read a
        partial cache: a pod listed before its PodGroup)."""
        now = self.clock.now()
        for uid in sorted(self.queue.active | self.queue.backoff):
            info = self.queue.info(uid)
            if info is None or uid in self.placeholders:
                continue
            st = await self.framework.run_pre_enqueue(info.pod)
            if not st.ok:
                self.queue.add_gated(info.pod, now, st.message, plugins=rejectors(st))
                self.engine.pod_gated(info.pod, st)

    async def add_pod(self, pod: Pod) -> None:
        """A pod appeared (or was re-listed). Pending pods are queued; bound ones accounted."""
        self.cluster.add_pod(pod)
        if pod.node_name or pod.is_terminal or pod.deletion_timestamp is not None:
            if not pod.node_name:
                self.engine.pod_removed(pod.uid)
            await self.cluster_event(ASSIGNED_POD_ADD if pod.node_name else POD_ADD, None, pod)
            return
        await self.enqueue(pod)
        await self.cluster_event(POD_ADD, None, pod)

    async def remove_pod(self, uid: str) -> None:
        wp = self.waiting_pods.get(uid)
        if wp is not None:
            wp.reject("", "pod was deleted")
        info = self.queue.info(uid)
        if info is not None and uid not in self.queue.in_flight:
            self.queue.done(uid)
        old = self.cluster.remove_pod(uid)
        self.engine.pod_removed(uid)
        if self.nominator:
            self.nominator.forget(uid)
        await self.cluster_event(ASSIGNED_POD_DELETE if old is not None and old.node_name else POD_DELETE, old, None)

    # -- other objects ------------------------------------------------------------------------------
    # -- placeholder pods ---------------------------------------------------------------------------
    def add_placeholder(self, pod: Pod, plugin: str, *,
                        on_unschedulable: Callable[[Pod, Status], None] | None = None) -> None:
        """Add, or replace, a placeholder pod of ``plugin`` (:meth:`koordfw.Handle.add_placeholder`): with
        ``node_name`` accounted at once, else queued; the queue hears of it at the next step or :meth:`flush`."""
        uid = pod.uid
        if uid in self.queue.in_flight:
            raise ValueError(f"placeholder {pod.key} is in its scheduling or binding cycle")
        self.placeholders[uid] = plugin
        if on_unschedulable is not None:
            self._placeholder_failed[uid] = on_unschedulable
        else:
            self._placeholder_failed.pop(uid, None)
        old = self.cluster.pod(uid)
        if old is not None:
            self.queue.done(uid)
            self.cluster.remove_pod(uid)
            if self.nominator:
                self.nominator.forget(uid)
        self.cluster.add_pod(pod)
        if not pod.node_name:
            self._deferred.append((None, None, pod))
            return
        if old is not None and old.node_name:
            self._deferred.append((ASSIGNED_POD_DELETE, old, None))
        self._deferred.append((ASSIGNED_POD_ADD, None, pod))

    def remove_placeholder(self, uid: str) -> Pod | None:
        """Take a placeholder pod out of the queue and the cluster, releasing what it holds (the queue
        hears ``ASSIGNED_POD_DELETE`` at the next scheduling step); returns it, or None if unknown."""
        if uid not in self.placeholders:
            return None
        wp = self.waiting_pods.get(uid)
        if wp is not None:
            wp.reject("", "placeholder removed")
        elif uid in self.queue.in_flight:
            # its cycle is running (awaiting a plugin; a timer fired meanwhile): removed once it is over
            cur = self.cluster.pod(uid)
            if cur is not None:
                self._deferred.append((None, cur, None))
            return cur
        self.queue.done(uid)
        self._placeholder_failed.pop(uid, None)
        old = self.cluster.remove_pod(uid)
        if self.nominator:
            self.nominator.forget(uid)
        if old is not None and old.node_name:
            self._deferred.append((ASSIGNED_POD_DELETE, old, None))
        return old

    async def _run_deferred(self) -> None:
        """Deliver what sync placeholder changes left for the queue: enqueues and cluster events."""
        while self._deferred:
            batch, self._deferred = self._deferred, []
            for event, old, new in batch:
                if event is None and new is None and old is not None:  # a removal put off by its cycle
                    self.remove_placeholder(old.uid)
                elif event is None:
                    if new is not None and self.cluster.pod(new.uid) is new:  # not replaced or removed since
                        await self.enqueue(new)
                else:
                    await self.cluster_event(event, old, new)

    async def cluster_event(self, event: ClusterEvent, old: Any = None, new: Any = None, *,
                            assumed_seq: int = -1) -> None:
        """A cluster change: the queue moves the pods it may help (:meth:`SchedulingQueue.on_cluster_event`)."""
        await self.queue.on_cluster_event(event, old, new, self.clock.now(), self._pre_enqueue_again,
                                          assumed_seq=assumed_seq)

    def activate(self, uids: Iterable[str]) -> None:
        """kube's ``PriorityQueue.Activate``: straight to the active queue, skipping any backoff."""
        self.queue.activate(uids)

    def nominate_pending(self, pod: Pod, node_name: str | None) -> Pod:
        """Nominate a pending pod to ``node_name`` (preemption's PostFilterResult, a migration's target),
        or clear its nomination (``None``: kube's ClearNominatedNodeName): the nomination goes on its
        object in the cluster and in the queue, and into the nominator."""
        cur = self.cluster.pod(pod.uid)
        had = (cur or pod).nominated_node_name
        nominated = attrs.evolve(cur or pod, nominated_node_name=node_name)
        if cur is not None and not cur.node_name:
            self.cluster.update_pod_object(nominated)
        info = self.queue.info(pod.uid)
        if info is not None:
            info.pod = nominated
        self.nominator.nominate(nominated, node_name)
        if node_name is None and had and pod.uid not in self.placeholders:
            self.engine.nomination_cleared(cur or pod)
        return nominated

    async def flush(self) -> None:
        """Periodic queue maintenance: finished backoffs to active, old unschedulable pods retried."""
        if self._deferred:
            await self._run_deferred()
        await self.queue.flush(self.clock.now(), self._pre_enqueue_again, events_complete=self.events_complete)

    # -- lifecycle ------------------------------------------------------------------------------
    async def startup(self) -> None:
        """Every plugin's ``startup`` (all of them run); the first that failed then fails the start: its
        bad-input error as the user's error, naming the input file, or a :class:`PluginLoadError`."""
        failures = await self.node_runtime.run_startup_raising()
        if failures:  # the caller logged each cause (with a traceback when it is a plugin bug)
            plugin, f = failures[0]
            raise (self._in_its_file(f.__cause__) if isinstance(f.__cause__, ManifestError)
                   else PluginLoadError(f"plugin {plugin} failed at startup: {f.status.message}"))
        self.hints = await self.framework.events_to_register()

    def _in_its_file(self, e: ManifestError) -> ManifestError:
        """``e`` naming the input file of the object it is about (its ``obj``, "Kind key" as plugins name
        objects), when it does not say and the cluster knows (the embedded cluster's input)."""
        if e.file or not e.obj or " " not in e.obj:
            return e
        kind, key = e.obj.split(" ", 1)
        src = self.cluster.sources.get((kind, key))
        return ManifestError(e.detail, file=src, obj=e.obj, field=e.field) if src else e

    async def shutdown(self) -> None:
        await self.node_runtime.run_lifecycle("shutdown")

    # -- one scheduling cycle -------------------------------------------------------------------
    async def schedule_next(self, tg: anyio.abc.TaskGroup) -> Pod | None:
        """Pop one pod and run its scheduling cycle (the binding cycle is started in ``tg``, or run
        inline); returns the pod tried, or None when the active queue is empty."""
        if self._deferred:
            await self._run_deferred()
        info = self.queue.pop()
        if info is None:
            return None
        pod = self.cluster.pod(info.pod.uid) or info.pod
        self.engine.cycle_started(pod)
        t0 = time.perf_counter()
        try:
            await self.schedule_one(pod, tg)
        finally:
            dt = time.perf_counter() - t0
            self.metrics.cycle_latency.observe(dt)
            self.engine.cycle_finished(pod, dt)
        return pod

    async def schedule_one(self, pod: Pod, tg: anyio.abc.TaskGroup) -> None:
        fw = self.framework
        state = CycleState()
        status, node = await self._find_node(pod, state)
        if node is None:
            await self._cycle_failed(pod, status, state, run_post_filter=status.is_rejection)
            return
        # assume + reserve; like kube's assume, an assumed pod is no longer counted as nominated
        self.assume(pod, node.name)
        if self.nominator:
            self.nominator.nominate(pod, None)
        st = await fw.run_reserve(pod, node, state)
        waits: dict[str, float] = {}
        if st.ok:
            st, waits = await fw.run_permit(pod, node, state)
        if not st.ok:
            await self.unreserve_and_forget(pod, node, state)
            await self._cycle_failed(pod, st, state, run_post_filter=False)
            return
        wp = None
        if waits:
            wp = WaitingPod(pod, node.name, waits, self.clock)
            self.waiting_pods[pod.uid] = wp
        self.in_flight_binds += 1
        if wp is None and self.inline_binding:
            await self._binding_cycle(pod, node, state, None)
        else:
            tg.start_soon(self._binding_cycle, pod, node, state, wp)

    async def _find_node(self, pod: Pod, state: CycleState) -> tuple[Status, NodeView | None]:
        cluster = self.cluster
        fw = self.framework
        if cluster.num_nodes == 0:
            return Status.unschedulable("no nodes available to schedule pods"), None
        st, candidates = await fw.run_pre_filter(pod, state)
        if not st.ok:
            return st, None
        # candidate order: the nominated node first, then round-robin over all (or the restricted set)
        if pod.nominated_node_name:
            i = cluster.node_index(pod.nominated_node_name)
            if i is not None and (candidates is None or pod.nominated_node_name in candidates):
                st, feasible, _ = await fw.run_filters(pod, state, np.array([i], dtype=np.int64))
                if not st.ok:
                    return st, None
                if len(feasible):
                    return Status.success(), cluster.views[int(feasible[0])]
        if candidates is not None:
            idx = np.array(sorted(i for n in candidates if (i := cluster.node_index(n)) is not None), dtype=np.int64)
            if len(idx) == 0:
                return Status.unresolvable("node(s) didn't satisfy plugin(s) pre_filter node set"), None
        else:
            idx = self._all_nodes()
            if len(idx) == 0:  # every node was removed: kube's "0/0 nodes are available"
                return Status.unschedulable("no nodes available to schedule pods"), None
        n_all = len(idx)
        start = self.next_start_node_index % n_all
        to_find = num_feasible_nodes_to_find(n_all, self.profile.percentage_of_nodes_to_score)
        if not fw.has_scoring:
            to_find = 1
        try:
            feasible, statuses, processed = await self._filter_search(pod, state, idx, start, to_find)
        except _Failed as f:
            return f.status, None
        self.next_start_node_index = (start + processed) % max(n_all, 1)
        state[FILTERED_STATUSES] = statuses
        if len(feasible) == 0:
            return fit_error(n_all, statuses), None
        if len(feasible) == 1:
            return Status.success(), cluster.views[int(feasible[0])]
        st, total, _ = await fw.run_score(pod, state, feasible)
        if not st.ok:
            return st, None
        best = (total == total.max()).nonzero()[0]
        pick = int(best[0])
        if len(best) > 1:  # kube's selectHost: a seeded random pick among the best
            pick = int(best[self.rng.integers(len(best))])
        return Status.success(), cluster.views[int(feasible[pick])]

    def _all_nodes(self) -> np.ndarray:
        """The indices of the cluster's live nodes (cached until a node is added, removed or changed)."""
        cluster = self.cluster
        key = (cluster.num_nodes, cluster.labels_generation)
        if self._all_key != key:
            idx = np.arange(cluster.num_nodes, dtype=np.int64)
            if cluster.has_removed_nodes:
                idx = idx[cluster.live_mask]
            self._all_idx, self._all_key = idx, key
        return self._all_idx

    async def _filter_search(self, pod: Pod, state: CycleState, idx: np.ndarray, start: int,
                             to_find: int) -> tuple[np.ndarray, NodeStatuses, int]:
        """Filter ``idx`` (node indices, ascending) from position ``start`` round-robin, in chunks, until ``to_find`` nodes fit;
        returns (feasible, statuses, processed).

        The feasible nodes are the first ``to_find`` in that order whatever the chunking; chunks are
        sized from the share of nodes that passed (recent cycles, then this one) so that one chunk
        usually suffices. While every node passes, a chunk is exactly the nodes still needed."""
        feasible_parts: list[np.ndarray] = []
        statuses = NodeStatuses(self.cluster)
        found = 0
        pos = 0
        n = len(idx)
        fw = self.framework
        rate = self._pass_rate
        while pos < n and found < to_find:
            need = to_find - found
            if pos:  # this cycle's own pass rate, once it has one
                rate = found / pos
            chunk = need if rate >= 0.999 else int(need / max(rate, 0.02) * 1.1) + 8
            end = min(pos + max(chunk, 64), n)
            a, b = start + pos, start + end
            ascending = True  # idx is (the live node indices, or the candidates) in ascending order
            if b <= n:
                sub = idx[a:b]
            elif a >= n:
                sub = idx[a - n:b - n]
            else:
                sub = np.concatenate((idx[a:], idx[:b - n]))
                ascending = False
            st, ok, sts = await fw.run_filters(pod, state, sub)
            if not st.ok:
                raise _Failed(st)
            statuses.update(sts)
            if len(ok) >= need:
                ok = ok[:need]
                # processed = nodes up to and including the last one taken
                if len(ok) == len(sub):
                    last = len(sub) - 1
                elif ascending:
                    last = int(sub.searchsorted(ok[-1]))
                else:
                    last = int((sub == ok[-1]).argmax())
                feasible_parts.append(ok)
                found += len(ok)
                self._pass_rate = 0.9 * self._pass_rate + 0.1 * (found / (pos + last + 1))
                # statuses of nodes after the last taken one were not "processed"
                feasible = feasible_parts[0] if len(feasible_parts) == 1 else np.concatenate(feasible_parts)
                return feasible, statuses, pos + last + 1
            feasible_parts.append(ok)
            found += len(ok)
            pos += len(sub)
        if n:
            self._pass_rate = 0.9 * self._pass_rate + 0.1 * (found / n)
        feasible = np.concatenate(feasible_parts) if feasible_parts else np.zeros(0, dtype=np.int64)
        return feasible, statuses, n

    def assume(self, pod: Pod, node_name: str) -> None:
        self.cluster.assume(pod, node_name)
        self.assume_seq += 1
        self._assumed_at[pod.uid] = self.assume_seq

    async def unreserve_and_forget(self, pod: Pod, node: NodeView, state: CycleState) -> int:
        """unreserve, then forget the assumed pod; returns the assume sequence it had (-1: unknown)."""
        await self.framework.run_unreserve(pod, node, state)
        self.cluster.forget(pod)
        return self._assumed_at.pop(pod.uid, -1)

    # -- binding cycle ----------------------------------------------------------------------------
    async def _binding_cycle(self, pod: Pod, node: NodeView, state: CycleState, wp: WaitingPod | None) -> None:
        fw = self.framework
        try:
            if wp is not None:
                st = await wp.wait()
                self.waiting_pods.pop(pod.uid, None)
                if not st.ok:
                    await self._binding_failed(pod, node, state, st)
                    return
            owner = self.placeholders.get(pod.uid)
            st = await fw.run_pre_bind(pod, node, state)
            if st.ok:
                # a placeholder exists only here: its own plugin's bind hook alone "binds" it (e.g. writes
                # its Reservation's status); nothing is bound through the engine
                st = await fw.run_bind(pod, node, state, only=owner)
            if st.ok and owner is not None and self.cluster.pod(pod.uid) is None:
                st = Status.unschedulable("placeholder removed", plugin=owner)
            if not st.ok:
                await self._binding_failed(pod, node, state, st)
                return
            self._record_bound(pod, node.name, state)
            await fw.run_post_bind(pod, node, state)
            if self.queue.gated or owner is not None:
                await self.cluster_event(ASSIGNED_POD_ADD, None, self.cluster.pod(pod.uid) or pod)
        finally:
            self.in_flight_binds -= 1

    def _record_bound(self, pod: Pod, node_name: str, state: CycleState) -> None:
        self._assumed_at.pop(pod.uid, None)
        if self.nominator:
            self.nominator.nominate(pod, None)
        self.queue.done(pod.uid)
        self._attempts["scheduled"].inc()
        if pod.uid in self.placeholders:
            self.cluster.confirm_bound(pod, node_name, state.annotations)
            return
        self.engine.pod_bound(pod, node_name, state)

    async def _binding_failed(self, pod: Pod, node: NodeView, state: CycleState, st: Status) -> None:
        seq = await self.unreserve_and_forget(pod, node, state)
        # the reservation it held is released: an assigned pod leaving, for the other pods' hints; pods
        # that failed before it was taken are skipped (their attempt saw the cluster without it)
        await self.cluster_event(ASSIGNED_POD_DELETE, attrs.evolve(pod, node_name=node.name), None, assumed_seq=seq)
        await self._cycle_failed(pod, st, state, run_post_filter=False)

    async def _cycle_failed(self, pod: Pod, st: Status, state: CycleState, *, run_post_filter: bool) -> None:
        self.engine.attempt_failed(pod)
        placeholder = pod.uid in self.placeholders
        if run_post_filter and not placeholder:  # a placeholder preempts nobody
            statuses = state.get(FILTERED_STATUSES)
            _, res = await self.framework.run_post_filter(pod, state, statuses if statuses is not None else {})
            if res is not None:
                self.nominate_pending(pod, res.nominated_node)
        if not placeholder:
            await self.framework.run_error_handler(pod, st)
        unsched = st.is_rejection
        self._attempts["unschedulable" if unsched else "error"].inc()
        self.queue.failed(pod.uid, self.clock.now(), unschedulable=unsched, seq=self.assume_seq,
                          plugins=rejectors(st))
        if not placeholder:
            await self.engine.pod_unschedulable(pod, st)
        elif (cb := self._placeholder_failed.get(pod.uid)) is not None:
            try:
                cb(pod, st)
            except Exception:
                log.exception("placeholder failure callback failed", pod=pod.key, plugin=self.placeholders.get(pod.uid))

    # -- the back half of a cycle, for a pod another scheduler placed ------------------------------
    # -- reporting ------------------------------------------------------------------------------
    def pending_uids(self) -> list[str]:
        return [uid for uid, e in self.cluster.pods.items()
                if e.node_index < 0 and not e.pod.is_terminal and uid not in self.placeholders]


class _Failed(Exception):
    def __init__(self, status: Status) -> None:
        self.status = status


