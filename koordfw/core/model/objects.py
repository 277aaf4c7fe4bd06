"""Pods, nodes and their parts as frozen attrs values (what plugins read), and the small rules on them
(priority classes, QoS, selectors, times)."""

from __future__ import annotations

import datetime as _dt
import math
import types
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ...extension import (
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    LABEL_POD_PRIORITY_CLASS,
    LABEL_POD_QOS,
    PRIORITY_BATCH,
    PRIORITY_CLASSES,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_NONE,
    PRIORITY_PROD,
    QOS_CLASSES,
)
from ..errors import ManifestError
from ..quantity import QuantityError, parse_resource_list
from ..safeload import InputError, loads_json
from ..safeload import shorten as _short

_PRIORITY_RANGES = ((9000, 9999, PRIORITY_PROD), (7000, 7999, PRIORITY_MID),
                    (5000, 5999, PRIORITY_BATCH), (3000, 3999, PRIORITY_FREE))

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"


#: the range of an RFC 3339 timestamp (years 0001 to 9999), as POSIX seconds
MIN_TIMESTAMP = _dt.datetime(1, 1, 1, tzinfo=_dt.UTC).timestamp()
MAX_TIMESTAMP = _dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=_dt.UTC).timestamp()


def parse_time(value: object, *, where: str = "", obj: str | None = None, field: str | None = None) -> float | None:
    """RFC 3339 timestamp (or POSIX seconds) → POSIX seconds; ``None`` when absent.

    A bad value (not a timestamp, not finite, outside the years 0001-9999) raises ManifestError naming
    ``obj`` and the field (``field``, or ``where``).
    """
    if value is None or value == "":
        return None
    where_ = field or where or None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ts = float(value) if isinstance(value, float) or abs(value) < 2**63 else math.inf
    elif isinstance(value, _dt.datetime):
        d = value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
        ts = d.timestamp()
    elif isinstance(value, _dt.date):  # YAML reads a bare 2024-01-02 as a date
        ts = _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC).timestamp()
    elif isinstance(value, str) and len(value) <= 64:
        s = value.strip().replace("Z", "+00:00")
        try:
            d = _dt.datetime.fromisoformat(s)
        except ValueError:
            raise ManifestError(f"invalid timestamp {_short(value)}", obj=obj, field=where_) from None
        if d.tzinfo is None:
            d = d.replace(tzinfo=_dt.UTC)
        try:
            ts = d.timestamp()
        except (OverflowError, ValueError):
            ts = math.inf
    else:
        raise ManifestError(f"invalid timestamp {_short(value)}", obj=obj, field=where_)
    if not (MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP):
        raise ManifestError(f"invalid timestamp {_short(value)}: outside the years 0001-9999", obj=obj, field=where_)
    return ts


