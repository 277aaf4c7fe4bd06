"""The read-only :class:`koordfw.ClusterView` plugins are given (``handle.cluster``, ``deschedule``'s
``cluster``): a thin front over the engine's :class:`~.cluster.ClusterState` that forwards every read
and has none of its mutators (``add_pod``, ``add_requested``, ``set_object``, ...).

The numpy columns it gives out (``allocatable``, ``requested``, ``node_version``, the masks, a pod's
``request_vector``) are read-only views of the engine's arrays: they follow the engine's changes (within
one cycle) and raise ``ValueError`` when written. The object dicts (``objects_of``, ``get_object``) and the
:class:`~.cluster.NodeView` s are the engine's own, to be read and never changed. A plugin acts on the
cluster through its handle's verbs (``without_pods``, ``restore_requests``, ``with_requests_freed``,
``nominate``, ``evict``, ``patch_object``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .cluster import ClusterState, NodeView, PodEntry
from .model import Pod

if TYPE_CHECKING:
    from .handle import ClusterView

__all__ = ["ReadOnlyCluster", "as_view", "canonical_cluster", "read_only", "view_of"]


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the same memory; writing it raises ``ValueError``)."""
    v = a.view()
    v.flags.writeable = False
    return v


class ReadOnlyCluster:
    """The :class:`koordfw.ClusterView` over one :class:`ClusterState` (one per cluster: :func:`view_of`,
    so that caches keyed by the view's identity hold across plugins and cycles)."""

    __slots__ = ("_c", "_cols", "__weakref__")

    def __init__(self, cluster: ClusterState) -> None:
        self._c = cluster
        #: column name → (the engine's array, the rows in use, its read-only view): made again only when the
        #: engine grows or replaces the array (a hot read is then a lookup, not a new view)
        self._cols: dict[str, tuple[np.ndarray, int, np.ndarray]] = {}

    @property
    def view(self) -> ReadOnlyCluster:
        """Itself (as ``ClusterState.view`` is this object: either gives the view)."""
        return self

    def _column(self, name: str, base: np.ndarray) -> np.ndarray:
        n = self._c.num_nodes
        hit = self._cols.get(name)
        if hit is not None and hit[0] is base and hit[1] == n:
            return hit[2]
        v = read_only(base[:n])
        self._cols[name] = (base, n, v)
        return v

    # -- nodes ----------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return self._c.num_nodes

    @property
    def views(self) -> Sequence[NodeView]:
        return self._c.views

    @property
    def nodes(self) -> list[NodeView]:
        return self._c.nodes

    @property
    def resources(self) -> Sequence[str]:
        return tuple(self._c.resources)

    @property
    def allocatable(self) -> np.ndarray:
        return self._column("allocatable", self._c._alloc)

    @property
    def requested(self) -> np.ndarray:
        return self._column("requested", self._c._req)

    @property
    def node_version(self) -> np.ndarray:
        return self._column("node_version", self._c._version)

    @property
    def unschedulable_mask(self) -> np.ndarray:
        return self._column("unschedulable_mask", self._c._unsched)

    @property
    def live_mask(self) -> np.ndarray:
        return self._c.live_mask  # a fresh array each time

    @property
    def has_removed_nodes(self) -> bool:
        return self._c.has_removed_nodes

    @property
    def labels_generation(self) -> int:
        return self._c.labels_generation

    @property
    def generation(self) -> int:
        return self._c.generation

    @property
    def free_generation(self) -> int:
        return self._c.free_generation

    @property
    def extra_allocatable(self) -> Mapping[str, Mapping[str, int]]:
        return MappingProxyType(self._c.extra_allocatable)

    def resource_index(self, name: str) -> int:
        return self._c.resource_index(name)

    def request_vector(self, pod: Pod) -> np.ndarray:
        return read_only(self._c.request_vector(pod))

    def has_room(self, i: int, vec: np.ndarray, need: np.ndarray | None = None) -> bool:
        return self._c.has_room(i, vec, need)

    def node(self, name: str) -> NodeView | None:
        return self._c.node(name)

    def node_index(self, name: str) -> int | None:
        return self._c.node_index(name)

    def indices_of(self, names: Sequence[str]) -> np.ndarray:
        return self._c.indices_of(names)

    def label_mask(self, key: str, value: str | None = None) -> np.ndarray:
        return read_only(self._c.label_mask(key, value))

    # -- pods -----------------------------------------------------------------------------------
    @property
    def pods(self) -> Mapping[str, PodEntry]:
        return MappingProxyType(self._c.pods)

    @property
    def pods_with_affinity(self) -> int:
        return self._c.pods_with_affinity

    @property
    def pods_with_required_anti_affinity(self) -> int:
        return self._c.pods_with_required_anti_affinity

    @property
    def nominated_pending_pods(self) -> list[Pod]:
        return self._c.nominated_pending_pods

    def pod(self, uid: str) -> Pod | None:
        return self._c.pod(uid)

    def pod_by_key(self, key: str) -> Pod | None:
        return self._c.pod_by_key(key)

    def is_assumed(self, uid: str) -> bool:
        return self._c.is_assumed(uid)

    def pods_on(self, node_name: str) -> list[Pod]:
        return self._c.pods_on(node_name)

    def all_pods(self) -> list[Pod]:
        return self._c.all_pods()

    def lowest_named_priority(self) -> int | None:
        return self._c.lowest_named_priority()

    def pending_pods(self) -> list[Pod]:
        return self._c.pending_pods()

    def without_pods(self, node_name: str, pods: Sequence[Pod]) -> AbstractContextManager[None]:
        """The kernel's what-if, undone on exit (prefer ``handle.without_pods``)."""
        return self._c.without_pods(node_name, pods)

    # -- other objects --------------------------------------------------------------------------
    @property
    def objects(self) -> Mapping[str, Mapping[str, dict[str, Any]]]:
        return MappingProxyType(self._c.objects)

    def objects_generation(self, kind: str) -> int:
        return self._c.objects_generation(kind)

    def objects_of(self, kind: str) -> Mapping[str, dict[str, Any]]:
        return MappingProxyType(self._c.objects_of(kind))

    def get_object(self, kind: str, key: str) -> dict[str, Any] | None:
        return self._c.get_object(kind, key)

    def node_metric(self, node_name: str) -> dict[str, Any] | None:
        return self._c.node_metric(node_name)

    def summary_row(self, view: NodeView) -> dict[str, Any]:
        return self._c.summary_row(view)

    def __repr__(self) -> str:
        return f"<read-only view of {self._c!r}>"


def view_of(cluster: ClusterState) -> ReadOnlyCluster:
    """The one read-only view of ``cluster`` (made with it)."""
    return cluster.view


def as_view(cluster: ClusterView) -> ReadOnlyCluster:
    """The read-only view of ``cluster``, itself a view or the engine's state (``NodeBatch.cluster``): the
    key for a cache of one cluster that both reach (the view is one per cluster)."""
    if isinstance(cluster, ClusterState):
        return view_of(cluster)
    return cast(ReadOnlyCluster, cluster)  # a view already (or a test's stand-in)


def canonical_cluster(obj: object) -> object:
    """``obj``, or for a :class:`ClusterState` its read-only view (identity keys of one cluster)."""
    return view_of(obj) if type(obj) is ClusterState else obj
