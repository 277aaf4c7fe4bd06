"""volume_binding: kube-scheduler's VolumeBinding filter
(``pkg/scheduler/framework/plugins/volumebinding/{volume_binding,binder}.go``).

pre_filter sorts the pod's claims (kube's ``GetPodVolumeClaims``): a missing or terminating claim is
UnschedulableAndUnresolvable; an unbound claim whose class is not ``WaitForFirstConsumer`` makes the pod
UnschedulableAndUnresolvable, "pod has unbound immediate PersistentVolumeClaims"; a pod with no claims
skips the plugin. filter, per node (kube's ``FindPodVolumes``):

* bound claims: the PV's ``spec.nodeAffinity.required`` must match the node, else "node(s) had volume node
  affinity conflict";
* unbound ``WaitForFirstConsumer`` claims: a claim whose ``volume.kubernetes.io/selected-node`` names
  another node fails at once; otherwise, smallest request first, the smallest unbound PV of the claim's
  class with the capacity, the access modes, the volume mode and the claim's selector whose node
  affinity matches the node (a PV pre-bound to the claim through ``claimRef`` wins); claims left over
  need a provisioner (not ``kubernetes.io/no-provisioner``) whose ``allowedTopologies`` match the node.
  Else "node(s) didn't find available persistent volumes to bind".

Every failing node is UnschedulableAndUnresolvable with the reasons that apply, as kube's. Not modelled
yet: the binding itself (kube's Reserve/PreBind write ``volume.kubernetes.io/selected-node`` on the claim
or bind the PV) and CSIStorageCapacity (see :mod:`koordfw.builtin._volumes` for claims the cluster does
not hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from koordfw import (
    NODE_ADD,
    NODE_UPDATE,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    NodeBatch,
    NodeView,
    Pod,
    QuantityError,
    StateKey,
    Status,
    hookimpl,
    parse_quantity,
    selector_matches,
)

from ._volumes import access_modes, claim, claim_class, claims_known, not_found
from .node_selector import term_matches

NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
NO_PROVISIONER = "kubernetes.io/no-provisioner"


def _storage(obj: Mapping[str, Any] | None, what: str) -> int:
    try:
        return int(parse_quantity((obj or {}).get("storage", 0)))
    except (QuantityError, ValueError, TypeError):
        raise ValueError(f"{what}: invalid storage quantity {str((obj or {}).get('storage'))[:40]!r}") from None


def pv_fits_node(pv: Mapping[str, Any], node: NodeView) -> bool:
    """kube's CheckNodeAffinity: no ``required`` node affinity, or one of its terms matches the node."""
    req = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")) or None
    if req is None:
        return True
    terms = req.get("nodeSelectorTerms") or []
    return any(term_matches(t, node) for t in terms)


