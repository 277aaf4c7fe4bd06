"""The scheduling queue: active (a heap ordered by ``queue_sort``), backoff and unschedulable pools.

As in kube-scheduler: a pod that failed with an error backs off (initial 1 s, doubling, max 10 s);
a pod that did not fit waits in the unschedulable pool until a cluster event that the plugins which
rejected it say may help (their queueing hints, ``koordfw.core.hints``) or 5 minutes pass, then goes to
backoff or active. Pods rejected by ``pre_enqueue`` are held (gated) and re-checked on the events their
gating plugin's hints accept (on every event for a plugin without hints). The queue owns these requeue
decisions (kube's ``PriorityQueue.MoveAllToActiveOrBackoffQueue`` and ``isPodWorthRequeuing``): the
scheduler gives it each cluster event (:meth:`SchedulingQueue.on_cluster_event`) and its periodic flush
(:meth:`SchedulingQueue.flush`), with the pre_enqueue runner to re-check gated pods.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs
import structlog

from .hints import ClusterEvent, ClusterEventWithHint, QueueingHint, in_default
from .model import Pod
from .status import Status

log = structlog.get_logger("koordfw.scheduler")

#: what re-checks a gated pod: the runtime's pre_enqueue point
PreEnqueue = Callable[[Pod], Awaitable[Status]]


def rejectors(st: Status) -> tuple[str, ...]:
    """The plugins a failed status names (a fit error names every filter that rejected a node)."""
    return tuple(p for p in (st.plugin or "").split(",") if p)


@attrs.define
class QueuedPodInfo:
    pod: Pod
    arrival: float
    seq: int
    attempts: int = 0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    #: the scheduler's assume sequence at the last failed attempt: a reservation assumed after it and
    #: released again cannot have helped the pod (the cluster is as the attempt saw it)
    failed_seq: int = -1
    gated: bool = False
    gate_reason: str = ""
    #: the queue's move-request counter when this pod was popped
    popped_at_move: int = 0
    plugins: tuple[str, ...] = ()


class SchedulingQueue:
    def __init__(self, sort_key: Callable[[Pod, QueuedPodInfo], Any], *, initial_backoff: float = 1.0,
                 max_backoff: float = 10.0, max_unschedulable: float = 300.0) -> None:
        self._key = sort_key
        self.initial_backoff, self.max_backoff, self.max_unschedulable = initial_backoff, max_backoff, max_unschedulable
        self._heap: list[tuple[Any, int, str]] = []
        self._seq = itertools.count()
        self.infos: dict[str, QueuedPodInfo] = {}
        self.active: set[str] = set()
        self.backoff: set[str] = set()
        self.unschedulable: set[str] = set()
        #: the subset of ``unschedulable`` held by pre_enqueue
        self.gated: set[str] = set()
        self.in_flight: set[str] = set()
        #: bumped by every cluster event that may help unschedulable pods (kube's moveRequestCycle)
        self.move_requests = 0
        #: plugin → its registered events (plugins without ``events_to_register`` are absent)
        self.hints: dict[str, list[ClusterEventWithHint]] = {}
        #: hint calls and the moves they allowed or saved, by event (``str(ClusterEvent)``)
        self.hint_counts: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return len(self.infos)

    def info(self, uid: str) -> QueuedPodInfo | None:
        return self.infos.get(uid)

    # -- adding ---------------------------------------------------------------------------------
    def add(self, pod: Pod, now: float) -> QueuedPodInfo:
        info = self.infos.get(pod.uid)
        if info is None:
            arrival = pod.creation_timestamp if pod.creation_timestamp is not None else now
            info = QueuedPodInfo(pod, arrival, next(self._seq))
            self.infos[pod.uid] = info
        else:
            info.pod = pod
        self._to_active(info)
        return info

    def add_gated(self, pod: Pod, now: float, reason: str, plugins: tuple[str, ...] = ()) -> QueuedPodInfo:
        info = self.infos.get(pod.uid)
        if info is None:
            arrival = pod.creation_timestamp if pod.creation_timestamp is not None else now
            info = QueuedPodInfo(pod, arrival, next(self._seq))
            self.infos[pod.uid] = info
        info.pod = pod
        self._discard(pod.uid)
        info.gated, info.gate_reason = True, reason
        info.plugins = plugins
        info.unschedulable_since = now
        self.unschedulable.add(pod.uid)
        self.gated.add(pod.uid)
        return info

    def _discard(self, uid: str) -> None:
        self.active.discard(uid)
        self.backoff.discard(uid)
        self.unschedulable.discard(uid)
        self.gated.discard(uid)

    def _to_active(self, info: QueuedPodInfo) -> None:
        uid = info.pod.uid
        self._discard(uid)
        info.gated = False
        self.active.add(uid)
        heapq.heappush(self._heap, (self._key(info.pod, info), info.seq, uid))

    # -- popping --------------------------------------------------------------------------------
    def pop(self) -> QueuedPodInfo | None:
        while self._heap:
            _, _, uid = heapq.heappop(self._heap)
            if uid in self.active:
                self.active.discard(uid)
                info = self.infos[uid]
                info.attempts += 1
                info.popped_at_move = self.move_requests
                self.in_flight.add(uid)
                return info
        return None

    def peek_active(self) -> bool:
        return bool(self.active)

    # -- outcomes -------------------------------------------------------------------------------
    def done(self, uid: str) -> None:
        """The pod was bound (or deleted): forget it."""
        self.in_flight.discard(uid)
        self._discard(uid)
        self.infos.pop(uid, None)

    def backoff_duration(self, info: QueuedPodInfo) -> float:
        d = self.initial_backoff * (2 ** min(max(0, info.attempts - 1), 30))
        return min(d, self.max_backoff)

    def failed(self, uid: str, now: float, *, unschedulable: bool, seq: int = -1,
               plugins: tuple[str, ...] = ()) -> None:
        """Requeue after a failed attempt: unschedulable pool for rejections, backoff for errors."""
        info = self.infos.get(uid)
        if info is None:
            return
        self.in_flight.discard(uid)
        info.failed_seq = seq
        info.plugins = plugins
        info.backoff_until = now + self.backoff_duration(info)
        self._discard(uid)
        # a cluster event during this pod's own cycle may already have helped it: back off instead
        if unschedulable and self.move_requests == info.popped_at_move:
            info.unschedulable_since = now
            self.unschedulable.add(uid)
        else:
            self.backoff.add(uid)

    def requeue_now(self, uid: str) -> None:
        info = self.infos.get(uid)
        if info is not None:
            self.in_flight.discard(uid)
            self._to_active(info)

    # -- moving ---------------------------------------------------------------------------------
    def flush_backoff(self, now: float) -> int:
        moved = 0
        for uid in [u for u in self.backoff if self.infos[u].backoff_until <= now]:
            self._to_active(self.infos[uid])
            moved += 1
        return moved

    def flush_unschedulable_leftover(self, now: float) -> list[QueuedPodInfo]:
        """Pods that stayed unschedulable longer than the limit; the caller re-admits them."""
        return [self.infos[u] for u in list(self.unschedulable)
                if now - self.infos[u].unschedulable_since >= self.max_unschedulable]

    def move_to_active_or_backoff(self, info: QueuedPodInfo, now: float) -> None:
        if info.backoff_until > now:
            self._discard(info.pod.uid)
            info.gated = False
            self.backoff.add(info.pod.uid)
        else:
            self._to_active(info)

    def next_backoff_deadline(self) -> float | None:
        return min((self.infos[u].backoff_until for u in self.backoff), default=None)

    # -- requeue decisions (queueing hints) --------------------------------------------------------
    def hinted(self, info: QueuedPodInfo) -> bool:
        """Did plugins that all declare queueing hints reject this pod (so only an event they accept
        can help it)?"""
        return bool(info.plugins) and all(p in self.hints for p in info.plugins)

    def activate(self, uids: Iterable[str]) -> None:
        """kube's ``PriorityQueue.Activate``: straight to the active queue, skipping any backoff. A pod
        gated by ``pre_enqueue`` stays gated (kube re-runs PreEnqueue and keeps it out of the activeQ)."""
        for uid in uids:
            if uid in self.infos and uid not in self.in_flight and uid not in self.active and uid not in self.gated:
                self.requeue_now(uid)

    async def on_cluster_event(self, event: ClusterEvent, old: Any, new: Any, now: float, pre_enqueue: PreEnqueue,
                               *, assumed_seq: int = -1) -> None:
        """Move the pods a cluster change may help (kube's MoveAllToActiveOrBackoffQueue with queueing
        hints): an unschedulable pod moves, and a gated pod re-runs ``pre_enqueue``, when one of the
        plugins that rejected (or gated) it registered the event and its hint says Queue; plugins without
        registrations get the events of :data:`~koordfw.core.hints.DEFAULT_EVENTS` and object changes,
        and a gate of theirs is re-checked on every event. ``assumed_seq``: the event releases a
        reservation taken at that assume sequence (pods that failed before it are left alone)."""
        default = in_default(event)
        # per plugin, its registrations that match this event (once per event, not per pod)
        matched = {p: [r for r in regs if r.event.matches(event)] for p, regs in self.hints.items()}
        if default or any(matched.values()):
            self.move_requests += 1
            pool = self.unschedulable
        else:
            pool = self.gated
        for uid in list(pool):
            info = self.infos[uid]
            if info.gated:
                # kube's PreEnqueue with hints: the gating plugin's hints decide whether to re-check; a
                # plugin without them re-checks on every event
                if self.hinted(info) and not self._may_help(info, matched, event, old, new, default):
                    continue
                st = await pre_enqueue(info.pod)
                if st.ok:
                    self.move_to_active_or_backoff(info, now)
                else:
                    info.gate_reason, info.plugins = st.message, rejectors(st)
            elif assumed_seq > info.failed_seq >= 0:
                continue  # a reservation taken after this pod failed, now released: the pod's view again
            elif self._may_help(info, matched, event, old, new, default):
                self.move_to_active_or_backoff(info, now)

    def _may_help(self, info: QueuedPodInfo, matched: dict[str, list[ClusterEventWithHint]], event: ClusterEvent,
                  old: Any, new: Any, default: bool) -> bool:
        """Is ``event`` one that a plugin which rejected the pod says may make it schedulable?
        ``matched``: each hinted plugin's registrations that match the event."""
        if not info.plugins:
            return default
        counts = None
        for p in info.plugins:
            regs = matched.get(p)
            if regs is None:
                if default:
                    return True
                continue
            for r in regs:
                if r.hint is None:
                    return True
                if counts is None:
                    counts = self.hint_counts.setdefault(str(event), [0, 0])
                try:
                    verdict = r.hint(info.pod, old, new)
                except Exception as e:  # kube: a hint that fails counts as Queue
                    log.error("queueing hint raised", plugin=p, cluster_event=str(event), error=f"{type(e).__name__}: {e}")
                    verdict = QueueingHint.QUEUE
                if verdict is not QueueingHint.QUEUE_SKIP:
                    counts[0] += 1
                    return True
        if counts is not None:
            counts[1] += 1
        return False

    async def flush(self, now: float, pre_enqueue: PreEnqueue, *, events_complete: bool = False) -> None:
        """Periodic maintenance: finished backoffs to active, pods unschedulable for longer than the limit
        retried (a gated one only if ``pre_enqueue`` now admits it). ``events_complete``: every cluster
        change reaches the queue as an event, so pods only hinted plugins rejected wait for one."""
        self.flush_backoff(now)
        for info in self.flush_unschedulable_leftover(now):
            if events_complete and self.hinted(info):
                info.unschedulable_since = now
                continue
            if info.gated:
                st = await pre_enqueue(info.pod)
                if not st.ok:
                    info.unschedulable_since = now
                    continue
            self.move_to_active_or_backoff(info, now)
