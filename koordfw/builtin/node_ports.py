"""node_ports: kube-scheduler's NodePorts (``pkg/scheduler/framework/plugins/nodeports/node_ports.go``).

A pod that asks for host ports (``ports[].hostPort`` of its containers and of its restartable init
containers, kube's ``GetHostPorts``) fits only on nodes where none of them is in use, as
``HostPortInfo.CheckConflict`` decides: a wanted ``(hostIP, protocol, port)`` (hostIP ``0.0.0.0`` and
protocol ``TCP`` when unset) conflicts with a used one of the same protocol and port when either
hostIP is ``0.0.0.0`` or both are equal. Rejection: Unschedulable, "node(s) didn't have free ports for
the requested pod ports". Pods without host ports skip the plugin (pre_filter).

The ports in use per node are numpy columns by ``(hostIP, protocol, port)``, updated from the nodes
whose pods changed since the last cycle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import cast

import numpy as np

from koordfw import ClusterEventWithHint, NodeBatch, Pod, QueueingHint, Status, hookimpl
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE

from ._topology import NodeTally

REASON = Status.unschedulable("node(s) didn't have free ports for the requested pod ports")
BIND_ALL = "0.0.0.0"


def _used(pods: list[Pod]) -> Counter[Hashable]:
    c: Counter[Hashable] = Counter()
    for p in pods:
        for hp in p.host_ports:
            c[(hp.host_ip, hp.protocol, hp.port)] += 1
    return c


def conflicts(want: tuple[str, str, int], used: dict[Hashable, np.ndarray], idx: np.ndarray) -> np.ndarray | None:
    """Nodes of ``idx`` where ``want`` conflicts with a used port (kube's CheckConflict); None: none."""
    ip, proto, port = want
    hit: np.ndarray | None = None
    for key, col in used.items():
        uip, uproto, uport = cast(tuple[str, str, int], key)  # the tally's keys are _used's
        if uport != port or uproto != proto:
            continue
        if ip != BIND_ALL and uip != BIND_ALL and uip != ip:
            continue
        m = col[idx] > 0
        hit = m if hit is None else hit | m
    return hit


class NodePorts:
    def __init__(self) -> None:
        self._tally = NodeTally(_used)

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """kube's NodePorts hints: a deleted pod helps only if it held one of the pod's ports; a new or
        changed node always may."""

        def after_pod_deleted(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
            if old is None:
                return QueueingHint.QUEUE
            want = {(h.protocol, h.port) for h in pod.host_ports}
            return QueueingHint.QUEUE if any((h.protocol, h.port) in want for h in old.host_ports) \
                else QueueingHint.QUEUE_SKIP

        return [ClusterEventWithHint(ASSIGNED_POD_DELETE, after_pod_deleted), ClusterEventWithHint(NODE_ADD),
                ClusterEventWithHint(NODE_UPDATE)]

    @hookimpl
    def pre_filter(self, pod: Pod) -> Status | None:
        return None if pod.host_ports else Status.skip()

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch) -> tuple[np.ndarray, Status] | None:
        if not pod.host_ports:
            return None
        used = self._tally.refresh(nodes.cluster)
        if not used:
            return None
        bad: np.ndarray | None = None
        for hp in pod.host_ports:
            hit = conflicts((hp.host_ip, hp.protocol, hp.port), used, nodes.idx)
            if hit is not None:
                bad = hit if bad is None else bad | hit
        if bad is None or not bad.any():
            return None
        return ~bad, REASON
