"""node_volume_limits: kube-scheduler's NodeVolumeLimits for CSI volumes
(``pkg/scheduler/framework/plugins/nodevolumelimits/csi.go``).

A pod's claims (and generic ephemeral volumes) name CSI volumes: ``<driver>/<volumeHandle>`` from the bound
PV's ``spec.csi``, or, for a claim not bound yet, the class's provisioner with the claim as the handle.
On a node whose CSINode gives a driver ``allocatable.count``, the distinct volumes of that driver already
attached by the node's pods plus the pod's new ones (a volume both use counts once) must not exceed it:
Unschedulable, "node(s) exceed max volume count". Nodes without a CSINode or without counts pass; pods
without claims skip the plugin. A claim the pod names that the cluster lacks is an error, as kube's
(``looking up PVC``), when the cluster holds claims at all (:mod:`koordfw.builtin._volumes`).
Not modelled: in-tree volumes migrated to CSI (kube's CSI translation of gcePersistentDisk, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from koordfw import ClusterEvent, ClusterEventWithHint, CycleState, Handle, NodeBatch, Pod, StateKey, Status, hookimpl
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE

from ._volumes import claim, claim_class, claims_known

REASON = Status.unschedulable("node(s) exceed max volume count")

NEW_VOLUMES: StateKey[dict[str, str]] = StateKey("node_volume_limits/new")


def csi_volumes(pod: Pod, cluster: Any, new_pod: bool) -> dict[str, str]:
    """kube's filterAttachableVolumes: unique volume name (driver/handle) → driver, for the pod's claims."""
    out: dict[str, str] = {}
    for name in pod.claim_names:
        pvc = claim(cluster, pod.namespace, name)
        if pvc is None:
            if new_pod:
                raise LookupError(f"looking up PVC {pod.namespace}/{name}: persistentvolumeclaim \"{name}\" not found")
            continue
        driver, handle = _driver_info(cluster, pvc, pod.namespace, name)
        if driver and handle:
            out[f"{driver}/{handle}"] = driver
    return out


def _driver_info(cluster: Any, pvc: Mapping[str, Any], ns: str, name: str) -> tuple[str, str]:
    pv_name = (pvc.get("spec") or {}).get("volumeName")
    if pv_name:
        pv = cluster.get_object("PersistentVolume", pv_name)
        csi = ((pv or {}).get("spec") or {}).get("csi") or {}
        return str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")
    # not bound yet: the provisioner of its class, the claim as a placeholder handle (kube's getCSIDriverInfoFromSC)
    cls = claim_class(pvc)
    sc = cluster.get_object("StorageClass", cls) if cls else None
    provisioner = str((sc or {}).get("provisioner") or "")
    return provisioner, f"{ns}-{name}" if provisioner else ""


def volume_limits(csinode: Mapping[str, Any] | None) -> dict[str, int]:
    """Driver → allocatable count from a CSINode (kube's getVolumeLimits)."""
    out = {}
    for d in ((csinode or {}).get("spec") or {}).get("drivers") or []:
        count = (d.get("allocatable") or {}).get("count")
        if d.get("name") and isinstance(count, int) and not isinstance(count, bool):
            out[str(d["name"])] = count
    return out


class NodeVolumeLimits:
    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> Status | None:
        cluster = handle.cluster
        if not pod.claim_names or not claims_known(cluster) or not cluster.objects_of("CSINode"):
            return Status.skip()
        try:
            new = csi_volumes(pod, cluster, True)
        except LookupError as e:
            return Status.error(str(e))
        if not new:
            return Status.skip()
        state[NEW_VOLUMES] = new
        return None

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> tuple[np.ndarray, Status] | None:
        new = state.get(NEW_VOLUMES)
        if not new:
            return None
        cluster = nodes.cluster
        ok = np.ones(len(nodes), dtype=bool)
        for j, v in enumerate(nodes):
            limits = volume_limits(cluster.get_object("CSINode", v.name))
            if not limits:
                continue
            attached: dict[str, str] = {}
            for p in v.pods:
                if p.claim_names:
                    attached.update(csi_volumes(p, cluster, False))
            fresh = {u: d for u, d in new.items() if u not in attached}
            need: dict[str, int] = {}
            for d in fresh.values():
                need[d] = need.get(d, 0) + 1
            have: dict[str, int] = {}
            for d in attached.values():
                have[d] = have.get(d, 0) + 1
            if any(d in limits and have.get(d, 0) + c > limits[d] for d, c in need.items()):
                ok[j] = False
        return None if ok.all() else (ok, REASON)

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ASSIGNED_POD_DELETE), ClusterEventWithHint(NODE_ADD),
                ClusterEventWithHint(NODE_UPDATE), ClusterEventWithHint(ClusterEvent("CSINode", "*")),
                ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim", "*"))]
