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

Every failing node is UnschedulableAndUnresolvable with the reasons that apply, as kube's.

The binding (kube's ``AssumePodVolumes``/``BindPodVolumes``/``RevertAssumedPodVolumes``):

* reserve, on the chosen node, takes the filter's choice again (the static PV per claim, the claims left
  to provision) and *assumes* it in the plugin's assume cache (kube's ``pvAssumeCache``/``pvcAssumeCache``):
  the PV with ``spec.claimRef`` to the claim and ``pv.kubernetes.io/bound-by-controller``, the claim with
  ``volume.kubernetes.io/selected-node``. Every later pre_filter/filter reads the cluster's objects through
  that cache, so a second pod never gets a PV a first one holds while its binding cycle runs;
* pre_bind writes them through :meth:`koordfw.Handle.patch_object`: each PV's ``claimRef`` (only while the
  PV is still free or already ours), then each claim's ``selected-node`` (only while the claim is unbound
  and not selected for another node); a write refused fails the binding cycle (an error status, as kube's
  ``BindPodVolumes`` error) and the pod is tried again. Once written, the cluster's objects carry them and
  the assumption is dropped. kube's binder then waits (``checkBindings``, up to ``bindTimeoutSeconds``)
  for the PV controller to bind the claims before the pod binds; here the pod binds at once and the kubelet
  waits for its volumes (the embedded cluster completes a static binding itself, as the PV controller;
  a claim to provision stays Pending with its ``selectedNode``);
* unreserve drops what reserve assumed (idempotent).