def raw_allocatable(node: Any) -> dict[str, int] | None:
    """A node's ``node.koordinator.sh/raw-allocatable`` annotation (a JSON ResourceList, which load-aware
    scheduling and descheduling read instead of ``status.allocatable``) in canonical ints; ``None``
    when absent. A bad value raises ManifestError naming the node and the annotation."""
    raw = node.annotations.get(ANNOTATION_NODE_RAW_ALLOCATABLE)
    if not raw:
        return None
    obj, field = f"Node {node.name}", f"metadata.annotations.{ANNOTATION_NODE_RAW_ALLOCATABLE}"
    try:
        parsed = loads_json(raw)
    except InputError as e:
        raise ManifestError(str(e), obj=obj, field=field) from None
    if not isinstance(parsed, dict):
        raise ManifestError("expected a JSON object (a ResourceList)", obj=obj, field=field)
    try:
        return parse_resource_list(parsed)
    except QuantityError as e:
        raise ManifestError(str(e), obj=obj, field=f"{field}.{e.field}" if e.field else field) from None


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions`` with In, NotIn, Exists,
    DoesNotExist), as Kubernetes evaluates it: ``None`` matches nothing, ``{}`` matches everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != str(v):
            return False
    for e in selector.get("matchExpressions") or []:
        key, op = e.get("key"), e.get("operator")
        values = [str(v) for v in e.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def priority_class_of(priority: int, labels: Mapping[str, str], qos: str) -> str:
    """Koordinator's priority class: the label, else the spec.priority range, else derived from QoS."""
    label = labels.get(LABEL_POD_PRIORITY_CLASS)
    if label in PRIORITY_CLASSES:
        return label
    for lo, hi, name in _PRIORITY_RANGES:
        if lo <= priority <= hi:
            return name
    return PRIORITY_NONE


def default_priority_class_by_qos(qos: str) -> str:
    """Koordinator's fallback when a pod has no priority class (used by batch_resource)."""
    if qos in ("SYSTEM", "LSE", "LSR", "LS"):
        return PRIORITY_PROD
    if qos == "BE":
        return PRIORITY_BATCH
    return PRIORITY_NONE


@attrs.frozen
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@attrs.frozen
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@attrs.frozen
class Container:
    name: str
    requests: Mapping[str, int] = attrs.field(factory=dict)
    limits: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen
class HostPort:
    """A container port bound on the node (``hostPort`` > 0), as kube's ``HostPortInfo`` keys it: the
    host IP (``0.0.0.0`` when unset), the protocol (``TCP`` when unset) and the port."""

    host_ip: str
    protocol: str
    port: int


@attrs.frozen
class OwnerRef:
    """The pod's controller (the ``ownerReferences`` entry with ``controller: true``)."""

    api_version: str
    kind: str
    name: str
    uid: str = ""


@attrs.frozen(eq=False)
class Pod:
    """A pod. Equality and hashing are by identity; use ``key`` or ``uid`` to compare pods."""

    name: str
    namespace: str = "default"
    uid: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    node_name: str | None = None
    scheduler_name: str = "default-scheduler"
    priority: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    requests: Mapping[str, int] = attrs.field(factory=dict)
    limits: Mapping[str, int] = attrs.field(factory=dict)
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    node_selector: Mapping[str, str] = attrs.field(factory=dict)
    affinity: Mapping[str, Any] = attrs.field(factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    owner_kind: str = ""
    creation_timestamp: float | None = None
    deletion_timestamp: float | None = None
    phase: str = "Pending"
    nominated_node_name: str | None = None
    kube_qos: str = BEST_EFFORT
    qos_class: str = "BE"
    priority_class: str = PRIORITY_NONE
    raw: Mapping[str, Any] | None = attrs.field(default=None, repr=False)
    #: host ports of the containers and restartable init containers (kube's ``GetHostPorts``)
    host_ports: tuple[HostPort, ...] = ()
    #: ``spec.topologySpreadConstraints``, shape-checked as the API server does
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = ()
    #: the controller owner reference, if any
    controller: OwnerRef | None = None
    #: ``image`` of each init container, then of each container ("" when unset)
    images: tuple[str, ...] = ()
    #: ``spec.volumes``, shape-checked (a name each; claim names and disk identities strings)
    volumes: tuple[Mapping[str, Any], ...] = ()
    #: the names of ``spec.schedulingGates``
    scheduling_gates: tuple[str, ...] = ()

    @property
    def claim_names(self) -> tuple[str, ...]:
        """The PersistentVolumeClaims the pod uses: ``persistentVolumeClaim.claimName``, and
        ``<pod>-<volume>`` for generic ephemeral volumes (kube's ephemeral.VolumeClaimName)."""
        out = []
        for v in self.volumes:
            pvc = v.get("persistentVolumeClaim")
            if pvc is not None:
                out.append(str(pvc.get("claimName") or ""))
            elif v.get("ephemeral") is not None:
                out.append(f"{self.name}-{v['name']}")
        return tuple(out)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def has_pod_affinity(self) -> bool:
        """Whether ``spec.affinity`` has podAffinity or podAntiAffinity terms (kube's PodsWithAffinity)."""
        aff = self.affinity
        return bool(aff) and bool(aff.get("podAffinity") or aff.get("podAntiAffinity"))

    @property
    def has_required_anti_affinity(self) -> bool:
        """kube's PodsWithRequiredAntiAffinity."""
        anti = (self.affinity or {}).get("podAntiAffinity") or {}
        return bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))

    @property
    def is_bound(self) -> bool:
        return bool(self.node_name)

    @property
    def is_terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_daemonset(self) -> bool:
        return self.owner_kind == "DaemonSet"

    def request(self, resource: str) -> int:
        return self.requests.get(resource, 0)

    @property
    def priority_class_with_default(self) -> str:
        """Koordinator's ``GetPodPriorityClassWithDefault``: the class, else derived from the QoS."""
        return self.priority_class or default_priority_class_by_qos(self.qos_class)


