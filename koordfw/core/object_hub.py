"""The cluster's other objects (CRDs and the like) as a scheduler's plugins watch and write them: who
watches which kind (``handle.watch_objects``), delivering changes to them, and the writes
(``handle.update_object_status``, ``handle.patch_object``) that go to the engine and back into the
cluster's cache."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from .cluster import ClusterState
from .events import SchedulerEvents

log = structlog.get_logger("koordfw")

#: a watcher: (key, old object or None, new object or None)
Watcher = Callable[[str, Any, Any], None]


class ObjectHub:
    """One per scheduler. ``engine`` gives the engine that writes (it may be set after the hub is made)."""

    def __init__(self, cluster: ClusterState, engine: Callable[[], SchedulerEvents]) -> None:
        self.cluster, self.engine = cluster, engine
        #: kind → (plugin, callback) of ``handle.watch_objects``
        self.watchers: dict[str, list[tuple[str, Watcher]]] = {}
        #: changes are delivered (the live engine clears it until its caches have synced, then replays)
        self.live = True

    def watch(self, kind: str, plugin: str, callback: Watcher) -> None:
        self.watchers.setdefault(kind, []).append((plugin, callback))

    def object_changed(self, kind: str, key: str, old: dict | None, new: dict | None, *, skip: str = "") -> None:
        """An object of ``kind`` changed in the cluster (already applied there): tell the plugins watching
        the kind (``handle.watch_objects``) but ``skip``; a watcher's exception is logged, never raised."""
        if not self.live:
            return
        for plugin, cb in self.watchers.get(kind, ()):
            if plugin == skip:
                continue
            try:
                cb(key, old, new)
            except Exception:
                log.exception("object watcher failed", plugin=plugin, kind=kind, key=key)

    def replay_objects(self) -> None:
        """Start delivering object changes, first every cached object of a watched kind as an add (the live
        engine, once its caches have synced)."""
        self.live = True
        for kind in list(self.watchers):
            for key, obj in sorted(self.cluster.objects_of(kind).items()):
                self.object_changed(kind, key, None, obj)

    def update_object_status(self, kind: str, key: str, status: Mapping[str, Any], *, writer: str = "") -> bool:
        """``handle.update_object_status``: the cached object gets ``status`` (a new dict, so that readers of
        the old one are not changed under them) and the engine writes it; watchers but ``writer`` hear."""
        old = self.cluster.get_object(kind, key)
        if old is None:
            return False
        new = {**old, "status": copy.deepcopy(dict(status))}
        self.cluster.set_object(kind, new)
        self.engine().object_status_written(kind, new)
        self.object_changed(kind, key, old, new, skip=writer)
        return True

    async def patch_object(self, kind: str, key: str, patch: Mapping[str, Any], *,
                           precondition: Callable[[Mapping[str, Any]], bool] | None = None,
                           writer: str = "") -> dict[str, Any] | None:
        """``handle.patch_object``: the engine writes the merge patch (checking ``precondition``), then the
        cluster keeps what it wrote, unless the cache already holds a newer version (the watch's echo of a
        later change); watchers but ``writer`` hear."""
        if "status" in patch:
            raise ValueError("patch_object writes metadata and spec; a status goes through update_object_status")
        old = self.cluster.get_object(kind, key)
        if old is None or (precondition is not None and not precondition(old)):
            return None
        new = await self.engine().patch_object(kind, old, patch, precondition)
        if new is None:
            return None
        cur = self.cluster.get_object(kind, key)
        if cur is not None and _newer(cur, new):
            return new
        self.cluster.set_object(kind, new)
        self.object_changed(kind, key, cur, new, skip=writer)
        return new

def _newer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Is object ``a`` a later version than ``b`` (both with numeric resourceVersions)?"""
    try:
        return int((a.get("metadata") or {}).get("resourceVersion") or "") > int(
            (b.get("metadata") or {}).get("resourceVersion") or "")
    except (TypeError, ValueError):
        return False
