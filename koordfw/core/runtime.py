"""The scheduling framework: one scheduling cycle per pod, binding cycles running concurrently.

Follows kube-scheduler (``schedule_one.go``, ``framework/runtime/framework.go``): pre_filter (Skip
disables the matching filter), filter over an adaptive number of nodes from a round-robin start,
post_filter on failure, pre_score/score/normalize_score with [0,100] validation and profile weights,
seeded random tie-break, assume + reserve, permit (allow / reject / wait with per-plugin timers),
then a binding cycle (wait on permit → pre_bind → bind → post_bind). Any failure after reserve runs
``unreserve`` for every reserve plugin in reverse order and forgets the assumed pod.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio
import anyio.abc
import attrs
import numpy as np
import structlog

from .caller import HookCaller, PluginFailure
from .clock import Clock
from .cluster import ClusterState, NodeBatch, NodeView
from .errors import PluginLoadError
from .model import Pod
from .plugins import Impl, Registry
from .queue import QueuedPodInfo, SchedulingQueue
from .status import Code, Status, as_status

log = structlog.get_logger("koordfw")

MAX_NODE_SCORE = 100
MAX_PERMIT_TIMEOUT = 15 * 60.0
MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5


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


class CycleState(dict):
    """Per-cycle scratch space shared by the plugins of one pod's cycle (kube's CycleState).

    ``annotations`` collects what pre_bind plugins ask to be written on the pod.
    """

    def __init__(self) -> None:
        super().__init__()
        self.annotations: dict[str, str] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()


class NodeStatuses(Mapping[str, Status]):
    """Node name → rejecting Status, kept as (node indices, statuses) chunks and built on first use."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster
        self._chunks: list[tuple[np.ndarray, list[Status]]] = []
        self._dict: dict[str, Status] | None = None

    def add(self, idx: np.ndarray, statuses: list[Status]) -> None:
        self._chunks.append((idx, statuses))
        self._dict = None

    def update(self, other: NodeStatuses) -> None:
        self._chunks.extend(other._chunks)
        self._dict = None

    def _build(self) -> dict[str, Status]:
        if self._dict is None:
            views = self._cluster.views
            d: dict[str, Status] = {}
            for idx, sts in self._chunks:
                for i, st in zip(idx.tolist(), sts):
                    d[views[i].node.name] = st
            self._dict = d
        return self._dict

    def __getitem__(self, name: str) -> Status:
        return self._build()[name]

    def __iter__(self):
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())

    # the Mapping mixins would call __getitem__ per key; go to the built dict directly
    def values(self):  # type: ignore[override]
        return self._build().values()

    def items(self):  # type: ignore[override]
        return self._build().items()

    def get(self, name: str, default: Any = None) -> Any:
        return self._build().get(name, default)


@attrs.frozen
class PreFilterResult:
    """Returned by ``pre_filter`` to restrict the candidate nodes (``None`` = all)."""

    node_names: frozenset[str] | None = None


@attrs.frozen
class PostFilterResult:
    """Returned by ``post_filter`` after making room: the node the pod should try next."""

    nominated_node: str


class WaitingPod:
    """A pod held at Permit: keeps its reservation until every waiting plugin allows it, one rejects
    it, or a plugin's timer fires."""

    def __init__(self, pod: Pod, node_name: str, timeouts: dict[str, float], clock: Clock) -> None:
        self.pod, self.node_name = pod, node_name
        self.status: Status | None = None
        self._event = anyio.Event()
        now = clock.now()
        self._pending = {p: clock.call_at(now + t, functools.partial(self._timeout, p, t))
                         for p, t in timeouts.items()}

    @property
    def pending_plugins(self) -> list[str]:
        return sorted(self._pending)

    def allow(self, plugin: str) -> None:
        h = self._pending.pop(plugin, None)
        if h is not None:
            h.cancel()
        if not self._pending and self.status is None:
            self.status = Status.success()
            self._event.set()

    def reject(self, plugin: str, message: str) -> None:
        if self.status is not None:
            return
        for h in self._pending.values():
            h.cancel()
        self._pending.clear()
        self.status = Status.unschedulable(message, plugin=plugin)
        self._event.set()

    def _timeout(self, plugin: str, seconds: float) -> None:
        self.reject(plugin, f"rejected due to timeout after waiting {seconds:g}s at plugin {plugin}")

    async def wait(self) -> Status:
        await self._event.wait()
        assert self.status is not None
        return self.status


@attrs.define
class PodResult:
    node: str | None = None
    reason: str = ""
    annotations: dict[str, str] = attrs.field(factory=dict)
    attempts: int = 0
    #: why the pod was last evicted (preemption, descheduling), kept in front of later reasons
    evicted: str = ""


Binder = Callable[[Pod, str, dict], Awaitable[Any]]
Evictor = Callable[[Pod, str], Awaitable[Any]]


