"""What plugins are given of nodes: :class:`NodeView` (a node and its live accounting) and
:class:`NodeBatch` (the candidate nodes of one call, with their indices into the cluster's columns). Both
read the cluster through its read-only view (``.cluster``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

from .model import Node, Pod

if TYPE_CHECKING:
    from .cluster import ClusterState
    from .cluster_view import ReadOnlyCluster

__all__ = ["NodeBatch", "NodeView"]


class NodeView:
    """A node as plugins see it: the Node object plus its live accounting in the cluster (``cluster``: the
    read-only view of the cluster it is in)."""

    __slots__ = ("_state", "cluster", "index", "node")

    def __init__(self, cluster: ClusterState, index: int, node: Node) -> None:
        self._state, self.cluster, self.index, self.node = cluster, cluster.view, index, node

    name = property(lambda self: self.node.name)
    labels = property(lambda self: self.node.labels)
    annotations = property(lambda self: self.node.annotations)
    taints = property(lambda self: self.node.taints)
    unschedulable = property(lambda self: self.node.unschedulable)
    capacity = property(lambda self: self.node.capacity)

    @property
    def allocatable(self) -> dict[str, int]:
        row = self._state.allocatable[self.index]
        return {r: int(row[i]) for i, r in enumerate(self._state.resources) if row[i]}

    @property
    def requested(self) -> dict[str, int]:
        row = self._state.requested[self.index]
        return {r: int(row[i]) for i, r in enumerate(self._state.resources) if row[i]}

    def free(self, resource: str) -> int:
        i = self._state.resource_index(resource)
        return int(self._state.allocatable[self.index, i] - self._state.requested[self.index, i])

    @property
    def pods(self) -> list[Pod]:
        return self._state.pods_on(self.node.name)

    @property
    def version(self) -> int:
        return int(self._state.node_version[self.index])

    def __repr__(self) -> str:
        return f"NodeView({self.node.name!r})"


class NodeBatch(Sequence[NodeView]):
    """Candidate nodes of one plugin call: NodeViews, plus ``idx`` into the cluster's columns (``cluster``:
    the read-only view of the cluster)."""

    __slots__ = ("cluster", "idx")

    def __init__(self, cluster: ClusterState | ReadOnlyCluster, idx: np.ndarray) -> None:
        self.cluster: ReadOnlyCluster = cluster.view  # the view's own view is itself
        self.idx = idx

    def __len__(self) -> int:
        return len(self.idx)

    @overload
    def __getitem__(self, i: int) -> NodeView: ...

    @overload
    def __getitem__(self, i: slice) -> NodeBatch: ...

    def __getitem__(self, i: int | slice) -> NodeView | NodeBatch:
        if isinstance(i, slice):
            return NodeBatch(self.cluster, self.idx[i])
        return self.cluster.views[int(self.idx[i])]

    def __iter__(self) -> Iterator[NodeView]:
        views = self.cluster.views
        return (views[i] for i in self.idx.tolist())

    @property
    def names(self) -> list[str]:
        nodes = self.cluster.views
        return [nodes[i].node.name for i in self.idx.tolist()]

    def column(self, name: str) -> np.ndarray:
        """Free amount of a resource on each node of the batch (allocatable − requested)."""
        i = self.cluster.resource_index(name)
        return self.cluster.allocatable[self.idx, i] - self.cluster.requested[self.idx, i]
