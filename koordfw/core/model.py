"""The object model: frozen attrs values for pods and nodes, built from Kubernetes manifests.

Pods and nodes keep the manifest they came from (``raw``, ``managedFields`` dropped) so that engines
can write back to the API; everything a plugin needs is parsed once into typed fields.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import re
import types
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..extension import (
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
from .errors import ManifestError
from .quantity import QuantityError, parse_resource_list
from .safeload import InputError, loads_json
from .safeload import shorten as _short

_PRIORITY_RANGES = ((9000, 9999, PRIORITY_PROD), (7000, 7999, PRIORITY_MID),
                    (5000, 5999, PRIORITY_BATCH), (3000, 3999, PRIORITY_FREE))

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"

_uid_counter = itertools.count(1)


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


def _node_images(status: Mapping[str, Any], ctx: str) -> tuple[tuple[tuple[str, ...], int], ...]:
    out = []
    for i, img in enumerate(_list(status.get("images"), "status.images", ctx)):
        w = f"status.images[{i}]"
        img = _map(img, w, ctx)
        names = tuple(_scalar(n, f"{w}.names[{j}]", ctx) for j, n in enumerate(_list(img.get("names"), f"{w}.names", ctx)))
        size = img.get("sizeBytes")
        size = 0 if size is None else _int_field(size, f"{w}.sizeBytes", ctx, 0, 2**63 - 1)
        out.append((names, size))
    return tuple(out)


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


# -- building from manifests ------------------------------------------------------------------------

#: Kubernetes' RFC 1123 name patterns (apimachinery's IsDNS1123Subdomain / IsDNS1123Label), without lengths
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Kubernetes' int32 fields (spec.priority)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def object_name(meta: Mapping[str, Any], kind: str, *, file: str | None = None, where: str = "") -> str:
    """``metadata.name`` of an object: a non-empty string; Pods and Nodes as Kubernetes validates them
    (a DNS-1123 subdomain of at most 253 characters). Anything else raises ManifestError."""
    name = meta.get("name")
    field = f"{where}metadata.name"
    if name is None or name == "":
        raise ManifestError(f"{kind} has no metadata.name", file=file, field=field)
    if not isinstance(name, str):
        raise ManifestError(f"metadata.name must be a string, got {type(name).__name__} {_short(name)}",
                            file=file, obj=kind, field=field)
    if kind in ("Pod", "Node") and (len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name)):
        raise ManifestError(f"invalid name {_short(name)}: a lowercase RFC 1123 subdomain of at most 253 "
                            "characters ([a-z0-9], '-' and '.', starting and ending alphanumeric)",
                            file=file, obj=f"{kind} {_short(name)}", field=field)
    if len(name) > 253 or "/" in name:
        raise ManifestError(f"invalid name {_short(name)}: at most 253 characters, no '/'", file=file,
                            obj=kind, field=field)
    return name


def object_namespace(meta: Mapping[str, Any], *, file: str | None = None, obj: str | None = None,
                     where: str = "") -> str:
    """``metadata.namespace`` (``default`` when absent): a DNS-1123 label, as Kubernetes validates it."""
    ns = meta.get("namespace")
    if ns is None or ns == "":
        return "default"
    if not isinstance(ns, str) or len(ns) > 63 or not DNS_LABEL.fullmatch(ns):
        raise ManifestError(f"invalid namespace {_short(ns)}: a lowercase RFC 1123 label of at most 63 characters",
                            file=file, obj=obj, field=f"{where}metadata.namespace")
    return ns


def _scalar(v: object, where: str, ctx: str) -> str:
    if type(v) is str:  # the common case, first
        return v
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        raise ManifestError(f"expected a string, got {v!r}", obj=ctx, field=where)
    if isinstance(v, (str, int, float)):
        return str(v)
    raise ManifestError(f"expected a string, got {type(v).__name__}", obj=ctx, field=where)


def _str_map(obj: object, where: str, ctx: str) -> dict[str, str]:
    """A string-to-string mapping (labels, annotations, nodeSelector); YAML scalars are taken as their
    text (``1``, ``true``), a mapping or list as a value is an error."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ManifestError(f"expected a mapping, got {type(obj).__name__}", obj=ctx, field=where)
    if all(type(k) is str and type(v) is str for k, v in obj.items()):  # the common case: nothing to convert
        return dict(obj)
    return {_scalar(k, where, ctx): _scalar(v, f"{where}.{k}", ctx) for k, v in obj.items()}