class Handle:
    """What plugins get as ``handle``: the engine's clock, cluster, waiting pods and actions."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._s = scheduler

    @property
    def clock(self) -> Clock:
        return self._s.clock

    @property
    def cluster(self) -> ClusterState:
        return self._s.cluster

    @property
    def registry(self) -> Registry:
        return self._s.registry

    @property
    def scheduler(self) -> Scheduler:
        return self._s

    def plugin_args(self, name: str) -> Any:
        return self._s.registry.args.get(name)

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        return self._s.waiting_pods.get(uid)

    def iterate_waiting_pods(self) -> list[WaitingPod]:
        return list(self._s.waiting_pods.values())

    def reject_waiting_pod(self, uid: str, plugin: str, message: str) -> bool:
        wp = self._s.waiting_pods.get(uid)
        if wp is None:
            return False
        wp.reject(plugin, message)
        return True

    async def bind_pod(self, pod: Pod, node_name: str, annotations: dict[str, str]) -> Any:
        return await self._s.binder(pod, node_name, annotations)

    async def evict(self, pod: Pod, reason: str) -> Any:
        return await self._s.evictor(pod, reason)

    async def run_pre_filters(self, pod: Pod, state: CycleState) -> tuple[Status, set[str] | None]:
        """Run the pre_filter plugins into ``state`` (needed before ``run_filters`` for plugins whose
        filter reads what their pre_filter computed): (status, candidate node names or None)."""
        try:
            return await self._s.run_pre_filter(pod, state)
        except PluginFailure as f:
            return f.status, None

    async def run_filters(self, pod: Pod, node_name: str, state: CycleState | None = None) -> Status:
        return await self._s.run_filters_on_node(pod, node_name, state or CycleState())

    def activate(self, uids: Iterable[str]) -> None:
        self._s.activate(uids)

    def pod_result(self, uid: str) -> PodResult | None:
        return self._s.results.get(uid)


class Scheduler:
    """Queue + framework over a ClusterState. Engines feed it events and give it a binder."""

    def __init__(self, registry: Registry, cluster: ClusterState, clock: Clock, *, binder: Binder | None = None,
                 evictor: Evictor | None = None, seed: int = 0, inline_binding: bool = False) -> None:
        self.registry, self.cluster, self.clock = registry, cluster, clock
        #: run binding cycles of pods not waiting at permit inline (the embedded cluster binds in
        #: memory, so a task per pod would only add overhead); live engines bind concurrently
        self.inline_binding = inline_binding
        self.profile = registry.profile
        self.binder: Binder = binder or self._memory_bind
        self.evictor: Evictor = evictor or self._memory_evict
        self.handle = Handle(self)
        self.caller = HookCaller(registry, lambda _name: self.handle)
        self.rng = np.random.default_rng(seed)
        self.waiting_pods: dict[str, WaitingPod] = {}
        #: node index → pods nominated there by preemption (kube's nominator)
        self.nominated: dict[int, dict[str, Pod]] = {}
        self.results: dict[str, PodResult] = {}
        self.next_start_node_index = 0
        self._pos = np.full(0, -1, dtype=np.int64)
        self.in_flight_binds = 0
        self.cycle_seconds: list[float] = []
        self.attempt_counts: Counter[str] = Counter()
        self.bind_events: list[tuple[str, str]] = []  # (uid, node) in bind order
        self.on_bound: list[Callable[[Pod, str], None]] = []
        self.on_unschedulable: list[Callable[[Pod, Status], Any]] = []
        #: called when an attempt fails, before post_filter runs (after a binding failure's release)
        self.on_attempt_failed: list[Callable[[Pod], None]] = []
        #: called for each pending pod before it is queued; may return a replacement (e.g. nominated to a
        #: node reserved for it by a descheduling migration)
        self.on_enqueue: list[Callable[[Pod], Pod | None]] = []
        #: uid of the pod whose cycle ran last (replays read it to attribute outcomes)
        self.last_uid = ""
        #: bumped on every bind and every change that frees capacity (the embedded engine's stop rule)
        self.progress = 0
        self.queue = SchedulingQueue(self._sort_key, initial_backoff=self.profile.pod_initial_backoff_seconds,
                                     max_backoff=self.profile.pod_max_backoff_seconds,
                                     max_unschedulable=self.profile.pod_max_in_unschedulable_seconds)
        qs = registry.impls("queue_sort")
        self._queue_sort_impl = qs[0] if qs else None
        self._has_scoring = bool(registry.impls("score"))
        self._filter_impls = registry.impls("filter")
        self._normalizers = {i.plugin: i for i in registry.impls("normalize_score")}
        from .. import metrics as _metrics

        self.metrics = _metrics.scheduler_metrics()
        _metrics.track_caller(self.caller)
        self._attempts = {r: self.metrics.attempts.labels(result=r) for r in ("scheduled", "unschedulable", "error")}

    # -- queue ----------------------------------------------------------------------------------
    def _sort_key(self, pod: Pod, info: QueuedPodInfo) -> Any:
        impl = self._queue_sort_impl
        if impl is not None:
            kwargs = {"pod": pod, "args": impl.args, "handle": self.handle}
            try:
                key = impl.fn(**{a: kwargs[a] for a in impl.argnames})
            except Exception as e:  # a broken sort key must not stop the queue
                log.error("queue_sort raised", plugin=impl.plugin, error=str(e))
                key = None
            if key is not None:
                return (key, info.arrival, info.seq)
        return ((-pod.priority,), info.arrival, info.seq)

    async def run_pre_enqueue(self, pod: Pod) -> Status:
        for impl in self.caller.impls("pre_enqueue"):
            try:
                st = as_status(await self.caller.call(impl, pod=pod), impl.plugin)
            except PluginFailure as f:
                return f.status
            if not st.ok:
                return st
        return Status.success()

    async def enqueue(self, pod: Pod) -> None:
        """Add a pending pod: pre_enqueue gates it or it joins the active queue."""
        for cb in self.on_enqueue:
            new = cb(pod)
            if new is not None and new is not pod:
                pod = new
                if self.cluster.pod(pod.uid) is not None:
                    self.cluster.update_pod_object(pod)
                if pod.nominated_node_name:
                    self.nominate(pod, pod.nominated_node_name)
        st = await self.run_pre_enqueue(pod)
        now = self.clock.now()
        if st.ok:
            self.queue.add(pod, now)
        else:
            self.queue.add_gated(pod, now, st.message)
            self.results[pod.uid] = PodResult(reason=st.message or f"held by {st.plugin}")

    async def add_pod(self, pod: Pod) -> None:
        """A pod appeared (or was re-listed). Pending pods are queued; bound ones accounted."""
        self.cluster.add_pod(pod)
        if pod.node_name or pod.is_terminal or pod.deletion_timestamp is not None:
            self.results.pop(pod.uid, None) if not pod.node_name else None
            await self.cluster_event("PodAdd")
            return
        await self.enqueue(pod)
        await self.cluster_event("PodAdd")

    async def remove_pod(self, uid: str) -> None:
        wp = self.waiting_pods.get(uid)
        if wp is not None:
            wp.reject("", "pod was deleted")
        info = self.queue.info(uid)
        if info is not None and uid not in self.queue.in_flight:
            self.queue.done(uid)
        self.cluster.remove_pod(uid)
        self.results.pop(uid, None)
        if self.nominated:
            for pods in self.nominated.values():
                pods.pop(uid, None)
        await self.cluster_event("PodDelete")

    async def cluster_event(self, kind: str) -> None:
        """Move pods that a cluster change may help: gated pods re-run pre_enqueue on any event;
        unschedulable pods move on events that free or add capacity."""
        now = self.clock.now()
        frees = kind in ("PodDelete", "NodeAdd", "NodeUpdate", "AssignedPodDelete", "ObjectChange")
        if frees:
            self.queue.move_requests += 1
            self.progress += 1
        for uid in list(self.queue.unschedulable if frees else self.queue.gated):
            info = self.queue.infos[uid]
            if info.gated:
                st = await self.run_pre_enqueue(info.pod)
                if st.ok:
                    self.queue.move_to_active_or_backoff(info, now)
                else:
                    info.gate_reason = st.message
            elif frees:
                self.queue.move_to_active_or_backoff(info, now)

    def activate(self, uids: Iterable[str]) -> None:
        """kube's ``PriorityQueue.Activate``: straight to the active queue, skipping any backoff."""
        for uid in uids:
            info = self.queue.infos.get(uid)
            if info is not None and uid not in self.queue.in_flight and uid not in self.queue.active:
                self.queue.requeue_now(uid)

    async def flush(self) -> None:
        """Periodic queue maintenance: finished backoffs to active, old unschedulable pods retried."""
        now = self.clock.now()
        self.queue.flush_backoff(now)
        for info in self.queue.flush_unschedulable_leftover(now):
            if info.gated:
                st = await self.run_pre_enqueue(info.pod)
                if not st.ok:
                    info.unschedulable_since = now
                    continue
            self.queue.move_to_active_or_backoff(info, now)

    # -- lifecycle ------------------------------------------------------------------------------
    async def startup(self) -> None:
        for impl, _, st in await self.caller.call_safe("startup"):
            if st is not None:  # the caller logged the cause (with a traceback when it is a plugin bug)
                raise PluginLoadError(f"plugin {impl.plugin} failed at startup: {st.message}")

    async def shutdown(self) -> None:
        await self.caller.call_safe("shutdown")

    # -- one scheduling cycle -------------------------------------------------------------------
    async def schedule_next(self, tg: anyio.abc.TaskGroup) -> bool:
        """Pop one pod and run its scheduling cycle; the binding cycle is started in ``tg``."""
        info = self.queue.pop()
        if info is None:
            return False
        self.last_uid = info.pod.uid
        pod = self.cluster.pod(info.pod.uid) or info.pod
        t0 = time.perf_counter()
        try:
            await self._schedule_one(pod, info, tg)
        finally:
            dt = time.perf_counter() - t0
            self.cycle_seconds.append(dt)
            self.metrics.cycle_latency.observe(dt)
        return True

    async def _schedule_one(self, pod: Pod, info: QueuedPodInfo, tg: anyio.abc.TaskGroup) -> None:
        state = CycleState()
        self.attempt_counts[pod.uid] += 1
        try:
            status, node = await self._find_node(pod, state)
        except PluginFailure as f:
            status, node = f.status, None
        if node is None:
            await self._cycle_failed(pod, status, state, run_post_filter=status.is_rejection)
            return
        # assume + reserve; like kube's assume, an assumed pod is no longer counted as nominated
        self.cluster.assume(pod, node.name)
        if self.nominated:
            self.nominate(pod, None)
        st = await self._run_reserve(pod, node, state)
        if st.ok:
            st, waits = await self._run_permit(pod, node, state)
        if not st.ok:
            await self._unreserve_and_forget(pod, node, state)
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

    async def run_pre_filter(self, pod: Pod, state: CycleState) -> tuple[Status, set[str] | None]:
        """Run pre_filter: (status, candidate node names or None for all). Skip results are recorded in
        ``state``; an Unresolvable or Error status stops at once, Unschedulable lets the rest run."""
        candidates: set[str] | None = None
        unsched: Status | None = None
        for impl in self.caller.impls("pre_filter"):
            res = await self.caller.call(impl, pod=pod, state=state)
            if res is None:
                continue
            if isinstance(res, PreFilterResult):
                if res.node_names is not None:
                    candidates = set(res.node_names) if candidates is None else candidates & set(res.node_names)
                continue
            st = as_status(res, impl.plugin)
            if st.code == Code.SKIP:
                state.skip_filter.add(impl.plugin)
            elif st.code in (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR):
                return st, None
            elif st.code == Code.UNSCHEDULABLE:
                unsched = unsched or st
        return (unsched or Status.success()), candidates

    async def _find_node(self, pod: Pod, state: CycleState) -> tuple[Status, NodeView | None]:
        cluster = self.cluster
        if cluster.num_nodes == 0:
            return Status.unschedulable("no nodes available to schedule pods"), None
        st, candidates = await self.run_pre_filter(pod, state)
        if not st.ok:
            return st, None
        # candidate order: the nominated node first, then round-robin over all (or the restricted set)
        if pod.nominated_node_name:
            i = cluster.node_index(pod.nominated_node_name)
            if i is not None and (candidates is None or pod.nominated_node_name in candidates):
                feasible, statuses = await self._filter_nodes(pod, state, np.array([i]), 1)
                if len(feasible):
                    return Status.success(), cluster.views[int(feasible[0])]
        if candidates is not None:
            idx = np.array(sorted(i for n in candidates if (i := cluster.node_index(n)) is not None), dtype=np.int64)
            if len(idx) == 0:
                return Status.unresolvable("node(s) didn't satisfy plugin(s) pre_filter node set"), None
        else:
            idx = np.arange(cluster.num_nodes, dtype=np.int64)
            if cluster._removed_nodes:
                idx = idx[cluster.live_mask]
            if len(idx) == 0:  # every node was removed: kube's "0/0 nodes are available"
                return Status.unschedulable("no nodes available to schedule pods"), None
        n_all = len(idx)
        start = self.next_start_node_index % n_all
        order = np.concatenate((idx[start:], idx[:start])) if start else idx
        to_find = num_feasible_nodes_to_find(n_all, self.profile.percentage_of_nodes_to_score)
        if not self._has_scoring:
            to_find = 1
        feasible, statuses, processed = await self._filter_search(pod, state, order, to_find)
        self.next_start_node_index = (start + processed) % max(n_all, 1)
        state["koordfw/filtered_statuses"] = statuses
        if len(feasible) == 0:
            return self._fit_error(pod, n_all, statuses), None
        if len(feasible) == 1:
            return Status.success(), cluster.views[int(feasible[0])]
        return Status.success(), await self._score_and_select(pod, state, feasible)

    async def _filter_search(self, pod: Pod, state: CycleState, order: np.ndarray,
                             to_find: int) -> tuple[np.ndarray, NodeStatuses, int]:
        """Filter ``order`` in chunks until ``to_find`` nodes fit; returns (feasible, statuses, processed)."""
        feasible_parts: list[np.ndarray] = []
        statuses = NodeStatuses(self.cluster)
        found = 0
        pos = 0
        n = len(order)
        chunk = max(to_find, 64)
        while pos < n and found < to_find:
            sub = order[pos: pos + chunk]
            ok, st = await self._filter_nodes(pod, state, sub, to_find - found)
            statuses.update(st)
            need = to_find - found
            if len(ok) >= need:
                ok = ok[:need]
                # processed = nodes up to and including the last one taken
                last = int(np.flatnonzero(sub == ok[-1])[0])
                feasible_parts.append(ok)
                found += len(ok)
                # statuses of nodes after the last taken one were not "processed"
                return np.concatenate(feasible_parts), statuses, pos + last + 1
            feasible_parts.append(ok)
            found += len(ok)
            pos += len(sub)
        feasible = np.concatenate(feasible_parts) if feasible_parts else np.zeros(0, dtype=np.int64)
        return feasible, statuses, n

    async def filter_nodes(self, pod: Pod, state: CycleState, idx: np.ndarray) -> tuple[np.ndarray, NodeStatuses]:
        """Run the filter plugins over the node indices ``idx`` (all of them, no early stop):
        (feasible indices, node name → rejecting Status). Nominated pods are counted."""
        return await self._filter_nodes(pod, state, idx, len(idx))

    async def _filter_nodes(self, pod: Pod, state: CycleState, sub: np.ndarray,
                            need: int) -> tuple[np.ndarray, NodeStatuses]:
        if self.nominated:
            added = self._add_nominated(pod, sub)
            if added:
                try:
                    return await self._run_filters(pod, state, sub)
                finally:
                    for gi, vec in added:
                        self.cluster._req[gi] -= vec
        return await self._run_filters(pod, state, sub)

    def _add_nominated(self, pod: Pod, sub: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """kube's RunFilterPluginsWithNominatedPods: count pods nominated on a node with a priority
        ≥ this pod's as if they were there, so a preemptor's room is not taken by lower pods."""
        members = set(sub.tolist())
        added = []
        for gi, pods in self.nominated.items():
            if gi not in members:
                continue
            vec = None
            for uid, p in pods.items():
                if uid != pod.uid and p.priority >= pod.priority:
                    v = self.cluster.request_vector(p)
                    vec = v.copy() if vec is None else vec + v
            if vec is not None:
                self.cluster._req[gi] += vec
                added.append((gi, vec))
        return added

    def nominate(self, pod: Pod, node_name: str | None) -> None:
        for pods in self.nominated.values():
            pods.pop(pod.uid, None)
        self.nominated = {k: v for k, v in self.nominated.items() if v}
        if node_name is not None:
            gi = self.cluster.node_index(node_name)
            if gi is not None:
                self.nominated.setdefault(gi, {})[pod.uid] = pod

    async def _run_filters(self, pod: Pod, state: CycleState, sub: np.ndarray) -> tuple[np.ndarray, NodeStatuses]:
        cluster = self.cluster
        statuses = NodeStatuses(cluster)
        cur = sub
        skip = state.skip_filter
        for impl in self._filter_impls:
            if skip and impl.plugin in skip:
                continue
            if len(cur) == 0:
                break
            if impl.per_node:
                views = cluster.views
                keep = np.ones(len(cur), dtype=bool)
                for j, gi in enumerate(cur.tolist()):
                    res = await self.caller.call(impl, pod=pod, node=views[gi], state=state)
                    if res is None or res is True:
                        continue
                    st = as_status(res, impl.plugin)
                    if st.ok:
                        continue
                    if st.code == Code.ERROR:
                        raise PluginFailure(st)
                    keep[j] = False
                    statuses.add(np.array([gi]), [st])
                cur = cur[keep]
                continue
            res = await self.caller.call(impl, pod=pod, nodes=NodeBatch(cluster, cur), state=state)
            if res is None:
                continue
            rejected, reasons = self._filter_rejections(impl, res, cur)
            if len(rejected) == 0:
                continue
            if not isinstance(reasons, list):
                st = as_status(reasons, impl.plugin)
                if st.code == Code.ERROR:
                    raise PluginFailure(st)
                sts = [st] * len(rejected)
            else:
                memo: dict[int, Status] = {}
                sts = []
                for r in reasons:
                    st = memo.get(id(r))
                    if st is None:
                        st = as_status(r, impl.plugin)
                        if st.code == Code.ERROR:
                            raise PluginFailure(st)
                        memo[id(r)] = st
                    sts.append(st)
            statuses.add(cur[rejected], sts)
            keep = np.ones(len(cur), dtype=bool)
            keep[rejected] = False
            cur = cur[keep]
        return cur, statuses

    def _filter_rejections(self, impl: Impl, res: Any, cur: np.ndarray) -> tuple[np.ndarray, Any]:
        """Normalise a batch filter result to (positions rejected in ``cur``, their reasons): a list
        aligned with the positions, or one reason shared by all of them."""
        n = len(cur)
        if type(res) is tuple and len(res) == 2 and isinstance(res[0], np.ndarray):
            ok, reason = res
            if ok.shape != (n,):
                raise PluginFailure(Status.error(
                    f"plugin {impl.plugin} returned a mask of {ok.size} for {n} nodes", impl.plugin))
            bad = np.flatnonzero(ok == 0)
            if isinstance(reason, (str, Status)) or reason is None:
                return bad, reason or f"node(s) rejected by {impl.plugin}"
            reasons = list(reason)
            return bad, [reasons[j] for j in bad.tolist()]
        if isinstance(res, dict):
            if not res:
                return np.zeros(0, dtype=np.int64), []
            pos = self._pos
            if len(pos) < self.cluster.num_nodes:
                self._pos = pos = np.full(max(self.cluster.num_nodes, 2 * len(pos)), -1, dtype=np.int64)
            pos[cur] = np.arange(n)
            js, reasons = [], []
            for name, reason in res.items():
                gi = self.cluster.node_index(name)
                j = int(pos[gi]) if gi is not None else -1
                if j < 0 or reason is None or reason is True:
                    continue
                if isinstance(reason, Status) and reason.ok:
                    continue
                js.append(j)
                reasons.append(reason)
            pos[cur] = -1
            return np.asarray(js, dtype=np.int64), reasons
        if isinstance(res, np.ndarray) and res.dtype == bool:
            if res.shape != (n,):
                raise PluginFailure(Status.error(
                    f"plugin {impl.plugin} returned {res.size} filter results for {n} nodes", impl.plugin))
            return np.flatnonzero(~res), f"node(s) rejected by {impl.plugin}"
        try:
            items = list(res)
        except TypeError:
            raise PluginFailure(Status.error(
                f"plugin {impl.plugin} returned an unexpected {type(res).__name__} from filter", impl.plugin)) from None
        if len(items) != n:
            raise PluginFailure(Status.error(
                f"plugin {impl.plugin} returned {len(items)} filter results for {n} nodes", impl.plugin))
        js, reasons = [], []
        for j, r in enumerate(items):
            if r is None or r is True or (isinstance(r, np.bool_) and bool(r)):
                continue
            if isinstance(r, Status) and r.ok:
                continue
            js.append(j)
            reasons.append(bool(r) if isinstance(r, np.bool_) else r)
        return np.asarray(js, dtype=np.int64), reasons

    def _fit_error(self, pod: Pod, n_all: int, statuses: Mapping[str, Status]) -> Status:
        counts: Counter[str] = Counter()
        unresolvable = True
        for st in statuses.values():
            for r in st.reasons or (f"rejected by {st.plugin}",):
                counts[r] += 1
            if st.code != Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                unresolvable = False
        detail = ", ".join(f"{c} {r}" for r, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
        msg = f"0/{n_all} nodes are available" + (f": {detail}." if detail else ".")
        plugins = sorted({st.plugin for st in statuses.values() if st.plugin})
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable and statuses else Code.UNSCHEDULABLE
        return Status(code, (msg,), ",".join(plugins) or None)

    async def score_nodes(self, pod: Pod, state: CycleState, feasible: np.ndarray) -> tuple[np.ndarray, int]:
        """pre_score, score, normalize_score (validated to [0, 100]) and weights over ``feasible`` node
        indices: (weighted totals aligned with ``feasible``, the highest total possible)."""
        cluster = self.cluster
        batch = NodeBatch(cluster, feasible)
        for impl in self.caller.impls("pre_score"):
            res = await self.caller.call(impl, pod=pod, nodes=batch, state=state)
            if res is None:
                continue
            st = as_status(res, impl.plugin)
            if st.code == Code.SKIP:
                state.skip_score.add(impl.plugin)
            elif not st.ok:
                raise PluginFailure(st if st.code == Code.ERROR else Status.error(st.message, impl.plugin))
        total = np.zeros(len(feasible), dtype=np.int64)
        max_total = 0
        normalizers = self._normalizers
        for impl in self.caller.impls("score"):
            if impl.plugin in state.skip_score:
                continue
            if impl.per_node:
                vals = []
                for v in batch:
                    vals.append(await self.caller.call(impl, pod=pod, node=v, state=state) or 0)
                arr = np.asarray(vals, dtype=np.int64)
            else:
                res = await self.caller.call(impl, pod=pod, nodes=batch, state=state)
                if res is None:
                    continue
                arr = self._score_array(impl, res, batch)
            norm = normalizers.get(impl.plugin)
            if norm is not None:
                out = await self.caller.call(norm, pod=pod, nodes=batch, scores=arr, state=state)
                if out is not None:
                    arr = self._score_array(norm, out, batch)
            if len(arr) and (arr.min() < 0 or arr.max() > MAX_NODE_SCORE):
                bad = int(arr.max() if arr.max() > MAX_NODE_SCORE else arr.min())
                raise PluginFailure(Status.error(
                    f"plugin {impl.plugin} returned a score of {bad}, outside [0, {MAX_NODE_SCORE}]", impl.plugin))
            total += arr * impl.weight
            max_total += MAX_NODE_SCORE * impl.weight
        return total, max_total

    async def _score_and_select(self, pod: Pod, state: CycleState, feasible: np.ndarray) -> NodeView:
        total, _ = await self.score_nodes(pod, state, feasible)
        best = np.flatnonzero(total == total.max())
        pick = int(best[0]) if len(best) == 1 else int(best[self.rng.integers(len(best))])
        return self.cluster.views[int(feasible[pick])]

    def _score_array(self, impl: Impl, res: Any, batch: NodeBatch) -> np.ndarray:
        if isinstance(res, dict):
            return np.fromiter((int(res.get(n, 0)) for n in batch.names), dtype=np.int64, count=len(batch))
        try:
            arr = np.asarray(res).astype(np.int64, copy=False)
        except (TypeError, ValueError):
            raise PluginFailure(Status.error(
                f"plugin {impl.plugin} returned an unexpected {type(res).__name__} from score", impl.plugin)) from None
        if arr.shape != (len(batch),):
            raise PluginFailure(Status.error(
                f"plugin {impl.plugin} returned {arr.size} scores for {len(batch)} nodes", impl.plugin))
        return arr

    # -- reserve / permit -------------------------------------------------------------------------
    async def _run_reserve(self, pod: Pod, node: NodeView, state: CycleState) -> Status:
        for impl in self.caller.impls("reserve"):
            try:
                st = as_status(await self.caller.call(impl, pod=pod, node=node, state=state), impl.plugin)
            except PluginFailure as f:
                return f.status
            if not st.ok:
                return st
        return Status.success()

    async def _run_permit(self, pod: Pod, node: NodeView, state: CycleState) -> tuple[Status, dict[str, float]]:
        waits: dict[str, float] = {}
        for impl in self.caller.impls("permit"):
            try:
                res = await self.caller.call(impl, pod=pod, node=node, state=state)
            except PluginFailure as f:
                return f.status, {}
            st = as_status(res, impl.plugin)
            if st.code == Code.WAIT:
                waits[impl.plugin] = min(st.timeout or MAX_PERMIT_TIMEOUT, MAX_PERMIT_TIMEOUT)
            elif not st.ok:
                if st.is_rejection or st.code == Code.ERROR:
                    return st, {}
                return Status.error(f"plugin {impl.plugin} returned {st.code.name} from permit", impl.plugin), {}
        return Status.success(), waits

    async def _unreserve_and_forget(self, pod: Pod, node: NodeView, state: CycleState) -> None:
        for impl in reversed(self.caller.impls("unreserve")):
            try:
                await self.caller.call(impl, pod=pod, node=node, state=state)
            except PluginFailure:
                pass  # logged by the caller; unreserve of the others must still run
        self.cluster.forget(pod)

    # -- binding cycle ----------------------------------------------------------------------------
    async def _binding_cycle(self, pod: Pod, node: NodeView, state: CycleState, wp: WaitingPod | None) -> None:
        try:
            if wp is not None:
                st = await wp.wait()
                self.waiting_pods.pop(pod.uid, None)
                if not st.ok:
                    await self._binding_failed(pod, node, state, st)
                    return
            st = await self._run_pre_bind(pod, node, state)
            if not st.ok:
                await self._binding_failed(pod, node, state, st)
                return
            bound = False
            for impl in self.caller.impls("bind"):
                res = await self.caller.call(impl, pod=pod, node=node, state=state)
                if res is None:
                    continue
                st = as_status(res, impl.plugin, default_code=Code.ERROR)
                if st.code == Code.SKIP:
                    continue
                if not st.ok:
                    await self._binding_failed(pod, node, state, st)
                    return
                bound = True
                break
            if not bound:
                await self._binding_failed(pod, node, state, Status.error("no bind plugin bound the pod"))
                return
            self._record_bound(pod, node.name, state)
            await self.caller.call_safe("post_bind", pod=pod, node=node, state=state)
            if self.queue.gated:
                await self.cluster_event("AssignedPodAdd")
        except PluginFailure as f:
            await self._binding_failed(pod, node, state, f.status)
        finally:
            self.in_flight_binds -= 1

    async def _run_pre_bind(self, pod: Pod, node: NodeView, state: CycleState) -> Status:
        """pre_bind in profile order; annotation dicts are collected into ``state.annotations``.
        Raises :class:`PluginFailure` for a plugin that raised or timed out."""
        for impl in self.caller.impls("pre_bind"):
            res = await self.caller.call(impl, pod=pod, node=node, state=state)
            if res is None:
                continue
            if isinstance(res, dict):
                state.annotations.update({str(k): str(v) for k, v in res.items()})
                continue
            st = as_status(res, impl.plugin, default_code=Code.ERROR)
            if not st.ok:
                return st
        return Status.success()

    async def reserve_placed(self, pod: Pod, node_name: str) -> tuple[Status, CycleState]:
        """The back half of a cycle for a pod that another scheduler placed on ``node_name`` (the
        extender's ``bind`` verb): pre_filter, the filters on that node, assume, reserve, pre_bind.

        On success the pod stays assumed on the node with its reservations held, and
        ``state.annotations`` holds what pre_bind plugins wrote; the caller binds, then calls
        :meth:`release_placed` if the binding fails. On failure nothing is left reserved or assumed and
        the status names the plugin. permit is not run: the other scheduler ran its own permit phase,
        and a wait here would hold its bind call open.
        """
        state = CycleState()
        i = self.cluster.node_index(node_name)
        if i is None:
            return Status.unresolvable(f"node {node_name} not found"), state
        known = self.cluster.pod(pod.uid)
        if pod.node_name or (known is not None and known.node_name):
            where = pod.node_name or known.node_name
            return Status.unresolvable(f"pod {pod.key} is already on node {where}"), state
        try:
            st, candidates = await self.run_pre_filter(pod, state)
        except PluginFailure as f:
            return f.status, state
        if not st.ok:
            return st, state
        if candidates is not None and node_name not in candidates:
            return Status.unresolvable(f"node {node_name} is not in the pre_filter node set"), state
        st = await self.run_filters_on_node(pod, node_name, state)
        if not st.ok:
            return st, state
        node = self.cluster.views[i]
        self.cluster.assume(pod, node_name)
        st = await self._run_reserve(pod, node, state)
        if st.ok:
            try:
                st = await self._run_pre_bind(pod, node, state)
            except PluginFailure as f:
                st = f.status
        if not st.ok:
            await self._unreserve_and_forget(pod, node, state)
        return st, state

    async def release_placed(self, pod: Pod, node_name: str, state: CycleState) -> None:
        """Undo :meth:`reserve_placed` after a failed binding: unreserve in reverse order, forget."""
        i = self.cluster.node_index(node_name)
        if i is not None:
            await self._unreserve_and_forget(pod, self.cluster.views[i], state)

    def _record_bound(self, pod: Pod, node_name: str, state: CycleState) -> None:
        if self.nominated:
            self.nominate(pod, None)
        res = self.results.setdefault(pod.uid, PodResult())
        res.node, res.reason = node_name, ""
        res.annotations.update(state.annotations)
        res.attempts = self.attempt_counts[pod.uid]
        self.queue.done(pod.uid)
        self.progress += 1
        self.bind_events.append((pod.uid, node_name))
        self._attempts["scheduled"].inc()
        for cb in self.on_bound:
            cb(pod, node_name)

    async def _binding_failed(self, pod: Pod, node: NodeView, state: CycleState, st: Status) -> None:
        await self._unreserve_and_forget(pod, node, state)
        await self.cluster_event("AssignedPodDelete")
        await self._cycle_failed(pod, st, state, run_post_filter=False)

    async def _cycle_failed(self, pod: Pod, st: Status, state: CycleState, *, run_post_filter: bool) -> None:
        for cb in self.on_attempt_failed:
            cb(pod)
        if run_post_filter:
            statuses = state.get("koordfw/filtered_statuses", {})
            for impl in self.caller.impls("post_filter"):
                try:
                    res = await self.caller.call(impl, pod=pod, state=state, statuses=statuses)
                except PluginFailure as f:
                    log.warning("post_filter failed", plugin=impl.plugin, status=str(f.status))
                    break
                if res is None:
                    continue
                if isinstance(res, PostFilterResult):
                    cur = self.cluster.pod(pod.uid) or pod
                    nominated = attrs.evolve(cur, nominated_node_name=res.nominated_node)
                    self.nominate(nominated, res.nominated_node)
                    if self.cluster.pod(pod.uid) is not None:
                        self.cluster.update_pod_object(nominated)
                    info = self.queue.info(pod.uid)
                    if info is not None:
                        info.pod = nominated
                    break
                pst = as_status(res, impl.plugin)
                if pst.ok or pst.code in (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR):
                    break
        reason = st.message or f"rejected by {st.plugin}"
        res = self.results.setdefault(pod.uid, PodResult())
        res.node, res.reason = None, f"{res.evicted}; then: {reason}" if res.evicted else reason
        res.attempts = self.attempt_counts[pod.uid]
        unsched = st.is_rejection
        self._attempts["unschedulable" if unsched else "error"].inc()
        self.queue.failed(pod.uid, self.clock.now(), unschedulable=unsched,
                          generation=self.cluster.free_generation,
                          plugins=tuple(p for p in (st.plugin or "").split(",") if p))
        for cb in self.on_unschedulable:
            r = cb(pod, st)
            if hasattr(r, "__await__"):
                await r

    # -- what-ifs for plugins (preemption, descheduling) -------------------------------------------
    async def run_filters_on_node(self, pod: Pod, node_name: str, state: CycleState) -> Status:
        i = self.cluster.node_index(node_name)
        if i is None:
            return Status.unresolvable(f"node {node_name} not found")
        try:
            ok, statuses = await self._filter_nodes(pod, state, np.array([i], dtype=np.int64), 1)
        except PluginFailure as f:
            return f.status
        if len(ok):
            return Status.success()
        return statuses.get(node_name, Status.unschedulable("rejected"))

    # -- in-memory actions (the embedded engine) ------------------------------------------------
    async def _memory_bind(self, pod: Pod, node_name: str, annotations: dict) -> bool:
        self.cluster.confirm_bound(pod, node_name, annotations)
        return True

    async def _memory_evict(self, pod: Pod, reason: str) -> bool:
        """Evict in memory: the pod leaves its node and comes back pending (its controller recreates it)."""
        cur = self.cluster.pod(pod.uid)
        if cur is None:
            return False
        wp = self.waiting_pods.get(pod.uid)
        if wp is not None:
            wp.reject("", reason)
            return True
        self.cluster.remove_pod(pod.uid)
        plugin_anns = self.results.get(pod.uid, PodResult()).annotations
        anns = {k: v for k, v in cur.annotations.items() if k not in plugin_anns}
        fresh = attrs.evolve(cur, node_name=None, phase="Pending", annotations=anns, nominated_node_name=None)
        self.results[pod.uid] = PodResult(reason=reason, evicted=reason)
        self.cluster.add_pod(fresh)
        await self.enqueue(fresh)
        await self.cluster_event("PodDelete")
        return True

    # -- reporting ------------------------------------------------------------------------------
    def pending_uids(self) -> list[str]:
        return [uid for uid, e in self.cluster.pods.items() if e.node_index < 0 and not e.pod.is_terminal]
