"""The pod admission webhook of ``koordfw manager``: ``POST /mutate-pod`` and ``POST /validate-pod``.

Both take an ``admission.k8s.io/v1`` AdmissionReview and answer one (``response.uid`` echoed) through
:class:`koordfw.core.admission.Admission` (the ``mutate_pod`` / ``validate_pod`` hooks of the
profile's plugins), as controller-runtime's admission responses:

* mutated: ``allowed: true``, ``patchType: JSONPatch``, ``patch`` the base64 RFC 6902 patch;
  unchanged: ``allowed: true`` without a patch;
* rejected by a ``validate_pod`` plugin: ``allowed: false``, ``status`` 403 ``Forbidden`` with its reason;
* a plugin failed: ``allowed: false``, ``status`` 500 naming the plugin (Koordinator's
  ``admission.Errored``): the API server refuses the pod with that message, whatever the
  webhook's failurePolicy (which only covers a webhook it cannot call);
* until the caches of ClusterColocationProfiles, Namespaces and PriorityClasses (reflectors) have
  listed: ``allowed: false``, ``status`` 503 naming what is still listing, never an unmutated allow;
* a body that is not an AdmissionReview (bad JSON, no ``request.uid``, an unknown operation, an
  object that is not a JSON object): HTTP 400 with a message in an AdmissionReview response; a
  body over ``max_body`` bytes: HTTP 413. The server goes on serving;
* a CREATE or UPDATE of a pod without an object (null or empty): ``allowed: false``, ``status`` 400
  "there is no content to decode", as Koordinator's handlers answer (their decoder refuses it).

Requests for other resources than ``pods`` or for a subresource are allowed unchanged (Koordinator's
``shouldIgnoreIfNotPod``).

Namespaces left alone (``skip_namespaces``, ``kube-system`` in ``koordfw manager``): deploy/webhook.yaml's
``namespaceSelector`` keeps pods of namespaces labelled :data:`SKIP_LABEL` ``=`` :data:`SKIP_VALUE` (deploy/
labels its own namespace so) and, on Kubernetes 1.21+, of ``kube-system`` and ``koordfw-system`` by their
automatic ``kubernetes.io/metadata.name`` label away from the webhook. Before 1.21 no namespace carries that
label, so :class:`WebhookServer` puts :data:`SKIP_LABEL` on each skipped namespace that lacks
``kubernetes.io/metadata.name`` when it starts (one label on a namespace it does not own: the price of not
being called for kube-system's pods at all), and answers any call for a pod of one of them ``allowed``,
unpatched (``result="skipped"``), for the calls made before the label is set.

Every answer is counted in ``koordfw_webhook_requests{webhook, result}`` and timed in
``koordfw_webhook_duration_seconds{webhook}``. ``/healthz``, ``/readyz`` (caches synced) and ``/metrics``
are served on the same port.
"""

from __future__ import annotations

import base64
import functools
import json
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import attrs
import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import Counter, Histogram

from ... import metrics as _metrics
from ...core.admission import OPERATIONS, Admission, json_patch
from ...core.clock import Clock, RealClock
from ...core.errors import ManifestError
from ...core.manifests import small_milli_cpu_warning
from ...core.model import pod_from_manifest
from ...core.plugins import Registry
from ...core.quantity import QuantityError
from ...core.safeload import InputError, loads_json
from ...extension import CONFIG_GROUP_VERSION, KIND_CLUSTER_COLOCATION_PROFILE, SCHEDULING_K8S_GROUP_VERSION
from .client import ApiError, KubeClient
from .health import add_health_routes, server_tls, start_app
from .reflector import Reflector

log = structlog.get_logger("koordfw.kube")

__all__ = ["ADMISSION_REVIEW_VERSION", "WEBHOOK_KINDS", "DEFAULT_PORT", "SKIP_LABEL", "SKIP_VALUE", "ReflectorObjects",
           "Webhook", "WebhookServer", "label_skipped_namespaces"]