def topology_matches(terms: list[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """kube's MatchTopologySelectorTerms for a class's ``allowedTopologies``."""
    if not terms:
        return True
    for t in terms:
        exprs = t.get("matchLabelExpressions") or []
        if all(e.get("key") in labels and labels[e.get("key")] in [str(v) for v in e.get("values") or []]
               for e in exprs):
            return True
    return False


@attrs.define
class _Claim:
    name: str
    obj: Mapping[str, Any]
    size: int
    #: PVs that could bind the claim apart from node affinity, smallest first (pre-bound ones first)
    candidates: list[tuple[str, Mapping[str, Any]]]
    storage_class: Mapping[str, Any] | None


@attrs.define
class _State:
    bound: list[Mapping[str, Any]]
    delayed: list[_Claim]


STATE: StateKey[_State] = StateKey("volume_binding/state")


def _candidates(cluster: Any, pvc: Mapping[str, Any], ns: str, name: str, size: int) -> list[tuple[str, Mapping[str, Any]]]:
    cls = claim_class(pvc)
    spec = pvc.get("spec") or {}
    modes = set(access_modes(pvc))
    mode = spec.get("volumeMode") or "Filesystem"
    sel = spec.get("selector")
    uid = (pvc.get("metadata") or {}).get("uid")
    out = []
    for pv_name, pv in cluster.objects_of("PersistentVolume").items():
        pspec = pv.get("spec") or {}
        ref = pspec.get("claimRef")
        prebound = False
        if ref:
            if ref.get("namespace") != ns or ref.get("name") != name or (uid and ref.get("uid") and ref["uid"] != uid):
                continue
            prebound = True
        if (pv.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if (pv.get("status") or {}).get("phase") in ("Released", "Failed"):
            continue
        pv_class = (pv.get("metadata") or {}).get("annotations", {}).get("volume.beta.kubernetes.io/storage-class") \
            or pspec.get("storageClassName") or ""
        if pv_class != cls or (pspec.get("volumeMode") or "Filesystem") != mode:
            continue
        if not modes <= set(pspec.get("accessModes") or []):
            continue
        cap = _storage(pspec.get("capacity"), f"PersistentVolume {pv_name}: spec.capacity")
        if cap < size:
            continue
        if sel is not None and not selector_matches(sel, (pv.get("metadata") or {}).get("labels") or {}):
            continue
        out.append((0 if prebound else 1, cap, pv_name, pv))
    out.sort(key=lambda t: (t[0], t[1], t[2]))
    return [(n, pv) for _, _, n, pv in out]


class VolumeBinding:
    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Any) -> Status | None:
        cluster = handle.cluster
        names = pod.claim_names
        if not names or not claims_known(cluster):
            return Status.skip()
        bound: list[Mapping[str, Any]] = []
        delayed: list[_Claim] = []
        for name in names:
            pvc = claim(cluster, pod.namespace, name)
            if pvc is None:
                return Status.unresolvable(not_found(name))
            if (pvc.get("metadata") or {}).get("deletionTimestamp"):
                return Status.unresolvable(f'persistentvolumeclaim "{name}" is being deleted')
            spec = pvc.get("spec") or {}
            pv_name = spec.get("volumeName")
            if pv_name:
                pv = cluster.get_object("PersistentVolume", pv_name)
                if pv is None:
                    return Status.unresolvable(f'persistentvolume "{pv_name}" not found')
                bound.append(pv)
                continue
            cls_name = claim_class(pvc)
            sc = cluster.get_object("StorageClass", cls_name) if cls_name else None
            if sc is None and cls_name:
                return Status.unresolvable(f'storageclass.storage.k8s.io "{cls_name}" not found')
            if sc is None or sc.get("volumeBindingMode") != "WaitForFirstConsumer":
                return Status.unresolvable(IMMEDIATE)
            size = _storage((spec.get("resources") or {}).get("requests"),
                            f"PersistentVolumeClaim {pod.namespace}/{name}: spec.resources.requests")
            delayed.append(_Claim(name, pvc, size, _candidates(cluster, pvc, pod.namespace, name, size), sc))
        delayed.sort(key=lambda c: c.size)
        state[STATE] = _State(bound, delayed)
        return None

    def _node_reasons(self, st: _State, node: NodeView) -> tuple[str, ...]:
        reasons = []
        if not all(pv_fits_node(pv, node) for pv in st.bound):
            reasons.append(NODE_CONFLICT)
        ok = True
        chosen: set[str] = set()
        for c in st.delayed:
            selected = ((c.obj.get("metadata") or {}).get("annotations") or {}).get(SELECTED_NODE)
            if selected is not None and selected != node.name:
                ok = False
                break
            if selected is None:
                pick = next((n for n, pv in c.candidates if n not in chosen and pv_fits_node(pv, node)), None)
                if pick is not None:
                    chosen.add(pick)
                    continue
            sc = c.storage_class or {}
            prov = sc.get("provisioner") or ""
            if not prov or prov == NO_PROVISIONER or not topology_matches(sc.get("allowedTopologies") or [], node.labels):
                ok = False
                break
        if not ok:
            reasons.append(BIND_CONFLICT)
        return tuple(reasons)

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> tuple[np.ndarray, list] | None:
        st = state.get(STATE)
        if st is None:
            return None
        ok = np.ones(len(nodes), dtype=bool)
        reasons: list[Status | None] = [None] * len(nodes)
        cache: dict[tuple[str, ...], Status] = {}
        for j, v in enumerate(nodes):
            why = self._node_reasons(st, v)
            if why:
                ok[j] = False
                reasons[j] = cache.get(why) or cache.setdefault(why, Status.unresolvable(*why))
        return None if ok.all() else (ok, reasons)

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE),
                ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim", "*")),
                ClusterEventWithHint(ClusterEvent("PersistentVolume", "*")),
                ClusterEventWithHint(ClusterEvent("StorageClass", "*")),
                ClusterEventWithHint(ClusterEvent("CSINode", "*"))]
