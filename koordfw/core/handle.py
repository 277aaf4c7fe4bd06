"""The plugin contract's ``handle``: what a plugin may ask of the engine running it.

Every hook may take ``handle``. Scheduling-side plugins (scheduler, descheduler, extender, the
embedded cluster) get a :class:`Handle`; node-side plugins (the agent's ``collect``, ``qos_plan``,
``runtime_hook``) get an :class:`AgentHandle`. Both are ``Protocol`` s: the engines implement them,
plugins only call them, and tests may pass any object with the same members. Each plugin gets its
own handle (``plugin_name``, ``args`` and ``stash`` are its own); everything else is shared by the engine.

This mirrors kube-scheduler's ``framework.Handle`` (snapshot, waiting pods, ``Activate``,
``PluginsRunner``, the nominator, the event recorder) and Koordinator's extended handle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .clock import Clock
from .model import Pod
from .stash import Stash
from .state import CycleState
from .status import Status

if TYPE_CHECKING:
    from .cluster import NodeView, PodEntry
    from .nodestate import FileWrite, NodeState

__all__ = ["AdmissionHandle", "AgentHandle", "ClusterView", "EventRecorder", "Handle", "PluginsRunner", "WaitingPodView"]


@runtime_checkable
class ClusterView(Protocol):
    """The read side of the engine's cluster: nodes (as :class:`~koordfw.NodeView` and numpy columns
    indexed by node index), pods, and the other objects (NodeMetric, Device, PodGroup, ...).

    What plugins get (``handle.cluster``, ``deschedule``'s ``cluster``) is read-only: the kernel's
    :class:`~koordfw.core.cluster_view.ReadOnlyCluster`, with none of the engine's mutators; a plugin
    acts through its handle's verbs (:meth:`Handle.without_pods`, :meth:`Handle.restore_requests`,
    :meth:`Handle.with_requests_freed`, :meth:`Handle.with_requests_held`, ``nominate``, ``evict``,
    ``patch_object``, ...). The columns (``allocatable``, ``requested``, ...) are read-only views of
    ``[node, resource]`` int64 arrays in canonical units (millicores, bytes, counts);
    :meth:`resource_index` names a column. The :class:`~koordfw.NodeView` s, pods and object dicts are
    the engine's own: read them, never change them (``NodeView.cluster`` and ``NodeBatch.cluster`` are
    still the engine's state, for the kernel's batch hot path: read them only).
    :meth:`without_pods` is kept here for plugins written before :meth:`Handle.without_pods`.
    """

    @property
    def num_nodes(self) -> int: ...
    @property
    def views(self) -> Sequence[NodeView]: ...
    @property
    def nodes(self) -> list[NodeView]: ...
    @property
    def pods(self) -> Mapping[str, PodEntry]: ...
    @property
    def resources(self) -> Sequence[str]: ...
    @property
    def allocatable(self) -> np.ndarray: ...
    @property
    def requested(self) -> np.ndarray: ...
    @property
    def node_version(self) -> np.ndarray: ...
    @property
    def unschedulable_mask(self) -> np.ndarray: ...
    @property
    def live_mask(self) -> np.ndarray: ...
    @property
    def has_removed_nodes(self) -> bool: ...
    @property
    def labels_generation(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def free_generation(self) -> int: ...
    @property
    def pods_with_affinity(self) -> int: ...
    @property
    def pods_with_required_anti_affinity(self) -> int: ...
    @property
    def nominated_pending_pods(self) -> list[Pod]: ...

    def resource_index(self, name: str) -> int: ...
    def request_vector(self, pod: Pod) -> np.ndarray: ...
    def has_room(self, i: int, vec: np.ndarray, need: np.ndarray | None = None) -> bool: ...
    def node(self, name: str) -> NodeView | None: ...
    def node_index(self, name: str) -> int | None: ...
    def indices_of(self, names: Sequence[str]) -> np.ndarray: ...
    def label_mask(self, key: str, value: str | None = None) -> np.ndarray: ...
    def pod(self, uid: str) -> Pod | None: ...
    def pod_by_key(self, key: str) -> Pod | None: ...
    def is_assumed(self, uid: str) -> bool: ...
    def pods_on(self, node_name: str) -> list[Pod]: ...
    def all_pods(self) -> list[Pod]: ...
    def lowest_named_priority(self) -> int | None: ...
    def pending_pods(self) -> list[Pod]: ...
    def without_pods(self, node_name: str, pods: Sequence[Pod]) -> AbstractContextManager[None]: ...
    def objects_generation(self, kind: str) -> int:
        """Bumped whenever an object of ``kind`` is set or deleted (a plugin's cache of that kind is valid while
        it holds)."""
    def objects_of(self, kind: str) -> Mapping[str, dict[str, Any]]: ...
    def get_object(self, kind: str, key: str) -> dict[str, Any] | None: ...
    def node_metric(self, node_name: str) -> dict[str, Any] | None: ...


class WaitingPodView(Protocol):
    """A pod held at Permit (kube's ``WaitingPod``)."""

    @property
    def pod(self) -> Pod: ...
    @property
    def node_name(self) -> str: ...
    @property
    def status(self) -> Status | None:
        """``None`` while it waits; the final status once allowed or rejected."""
    @property
    def pending_plugins(self) -> list[str]: ...
    def allow(self, plugin: str) -> None: ...
    def reject(self, plugin: str, message: str) -> None: ...


class EventRecorder(Protocol):
    """kube's ``events.EventRecorder``: a Kubernetes Event about an object. ``regarding`` names it as
    ``"Kind namespace/name"`` (``"Kind name"`` for a cluster-scoped kind), or ``"namespace/name"`` for a Pod.
    The live scheduler writes the Event to the API server for the kinds it watches; every engine keeps it in
    its log."""

    def eventf(self, regarding: str, type: str, reason: str, message: str) -> None: ...


class PluginsRunner(Protocol):
    """kube's ``framework.PluginsRunner``: run the profile's plugins for a pod outside its own cycle
    (preemption, descheduling what-ifs, reservations). Results are those of the scheduling cycle's
    one implementation, with the same pre_filter Skip/PreFilterResult rules and nominated pods."""

    async def run_pre_filters(self, pod: Pod, state: CycleState) -> tuple[Status, frozenset[str] | None]:
        """pre_filter into ``state``: (status, the candidate node names, or None for all)."""
    async def run_filters(self, pod: Pod, node_name: str, state: CycleState | None = None) -> Status:
        """The filters for ``pod`` on one node (run :meth:`run_pre_filters` into ``state`` first)."""
    async def run_scores(self, pod: Pod, node_names: Sequence[str],
                         state: CycleState) -> tuple[Status, dict[str, int]]:
        """pre_score, score, normalize_score and weights over ``node_names``: their weighted totals."""
    async def run_pre_filter_extension_add_pod(self, pod: Pod, state: CycleState, pod_to_add: Pod,
                                               node_name: str) -> Status:
        """kube's ``RunPreFilterExtensionAddPod``: tell the plugins that ran pre_filter into ``state`` that
        ``pod_to_add`` now counts on ``node_name`` in this what-if (each plugin's ``pre_filter_add_pod``, in
        profile order; the first failure is returned). Call it where the what-if adds the pod (a reprieved
        victim back on its node, a member placed by a dry run held there)."""
    async def run_pre_filter_extension_remove_pod(self, pod: Pod, state: CycleState, pod_to_remove: Pod,
                                                  node_name: str) -> Status:
        """kube's ``RunPreFilterExtensionRemovePod``: as :meth:`run_pre_filter_extension_add_pod`, for
        ``pod_to_remove`` taken off ``node_name`` (a possible victim, while :meth:`Handle.without_pods`
        holds it off)."""


class Handle(PluginsRunner, Protocol):
    """What a scheduling-side plugin gets as ``handle``."""

    @property
    def plugin_name(self) -> str:
        """This plugin's name in the profile."""
    @property
    def args(self) -> Any:
        """This plugin's typed args (what its ``plugin_args`` declared, from the profile)."""
    def plugin_args(self, name: str) -> Any:
        """The typed args of another plugin of this profile (None if it is not loaded or takes none),
        for a package that uses that plugin's model through its ``api`` module."""
    @property
    def clock(self) -> Clock:
        """The engine's clock (virtual in the embedded cluster)."""
    def now(self) -> float: ...
    @property
    def cluster(self) -> ClusterView: ...
    @property
    def rng(self) -> np.random.Generator:
        """The engine's seeded random generator (the one that breaks score ties)."""
    @property
    def events(self) -> EventRecorder: ...
    @property
    def stash(self) -> Stash:
        """This plugin's state for the engine's lifetime (see :class:`koordfw.Stash`): one per plugin
        per engine, never another plugin's or another engine's."""

    # -- waiting pods (kube's IterateOverWaitingPods / GetWaitingPod / RejectWaitingPod) --------------
    def iterate_waiting_pods(self) -> list[WaitingPodView]: ...
    def get_waiting_pod(self, uid: str) -> WaitingPodView | None: ...
    def reject_waiting_pod(self, uid: str, message: str) -> bool: ...

    # -- the queue -----------------------------------------------------------------------------------
    def is_in_flight(self, uid: str) -> bool:
        """Is the pod's scheduling or binding cycle running now?"""
    def is_active(self, uid: str) -> bool:
        """Is the pod in the active queue, about to be tried?"""
    def activate(self, uids: Iterable[str]) -> None:
        """kube's ``Handle.Activate``: move these queued pods straight to the active queue."""

    # -- the nominator -----------------------------------------------------------------------------
    def nominated_pods(self, node_name: str) -> list[Pod]:
        """Pods nominated to run on ``node_name`` (by preemption or a migration), not yet bound."""
    def nominate(self, pod: Pod, node_name: str | None) -> None:
        """Nominate ``pod`` to ``node_name`` (None clears it): filters count it there for pods of lower
        or equal priority."""

    # -- actions -------------------------------------------------------------------------------------
    def bind_pod(self, pod: Pod, node_name: str, annotations: Mapping[str, str]) -> Awaitable[Any]: ...
    def evict(self, pod: Pod, reason: str) -> Awaitable[Any]:
        """Evict (preempt, deschedule) a running pod; the engine deletes it or, in memory, requeues it.
        A placeholder pod is never evicted (the result is False): its plugin removes it."""

    # -- placeholder pods (Koordinator's reserve pods) -------------------------------------------------
    def add_placeholder(self, pod: Pod, *, on_unschedulable: Callable[[Pod, Status], None] | None = None) -> None:
        """Add (or replace, by uid) a **placeholder pod**: a pod that exists only in this scheduler, such
        as the reserve pod a Reservation is scheduled as.

        Without ``node_name`` it is queued at the next scheduling step and scheduled like any pod (every
        pre_enqueue, filter, score, reserve and permit applies); it preempts nobody, and its binding cycle
        calls this plugin's ``bind`` hook alone (write the object it stands for there; ``None`` counts as
        bound), then it stays on the node, holding its requests, and ``post_bind`` runs as for any pod.
        With ``node_name`` it is accounted on that node at once (a reservation already placed, or one
        resized: the replaced object's hold is released). The engine is never told of it (no API writes,
        not in reports) and ``evict`` refuses it; it shows in the cluster view (``pods_on``,
        ``requested``), so every other plugin sees the node's resources held. The queue hears of the
        change (``ASSIGNED_POD_DELETE`` of what it replaced, ``ASSIGNED_POD_ADD``) at the next scheduling
        step, so a timer callback may call this. Not while the placeholder's own cycle runs.
        ``on_unschedulable(pod, status)`` (sync) is called after each failed attempt to schedule it, with the
        cycle's status (its message kube's fit error), e.g. to write why on the object it stands for."""
    def remove_placeholder(self, uid: str) -> Pod | None:
        """Remove a placeholder pod of this scheduler (queued, waiting at permit or placed), releasing what
        it holds; the queue hears ``ASSIGNED_POD_DELETE`` at the next scheduling step. While its own cycle
        runs (a timer fired during an awaiting plugin) it is removed once that cycle is over. Returns the
        pod as it was, or None if it is not a placeholder."""
    def is_placeholder(self, uid: str) -> bool:
        """Was this uid added by :meth:`add_placeholder` (by any plugin)?"""
    def restore_requests(self, state: CycleState, node_name: str, requests: np.ndarray) -> None:
        """Count ``requests`` (a request vector as :meth:`ClusterView.request_vector` gives, e.g. the sum
        of the placeholder pods whose hold the cycle's pod may use) as free on ``node_name`` while this
        cycle's filters and scores run (``run_filters`` and ``run_scores`` what-ifs included): taken off the
        node's ``requested`` column meanwhile and put back after each call. Koordinator's
        restore-reservation transformer; call it from ``pre_filter``. Calls for one node add up."""

    def without_pods(self, node_name: str, pods: Sequence[Pod]) -> AbstractContextManager[None]:
        """The kernel's "node without these pods" what-if: inside ``with handle.without_pods(node, pods):``
        the pods of ``pods`` that are on ``node_name`` are off it (its ``requested`` column, ``pods_on`` and
        ``node_version``, which changes on entry and exit) and back on exit. Preemption's and descheduling's
        what-ifs (kube's SelectVictimsOnNode removing victims from the node's NodeInfo)."""
    def with_requests_freed(self, node_name: str, requests: np.ndarray) -> AbstractContextManager[None]:
        """Inside ``with handle.with_requests_freed(node, vec):`` count ``vec`` (a request vector, as
        :meth:`ClusterView.request_vector` gives) as free on ``node_name``: taken off its ``requested``
        column on entry, put back on exit; no pod moves and ``node_version`` does not change. For a check
        made now, outside the filters (:meth:`restore_requests` is the cycle-long form), e.g. the reservation
        plugin's nomination at reserve, with the assumed pod and the reservations' holds not counted."""
    def with_requests_held(self, node_name: str, requests: np.ndarray) -> AbstractContextManager[None]:
        """The converse of :meth:`with_requests_freed`: inside the block ``requests`` count as used on
        ``node_name`` (added to its ``requested`` column, taken off on exit), e.g. a descheduling plan's
        moves counted on their targets while the next move's filters run. Blocks nest (for several nodes,
        or a node freed of its pods while another holds the moves)."""

    # -- the engine's other objects (CRDs a plugin keeps the status of) --------------------------------
    @property
    def scheduler_name(self) -> str | None:
        """The ``schedulerName`` this scheduler is responsible for (the live scheduler's profile: it queues
        only pods naming it), or None when it schedules every pod it is given (the embedded cluster, the
        extender). A plugin that makes pods of its own (a Reservation's reserve pod) asks it likewise."""
    def watch_objects(self, kind: str, callback: Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]
                      ) -> None:
        """Call ``callback(key, old, new)`` (sync) whenever an object of ``kind`` changes in the engine's
        cluster (``new`` None: deleted; ``old`` None: added; ``key`` as :meth:`ClusterView.get_object`
        takes it), outside any plugin call. What is there at ``startup`` is in ``objects_of``; changes come
        through here. The live scheduler starts its caches after ``startup``: once they have synced (nodes
        and pods listed), it delivers every object it listed as an add, then each watch event; a
        plugin's own :meth:`update_object_status` is not delivered back to it, its watch echo is (as a
        change). Register from ``startup``; registrations end with the scheduler."""
    def update_object_status(self, kind: str, key: str, status: Mapping[str, Any]) -> bool:
        """Write ``status`` as the whole ``status`` of the object ``key`` of ``kind`` (its status
        subresource, as Koordinator's controllers' ``UpdateStatus``). The engine's cluster view has it at
        once (the embedded cluster keeps it in memory; ``koordfw simulate`` reports it); the live
        scheduler also queues a PUT of the object's ``/status`` carrying the cached ``resourceVersion``,
        re-read and retried on a 409 Conflict, coalesced per object (the newest status wins) and skipped
        when not leading. Sync; may be called from a timer. Returns False (nothing written) when the object
        is not in the cluster (a deleted object is never recreated)."""
    def patch_object(self, kind: str, key: str, patch: Mapping[str, Any], *,
                     precondition: Callable[[Mapping[str, Any]], bool] | None = None
                     ) -> Awaitable[dict[str, Any] | None]:
        """Write an RFC 7386 JSON merge ``patch`` of the object ``key`` of ``kind``'s ``metadata`` and ``spec``
        (a ``status`` key is refused with ValueError: use :meth:`update_object_status`), as kube's volume
        binder updates a PersistentVolume's ``spec.claimRef`` or annotates a claim with
        ``volume.kubernetes.io/selected-node``. Await it (from ``pre_bind``, say); it returns the object as
        written, or None when nothing was written: the object is not in the cluster (404 included),
        ``precondition(current)`` is false, or the API refused it. ``precondition`` is checked on the cached
        object first and, on the live cluster, again on each newer version: the PATCH carries the cached
        ``resourceVersion`` and a 409 Conflict re-reads the object and retries (a few times) while
        ``precondition`` still holds, so a change made meanwhile (another scheduler bound the PV) is never
        overwritten. The embedded cluster changes its object in memory (``koordfw simulate`` reports it, later
        cycles see it; a PersistentVolume's ``claimRef`` is completed as the PV controller would, binding the
        claim); the live scheduler's cache gets the API's answer. Other plugins watching the kind hear of it
        (:meth:`watch_objects`), this one does not. Not when leadership is lost (None)."""


