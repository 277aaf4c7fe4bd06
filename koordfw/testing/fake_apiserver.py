"""A faithful in-process fake of the Kubernetes API server, for tests (no real API server runs here).

What it reproduces, from the API server's own behaviour (see docs/kubernetes.md):

* one monotonically increasing ``resourceVersion`` for every write, as etcd revisions; an update through
  the API that changes nothing is not written (same resourceVersion, no event);
* LIST with ``limit``/``continue`` over a consistent snapshot; an expired ``continue`` answers 410;
* WATCH from a ``resourceVersion`` with ``allowWatchBookmarks`` and ``timeoutSeconds``; a bounded
  history, past which a watch answers 410 *either* as an HTTP status or as a 200 stream carrying an
  ``ERROR`` event (``expired_form``);
* field selectors (``=``, ``==``, ``!=``; a comma is AND) on the fields the real server allows, and label
  selectors (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``), with a watch sending ``DELETED`` (old
  object) when an object stops matching and ``ADDED`` when it starts; ``resourceVersion=0`` ignores ``limit``
  (the watch cache serves whole lists);
* etcd compaction (``compact()``) apart from the watch cache's window (``expire()``): see them; a watch of
  events (no watch cache) from a compacted version is etcd's 410;
* a pod's create as admission makes it: SetDefaults_Pod (restartPolicy, dnsPolicy, grace period, schedulerName,
  enableServiceLinks, containers' terminationMessage*/imagePullPolicy, requests from limits) on every write;
  on an HTTP create also status reset to Pending with its qosClass, the ``default`` ServiceAccount's projected
  ``kube-api-access-*`` token volume, priority and preemptionPolicy from the PriorityClass (403 without it),
  the not-ready/unreachable tolerations for 300 s; a pod's DELETE writes ``deletionTimestamp`` (MODIFIED)
  before it goes (DELETED), even at grace 0; error Status objects name group resources as the server does
  (``leases.coordination.k8s.io "x" not found``, with ``details.group``);
* ``pods/{name}/binding`` with the server's exact 201/400/404/409 answers, ``pods/{name}/status``
  strategic-merge patches (conditions merge on ``type``), events.k8s.io/v1 events, coordination
  leases with optimistic concurrency, and Koordinator ``NodeMetric`` and ``NodeSLO`` objects (and
  ``Reservation`` / ``PodMigrationJob``, cluster-scoped with a status subresource: a PUT of ``/status``
  changes only the status, of the object everything but it; a stale ``resourceVersion`` is a 409);
  scheduler-plugins' ``PodGroup`` and ``ElasticQuota`` (no status subresource: ``/status`` is a 404, the
  object's PUT writes its status) and Koordinator's cluster-scoped ``ClusterNetworkTopology``;
* LIST's ``resourceVersion``/``resourceVersionMatch`` as the apiserver serves them: none is a quorum
  read of the newest state; ``0`` is served from the watch cache (which ``freeze_watch_cache()`` makes
  lag behind, as a real one can); ``NotOlderThan`` (and a bare RV without ``limit``) is the newest state
  once it is at least that RV; ``Exact`` (and a bare RV with ``limit``, etcd's legacy rule) is the state
  at exactly that RV (410 ``Expired`` once compacted); an RV ahead of the server's (or of a frozen watch
  cache's) is the 504 "Too large resource version" with the ``ResourceVersionTooLarge`` cause; the
  options' validation errors are 422 ``Invalid`` on ``ListOptions``, and a resourceVersion with
  ``continue`` is a 400;
* bearer-token authentication when ``tokens`` is given: a token must be known and unexpired on
  ``clock`` (``issue_token``/``revoke_token`` rotate them), else 401 ``Unauthorized``; and RBAC refusals
  of whole resources (``forbid(plural)``: 403 ``Forbidden`` with the apiserver's message);
* a PATCH whose body changes ``metadata.uid`` is a 422 (``metadata.uid: field is immutable``, from the
  update strategy's common-field validation: a patch has no preconditions), while a failed UID
  precondition is a 409 ``Conflict``: for a PUT or a Binding the storage's ``StorageError: invalid
  object, ... Precondition failed: UID in precondition: ...``, for a DELETE or an eviction
  ``rest.BeforeDelete``'s ``the UID in the precondition (...) does not match the UID in record (...)``;
* a release to serve as (``version``): the newest API by default, or ``"1.20"``, where PodDisruptionBudget and the
  Eviction subresource are ``policy/v1beta1`` only and Namespaces get no ``kubernetes.io/metadata.name`` label;
  discovery (``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>[/<version>]``) says which;
* injectable faults: dropped watch streams, 500s (for N requests or for a while), slow replies, a
  binding that succeeds but whose reply is lost;
* opt-in graceful pod deletion (``graceful_deletes=True``): a DELETE or an eviction of a bound pod sets
  ``deletionTimestamp`` (now + grace) and ``deletionGracePeriodSeconds`` (a MODIFIED event); the pod
  stays on its node until the grace period ends or ``finish_deletions()`` plays the kubelet's
  confirmation, and then goes (DELETED). Unbound or terminal pods and a grace period of 0 go at once.

Deliberately not modelled (tests/realkube/test_conformance.py runs the same assertions on both and says where
it skips the fake): admission webhooks are never called (no webhook configurations are served; koordfw's
webhook is tested by posting AdmissionReviews to it, and through a real API server); an
eviction of a Pending or terminal pod still honours its budget (v1.20+ skip it); there are no
ServiceAccounts, Secrets or controllers (no ``kube-root-ca.crt`` ConfigMap in namespaces); quantities are
kept as written (a real server answers ``500m`` for ``0.5``); no ``managedFields``.

Use ``async with FakeApiServer() as api:`` (it listens on 127.0.0.1, a free port) and point a client at
``api.url``. Objects can be added directly (``api.create(...)``) or through HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as _dt
import itertools
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
from aiohttp import web

__all__ = ["FakeApiServer", "Fault", "ResourceType", "RESOURCES"]


@attrs.frozen
class ResourceType:
    prefix: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    kind: str
    namespaced: bool
    fields: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    has_status: bool = False

    @property
    def api_version(self) -> str:
        return "v1" if self.prefix == "/api/v1" else self.prefix[len("/apis/"):]


_POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
               "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
               "status.nominatedNodeName")

RESOURCES: dict[str, ResourceType] = {r.plural: r for r in (
    ResourceType("/api/v1", "pods", "Pod", True, _POD_FIELDS, True),
    ResourceType("/api/v1", "nodes", "Node", False, ("metadata.name", "spec.unschedulable"), True),
    ResourceType("/api/v1", "namespaces", "Namespace", False, ("metadata.name", "status.phase"), True),
    ResourceType("/api/v1", "configmaps", "ConfigMap", True),
    ResourceType("/apis/events.k8s.io/v1", "events", "Event", True),
    ResourceType("/apis/coordination.k8s.io/v1", "leases", "Lease", True),
    ResourceType("/apis/slo.koordinator.sh/v1alpha1", "nodemetrics", "NodeMetric", False, ("metadata.name",), True),
    ResourceType("/apis/slo.koordinator.sh/v1alpha1", "nodeslos", "NodeSLO", False, ("metadata.name",), True),
    ResourceType("/apis/policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True, has_status=True),
    # Koordinator's Device CRD has no status subresource: a PUT of the object writes its status too
    ResourceType("/apis/scheduling.koordinator.sh/v1alpha1", "devices", "Device", False, ("metadata.name",)),
    # the NodeResourceTopology CRD (noderesourcetopology-api) has no status subresource: zones are top-level
    ResourceType("/apis/topology.node.k8s.io/v1alpha1", "noderesourcetopologies", "NodeResourceTopology", False,
                 ("metadata.name",)),
    # Koordinator's Reservation and PodMigrationJob CRDs: cluster-scoped, with a status subresource (a PUT of
    # the object keeps its status, a PUT of /status changes nothing else)
    ResourceType("/apis/scheduling.koordinator.sh/v1alpha1", "reservations", "Reservation", False,
                 ("metadata.name",), True),
    ResourceType("/apis/scheduling.koordinator.sh/v1alpha1", "podmigrationjobs", "PodMigrationJob", False,
                 ("metadata.name",), True),
    ResourceType("/apis/scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", False, ("metadata.name",)),
    # the volume built-ins' kinds: claims and volumes with a status subresource (the volume binder PATCHes a
    # PV's spec.claimRef and a claim's selected-node annotation; the PV controller writes their status)
    ResourceType("/api/v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, has_status=True),
    ResourceType("/api/v1", "persistentvolumes", "PersistentVolume", False, ("metadata.name",), True),
    ResourceType("/apis/storage.k8s.io/v1", "storageclasses", "StorageClass", False, ("metadata.name",)),
    ResourceType("/apis/storage.k8s.io/v1", "csinodes", "CSINode", False, ("metadata.name",)),
    ResourceType("/apis/config.koordinator.sh/v1alpha1", "clustercolocationprofiles", "ClusterColocationProfile",
                 False, ("metadata.name",), True),
    # scheduler-plugins' PodGroup and ElasticQuota as deploy/ (and Koordinator, for the PodGroup) define them: no
    # status subresource, so a PUT of /status is a 404 and the status is written with the object
    ResourceType("/apis/scheduling.sigs.k8s.io/v1alpha1", "podgroups", "PodGroup", True),
    ResourceType("/apis/scheduling.sigs.k8s.io/v1alpha1", "elasticquotas", "ElasticQuota", True),
    # Koordinator's ClusterNetworkTopology: cluster-scoped, with a status subresource
    ResourceType("/apis/scheduling.koordinator.sh/v1alpha1", "clusternetworktopologies", "ClusterNetworkTopology",
                 False, ("metadata.name",), True),
)}


#: the release the fake serves as by default: the newest API (PodDisruptionBudget and Eviction in policy/v1, the
#: eviction subresource taking v1beta1 bodies too, every Namespace labelled with its name)
NEWEST_VERSION = "1.31"
#: the releases ``FakeApiServer(version=...)`` can serve as
VERSIONS = ("1.20", NEWEST_VERSION)


def _served_resources(version: str) -> dict[str, ResourceType]:
    """The resource types a release serves: before 1.21 PodDisruptionBudget is ``policy/v1beta1`` only."""
    if version == "1.20":
        pdb = RESOURCES["poddisruptionbudgets"]
        return {**RESOURCES, pdb.plural: attrs.evolve(pdb, prefix="/apis/policy/v1beta1")}
    return dict(RESOURCES)


#: the kinds the API server keeps no watch cache for (``DefaultWatchCacheSizes``): watched straight from etcd
_UNCACHED = frozenset({"events"})


def _defaults(plural: str, obj: dict) -> None:
    """The API server's defaulting of the kinds that have one here (pkg/apis/core/v1/defaults.go
    SetDefaults_Namespace, pkg/apis/scheduling/v1/defaults.go SetDefaults_PriorityClass), on create and
    update: every named Namespace carries ``kubernetes.io/metadata.name``, a PriorityClass a
    ``preemptionPolicy``, a PersistentVolumeClaim or PersistentVolume a ``volumeMode`` and a Pending phase (a PV
    a ``Retain`` reclaim policy)."""
    if plural == "namespaces" and obj["metadata"].get("name"):
        labels = obj["metadata"].get("labels")
        obj["metadata"]["labels"] = {**(labels if isinstance(labels, dict) else {}),
                                     "kubernetes.io/metadata.name": obj["metadata"]["name"]}
    elif plural == "priorityclasses":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif plural == "pods" and isinstance(obj.get("spec"), dict):
        _pod_defaults(obj["spec"])
    elif plural in ("persistentvolumeclaims", "persistentvolumes"):
        # SetDefaults_PersistentVolumeClaim / SetDefaults_PersistentVolume
        spec, status = obj.get("spec"), obj.get("status")
        if isinstance(spec, dict):
            spec.setdefault("volumeMode", "Filesystem")
            if plural == "persistentvolumes":
                spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        if not isinstance(status, dict):
            status = obj["status"] = {}
        status.setdefault("phase", "Pending")


def _pod_defaults(spec: dict) -> None:
    """pkg/apis/core/v1/defaults.go for a PodSpec and its containers: restartPolicy, dnsPolicy,
    terminationGracePeriodSeconds, schedulerName, securityContext, enableServiceLinks, the deprecated
    serviceAccount; each container's terminationMessagePath/Policy, imagePullPolicy (Always for an image
    without a tag or ``:latest``), and requests copied from limits where a request is not given."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    if spec.get("serviceAccountName"):
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = str(c.get("image") or "")
            tagged = "@" in image or ":" in image.rsplit("/", 1)[-1]
            c.setdefault("imagePullPolicy", "IfNotPresent" if tagged and not image.endswith(":latest") else "Always")
            res = c.setdefault("resources", {})
            if isinstance(res, dict) and isinstance(res.get("limits"), dict) and res["limits"]:
                res["requests"] = {**res["limits"], **(res.get("requests") or {})}


