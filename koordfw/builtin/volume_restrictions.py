"""volume_restrictions: kube-scheduler's VolumeRestrictions
(``pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go``).

Filter:

* disk conflicts (kube's ``isVolumeConflict``) with the pods on the node: the same GCE PD (``pdName``)
  unless both mounts are read-only; the same AWS EBS ``volumeID``; the same iSCSI ``iqn`` unless both are
  read-only; the same RBD image (an overlapping monitor, the same ``pool``, default ``rbd``, and ``image``)
  unless both are read-only. Unschedulable, "node(s) had no available disk".
* ReadWriteOncePod: a claim of the pod with that access mode already used by a pod on any node rejects
  every node: Unschedulable, "node has pod using PersistentVolumeClaim with the same name and
  ReadWriteOncePod access mode". A claim the cluster does not have is UnschedulableAndUnresolvable
  (kube's NotFound) when the cluster holds claims at all (see :mod:`koordfw.builtin._volumes`).

Pods without such volumes or claims skip the plugin. Disks and claims in use are per-node numpy columns
updated from the nodes that changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any, cast

import attrs
import numpy as np

from koordfw import (
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    Handle,
    NodeBatch,
    Pod,
    StateKey,
    Status,
    hookimpl,
)
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE

from ._topology import NodeTally
from ._volumes import access_modes, claim, claims_known, not_found

DISK_REASON = Status.unschedulable("node(s) had no available disk")
RWOP_REASON = Status.unschedulable(
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode")


def _disk(v: Mapping[str, Any]) -> tuple | None:
    """The identity of a volume kube checks for conflicts, with its read-only flag last."""
    if (g := v.get("gcePersistentDisk")) is not None:
        return ("gce", g["pdName"], bool(g.get("readOnly")))
    if (a := v.get("awsElasticBlockStore")) is not None:
        return ("aws", a["volumeID"], False)
    if (i := v.get("iscsi")) is not None:
        return ("iscsi", i["iqn"], bool(i.get("readOnly")))
    if (r := v.get("rbd")) is not None:
        return ("rbd", frozenset(r.get("monitors") or ()), r.get("pool") or "rbd", r["image"], bool(r.get("readOnly")))
    return None


def conflicts(want: tuple, used: tuple) -> bool:
    """kube's isVolumeConflict for one pair of volumes."""
    if want[0] != used[0]:
        return False
    kind = want[0]
    if kind == "aws":
        return bool(want[1] == used[1])
    if kind in ("gce", "iscsi"):
        return bool(want[1] == used[1] and not (want[2] and used[2]))
    # rbd: overlapping monitors, same pool and image, not both read-only
    return bool(want[1] & used[1] and want[2] == used[2] and want[3] == used[3] and not (want[4] and used[4]))


def _in_use(pods: list[Pod]) -> Counter[Hashable]:
    c: Counter[Hashable] = Counter()
    for p in pods:
        for v in p.volumes:
            d = _disk(v)
            if d is not None:
                c[("disk", d)] += 1
        for name in p.claim_names:
            c[("claim", p.namespace, name)] += 1
    return c


@attrs.define
class _State:
    disks: list[tuple]
    rwop_in_use: int


STATE: StateKey[_State] = StateKey("volume_restrictions/state")


class VolumeRestrictions:
    def __init__(self) -> None:
        self._tally = NodeTally(_in_use)

    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> Status | None:
        disks = [d for v in pod.volumes if (d := _disk(v)) is not None]
        cluster = handle.cluster
        rwop: list[str] = []
        if pod.claim_names and claims_known(cluster):
            for name in pod.claim_names:
                pvc = claim(cluster, pod.namespace, name)
                if pvc is None:
                    return Status.unresolvable(not_found(name))
                if "ReadWriteOncePod" in access_modes(pvc):
                    rwop.append(name)
        in_use = 0
        if rwop:
            cols = self._tally.refresh(cluster)
            n = cluster.num_nodes
            for name in rwop:
                col = cols.get(("claim", pod.namespace, name))
                if col is not None:
                    in_use += int(col[:n].sum())
        if not disks and in_use == 0:
            return Status.skip()
        state[STATE] = _State(disks, in_use)
        return None

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> tuple[np.ndarray, Status | list] | None:
        st = state.get(STATE)
        if st is None:
            return None
        if st.rwop_in_use:
            return np.zeros(len(nodes), dtype=bool), RWOP_REASON
        cols = self._tally.refresh(nodes.cluster)
        bad = np.zeros(len(nodes), dtype=bool)
        for key, col in cols.items():
            k = cast(tuple, key)
            if k[0] != "disk" or not any(conflicts(w, k[1]) for w in st.disks):
                continue
            bad |= col[nodes.idx] > 0
        return None if not bad.any() else (~bad, DISK_REASON)

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A pod leaving frees its disks and claims; new nodes have none in use (any node event queues)."""
        return [ClusterEventWithHint(ASSIGNED_POD_DELETE), ClusterEventWithHint(NODE_ADD),
                ClusterEventWithHint(NODE_UPDATE), ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim", "*"))]
