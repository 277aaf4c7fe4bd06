"""image_locality: kube-scheduler's ImageLocality (``pkg/scheduler/framework/plugins/imagelocality/image_locality.go``).

Score: for each init container and container image of the pod (``name`` normalised to ``name:latest``
when it has no tag), the nodes whose ``status.images`` list that name add ``sizeBytes × (nodes with the
image / all nodes)``; the sum is clamped to [23 MiB, 1000 MiB × containers] and mapped linearly to
0..100. Pods whose images no node lists score 0 everywhere (pre_score Skip).

The image index (name → size and the nodes holding it) is rebuilt when nodes change.
"""

from __future__ import annotations

import weakref

import numpy as np

from koordfw import ClusterView, CycleState, NodeBatch, Pod, StateKey, Status, hookimpl
from koordfw.embed import cluster_view_of

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB

#: the pod's images found on some node: (node indices, their per-node scaled score)
IMAGES: StateKey[list[tuple[np.ndarray, np.ndarray]]] = StateKey("image_locality/images")


def normalized_image_name(name: str) -> str:
    """kube's normalizedImageName: ``:latest`` when the name has no tag after its last ``/``."""
    if name.rfind(":") <= name.rfind("/"):
        name += ":latest"
    return name


class ImageLocality:
    def __init__(self) -> None:
        self._cluster: weakref.ReferenceType[ClusterView] | None = None
        self._gen = -1
        #: image name → (node indices, size on each)
        self._index: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _images(self, cluster: ClusterView) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        key = cluster_view_of(cluster)  # the plugins' read-only view and the state are one cluster
        if self._cluster is None or self._cluster() is not key or self._gen != cluster.labels_generation:
            acc: dict[str, tuple[list[int], list[int]]] = {}
            live = cluster.live_mask if cluster.has_removed_nodes else None
            for i, v in enumerate(cluster.views):
                if live is not None and not live[i]:
                    continue
                for names, size in v.node.images:
                    for n in names:
                        nodes, sizes = acc.setdefault(n, ([], []))
                        if not nodes or nodes[-1] != i:
                            nodes.append(i)
                            sizes.append(size)
            self._index = {n: (np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)) for n, (a, b) in acc.items()}
            self._cluster, self._gen = weakref.ref(key), cluster.labels_generation
        return self._index

    @hookimpl
    def pre_score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> Status | None:
        if not pod.images:
            return Status.skip()
        cluster = nodes.cluster
        index = self._images(cluster)
        if not index:
            return Status.skip()
        total = len(cluster.nodes)
        found = []
        for image in pod.images:
            got = index.get(normalized_image_name(image))
            if got is not None:
                idx, sizes = got
                # kube's scaledImageScore: int64(float64(size) * numNodes / totalNumNodes)
                found.append((idx, (sizes.astype(np.float64) * (len(idx) / total)).astype(np.int64)))
        if not found:
            return Status.skip()
        state[IMAGES] = found
        return None

    @hookimpl
    def score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> np.ndarray | None:
        found = state.get(IMAGES)
        if not found:
            return None
        n = nodes.cluster.num_nodes
        per_node = np.zeros(n, dtype=np.int64)
        for idx, scaled in found:
            np.add.at(per_node, idx, scaled)
        sums = per_node[nodes.idx]
        max_threshold = MAX_CONTAINER_THRESHOLD * len(pod.images)
        sums = np.clip(sums, MIN_THRESHOLD, max_threshold)
        return 100 * (sums - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)