def _qos_class(spec: dict) -> str:
    """The pod's QoS class (pkg/apis/core/helper/qos): BestEffort without cpu/memory requests or limits,
    Guaranteed when every container limits both and requests what it limits, else Burstable."""
    ctrs = [c for k in ("initContainers", "containers") for c in spec.get(k) or [] if isinstance(c, dict)]
    any_set, guaranteed = False, bool(ctrs)
    for c in ctrs:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if any(r in req or r in lim for r in ("cpu", "memory")):
            any_set = True
        if not all(r in lim and req.get(r, lim[r]) == lim[r] for r in ("cpu", "memory")):
            guaranteed = False
    return "Guaranteed" if guaranteed and any_set else "Burstable" if any_set else "BestEffort"


_SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@attrs.define
class Fault:
    """A fault injected into requests whose method and path match (path is a substring test)."""

    status: int = 500
    count: int | None = None  # requests left to fail; None = until ``until``
    until: float | None = None  # monotonic deadline
    method: str | None = None
    path: str | None = None
    delay: float = 0.0  # seconds to wait before answering (status 0 = then answer normally)

    def matches(self, method: str, path: str) -> bool:
        if self.method and self.method != method:
            return False
        if self.path and self.path not in path:
            return False
        if self.until is not None and time.monotonic() >= self.until:
            return False
        return self.count is None or self.count > 0


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
            409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests", 504: "Timeout"}


def _reason_for(code: int) -> str:
    return _REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")


def _status(code: int, reason: str, message: str, details: dict | None = None) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    if details:
        body["details"] = details
    return web.json_response(body, status=code)


def _resource_name(rt: ResourceType) -> str:
    """How the apiserver names a resource in messages: ``pods``, ``leases.coordination.k8s.io``."""
    group = _group(rt)
    return f"{rt.plural}.{group}" if group else rt.plural


def _details(rt: ResourceType, name: str) -> dict:
    group = _group(rt)
    return {"name": name, **({"group": group} if group else {}), "kind": rt.plural}


def _not_found(rt: ResourceType, name: str) -> _ApiError:
    return _ApiError(404, "NotFound", f'{_resource_name(rt)} "{name}" not found', _details(rt, name))


