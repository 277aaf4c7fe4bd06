"""kube-scheduler's HTTP extender protocol, served by the same plugins.

Wire format (``k8s.io/kube-scheduler/extender/v1``; the Go structs have no json tags): requests carry
capitalised keys (``Pod``, ``Nodes``, ``NodeNames``), read here case-insensitively; replies use the
capitalised keys kube-scheduler's decoder expects. Verbs are served at ``<prefix>/<verb>``:

* ``filter``: ExtenderArgs → ExtenderFilterResult (``NodeNames`` or ``Nodes`` in the request's mode,
  ``FailedNodes``, ``FailedAndUnresolvableNodes`` where preemption cannot help, ``Error``);
* ``prioritize``: ExtenderArgs → a bare ``[{"Host", "Score"}]`` list, scores mapped to 0..10;
* ``bind``: ExtenderBindingArgs → ExtenderBindingResult (needs an API client). When some plugin has
  ``reserve`` or ``pre_bind`` hooks, the pod is read from the API and run through pre_filter, the
  filters on the chosen node, reserve and pre_bind in the cache first, and the annotations they wrote
  (e.g. ``scheduling.koordinator.sh/device-allocated``) are merge-patched before the Binding; a
  rejection is returned as the ``Error`` naming the plugin, with nothing left reserved;
* ``preempt``: ExtenderPreemptionArgs → ``NodeNameToMetaVictims``, dropping nodes where the pod would
  still not fit after its victims leave.

With an API client the extender keeps the scheduler's cluster cache (reflectors), so stateful plugins
see real usage; without one it answers from the request alone: non-cache mode only (``Nodes``), with
no pods on the nodes. Until every reflector of the cache has listed once, each verb answers with an
error the way kube-scheduler reads one (filter and bind: the ``Error`` field, which fails the
scheduling attempt; prioritize and preempt, whose replies have no such field: HTTP 503, which kube-scheduler
counts as a failed call: no scores from this extender, no preemption candidates), never "not in the
cache" for every node; ``/readyz`` is 503 until then.

Bad input is answered, never a traceback, a hang or a dropped connection, and the server serves on:

* a body that is not a JSON object (malformed, not UTF-8, ``NaN``/``Infinity``, nested deeper than
  100, an integer of thousands of digits), that holds a number no Kubernetes field can (non-finite such
  as ``1e400``, an integer beyond int64), or whose fields have the wrong shape (``Pod`` not a v1 Pod,
  ``Nodes.items`` not a list of Nodes with names, ``NodeNames`` not a list of distinct strings,
  victims not ``{Pods, NumPDBViolations}``, ``PodName``/``PodNamespace``/``Node`` not Kubernetes
  names), or a Pod or Node the model refuses (bad quantities, names, types) is a **400** with
  ``{"Error": "..."}`` naming the field;
* a body over ``max_body`` (decompressed) is a 413, an undecodable transfer or content encoding a 400;
* a client that has not sent its request headers within ``header_timeout`` of connecting (or of the
  previous reply: the idle keep-alive bound too) is disconnected; one that has not sent its body within
  ``body_timeout`` of its headers gets a 408 and is disconnected. Each request is its own task, so a
  slow client never delays the others, and the work per request is linear in its (bounded) size;
* a plugin error is an ``Error`` field (HTTP 200 for filter/bind/preempt, 500 with ``{"Error"}`` for
  prioritize, whose reply has no such field); a bug in the extender a 500 with ``{"Error"}``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ...core.caller import PluginFailure
from ...core.clock import RealClock
from ...core.cluster import ClusterState
from ...core.errors import KoordfwError
from ...core.model import DNS_LABEL, DNS_SUBDOMAIN, Pod, node_from_manifest, pod_from_manifest
from ...core.placed import release_placed, reserve_placed
from ...core.plugins import Registry
from ...core.safeload import InputError, decode_text, loads_json
from ...core.safeload import shorten as _short
from ...core.schedule_one import Scheduler
from ...core.state import CycleState
from ...core.status import Code, Status
from .binder import BindDropped, BindGated, KubeBinder
from .client import ApiError, KubeClient
from .health import DEFAULT_UNHEALTHY_AFTER, add_health_routes, start_app, unhealthy_reason

log = structlog.get_logger("koordfw.extender")

MAX_EXTENDER_PRIORITY = 10
DEFAULT_MAX_BODY = 32 * 1024 * 1024
#: seconds a client has to send its request headers after connecting or after the previous reply
DEFAULT_HEADER_TIMEOUT = 15.0
#: seconds a client has to send its request body after its headers
DEFAULT_BODY_TIMEOUT = 30.0
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: a number literal that may not fit: 19+ digits (beyond int64) or a 3-digit exponent (beyond float)
_BIG_NUMBER = re.compile(rb"\d{19}|[eE][-+]?\d{3}")
#: seconds between a 408 to a slow client and the closing of its connection
HANG_UP_GRACE = 0.2
#: items (Nodes, NodeNames) handled between two yields to the event loop in a large request
YIELD_EVERY = 64
#: bodies at least this large are decoded in a worker thread (the nesting walk is Python code)
THREAD_DECODE_BYTES = 1 << 20
#: what a model function may raise on input it does not guard against yet (answered as a 400)
_UNGUARDED = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError, RecursionError)
#: hooks that only make sense with a cluster cache
STATEFUL_HOOKS = ("reserve", "unreserve", "permit", "pre_bind", "post_bind", "node_resources", "deschedule")


class BadRequest(Exception):
    """A malformed request: answered 400 with ``{"Error": message}``."""


class NotSynced(Exception):
    """The cluster cache has not synced yet, for a verb whose reply has no ``Error`` field: answered 503
    with ``{"Error": message}`` (kube-scheduler treats any non-200 reply as the call failing)."""


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _path(at: tuple | None) -> str:
    keys = []
    while at is not None:
        at, k = at
        keys.append(f"[{k}]" if isinstance(k, int) else f".{k}")
    return "".join(reversed(keys)).lstrip(".") or "(the body)"


def check_numbers(doc: Any, raw: bytes) -> None:
    """Refuse a number no Kubernetes field can hold (not finite, as ``1e400`` parses; an integer beyond
    int64), naming where it is. ``raw`` is the body: without a long number literal there is no walk."""
    if not _BIG_NUMBER.search(raw):
        return
    stack: list[tuple[Any, tuple | None]] = [(doc, None)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, dict):
            stack.extend((c, (at, k)) for k, c in v.items() if isinstance(c, (dict, list, int, float)))
        elif isinstance(v, list):
            stack.extend((c, (at, i)) for i, c in enumerate(v) if isinstance(c, (dict, list, int, float)))
        elif isinstance(v, float) and not math.isfinite(v):
            raise BadRequest(f"field {_path(at)}: {v} is not a finite number")
        elif isinstance(v, int) and not isinstance(v, bool) and not INT64_MIN <= v <= INT64_MAX:
            raise BadRequest(f"field {_path(at)}: {_short(v)} does not fit in 64 bits")


class _Constant:
    """Where a JSON ``NaN``/``Infinity`` was, when re-reading a refused body to name the field."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def locate_constant(raw: bytes) -> str | None:
    """``field <path>: NaN`` for the first NaN/Infinity of a body :func:`loads_json` refused for one (it
    says only which constant), or None when the body cannot be re-read."""
    try:
        doc = json.loads(decode_text(raw), parse_constant=_Constant)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, tuple | None]] = [(doc, None)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, _Constant):
            return f"field {_path(at)}: {v.text}"
        if isinstance(v, dict):
            stack.extend((c, (at, k)) for k, c in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((c, (at, i)) for i, c in reversed(list(enumerate(v))))
    return None


def _name(value: object, field: str, *, label: bool = False) -> str:
    """A Kubernetes object name (a DNS-1123 subdomain, or with ``label`` a DNS-1123 label)."""
    limit, pattern, what = (63, DNS_LABEL, "label") if label else (253, DNS_SUBDOMAIN, "subdomain")
    if not isinstance(value, str) or not value:
        raise BadRequest(f"field {field}: expected a name (a non-empty string), got {_kind(value)} {_short(value)}")
    if len(value) > limit or not pattern.fullmatch(value):
        raise BadRequest(f"field {field}: invalid name {_short(value)}: a lowercase RFC 1123 {what} of at most "
                         f"{limit} characters")
    return value


def _count(value: object, field: str) -> int:
    """A non-negative integer (Go int64): NumPDBViolations."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"field {field}: expected a non-negative integer, got {_kind(value)} {_short(value)}")
    return value


#: JSON types of the v1 Pod and Node fields koordfw reads whose wrong type the model would take as empty
#: or stringify (it also reads YAML, where that is kinder); kube-scheduler sends typed Go objects, so
#: here a wrong type is a 400. null is allowed everywhere, as Go's decoder allows it. ``*``: each element.
_POD_TYPES: tuple[tuple[tuple[str, ...], type], ...] = (
    (("metadata",), dict), (("metadata", "uid"), str), (("metadata", "ownerReferences"), list),
    (("metadata", "ownerReferences", "*"), dict), (("spec",), dict), (("status",), dict),
    (("spec", "containers"), list), (("spec", "initContainers"), list), (("spec", "tolerations"), list),
    (("spec", "containers", "*", "name"), str), (("spec", "containers", "*", "resources"), dict),
    (("spec", "initContainers", "*", "name"), str), (("spec", "initContainers", "*", "resources"), dict),
    (("spec", "nodeName"), str), (("spec", "schedulerName"), str), (("spec", "preemptionPolicy"), str),
    (("status", "phase"), str), (("status", "nominatedNodeName"), str),
)
_NODE_TYPES: tuple[tuple[tuple[str, ...], type], ...] = (
    (("metadata", "uid"), str), (("spec",), dict), (("status",), dict), (("spec", "taints"), list),
    (("spec", "unschedulable"), bool), (("status", "capacity"), dict), (("status", "allocatable"), dict),
)
_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}


def check_types(obj: dict, table: tuple[tuple[tuple[str, ...], type], ...], prefix: str) -> None:
    """Raise BadRequest naming the first field of ``table`` present in ``obj`` with another JSON type."""
    for path, want in table:
        level: list[tuple[str, Any]] = [(prefix, obj)]
        for key in path:
            nxt: list[tuple[str, Any]] = []
            for where, v in level:
                if key == "*" and isinstance(v, list):
                    nxt.extend((f"{where}[{i}]", c) for i, c in enumerate(v))
                elif key != "*" and isinstance(v, dict) and v.get(key) is not None:
                    nxt.append((f"{where}.{key}", v[key]))
            level = nxt
        for where, v in level:
            if not isinstance(v, want):
                raise BadRequest(f"field {where}: expected {_TYPE_NAMES[want]}, got {_kind(v)} {_short(v)}")


def _node_names(names: object, field: str = "NodeNames") -> list[str]:
    if not isinstance(names, list):
        raise BadRequest(f"field {field}: expected a list of node names, got {_kind(names)}")
    seen: dict[str, int] = {}
    for i, n in enumerate(names):
        if not isinstance(n, str) or not n:
            raise BadRequest(f"field {field}[{i}]: expected a node name (a non-empty string), got {_kind(n)} {_short(n)}")
        if n in seen:
            raise BadRequest(f"field {field}[{i}]: node {_short(n)} is also {field}[{seen[n]}]")
        seen[n] = i
    return names


async def _node_items(nodes: object) -> list[dict]:
    """``Nodes.items`` of a v1 NodeList: objects with distinct ``metadata.name`` strings (checked in
    slices, letting other requests run between them)."""
    if not isinstance(nodes, dict):
        raise BadRequest(f"field Nodes: expected a NodeList object, got {_kind(nodes)}")
    items = ci_get(nodes, "items")
    if not isinstance(items, list):
        raise BadRequest(f"field Nodes.items: Nodes must be a NodeList with items (a list), got {_kind(items)}")
    seen: dict[str, int] = {}
    for i, n in enumerate(items):
        where = f"Nodes.items[{i}]"
        if not isinstance(n, dict):
            raise BadRequest(f"field {where}: expected a Node object, got {_kind(n)}")
        meta = n.get("metadata")
        if not isinstance(meta, dict):
            raise BadRequest(f"field {where}.metadata: a Node needs metadata with a name, got {_kind(meta)}")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"field {where}.metadata.name: expected a node name (a non-empty string), got "
                             f"{_kind(name)} {_short(name)}")
        if name in seen:
            raise BadRequest(f"field {where}.metadata.name: node {_short(name)} is also Nodes.items[{seen[name]}]")
        seen[name] = i
        check_types(n, _NODE_TYPES, where)
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await anyio.sleep(0)
    return items


def _victims(args: dict) -> dict[str, dict]:
    """``NodeNameToVictims`` (full Pods) or else ``NodeNameToMetaVictims`` (UIDs), as meta victims."""
    full, meta = ci_get(args, "NodeNameToVictims"), ci_get(args, "NodeNameToMetaVictims")
    for field, v in (("NodeNameToVictims", full), ("NodeNameToMetaVictims", meta)):
        if v is not None and not isinstance(v, dict):
            raise BadRequest(f"field {field}: expected an object of node name → victims, got {_kind(v)}")
    field, chosen = ("NodeNameToVictims", full) if full else ("NodeNameToMetaVictims", meta or {})
    out: dict[str, dict] = {}
    for node, v in chosen.items():
        where = f"{field}.{node}"
        if not isinstance(v, dict):
            raise BadRequest(f"field {where}: expected an object with Pods and NumPDBViolations, got {_kind(v)}")
        pods = ci_get(v, "Pods")
        if pods is None:
            pods = []
        if not isinstance(pods, list):
            raise BadRequest(f"field {where}.Pods: expected a list, got {_kind(pods)}")
        uids = []
        for j, p in enumerate(pods):
            pw = f"{where}.Pods[{j}]"
            if not isinstance(p, dict):
                raise BadRequest(f"field {pw}: expected {'a Pod' if full else 'an object with a UID'}, got {_kind(p)}")
            if full:
                m = p.get("metadata")
                if m is not None and not isinstance(m, dict):
                    raise BadRequest(f"field {pw}.metadata: expected an object, got {_kind(m)}")
                uid, uw = (m or {}).get("uid"), f"{pw}.metadata.uid"
            else:
                uid, uw = ci_get(p, "UID"), f"{pw}.UID"
            if uid is not None and not isinstance(uid, str):
                raise BadRequest(f"field {uw}: expected a string, got {_kind(uid)} {_short(uid)}")
            uids.append(uid or "")
        out[node] = {"Pods": [{"UID": u} for u in uids],
                     "NumPDBViolations": _count(ci_get(v, "NumPDBViolations"), f"{where}.NumPDBViolations")}
    return out


def ci_get(d: dict, key: str) -> Any:
    """Go's decoder matches keys case-insensitively; so do we (exact match first)."""
    if key in d:
        return d[key]
    low = key.lower()
    for k, v in d.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def map_score(total: int, max_total: int) -> int:
    """A weighted plugin total (0..max_total) → kube's extender range 0..10, rounded down."""
    if max_total <= 0:
        return 0
    return max(0, min(MAX_EXTENDER_PRIORITY, total * MAX_EXTENDER_PRIORITY // max_total))


def node_indices(cluster: ClusterState, names: list) -> np.ndarray:
    """Row index of each named node in the cluster's columns (-1: unknown or removed)."""
    return cluster.indices_of(_node_names(names))


class Extender:
    """The verbs, independent of HTTP (``await ext.filter(args_dict)`` returns the reply dict)."""

    def __init__(self, registry: Registry, *, client: KubeClient | None = None, seed: int = 0,
                 unhealthy_after: float = DEFAULT_UNHEALTHY_AFTER) -> None:
        # kube-scheduler runs its own VolumeBinding (Reserve writes the assumed bindings, PreBind the PV
        # claimRef and the claim's selected-node) before it calls the extender's bind: ours must not run
        # those again, nor make every bind a stateful one
        registry.disable_at("volume_binding", ("reserve", "unreserve", "pre_bind"))
        self.registry = registry
        self.client = client
        #: ``/healthz`` is 500 once the API has been unreachable, or the cache unsynced since the start,
        #: for longer than this many seconds (on the client's clock), as the scheduler's
        self.unhealthy_after = unhealthy_after
        self.started_at: float | None = client.clock() if client is not None else None
        self.binder = KubeBinder(client) if client is not None else None
        self.reflectors: list = []
        if client is not None:
            from .engine import build_cache

            self.scheduler, self.feeder, self.reflectors = build_cache(registry, client, scheduler_name=None, seed=seed)
        else:
            self.scheduler = Scheduler(registry, ClusterState(), RealClock(), seed=seed)
        self.stateful = client is not None

    @property
    def plugins_needing_state(self) -> list[str]:
        return sorted({i.plugin for h in STATEFUL_HOOKS for i in self.registry.impls(h)})

    @property
    def synced(self) -> bool:
        """Every reflector of the cluster cache has listed once (always true without a cache)."""
        return all(r.synced.is_set() for r in self.reflectors)

    def unhealthy_reason(self) -> str | None:
        """Why ``/healthz`` should fail (the kubelet then restarts the process), or None."""
        if self.client is None:
            return None
        return unhealthy_reason(self.client, unsynced=[r.name for r in self.reflectors if not r.synced.is_set()],
                                started_at=self.started_at, after=self.unhealthy_after)

    def not_synced(self) -> str | None:
        """Why the cache cannot answer yet (it has not synced), or None when it can."""
        waiting = [r.name for r in self.reflectors if not r.synced.is_set()]
        if not waiting:
            return None
        return (f"the extender's cluster cache has not synced yet (still listing {', '.join(waiting)}); "
                "kube-scheduler will retry the pod")

    # -- the cluster a request is judged against --------------------------------------------------
    async def _target(self, args: dict) -> tuple[Scheduler, list[str], dict[str, dict] | None]:
        """(scheduler, node names, full node objects by name when the request carried them)."""
        nodes = ci_get(args, "Nodes")
        names = ci_get(args, "NodeNames")
        if nodes is not None:
            items = await _node_items(nodes)
            by_name = {n["metadata"]["name"]: n for n in items}
            if self.stateful:
                return self.scheduler, list(by_name), by_name
            cluster = ClusterState()
            for i, n in enumerate(items):
                try:
                    node = node_from_manifest(n)
                except KoordfwError as e:
                    raise BadRequest(f"field Nodes.items[{i}]: {e}") from None
                except _UNGUARDED as e:  # the model should have said ManifestError: still the request's fault
                    log.warning("node_from_manifest raised on a request's Node", index=i,
                                error=f"{type(e).__name__}: {e}")
                    raise BadRequest(f"field Nodes.items[{i}]: cannot read this Node ({e})") from None
                cluster.add_node(node)
                if i % YIELD_EVERY == YIELD_EVERY - 1:  # ~100 µs a Node: let other requests in
                    await anyio.sleep(0)
            return Scheduler(self.registry, cluster, RealClock()), list(by_name), by_name
        if names is None:
            raise BadRequest("the request has neither Nodes nor NodeNames")
        _node_names(names)
        if not self.stateful:
            raise BadRequest("NodeNames (nodeCacheCapable: true) needs a cluster cache: start the extender with "
                             "--kubeconfig or --in-cluster, or set nodeCacheCapable: false")
        return self.scheduler, names, None

    def _pod(self, args: dict) -> Pod:
        raw = ci_get(args, "Pod")
        if raw is None:
            raise BadRequest("the request has no Pod")
        if not isinstance(raw, dict):
            raise BadRequest(f"field Pod: expected a v1 Pod object, got {_kind(raw)}")
        check_types(raw, _POD_TYPES, "Pod")
        try:
            pod = pod_from_manifest(raw)
        except KoordfwError as e:
            raise BadRequest(f"field Pod: {e}") from None
        except _UNGUARDED as e:  # the model should have said ManifestError: still the request's fault
            log.warning("pod_from_manifest raised on a request's Pod", error=f"{type(e).__name__}: {e}")
            raise BadRequest(f"field Pod: cannot read this Pod ({e})") from None
        # the request's pod is authoritative: drop a request vector cached for an older copy
        self.scheduler.cluster.forget_request_cache(pod.uid)
        return pod

    async def _feasible(self, s: Scheduler, pod: Pod, names: list[str], state: CycleState
                        ) -> tuple[list[str], dict[str, Status]]:
        st, candidates = await s.framework.run_pre_filter(pod, state)
        if st.code == Code.ERROR:
            raise PluginFailure(st)
        failed: dict[str, Status] = {}
        if not st.ok:
            return [], {n: st for n in names}
        idx = node_indices(s.cluster, names)
        usable = idx >= 0
        for k, j in enumerate(np.flatnonzero(~usable).tolist()):
            failed[names[j]] = Status.unschedulable(f"node {names[j]} is not in the extender's cache")
            if k % (16 * YIELD_EVERY) == 16 * YIELD_EVERY - 1:
                await anyio.sleep(0)
        if candidates is not None:
            for j in np.flatnonzero(usable).tolist():
                if names[j] not in candidates:
                    usable[j] = False
                    failed[names[j]] = Status.unresolvable("node(s) didn't satisfy plugin(s) pre_filter node set")
        sub = idx[usable]
        if not len(sub):
            return [], failed
        st, ok, statuses = await s.framework.run_filters(pod, state, sub)
        if not st.ok:
            raise PluginFailure(st)
        failed.update(statuses)
        keep = np.isin(idx, ok) & usable
        return [names[j] for j in np.flatnonzero(keep).tolist()], failed

    # -- verbs -------------------------------------------------------------------------------------
    async def filter(self, args: dict) -> dict:
        s, names, full = await self._target(args)
        pod = self._pod(args)
        if why := self.not_synced():
            return self._filter_reply(full, [], {}, {}, why)
        try:
            kept, failed = await self._feasible(s, pod, names, CycleState())
        except PluginFailure as f:
            return self._filter_reply(full, [], {}, {}, f.status.message or "plugin error")
        soft: dict[str, str] = {}
        hard: dict[str, str] = {}
        for n, st in failed.items():
            msg = st.message or f"rejected by {st.plugin}"
            (hard if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE else soft)[n] = msg
        return self._filter_reply(full, kept, soft, hard, "")

    @staticmethod
    def _filter_reply(full: dict[str, dict] | None, kept: list[str], soft: dict, hard: dict, error: str) -> dict:
        out: dict[str, Any] = {}
        if full is None:
            out["Nodes"], out["NodeNames"] = None, kept
        else:
            out["Nodes"], out["NodeNames"] = {"items": [full[n] for n in kept]}, None
        out.update({"FailedNodes": soft, "FailedAndUnresolvableNodes": hard, "Error": error})
        return out

    async def prioritize(self, args: dict) -> list[dict]:
        s, names, _ = await self._target(args)
        pod = self._pod(args)
        if why := self.not_synced():
            raise NotSynced(why)
        state = CycleState()
        st, _cands = await s.framework.run_pre_filter(pod, state)
        if st.code == Code.ERROR:
            raise PluginFailure(st)
        idx = node_indices(s.cluster, names)
        known = idx >= 0
        scores = np.zeros(len(idx), dtype=np.int64)
        if known.any():
            st, total, max_total = await s.framework.run_score(pod, state, idx[known])
            if not st.ok:
                raise PluginFailure(st)
            if max_total > 0:
                scores[known] = np.clip(total * MAX_EXTENDER_PRIORITY // max_total, 0, MAX_EXTENDER_PRIORITY)
        return [{"Host": n, "Score": v} for n, v in zip(names, scores.tolist())]

    async def bind(self, args: dict) -> dict:
        name, ns, uid, node = (ci_get(args, k) for k in ("PodName", "PodNamespace", "PodUID", "Node"))
        if name is None or node is None:
            raise BadRequest("bind needs PodName and Node")
        name, node = _name(name, "PodName"), _name(node, "Node")
        ns = "default" if ns is None or ns == "" else _name(ns, "PodNamespace", label=True)
        if uid is not None and not isinstance(uid, str):
            raise BadRequest(f"field PodUID: expected a string, got {_kind(uid)} {_short(uid)}")
        if self.binder is None or self.client is None:  # (both or neither)
            return {"Error": "bind needs an API client: start the extender with --kubeconfig or --in-cluster"}
        try:
            if self.stateful and self.binds_with_state:
                if why := self.not_synced():  # reserve would count against a cache missing pods
                    return {"Error": why}
                return await self._bind_with_state(name, ns, uid, node)
            if not uid:  # older senders: learn the UID so the binding still carries the precondition
                cur = await self.client.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                uid = (cur.get("metadata") or {}).get("uid", "")
            pod = pod_from_manifest({"metadata": {"name": name, "namespace": ns, "uid": uid}, "spec": {}})
            await self.binder(pod, node, {})
        except (BindDropped, BindGated, ApiError) as e:
            return {"Error": str(e)}
        return {"Error": ""}

    @property
    def binds_with_state(self) -> bool:
        """Some plugin reserves or writes pre_bind annotations (devices, cpusets): bind must run them."""
        return any(self.registry.impls(h) for h in ("reserve", "pre_bind"))

    async def _bind_with_state(self, name: str, ns: str, uid: str | None, node: str) -> dict:
        """Read the pod, run reserve and pre_bind for it on ``node`` in the cache, then bind with the
        annotations pre_bind wrote (merge-patched before the Binding, as the secondary scheduler does)."""
        assert self.client is not None and self.binder is not None  # bind checked
        cur = await self.client.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if uid and (cur.get("metadata") or {}).get("uid") != uid:
            return {"Error": f"pod {ns}/{name} was recreated (uid {(cur.get('metadata') or {}).get('uid')})"}
        try:
            pod = pod_from_manifest(cur)
        except KoordfwError as e:
            return {"Error": str(e)}
        s = self.scheduler
        s.cluster.forget_request_cache(pod.uid)
        cached = s.cluster.pod(pod.uid) is not None  # the cache keeps no pending pod of other schedulers
        st, state = await reserve_placed(s, pod, node)
        if st.ok:
            try:
                await self.binder(pod, node, dict(state.annotations))
                return {"Error": ""}
            except (BindDropped, BindGated, ApiError) as e:
                await release_placed(s, pod, node, state)
                st = Status.error(str(e))
        if not cached:
            s.cluster.remove_pod(pod.uid)
        why = st.message or "rejected"
        return {"Error": f"{why} (plugin {st.plugin})" if st.plugin else why}

    async def preempt(self, args: dict) -> dict:
        pod = self._pod(args)
        out = _victims(args)
        if not self.stateful:
            return {"NodeNameToMetaVictims": out}  # nothing to judge against: keep kube's candidates
        if why := self.not_synced():
            raise NotSynced(why)
        s = self.scheduler
        kept = {}
        for node, v in out.items():
            if s.cluster.node(node) is None:
                continue
            victims = [p for p in (s.cluster.pod(x["UID"]) for x in v["Pods"]) if p is not None]
            with s.cluster.without_pods(node, victims):
                st = await s.framework.run_filters_on_node(pod, node, CycleState())
            if st.ok:
                kept[node] = v
        return {"NodeNameToMetaVictims": kept}


class ExtenderServer:
    """The aiohttp app around an :class:`Extender`.

    ``header_timeout``: seconds a connection may take to send a request's headers, counted from its
    opening or from the previous reply (so also how long an idle keep-alive connection stays open);
    ``body_timeout``: seconds for the body after the headers (a 408, and the connection is closed)."""

    def __init__(self, extender: Extender, *, prefix: str = "", max_body: int = DEFAULT_MAX_BODY,
                 header_timeout: float = DEFAULT_HEADER_TIMEOUT, body_timeout: float = DEFAULT_BODY_TIMEOUT) -> None:
        if not (header_timeout > 0 and body_timeout > 0):
            raise ValueError("header_timeout and body_timeout must be positive")
        self.ext = extender
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.max_body = max_body
        self.header_timeout, self.body_timeout = float(header_timeout), float(body_timeout)
        self.requests = 0
        self.app = web.Application(client_max_size=max_body)
        for verb in ("filter", "prioritize", "bind", "preempt"):
            self.app.router.add_post(f"{self.prefix}/{verb}", self._handler(verb))
        self.app.router.add_get(f"{self.prefix}/" if self.prefix else "/", self._info)
        add_health_routes(self.app, self.info, lambda: self.ext.synced, self.ext.unhealthy_reason)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def info(self) -> dict[str, Any]:
        ext = self.ext
        out: dict[str, Any] = {"mode": "stateful" if ext.stateful else "stateless",
                               "verbs": [f"{self.prefix}/{v}" for v in ("filter", "prioritize", "bind", "preempt")],
                               "plugins": sorted(ext.registry.plugins), "requests": self.requests}
        if not ext.stateful:
            out["pluginsNeedingState"] = ext.plugins_needing_state
            out["note"] = ("no cluster cache: nodes are judged without their pods or NodeMetrics; NodeNames "
                           "requests are refused")
        else:
            out["nodes"] = ext.scheduler.cluster.num_nodes
            out["synced"] = ext.synced
        return out

    async def _info(self, _: web.Request) -> web.Response:
        return web.json_response(self.info())

    def _handler(self, verb: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        fn = getattr(self.ext, verb)

        async def handle(request: web.Request) -> web.StreamResponse:
            self.requests += 1
            try:
                with anyio.fail_after(self.body_timeout):
                    raw = await request.read()
            except TimeoutError:
                return await self._hang_up(request, f"the {verb} request body did not arrive within "
                                                    f"{self.body_timeout:g}s")
            except web.HTTPRequestEntityTooLarge as e:
                return web.json_response({"Error": f"request body too large: {e.text}"}, status=413)
            except (web.RequestPayloadError, HttpProcessingError) as e:  # broken chunked or gzip/deflate/br
                cause = e.__cause__ if isinstance(e.__cause__, HttpProcessingError) else e
                why = cause.message if isinstance(cause, HttpProcessingError) else str(cause)
                return web.json_response({"Error": f"unreadable {verb} request body: {why.strip()}"}, status=400)
            try:
                if len(raw) >= THREAD_DECODE_BYTES:
                    args = await anyio.to_thread.run_sync(loads_json, raw)
                else:
                    args = loads_json(raw)
            except InputError as e:
                where = locate_constant(raw) if "not a JSON number" in str(e) else None
                why = f"{where} is not a JSON number" if where else str(e)
                return web.json_response({"Error": f"malformed JSON in the {verb} request: {why}"}, status=400)
            except ValueError:  # json's int-length limit (4300 digits) is a bare ValueError
                return web.json_response({"Error": f"malformed JSON in the {verb} request: an integer with "
                                                   "thousands of digits"}, status=400)
            if not isinstance(args, dict):
                return web.json_response({"Error": f"the {verb} request must be a JSON object"}, status=400)
            try:
                if len(raw) >= THREAD_DECODE_BYTES:
                    await anyio.to_thread.run_sync(check_numbers, args, raw)
                else:
                    check_numbers(args, raw)
                reply = await fn(args)
            except BadRequest as e:
                return web.json_response({"Error": str(e)}, status=400)
            except NotSynced as e:
                return web.json_response({"Error": str(e)}, status=503)
            except PluginFailure as f:
                msg = f.status.message or "plugin error"
                if verb == "prioritize":
                    return web.json_response({"Error": msg}, status=500)
                return web.json_response({"Error": msg} if verb != "filter" else
                                         Extender._filter_reply(None, [], {}, {}, msg))
            except Exception as e:  # a bug must answer, not drop the connection
                log.error("extender verb failed", verb=verb, error=f"{type(e).__name__}: {e}", exc_info=True)
                return web.json_response({"Error": f"internal error in the extender's {verb} (logged): {e}"},
                                         status=500)
            return web.Response(text=json.dumps(reply), content_type="application/json")

        return handle

    @staticmethod
    async def _hang_up(request: web.Request, why: str) -> web.StreamResponse:
        """Answer 408 and close the connection :data:`HANG_UP_GRACE` seconds later (meanwhile aiohttp reads
        and drops what still trickles in, so the close does not reset the connection before the client
        has read the 408), instead of aiohttp's lingering read of up to 10 s."""
        resp = web.json_response({"Error": why}, status=408)
        resp.force_close()
        try:
            await resp.prepare(request)
            await resp.write_eof()
        except ConnectionError:
            pass
        asyncio.get_running_loop().call_later(HANG_UP_GRACE, request.protocol.force_close)
        return resp

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, ssl_context: ssl.SSLContext | None = None) -> int:
        # aiohttp's keep-alive timer also runs while a request's headers are awaited: it is the header bound
        self._runner, self.port = await start_app(self.app, host, port, ssl_context=ssl_context,
                                                  keepalive_timeout=self.header_timeout)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def run_cache(self) -> None:
        """Keep the cluster cache fed (stateful mode) until cancelled."""
        if not self.ext.reflectors:
            await anyio.sleep_forever()
        async with anyio.create_task_group() as tg:
            for r in self.ext.reflectors:
                tg.start_soon(r.run)