ADMISSION_REVIEW_VERSION = "admission.k8s.io/v1"
#: the port ``deploy/webhook.yaml``'s Service targets (controller-runtime's default webhook port)
DEFAULT_PORT = 9443
DEFAULT_MAX_BODY = 8 * 1024 * 1024
#: a namespace labelled SKIP_LABEL=SKIP_VALUE is never sent to the webhook (deploy/webhook.yaml's namespaceSelector)
SKIP_LABEL = "koordfw.io/admission-webhook"
SKIP_VALUE = "skip"
#: the label the API server puts on every namespace from Kubernetes 1.21 (NamespaceDefaultLabelName)
NAME_LABEL = "kubernetes.io/metadata.name"

#: (apiVersion, kind) -> (API path, optional: a CRD that may not be installed)
WEBHOOK_KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    (CONFIG_GROUP_VERSION, KIND_CLUSTER_COLOCATION_PROFILE): (f"/apis/{CONFIG_GROUP_VERSION}/clustercolocationprofiles",
                                                              True),
    ("v1", "Namespace"): ("/api/v1/namespaces", False),
    (SCHEDULING_K8S_GROUP_VERSION, "PriorityClass"): (f"/apis/{SCHEDULING_K8S_GROUP_VERSION}/priorityclasses", False),
}


@attrs.frozen
class WebhookMetrics:
    requests: Counter
    duration: Histogram


@functools.cache
def webhook_metrics() -> WebhookMetrics:
    """Created on first use (a collector is registered once per process)."""
    return WebhookMetrics(
        requests=Counter("koordfw_webhook_requests", "Admission webhook answers by webhook and result "
                         "(allowed, patched, rejected, error, not_synced, bad_request, skipped)", ["webhook", "result"],
                         registry=_metrics.REGISTRY),
        duration=Histogram("koordfw_webhook_duration_seconds", "Admission webhook request latency", ["webhook"],
                           buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
                           registry=_metrics.REGISTRY))


class ReflectorObjects:
    """The webhook's :class:`koordfw.core.admission.ObjectStore`: the objects its reflectors hold, by
    (apiVersion, kind), then (namespace, name). List items carry no apiVersion/kind, so the store is
    keyed by the reflector's kind, not by the object's fields."""

    def __init__(self) -> None:
        self._objs: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {k: {} for k in WEBHOOK_KINDS}
        self._sorted: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def handler(self, kind: tuple[str, str]) -> Callable[[str, dict, dict | None], Any]:
        async def handle(etype: str, obj: dict, old: dict | None) -> None:
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if etype == "DELETED":
                self._objs[kind].pop(key, None)
            else:
                self._objs[kind][key] = {"apiVersion": kind[0], "kind": kind[1], **obj}
            self._sorted.pop(kind, None)
        return handle

    def objects(self, api_version: str, kind: str) -> Sequence[Mapping[str, Any]]:
        k = (api_version, kind)
        out = self._sorted.get(k)
        if out is None:
            objs = self._objs.get(k, {})
            out = self._sorted[k] = [objs[key] for key in sorted(objs)]
        return out

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Mapping[str, Any] | None:
        return self._objs.get((api_version, kind), {}).get((namespace or "", name))


class BadReview(ValueError):
    """The body is not a usable AdmissionReview (answered HTTP 400)."""

    def __init__(self, message: str, uid: str = "") -> None:
        super().__init__(message)
        self.uid = uid


def _review(uid: str, allowed: bool, code: int, *, message: str = "", reason: str = "",
            patch: list[dict[str, Any]] | None = None, warnings: Sequence[str] = ()) -> dict[str, Any]:
    status: dict[str, Any] = {"code": code}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed, "status": status}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if warnings:
        resp["warnings"] = list(warnings)  # kubectl prints them as "Warning: ..." (Kubernetes 1.19+)
    return {"apiVersion": ADMISSION_REVIEW_VERSION, "kind": "AdmissionReview", "response": resp}