def _modified_conflict(rt: ResourceType, name: str) -> _ApiError:
    return _ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_resource_name(rt)} "{name}": the object '
                     "has been modified; please apply your changes to the latest version and try again",
                     _details(rt, name))


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _get_field(obj: dict, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(sel: str, allowed: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """``a=b,c!=d`` → [(field, op, value)]; raises ValueError naming an unsupported field."""
    out = []
    for term in filter(None, (t.strip() for t in sel.split(","))):
        for op in ("!=", "==", "="):
            if op in term:
                f, v = term.split(op, 1)
                break
        else:
            raise ValueError(f"invalid selector: '{sel}'; can't understand '{term}'")
        f = f.strip()
        if f not in allowed:
            raise ValueError(f'field label not supported: {f}')
        out.append((f, "!=" if op == "!=" else "=", v.strip()))
    return out


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SET_REQUIREMENT = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")


def parse_label_selector(sel: str) -> list[tuple[str, str, str]]:
    """A ``labelSelector`` (``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a)``, ``k``, ``!k``; a
    comma is AND) → terms for :func:`_matches`: ``("label:<key>", op, "v1,v2")`` with op one of ``=``, ``!=``,
    ``in``, ``notin``, ``exists``, ``!exists``. ValueError with the apiserver's "unable to parse requirement"."""
    reqs, depth, cur = [], 0, ""
    for ch in sel:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            reqs.append(cur)
            cur = ""
        else:
            cur += ch
    reqs.append(cur)
    out = []
    for req in (r.strip() for r in reqs):
        if not req:
            continue
        m = _SET_REQUIREMENT.match(req)
        if m:
            key, op = m.group(1), m.group(2)
            value = ",".join(v.strip() for v in m.group(3).split(","))
        elif req.startswith("!"):
            key, op, value = req[1:].strip(), "!exists", ""
        else:
            for sym in ("!=", "==", "="):
                if sym in req:
                    key, value = (x.strip() for x in req.split(sym, 1))
                    op = "!=" if sym == "!=" else "="
                    break
            else:
                key, op, value = req, "exists", ""
        if not _LABEL_KEY.match(key):
            raise ValueError(f"unable to parse requirement: found '{req}', expected: '=', '!=', '==', 'in', notin'")
        out.append((f"label:{key}", op, value))
    return out


def _label_matches(labels: dict, key: str, op: str, value: str) -> bool:
    has, got = key in labels, labels.get(key)
    if op == "=":
        return has and got == value
    if op == "!=":
        return not has or got != value
    if op == "in":
        return has and got in value.split(",")
    if op == "notin":
        return not has or got not in value.split(",")
    return has if op == "exists" else not has


def _matches(obj: dict | None, terms: list[tuple[str, str, str]], namespace: str | None) -> bool:
    if obj is None:
        return False
    if namespace and (obj.get("metadata") or {}).get("namespace") != namespace:
        return False
    for f, op, v in terms:
        if f.startswith("label:"):
            if not _label_matches((obj.get("metadata") or {}).get("labels") or {}, f[len("label:"):], op, v):
                return False
            continue
        got = _get_field(obj, f)
        if (got == v) != (op == "="):
            return False
    return True


_MERGE_KEYS = {"conditions": "type", "containers": "name", "initContainers": "name", "tolerations": None,
               "podsMetric": None}


def _merge_patch(target: Any, patch: Any, merge_keys: dict[str, str | None] | None = None) -> Any:
    """RFC 7386 JSON merge patch; with ``merge_keys``, a strategic merge patch for the lists the scheduler
    patches (a list named there with a key merges its items on that key, e.g. ``conditions`` on ``type``;
    every other list is replaced, as in a merge patch)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif merge_keys and merge_keys.get(k) and isinstance(v, list) and isinstance(out.get(k), list):
            key = merge_keys[k]
            merged = [dict(x) for x in out[k]]
            for item in v:
                for i, old in enumerate(merged):
                    if isinstance(item, dict) and old.get(key) == item.get(key):
                        merged[i] = _merge_patch(old, item, merge_keys)
                        break
                else:
                    merged.append(copy.deepcopy(item))
            out[k] = merged
        else:
            out[k] = _merge_patch(out.get(k), v, merge_keys)
    return out


class _Watcher:
    __slots__ = ("rt", "terms", "namespace", "queue", "closed", "abrupt")

    def __init__(self, rt: ResourceType, terms: list, namespace: str | None) -> None:
        self.rt, self.terms, self.namespace = rt, terms, namespace
        self.queue: asyncio.Queue[dict | None] = asyncio.Queue()  # None ends the stream
        self.closed = False
        self.abrupt = False  # end with a cut connection instead of a clean end of stream


class FakeApiServer:
    """The fake. ``history`` is how many writes a watch can resume from (etcd's compaction window)."""

    def __init__(self, *, history: int = 10_000, expired_form: str = "event", bookmark_interval: float = 1.0,
                 host: str = "127.0.0.1", port: int = 0, graceful_deletes: bool = False,
                 grace_scale: float = 1.0, tokens: dict[str, float | None] | None = None,
                 clock: Callable[[], float] = time.time, version: str = NEWEST_VERSION) -> None:
        """``version`` is the Kubernetes release served as (:data:`VERSIONS`): ``"1.20"`` serves
        PodDisruptionBudget and Eviction only in ``policy/v1beta1`` (an Eviction in ``policy/v1`` is the 400 that
        release answers), sets no ``kubernetes.io/metadata.name`` Namespace label, and says so in ``/version``
        and discovery (``/api``, ``/apis``, ``/apis/<group>``, the resource lists).

        ``graceful_deletes`` turns on the real server's two-step pod deletion (off: a DELETE or an
        eviction removes the pod at once, as the fake always did); ``grace_scale`` multiplies every
        grace period into real seconds (0.01 turns the default 30 s into 0.3 s). ``tokens`` turns on
        authentication: bearer token → expiry on ``clock`` (None: never expires)."""
        if expired_form not in ("event", "http"):
            raise ValueError("expired_form must be 'event' or 'http'")
        if grace_scale < 0:
            raise ValueError("grace_scale must be >= 0")
        if version not in VERSIONS:
            raise ValueError(f"version must be one of {', '.join(VERSIONS)}, got {version!r}")
        self.version = version
        #: plural → the resource type as this release serves it (its group version)
        self.resources = _served_resources(version)
        self.graceful_deletes, self.grace_scale = graceful_deletes, grace_scale
        #: pod key → the timer that completes its graceful deletion (absent: no timer, see finish_deletions)
        self._grace_timers: dict[str, asyncio.TimerHandle | None] = {}
        self.history_size, self.expired_form, self.bookmark_interval = history, expired_form, bookmark_interval
        self.host, self.port = host, port
        self.rv = 1000
        self.objects: dict[str, dict[str, dict]] = {p: {} for p in RESOURCES}
        self.history: deque[tuple[int, str, str, dict, dict | None]] = deque(maxlen=history)
        self.compacted_rv = self.rv  # etcd's compaction: oldest RV a LIST, a continue or an uncached watch may use
        #: the oldest RV a watch of a cached kind may start from (the watch cache's window)
        self.window_rv = self.rv
        self._watchers: set[_Watcher] = set()
        self._snapshots: dict[str, tuple[int, list[dict]]] = {}
        self._tokens = itertools.count(1)
        self.faults: list[Fault] = []
        self.lose_binding_replies = 0
        #: (uid, node) of every successful binding, in order (to check "none bound twice")
        self.bind_log: list[tuple[str, str]] = []
        self.evictions: list[tuple[str, str]] = []
        #: (method, path) of every request
        self.requests: list[tuple[str, str]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""
        #: bearer token → expiry on ``clock`` (None: no expiry); None: no authentication at all
        self.tokens: dict[str, float | None] | None = None if tokens is None else dict(tokens)
        self.clock = clock
        #: the Authorization tokens the server refused (401), in order
        self.rejected_tokens: list[str] = []
        #: plurals whose every request is refused with 403 (``forbid``), with the user named in the message
        self.forbidden: dict[str, str] = {}
        #: the watch cache's resourceVersion while frozen (``freeze_watch_cache``); None: it is current
        self.watch_cache_rv: int | None = None
        #: the query of every LIST (not watch) request, in order, as (plural, {param: value})
        self.list_queries: list[tuple[str, dict[str, str]]] = []

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> FakeApiServer:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._fault_middleware])
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.port = sock.getsockname()[1]
        self.url = f"http://{self.host}:{self.port}"
        return self

    async def stop(self) -> None:
        for h in self._grace_timers.values():
            if h is not None:
                h.cancel()
        self._grace_timers.clear()
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeApiServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # -- authentication and authorization --------------------------------------------------------------
    def issue_token(self, token: str, expires_at: float | None = None) -> None:
        """Make ``token`` valid until ``expires_at`` on the server's clock (None: no expiry); turns
        authentication on if it was off."""
        if self.tokens is None:
            self.tokens = {}
        self.tokens[token] = expires_at

    def revoke_token(self, token: str) -> None:
        if self.tokens is not None:
            self.tokens.pop(token, None)

    def _authenticated(self, request: web.Request) -> bool:
        if self.tokens is None:
            return True
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            self.rejected_tokens.append("")
            return False
        token = auth[len("Bearer "):]
        if token in self.tokens:
            exp = self.tokens[token]
            if exp is None or self.clock() < exp:
                return True
        self.rejected_tokens.append(token)
        return False

    def forbid(self, plural: str, user: str = "system:serviceaccount:koordfw-system:koordfw-scheduler") -> None:
        """Refuse every request on ``plural`` with the apiserver's RBAC 403 (until ``allow``)."""
        if plural not in RESOURCES:
            raise ValueError(f"the fake API server does not serve {plural!r}")
        self.forbidden[plural] = user

    def allow(self, plural: str) -> None:
        self.forbidden.pop(plural, None)

    def _forbidden(self, request: web.Request) -> web.Response | None:
        if not self.forbidden:
            return None
        parts = [p for p in request.path.split("/") if p]
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
        ns = None
        if len(rest) > 2 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in self.forbidden or rest[0] not in RESOURCES:
            return None
        rt = RESOURCES[rest[0]]
        group = "" if rt.prefix == "/api/v1" else rt.prefix.split("/")[2]
        m = request.method
        named = len(rest) > 1
        verb = {"GET": ("watch" if request.query.get("watch") in ("1", "true") else "get" if named else "list"),
                "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if named else "deletecollection"}.get(m, m.lower())
        resource = rt.plural if group == "" else f"{rt.plural}.{group}"
        if named:
            resource = f'{resource} "{rest[1]}"'
        where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        noun = rt.plural + (f"/{rest[2]}" if len(rest) > 2 else "")
        msg = (f'{resource} is forbidden: User "{self.forbidden[rt.plural]}" cannot {verb} resource "{noun}" '
               f'in API group "{group}" {where}')
        details: dict[str, Any] = {"kind": rt.plural} | ({"group": group} if group else {})
        if named:
            details["name"] = rest[1]
        return _status(403, "Forbidden", msg, details)

    # -- the watch cache ----------------------------------------------------------------------------
    def freeze_watch_cache(self) -> int:
        """Stop the watch cache at the current resourceVersion (returned): LISTs with
        ``resourceVersion=0`` see the state as of then, and a NotOlderThan LIST for a newer RV answers
        "Too large resource version" (the cache cannot catch up); ``thaw_watch_cache`` lets it catch up."""
        self.watch_cache_rv = self.rv
        return self.rv

    def thaw_watch_cache(self) -> None:
        self.watch_cache_rv = None

    def state_at(self, plural: str, rv: int) -> dict[str, dict]:
        """The objects of ``plural`` as they were at ``rv`` (undoing the history after it); raises the
        410 ``Expired`` answer when ``rv`` is older than the compacted history."""
        if rv < self.compacted_rv:
            raise _ApiError(410, "Expired", "The resourceVersion for the provided list is too old.")
        rt = RESOURCES[plural]
        state = dict(self.objects[plural])
        for at, pl, etype, obj, old in reversed(self.history):
            if at <= rv:
                break
            if pl != plural:
                continue
            meta = obj["metadata"]
            key = self._key(rt, meta.get("namespace"), meta["name"])
            if etype == "ADDED":
                state.pop(key, None)
            elif old is not None:
                state[key] = old
        return state

    def kubeconfig(self) -> dict:
        """A kubeconfig document pointing at this server (no auth)."""
        return {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}

    # -- faults -------------------------------------------------------------------------------------
    def fail(self, status: int = 500, *, count: int | None = None, seconds: float | None = None,
             method: str | None = None, path: str | None = None) -> Fault:
        """Answer matching requests with ``status`` for ``count`` requests or ``seconds``."""
        f = Fault(status=status, count=count, method=method, path=path,
                  until=time.monotonic() + seconds if seconds is not None else None)
        self.faults.append(f)
        return f

    def slow(self, delay: float, *, seconds: float | None = None, method: str | None = None,
             path: str | None = None) -> Fault:
        f = Fault(status=0, delay=delay, method=method, path=path,
                  until=time.monotonic() + seconds if seconds is not None else None)
        self.faults.append(f)
        return f

    def drop_watches(self) -> int:
        """Cut every open watch stream mid-way (the client sees the connection end)."""
        n = 0
        for w in list(self._watchers):
            w.closed = w.abrupt = True
            w.queue.put_nowait(None)
            n += 1
        return n

    def compact(self) -> None:
        """etcd compaction at the current revision (what ``ControlPlane.compact_etcd`` does to a real one): a
        LIST at an exact older version and an older ``continue`` answer 410, and so does a watch from an older
        version of a kind the API server keeps no watch cache for (events); open watches go on, and a watch of a
        cached kind from a version still in the watch cache's window (:meth:`expire` moves it) is served."""
        self.compacted_rv = self.rv
        self._snapshots.clear()

    def expire(self) -> None:
        """The watch cache's window moves past now (on a real server: after its window of events, or a restart),
        and etcd is compacted: open watches get 410 in the configured form, and resuming from any older
        resourceVersion (or continuing an old list) answers 410."""
        self.compacted_rv = self.window_rv = self.rv
        self.history.clear()
        self._snapshots.clear()
        for w in list(self._watchers):
            w.closed = True
            if self.expired_form == "event":
                w.queue.put_nowait({"type": "ERROR", "object": self._expired_obj(self.rv)})
            w.queue.put_nowait(None)

    @web.middleware
    async def _fault_middleware(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if not self._authenticated(request):
            return _status(401, "Unauthorized", "Unauthorized")
        refused = self._forbidden(request)
        if refused is not None:
            return refused
        for f in self.faults:
            if f.matches(request.method, request.path):
                if f.count is not None:
                    f.count -= 1
                if f.delay:
                    await asyncio.sleep(f.delay)
                if f.status:
                    return _status(f.status, _reason_for(f.status), f"injected fault: HTTP {f.status}")
        return await handler(request)

    # -- storage ------------------------------------------------------------------------------------
    @staticmethod
    def _key(rt: ResourceType, ns: str | None, name: str) -> str:
        return f"{ns}/{name}" if rt.namespaced else name

    def _record(self, plural: str, etype: str, obj: dict, old: dict | None) -> None:
        self.history.append((self.rv, plural, etype, obj, old))
        if len(self.history) == self.history.maxlen:
            self.compacted_rv = self.window_rv = self.history[0][0] - 1
        for w in self._watchers:
            if w.rt.plural == plural and not w.closed:
                ev = self._event_for(w, etype, obj, old)
                if ev is not None:
                    w.queue.put_nowait(ev)

    def _event_for(self, w: _Watcher, etype: str, obj: dict, old: dict | None) -> dict | None:
        cur_ok = etype != "DELETED" and _matches(obj, w.terms, w.namespace)
        old_ok = _matches(old, w.terms, w.namespace) if etype != "ADDED" else False
        if etype == "DELETED":
            return {"type": "DELETED", "object": obj} if _matches(obj, w.terms, w.namespace) else None
        if cur_ok and old_ok:
            return {"type": "MODIFIED", "object": obj}
        if cur_ok:
            return {"type": "ADDED", "object": obj}
        if old_ok and old is not None:  # (old_ok implies old is not None)
            # the object stopped matching: the watch says DELETED, carrying the *old* object at the new RV
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            return {"type": "DELETED", "object": gone}
        return None

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def create(self, obj: dict, plural: str | None = None) -> dict:
        """Store a new object (as a POST would); returns the stored copy."""
        obj = copy.deepcopy(obj)
        plural = plural or _plural_of(obj.get("kind", ""))
        rt = RESOURCES[plural]
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if key in self.objects[plural]:
            raise _ApiError(409, "AlreadyExists", f'{_resource_name(rt)} "{meta["name"]}" already exists',
                            _details(rt, meta["name"]))
        obj["apiVersion"], obj["kind"] = self.resources[plural].api_version, rt.kind
        meta["uid"] = str(uuid.uuid4())
        meta.setdefault("creationTimestamp", _now())
        meta.pop("deletionTimestamp", None)
        meta["resourceVersion"] = self._next_rv()
        if plural == "pods":
            obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        if self._defaulted(plural):
            _defaults(plural, obj)
        self.objects[plural][key] = obj
        self._record(plural, "ADDED", obj, None)
        return copy.deepcopy(obj)

    def _defaulted(self, plural: str) -> bool:
        """Whether this release defaults ``plural`` as :func:`_defaults` does: before 1.21 a Namespace gets no
        ``kubernetes.io/metadata.name`` label (its only defaulting here)."""
        return not (plural == "namespaces" and self.version == "1.20")

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        o = self.objects[plural].get(self._key(RESOURCES[plural], namespace, name))
        return copy.deepcopy(o) if o is not None else None

    def replace(self, plural: str, obj: dict) -> dict:
        rt = RESOURCES[plural]
        meta = obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        old = self.objects[plural].get(key)
        if old is None:
            raise _ApiError(404, "NotFound", f'{plural} "{meta["name"]}" not found')
        new = copy.deepcopy(obj)
        new["metadata"]["uid"] = old["metadata"]["uid"]
        new["metadata"]["creationTimestamp"] = old["metadata"].get("creationTimestamp")
        new["metadata"]["resourceVersion"] = self._next_rv()
        new["apiVersion"], new["kind"] = self.resources[plural].api_version, rt.kind
        if self._defaulted(plural):
            _defaults(plural, new)
        self.objects[plural][key] = new
        self._record(plural, "MODIFIED", new, old)
        return copy.deepcopy(new)

    def _write(self, plural: str, cur: dict, new: dict) -> dict:
        """An update through the API: one that changes nothing (after defaulting) is not written, as etcd3's
        GuaranteedUpdate skips identical bytes: same resourceVersion, no watch event."""
        probe = copy.deepcopy(new)
        probe["apiVersion"], probe["kind"] = cur.get("apiVersion"), cur.get("kind")
        if self._defaulted(plural):
            _defaults(plural, probe)
        probe.setdefault("metadata", {}).update(
            {k: cur["metadata"].get(k) for k in ("uid", "creationTimestamp", "resourceVersion")})
        if probe == cur:
            return copy.deepcopy(cur)
        return self.replace(plural, new)

    def update(self, plural: str, name: str, mutate: Callable[[dict], Any], namespace: str | None = None) -> dict:
        """Read-modify-write one object (a test helper, as a controller would)."""
        cur = self.get(plural, name, namespace)
        if cur is None:
            raise KeyError(f"{plural} {namespace}/{name} not found")
        mutate(cur)
        return self.replace(plural, cur)

    def delete(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        """Remove an object now (storage-level; with ``graceful_deletes`` this is the kubelet's final
        confirmation, see ``request_delete`` for the API's DELETE)."""
        key = self._key(RESOURCES[plural], namespace, name)
        old = self.objects[plural].pop(key, None)
        if old is None:
            return None
        if plural == "pods":
            self._cancel_grace(key)
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        self._record(plural, "DELETED", gone, old)
        return gone

    # -- graceful deletion (pods) -------------------------------------------------------------------
    def request_delete(self, plural: str, name: str, namespace: str | None = None, *,
                       grace_period_seconds: int | None = None, uid: str | None = None) -> tuple[dict, bool]:
        """A DELETE as the API server's registry runs it; returns (object, gone now).

        Without ``graceful_deletes`` (or for anything but a bound, non-terminal pod, or a grace period
        of 0) the object is removed at once. Otherwise, like the pod strategy's CheckGracefulDelete:
        the grace period is ``grace_period_seconds``, else the pod's ``terminationGracePeriodSeconds``,
        else 30; the pod gets ``deletionTimestamp`` = now + grace and ``deletionGracePeriodSeconds``
        (MODIFIED) and keeps its node until the grace period ends. A second delete of a terminating pod
        may only shorten the period (0 removes it now); a longer or absent one changes nothing."""
        rt = RESOURCES[plural]
        key = self._key(rt, namespace, name)
        cur = self.objects[plural].get(key)
        if cur is None:
            raise _not_found(rt, name)
        if uid and uid != cur["metadata"]["uid"]:
            raise _delete_uid_conflict(rt, name, uid, cur["metadata"]["uid"])
        spec, meta = cur.get("spec") or {}, cur["metadata"]
        graceful = (self.graceful_deletes and plural == "pods" and bool(spec.get("nodeName"))
                    and (cur.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
        if graceful:
            if grace_period_seconds is None:
                grace = spec.get("terminationGracePeriodSeconds")
                grace = 30 if grace is None else int(grace)
            else:
                grace = int(grace_period_seconds)
            grace = max(grace, 0)
            pending = meta.get("deletionGracePeriodSeconds")
            if meta.get("deletionTimestamp") and pending is not None and grace >= int(pending):
                return copy.deepcopy(cur), False  # already terminating at least as soon
            if grace > 0:
                when = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=grace)

                def mark(p: dict) -> None:
                    p["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                    p["metadata"]["deletionGracePeriodSeconds"] = grace

                new = self.update(plural, name, mark, namespace)
                self._arm_grace(key, name, namespace, new["metadata"]["uid"], grace * self.grace_scale)
                return new, False
        if plural == "pods" and self.objects[plural].get(key) is not None:
            # the pod strategy makes every delete graceful (grace 0 for an unbound or terminal pod):
            # the registry writes deletionTimestamp first (a MODIFIED event), then removes it
            def now_gone(p: dict) -> None:
                p["metadata"]["deletionTimestamp"] = _now()
                p["metadata"]["deletionGracePeriodSeconds"] = 0

            self.update(plural, name, now_gone, namespace)
        return self.delete(plural, name, namespace), True  # type: ignore[return-value]

    def _arm_grace(self, key: str, name: str, namespace: str | None, uid: str, seconds: float) -> None:
        self._cancel_grace(key)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous test): finish_deletions() completes it
            self._grace_timers[key] = None
            return
        self._grace_timers[key] = loop.call_later(seconds, self._finish_one, key, name, namespace, uid)

    def _cancel_grace(self, key: str) -> None:
        h = self._grace_timers.pop(key, None)
        if h is not None:
            h.cancel()

    def _finish_one(self, key: str, name: str, namespace: str | None, uid: str) -> None:
        """The kubelet's confirmation: a delete with grace 0 and a UID precondition (a recreated pod of the
        same name is left alone)."""
        self._grace_timers.pop(key, None)
        cur = self.objects["pods"].get(key)
        if cur is not None and cur["metadata"]["uid"] == uid and cur["metadata"].get("deletionTimestamp"):
            self.delete("pods", name, namespace)

    def finish_deletions(self) -> list[str]:
        """Complete every pending graceful deletion now (as if each kubelet confirmed); returns the
        ``namespace/name`` keys of the pods removed."""
        done = []
        for key, cur in list(self.objects["pods"].items()):
            if key in self._grace_timers:
                self._cancel_grace(key)
                meta = cur["metadata"]
                self._finish_one(key, meta["name"], meta.get("namespace"), meta["uid"])
                done.append(key)
        return done

    def terminating(self) -> list[str]:
        """``namespace/name`` of the pods whose graceful deletion is pending."""
        return sorted(k for k in self._grace_timers if k in self.objects["pods"])

    def mark_terminating(self, name: str, namespace: str = "default") -> dict:
        """Set ``deletionTimestamp`` on a pod (a graceful delete in progress)."""
        return self.update("pods", name, lambda p: p["metadata"].__setitem__("deletionTimestamp", _now()), namespace)

    def pods(self) -> list[dict]:
        return [copy.deepcopy(p) for p in self.objects["pods"].values()]

    # -- HTTP ---------------------------------------------------------------------------------------
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except _ApiError as e:
            return _status(e.code, e.reason, e.message, e.details)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.method == "GET":
            doc = self._discovery(parts)
            if doc is not None:
                return web.json_response(doc)
        if parts[:2] == ["api", "v1"]:
            prefix, rest = "/api/v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            prefix, rest = f"/apis/{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in self.resources or self.resources[rest[0]].prefix != prefix:
            raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        rt = self.resources[rest[0]]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        m = request.method
        if name is None:
            if m == "GET":
                if request.query.get("watch") in ("1", "true"):
                    return await self._watch(request, rt, ns)
                return self._list(request, rt, ns)
            if m == "POST":
                body = await _json_body(request)
                if rt.namespaced:
                    body.setdefault("metadata", {})["namespace"] = ns or body.get("metadata", {}).get("namespace")
                if rt.plural == "pods":
                    self._admit_pod(body)
                if rt.has_status and ".koordinator.sh/" in rt.prefix:
                    # a custom resource with a status subresource: the API server drops the status sent on
                    # create (customResourceStrategy.PrepareForCreate); it is written through /status only.
                    # ``api.create`` (seeding a test's cluster) keeps it, as an object already stored would.
                    body.pop("status", None)
                return web.json_response(self.create(body, rt.plural), status=201)
            raise _ApiError(405, "MethodNotAllowed", f"method {m} not allowed")
        if rt.plural == "pods" and sub == "binding" and m == "POST":
            return await self._bind(request, ns or "default", name)
        if rt.plural == "pods" and sub == "eviction" and m == "POST":
            return await self._evict(request, ns or "default", name)
        key = self._key(rt, ns, name)
        cur = self.objects[rt.plural].get(key)
        if m == "GET":
            if cur is None:
                raise _not_found(rt, name)
            return web.json_response(cur)
        if m == "DELETE":
            opts = await _json_body(request) if request.can_read_body else {}
            grace = request.query.get("gracePeriodSeconds", opts.get("gracePeriodSeconds"))
            try:
                grace = None if grace is None else int(grace)
            except (TypeError, ValueError):
                raise _ApiError(400, "BadRequest", f"invalid gracePeriodSeconds {grace!r}") from None
            obj, _ = self.request_delete(rt.plural, name, ns, grace_period_seconds=grace,
                                         uid=(opts.get("preconditions") or {}).get("uid"))
            return web.json_response(obj)
        if sub == "status" and not rt.has_status:
            # a kind without the status subresource (a CRD that declares none, a ConfigMap): no such path
            raise _ApiError(404, "NotFound", "the server could not find the requested resource")
        if cur is None:
            raise _not_found(rt, name)
        if m == "PATCH" and request.content_type == "application/json-patch+json":
            return web.json_response(self._write(rt.plural, cur, _json_patched(rt, cur, sub, await _json_ops(request))))
        body = await _json_body(request)
        if m == "PUT":
            # the update handler turns a body's uid into a storage precondition (409 on a mismatch)
            put_uid = (body.get("metadata") or {}).get("uid")
            if put_uid and put_uid != cur["metadata"]["uid"]:
                raise _storage_precondition_conflict(rt, ns, name, ".".join(filter(None, (rt.plural, _group(rt)))),
                                                     f"UID in precondition: {put_uid}, "
                                                     f"UID in object meta: {cur['metadata']['uid']}")
            want = (body.get("metadata") or {}).get("resourceVersion")
            if not want and _is_custom(rt):
                # a custom resource's strategy does not allow unconditional updates (built-in kinds such as
                # pods, nodes, ConfigMaps and leases do): the apiserver validates the missing version
                group = _group(rt)
                raise _ApiError(422, "Invalid", f'{rt.kind}.{group} "{name}" is invalid: metadata.resourceVersion: '
                                "Invalid value: 0x0: must be specified for an update",
                                {"name": name, "group": group, "kind": rt.kind, "causes": [
                                    {"reason": "FieldValueInvalid", "message": "Invalid value: 0x0: must be specified "
                                     "for an update", "field": "metadata.resourceVersion"}]})
            if want and want != cur["metadata"]["resourceVersion"]:
                raise _modified_conflict(rt, name)
            new = copy.deepcopy(cur)
            if sub == "status":
                new["status"] = body.get("status")
                if not _is_custom(rt):
                    # a built-in kind's status strategy keeps the old spec, not the old labels and annotations
                    for k in ("labels", "annotations"):
                        if k in (body.get("metadata") or {}):
                            new["metadata"][k] = body["metadata"][k]
            else:
                status = new.get("status")
                new = body
                new.setdefault("metadata", {}).update({"name": name})
                if rt.namespaced:
                    new["metadata"]["namespace"] = ns
                if rt.has_status:
                    new["status"] = status
            return web.json_response(self._write(rt.plural, cur, new))
        if m == "PATCH":
            ctype = request.content_type
            # a patch has no preconditions: a uid in its body is merged into the object, and the update
            # strategy's common-field validation (ValidateObjectMetaUpdate) refuses the change
            want_uid = (body.get("metadata") or {}).get("uid")
            if want_uid and want_uid != cur["metadata"]["uid"]:
                group = "" if rt.prefix == "/api/v1" else rt.prefix.split("/")[2]
                raise _ApiError(422, "Invalid", f'{rt.kind}{"." + group if group else ""} "{name}" is invalid: '
                                f'metadata.uid: Invalid value: "{want_uid}": field is immutable',
                                {"name": name, **({"group": group} if group else {}), "kind": rt.kind, "causes": [
                                    {"reason": "FieldValueInvalid", "message": f'Invalid value: "{want_uid}": '
                                     "field is immutable", "field": "metadata.uid"}]})
            want_rv = (body.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                raise _modified_conflict(rt, name)
            if sub == "status":
                meta = body.get("metadata") if not _is_custom(rt) else None  # as for a PUT of /status
                body = {"status": body.get("status", {})}
                if isinstance(meta, dict):
                    body["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
            elif rt.has_status:
                body.pop("status", None)
            if ctype == "application/strategic-merge-patch+json":
                new = _merge_patch(cur, body, _MERGE_KEYS)
            elif ctype == "application/merge-patch+json":
                new = _merge_patch(cur, body)
            else:
                raise _ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {ctype}")
            new["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            return web.json_response(self._write(rt.plural, cur, new))
        raise _ApiError(405, "MethodNotAllowed", f"method {m} not allowed")

    def _admit_pod(self, pod: dict) -> None:
        """What a pod's create goes through before it is stored (the fake's ``create`` seeds objects as stored
        and skips it): the pod strategy's PrepareForCreate (status reset to Pending with its QoS class), the
        ServiceAccount admission plugin (``default``, its token volume mounted read-only in every container:
        the projected ``kube-api-access-*`` volume of 1.21+, unless automountServiceAccountToken is false),
        Priority (the PriorityClass's value and preemptionPolicy; a missing class is a 403), and
        DefaultTolerationSeconds (not-ready and unreachable NoExecute for 300 s unless tolerated already)."""
        spec = pod.setdefault("spec", {})
        _pod_defaults(spec)
        pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        if spec.get("automountServiceAccountToken") is not False:
            name = "kube-api-access-" + uuid.uuid4().hex[:5]
            spec["volumes"] = [*(spec.get("volumes") or []), {"name": name, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                              "fieldPath": "metadata.namespace"}}]}}]}}]
            for key in ("initContainers", "containers"):
                for c in spec.get(key) or []:
                    if not any(m.get("mountPath") == _SA_MOUNT for m in c.get("volumeMounts") or []):
                        c["volumeMounts"] = [*(c.get("volumeMounts") or []),
                                             {"name": name, "readOnly": True, "mountPath": _SA_MOUNT}]
        pc_name = spec.get("priorityClassName")
        if pc_name:
            pc = self.objects["priorityclasses"].get(pc_name)
            if pc is None:
                raise _ApiError(403, "Forbidden", f'pods "{(pod.get("metadata") or {}).get("name", "")}" is '
                                f"forbidden: no PriorityClass with name {pc_name} was found")
        else:
            pc = next((c for c in self.objects["priorityclasses"].values() if c.get("globalDefault")), None)
        spec["priority"] = int(pc.get("value", 0)) if pc else 0
        spec.setdefault("preemptionPolicy", (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority")
        tolerations = list(spec.get("tolerations") or [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") in (key, None, "") and t.get("effect") in ("NoExecute", None, "")
                       for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        spec["tolerations"] = tolerations

    def eviction_versions(self) -> tuple[str, ...]:
        """The Eviction ``apiVersion``s the eviction subresource takes, the one it advertises first."""
        return ("policy/v1beta1",) if self.version == "1.20" else ("policy/v1", "policy/v1beta1")

    def _discovery(self, parts: list[str]) -> dict | None:
        """The discovery document at ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>`` or
        ``/apis/<group>/<version>`` as this release serves them (None: not a discovery path, or a group or
        version not served, which routing answers 404)."""
        groups: dict[str, list[str]] = {}
        for rt in self.resources.values():
            if rt.prefix != "/api/v1":
                g, v = rt.prefix.split("/")[2:4]
                if v not in groups.setdefault(g, []):
                    groups[g].append(v)
        minor = self.version.split(".")[1]

        def group_doc(g: str) -> dict:
            vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in groups[g]]
            return {"name": g, "versions": vs, "preferredVersion": vs[0]}

        if parts == ["version"]:
            return {"major": "1", "minor": minor, "gitVersion": f"v{self.version}.0", "gitTreeState": "clean",
                    "platform": "linux/amd64", "compiler": "gc"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}]}
        if parts == ["apis"]:
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_doc(g) for g in sorted(groups)]}
        if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **group_doc(parts[1])}
        if parts == ["api", "v1"]:
            prefix = "/api/v1"
        elif len(parts) == 3 and parts[0] == "apis" and parts[2] in groups.get(parts[1], ()):
            prefix = f"/apis/{parts[1]}/{parts[2]}"
        else:
            return None
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        resources: list[dict] = []
        for rt in self.resources.values():
            if rt.prefix != prefix:
                continue
            resources.append({"name": rt.plural, "singularName": "", "namespaced": rt.namespaced, "kind": rt.kind,
                              "verbs": verbs})
            if rt.has_status:
                resources.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                                  "kind": rt.kind, "verbs": ["get", "patch", "update"]})
            if rt.plural == "pods":
                group, version = self.eviction_versions()[0].split("/")
                resources += [{"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                               "verbs": ["create"]},
                              {"name": "pods/eviction", "singularName": "", "namespaced": True, "group": group,
                               "version": version, "kind": "Eviction", "verbs": ["create"]}]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": prefix.removeprefix("/apis/").removeprefix(
            "/api/"), "resources": resources}

    def _list_options_invalid(self, q: Any) -> None:
        """metainternalversion's ValidateListOptions for a LIST: 422 Invalid on ListOptions."""
        match, rv, cont = q.get("resourceVersionMatch", ""), q.get("resourceVersion", ""), q.get("continue", "")
        errs: list[tuple[str, str]] = []  # (cause reason, error body)
        if match:
            if not rv:
                errs.append(("FieldValueForbidden",
                             "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"))
            if cont:
                errs.append(("FieldValueForbidden",
                             "Forbidden: resourceVersionMatch is forbidden when continue is provided"))
            if match not in ("Exact", "NotOlderThan"):
                errs.append(("FieldValueNotSupported",
                             f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""'))
            if match == "Exact" and rv == "0":
                errs.append(("FieldValueForbidden",
                             'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
        if not errs:
            return
        bodies = [f"resourceVersionMatch: {b}" for _, b in errs]
        agg = bodies[0] if len(bodies) == 1 else "[" + ", ".join(bodies) + "]"
        raise _ApiError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {agg}',
                        {"group": "meta.k8s.io", "kind": "ListOptions",
                         "causes": [{"reason": r, "message": b, "field": "resourceVersionMatch"} for r, b in errs]})

    def _too_large(self, want: int, current: int) -> _ApiError:
        return _ApiError(504, "Timeout", f"Timeout: Too large resource version: {want}, current: {current}",
                         {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                          "retryAfterSeconds": 1})

    def _list_state(self, rt: ResourceType, q: Any, limit: int) -> tuple[int, dict[str, dict]]:
        """The resourceVersion and objects a LIST without ``continue`` is served at (see the module doc)."""
        rv_s, match = q.get("resourceVersion", ""), q.get("resourceVersionMatch", "")
        if not rv_s:
            return self.rv, self.objects[rt.plural]  # quorum read
        try:
            want = int(rv_s)
            if want < 0:
                raise ValueError
        except ValueError:
            raise _ApiError(400, "BadRequest", f"invalid resource version: {rv_s!r}") from None
        cache = self.watch_cache_rv
        if cache is not None and cache < self.compacted_rv:
            cache = self.watch_cache_rv = None  # the history it needs is gone: it caught up meanwhile
        if want == 0:  # any version: the watch cache
            return (self.rv, self.objects[rt.plural]) if cache is None else (cache, self.state_at(rt.plural, cache))
        if match == "Exact" or (not match and limit):  # etcd's legacy rule: an RV with a limit is exact
            if want > self.rv:
                raise self._too_large(want, self.rv)
            return want, self.state_at(rt.plural, want)
        # NotOlderThan (and a bare RV without limit): the watch cache once it has reached ``want``
        if cache is not None:
            if want > cache:
                raise self._too_large(want, cache)
            return cache, self.state_at(rt.plural, cache)
        if want > self.rv:
            raise self._too_large(want, self.rv)
        return self.rv, self.objects[rt.plural]

    def _list(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.Response:
        q = request.query
        self.list_queries.append((rt.plural, dict(q)))
        self._list_options_invalid(q)
        try:
            terms = parse_field_selector(q.get("fieldSelector", ""), rt.fields)
            terms += parse_label_selector(q.get("labelSelector", ""))
        except ValueError as e:
            raise _ApiError(400, "BadRequest", str(e)) from None
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise _ApiError(400, "BadRequest", f"invalid limit {q.get('limit')!r}") from None
        cont = q.get("continue")
        if cont:
            if q.get("resourceVersion") not in (None, "", "0"):
                raise _ApiError(400, "BadRequest", "specifying resource version is not allowed when using continue")
            try:
                tok = json.loads(base64.urlsafe_b64decode(cont.encode()))
                snap_id, offset = str(tok["s"]), int(tok["o"])
            except (ValueError, KeyError, TypeError):
                raise _ApiError(400, "BadRequest", "continue key is not valid") from None
            snap = self._snapshots.get(snap_id)
            if snap is None:
                raise _ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                "consistent list result. You can start a new list without the continue parameter.")
            rv, items = snap
        else:
            rv, state = self._list_state(rt, q, limit)
            if q.get("resourceVersion") == "0":
                limit = 0  # the watch cache serves the whole list, ignoring the limit
            items = [copy.deepcopy(o) for k, o in sorted(state.items()) if _matches(o, terms, ns)]
            offset = 0
            snap_id = ""
        page = items[offset: offset + limit] if limit else items[offset:]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and offset + limit < len(items):
            if not snap_id:
                snap_id = str(next(self._tokens))
                self._snapshots[snap_id] = (rv, items)
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"s": snap_id, "o": offset + limit}).encode()).decode()
            meta["remainingItemCount"] = len(items) - offset - limit
        elif snap_id:
            self._snapshots.pop(snap_id, None)
        return web.json_response({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta,
                                  "items": page})

    def _expired_obj(self, rv: int, uncached: bool = False) -> dict:
        """The 410 a watch from ``rv`` gets: the watch cache's ``too old resource version``, or etcd's own
        message for a kind without a watch cache."""
        msg = ("The resourceVersion for the provided watch is too old." if uncached
               else f"too old resource version: {rv} ({self.window_rv})")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": msg,
                "reason": "Expired", "code": 410}

    async def _watch(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.StreamResponse:
        q = request.query
        try:
            terms = parse_field_selector(q.get("fieldSelector", ""), rt.fields)
            terms += parse_label_selector(q.get("labelSelector", ""))
        except ValueError as e:
            raise _ApiError(400, "BadRequest", str(e)) from None
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true")
        timeout = float(q.get("timeoutSeconds") or 1800)
        rv_s = q.get("resourceVersion") or "0"
        try:
            since = int(rv_s)
        except ValueError:
            raise _ApiError(400, "BadRequest", f"invalid resourceVersion {rv_s!r}") from None
        w = _Watcher(rt, terms, ns)
        initial: list[dict] = []
        if since == 0:
            # no resourceVersion: synthetic ADDED events for the current state, then live
            initial = [{"type": "ADDED", "object": copy.deepcopy(o)}
                       for o in self.objects[rt.plural].values() if _matches(o, terms, ns)]
        elif since < (self.compacted_rv if rt.plural in _UNCACHED else self.window_rv):
            gone = self._expired_obj(since, uncached=rt.plural in _UNCACHED)
            if self.expired_form == "http":
                return web.json_response(gone | {"reason": "Gone"}, status=410)
            initial = [{"type": "ERROR", "object": gone}]
            w.closed = True
        else:
            for rv, plural, etype, obj, old in self.history:
                if rv > since and plural == rt.plural:
                    ev = self._event_for(w, etype, obj, old)
                    if ev is not None:
                        initial.append(ev)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        try:
            return await self._stream(request, resp, w, initial, bookmarks, timeout, rt)
        except ConnectionResetError:  # the client went away
            self._watchers.discard(w)
            return resp

    async def _stream(self, request: web.Request, resp: web.StreamResponse, w: _Watcher, initial: list[dict],
                      bookmarks: bool, timeout: float, rt: ResourceType) -> web.StreamResponse:
        await resp.prepare(request)
        for first in initial:
            await resp.write(json.dumps(first).encode() + b"\n")
        if w.closed:
            await resp.write_eof()
            return resp
        self._watchers.add(w)
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    ev = await asyncio.wait_for(w.queue.get(), min(left, self.bookmark_interval))
                except TimeoutError:
                    if bookmarks:
                        bm = {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                             "metadata": {"resourceVersion": str(self.rv)}}}
                        await resp.write(json.dumps(bm).encode() + b"\n")
                    continue
                if ev is None:
                    break
                await resp.write(json.dumps(ev).encode() + b"\n")
            if w.abrupt and request.transport is not None:
                request.transport.close()  # a dropped stream: no clean end of the chunked body
                return resp
            await resp.write_eof()
        finally:
            self._watchers.discard(w)
        return resp

    async def _bind(self, request: web.Request, ns: str, name: str) -> web.Response:
        body = await _json_body(request)
        meta = body.get("metadata") or {}
        if meta.get("name") != name:
            raise _ApiError(400, "BadRequest", "name in URL does not match name in Binding object")
        target = (body.get("target") or {}).get("name")
        if not target:
            raise _ApiError(400, "BadRequest", f'Binding.core "{name}" is invalid: target.name: Required value')
        pod = self.objects["pods"].get(f"{ns}/{name}")
        if pod is None:
            raise _ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        prefix = f'Operation cannot be fulfilled on pods/binding "{name}": '
        conflict = {"name": name, "kind": "pods/binding"}
        pm = pod["metadata"]
        if meta.get("uid") and meta["uid"] != pm["uid"]:
            raise _storage_precondition_conflict(RESOURCES["pods"], ns, name, "pods/binding",
                                                 f"UID in precondition: {meta['uid']}, UID in object meta: {pm['uid']}")
        if meta.get("resourceVersion") and meta["resourceVersion"] != pm["resourceVersion"]:
            raise _storage_precondition_conflict(RESOURCES["pods"], ns, name, "pods/binding",
                                                 f"ResourceVersion in precondition: {meta['resourceVersion']}, "
                                                 f"ResourceVersion in object meta: {pm['resourceVersion']}")
        if pm.get("deletionTimestamp"):
            raise _ApiError(409, "Conflict", prefix + f"pod {name} is being deleted, cannot be assigned to a host",
                            conflict)
        if pod["spec"].get("nodeName"):
            raise _ApiError(409, "Conflict", prefix + f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
                            conflict)
        if pod["spec"].get("schedulingGates"):
            raise _ApiError(409, "Conflict", prefix + f"pod {name} has non-empty .spec.schedulingGates",
                            conflict)
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = target
        if meta.get("annotations"):
            new["metadata"].setdefault("annotations", {}).update(meta["annotations"])
        st = new.setdefault("status", {})
        conds = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
        st["conditions"] = conds
        st.pop("nominatedNodeName", None)
        self.replace("pods", new)
        self.bind_log.append((pm["uid"], target))
        if self.lose_binding_replies > 0:
            self.lose_binding_replies -= 1
            if request.transport is not None:
                request.transport.close()
            return _status(500, "InternalError", "reply lost")
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "code": 201}, status=201)


    async def _evict(self, request: web.Request, ns: str, name: str) -> web.Response:
        """``pods/{name}/eviction`` (an Eviction in a version of :meth:`eviction_versions`; another is a 400), as
        the API server's EvictionREST answers: 404 for
        a missing pod, 409 on a failed UID precondition, 429 when a matching PDB allows no disruption,
        500 when several PDBs match; otherwise the pod is deleted (gracefully with ``graceful_deletes``,
        honouring ``deleteOptions.gracePeriodSeconds``) and the PDB spends one disruption. A pod already
        terminating skips the budget, as EvictionREST's canIgnorePDB does (which also skips it for a Pending or
        terminal pod: not modelled yet, the fast tests' bound pods stay Pending)."""
        body = await _json_body(request)
        api_version = body.get("apiVersion")
        if api_version and api_version not in self.eviction_versions():
            # the request's decoder has no Eviction kind in that version (a 1.20 server and policy/v1)
            raise _ApiError(400, "BadRequest", f'Eviction in version "{api_version.rpartition("/")[2]}" cannot be '
                            f'handled as a Eviction: no kind "Eviction" is registered for version "{api_version}" in '
                            'scheme "k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"')
        if (body.get("metadata") or {}).get("name") not in (None, name):
            raise _ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        pod = self.objects["pods"].get(f"{ns}/{name}")
        if pod is None:
            raise _ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        opts = body.get("deleteOptions") or {}
        want_uid = (opts.get("preconditions") or {}).get("uid")
        if want_uid and want_uid != pod["metadata"]["uid"]:
            raise _delete_uid_conflict(RESOURCES["pods"], name, want_uid, pod["metadata"]["uid"])
        from ..core.model import selector_matches

        labels = pod["metadata"].get("labels") or {}
        pdbs = [] if pod["metadata"].get("deletionTimestamp") else [
            b for k, b in self.objects["poddisruptionbudgets"].items()
            if k.startswith(f"{ns}/") and selector_matches((b.get("spec") or {}).get("selector"), labels)]
        if len(pdbs) > 1:
            raise _ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                            "eviction subresource does not support.")
        if pdbs:
            pdb = pdbs[0]
            if int((pdb.get("status") or {}).get("disruptionsAllowed", 0)) <= 0:
                raise _ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                "disruption budget.", {"causes": [{"reason": "DisruptionBudget", "message":
                                f"The disruption budget {pdb['metadata']['name']} needs more healthy pods"}]})
            self.update("poddisruptionbudgets", pdb["metadata"]["name"],
                        lambda o: o.setdefault("status", {}).update(
                            disruptionsAllowed=int(o["status"].get("disruptionsAllowed", 0)) - 1), ns)
        grace = opts.get("gracePeriodSeconds")
        if grace is not None and not isinstance(grace, int):
            raise _ApiError(400, "BadRequest", f"deleteOptions.gracePeriodSeconds: invalid value {grace!r}")
        self.evictions.append((ns, name))
        self.request_delete("pods", name, ns, grace_period_seconds=grace)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "code": 201}, status=201)