@runtime_checkable
class AgentHandle(Protocol):
    """What a node-side plugin gets as ``handle`` in the node agent, and in a dry plan (``koordfw agent
    plan``, :class:`koordfw.NodePlanner`, whose ``apply`` refuses): one implementation,
    :class:`koordfw.core.node_runtime.NodeHandle`. ``shutdown`` and ``startup`` are called by every engine;
    ``isinstance(handle, AgentHandle)`` tells a node-side plugin it runs on the node side, not in a
    scheduler or the manager."""

    @property
    def plugin_name(self) -> str: ...
    @property
    def args(self) -> Any: ...
    @property
    def clock(self) -> Clock: ...
    def now(self) -> float:
        """The agent's clock: the time of the tick being run."""
    @property
    def node_state(self) -> NodeState | None:
        """The node state collected at the start of this tick (None before the first collection)."""
    @property
    def roots(self) -> Mapping[str, str]:
        """Where the agent's filesystems are: ``{"cgroup": "/sys/fs/cgroup", "resctrl": "/sys/fs/resctrl"}``
        (as given by ``--cgroup-root`` / ``--resctrl-root``)."""
    @property
    def events(self) -> EventRecorder: ...
    @property
    def stash(self) -> Stash:
        """This plugin's state for the agent's lifetime (see :class:`koordfw.Stash`): one per plugin per
        engine (a planner's or a dry plan's handles have their own, empty at first)."""
    def apply(self, writes: Sequence[FileWrite]) -> Awaitable[Any]:
        """Write cgroup/resctrl files now, outside the plan phase (stamped with this plugin's name)."""