_POD_FIELDS = tuple(f.name for f in attrs.fields(Pod))


@attrs.frozen(eq=False)
class Node:
    name: str
    uid: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    capacity: Mapping[str, int] = attrs.field(factory=dict)
    allocatable: Mapping[str, int] = attrs.field(factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    creation_timestamp: float | None = None
    raw: Mapping[str, Any] | None = attrs.field(default=None, repr=False)
    #: ``status.images``: (names, sizeBytes) of each image the node holds
    images: tuple[tuple[tuple[str, ...], int], ...] = ()


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def effective_requests(containers: tuple[Container, ...], init: tuple[Container, ...],
                       overhead: Mapping[str, int], sidecars: tuple[bool, ...] = ()) -> dict[str, int]:
    """The Kubernetes rule: Σ containers, max with each init container, plus overhead.

    Restartable init containers (sidecars) run alongside the app, so they add to the sum.
    """
    total: dict[str, int] = {}
    for c in containers:
        _add(total, c.requests)
    side: dict[str, int] = {}
    for i, c in enumerate(init):
        if i < len(sidecars) and sidecars[i]:
            _add(side, c.requests)
            _add(total, c.requests)
            continue
        # a regular init container runs with the sidecars started before it
        need = dict(side)
        _add(need, c.requests)
        for k, v in need.items():
            if v > total.get(k, 0):
                total[k] = v
    _add(total, overhead)
    return total


def kube_qos_of(containers: tuple[Container, ...], init: tuple[Container, ...]) -> str:
    all_c = containers + init
    any_set = False
    guaranteed = True
    for c in all_c:
        for r in ("cpu", "memory"):
            req, lim = c.requests.get(r), c.limits.get(r)
            if req or lim:
                any_set = True
            if not lim or req != lim:
                guaranteed = False
    if not any_set:
        return BEST_EFFORT
    return GUARANTEED if guaranteed and all_c else BURSTABLE


def koord_qos_of(labels: Mapping[str, str], kube_qos: str) -> str:
    q = labels.get(LABEL_POD_QOS)
    if q in QOS_CLASSES:
        return q
    return {GUARANTEED: "LSR", BURSTABLE: "LS", BEST_EFFORT: "BE"}[kube_qos]


def _make_replace_pod() -> Callable[..., Pod]:
    # straight-line code, one statement per field: half the time of a loop over the field names; each
    # field written through its slot's own setter (what object.__setattr__ finds after a lookup by name)
    slots = {name: Pod.__dict__.get(name) for name in _POD_FIELDS}
    direct = all(isinstance(d, types.MemberDescriptorType) for d in slots.values())
    lines = ["def replace_pod(pod, **changes):", "    new = _new(Pod)"]
    lines += [f"    _s_{name}(new, pod.{name})" if direct else f"    _set(new, {name!r}, pod.{name})"
              for name in _POD_FIELDS]
    lines += ["    for name, value in changes.items():", "        _set(new, name, value)", "    return new"]
    ns: dict[str, Any] = {"_new": object.__new__, "_set": object.__setattr__, "Pod": Pod}
    if direct:
        ns.update({f"_s_{name}": d.__set__ for name, d in slots.items()})  # type: ignore[union-attr]
    exec("\n".join(lines), ns)  # noqa: S102 - the source is built above from the Pod class's own fields
    fn: Callable[..., Pod] = ns["replace_pod"]
    fn.__doc__ = ("``attrs.evolve`` for the scheduler's hot path: the same validation-free copy, several "
                  "times faster (Pod has no converters or validators, so evolve's work is only re-running "
                  "``__init__``).")
    return fn


replace_pod = _make_replace_pod()


@attrs.frozen
class Migration:
    """A descheduling proposal: move (or, with ``to`` None, evict) a pod."""

    pod: str  # namespace/name
    from_node: str
    to: str | None
    reason: str
    plugin: str = ""
