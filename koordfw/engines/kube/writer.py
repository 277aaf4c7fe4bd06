"""What the scheduler writes besides bindings: PodScheduled=False status patches and events.

Both are queued and written by a background task so that a slow or rate-limited API never stalls a
scheduling cycle. Status patches are coalesced per pod (only the newest reason is written, and not
at all when the pod already carries it); events use their own client (kube-scheduler gives its event
recorder a separate clientset, so events do not eat the binding QPS) and a repeated identical
FailedScheduling for a pod is not re-sent. Up to ``event_concurrency`` events are in flight at once
(client-go's broadcaster records each event in a goroutine of its own): written one by one, the
Scheduled events of a 500 pods/s burst fell minutes behind the bindings.

``status.nominatedNodeName`` follows the kernel's nominator as kube-scheduler's ``updatePod`` does: a
failed pod's patch writes the node preemption nominated it to, and clears a nomination the pod carries
when the kernel no longer nominates it (``nominated=""``); a nomination that ended because the pod is
bound is cleared by ``clear_nomination`` (servers with ClearingNominatedNodeNameAfterBinding clear it
at binding, and then nothing is written).

Object statuses (a plugin's ``handle.update_object_status``, e.g. a Reservation's) are PUT to the
object's ``/status`` with the cached ``resourceVersion``, coalesced per object; on a 409 Conflict the object
is read again and the status put on the newest version (client-go's ``RetryOnConflict``, which
Koordinator's controllers use), a 404 drops it (the object is gone).

Every write first asks ``leading()``: a replica that is not (or no longer) the leader writes nothing,
and what it had queued is dropped (the new leader writes its own).
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable

import anyio
import structlog

from ...core.model import Pod
from .client import ApiError, KubeClient

log = structlog.get_logger("koordfw.kube")

NOTE_LIMIT = 1024  # events.k8s.io/v1 note must be shorter than 1 kB


def _micro_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writer:
    def __init__(self, client: KubeClient, event_client: KubeClient | None, *, controller: str, instance: str,
                 max_events: int = 10_000, leading: Callable[[], bool] | None = None,
                 event_concurrency: int = 16) -> None:
        self.client, self.event_client = client, event_client or client
        self.controller, self.instance = controller, instance
        self.leading = leading
        #: uid → (pod, reason, message, nominated); reason "" is a nomination clear only
        self._status: OrderedDict[str, tuple[Pod, str, str, str | None]] = OrderedDict()
        self.not_leading_dropped = 0
        self.nominations_cleared = 0
        self._events: deque[dict] = deque()
        self.event_concurrency = max(1, event_concurrency)
        self._events_wake = anyio.Event()
        #: path of an object's status subresource → the object with the status to write
        self._objects: OrderedDict[str, dict] = OrderedDict()
        self.object_status_writes = 0
        self.object_status_conflicts = 0
        self._last_failure_note: dict[str, str] = {}
        self._wake = anyio.Event()
        self.max_events = max_events
        self.dropped_events = 0
        self.status_patches = 0
        self.events_sent = 0

    # -- queueing -----------------------------------------------------------------------------------
    def unschedulable(self, pod: Pod, reason: str, message: str, nominated: str | None = None) -> None:
        """Queue a PodScheduled=False patch and a FailedScheduling event. ``nominated``: a node name is
        written as ``status.nominatedNodeName`` (preemption picked it), ``""`` clears the one the pod
        carries (its nomination was dropped), None leaves it as it is."""
        self._status[pod.uid] = (pod, reason, message, nominated)
        self._status.move_to_end(pod.uid)
        if self._last_failure_note.get(pod.uid) != message:
            self._last_failure_note[pod.uid] = message
            self.event(pod, "Warning", "FailedScheduling", "Scheduling", message)
        self._wake.set()

    def held(self, pod: Pod, message: str) -> None:
        """A pod a plugin's pre_enqueue holds: PodScheduled=False (reason Unschedulable) with why, written when the
        reason changes (a held pod is re-checked on many cluster events)."""
        if self._last_failure_note.get(pod.uid) == message:
            return
        self.unschedulable(pod, "Unschedulable", message)

    def clear_nomination(self, pod: Pod) -> None:
        """Queue clearing ``status.nominatedNodeName`` of a pod whose nomination ended (it is bound, or a
        preemptor of higher priority took the node);
        nothing is written when ``pod`` (the newest object seen) carries none."""
        if not ((pod.raw or {}).get("status") or {}).get("nominatedNodeName"):
            return
        if pod.uid in self._status:
            return  # a queued patch for this pod is newer than this request
        self._status[pod.uid] = (pod, "", "", "")
        self._wake.set()

    def object_status(self, path: str, obj: dict) -> None:
        """Queue a PUT of ``obj``'s status to ``path`` (``.../<plural>/<name>/status``); a newer one for the same
        object replaces it."""
        self._objects[path] = obj
        self._objects.move_to_end(path)
        self._wake.set()

    def _may_write(self, what: str) -> bool:
        if self.leading is None or self.leading():
            return True
        self.not_leading_dropped += 1
        log.debug("not the leader; not writing", what=what)
        return False

    def scheduled(self, pod: Pod, node: str) -> None:
        self._status.pop(pod.uid, None)
        self._last_failure_note.pop(pod.uid, None)
        self.event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {pod.namespace}/{pod.name} to {node}")

    def forget(self, uid: str) -> None:
        self._status.pop(uid, None)
        self._last_failure_note.pop(uid, None)

    def object_event(self, regarding: dict, etype: str, reason: str, action: str, note: str) -> None:
        """Queue an Event about any object (``regarding``: an ObjectReference with apiVersion, kind,
        namespace, name and, when known, uid): a plugin's ``handle.events.eventf``."""
        if len(self._events) >= self.max_events:
            self.dropped_events += 1
            return
        if len(note) >= NOTE_LIMIT:
            note = note[: NOTE_LIMIT - 4] + "..."
        self._events.append({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{regarding['name']}.{secrets.token_hex(8)}",
                         "namespace": regarding.get("namespace") or "default"},
            "eventTime": _micro_now(), "reportingController": self.controller, "reportingInstance": self.instance,
            "action": action, "reason": reason, "type": etype, "regarding": regarding, "note": note})
        self._events_wake.set()

    def event(self, pod: Pod, etype: str, reason: str, action: str, note: str) -> None:
        self.object_event({"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                           "uid": pod.uid}, etype, reason, action, note)

    @property
    def pending(self) -> int:
        return len(self._status) + len(self._events) + len(self._objects)

    # -- writing ------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Write until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run_status)
            for _ in range(self.event_concurrency):
                tg.start_soon(self._run_events)

    async def drain(self, timeout: float = 10.0) -> None:
        """Write what is queued (graceful shutdown)."""
        with anyio.move_on_after(timeout):
            while self._status:
                await self._write_one_status()
            while self._objects:
                await self._write_one_object()
            while self._events:
                await self._write_one_event()

    async def _run_status(self) -> None:
        while True:
            if self._objects:
                await self._write_one_object()
                continue
            if not self._status:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            await self._write_one_status()

    async def _run_events(self) -> None:
        while True:
            if not self._events:
                if self._events_wake.is_set():
                    self._events_wake = anyio.Event()
                await self._events_wake.wait()
                continue
            await self._write_one_event()

    async def _write_one_status(self) -> None:
        uid, (pod, reason, message, nominated) = self._status.popitem(last=False)
        status = (pod.raw or {}).get("status") or {}
        have = status.get("nominatedNodeName") or ""
        nnn_ok = nominated is None or have == nominated
        body: dict = {"status": {}}
        if reason:
            conds = status.get("conditions") or []
            if nnn_ok and any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                              and c.get("reason") == reason and c.get("message") == message for c in conds):
                return  # already there
            body["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason,
                                             "message": message, "lastProbeTime": None,
                                             "lastTransitionTime": _now()}]
        elif nnn_ok:
            return
        if not nnn_ok:
            # "" clears it: null deletes the field in a strategic merge patch
            body["status"]["nominatedNodeName"] = nominated or None
        if not self._may_write(f"status of {pod.key}"):
            return
        try:
            await self.client.request("PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                                      body=body, content_type="application/strategic-merge-patch+json")
            self.status_patches += 1
            if "nominatedNodeName" in body["status"] and not nominated:
                self.nominations_cleared += 1
        except ApiError as e:
            if e.status == 404:
                return
            log.warning("could not patch pod status", pod=pod.key, error=str(e))
            if e.retryable and uid not in self._status:
                self._status[uid] = (pod, reason, message, nominated)
                await anyio.sleep(0.5)

    async def _write_one_object(self, attempts: int = 5) -> None:
        path, obj = self._objects.popitem(last=False)
        meta = obj.get("metadata") or {}
        what = f"status of {obj.get('kind')} {meta.get('name')}"
        if not self._may_write(what):
            return
        body = obj
        for _ in range(attempts):
            try:
                await self.client.request("PUT", path, body=body)
                self.object_status_writes += 1
                return
            except ApiError as e:
                if e.status == 404 and path.endswith("/status"):
                    # gone, or a CRD without the status subresource (Koordinator's PodGroup): there the status
                    # is written with the object itself
                    path = path[: -len("/status")]
                    try:
                        cur = await self.client.request("GET", path)
                    except ApiError:
                        return
                    if (cur.get("metadata") or {}).get("uid") != meta.get("uid"):
                        return
                    body = {**cur, "status": obj.get("status")}
                    continue
                if e.status == 404:
                    return
                if e.status == 409:
                    # the object changed since it was cached: put the status on its newest version
                    self.object_status_conflicts += 1
                    try:
                        cur = await self.client.request("GET", path.removesuffix("/status"))
                    except ApiError as g:
                        if g.status == 404:
                            return
                        log.warning("could not re-read an object to write its status", what=what, error=str(g))
                        break
                    if (cur.get("metadata") or {}).get("uid") != meta.get("uid"):
                        return  # deleted and recreated: the status was about the old object
                    body = {**cur, "status": obj.get("status")}
                    if not self._may_write(what):
                        return
                    continue
                log.warning("could not write an object's status", what=what, error=str(e))
                if e.retryable and path not in self._objects:
                    self._objects[path] = obj
                    await anyio.sleep(0.5)
                return
        if path not in self._objects:  # still conflicting: try again later
            self._objects[path] = obj
            await anyio.sleep(0.5)

    async def _write_one_event(self) -> None:
        ev = self._events.popleft()
        if not self._may_write(f"event {ev['reason']}"):
            return
        try:
            await self.event_client.request("POST", f"/apis/events.k8s.io/v1/namespaces/{ev['metadata']['namespace']}/events",
                                            body=ev)
            self.events_sent += 1
        except ApiError as e:
            log.info("could not write event", reason=ev["reason"], error=str(e))
            if e.retryable:
                await anyio.sleep(0.5)
