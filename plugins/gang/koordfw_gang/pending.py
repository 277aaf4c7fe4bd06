"""Why is my job pending: one message per gang group (not per pod) naming what holds it.

Each failed attempt of a member (the ``error_handler`` hook) is classified by the constraint that failed it;
echoes of another member's failure (``GangGroup ... gets rejected due to member Pod ...``) are not causes and
are skipped. A job's binding constraint is the first, in this order, that any pending member hit:

``GangSize`` (too few members, or the gang is not defined) > ``Quota`` (elastic_quota) > ``NetworkTopology``
(network_topology) > ``PreemptionNotAllowed`` (no room, and the member may not preempt) > ``Resources`` (no
room) > ``Other``.

The message goes to ``koordfw simulate``'s ``jobs`` section, and on the job's PodGroup as a Volcano-style
``Unschedulable`` condition (with scheduler-plugins' ``phase`` and ``scheduled``) and an Event.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import attrs

from koordfw import Handle, Pod, Status

from .gang import Gang

GANG_SIZE = "GangSize"
QUOTA = "Quota"
NETWORK_TOPOLOGY = "NetworkTopology"
PREEMPTION_NOT_ALLOWED = "PreemptionNotAllowed"
RESOURCES = "Resources"
OTHER = "Other"
#: the order in which constraints bind: the first a job hits is the one named
ORDER = (GANG_SIZE, QUOTA, NETWORK_TOPOLOGY, PREEMPTION_NOT_ALLOWED, RESOURCES, OTHER)

#: messages that repeat another member's failure, or are the gang's own scheduling order
_ECHOES = ("gets rejected due to member Pod", "gets rejected due to pod is unschedulable", "is scheduling and this pod waits",
           "all members were attempted", "in Unreserve", "failed and nothing has changed since",
           "holds fewer members than it still needs")


def classify(pod: Pod, status: Status) -> str | None:
    """The constraint a member's failure names, or ``None`` for an echo of another member's."""
    msg = status.message or ""
    if any(e in msg for e in _ECHOES):
        return None
    plugin = status.plugin or ""
    if "child pod not collect enough" in msg or "has not initialized" in msg or "not found: no PodGroup" in msg:
        return GANG_SIZE
    if plugin == "elastic_quota" or "quota" in msg.lower():
        return QUOTA
    if plugin == "network_topology" or "topology topologyNode" in msg or "network topology" in msg:
        return NETWORK_TOPOLOGY
    if "not eligible for preemption" in msg:
        return PREEMPTION_NOT_ALLOWED
    if "Insufficient" in msg or "nodes are available" in msg or "Too many pods" in msg:
        return PREEMPTION_NOT_ALLOWED if pod.preemption_policy == "Never" else RESOURCES
    return OTHER


@attrs.frozen
class Cause:
    constraint: str
    pod: str
    message: str


def _rank(c: Cause) -> int:
    return ORDER.index(c.constraint)


class PendingJobs:
    """The last cause of each pending member, and the message last written on each PodGroup."""

    def __init__(self) -> None:
        self._causes: dict[str, Cause] = {}
        self._written: dict[str, str] = {}

    def record(self, pod: Pod, status: Status) -> None:
        constraint = classify(pod, status)
        if constraint is None:
            return
        self._causes[pod.uid] = Cause(constraint, pod.key, status.message or f"rejected by {status.plugin}")

    def job(self, group: Sequence[Gang], handle: Handle) -> tuple[str, str] | None:
        """(constraint, message) of a gang group not fully bound; ``None`` when every gang is satisfied."""
        if all(g.spec is not None and len(g.bound) >= g.spec.min_member for g in group):
            return None
        group_id = group[0].spec.group_id if group[0].spec is not None else group[0].gang_id
        bound = sum(len(g.bound) for g in group)
        need = sum(g.spec.min_member for g in group if g.spec is not None)
        head = f"GangGroup {group_id}: {bound}/{need} members bound"
        for g in group:
            if g.spec is None:
                return GANG_SIZE, f"{head}; {g.error or f'gang {g.gang_id} is not defined'}"
            if len(g.children) < g.spec.min_member:
                return GANG_SIZE, (f"{head}; gang {g.gang_id} has {len(g.children)} of the {g.spec.min_member} "
                                   f"pods of its minMember")
        # every gang is defined and has its members now: a member's GangSize cause (say, gated before its
        # PodGroup was seen, and rejected since only as another member's echo) no longer holds
        causes = [c for g in group for u, c in self._causes.items()
                  if u in g.children and u not in g.bound and c.constraint != GANG_SIZE
                  and (p := handle.cluster.pod(u)) is not None and not p.node_name]
        if not causes:
            return None
        c = min(causes, key=lambda c: (_rank(c), c.pod))
        return c.constraint, f"{head}; {c.constraint}: pod {c.pod}: {c.message}"

    def publish(self, g: Gang, group: Sequence[Gang], handle: Handle) -> None:
        """Write the job's message on the PodGroup of each of its gangs defined by one (when it changed):
        ``status.conditions`` (type ``Unschedulable``), ``phase``/``scheduled``, and an Event."""
        found = self.job(group, handle)
        if found is None:
            return
        constraint, message = found
        for m in group:
            pg = handle.cluster.get_object("PodGroup", m.gang_id)
            if pg is None or self._written.get(m.gang_id) == message:
                continue
            self._written[m.gang_id] = message
            now = dt.datetime.fromtimestamp(handle.now(), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            status: dict[str, Any] = dict(pg.get("status") or {})
            status.update({"phase": "Scheduling" if m.bound else "Pending", "scheduled": len(m.bound),
                           "conditions": [{"type": "Unschedulable", "status": "True", "reason": constraint,
                                           "message": message, "lastTransitionTime": now}]})
            handle.update_object_status("PodGroup", m.gang_id, status)
            handle.events.eventf(f"PodGroup {m.gang_id}", "Warning", "Unschedulable", message)

    def rows(self, groups: Sequence[Sequence[Gang]], handle: Handle) -> list[dict[str, Any]]:
        """One row per gang group not fully bound: group, gangs, bound/minMember, constraint, message."""
        out = []
        for group in groups:
            found = self.job(group, handle)
            if found is None:
                continue
            g0 = group[0]
            out.append({"job": g0.spec.group_id if g0.spec is not None else g0.gang_id,
                        "bound": sum(len(g.bound) for g in group),
                        "minMember": sum(g.spec.min_member for g in group if g.spec is not None),
                        "constraint": found[0], "message": found[1]})
        return out
