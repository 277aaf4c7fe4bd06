"""A cheap necessary condition for a gang group to fit (the gang plugin's queueing hints and its
pre_filter use it to avoid re-trying a Strict group that cannot be placed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from koordfw import BoundedCache, Handle

from .gang import Gang


class RoomCheck:
    """Free room per node (lower-priority pods counted as room), cached by cluster generation."""

    def __init__(self) -> None:
        self._demand_cache: BoundedCache[tuple[Any, ...], bool] = BoundedCache(4096)
        self._room_key: tuple[int, int] | None = None
        self._room: np.ndarray | None = None
        self._lowest: tuple[int, int] | None = None

    def may_fit(self, g: Gang, gangs: Mapping[str, Gang], pod: Any, handle: Handle) -> bool:
        """A necessary condition for the pod's gang group to be placed: as many members as it still
        needs (min-available minus those reserved or bound) fit in the free room node by node, each
        counted at the size of the gang's smallest pending member; pods of lower priority count as
        room (preemption could free it)."""
        if g.spec is None:
            return True
        cluster = handle.cluster
        key = (cluster.generation, g.spec.group_id, pod.priority)
        hit = self._demand_cache.get(key)
        if hit is not None:
            return hit
        missing = 0
        smallest: np.ndarray | None = None
        for gid in g.spec.groups:
            m = gangs.get(gid)
            if m is None or m.spec is None or m.passes_once_satisfied:
                continue
            short = m.spec.min_member - len(m.waiting) - len(m.bound)
            if short <= 0:
                continue
            missing += short
            for u, p in m.children.items():
                if u not in m.waiting and u not in m.bound:
                    v = cluster.request_vector(p)
                    smallest = v if smallest is None else np.minimum(smallest[: len(v)], v[: len(smallest)])
        ok = True
        if missing and smallest is not None and smallest.any():
            free = self._free_room(cluster, pod.priority)
            k = min(free.shape[1], len(smallest))
            need = smallest[:k]
            cols = np.flatnonzero(need)
            fits_per_node = (free[:, cols] // need[cols]).min(axis=1)
            ok = int(fits_per_node.sum()) >= missing
        self._demand_cache[key] = ok
        return ok

    def _lowest_priority(self, cluster: Any) -> int:
        """The lowest priority of any pod in the cluster (rescanned when the number of pods changes)."""
        n = len(cluster.pods)
        if self._lowest is None or self._lowest[0] != n:
            self._lowest = (n, min((e.pod.priority for e in cluster.pods.values()), default=0))
        return self._lowest[1]

    def _free_room(self, cluster: Any, priority: int) -> np.ndarray:
        """Free room per live node (rows) and resource, plus the requests of pods of lower priority."""
        key = (cluster.generation, priority)
        if self._room_key == key and self._room is not None:
            return self._room
        room = np.clip(cluster.allocatable - cluster.requested, 0, None)
        if self._lowest_priority(cluster) < priority:
            for e in cluster.pods.values():
                if e.node_index >= 0 and e.pod.priority < priority:
                    v = cluster.request_vector(e.pod)
                    k = min(len(v), room.shape[1])
                    room[e.node_index, :k] += v[:k]
        if cluster.has_removed_nodes:
            room = room[cluster.live_mask]
        self._room_key, self._room = key, room
        return room