def _unit_warnings(pod: dict[str, Any]) -> list[str]:
    """The admitted pod's batch-cpu/mid-cpu amounts below 100 milli-cores, as an admission warning (allowed:
    Koordinator accepts them; a pod the model cannot read has been answered by the validators already)."""
    try:
        warning = small_milli_cpu_warning(pod_from_manifest(pod))
    except (ManifestError, QuantityError, ValueError, TypeError):
        return []
    return [warning] if warning else []


def parse_review(body: Any) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview, checked; raises :class:`BadReview` naming the field."""
    if not isinstance(body, dict):
        raise BadReview(f"expected an AdmissionReview (a JSON object), got {type(body).__name__}")
    if body.get("apiVersion") != ADMISSION_REVIEW_VERSION or body.get("kind") != "AdmissionReview":
        raise BadReview(f"expected apiVersion {ADMISSION_REVIEW_VERSION} and kind AdmissionReview, got "
                        f"{str(body.get('apiVersion'))[:60]!r} {str(body.get('kind'))[:60]!r}")
    req = body.get("request")
    if not isinstance(req, dict):
        raise BadReview("request: expected an AdmissionRequest (a JSON object)")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid: required (a non-empty string)")
    op = req.get("operation")
    if op not in OPERATIONS:
        raise BadReview(f"request.operation: expected one of {', '.join(OPERATIONS)}, got {str(op)[:40]!r}", uid)
    for field in ("object", "oldObject"):
        if req.get(field) is not None and not isinstance(req[field], dict):
            raise BadReview(f"request.{field}: expected a JSON object or null", uid)
    for field in ("resource", "namespace", "subResource"):
        v = req.get(field)
        if v is not None and not isinstance(v, dict if field == "resource" else str):
            raise BadReview(f"request.{field}: wrong type {type(v).__name__}", uid)
    return req


class Webhook:
    """The webhook's request handling over an :class:`Admission` (no reflectors: ``synced`` tells)."""

    def __init__(self, admission: Admission, *, synced: Callable[[], list[str]], max_body: int = DEFAULT_MAX_BODY,
                 skip_namespaces: Sequence[str] = ()) -> None:
        self.admission = admission
        #: pods of these namespaces are allowed unchanged, unvalidated
        self.skip_namespaces = frozenset(skip_namespaces)
        #: the caches still listing ([] once synced)
        self.unsynced = synced
        self.max_body = max_body
        self.metrics = webhook_metrics()
        self.app = web.Application(client_max_size=max_body)
        self.app.router.add_post("/mutate-pod", self._handler("mutate"))
        self.app.router.add_post("/validate-pod", self._handler("validate"))
        add_health_routes(self.app, self.health, lambda: not self.unsynced())
        self._runner: web.AppRunner | None = None
        self.port = 0

    def health(self) -> dict[str, Any]:
        return {"webhook": {"unsynced": self.unsynced()}}

    def _handler(self, which: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            t0 = time.perf_counter()
            try:
                result, status, body = await self._answer(which, request)
            except BadReview as e:
                result, status, body = "bad_request", 400, _review(e.uid, False, 400, message=f"malformed AdmissionReview: {e}")
            except Exception as e:  # a bug must answer, not drop the connection
                log.error("webhook failed", webhook=which, error=f"{type(e).__name__}: {e}", exc_info=True)
                result, status, body = "error", 500, _review("", False, 500, message=f"internal error: {e}")
            self.metrics.requests.labels(webhook=which, result=result).inc()
            self.metrics.duration.labels(webhook=which).observe(time.perf_counter() - t0)
            return web.Response(text=json.dumps(body), status=status, content_type="application/json")
        return handle

    async def _answer(self, which: str, request: web.Request) -> tuple[str, int, dict[str, Any]]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return "bad_request", 413, _review("", False, 413, message=f"request body over {self.max_body} bytes")
        except (web.RequestPayloadError, HttpProcessingError) as e:
            return "bad_request", 400, _review("", False, 400, message=f"unreadable request body: {e}")
        try:
            req = parse_review(loads_json(raw))
        except (InputError, ValueError) as e:  # InputError: bad JSON; BadReview; json's digit limit
            uid = e.uid if isinstance(e, BadReview) else ""
            return "bad_request", 400, _review(uid, False, 400, message=f"malformed AdmissionReview: {e}")
        uid = req["uid"]
        resource = req.get("resource") or {}
        if req.get("subResource") or resource.get("resource") != "pods":
            return "allowed", 200, _review(uid, True, 200)
        if req.get("namespace") in self.skip_namespaces:
            return "skipped", 200, _review(uid, True, 200)
        waiting = self.unsynced()
        if waiting:
            return "not_synced", 200, _review(uid, False, 503, message="koordfw webhook not ready: still listing "
                                              + ", ".join(waiting))
        op = req["operation"]
        if op in ("CREATE", "UPDATE") and not req.get("object"):
            # Koordinator's handlers decode the pod first: controller-runtime's decoder refuses an empty
            # object ("there is no content to decode") and the handler answers admission.Errored(400)
            return "bad_request", 200, _review(uid, False, 400, message="there is no content to decode")
        if which == "mutate":
            return await self._mutate(uid, req, op)
        return await self._validate(uid, req, op)

    async def _mutate(self, uid: str, req: dict[str, Any], op: str) -> tuple[str, int, dict[str, Any]]:
        pod = req.get("object")
        if op not in ("CREATE", "UPDATE") or pod is None:
            return "allowed", 200, _review(uid, True, 200)
        # when the pod names no namespace the request's is used, and not patched in (Koordinator's handler)
        meta = pod.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise BadReview("request.object.metadata: expected a JSON object", uid)
        filled = not (meta or {}).get("namespace") and bool(req.get("namespace"))
        original = {**pod, "metadata": {**(meta or {}), "namespace": req["namespace"]}} if filled else pod
        out = await self.admission.mutate(original, op)
        if not out.allowed:
            return "error", 200, _review(uid, False, out.code, message=out.message)
        patch = out.patch
        if filled:  # the pod's own (absent or empty) namespace back, so the patch does not set one
            mutated = dict(out.pod)
            mutated["metadata"] = {k: v for k, v in (mutated.get("metadata") or {}).items() if k != "namespace"}
            if "namespace" in (meta or {}):
                mutated["metadata"]["namespace"] = meta["namespace"]  # type: ignore[index]
            patch = json_patch(pod, mutated)
        return ("patched" if patch else "allowed"), 200, _review(uid, True, 200, patch=patch)

    async def _validate(self, uid: str, req: dict[str, Any], op: str) -> tuple[str, int, dict[str, Any]]:
        pod, old = req.get("object"), req.get("oldObject")
        if op not in ("CREATE", "UPDATE") or pod is None:
            return "allowed", 200, _review(uid, True, 200)
        if not (pod.get("metadata") or {}).get("namespace") and req.get("namespace"):
            pod = {**pod, "metadata": {**(pod.get("metadata") or {}), "namespace": req["namespace"]}}
        out = await self.admission.validate(pod, old if op == "UPDATE" else None, op)
        if out.allowed:
            return "allowed", 200, _review(uid, True, 200, warnings=_unit_warnings(pod))
        if out.code == 403:
            return "rejected", 200, _review(uid, False, 403, reason="Forbidden", message=out.message)
        return "error", 200, _review(uid, False, out.code, message=out.message)

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, ssl_context: ssl.SSLContext | None = None) -> int:
        self._runner, self.port = await start_app(self.app, host, port, ssl_context=ssl_context)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class WebhookServer:
    """The manager component (:class:`koordfw.engines.kube.manager.Controller`) serving the webhook on
    every replica: its own reflectors for the kinds the admission plugins read (:data:`WEBHOOK_KINDS`),
    the server started at once (answering 503 until they have listed)."""

    name = "webhook"
    leader_only = False

    def __init__(self, *, host: str = "0.0.0.0", port: int = DEFAULT_PORT, cert_file: str | None = None,
                 key_file: str | None = None, max_body: int = DEFAULT_MAX_BODY, seed: int = 0,
                 clock: Clock | None = None, watch_timeout: int = 300, skip_namespaces: Sequence[str] = ()) -> None:
        if bool(cert_file) != bool(key_file):
            raise ValueError("the webhook needs both a certificate and a private key file, or neither")
        self.host, self.port, self.cert_file, self.key_file = host, port, cert_file, key_file
        self.max_body, self.seed, self.clock, self.watch_timeout = max_body, seed, clock, watch_timeout
        self.skip_namespaces = tuple(skip_namespaces)
        self.webhook: Webhook | None = None
        self.reflectors: dict[tuple[str, str], Reflector] = {}
        #: set once the server listens (``bound_port`` is then the port)
        self.listening = anyio.Event()
        self.bound_port = 0

    async def run(self, ctx: Any) -> None:
        await self.serve(ctx.client, ctx.registry)

    async def serve(self, client: KubeClient, registry: Registry) -> None:
        """Serve until cancelled."""
        store = ReflectorObjects()
        self.reflectors = {
            kind: Reflector(client, path, store.handler(kind), name=kind[1], optional=optional,
                            watch_timeout=self.watch_timeout)
            for kind, (path, optional) in WEBHOOK_KINDS.items()}
        admission = Admission(registry, store, clock=self.clock or RealClock(), seed=self.seed)
        self.webhook = Webhook(admission, synced=self._unsynced, max_body=self.max_body,
                               skip_namespaces=self.skip_namespaces)
        tls = server_tls(self.cert_file, self.key_file) if self.cert_file and self.key_file else None
        self.bound_port = await self.webhook.start(self.host, self.port, ssl_context=tls)
        log.info("webhook listening", host=self.host, port=self.bound_port, tls=tls is not None)
        self.listening.set()
        try:
            async with anyio.create_task_group() as tg:
                if self.skip_namespaces:
                    tg.start_soon(label_skipped_namespaces, client, self.skip_namespaces)
                for r in self.reflectors.values():
                    tg.start_soon(r.run)
        finally:
            with anyio.CancelScope(shield=True):
                await self.webhook.stop()

    def _unsynced(self) -> list[str]:
        return [r.name for r in self.reflectors.values() if not r.synced.is_set()]