@runtime_checkable
class AdmissionHandle(Protocol):
    """What a pod admission plugin (``mutate_pod``, ``validate_pod``) gets as ``handle``: in the
    manager's webhook and in ``koordfw simulate`` before scheduling.

    The objects are the engine's read-only view of the cluster (the webhook's reflector caches; the
    simulation's input manifests), as manifest dicts that a plugin must not change; which kinds are
    there is the engine's to say (the manager watches ClusterColocationProfiles, Namespaces and
    PriorityClasses)."""

    @property
    def plugin_name(self) -> str: ...
    @property
    def args(self) -> Any: ...
    @property
    def clock(self) -> Clock: ...
    def now(self) -> float: ...
    @property
    def rng(self) -> np.random.Generator:
        """The engine's seeded random generator (a ClusterColocationProfile's ``probability`` draws from it)."""
    @property
    def stash(self) -> Stash:
        """This plugin's state for the engine's lifetime (see :class:`koordfw.Stash`)."""
    def objects(self, api_version: str, kind: str) -> Sequence[Mapping[str, Any]]:
        """Every cached object of that kind (``"config.koordinator.sh/v1alpha1", "ClusterColocationProfile"``),
        in name order (namespace, then name, for namespaced kinds)."""
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Mapping[str, Any] | None:
        """One cached object by name (``namespace`` for namespaced kinds), or None."""
