"""Feeding the kernel's cluster cache from reflectors, the way kube-scheduler's informers do.

* Pods: every non-terminal pod of the cluster. Assigned pods are accounted on their node; pending
  pods whose ``spec.schedulerName`` is ours go to the queue (when the feeder queues at all); pending
  pods of other schedulers are not kept.
* A pod whose binding cycle is in flight is left alone until the cycle ends (``resync``): the
  assumed reservation must not be replaced under it.
* Updates that change only ``status`` or ``resourceVersion`` (our own PodScheduled patches) do not
  re-activate a pod, as kube-scheduler's ``isPodUpdated``; other updates move an unschedulable pod to
  the backoff queue while its backoff lasts, else to the active queue (``PriorityQueue.Update``).
* Nodes: an update that changes nothing the plugins read does not wake unschedulable pods.
* Other kinds (NodeMetric, ...) go to ``cluster.set_object``; their change events are coalesced.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ...core.errors import KoordfwError
from ...core.hints import NODE_ADD, NODE_DELETE, NODE_UPDATE, ClusterEvent
from ...core.model import Pod, node_from_manifest, pod_from_manifest
from ...core.schedule_one import Scheduler

log = structlog.get_logger("koordfw.kube")


def _pod_sig(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return json.dumps([meta.get("labels"), meta.get("annotations"), meta.get("deletionTimestamp"),
                       obj.get("spec")], sort_keys=True, default=str)


def _node_sig(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    st = obj.get("status") or {}
    return json.dumps([meta.get("labels"), meta.get("annotations"), obj.get("spec"), st.get("allocatable"),
                       st.get("capacity")], sort_keys=True, default=str)


class ClusterFeeder:
    def __init__(self, scheduler: Scheduler, *, scheduler_name: str | None, object_event_interval: float = 1.0) -> None:
        self.s = scheduler
        self.cluster = scheduler.cluster
        self.scheduler_name = scheduler_name  # None: keep the cache only, queue nothing (the extender)
        self.gated: dict[str, dict] = {}  # uid -> pod object held back by spec.schedulingGates
        self._sigs: dict[str, str] = {}
        self._node_sigs: dict[str, str] = {}
        self._pod_objs: dict[str, dict] = {}  # uid -> latest object seen for our in-flight pods
        #: an object's changes within this many seconds of the one that was passed on are not events again (a
        #: NodeMetric or a status rewritten in a burst); distinct objects are never coalesced, so a PodGroup listed
        #: right after an ElasticQuota still re-checks the pods it gated
        self.object_event_interval = object_event_interval
        self._last_object_event: dict[tuple[str, str], float] = {}
        self.bad_objects = 0
        self.wakeup: Any = None  # an anyio.Event set when pods become active
        #: called with an assigned pod of ours that still carries status.nominatedNodeName (its
        #: nomination ended with the binding; the engine's writer clears it)
        self.nomination_ended: Callable[[Pod], None] | None = None

    def _bound(self, pod: Pod) -> None:
        if (self.nomination_ended is not None and pod.nominated_node_name and self.scheduler_name is not None
                and pod.scheduler_name == self.scheduler_name):
            self.nomination_ended(pod)

    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup.set()

    # -- pods ---------------------------------------------------------------------------------------
    async def on_pod(self, etype: str, obj: dict, old: dict | None) -> None:
        try:
            await self._on_pod(etype, obj)
        except KoordfwError as e:
            self.bad_objects += 1
            meta = obj.get("metadata") or {}
            log.error("ignoring a pod the model cannot read", pod=f"{meta.get('namespace')}/{meta.get('name')}",
                      error=str(e))

    async def _on_pod(self, etype: str, obj: dict) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        if etype == "DELETED" or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._pod_objs.pop(uid, None)
            self._sigs.pop(uid, None)
            self.gated.pop(uid, None)
            if uid in self.cluster.pods or self.s.queue.info(uid) is not None:
                await self.s.remove_pod(uid)
            return
        s = self.s
        in_flight = uid in s.queue.in_flight
        if in_flight:
            self._pod_objs[uid] = obj  # applied when the binding cycle ends
            if obj.get("metadata", {}).get("deletionTimestamp") and not (obj.get("spec") or {}).get("nodeName"):
                wp = s.waiting_pods.get(uid)
                if wp is not None:
                    wp.reject("", "pod is being deleted")
            return
        pod = pod_from_manifest(obj)
        if pod.node_name:
            self.gated.pop(uid, None)
            self._sigs.pop(uid, None)
            info = s.queue.info(uid)
            if info is not None:
                s.queue.done(uid)  # bound by someone else (or by us, before a restart)
            await s.add_pod(pod)
            self._bound(pod)
            return
        if self.cluster.is_assumed(uid):
            # bound by us, and this older unassigned copy was written before the binding (e.g. our
            # annotation patch): kube-scheduler's cache skips updates of assumed pods likewise
            return
        if self.scheduler_name is None or pod.scheduler_name != self.scheduler_name:
            if uid in self.cluster.pods:
                await s.remove_pod(uid)
            return
        if pod.deletion_timestamp is not None:
            self.gated.pop(uid, None)
            if uid in self.cluster.pods or s.queue.info(uid) is not None:
                await s.remove_pod(uid)
            return
        if (obj.get("spec") or {}).get("schedulingGates"):
            # kube-scheduler's SchedulingGates PreEnqueue: not scheduled until the gates are removed
            self.gated[uid] = obj
            if s.queue.info(uid) is not None:
                s.queue.done(uid)
            self.cluster.remove_pod(uid)
            return
        self.gated.pop(uid, None)
        sig = _pod_sig(obj)
        prev = self._sigs.get(uid)
        self._sigs[uid] = sig
        info = s.queue.info(uid)
        if info is None:
            await s.add_pod(pod)
            self._wake()
            return
        self.cluster.add_pod(pod)
        info.pod = pod
        if prev != sig and uid in s.queue.unschedulable:
            # kube's PriorityQueue.Update: an updated unschedulable pod moves to the backoff queue while
            # its backoff lasts, else to the active queue; a gated one passes pre_enqueue first
            if info.gated:
                st = await s.framework.run_pre_enqueue(pod)
                if not st.ok:
                    info.gate_reason = st.message
                    return
            s.queue.move_to_active_or_backoff(info, s.clock.now())
            self._wake()

    def resync(self, uid: str) -> None:
        """After a binding cycle: apply the newest object the watch delivered meanwhile."""
        obj = self._pod_objs.pop(uid, None)
        if obj is None:
            return
        try:
            pod = pod_from_manifest(obj)
        except KoordfwError:
            return
        if pod.node_name:
            self.cluster.add_pod(pod)
            self._bound(pod)
            return
        if pod.deletion_timestamp is not None or pod.is_terminal:
            self.cluster.remove_pod(uid)
            self.s.queue.done(uid)

    # -- nodes --------------------------------------------------------------------------------------
    async def on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        try:
            if etype == "DELETED":
                self._node_sigs.pop(name, None)
                view = self.cluster.node(name)
                if view is not None:
                    gone = view.node
                    self.cluster.remove_node(name)
                    await self.s.cluster_event(NODE_DELETE, gone, None)
                return
            sig = _node_sig(obj)
            if self._node_sigs.get(name) == sig and self.cluster.node(name) is not None:
                return  # a heartbeat: nothing the plugins read has changed
            self._node_sigs[name] = sig
            node = node_from_manifest(obj)
        except KoordfwError as e:
            self.bad_objects += 1
            log.error("ignoring a node the model cannot read", node=name, error=str(e))
            return
        prev = self.cluster.node(name)
        before = prev.node if prev is not None else None
        known = prev is not None
        if known:
            self.cluster.update_node(node)
        else:
            self.cluster.add_node(node)
            # pods that named this node before it arrived are accounted now
            for entry in list(self.cluster.pods.values()):
                if entry.pod.node_name == name and entry.node_index < 0 and not entry.pod.is_terminal:
                    self.cluster.add_pod(entry.pod)
        await self.s.cluster_event(NODE_UPDATE if known else NODE_ADD, before, node)
        self._wake()

    # -- other kinds --------------------------------------------------------------------------------
    def object_handler(self, kind: str) -> Callable[[str, dict, dict | None], Awaitable[None]]:
        async def handle(etype: str, obj: dict, old: dict | None) -> None:
            meta = obj.get("metadata") or {}
            key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))
            cached = self.cluster.get_object(kind, key)
            if etype == "DELETED":
                self.cluster.delete_object(kind, key)
            else:
                self.cluster.set_object(kind, obj)
            if self.s.objects.watchers.get(kind):  # plugins keeping these objects (handle.watch_objects)
                self.s.objects.object_changed(kind, key, cached, None if etype == "DELETED" else obj)
                self._wake()
            now = time.monotonic()
            last = self._last_object_event.pop((kind, key), None) if etype == "DELETED" else \
                self._last_object_event.get((kind, key))
            if etype == "DELETED" or last is None or now - last >= self.object_event_interval:
                if etype != "DELETED":
                    self._last_object_event[(kind, key)] = now
                action = "Delete" if etype == "DELETED" else "Add" if old is None else "Update"
                await self.s.cluster_event(ClusterEvent(kind, action), old, None if etype == "DELETED" else obj)
                self._wake()
        return handle
