"""The node agent's evictor on a cluster: the evictions node plugins plan, through the Eviction API.

:class:`NodeEvictor` is the :attr:`koordfw.agent.loop.Agent.evictor` of ``koordfw agent --kubeconfig``
(installed by :class:`koordfw.engines.kube.node.NodeOnCluster`). For each :class:`koordfw.Eviction` of a
round, in plan order:

1. a pod evicted by this agent in the last :data:`EVICTED_TTL_SECONDS` is not evicted again (koordlet's
   evicted-pods cache); the rate limit (``max_per_minute`` evictions in any 60 s) is checked;
2. the pod is read again from the API and refused unless it is still the planned uid, bound to this
   node, of Koordinator QoS ``BE`` (:attr:`koordfw.Pod.qos_class`: the ``koordinator.sh/qosClass`` label,
   else derived from the kube QoS class) and not a system pod (:func:`system_pod_reason`), whatever the
   plugin planned;
3. the pod gets the ``DisruptionTarget`` condition (reason ``EvictionByEvictionAPI``, message naming the
   plugin and its reason), then ``POST pods/{name}/eviction`` (UID precondition; the Eviction in the
   version the server takes, ``policy/v1`` or ``policy/v1beta1``, found by discovery), which honours
   PodDisruptionBudgets; a Warning Event ``evictPodSuccess`` or ``evictPodFail`` (koordlet's reasons)
   names the plugin and reason.

Each outcome is logged and counted in ``koordfw_agent_evictions_total{plugin, outcome}``.
"""

from __future__ import annotations

import datetime as _dt
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import structlog

from ...core.errors import ManifestError
from ...core.model import Pod, pod_from_manifest
from ...core.nodestate import Eviction
from ...extension import QOS_BE, QOS_SYSTEM
from .client import ApiError, KubeClient
from .discovery import discovery_for, version_refused

log = structlog.get_logger("koordfw.kube.evictor")


async def post_eviction(client: KubeClient, namespace: str, name: str, uid: str,
                        delete_options: Mapping[str, Any] | None = None) -> None:
    """``POST pods/{name}/eviction`` with the pod's UID as precondition (a pod recreated under the name is
    not evicted), ``delete_options`` merged in; raises :class:`ApiError` (429: a disruption budget refused
    it). The Eviction's ``apiVersion`` is the one the server's ``pods/eviction`` takes
    (:meth:`Discovery.eviction_version`: ``policy/v1`` from Kubernetes 1.22, ``policy/v1beta1`` before); an
    answer saying that version is not served asks discovery again and, if it now says another, retries once."""
    opts = dict(delete_options or {})
    opts["preconditions"] = {**(opts.get("preconditions") or {}), "uid": uid}
    disc = discovery_for(client)
    version = await disc.eviction_version()
    try:
        await _post_eviction(client, namespace, name, version, opts)
    except ApiError as err:
        if not version_refused(err):
            raise
        fresh = await disc.eviction_version(refresh=True)
        if fresh == version:
            raise
        log.info("the Eviction version changed; retrying", pod=f"{namespace}/{name}", was=version, now=fresh)
        await _post_eviction(client, namespace, name, fresh, opts)


async def _post_eviction(client: KubeClient, namespace: str, name: str, version: str, opts: dict) -> None:
    await client.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                         body={"apiVersion": version, "kind": "Eviction",
                               "metadata": {"name": name, "namespace": namespace}, "deleteOptions": opts})


#: koordlet's evicted-pods cache (expireCache.NewCacheDefault): how long an evicted uid is remembered
EVICTED_TTL_SECONDS = 300.0
#: Kubernetes' SystemCriticalPriority: pods at or above it are the cluster's own
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
SYSTEM_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")
EVENT_SUCCESS, EVENT_FAIL = "evictPodSuccess", "evictPodFail"  # koordlet helpers.EvictPodSuccess/Fail
REPORTING_CONTROLLER = "koordfw-agent"
NOTE_LIMIT = 1024


def system_pod_reason(pod: Pod) -> str:
    """Why ``pod`` is a system pod the agent never evicts, or ``""``: QoS ``SYSTEM``, a priority of at least
    :data:`SYSTEM_CRITICAL_PRIORITY`, or a ``system-node-critical``/``system-cluster-critical`` class."""
    if pod.qos_class == QOS_SYSTEM:
        return "a SYSTEM QoS pod"
    if pod.priority >= SYSTEM_CRITICAL_PRIORITY:
        return f"a system-critical pod (priority {pod.priority})"
    pc = ((pod.raw or {}).get("spec") or {}).get("priorityClassName")
    if pc in SYSTEM_PRIORITY_CLASSES:
        return f"a system pod (priorityClassName {pc})"
    return ""


def _micro_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.frozen
class EvictionOutcome:
    eviction: Eviction
    outcome: str  # "evicted" | "refused" | "failed" | "rate-limited" | "already-evicted"
    detail: str = ""