class _ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def _group(rt: ResourceType) -> str:
    return "" if rt.prefix == "/api/v1" else rt.prefix.split("/")[2]


def _is_custom(rt: ResourceType) -> bool:
    """A kind served from a CRD: Koordinator's groups and the sigs.k8s.io ones (PodGroup, ElasticQuota);
    the built-in groups are core and ``*.k8s.io`` (coordination, events, scheduling, policy...)."""
    group = _group(rt)
    return bool(group) and (group.endswith(".sigs.k8s.io") or not (group.endswith(".k8s.io") or "." not in group))


def _storage_precondition_conflict(rt: ResourceType, ns: str | None, name: str, resource: str, what: str) -> _ApiError:
    """A storage precondition (the UID or resourceVersion an update or a binding carries) that failed:
    etcd3's Preconditions.Check makes an invalid-object StorageError, which InterpretUpdateError turns
    into a 409 Conflict quoting it whole."""
    group = _group(rt)
    key = "/registry/" + "/".join(p for p in (group, rt.plural, ns, name) if p)
    return _ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": StorageError: invalid '
                     f"object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
                     f"{what}", {"name": name, **({"group": group} if group else {}), "kind": resource})


def _delete_uid_conflict(rt: ResourceType, name: str, want: str, have: str) -> _ApiError:
    """rest.BeforeDelete's early UID precondition check: a 409 whose resource is the object's kind."""
    group = _group(rt)
    return _ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.kind}{"." + group if group else ""} '
                     f'"{name}": the UID in the precondition ({want}) does not match the UID in record ({have}). '
                     "The object might have been deleted and then recreated",
                     {"name": name, **({"group": group} if group else {}), "kind": rt.kind})


