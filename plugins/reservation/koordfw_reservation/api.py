"""The Reservation CRD (``scheduling.koordinator.sh/v1alpha1``, Koordinator's
``apis/scheduling/v1alpha1/reservation_types.go``) and the rules of ``pkg/util/reservation``: the reserve
pod made from the template, owner matching, the reservation affinity, expiry.

:func:`reservation_from_manifest` reads an object; a malformed field raises :class:`koordfw.ManifestError`
naming the Reservation and the field path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import ManifestError, Pod, Taint, canonical, parse_duration
from koordfw.extension import (
    ANNOTATION_RESERVATION_AFFINITY,
    ANNOTATION_RESERVATION_NAME,
    ANNOTATION_RESERVATION_NODE,
    ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
    ANNOTATION_RESERVE_POD,
    KIND_RESERVATION,
    LABEL_POD_PRIORITY,
    LABEL_RESERVATION_IGNORED,
    LABEL_RESERVATION_ORDER,
)
from koordfw.inputs import load_objects, parse_time, selector_matches

PENDING, AVAILABLE, SUCCEEDED, WAITING, FAILED = "Pending", "Available", "Succeeded", "Waiting", "Failed"
PHASES = (PENDING, AVAILABLE, SUCCEEDED, WAITING, FAILED)
#: ReservationAllocatePolicy: "" (Default, deprecated, taken as Aligned), Aligned, Restricted
POLICY_DEFAULT, POLICY_ALIGNED, POLICY_RESTRICTED = "", "Aligned", "Restricted"
#: the kubebuilder default of ``spec.ttl`` when neither ``ttl`` nor ``expires`` is given
DEFAULT_TTL = 24 * 3600.0
MAX_INT32 = 2**31 - 1
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _fail(name: str, field: str, message: str) -> ManifestError:
    return ManifestError(message, obj=f"{KIND_RESERVATION} {name}", field=field)


def _mapping(v: Any, name: str, field: str) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise _fail(name, field, "expected a mapping")
    return v


def _list(v: Any, name: str, field: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _fail(name, field, "expected a list")
    return v


def _bool(v: Any, name: str, field: str, default: bool) -> bool:
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _fail(name, field, f"expected true or false, got {v!r}")
    return v


def _str(v: Any, name: str, field: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise _fail(name, field, f"expected a string, got {type(v).__name__}")
    return v


def _resources(v: Any, name: str, field: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r, q in _mapping(v, name, field).items():
        try:
            amount = canonical(str(r), q)
        except ValueError as e:
            raise _fail(name, f"{field}.{r}", str(e)) from None
        if amount < 0:
            raise _fail(name, f"{field}.{r}", f"invalid quantity {q!r}: must be greater than or equal to 0")
        out[str(r)] = amount
    return out


def _selector(v: Any, name: str, field: str) -> dict[str, Any] | None:
    """A metav1.LabelSelector, checked as the API server would."""
    if v is None:
        return None
    sel = _mapping(v, name, field)
    for k, x in _mapping(sel.get("matchLabels"), name, f"{field}.matchLabels").items():
        if not isinstance(x, str):
            raise _fail(name, f"{field}.matchLabels.{k}", "expected a string")
    for i, e in enumerate(_list(sel.get("matchExpressions"), name, f"{field}.matchExpressions")):
        w = f"{field}.matchExpressions[{i}]"
        e = _mapping(e, name, w)
        op = e.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise _fail(name, f"{w}.operator", f"unsupported operator {op!r}")
        values = _list(e.get("values"), name, f"{w}.values")
        if op in ("In", "NotIn") and not values:
            raise _fail(name, f"{w}.values", f"must be specified when operator is {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise _fail(name, f"{w}.values", f"may not be specified when operator is {op}")
    return dict(sel)


@attrs.define
class Owner:
    """One ``spec.owners[]`` entry (ReservationOwner): its fields are ANDed, the owners ORed."""

    object: dict[str, Any] | None = None
    controller: dict[str, Any] | None = None
    label_selector: dict[str, Any] | None = None

    def matches(self, pod: Pod) -> bool:
        """Koordinator's ReservationOwnerMatcher.Match: MatchObjectRef, MatchReservationControllerReference
        and MatchLabels, all of the ones set."""
        o = self.object
        if o is not None:
            for key, have in (("uid", pod.uid), ("name", pod.name), ("namespace", pod.namespace),
                              ("apiVersion", "v1")):
                want = o.get(key)
                if want and want != have:
                    return False
        c = self.controller
        if c is not None:
            if c.get("namespace") and c["namespace"] != pod.namespace:
                return False
            refs = (((pod.raw or {}).get("metadata") or {}).get("ownerReferences")) or []
            if not any(isinstance(ref, Mapping) and _controller_matches(c, ref) for ref in refs):
                return False
        if self.label_selector is not None and not selector_matches(self.label_selector, pod.labels):
            return False
        return True


def _controller_matches(c: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
    if c.get("controller") is not None and ref.get("controller") is not None and bool(c["controller"]) != bool(ref["controller"]):
        return False
    if c.get("controller") is not None and ref.get("controller") is None:
        return False
    return all(not c.get(k) or c[k] == ref.get(k) for k in ("uid", "name", "kind", "apiVersion"))


@attrs.define
class Reservation:
    """A Reservation as the plugin keeps it: the spec as read, the status as the scheduler maintains it."""

    name: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    creation: float | None
    #: the reserve pod made from ``spec.template`` (pending: its node is chosen by the scheduling cycle)
    reserve_pod: Pod
    owners: list[Owner]
    ttl: float | None
    expires: float | None
    allocate_once: bool = True
    allocate_policy: str = POLICY_DEFAULT
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    #: the resources a Restricted reservation confines its owners to (its reservation-restricted-options,
    #: else every resource it reserves: GetReservationRestrictedResources)
    restricted: tuple[str, ...] = ()
    phase: str = PENDING
    conditions: list[dict[str, Any]] = attrs.field(factory=list)
    node_name: str = ""
    allocatable: dict[str, int] = attrs.field(factory=dict)
    allocated: dict[str, int] = attrs.field(factory=dict)
    #: uid → {"namespace", "name", "uid"} of the pods allocated from it (status.currentOwners)
    current_owners: dict[str, dict[str, str]] = attrs.field(factory=dict)
    #: requests of each current owner (for giving them back when it goes away)
    owner_requests: dict[str, dict[str, int]] = attrs.field(factory=dict)

    @property
    def requests(self) -> dict[str, int]:
        """What it reserves: status.allocatable once Available, else the template's requests."""
        return dict(self.allocatable) if self.allocatable else dict(self.reserve_pod.requests)

    @property
    def resource_names(self) -> list[str]:
        return sorted(r for r, v in self.requests.items() if v)

    @property
    def remaining(self) -> dict[str, int]:
        """allocatable − allocated, never negative (ReservationInfo.GetAvailable)."""
        return {r: max(v - self.allocated.get(r, 0), 0) for r, v in self.requests.items()}

    @property
    def is_available(self) -> bool:
        return self.phase == AVAILABLE and bool(self.node_name)

    @property
    def is_terminal(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    @property
    def order(self) -> int:
        """``reservation-order`` label: a lower non-zero order is preferred (0: none)."""
        try:
            return int(self.labels.get(LABEL_RESERVATION_ORDER, "0"))
        except ValueError:
            return 0

    def expiry(self, first_seen: float) -> float | None:
        """When it expires (None: never): ``ttl: 0`` disables expiry; otherwise ``expires`` or creation +
        ``ttl``, whichever comes first (isReservationNeedExpiration). An object without a creation time
        counts from when the scheduler first saw it."""
        if self.ttl == 0:
            return None
        created = self.creation if self.creation is not None else first_seen
        times = []
        if self.expires is not None:
            times.append(self.expires)
        if self.ttl is not None:
            times.append(created + self.ttl)
        elif self.expires is None:
            times.append(created + DEFAULT_TTL)
        return min(times)

    def matches_owner(self, pod: Pod) -> bool:
        """MatchReservationOwners: no owners match nothing, ``[{}]`` everything."""
        return any(o.matches(pod) for o in self.owners)

    def set_condition(self, ctype: str, status: str, reason: str, now: str, message: str = "") -> None:
        for c in self.conditions:
            if c.get("type") == ctype:
                if c.get("status") != status:
                    c["lastTransitionTime"] = now
                c.update(status=status, reason=reason, message=message, lastProbeTime=now)
                return
        self.conditions.append({"type": ctype, "status": status, "reason": reason, "message": message,
                                "lastProbeTime": now, "lastTransitionTime": now})


def is_reservation_ignored(pod: Pod) -> bool:
    return pod.labels.get(LABEL_RESERVATION_IGNORED) == "true"


def reservation_from_manifest(obj: Mapping[str, Any]) -> Reservation:
    """Read a Reservation object; a malformed field raises ManifestError naming it."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "?")
    spec = _mapping(obj.get("spec"), name, "spec")
    status = _mapping(obj.get("status"), name, "status")
    template = spec.get("template")
    if template is None:
        raise _fail(name, "spec.template", "required: the pod template to reserve")
    template = _mapping(template, name, "spec.template")
    owners_raw = _list(spec.get("owners"), name, "spec.owners")
    if not owners_raw:
        raise _fail(name, "spec.owners", "required: at least one owner")
    owners = []
    for i, o in enumerate(owners_raw):
        w = f"spec.owners[{i}]"
        o = _mapping(o, name, w)
        if not any(o.get(k) is not None for k in ("object", "controller", "labelSelector")):
            raise _fail(name, w, "needs at least one of object, controller, labelSelector")
        unknown = sorted(set(o) - {"object", "controller", "labelSelector"})
        if unknown:
            raise _fail(name, f"{w}.{unknown[0]}", "unknown field")
        ob = o.get("object")
        ctl = o.get("controller")
        if ob is not None:
            ob = {k: _str(v, name, f"{w}.object.{k}") for k, v in _mapping(ob, name, f"{w}.object").items()
                  if k in ("uid", "name", "namespace", "apiVersion", "kind", "resourceVersion", "fieldPath")}
        if ctl is not None:
            raw = _mapping(ctl, name, f"{w}.controller")
            ctl = {}
            for k, v in raw.items():
                if k in ("controller", "blockOwnerDeletion"):
                    ctl[k] = _bool(v, name, f"{w}.controller.{k}", False)
                else:
                    ctl[k] = _str(v, name, f"{w}.controller.{k}")
        owners.append(Owner(ob, ctl, _selector(o.get("labelSelector"), name, f"{w}.labelSelector")))
    ttl = expires = None
    if spec.get("ttl") is not None:
        try:
            ttl = parse_duration(spec["ttl"], allow_negative=False)
        except ValueError as e:
            raise _fail(name, "spec.ttl", str(e)) from None
    if spec.get("expires") is not None:
        expires = parse_time(spec["expires"], obj=f"{KIND_RESERVATION} {name}", field="spec.expires")
    policy = spec.get("allocatePolicy") or ""
    if policy not in (POLICY_DEFAULT, POLICY_ALIGNED, POLICY_RESTRICTED):
        raise _fail(name, "spec.allocatePolicy", f"expected Aligned or Restricted, got {policy!r}")
    taints = []
    for i, t in enumerate(_list(spec.get("taints"), name, "spec.taints")):
        t = _mapping(t, name, f"spec.taints[{i}]")
        key = _str(t.get("key"), name, f"spec.taints[{i}].key")
        if not key:
            raise _fail(name, f"spec.taints[{i}].key", "required")
        effect = _str(t.get("effect"), name, f"spec.taints[{i}].effect")
        if effect not in _TAINT_EFFECTS:
            raise _fail(name, f"spec.taints[{i}].effect", f"expected one of {', '.join(_TAINT_EFFECTS)}, got {effect!r}")
        taints.append(Taint(key, _str(t.get("value"), name, f"spec.taints[{i}].value"), effect))
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels"), name, "metadata.labels").items()}
    annotations = {str(k): str(v) for k, v in _mapping(meta.get("annotations"), name, "metadata.annotations").items()}
    uid = str(meta.get("uid") or f"reservation-{name}")
    phase = _str(status.get("phase"), name, "status.phase") or PENDING
    if phase not in PHASES:
        raise _fail(name, "status.phase", f"expected one of {', '.join(PHASES)}, got {phase!r}")
    conditions = []
    for i, c in enumerate(_list(status.get("conditions"), name, "status.conditions")):
        conditions.append(dict(_mapping(c, name, f"status.conditions[{i}]")))
    current: dict[str, dict[str, str]] = {}
    for i, ref in enumerate(_list(status.get("currentOwners"), name, "status.currentOwners")):
        ref = _mapping(ref, name, f"status.currentOwners[{i}]")
        entry = {k: _str(ref.get(k), name, f"status.currentOwners[{i}].{k}") for k in ("namespace", "name", "uid")}
        current[entry["uid"] or f"{entry['namespace']}/{entry['name']}"] = entry
    allocate_once = _bool(spec.get("allocateOnce"), name, "spec.allocateOnce", True)
    reserve_pod = _reserve_pod(name, uid, template, labels, annotations)
    allocatable = _resources(status.get("allocatable"), name, "status.allocatable")
    restricted: tuple[str, ...] = ()
    if policy == POLICY_RESTRICTED:
        names = sorted(r for r, v in (allocatable or reserve_pod.requests).items() if v)
        raw_opts = annotations.get(ANNOTATION_RESERVATION_RESTRICTED_OPTIONS)
        wanted: list[str] = []
        if raw_opts:
            try:
                opts = json.loads(raw_opts)
                wanted = [str(r) for r in (opts.get("resources") or [])] if isinstance(opts, dict) else []
                if not isinstance(opts, dict):
                    raise ValueError("expected a JSON object")
            except ValueError as e:
                raise _fail(name, f"metadata.annotations.{ANNOTATION_RESERVATION_RESTRICTED_OPTIONS}", str(e)) from None
        restricted = tuple(r for r in names if r in wanted) or tuple(names)
    return Reservation(
        name=name, uid=uid, labels=labels, annotations=annotations,
        creation=parse_time(meta.get("creationTimestamp"), obj=f"{KIND_RESERVATION} {name}",
                            field="metadata.creationTimestamp"),
        reserve_pod=reserve_pod, owners=owners, ttl=ttl, expires=expires, allocate_once=allocate_once,
        allocate_policy=policy, unschedulable=_bool(spec.get("unschedulable"), name, "spec.unschedulable", False),
        taints=tuple(taints), restricted=restricted, phase=phase, conditions=conditions,
        node_name=_str(status.get("nodeName"), name, "status.nodeName"), allocatable=allocatable,
        allocated=_resources(status.get("allocated"), name, "status.allocated"), current_owners=current)


def _reserve_pod(name: str, uid: str, template: Mapping[str, Any], labels: Mapping[str, str],
                 annotations: Mapping[str, str]) -> Pod:
    """NewReservePod: the template's pod, named after the reservation's uid in the template's namespace
    (default ``default``), the reservation's labels and annotations over the template's, marked as a
    reserve pod; a template ``nodeName`` becomes the reservation-node annotation; priority from the
    template, else the ``koordinator.sh/priority`` label, else MaxInt32 (never preempted)."""
    tmeta = dict(_mapping(template.get("metadata"), name, "spec.template.metadata"))
    tspec = dict(_mapping(template.get("spec"), name, "spec.template.spec"))
    pod_labels = {**{str(k): str(v) for k, v in _mapping(tmeta.get("labels"), name, "spec.template.metadata.labels").items()},
                  **labels}
    pod_anns = {**{str(k): str(v) for k, v in _mapping(tmeta.get("annotations"), name,
                                                       "spec.template.metadata.annotations").items()},
                **annotations, ANNOTATION_RESERVE_POD: "true", ANNOTATION_RESERVATION_NAME: name}
    node = tspec.pop("nodeName", None)
    if node:
        pod_anns[ANNOTATION_RESERVATION_NODE] = _str(node, name, "spec.template.spec.nodeName")
    if tspec.get("priority") is None:
        prio = MAX_INT32
        try:
            if labels.get(LABEL_POD_PRIORITY):
                prio = int(labels[LABEL_POD_PRIORITY])
        except ValueError:
            pass
        tspec["priority"] = prio
    tspec.setdefault("containers", [])
    manifest = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": uid, "namespace": tmeta.get("namespace") or "default", "uid": uid,
                             "labels": pod_labels, "annotations": pod_anns},
                "spec": tspec}
    try:
        return load_objects([manifest], file=f"{KIND_RESERVATION} {name}").pods[0]
    except ManifestError as e:
        raise _fail(name, f"spec.template.{e.field}" if e.field else "spec.template", e.detail) from None


# -- the pod's reservation affinity (GetRequiredReservationAffinity) ----------------------------------
@attrs.frozen
class ReservationAffinity:
    """The ``scheduling.koordinator.sh/reservation-affinity`` annotation of a pod."""

    name: str = ""
    selector: Mapping[str, str] = attrs.field(factory=dict)
    terms: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()

    def tolerates_unschedulable(self) -> bool:
        return _tolerated(self.tolerations, {"key": "node.kubernetes.io/unschedulable", "value": "",
                                             "effect": "NoSchedule"})

    def untolerated_taint(self, taints: tuple[Taint, ...]) -> Taint | None:
        """The first NoSchedule/NoExecute taint of a reservation its tolerations do not tolerate."""
        for t in taints:
            if t.effect in ("NoSchedule", "NoExecute") and not _tolerated(
                    self.tolerations, {"key": t.key, "value": t.value, "effect": t.effect}):
                return t
        return None

    def matches(self, r: Reservation, node_labels: Mapping[str, str]) -> bool:
        """MatchReservationAffinity: the selector and the terms over the node's labels with the
        reservation's over them, ``metadata.name`` the reservation's name."""
        labels = {**node_labels, **r.labels}
        if any(labels.get(k) != v for k, v in self.selector.items()):
            return False
        if not self.terms:
            return True
        return any(_term_matches(t, labels, r.name) for t in self.terms)


def _tolerated(tolerations: tuple[Mapping[str, Any], ...], taint: Mapping[str, str]) -> bool:
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint["effect"]:
            continue
        op = tol.get("operator") or "Equal"
        key = tol.get("key") or ""
        if not key:
            if op == "Exists":
                return True
            continue
        if key != taint["key"]:
            continue
        if op == "Exists" or (tol.get("value") or "") == taint["value"]:
            return True
    return False


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    exprs = list(term.get("matchExpressions") or [])
    fields = list(term.get("matchFields") or [])
    if not exprs and not fields:
        return False  # an empty term matches nothing (nodeaffinity.NewNodeSelector)
    for e in exprs:
        if not _requirement(e, labels.get(e.get("key", "")), e.get("key", "") in labels):
            return False
    for f in fields:
        if f.get("key") != "metadata.name" or not _requirement(f, name, True):
            return False
    return True


def _requirement(e: Mapping[str, Any], value: str | None, present: bool) -> bool:
    op, values = e.get("operator"), [str(v) for v in e.get("values") or []]
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            a, b = int(str(value)), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def reservation_affinity(pod: Pod) -> ReservationAffinity | None:
    """The pod's reservation affinity, None without the annotation; a malformed one raises ManifestError
    naming the pod and the annotation."""
    raw = pod.annotations.get(ANNOTATION_RESERVATION_AFFINITY)
    if raw is None:
        return None
    where = f"metadata.annotations.{ANNOTATION_RESERVATION_AFFINITY}"
    if raw == "":
        return ReservationAffinity()
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise ManifestError(f"invalid JSON: {e}", obj=f"Pod {pod.key}", field=where) from None
    if not isinstance(obj, dict):
        raise ManifestError("expected a JSON object", obj=f"Pod {pod.key}", field=where)
    sel = obj.get("reservationSelector") or {}
    req = obj.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    tols = obj.get("tolerations") or []
    if not isinstance(sel, dict) or not isinstance(req, dict) or not isinstance(tols, list):
        raise ManifestError("reservationSelector, requiredDuringSchedulingIgnoredDuringExecution or tolerations "
                            "has the wrong type", obj=f"Pod {pod.key}", field=where)
    terms = req.get("reservationSelectorTerms") or []
    if not isinstance(terms, list) or not all(isinstance(t, dict) for t in terms):
        raise ManifestError("expected a list of selector terms", obj=f"Pod {pod.key}",
                            field=f"{where}.requiredDuringSchedulingIgnoredDuringExecution.reservationSelectorTerms")
    for t in terms:
        for req_ in list(t.get("matchExpressions") or []) + list(t.get("matchFields") or []):
            if not isinstance(req_, dict) or req_.get("operator") not in _OPS:
                raise ManifestError(f"invalid selector requirement {req_!r}", obj=f"Pod {pod.key}", field=where)
    return ReservationAffinity(name=str(obj.get("name") or ""), selector={str(k): str(v) for k, v in sel.items()},
                               terms=tuple(terms), tolerations=tuple(t for t in tols if isinstance(t, dict)))


__all__ = ["AVAILABLE", "FAILED", "Owner", "PENDING", "POLICY_ALIGNED", "POLICY_DEFAULT", "POLICY_RESTRICTED",
           "Reservation", "ReservationAffinity", "SUCCEEDED", "WAITING", "is_reservation_ignored",
           "reservation_affinity", "reservation_from_manifest"]
