"""What the scheduler writes besides bindings: PodScheduled=False status patches and events.

Both are queued and written by a background task so that a slow or rate-limited API never stalls a
scheduling cycle. Status patches are coalesced per pod (only the newest reason is written, and not
at all when the pod already carries it); events use their own client (kube-scheduler gives its event
recorder a separate clientset, so events do not eat the binding QPS) and a repeated identical
FailedScheduling for a pod is not re-sent.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections import OrderedDict

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
                 max_events: int = 10_000) -> None:
        self.client, self.event_client = client, event_client or client
        self.controller, self.instance = controller, instance
        self._status: OrderedDict[str, tuple[Pod, str, str, str | None]] = OrderedDict()
        self._events: list[dict] = []
        self._last_failure_note: dict[str, str] = {}
        self._wake = anyio.Event()
        self.max_events = max_events
        self.dropped_events = 0
        self.status_patches = 0
        self.events_sent = 0

    # -- queueing -----------------------------------------------------------------------------------
    def unschedulable(self, pod: Pod, reason: str, message: str, nominated: str | None = None) -> None:
        """Queue a PodScheduled=False patch (with ``status.nominatedNodeName`` when preemption picked a
        node for the pod, as kube-scheduler writes it) and a FailedScheduling event."""
        self._status[pod.uid] = (pod, reason, message, nominated)
        self._status.move_to_end(pod.uid)
        if self._last_failure_note.get(pod.uid) != message:
            self._last_failure_note[pod.uid] = message
            self.event(pod, "Warning", "FailedScheduling", "Scheduling", message)
        self._wake.set()

    def scheduled(self, pod: Pod, node: str) -> None:
        self._status.pop(pod.uid, None)
        self._last_failure_note.pop(pod.uid, None)
        self.event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {pod.namespace}/{pod.name} to {node}")

    def forget(self, uid: str) -> None:
        self._status.pop(uid, None)
        self._last_failure_note.pop(uid, None)

    def event(self, pod: Pod, etype: str, reason: str, action: str, note: str) -> None:
        if len(self._events) >= self.max_events:
            self.dropped_events += 1
            return
        if len(note) >= NOTE_LIMIT:
            note = note[: NOTE_LIMIT - 4] + "..."
        self._events.append({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{pod.name}.{secrets.token_hex(8)}", "namespace": pod.namespace},
            "eventTime": _micro_now(), "reportingController": self.controller, "reportingInstance": self.instance,
            "action": action, "reason": reason, "type": etype,
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                          "uid": pod.uid},
            "note": note})
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._status) + len(self._events)

    # -- writing ------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Write until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run_status)
            tg.start_soon(self._run_events)

    async def drain(self, timeout: float = 10.0) -> None:
        """Write what is queued (graceful shutdown)."""
        with anyio.move_on_after(timeout):
            while self._status:
                await self._write_one_status()
            while self._events:
                await self._write_one_event()

    async def _run_status(self) -> None:
        while True:
            if not self._status:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            await self._write_one_status()

    async def _run_events(self) -> None:
        while True:
            if not self._events:
                await anyio.sleep(0.05)
                continue
            await self._write_one_event()

    async def _write_one_status(self) -> None:
        uid, (pod, reason, message, nominated) = self._status.popitem(last=False)
        status = (pod.raw or {}).get("status") or {}
        conds = status.get("conditions") or []
        for c in conds:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == reason \
                    and c.get("message") == message and (nominated is None or status.get("nominatedNodeName") == nominated):
                return  # already there
        body: dict = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": reason,
                                                 "message": message, "lastProbeTime": None,
                                                 "lastTransitionTime": _now()}]}}
        if nominated is not None:
            body["status"]["nominatedNodeName"] = nominated
        try:
            await self.client.request("PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                                      body=body, content_type="application/strategic-merge-patch+json")
            self.status_patches += 1
        except ApiError as e:
            if e.status == 404:
                return
            log.warning("could not patch pod status", pod=pod.key, error=str(e))
            if e.retryable and uid not in self._status:
                self._status[uid] = (pod, reason, message, nominated)
                await anyio.sleep(0.5)

    async def _write_one_event(self) -> None:
        ev = self._events.pop(0)
        try:
            await self.event_client.request("POST", f"/apis/events.k8s.io/v1/namespaces/{ev['metadata']['namespace']}/events",
                                            body=ev)
            self.events_sent += 1
        except ApiError as e:
            log.info("could not write event", reason=ev["reason"], error=str(e))
            if e.retryable:
                await anyio.sleep(0.5)