class NodeEvictor:
    """Evicts the pods the node plugins plan (see the module docstring); ``await evictor(evictions, ns)``."""

    def __init__(self, client: KubeClient, node_name: str, *, max_per_minute: int = 10,
                 clock: Callable[[], float] = time.monotonic, evicted_ttl: float = EVICTED_TTL_SECONDS) -> None:
        if max_per_minute < 0:
            raise ValueError(f"max_per_minute: expected 0 or more, got {max_per_minute!r}")
        self.client, self.node_name = client, node_name
        self.max_per_minute = max_per_minute
        self.clock = clock
        self.evicted_ttl = evicted_ttl
        #: uid → when it was evicted
        self.evicted: dict[str, float] = {}
        self._attempts: list[float] = []
        self.history: list[EvictionOutcome] = []

    async def __call__(self, evictions: Sequence[Eviction], node_state: Any = None) -> list[EvictionOutcome]:
        from ...agent.loop import agent_metrics

        out = []
        for e in evictions:
            res = await self.evict(e)
            agent_metrics().evictions.labels(e.plugin, res.outcome).inc()
            logger = log.info if res.outcome in ("evicted", "already-evicted") else log.warning
            logger("eviction " + res.outcome, pod=e.pod, uid=e.pod_uid, plugin=e.plugin, reason=e.reason,
                   detail=res.detail, node=self.node_name)
            out.append(res)
        self.history.extend(out)
        return out

    def _rate_ok(self, now: float) -> bool:
        self._attempts = [t for t in self._attempts if now - t < 60.0]
        return len(self._attempts) < self.max_per_minute

    async def evict(self, e: Eviction) -> EvictionOutcome:
        now = self.clock()
        self.evicted = {u: t for u, t in self.evicted.items() if now - t < self.evicted_ttl}
        if e.pod_uid in self.evicted:
            return EvictionOutcome(e, "already-evicted")
        if not self._rate_ok(now):
            return EvictionOutcome(e, "rate-limited", f"{self.max_per_minute} evictions per minute")
        base = f"/api/v1/namespaces/{e.namespace}/pods/{e.name}"
        try:
            obj = await self.client.request("GET", base)
        except ApiError as err:
            return EvictionOutcome(e, "failed", "the pod is gone" if err.status == 404 else f"cannot read it: {err}")
        try:
            pod = pod_from_manifest(obj)
        except ManifestError as err:
            return EvictionOutcome(e, "refused", f"unreadable pod: {err}")
        if pod.uid != e.pod_uid:
            return EvictionOutcome(e, "refused", f"the pod is now uid {pod.uid}, not the one planned")
        if pod.node_name != self.node_name:
            return EvictionOutcome(e, "refused", f"the pod is not on this node ({pod.node_name})")
        if pod.qos_class != QOS_BE:
            return EvictionOutcome(e, "refused", f"a {pod.qos_class or 'non-BE'} pod is never evicted by the agent")
        why = system_pod_reason(pod)
        if why:
            return EvictionOutcome(e, "refused", f"{why} is never evicted by the agent")
        self._attempts.append(now)
        message = f"koordfw agent plugin {e.plugin}: {e.reason}"
        cond = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                "message": message[:NOTE_LIMIT], "lastTransitionTime": _now()}
        try:
            await self.client.request("PATCH", base + "/status", body={"status": {"conditions": [cond]}},
                                      content_type="application/strategic-merge-patch+json")
        except ApiError as err:
            log.warning("could not mark the pod before evicting it", pod=e.pod, error=str(err))
        try:
            await post_eviction(self.client, e.namespace, e.name, e.pod_uid)
        except ApiError as err:
            why = "disruption budget" if err.status == 429 else f"{err.status} {err}"
            await self._event(pod, EVENT_FAIL, f"evict Pod:{e.pod}, reason: {e.reason}, plugin: {e.plugin}, "
                                               f"error {why}")
            if err.status == 0:  # no answer: it may have gone through; do not evict it again at once
                self.evicted[e.pod_uid] = now
            return EvictionOutcome(e, "failed", why)
        self.evicted[e.pod_uid] = now
        await self._event(pod, EVENT_SUCCESS, f"evict Pod:{e.pod}, reason: {e.reason}, plugin: {e.plugin}")
        return EvictionOutcome(e, "evicted")

    async def _event(self, pod: Pod, reason: str, note: str) -> None:
        if len(note) >= NOTE_LIMIT:
            note = note[: NOTE_LIMIT - 4] + "..."
        ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
              "metadata": {"name": f"{pod.name}.{secrets.token_hex(8)}", "namespace": pod.namespace},
              "eventTime": _micro_now(), "reportingController": REPORTING_CONTROLLER,
              "reportingInstance": f"{REPORTING_CONTROLLER}-{self.node_name}"[:128],
              "action": "Evict", "reason": reason, "type": "Warning",
              "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                            "uid": pod.uid},
              "note": note}
        try:
            await self.client.request("POST", f"/apis/events.k8s.io/v1/namespaces/{pod.namespace}/events", body=ev)
        except ApiError as err:
            log.warning("could not record the eviction event", pod=pod.key, error=str(err))
