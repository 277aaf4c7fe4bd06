"""PersistentVolumeClaims, PersistentVolumes and StorageClasses as the volume built-ins read them from the
cluster's objects (the embedded cluster holds those of its input; the live scheduler's and extender's
caches watch them, as kube-scheduler's informers do).

A cluster holding no PersistentVolumeClaim at all (an embedded input without claims, or a cache whose
claims reflector could not list them) is taken as one whose claims are unknown: the volume checks that
need the claim skip, instead of calling every claim missing, which kube would answer Unresolvable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: kube's storagehelpers.GetPersistentVolumeClaimClass: the beta annotation wins over the field
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"


def claims_known(cluster: Any) -> bool:
    return bool(cluster.objects_of("PersistentVolumeClaim"))


def claim(cluster: Any, namespace: str, name: str) -> Mapping[str, Any] | None:
    return cluster.get_object("PersistentVolumeClaim", f"{namespace}/{name}")


def claim_class(pvc: Mapping[str, Any]) -> str:
    anns = (pvc.get("metadata") or {}).get("annotations") or {}
    if BETA_STORAGE_CLASS in anns:
        return str(anns[BETA_STORAGE_CLASS])
    return str((pvc.get("spec") or {}).get("storageClassName") or "")


def access_modes(pvc: Mapping[str, Any]) -> list[str]:
    return [str(m) for m in (pvc.get("spec") or {}).get("accessModes") or []]


def not_found(name: str) -> str:
    """kube's NotFound error text for a claim."""
    return f'persistentvolumeclaim "{name}" not found'


def missing_claim(pod: Any, name: str) -> str:
    """Why a pod whose claim ``name`` does not exist waits (kube's VolumeBinding ``podHasPVCs``): a
    generic ephemeral volume's claim is the ephemeral volume controller's to create, any other is
    NotFound."""
    for v in pod.volumes:
        if v.get("ephemeral") is not None and f"{pod.name}-{v['name']}" == name:
            return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
    return not_found(name)