def _int_field(v: object, where: str, ctx: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int:
    if isinstance(v, str):
        try:
            v = int(v.strip()) if len(v) < 20 else v
        except ValueError:
            pass
    if isinstance(v, bool) or not isinstance(v, int):
        raise ManifestError(f"expected an integer, got {_short(v)}", obj=ctx, field=where)
    if not lo <= v <= hi:
        raise ManifestError(f"{_short(v)} is outside {lo}..{hi}", obj=ctx, field=where)
    return v


_NODE_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_LABEL_OPS = ("In", "NotIn", "Exists", "DoesNotExist")


def _map(v: object, where: str, ctx: str) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ManifestError(f"expected a mapping, got {type(v).__name__}", obj=ctx, field=where)
    return v


def _list(v: object, where: str, ctx: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ManifestError(f"expected a list, got {type(v).__name__}", obj=ctx, field=where)
    return v


def _requirement(e: object, where: str, ctx: str, ops: tuple[str, ...]) -> None:
    e = _map(e, where, ctx)
    if not isinstance(e.get("key"), str) or not e.get("key"):
        raise ManifestError("a requirement needs a key (a string)", obj=ctx, field=f"{where}.key")
    op = e.get("operator")
    if op not in ops:
        raise ManifestError(f"invalid operator {_short(op)}; one of {', '.join(ops)}", obj=ctx, field=f"{where}.operator")
    values = _list(e.get("values"), f"{where}.values", ctx)
    for j, v in enumerate(values):
        _scalar(v, f"{where}.values[{j}]", ctx)
    if op in ("In", "NotIn") and not values:
        raise ManifestError(f"{op} needs at least one value", obj=ctx, field=f"{where}.values")
    if op in ("Exists", "DoesNotExist") and values:
        raise ManifestError(f"{op} takes no values", obj=ctx, field=f"{where}.values")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ManifestError(f"{op} needs exactly one value", obj=ctx, field=f"{where}.values")
        try:
            int(str(values[0]))
        except ValueError:
            raise ManifestError(f"{op} needs an integer value", obj=ctx, field=f"{where}.values[0]") from None


def label_selector_check(sel: object, where: str, ctx: str) -> None:
    """Validate a ``metav1.LabelSelector``'s shape (matchLabels, matchExpressions), as the API does."""
    sel = _map(sel, where, ctx)
    _str_map(sel.get("matchLabels"), f"{where}.matchLabels", ctx)
    for j, e in enumerate(_list(sel.get("matchExpressions"), f"{where}.matchExpressions", ctx)):
        _requirement(e, f"{where}.matchExpressions[{j}]", ctx, _LABEL_OPS)


def _node_term(t: object, where: str, ctx: str) -> None:
    t = _map(t, where, ctx)
    for part in ("matchExpressions", "matchFields"):
        for j, e in enumerate(_list(t.get(part), f"{where}.{part}", ctx)):
            _requirement(e, f"{where}.{part}[{j}]", ctx, _NODE_OPS)


def _weight(item: Mapping[str, Any], where: str, ctx: str) -> None:
    _int_field(item.get("weight"), f"{where}.weight", ctx, 1, 100)


def _pod_term(t: object, where: str, ctx: str) -> None:
    t = _map(t, where, ctx)
    if t.get("labelSelector") is not None:
        label_selector_check(t["labelSelector"], f"{where}.labelSelector", ctx)
    if t.get("namespaceSelector") is not None:
        label_selector_check(t["namespaceSelector"], f"{where}.namespaceSelector", ctx)
    for j, n in enumerate(_list(t.get("namespaces"), f"{where}.namespaces", ctx)):
        if not isinstance(n, str):
            raise ManifestError("expected a string", obj=ctx, field=f"{where}.namespaces[{j}]")
    for part in ("matchLabelKeys", "mismatchLabelKeys"):
        for j, k in enumerate(_list(t.get(part), f"{where}.{part}", ctx)):
            if not isinstance(k, str) or not k:
                raise ManifestError("expected a label key (a string)", obj=ctx, field=f"{where}.{part}[{j}]")
    if not isinstance(t.get("topologyKey"), str) or not t.get("topologyKey"):
        raise ManifestError("a pod affinity term needs a topologyKey (a string)", obj=ctx, field=f"{where}.topologyKey")


def validate_affinity(affinity: object, ctx: str, where: str = "spec.affinity") -> dict:
    """Check ``spec.affinity``'s shape as the API server does (types, operators, values, weights), so
    plugins can read it without guarding every field; returns it."""
    aff = dict(_map(affinity, where, ctx))
    na = _map(aff.get("nodeAffinity"), f"{where}.nodeAffinity", ctx)
    w = f"{where}.nodeAffinity"
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        rw = f"{w}.requiredDuringSchedulingIgnoredDuringExecution"
        terms = _list(_map(req, rw, ctx).get("nodeSelectorTerms"), f"{rw}.nodeSelectorTerms", ctx)
        for i, t in enumerate(terms):
            _node_term(t, f"{rw}.nodeSelectorTerms[{i}]", ctx)
    _weighted_terms(na, w, ctx, "preference", _node_term)
    for kind in ("podAffinity", "podAntiAffinity"):
        pa = _map(aff.get(kind), f"{where}.{kind}", ctx)
        rw = f"{where}.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
        for i, t in enumerate(_list(pa.get("requiredDuringSchedulingIgnoredDuringExecution"), rw, ctx)):
            _pod_term(t, f"{rw}[{i}]", ctx)
        _weighted_terms(pa, f"{where}.{kind}", ctx, "podAffinityTerm", _pod_term)
    return aff


def _weighted_terms(parent: Mapping[str, Any], where: str, ctx: str, term_key: str,
                    check_term: Callable[[object, str, str], None]) -> None:
    """``preferredDuringSchedulingIgnoredDuringExecution``: a list of {weight 1..100, <term_key>: term}."""
    pw = f"{where}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(_list(parent.get("preferredDuringSchedulingIgnoredDuringExecution"), pw, ctx)):
        item = _map(item, f"{pw}[{i}]", ctx)
        _weight(item, f"{pw}[{i}]", ctx)
        check_term(item.get(term_key), f"{pw}[{i}].{term_key}", ctx)


_PROTOCOLS = ("TCP", "UDP", "SCTP")


def _host_ports(raw_containers: list, raw_init: list, ctx: str) -> tuple[HostPort, ...]:
    """Host ports of the containers and of restartable init containers (they run the pod's whole life),
    as kube's ``GetHostPorts``; each port checked as the API server does."""
    out: list[HostPort] = []
    for part, items in (("spec.initContainers", raw_init), ("spec.containers", raw_containers)):
        for i, c in enumerate(items):
            if not isinstance(c, dict) or c.get("ports") is None:
                continue
            ports = _list(c.get("ports"), f"{part}[{i}].ports", ctx)
            if part == "spec.initContainers" and c.get("restartPolicy") != "Always":
                continue
            for j, p in enumerate(ports):
                w = f"{part}[{i}].ports[{j}]"
                p = _map(p, w, ctx)
                hp = p.get("hostPort")
                if hp is None:
                    continue
                port = _int_field(hp, f"{w}.hostPort", ctx, 0, 65535)
                if port == 0:
                    continue
                proto = _scalar(p.get("protocol"), f"{w}.protocol", ctx) or "TCP"
                if proto not in _PROTOCOLS:
                    raise ManifestError(f"invalid protocol {_short(proto)}; one of {', '.join(_PROTOCOLS)}", obj=ctx,
                                        field=f"{w}.protocol")
                ip = _scalar(p.get("hostIP"), f"{w}.hostIP", ctx) or "0.0.0.0"
                out.append(HostPort(ip, proto, port))
    return tuple(out)


#: volume sources whose identity fields the scheduler reads (volume_restrictions), and those fields
_VOLUME_FIELDS = {"persistentVolumeClaim": ("claimName",), "gcePersistentDisk": ("pdName",),
                  "awsElasticBlockStore": ("volumeID",), "iscsi": ("iqn", "targetPortal"), "rbd": ("image",)}


def validate_volumes(raw: object, ctx: str, where: str = "spec.volumes") -> tuple[Mapping[str, Any], ...]:
    """``spec.volumes``: each a mapping with a name; the sources the scheduler reads have their
    identity fields as strings (``readOnly`` a boolean, ``rbd.monitors`` a list of strings)."""
    out = []
    for i, v in enumerate(_list(raw, where, ctx)):
        w = f"{where}[{i}]"
        v = _map(v, w, ctx)
        if not isinstance(v.get("name"), str) or not v.get("name"):
            raise ManifestError("a volume needs a name (a string)", obj=ctx, field=f"{w}.name")
        for src, fields in _VOLUME_FIELDS.items():
            if v.get(src) is None:
                continue
            body = _map(v[src], f"{w}.{src}", ctx)
            for f in fields:
                if not isinstance(body.get(f), str) or not body.get(f):
                    raise ManifestError("expected a non-empty string", obj=ctx, field=f"{w}.{src}.{f}")
            ro = body.get("readOnly")
            if ro is not None and not isinstance(ro, bool):
                raise ManifestError(f"expected true or false, got {_short(ro)}", obj=ctx, field=f"{w}.{src}.readOnly")
        if v.get("rbd") is not None:
            for j, m in enumerate(_list(v["rbd"].get("monitors"), f"{w}.rbd.monitors", ctx)):
                if not isinstance(m, str):
                    raise ManifestError("expected a string", obj=ctx, field=f"{w}.rbd.monitors[{j}]")
        out.append(v)
    return tuple(out)


_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")


def validate_spread_constraints(raw: object, ctx: str,
                                where: str = "spec.topologySpreadConstraints") -> tuple[Mapping[str, Any], ...]:
    """Check ``spec.topologySpreadConstraints`` as the API server does (maxSkew > 0, a topologyKey, the
    enum fields, minDomains > 0 only with DoNotSchedule, no two constraints with one topologyKey and
    whenUnsatisfiable); returns them."""
    out = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(_list(raw, where, ctx)):
        w = f"{where}[{i}]"
        c = _map(c, w, ctx)
        _int_field(c.get("maxSkew"), f"{w}.maxSkew", ctx, 1, INT32_MAX)
        key = c.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ManifestError("a topology spread constraint needs a topologyKey (a string)", obj=ctx,
                                field=f"{w}.topologyKey")
        when = c.get("whenUnsatisfiable")
        if when not in _UNSATISFIABLE:
            raise ManifestError(f"invalid whenUnsatisfiable {_short(when)}; one of {', '.join(_UNSATISFIABLE)}",
                                obj=ctx, field=f"{w}.whenUnsatisfiable")
        if (key, when) in seen:
            raise ManifestError(f"a second constraint with topologyKey {key!r} and whenUnsatisfiable {when}",
                                obj=ctx, field=w)
        seen.add((key, when))
        if c.get("minDomains") is not None:
            _int_field(c.get("minDomains"), f"{w}.minDomains", ctx, 1, INT32_MAX)
            if when != "DoNotSchedule":
                raise ManifestError("minDomains may only be set with whenUnsatisfiable: DoNotSchedule", obj=ctx,
                                    field=f"{w}.minDomains")
        for pol in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            if c.get(pol) is not None and c.get(pol) not in _POLICIES:
                raise ManifestError(f"invalid {pol} {_short(c.get(pol))}; one of Honor, Ignore", obj=ctx,
                                    field=f"{w}.{pol}")
        if c.get("labelSelector") is not None:
            label_selector_check(c["labelSelector"], f"{w}.labelSelector", ctx)
        for j, k in enumerate(_list(c.get("matchLabelKeys"), f"{w}.matchLabelKeys", ctx)):
            if not isinstance(k, str) or not k:
                raise ManifestError("expected a label key (a string)", obj=ctx, field=f"{w}.matchLabelKeys[{j}]")
        out.append(c)
    return tuple(out)


def _gates(raw: object, ctx: str) -> tuple[str, ...]:
    out = []
    for i, g in enumerate(_list(raw, "spec.schedulingGates", ctx)):
        name = _map(g, f"spec.schedulingGates[{i}]", ctx).get("name")
        if not isinstance(name, str) or not name:
            raise ManifestError("a scheduling gate needs a name (a string)", obj=ctx, field=f"spec.schedulingGates[{i}].name")
        out.append(name)
    return tuple(out)


def _controller(owners: list, ctx: str) -> OwnerRef | None:
    for i, o in enumerate(owners):
        if isinstance(o, dict) and o.get("controller") is True:
            w = f"metadata.ownerReferences[{i}]"
            return OwnerRef(_scalar(o.get("apiVersion"), f"{w}.apiVersion", ctx), _scalar(o.get("kind"), f"{w}.kind", ctx),
                            _scalar(o.get("name"), f"{w}.name", ctx), _scalar(o.get("uid"), f"{w}.uid", ctx))
    return None


def _resources(obj: object, where: str, ctx: str) -> dict[str, int]:
    try:
        return parse_resource_list(obj, where=where)
    except QuantityError as e:
        raise ManifestError(str(e), obj=ctx, field=e.field or where) from None


def _container(c: object, where: str, ctx: str) -> Container:
    if not isinstance(c, dict):
        raise ManifestError("expected a container mapping", obj=ctx, field=where)
    res = _map(c.get("resources"), f"{where}.resources", ctx)
    if not isinstance(res, dict):
        raise ManifestError("expected a mapping", obj=ctx, field=f"{where}.resources")
    limits = _resources(res.get("limits"), f"{where}.resources.limits", ctx)
    requests = _resources(res.get("requests"), f"{where}.resources.requests", ctx)
    # Kubernetes defaults a missing request to the limit.
    for k, v in limits.items():
        requests.setdefault(k, v)
    name = c.get("name", "")
    if not isinstance(name, str):
        raise ManifestError(f"expected a string, got {type(name).__name__}", obj=ctx, field=f"{where}.name")
    return Container(name=name, requests=requests, limits=limits)


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


def pod_from_manifest(obj: Mapping[str, Any], *, file: str | None = None) -> Pod:
    """Build a Pod from a v1 Pod object; errors name the file, the pod and the field."""
    if not isinstance(obj, dict):
        raise ManifestError("a Pod must be a mapping", file=file)
    meta = obj.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise ManifestError("expected a mapping", file=file, field="metadata")
    name = object_name(meta, "Pod", file=file)
    ns = object_namespace(meta, file=file, obj=f"Pod {name}")
    ctx = f"Pod {ns}/{name}"
    try:
        return _pod(obj, meta, str(name), ns, ctx)
    except ManifestError as e:
        if e.file is None and file is not None:
            raise ManifestError(e.detail, file=file, obj=e.obj or ctx, field=e.field) from None
        raise


def _pod(obj: Mapping[str, Any], meta: dict, name: str, ns: str, ctx: str) -> Pod:
    spec = _map(obj.get("spec"), "spec", ctx)
    status = _map(obj.get("status"), "status", ctx)
    labels = _str_map(meta.get("labels"), "metadata.labels", ctx)
    annotations = _str_map(meta.get("annotations"), "metadata.annotations", ctx)
    raw_containers = _list(spec.get("containers"), "spec.containers", ctx)
    raw_init = _list(spec.get("initContainers"), "spec.initContainers", ctx)
    containers = tuple(_container(c, f"spec.containers[{i}]", ctx) for i, c in enumerate(raw_containers))
    init = tuple(_container(c, f"spec.initContainers[{i}]", ctx) for i, c in enumerate(raw_init))
    sidecars = tuple(isinstance(c, dict) and c.get("restartPolicy") == "Always" for c in raw_init)
    overhead = _resources(spec.get("overhead"), "spec.overhead", ctx)
    requests = effective_requests(containers, init, overhead, sidecars)
    limits: dict[str, int] = {}
    for c in containers:
        _add(limits, c.limits)
    priority = spec.get("priority", 0)
    priority = 0 if priority is None else _int_field(priority, "spec.priority", ctx)
    tolerations = []
    raw_tol = _list(spec.get("tolerations"), "spec.tolerations", ctx)
    for i, t in enumerate(raw_tol):
        if not isinstance(t, dict):
            raise ManifestError("expected a mapping", obj=ctx, field=f"spec.tolerations[{i}]")
        tw = f"spec.tolerations[{i}]"
        op = _scalar(t.get("operator"), f"{tw}.operator", ctx) or "Equal"
        if op not in ("Equal", "Exists"):
            raise ManifestError(f"invalid operator {op!r}; one of Equal, Exists", obj=ctx, field=f"{tw}.operator")
        tolerations.append(Toleration(key=_scalar(t.get("key"), f"{tw}.key", ctx), operator=op,
                                      value=_scalar(t.get("value"), f"{tw}.value", ctx),
                                      effect=_scalar(t.get("effect"), f"{tw}.effect", ctx)))
    raw_affinity = spec.get("affinity")
    affinity = {} if raw_affinity is None else validate_affinity(raw_affinity, ctx)
    owners = _list(meta.get("ownerReferences"), "metadata.ownerReferences", ctx)
    owner_kind = ""
    if owners:
        for o in owners:
            if isinstance(o, dict) and o.get("controller", True):
                owner_kind = str(o.get("kind") or "")
                break
    kube_qos = kube_qos_of(containers, init)
    qos = koord_qos_of(labels, kube_qos)
    raw = dict(obj)
    if "managedFields" in meta:
        raw["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    node_name = spec.get("nodeName")
    node_name = None if node_name == "" else node_name
    if node_name is not None and not isinstance(node_name, str):
        raise ManifestError(f"expected a node name (a string), got {_short(node_name)}", obj=ctx, field="spec.nodeName")
    nominated = status.get("nominatedNodeName")
    nominated = None if nominated == "" else nominated
    if nominated is not None and not isinstance(nominated, str):
        raise ManifestError(f"expected a node name (a string), got {_short(nominated)}", obj=ctx,
                            field="status.nominatedNodeName")
    return Pod(
        name=name, namespace=ns, uid=_scalar(meta.get("uid"), "metadata.uid", ctx) or f"uid-{ns}-{name}",
        labels=labels, annotations=annotations,
        node_name=node_name,
        scheduler_name=_scalar(spec.get("schedulerName"), "spec.schedulerName", ctx) or "default-scheduler",
        priority=priority,
        preemption_policy=_scalar(spec.get("preemptionPolicy"), "spec.preemptionPolicy", ctx) or "PreemptLowerPriority",
        requests=requests, limits=limits, containers=containers, init_containers=init,
        node_selector=_str_map(spec.get("nodeSelector"), "spec.nodeSelector", ctx),
        affinity=affinity, tolerations=tuple(tolerations), owner_kind=owner_kind,
        host_ports=_host_ports(raw_containers, raw_init, ctx),
        topology_spread_constraints=validate_spread_constraints(spec.get("topologySpreadConstraints"), ctx),
        controller=_controller(owners, ctx),
        volumes=validate_volumes(spec.get("volumes"), ctx),
        scheduling_gates=_gates(spec.get("schedulingGates"), ctx),
        images=tuple(_scalar(c.get("image"), f"{part}[{i}].image", ctx) if isinstance(c, dict) else ""
                     for part, items in (("spec.initContainers", raw_init), ("spec.containers", raw_containers))
                     for i, c in enumerate(items)),
        creation_timestamp=parse_time(meta.get("creationTimestamp"), obj=ctx, field="metadata.creationTimestamp"),
        deletion_timestamp=parse_time(meta.get("deletionTimestamp"), obj=ctx, field="metadata.deletionTimestamp"),
        phase=_scalar(status.get("phase"), "status.phase", ctx) or ("Running" if node_name else "Pending"),
        nominated_node_name=nominated,
        kube_qos=kube_qos, qos_class=qos,
        priority_class=priority_class_of(priority, labels, qos),
        raw=raw,
    )


def node_from_manifest(obj: Mapping[str, Any], *, file: str | None = None) -> Node:
    if not isinstance(obj, dict):
        raise ManifestError("a Node must be a mapping", file=file)
    meta = obj.get("metadata")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise ManifestError("expected a mapping", file=file, field="metadata")
    name = object_name(meta, "Node", file=file)
    ctx = f"Node {name}"
    try:
        spec = _map(obj.get("spec"), "spec", ctx)
        status = _map(obj.get("status"), "status", ctx)
        capacity = _resources(status.get("capacity"), "status.capacity", ctx)
        allocatable = _resources(status.get("allocatable"), "status.allocatable", ctx)
        if not allocatable:
            allocatable = dict(capacity)
        if not capacity:
            capacity = dict(allocatable)
        allocatable.setdefault("pods", 110)
        capacity.setdefault("pods", allocatable["pods"])
        taints = []
        raw_taints = _list(spec.get("taints"), "spec.taints", ctx)
        unschedulable = spec.get("unschedulable")
        if unschedulable is not None and not isinstance(unschedulable, bool):
            raise ManifestError(f"expected true or false, got {_short(unschedulable)}", obj=ctx,
                                field="spec.unschedulable")
        for i, t in enumerate(raw_taints):
            if not isinstance(t, dict) or not t.get("key"):
                raise ManifestError("a taint needs a key", obj=ctx, field=f"spec.taints[{i}]")
            tw = f"spec.taints[{i}]"
            effect = _scalar(t.get("effect"), f"{tw}.effect", ctx) or "NoSchedule"
            if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise ManifestError(f"invalid effect {effect!r}; one of NoSchedule, PreferNoSchedule, NoExecute",
                                    obj=ctx, field=f"{tw}.effect")
            taints.append(Taint(_scalar(t["key"], f"{tw}.key", ctx), _scalar(t.get("value"), f"{tw}.value", ctx),
                                effect))
        raw = dict(obj)
        if "managedFields" in meta:
            raw["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        return Node(
            name=name, uid=_scalar(meta.get("uid"), "metadata.uid", ctx) or f"uid-node-{name}",
            labels=_str_map(meta.get("labels"), "metadata.labels", ctx),
            annotations=_str_map(meta.get("annotations"), "metadata.annotations", ctx),
            capacity=capacity, allocatable=allocatable, unschedulable=bool(unschedulable),
            taints=tuple(taints),
            creation_timestamp=parse_time(meta.get("creationTimestamp"), obj=ctx, field="metadata.creationTimestamp"),
            raw=raw, images=_node_images(status, ctx),
        )
    except ManifestError as e:
        if e.file is None and file is not None:
            raise ManifestError(e.detail, file=file, obj=e.obj or ctx, field=e.field) from None
        raise


def make_pod(name: str, namespace: str = "default", *, requests: Mapping[str, object] | None = None,
             limits: Mapping[str, object] | None = None, labels: Mapping[str, str] | None = None,
             annotations: Mapping[str, str] | None = None, priority: int = 0, node_name: str | None = None,
             **spec_extra: Any) -> Pod:
    """Convenience constructor (tests, benchmarks, embedders): builds the manifest and parses it."""
    container: dict[str, Any] = {"name": "main", "resources": {}}
    if requests:
        container["resources"]["requests"] = dict(requests)
    if limits:
        container["resources"]["limits"] = dict(limits)
    spec: dict[str, Any] = {"containers": [container], "priority": priority}
    if node_name:
        spec["nodeName"] = node_name
    spec.update(spec_extra)
    return pod_from_manifest({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name, "namespace": namespace,
                                           "uid": f"uid-{next(_uid_counter)}-{namespace}-{name}",
                                           "labels": dict(labels or {}), "annotations": dict(annotations or {})},
                              "spec": spec})


def make_node(name: str, *, allocatable: Mapping[str, object] | None = None,
              labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
              taints: list[dict] | None = None, unschedulable: bool = False) -> Node:
    alloc = dict(allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"})
    return node_from_manifest({"apiVersion": "v1", "kind": "Node",
                               "metadata": {"name": name, "labels": dict(labels or {}),
                                            "annotations": dict(annotations or {})},
                               "spec": {"taints": taints or [], "unschedulable": unschedulable},
                               "status": {"capacity": alloc, "allocatable": alloc}})
