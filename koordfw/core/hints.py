"""Queueing hints (kube's ``EnqueueExtensions`` and ``QueueingHintFn``): which cluster events can make a
pod that a plugin rejected schedulable again.

A plugin's ``events_to_register`` hook returns :class:`ClusterEventWithHint` s. When a pod fails, the
queue remembers which plugins rejected it; when a cluster event arrives, the pod leaves the
unschedulable pool only if one of those plugins registered a matching event and its hint says
:attr:`QueueingHint.QUEUE` for this pod (a hint that raises counts as Queue, as in kube). A plugin that
does not implement ``events_to_register`` gets the events that may free or add room
(:data:`DEFAULT_EVENTS`), which is what every rejected pod got before hints existed. A pod that failed
with an error, or that no plugin rejected, moves on any of those events.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs

from .model import Pod

__all__ = [
    "ASSIGNED_POD_ADD", "ASSIGNED_POD_DELETE", "ClusterEvent", "ClusterEventWithHint", "DEFAULT_EVENTS",
    "NODE_ADD", "NODE_DELETE", "NODE_UPDATE", "POD_ADD", "POD_DELETE", "QueueingHint", "WILDCARD",
]

WILDCARD = "*"


class QueueingHint(enum.Enum):
    """What a hint says of one pod for one event."""

    #: the event may make the pod schedulable: move it to the active (or backoff) queue
    QUEUE = "Queue"
    #: the event cannot help the pod: leave it in the unschedulable pool
    QUEUE_SKIP = "QueueSkip"


@attrs.frozen
class ClusterEvent:
    """A kind of cluster change: ``resource`` is ``Pod`` (a pod not on a node), ``AssignedPod`` (a pod on
    a node, or assumed there), ``Node``, or the kind of another object (``PodGroup``, ``NodeMetric``,
    ``Device``, ...); ``action`` is ``Add``, ``Update`` or ``Delete``. ``*`` matches any."""

    resource: str
    action: str

    def matches(self, event: ClusterEvent) -> bool:
        """Does this registration cover ``event``?"""
        return (self.resource in (WILDCARD, event.resource)) and (self.action in (WILDCARD, event.action))

    def __str__(self) -> str:
        return f"{self.resource}/{self.action}"


#: ``hint(pod, old, new)``: the pod in the unschedulable pool, and the changed object before and after
#: (``old`` is None for an Add, ``new`` None for a Delete): Pods, Nodes or object dicts
HintFn = Callable[[Pod, Any, Any], QueueingHint]


@attrs.frozen
class ClusterEventWithHint:
    """One registration: the event, and the hint that decides per pod (None: always Queue)."""

    event: ClusterEvent
    hint: HintFn | None = None


POD_ADD = ClusterEvent("Pod", "Add")
POD_DELETE = ClusterEvent("Pod", "Delete")
ASSIGNED_POD_ADD = ClusterEvent("AssignedPod", "Add")
ASSIGNED_POD_DELETE = ClusterEvent("AssignedPod", "Delete")
NODE_ADD = ClusterEvent("Node", "Add")
NODE_UPDATE = ClusterEvent("Node", "Update")
NODE_DELETE = ClusterEvent("Node", "Delete")

#: what a plugin without ``events_to_register`` is given: pods leaving (their room is freed), nodes
#: added or changed, and any change of the other objects plugins read (see :func:`in_default`)
DEFAULT_EVENTS: tuple[ClusterEvent, ...] = (POD_DELETE, ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE)

_CORE_RESOURCES = frozenset(("Pod", "AssignedPod", "Node"))


def in_default(event: ClusterEvent) -> bool:
    """Is ``event`` one that plugins without registrations are given?"""
    if event.resource in _CORE_RESOURCES:
        return any(d.matches(event) for d in DEFAULT_EVENTS)
    return True
