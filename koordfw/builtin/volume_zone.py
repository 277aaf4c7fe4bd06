"""volume_zone: kube-scheduler's VolumeZone (``pkg/scheduler/framework/plugins/volumezone/volume_zone.go``).

For each bound claim of the pod, the PersistentVolume's zone and region labels
(``topology.kubernetes.io/zone``/``region`` and their ``failure-domain.beta.kubernetes.io`` forms; a value
may list several zones joined by ``__``) must hold on the node: a node with none of those labels passes,
else it needs each PV label (the GA key when the PV has the beta one) with one of its values, or it is
UnschedulableAndUnresolvable, "node(s) had no available volume zone". Unbound claims of a
``WaitForFirstConsumer`` class are skipped (volume_binding's part); other unbound claims, a claim
without a class, or a missing claim, class or PV are Unresolvable with kube's messages. Pods without
zonal volumes skip the plugin; a cluster that holds no claims at all is taken as one whose claims are
unknown (:mod:`koordfw.builtin._volumes`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from koordfw import ClusterEvent, ClusterEventWithHint, CycleState, Handle, NodeBatch, Pod, StateKey, Status, hookimpl
from koordfw.hints import NODE_ADD, NODE_UPDATE

from ._volumes import claim, claim_class, claims_known, not_found

REASON = Status.unresolvable("node(s) had no available volume zone")
BETA_ZONE, BETA_REGION = "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}

TOPOLOGIES: StateKey[list[tuple[str, frozenset[str]]]] = StateKey("volume_zone/topologies")


def pv_topologies(pv: dict[str, Any]) -> list[tuple[str, frozenset[str]]]:
    """kube's getPVTopologies: (label key, allowed values) for each topology label the PV has."""
    labels = (pv.get("metadata") or {}).get("labels") or {}
    return [(k, frozenset(str(labels[k]).split("__"))) for k in TOPOLOGY_LABELS if k in labels]


class VolumeZone:
    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> Status | None:
        cluster = handle.cluster
        if not any(v.get("persistentVolumeClaim") is not None for v in pod.volumes) or not claims_known(cluster):
            return Status.skip()
        tops: list[tuple[str, frozenset[str]]] = []
        for v in pod.volumes:
            ref = v.get("persistentVolumeClaim")
            if ref is None:
                continue
            name = ref.get("claimName") or ""
            if not name:
                return Status.unresolvable("PersistentVolumeClaim had no name")
            pvc = claim(cluster, pod.namespace, name)
            if pvc is None:
                return Status.unresolvable(not_found(name))
            pv_name = (pvc.get("spec") or {}).get("volumeName") or ""
            if not pv_name:
                sc_name = claim_class(pvc)
                if not sc_name:
                    return Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name")
                sc = cluster.get_object("StorageClass", sc_name)
                if sc is None:
                    return Status.unresolvable(f'storageclass.storage.k8s.io "{sc_name}" not found')
                mode = sc.get("volumeBindingMode")
                if mode is None:
                    return Status.unresolvable(f'VolumeBindingMode not set for StorageClass "{sc_name}"')
                if mode == "WaitForFirstConsumer":
                    continue
                return Status.unresolvable("PersistentVolume had no name")
            pv = cluster.get_object("PersistentVolume", pv_name)
            if pv is None:
                return Status.unresolvable(f'persistentvolume "{pv_name}" not found')
            tops.extend(pv_topologies(pv))
        if not tops:
            return Status.skip()
        state[TOPOLOGIES] = tops
        return None

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> tuple[np.ndarray, Status] | None:
        tops = state.get(TOPOLOGIES)
        if not tops:
            return None
        ok = np.ones(len(nodes), dtype=bool)
        for j, v in enumerate(nodes):
            labels = v.labels
            if not any(k in labels for k in TOPOLOGY_LABELS):
                continue
            for key, values in tops:
                val = labels.get(key)
                if val is None:
                    val = labels.get(_GA.get(key, key))
                if val is None or val not in values:
                    ok[j] = False
                    break
        return None if ok.all() else (ok, REASON)

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE),
                ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim", "*")),
                ClusterEventWithHint(ClusterEvent("PersistentVolume", "*")),
                ClusterEventWithHint(ClusterEvent("StorageClass", "*"))]