async def _json_ops(request: web.Request) -> list:
    """An RFC 6902 JSON patch body (a list of operations); undecodable is the apiserver's 400."""
    try:
        ops = await request.json()
    except ValueError as e:
        raise _ApiError(400, "BadRequest", f"the body of the request could not be decoded: {e}") from None
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise _ApiError(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    return ops


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise ValueError(f"invalid JSON pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def _json_patch(doc: Any, ops: list[dict]) -> Any:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test) to a copy of ``doc``;
    ValueError says which operation failed."""
    doc = copy.deepcopy(doc)

    def parent(tokens: list[str], op: dict) -> tuple[Any, str]:
        cur = doc
        for t in tokens[:-1]:
            if isinstance(cur, dict) and t in cur:
                cur = cur[t]
            elif isinstance(cur, list) and t.isdigit() and int(t) < len(cur):
                cur = cur[int(t)]
            else:
                raise ValueError(f"{op['op']} operation does not apply: doc is missing path: {op.get('path')}")
        return cur, tokens[-1]

    def get(tokens: list[str], op: dict) -> Any:
        if not tokens:
            return doc
        c, k = parent(tokens, op)
        if isinstance(c, dict) and k in c:
            return c[k]
        if isinstance(c, list) and k.isdigit() and int(k) < len(c):
            return c[int(k)]
        raise ValueError(f"{op['op']} operation does not apply: doc is missing path: {op.get('path')}")

    def remove(tokens: list[str], op: dict) -> Any:
        get(tokens, op)
        c, k = parent(tokens, op)
        return c.pop(k) if isinstance(c, dict) else c.pop(int(k))

    def add(tokens: list[str], value: Any, op: dict) -> None:
        nonlocal doc
        if not tokens:
            doc = value
            return
        c, k = parent(tokens, op)
        if isinstance(c, dict):
            c[k] = value
        elif isinstance(c, list) and (k == "-" or (k.isdigit() and int(k) <= len(c))):
            c.insert(len(c) if k == "-" else int(k), value)
        else:
            raise ValueError(f"add operation does not apply: doc is missing path: {op.get('path')}")

    for op in ops:
        kind = op.get("op")
        tokens = _pointer(op.get("path"))
        if kind in ("add", "replace", "test") and "value" not in op:
            raise ValueError(f"{kind} operation has no value")
        if kind == "add":
            add(tokens, copy.deepcopy(op["value"]), op)
        elif kind == "remove":
            remove(tokens, op)
        elif kind == "replace":
            remove(tokens, op)
            add(tokens, copy.deepcopy(op["value"]), op)
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from"))
            value = remove(src, op) if kind == "move" else copy.deepcopy(get(src, op))
            add(tokens, value, op)
        elif kind == "test":
            if get(tokens, op) != op["value"]:
                raise ValueError(f"testing value {op.get('path')} failed")
        else:
            raise ValueError(f"unexpected kind: {kind}")
    return doc


def _json_patched(rt: ResourceType, cur: dict, sub: str | None, ops: list[dict]) -> dict:
    """The object after a JSON patch: through ``/status`` only its status changes, through the main
    resource everything but its status (the update strategies' PrepareForUpdate); a patch that does not
    apply is the apiserver's 422."""
    try:
        patched = _json_patch(cur, ops)
    except ValueError as e:
        raise _ApiError(422, "Invalid", str(e)) from None
    if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
        raise _ApiError(422, "Invalid", "the patched object is not a Kubernetes object")
    if sub == "status":
        new = copy.deepcopy(cur)
        new["status"] = patched.get("status")
        return new
    if patched["metadata"].get("uid", cur["metadata"].get("uid")) != cur["metadata"].get("uid"):
        raise _ApiError(422, "Invalid", f'{rt.kind} "{cur["metadata"].get("name")}" is invalid: metadata.uid: '
                        f'Invalid value: "{patched["metadata"].get("uid")}": field is immutable')
    if rt.has_status:
        patched["status"] = copy.deepcopy(cur.get("status"))
    for k in ("uid", "name", "namespace", "resourceVersion", "creationTimestamp"):
        if k in cur["metadata"]:
            patched["metadata"][k] = cur["metadata"][k]
    return patched


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except ValueError as e:
        raise _ApiError(400, "BadRequest", f"the body of the request could not be decoded: {e}") from None
    if not isinstance(body, dict):
        raise _ApiError(400, "BadRequest", "the body of the request must be a JSON object")
    return body


def _plural_of(kind: str) -> str:
    for r in RESOURCES.values():
        if r.kind == kind:
            return r.plural
    raise ValueError(f"the fake API server does not serve kind {kind!r}")
