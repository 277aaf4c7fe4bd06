"""The cluster cache: nodes, pods and other objects, with per-node numpy columns.

``allocatable`` and ``requested`` are int64 matrices (nodes × resource dimensions) so that fit and
scoring plugins can answer for every candidate node at once. Resource dimensions are added on
demand (the first pod or node that names a resource adds a column). Amounts are canonical integers:
milli for ``cpu``, units for everything else.

Assumed pods (reserved, not yet bound) are accounted like bound ones, as in kube-scheduler's cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from .model import Node, Pod, replace_pod
from .node_view import NodeBatch, NodeView

__all__ = ["BASE_RESOURCES", "CLUSTER_SCOPED_KINDS", "ClusterState", "NodeBatch", "NodeView", "PodEntry", "object_key"]

BASE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")


@attrs.define
class PodEntry:
    pod: Pod
    node_index: int = -1
    assumed: bool = False


#: kinds without a namespace: the API server ignores ``metadata.namespace`` on them, and so do we
CLUSTER_SCOPED_KINDS = frozenset({"Node", "NodeMetric", "Device", "NodeResourceTopology", "NodeSLO",
                                  "Reservation", "PriorityClass", "Namespace", "StorageClass",
                                  "PersistentVolume", "CSINode", "ClusterColocationProfile",
                                  "ClusterNetworkTopology"})


def object_key(kind: str, meta: Mapping[str, Any]) -> str:
    """How an object is looked up: ``namespace/name``, or the name alone for cluster-scoped kinds."""
    if meta.get("namespace") and kind not in CLUSTER_SCOPED_KINDS:
        return f"{meta['namespace']}/{meta['name']}"
    return str(meta.get("name"))


class ClusterState:
    """Everything an engine knows about the cluster. Not thread-safe; one event loop owns it."""

    def __init__(self) -> None:
        self.resources: list[str] = list(BASE_RESOURCES)
        self._res_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self._cap = 16
        self.num_nodes = 0
        self._alloc = np.zeros((self._cap, len(self.resources)), dtype=np.int64)
        self._req = np.zeros((self._cap, len(self.resources)), dtype=np.int64)
        self._version = np.zeros(self._cap, dtype=np.int64)
        self._unsched = np.zeros(self._cap, dtype=bool)
        self.views: list[NodeView] = []
        self._node_index: dict[str, int] = {}
        self._removed_nodes: set[int] = set()
        self.pods: dict[str, PodEntry] = {}  # by uid
        self._by_key: dict[str, str] = {}  # namespace/name -> uid
        #: priority -> how many pods naming a node carry it (preemption's "any lower-priority pod running")
        self._named_priorities: dict[int, int] = {}
        self._on_node: list[dict[str, Pod]] = []
        #: node name -> extra allocatable from node_resources plugins
        self.extra_allocatable: dict[str, dict[str, int]] = {}
        #: other objects by kind, then by "namespace/name" (or name for cluster-scoped)
        self.objects: dict[str, dict[str, dict]] = {}
        #: kind -> bumped on every set/delete of an object of the kind (objects_generation)
        self._kind_gen: dict[str, int] = {}
        #: (kind, key) -> the input file an object came from (the embedded cluster's input), so that an
        #: error a plugin raises about it can name the file
        self.sources: dict[tuple[str, str], str] = {}
        #: bumped on any change; ``free_generation`` only when capacity appears or is freed
        self.generation = 0
        self.free_generation = 0
        self._label_cache: dict[tuple[str, str | None], np.ndarray] = {}
        self._label_cache_gen = -1
        self._labels_gen = 0
        self._req_cache: dict[str, tuple[int, np.ndarray]] = {}
        #: uids of known pods (pending or not) with pod (anti-)affinity terms / required anti-affinity
        self._affinity_uids: set[str] = set()
        self._anti_uids: set[str] = set()
        #: pending pods nominated to a node (status.nominatedNodeName), by uid
        self._nominated: dict[str, Pod] = {}
        from .cluster_view import ReadOnlyCluster  # it imports this module

        #: its read-only view, the one plugins see (``handle.cluster``, ``NodeView.cluster``)
        self.view = ReadOnlyCluster(self)

    # -- columns --------------------------------------------------------------------------------
    @property
    def allocatable(self) -> np.ndarray:
        return self._alloc[: self.num_nodes]

    @property
    def requested(self) -> np.ndarray:
        return self._req[: self.num_nodes]

    @property
    def node_version(self) -> np.ndarray:
        return self._version[: self.num_nodes]

    @property
    def unschedulable_mask(self) -> np.ndarray:
        return self._unsched[: self.num_nodes]

    @property
    def live_mask(self) -> np.ndarray:
        """Nodes that exist (removed nodes keep their row, zeroed, until the cache is rebuilt)."""
        m = np.ones(self.num_nodes, dtype=bool)
        if self._removed_nodes:
            m[list(self._removed_nodes)] = False
        return m

    @property
    def has_removed_nodes(self) -> bool:
        """Whether some node rows are removed nodes (then ``live_mask`` is not all True)."""
        return bool(self._removed_nodes)

    @property
    def labels_generation(self) -> int:
        """Changes whenever any node's labels, taints or spec may have changed (for plugin caches)."""
        return self._labels_gen

    def resource_index(self, name: str) -> int:
        i = self._res_index.get(name)
        if i is None:
            i = len(self.resources)
            self.resources.append(name)
            self._res_index[name] = i
            self._alloc = np.hstack([self._alloc, np.zeros((self._cap, 1), dtype=np.int64)])
            self._req = np.hstack([self._req, np.zeros((self._cap, 1), dtype=np.int64)])
        return i

    def request_vector(self, pod: Pod) -> np.ndarray:
        """The pod's requests as a row aligned with ``resources`` (``pods`` counts 1)."""
        cached = self._req_cache.get(pod.uid)
        if cached is not None and cached[0] == len(self.resources) and cached[1] is not None:
            return cached[1]
        for r in pod.requests:
            self.resource_index(r)
        vec = np.zeros(len(self.resources), dtype=np.int64)
        for r, v in pod.requests.items():
            vec[self._res_index[r]] = v
        vec[self._res_index["pods"]] = 1
        self._req_cache[pod.uid] = (len(self.resources), vec)
        return vec

    def _grow(self) -> None:
        self._cap *= 2
        for name in ("_alloc", "_req"):
            a = getattr(self, name)
            b = np.zeros((self._cap, a.shape[1]), dtype=np.int64)
            b[: a.shape[0]] = a
            setattr(self, name, b)
        for name, dt in (("_version", np.int64), ("_unsched", bool)):
            a = getattr(self, name)
            b = np.zeros(self._cap, dtype=dt)
            b[: a.shape[0]] = a
            setattr(self, name, b)

    # -- nodes ----------------------------------------------------------------------------------
    def add_node(self, node: Node) -> NodeView:
        if node.name in self._node_index:
            return self.update_node(node)
        if self.num_nodes == self._cap:
            self._grow()
        i = self.num_nodes
        self.num_nodes += 1
        view = NodeView(self, i, node)
        self.views.append(view)
        self._on_node.append({})
        self._node_index[node.name] = i
        self._write_node_row(i, node)
        self._labels_gen += 1
        self.generation += 1
        self.free_generation += 1
        return view

    def update_node(self, node: Node) -> NodeView:
        i = self._node_index[node.name]
        returning = i in self._removed_nodes
        self._removed_nodes.discard(i)
        view = self.views[i]
        view.node = node
        self._write_node_row(i, node)
        if returning:  # re-registered: the pods that still name it count on it again
            for e in self.pods.values():
                if e.node_index < 0 and e.pod.node_name == node.name and not e.pod.is_terminal:
                    self._account(e, i)
        self._labels_gen += 1
        self._version[i] += 1
        self.generation += 1
        self.free_generation += 1
        return view

    def _write_node_row(self, i: int, node: Node) -> None:
        alloc = dict(node.allocatable)
        alloc.update(self.extra_allocatable.get(node.name, {}))
        for r in alloc:
            self.resource_index(r)
        self._alloc[i, :] = 0
        for r, v in alloc.items():
            self._alloc[i, self._res_index[r]] = v
        self._unsched[i] = node.unschedulable

    def has_room(self, i: int, vec: np.ndarray, need: np.ndarray | None = None) -> bool:
        """Is what node ``i`` has free (allocatable − requested) at least ``vec`` in the columns ``need``
        (default: every column ``vec`` requests)? Nominated pods are not counted."""
        if need is None:
            need = np.flatnonzero(vec)
        if len(need) == 0:
            return True
        return bool((self._alloc[i, need] - self._req[i, need] >= vec[need]).all())

    def add_requested(self, i: int, vec: np.ndarray) -> None:
        """Add ``vec`` (a request vector, possibly negative to undo) to node ``i``'s requested row
        without accounting a pod: the nominator's and what-if planners' temporary counting."""
        self._req[i, : len(vec)] += vec

    def set_extra_allocatable(self, node_name: str, extra: Mapping[str, int]) -> None:
        """Merge plugin-computed allocatable (``node_resources``) over the node's own; 0 removes."""
        cur = self.extra_allocatable.setdefault(node_name, {})
        for k, v in extra.items():
            cur[k] = int(v)
        i = self._node_index[node_name]
        self._write_node_row(i, self.views[i].node)
        self._version[i] += 1
        self.generation += 1
        self.free_generation += 1

    def remove_node(self, name: str) -> None:
        """Take a node out. Its pods stay known, unaccounted, with their ``node_name`` (kube-scheduler's
        cache keeps them too): the API deletes them on its own, and if the node comes back under the
        same name (re-registered) they are accounted on it again by :meth:`update_node`."""
        i = self._node_index.get(name)
        if i is None:
            return
        for uid in list(self._on_node[i]):
            entry = self.pods.get(uid)
            if entry is not None:
                self._unaccount(entry)
        self._removed_nodes.add(i)
        self._alloc[i, :] = 0
        self._unsched[i] = True
        self._version[i] += 1
        self._labels_gen += 1
        self.generation += 1

    def node(self, name: str) -> NodeView | None:
        i = self._node_index.get(name)
        if i is None or i in self._removed_nodes:
            return None
        return self.views[i]

    def node_index(self, name: str) -> int | None:
        i = self._node_index.get(name)
        return None if i is None or i in self._removed_nodes else i

    def indices_of(self, names: Sequence[str]) -> np.ndarray:
        """Column row of each named node; -1 for unknown or removed nodes (and non-string names)."""
        index = self._node_index
        idx = np.fromiter((index.get(n, -1) if isinstance(n, str) else -1 for n in names), dtype=np.int64,
                          count=len(names))
        if self._removed_nodes:
            idx[np.isin(idx, list(self._removed_nodes))] = -1
        return idx

    def forget_request_cache(self, uid: str) -> None:
        """Drop a pod's cached request vector (its requests changed, e.g. a newer copy of the pod)."""
        self._req_cache.pop(uid, None)

    @property
    def nodes(self) -> list[NodeView]:
        if not self._removed_nodes:
            return list(self.views)
        return [v for v in self.views if v.index not in self._removed_nodes]

    def label_mask(self, key: str, value: str | None = None) -> np.ndarray:
        """Nodes whose label ``key`` exists (``value`` None) or equals ``value``; cached."""
        if self._label_cache_gen != self._labels_gen:
            self._label_cache.clear()
            self._label_cache_gen = self._labels_gen
        m = self._label_cache.get((key, value))
        if m is None:
            if value is None:
                m = np.fromiter((key in v.node.labels for v in self.views), dtype=bool, count=self.num_nodes)
            else:
                m = np.fromiter((v.node.labels.get(key) == value for v in self.views), dtype=bool,
                                count=self.num_nodes)
            self._label_cache[(key, value)] = m
        return m

    # -- pods -----------------------------------------------------------------------------------
    @property
    def pods_with_affinity(self) -> int:
        """How many known pods (pending ones included) have pod affinity or anti-affinity terms: when
        none has, inter-pod affinity has nothing to check for pods without terms of their own."""
        return len(self._affinity_uids)

    @property
    def pods_with_required_anti_affinity(self) -> int:
        """How many known pods (pending ones included) have required pod anti-affinity terms."""
        return len(self._anti_uids)

    @property
    def nominated_pending_pods(self) -> list[Pod]:
        """Pending pods with a nominated node (preemption's nominees): the topology plugins count them
        on that node for pods of lower or equal priority, as kube's AddPod for nominated pods does."""
        return list(self._nominated.values()) if self._nominated else []

    def _index_nominated(self, pod: Pod) -> None:
        if pod.nominated_node_name and not pod.node_name:
            self._nominated[pod.uid] = pod
        else:
            self._nominated.pop(pod.uid, None)

    def _index_affinity(self, pod: Pod) -> None:
        if pod.has_pod_affinity:
            self._affinity_uids.add(pod.uid)
            if pod.has_required_anti_affinity:
                self._anti_uids.add(pod.uid)

    def add_pod(self, pod: Pod) -> None:
        """Add or replace a pod. A pod with ``node_name`` is accounted on that node."""
        old = self.pods.get(pod.uid)
        if old is not None:
            self.remove_pod(pod.uid)
        entry = PodEntry(pod)
        self.pods[pod.uid] = entry
        self._track(None, pod)
        self._by_key[pod.key] = pod.uid
        self._index_affinity(pod)
        self._index_nominated(pod)
        if pod.node_name and not pod.is_terminal:
            i = self._node_index.get(pod.node_name)
            if i is not None:
                self._account(entry, i)
        self.generation += 1

    def _track(self, old: Pod | None, new: Pod | None) -> None:
        """Keep the priorities of the pods naming a node counted as an entry's pod changes."""
        counts = self._named_priorities
        if old is not None and old.node_name:
            n = counts[old.priority] - 1
            if n:
                counts[old.priority] = n
            else:
                del counts[old.priority]
        if new is not None and new.node_name:
            counts[new.priority] = counts.get(new.priority, 0) + 1

    def lowest_named_priority(self) -> int | None:
        """The lowest priority of the pods naming a node (bound, assumed, or on a node that is gone),
        ``None`` without such pods."""
        return min(self._named_priorities) if self._named_priorities else None

    def _account(self, entry: PodEntry, i: int) -> None:
        # the vector first: a resource no node advertises yet grows the columns (and replaces ``_req``)
        vec = self.request_vector(entry.pod)
        entry.node_index = i
        self._req[i] += vec
        self._on_node[i][entry.pod.uid] = entry.pod
        self._version[i] += 1

    def _unaccount(self, entry: PodEntry) -> None:
        i = entry.node_index
        if i < 0:
            return
        vec = self.request_vector(entry.pod)
        self._req[i] -= vec
        self._on_node[i].pop(entry.pod.uid, None)
        self._version[i] += 1
        entry.node_index = -1
        self.free_generation += 1

    def remove_pod(self, uid: str) -> Pod | None:
        entry = self.pods.pop(uid, None)
        if entry is None:
            return None
        self._track(entry.pod, None)
        self._unaccount(entry)
        if self._by_key.get(entry.pod.key) == uid:
            del self._by_key[entry.pod.key]
        self._req_cache.pop(uid, None)
        self._affinity_uids.discard(uid)
        self._anti_uids.discard(uid)
        self._nominated.pop(uid, None)
        self.generation += 1
        self.free_generation += 1
        return entry.pod

    def assume(self, pod: Pod, node_name: str) -> Pod:
        """Account a pod on a node before binding (kube-scheduler's AssumePod)."""
        entry = self.pods.get(pod.uid)
        if entry is None:
            entry = PodEntry(pod)
            self.pods[pod.uid] = entry
            self._track(None, pod)
            self._by_key[pod.key] = pod.uid
            self._index_affinity(pod)
        self._unaccount(entry)
        assumed = replace_pod(entry.pod, node_name=node_name)
        self._nominated.pop(pod.uid, None)
        self._track(entry.pod, assumed)
        entry.pod = assumed
        entry.assumed = True
        self._account(entry, self._node_index[node_name])
        self.generation += 1
        return assumed

    def forget(self, pod: Pod) -> Pod:
        """Undo ``assume``: the pod is pending again."""
        entry = self.pods.get(pod.uid)
        if entry is None:
            return pod
        self._unaccount(entry)
        new = replace_pod(entry.pod, node_name=None)
        self._track(entry.pod, new)
        entry.pod = new
        self._index_nominated(entry.pod)
        entry.assumed = False
        self.generation += 1
        return entry.pod

    def confirm_bound(self, pod: Pod, node_name: str, annotations: Mapping[str, str] | None = None) -> Pod:
        """Record a finished binding (the pod's phase becomes Running in the embedded cluster)."""
        entry = self.pods.get(pod.uid)
        if entry is None or entry.node_index < 0 or self.views[entry.node_index].node.name != node_name:
            self.assume(pod, node_name)
            entry = self.pods[pod.uid]
        anns = dict(entry.pod.annotations)
        if annotations:
            anns.update(annotations)
        new = replace_pod(entry.pod, node_name=node_name, annotations=anns, phase="Running")
        i = entry.node_index
        self._on_node[i][pod.uid] = new
        self._track(entry.pod, new)
        entry.pod = new
        entry.assumed = False
        self._version[i] += 1
        self.generation += 1
        return new

    def update_pod_object(self, pod: Pod) -> None:
        """Replace a pod's object without changing its accounting (same requests, same node)."""
        entry = self.pods[pod.uid]
        self._track(entry.pod, pod)
        entry.pod = pod
        self._index_nominated(pod)
        if entry.node_index >= 0:
            self._on_node[entry.node_index][pod.uid] = pod
            self._version[entry.node_index] += 1
        self.generation += 1

    def pod(self, uid: str) -> Pod | None:
        e = self.pods.get(uid)
        return e.pod if e else None

    def pod_by_key(self, key: str) -> Pod | None:
        uid = self._by_key.get(key)
        return self.pod(uid) if uid else None

    def is_assumed(self, uid: str) -> bool:
        e = self.pods.get(uid)
        return bool(e and e.assumed)

    def pods_on(self, node_name: str) -> list[Pod]:
        i = self._node_index.get(node_name)
        return [] if i is None else list(self._on_node[i].values())

    def all_pods(self) -> list[Pod]:
        return [e.pod for e in self.pods.values()]

    def pending_pods(self) -> list[Pod]:
        """Pods not on any node and not naming one (a pod whose node is gone is not pending)."""
        return [e.pod for e in self.pods.values()
                if e.node_index < 0 and not e.pod.node_name and not e.pod.is_terminal]

    @contextlib.contextmanager
    def without_pods(self, node_name: str, pods: Sequence[Pod]) -> Iterator[None]:
        """Temporarily take pods off a node (preemption and descheduling what-ifs)."""
        i = self._node_index[node_name]
        removed = []
        for p in pods:
            if p.uid in self._on_node[i]:
                vec = self.request_vector(p)
                self._req[i] -= vec
                del self._on_node[i][p.uid]
                removed.append(p)
        self._version[i] += 1
        try:
            yield
        finally:
            for p in removed:
                vec = self.request_vector(p)
                self._req[i] += vec
                self._on_node[i][p.uid] = p
            self._version[i] += 1

    # -- other objects ----------------------------------------------------------------------------
    def set_object(self, kind: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        key = object_key(kind, meta)
        self.objects.setdefault(kind, {})[key] = obj
        self._kind_gen[kind] = self._kind_gen.get(kind, 0) + 1
        self.generation += 1
        self.free_generation += 1

    def delete_object(self, kind: str, key: str) -> None:
        self.objects.get(kind, {}).pop(key, None)
        self._kind_gen[kind] = self._kind_gen.get(kind, 0) + 1
        self.generation += 1

    def objects_generation(self, kind: str) -> int:
        """Bumped whenever an object of ``kind`` is set or deleted: a cache of one kind's objects is valid while
        it holds (cheaper than comparing the objects)."""
        return self._kind_gen.get(kind, 0)

    def objects_of(self, kind: str) -> dict[str, dict]:
        return self.objects.get(kind, {})

    def get_object(self, kind: str, key: str) -> dict | None:
        return self.objects.get(kind, {}).get(key)

    def node_metric(self, node_name: str) -> dict | None:
        """The node's ``NodeMetric`` object (``slo.koordinator.sh/v1alpha1``), if any."""
        return self.objects.get("NodeMetric", {}).get(node_name)

    def summary_row(self, view: NodeView) -> dict[str, Any]:
        return {"name": view.name, "allocatable": view.allocatable, "requested": view.requested,
                "pods": len(self._on_node[view.index])}