async def label_skipped_namespaces(client: KubeClient, names: Sequence[str]) -> list[str]:
    """Put :data:`SKIP_LABEL` on each namespace of ``names`` that has neither it nor the automatic
    ``kubernetes.io/metadata.name`` label (clusters before 1.21), so that deploy/webhook.yaml's selector
    keeps its pods away from the webhook. Returns the namespaces labelled; a failure (no such namespace,
    RBAC) is logged and skipped: the webhook's own skip still answers for them."""
    done = []
    for name in names:
        try:
            ns = await client.request("GET", f"/api/v1/namespaces/{name}")
            labels = (ns.get("metadata") or {}).get("labels") or {}
            if NAME_LABEL in labels or labels.get(SKIP_LABEL) == SKIP_VALUE:
                continue
            await client.request("PATCH", f"/api/v1/namespaces/{name}",
                                 body={"metadata": {"labels": {SKIP_LABEL: SKIP_VALUE}}},
                                 content_type="application/merge-patch+json")
            log.info("namespace labelled to keep its pods away from the webhook", namespace=name,
                     label=f"{SKIP_LABEL}={SKIP_VALUE}")
            done.append(name)
        except ApiError as e:
            log.warning("could not label a namespace the webhook skips; its pods are still sent to the webhook "
                        "(which lets them through unchanged)", namespace=name, error=str(e))
    return done
