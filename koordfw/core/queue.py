"""The scheduling queue: active (a heap ordered by ``queue_sort``), backoff and unschedulable pools.

As in kube-scheduler: a pod that failed with an error backs off (initial 1 s, doubling, max 10 s);
a pod that did not fit waits in the unschedulable pool until a cluster event that the plugins which
rejected it say may help (their queueing hints, ``koordfw.core.hints``; the scheduler decides) or 5
minutes pass, then goes to backoff or active. Pods rejected by ``pre_enqueue`` are held (gated) and
re-checked on the events their gating plugin's hints accept (on every event for a plugin without hints).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import attrs

from .model import Pod


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
