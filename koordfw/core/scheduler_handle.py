"""The :class:`koordfw.Handle` a plugin of a :class:`~.schedule_one.Scheduler` is given: one per plugin
and scheduler, a thin front over the scheduler (clock, cluster view, waiting pods, queue, nominator,
placeholders, object status, the PluginsRunner) that plugins reach only through this type."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from .clock import Clock
from .cluster_view import ReadOnlyCluster, view_of
from .events import EventLog
from .model import Pod
from .results import WaitingPod
from .runtime import RESTORED_REQUESTS
from .stash import new_stash
from .state import CycleState
from .status import Status

if TYPE_CHECKING:
    from .schedule_one import Scheduler


def _add_vectors(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` for request vectors that may differ in length (resources added since one was made)."""
    if len(a) < len(b):
        a, b = b, a
    out = a.copy()
    out[: len(b)] += b
    return out


class SchedulerHandle:
    """The :class:`koordfw.Handle` one plugin of a :class:`Scheduler` is given."""

    __slots__ = ("_s", "plugin_name", "stash")

    def __init__(self, scheduler: Scheduler, plugin_name: str) -> None:
        self._s = scheduler
        self.plugin_name = plugin_name
        self.stash = new_stash()  # this plugin's, for this scheduler's lifetime

    @property
    def args(self) -> Any:
        return self._s.registry.args.get(self.plugin_name)

    def plugin_args(self, name: str) -> Any:
        return self._s.registry.args.get(name)

    @property
    def clock(self) -> Clock:
        return self._s.clock

    def now(self) -> float:
        return self._s.clock.now()

    @property
    def cluster(self) -> ReadOnlyCluster:
        return view_of(self._s.cluster)

    @property
    def rng(self) -> np.random.Generator:
        return self._s.rng

    @property
    def events(self) -> EventLog:
        return self._s.recorder

    # -- waiting pods ---------------------------------------------------------------------------------
    def iterate_waiting_pods(self) -> list[WaitingPod]:
        return list(self._s.waiting_pods.values())

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        return self._s.waiting_pods.get(uid)

    def reject_waiting_pod(self, uid: str, message: str) -> bool:
        wp = self._s.waiting_pods.get(uid)
        if wp is None:
            return False
        wp.reject(self.plugin_name, message)
        return True

    # -- the queue -----------------------------------------------------------------------------------
    def is_in_flight(self, uid: str) -> bool:
        return uid in self._s.queue.in_flight

    def is_active(self, uid: str) -> bool:
        return uid in self._s.queue.active

    def activate(self, uids: Iterable[str]) -> None:
        self._s.activate(uids)

    # -- the nominator -------------------------------------------------------------------------------
    def nominated_pods(self, node_name: str) -> list[Pod]:
        return self._s.nominator.nominated_pods(node_name)

    def nominate(self, pod: Pod, node_name: str | None) -> None:
        self._s.nominate_pending(pod, node_name)

    # -- actions -------------------------------------------------------------------------------------
    async def bind_pod(self, pod: Pod, node_name: str, annotations: Mapping[str, str]) -> Any:
        return await self._s.engine.bind(pod, node_name, annotations)

    async def evict(self, pod: Pod, reason: str) -> Any:
        if pod.uid in self._s.placeholders:
            return False  # it exists only in this scheduler: its plugin removes it
        return await self._s.engine.evict(pod, reason)

    # -- placeholder pods ----------------------------------------------------------------------------
    def add_placeholder(self, pod: Pod, *, on_unschedulable: Callable[[Pod, Status], None] | None = None) -> None:
        self._s.add_placeholder(pod, self.plugin_name, on_unschedulable=on_unschedulable)

    def remove_placeholder(self, uid: str) -> Pod | None:
        return self._s.remove_placeholder(uid)

    def is_placeholder(self, uid: str) -> bool:
        return uid in self._s.placeholders

    def restore_requests(self, state: CycleState, node_name: str, requests: np.ndarray) -> None:
        i = self._s.cluster.node_index(node_name)
        if i is None:
            return
        restored = state.get(RESTORED_REQUESTS)
        if restored is None:
            restored = state[RESTORED_REQUESTS] = {}
        prev = restored.get(i)
        restored[i] = requests.copy() if prev is None else _add_vectors(prev, requests)

    def without_pods(self, node_name: str, pods: Sequence[Pod]) -> AbstractContextManager[None]:
        return self._s.cluster.without_pods(node_name, pods)

    def with_requests_freed(self, node_name: str, requests: np.ndarray) -> AbstractContextManager[None]:
        return self._shifted(node_name, requests, -1)

    def with_requests_held(self, node_name: str, requests: np.ndarray) -> AbstractContextManager[None]:
        return self._shifted(node_name, requests, 1)

    @contextmanager
    def _shifted(self, node_name: str, requests: np.ndarray, sign: int) -> Iterator[None]:
        """``requests`` added to (``sign`` 1) or taken off (-1) the node's ``requested`` row meanwhile."""
        cluster = self._s.cluster
        i = cluster.node_index(node_name)
        if i is None:
            yield
            return
        vec = np.array(requests[: len(cluster.resources)], dtype=np.int64)  # the caller's may change meanwhile
        cluster.add_requested(i, sign * vec)
        try:
            yield
        finally:
            cluster.add_requested(i, -sign * vec)

    # -- other objects -------------------------------------------------------------------------------
    @property
    def scheduler_name(self) -> str | None:
        return self._s.responsible_for

    def watch_objects(self, kind: str, callback: Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]
                      ) -> None:
        self._s.objects.watch(kind, self.plugin_name, callback)

    def update_object_status(self, kind: str, key: str, status: Mapping[str, Any]) -> bool:
        return self._s.objects.update_object_status(kind, key, status, writer=self.plugin_name)

    def patch_object(self, kind: str, key: str, patch: Mapping[str, Any], *,
                     precondition: Callable[[Mapping[str, Any]], bool] | None = None
                     ) -> Awaitable[dict[str, Any] | None]:
        return self._s.objects.patch_object(kind, key, patch, precondition=precondition, writer=self.plugin_name)

    # -- PluginsRunner -----------------------------------------------------------------------------
    async def run_pre_filters(self, pod: Pod, state: CycleState) -> tuple[Status, frozenset[str] | None]:
        return await self._s.framework.run_pre_filter(pod, state)

    async def run_filters(self, pod: Pod, node_name: str, state: CycleState | None = None) -> Status:
        return await self._s.framework.run_filters_on_node(pod, node_name, state or CycleState())

    async def run_pre_filter_extension_add_pod(self, pod: Pod, state: CycleState, pod_to_add: Pod,
                                               node_name: str) -> Status:
        return await self._extension("pre_filter_add_pod", pod, state, pod_to_add, node_name)

    async def run_pre_filter_extension_remove_pod(self, pod: Pod, state: CycleState, pod_to_remove: Pod,
                                                  node_name: str) -> Status:
        return await self._extension("pre_filter_remove_pod", pod, state, pod_to_remove, node_name)

    async def _extension(self, point: str, pod: Pod, state: CycleState, other: Pod, node_name: str) -> Status:
        view = self._s.cluster.node(node_name)
        if view is None:
            return Status.unresolvable(f"node {node_name} not found")
        return await self._s.framework.run_pre_filter_extension(point, pod, state, other, view)

    async def run_scores(self, pod: Pod, node_names: Sequence[str],
                         state: CycleState) -> tuple[Status, dict[str, int]]:
        cluster = self._s.cluster
        idx = [i for n in node_names if (i := cluster.node_index(n)) is not None]
        if len(idx) != len(node_names):
            missing = sorted(n for n in node_names if cluster.node_index(n) is None)
            return Status.unresolvable(f"node(s) not found: {', '.join(missing)}"), {}
        arr = np.asarray(idx, dtype=np.int64)
        st, total, _ = await self._s.framework.run_score(pod, state, arr)
        if not st.ok:
            return st, {}
        return st, {cluster.views[i].name: int(t) for i, t in zip(idx, total.tolist())}

    def __repr__(self) -> str:
        return f"<Handle of {self.plugin_name}>"