A pod whose claims are all bound, or with none, does nothing in reserve and pre_bind (kube's
``allBound``). Not modelled: CSIStorageCapacity, and the PV controller's undoing of a failed provisioning
(see :mod:`koordfw.builtin._volumes` for claims the cluster does not hold).
"""

from __future__ import annotations

import copy
from collections.abc import Coroutine, Mapping
from typing import Any

import attrs
import numpy as np

from koordfw import (
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    Handle,
    NodeBatch,
    NodeView,
    Pod,
    QuantityError,
    StateKey,
    Status,
    hookimpl,
    parse_quantity,
)
from koordfw.hints import NODE_ADD, NODE_UPDATE
from koordfw.inputs import selector_matches

from ._volumes import access_modes, claim, claim_class, missing_claim
from .node_selector import term_matches

NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
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
class _Reserved:
    """What reserve assumed for the pod on ``node``: (claim, PV name, PV with the claimRef) per static
    binding, and the claims to provision (with ``selected-node``)."""

    node: str
    static: list[tuple[_Claim, str, dict[str, Any]]]  # (claim, PV name, the merge patch of the PV)
    provision: list[tuple[_Claim, dict[str, Any]]]  # (claim, the claim as assumed)


@attrs.define
class _State:
    bound: list[Mapping[str, Any]]
    delayed: list[_Claim]
    reserved: _Reserved | None = None


STATE: StateKey[_State] = StateKey("volume_binding/state")


def _candidates(pvs: Mapping[str, Mapping[str, Any]], pvc: Mapping[str, Any], ns: str, name: str,
                size: int) -> list[tuple[str, Mapping[str, Any]]]:
    cls = claim_class(pvc)
    spec = pvc.get("spec") or {}
    modes = set(access_modes(pvc))
    mode = spec.get("volumeMode") or "Filesystem"
    sel = spec.get("selector")
    uid = (pvc.get("metadata") or {}).get("uid")
    out = []
    for pv_name, pv in pvs.items():
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


def _claim_ref(pvc: Mapping[str, Any], ns: str, name: str) -> dict[str, Any]:
    """kube's GetBindVolumeToClaim's ``claimRef`` (an ObjectReference to the claim)."""
    meta = pvc.get("metadata") or {}
    ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": name}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    return ref


def _refers_to(ref: Mapping[str, Any] | None, ns: str, name: str, uid: str | None) -> bool:
    if not ref:
        return False
    return ref.get("namespace") == ns and ref.get("name") == name and not (uid and ref.get("uid") and ref["uid"] != uid)


class VolumeBinding:
    def __init__(self) -> None:
        #: kube's assume caches: PV name → the PV as reserve assumed it (with a claimRef); claim key → the
        #: claim as assumed (with selected-node); each with the uid of the pod that assumed it
        self._pvs: dict[str, tuple[str, dict[str, Any]]] = {}
        self._pvcs: dict[str, tuple[str, dict[str, Any]]] = {}

    def _pv_view(self, cluster: Any) -> Mapping[str, Mapping[str, Any]]:
        pvs = cluster.objects_of("PersistentVolume")
        if not self._pvs:
            return pvs
        out = dict(pvs)
        for name, (_, pv) in self._pvs.items():
            if name in out:
                out[name] = pv
        return out

    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> Status | None:
        cluster = handle.cluster
        names = pod.claim_names
        if not names:
            return Status.skip()
        bound: list[Mapping[str, Any]] = []
        delayed: list[_Claim] = []
        pvs: Mapping[str, Mapping[str, Any]] | None = None
        for name in names:
            assumed = self._pvcs.get(f"{pod.namespace}/{name}")
            pvc = assumed[1] if assumed is not None else claim(cluster, pod.namespace, name)
            if pvc is None:  # as kube-scheduler: the pod waits for its claim, even when no claim exists at all
                return Status.unresolvable(missing_claim(pod, name))
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
            if pvs is None:
                pvs = self._pv_view(cluster)
            delayed.append(_Claim(name, pvc, size, _candidates(pvs, pvc, pod.namespace, name, size), sc))
        delayed.sort(key=lambda c: c.size)
        state[STATE] = _State(bound, delayed)
        return None

    @staticmethod
    def _match(st: _State, node: NodeView) -> tuple[bool, list[tuple[_Claim, str, Mapping[str, Any]]] | None,
                                                      list[_Claim]]:
        """(the bound claims' PVs fit, the static bindings or None if an unbound claim cannot be met, the
        claims to provision): kube's FindPodVolumes on one node."""
        bound_ok = all(pv_fits_node(pv, node) for pv in st.bound)
        chosen: set[str] = set()
        static: list[tuple[_Claim, str, Mapping[str, Any]]] = []
        provision: list[_Claim] = []
        for c in st.delayed:
            selected = ((c.obj.get("metadata") or {}).get("annotations") or {}).get(SELECTED_NODE)
            if selected is not None and selected != node.name:
                return bound_ok, None, provision
            if selected is None:
                pick = next(((n, pv) for n, pv in c.candidates if n not in chosen and pv_fits_node(pv, node)), None)
                if pick is not None:
                    chosen.add(pick[0])
                    static.append((c, pick[0], pick[1]))
                    continue
            sc = c.storage_class or {}
            prov = sc.get("provisioner") or ""
            if not prov or prov == NO_PROVISIONER or not topology_matches(sc.get("allowedTopologies") or [], node.labels):
                return bound_ok, None, provision
            provision.append(c)
        return bound_ok, static, provision

    def _node_reasons(self, st: _State, node: NodeView) -> tuple[str, ...]:
        bound_ok, static, _ = self._match(st, node)
        reasons = []
        if not bound_ok:
            reasons.append(NODE_CONFLICT)
        if static is None:
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

    # -- binding: kube's AssumePodVolumes / BindPodVolumes / RevertAssumedPodVolumes -----------------------
    @hookimpl
    def reserve(self, pod: Pod, node: NodeView, state: CycleState) -> Status | None:
        st = state.get(STATE)
        if st is None or not st.delayed:
            return None  # no claims, or all bound (kube's allBound)
        self._revert(pod, st)  # a reserve again without its unreserve (idempotence)
        bound_ok, static, provision = self._match(st, node)
        if not bound_ok or static is None:
            return Status.error(f"volume binding: the pod's claims no longer fit node {node.name}")
        res = _Reserved(node.name, [], [])
        for c, pv_name, pv in static:
            # kube's GetBindVolumeToClaim: a claimRef naming the claim with its uid is not written again; a
            # PV bound by the scheduler (not pre-bound by the user to the claim) gets bound-by-controller
            ref = (pv.get("spec") or {}).get("claimRef")
            uid = (c.obj.get("metadata") or {}).get("uid") or ""
            if ref and ref.get("namespace") == pod.namespace and ref.get("name") == c.name \
                    and (ref.get("uid") or "") == uid:
                continue
            patch: dict[str, Any] = {"spec": {"claimRef": _claim_ref(c.obj, pod.namespace, c.name)}}
            anns = (pv.get("metadata") or {}).get("annotations") or {}
            if not _refers_to(ref, pod.namespace, c.name, uid) and BOUND_BY_CONTROLLER not in anns:
                patch["metadata"] = {"annotations": {BOUND_BY_CONTROLLER: "yes"}}
            new = copy.deepcopy(dict(pv))
            new.setdefault("spec", {})["claimRef"] = patch["spec"]["claimRef"]
            if "metadata" in patch:
                new.setdefault("metadata", {})["annotations"] = {**anns, BOUND_BY_CONTROLLER: "yes"}
            self._pvs[pv_name] = (pod.uid, new)
            res.static.append((c, pv_name, patch))
        for c in provision:
            new = copy.deepcopy(dict(c.obj))
            meta = new.setdefault("metadata", {})
            if (meta.get("annotations") or {}).get(SELECTED_NODE) == node.name:
                continue
            meta["annotations"] = {**(meta.get("annotations") or {}), SELECTED_NODE: node.name}
            self._pvcs[f"{pod.namespace}/{c.name}"] = (pod.uid, new)
            res.provision.append((c, new))
        st.reserved = res
        return None

    def _revert(self, pod: Pod, st: _State) -> None:
        uid = pod.uid
        res, st.reserved = st.reserved, None
        if res is None:
            return
        for _, pv_name, _ in res.static:
            if self._pvs.get(pv_name, ("",))[0] == uid:
                del self._pvs[pv_name]
        for c, _ in res.provision:
            key = f"{pod.namespace}/{c.name}"
            if self._pvcs.get(key, ("",))[0] == uid:
                del self._pvcs[key]

    @hookimpl
    def unreserve(self, pod: Pod, state: CycleState) -> None:
        st = state.get(STATE)
        if st is not None:
            self._revert(pod, st)

    @hookimpl
    def pre_bind(self, pod: Pod, state: CycleState, handle: Handle) -> Coroutine[Any, Any, Status | None] | None:
        st = state.get(STATE)
        if st is None or st.reserved is None or not (st.reserved.static or st.reserved.provision):
            return None  # sync: nothing to write (most pods)
        return self._bind(pod, st.reserved, handle)

    async def _bind(self, pod: Pod, res: _Reserved, handle: Handle) -> Status | None:
        """kube's bindAPIUpdate: the PVs' claimRefs first, then the claims' selected-node."""
        ns = pod.namespace
        for c, pv_name, patch in res.static:
            uid = patch["spec"]["claimRef"].get("uid")

            def free_or_ours(cur: Mapping[str, Any], ns: str = ns, name: str = c.name, uid: Any = uid) -> bool:
                cref = (cur.get("spec") or {}).get("claimRef")
                return not cref or _refers_to(cref, ns, name, uid)

            out = await handle.patch_object("PersistentVolume", pv_name, patch, precondition=free_or_ours)
            if out is None:
                return Status.error(f'binding volumes: could not bind PersistentVolume "{pv_name}" to claim '
                                    f'{ns}/{c.name} (taken, gone or refused)')
            if self._pvs.get(pv_name, ("",))[0] == pod.uid:
                del self._pvs[pv_name]
        for c, _new in res.provision:
            node = res.node
            uid = (c.obj.get("metadata") or {}).get("uid")

            def provisionable(cur: Mapping[str, Any], node: str = node, uid: Any = uid) -> bool:
                meta = cur.get("metadata") or {}
                sel = (meta.get("annotations") or {}).get(SELECTED_NODE)
                return not (cur.get("spec") or {}).get("volumeName") and sel in (None, node) \
                    and not (uid and meta.get("uid") and meta["uid"] != uid)

            out = await handle.patch_object("PersistentVolumeClaim", f"{ns}/{c.name}",
                                            {"metadata": {"annotations": {SELECTED_NODE: node}}},
                                            precondition=provisionable)
            if out is None:
                return Status.error(f"binding volumes: could not annotate PersistentVolumeClaim {ns}/{c.name} "
                                    f"with {SELECTED_NODE}={node} (bound, selected elsewhere, gone or refused)")
            key = f"{ns}/{c.name}"
            if self._pvcs.get(key, ("",))[0] == pod.uid:
                del self._pvcs[key]
        return None

    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE),
                ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim", "*")),
                ClusterEventWithHint(ClusterEvent("PersistentVolume", "*")),
                ClusterEventWithHint(ClusterEvent("StorageClass", "*")),
                ClusterEventWithHint(ClusterEvent("CSINode", "*"))]
