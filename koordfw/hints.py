"""The cluster events plugins register queueing hints for (``events_to_register``): kube-scheduler's
``framework.ClusterEvent`` values, and the event and hint types again for convenience."""

from .core.hints import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    NODE_DELETE,
    NODE_UPDATE,
    POD_ADD,
    POD_DELETE,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
)

__all__ = ["ASSIGNED_POD_ADD", "ASSIGNED_POD_DELETE", "NODE_ADD", "NODE_DELETE", "NODE_UPDATE", "POD_ADD", "POD_DELETE",
           "ClusterEvent", "ClusterEventWithHint", "QueueingHint"]
