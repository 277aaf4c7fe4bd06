"""What the scheduler tells, and asks of, the engine that drives it: one explicit protocol.

An engine (the embedded cluster, the live kube-scheduler engine, the extender) subclasses
:class:`SchedulerEvents` and overrides what it cares about; the defaults do nothing, and ``bind`` /
``evict`` refuse (an engine that never binds, such as the extender's per-request scheduler, keeps
those). The scheduler calls, for each pod:

* ``pod_enqueued`` (may return a replacement pod), then ``pod_gated`` if pre_enqueue holds it (and again
  each time the queue re-checks it and it is still held);
* per attempt ``cycle_started`` and ``cycle_finished`` around the scheduling cycle;
* on success ``bind`` (from the bind plugin) then ``pod_bound`` — within the cycle when binding runs
  inline (the embedded cluster), later in the binding task otherwise;
* on failure ``attempt_failed`` (before post_filter runs) then ``pod_unschedulable`` once requeued;
* ``pod_removed`` when a pod leaves the cluster; ``evict`` when a plugin evicts a pod;
* ``object_status_written`` and ``patch_object`` when a plugin writes another object (a Reservation's
  status; a PersistentVolume's ``claimRef``, a claim's ``selected-node``).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog

from .model import Pod
from .state import CycleState
from .status import Status

log = structlog.get_logger("koordfw")


@attrs.frozen
class Event:
    """One recorded Kubernetes-style Event (kept by :class:`EventLog`)."""

    regarding: str
    type: str
    reason: str
    message: str


class EventLog:
    """The default event recorder: the last ``maxlen`` events in memory, each also logged."""

    def __init__(self, maxlen: int = 10_000) -> None:
        self.events: deque[Event] = deque(maxlen=maxlen)

    def eventf(self, regarding: str, type: str, reason: str, message: str) -> None:
        self.events.append(Event(regarding, type, reason, message))
        log.info("event", regarding=regarding, type=type, reason=reason, message=message)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: ``patch`` applied to a deep copy of ``target`` (a ``None`` value deletes a
    key, a mapping merges into a mapping, anything else, lists included, replaces)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class SchedulerEvents:
    """The engine side of a :class:`~koordfw.core.schedule_one.Scheduler` (no-op defaults)."""

    def pod_enqueued(self, pod: Pod) -> Pod | None:
        """A pending pod is about to be queued; return a replacement (e.g. nominated to a node a
        descheduling migration reserved for it) or None to keep it."""
        return None

    def pod_gated(self, pod: Pod, status: Status) -> None:
        """pre_enqueue held the pod, on enqueue or on a re-check (``status`` says which plugin and why)."""

    def cycle_started(self, pod: Pod) -> None:
        """A scheduling cycle of ``pod`` (one attempt) begins."""

    def cycle_finished(self, pod: Pod, seconds: float) -> None:
        """A scheduling cycle of ``pod`` ended (bound, waiting, binding or failed), after ``seconds``."""

    def pod_bound(self, pod: Pod, node_name: str, state: CycleState) -> None:
        """The binding cycle bound ``pod``; ``state.annotations`` holds what pre_bind plugins wrote."""

    def attempt_failed(self, pod: Pod) -> None:
        """An attempt failed (scheduling or binding cycle), before post_filter runs."""

    async def pod_unschedulable(self, pod: Pod, status: Status) -> None:
        """The failed pod was requeued (unschedulable pool or backoff)."""

    def pod_removed(self, uid: str) -> None:
        """The pod left the cluster (deleted), or was added bound or terminal."""

    def nomination_cleared(self, pod: Pod) -> None:
        """A pending pod's nomination was dropped (e.g. a preemptor of higher priority took its node);
        ``pod`` is its object as it was, still carrying the nomination (kube's ClearNominatedNodeName)."""

    async def bind(self, pod: Pod, node_name: str, annotations: Mapping[str, str]) -> Any:
        """Bind ``pod`` to ``node_name`` writing ``annotations`` (the default_binder's action)."""
        raise RuntimeError(f"this engine does not bind pods (asked to bind {pod.key} to {node_name})")

    async def evict(self, pod: Pod, reason: str) -> Any:
        """Evict a running pod (preemption, descheduling)."""
        raise RuntimeError(f"this engine does not evict pods (asked to evict {pod.key}: {reason})")

    def object_status_written(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A plugin wrote an object's status (``handle.update_object_status``): ``obj`` is the cached object
        with its new ``status``, already in the scheduler's cluster. The live engine writes it through the
        API; an in-memory engine has nothing more to do."""

    async def patch_object(self, kind: str, obj: Mapping[str, Any], patch: Mapping[str, Any],
                           precondition: Callable[[Mapping[str, Any]], bool] | None = None) -> dict[str, Any] | None:
        """A plugin's ``handle.patch_object``: write the merge ``patch`` (metadata and spec) on ``obj``, the
        cached object, and return the object as written, or None if it was not (gone; ``precondition`` false
        of a newer version). The scheduler puts the result in its cluster. In memory (this default): the
        patch merged into ``obj``; the live engine PATCHes it through the API."""
        return merge_patch(obj, patch)
