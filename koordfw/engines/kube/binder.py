"""Binding a pod through ``pods/{name}/binding`` and reconciling the server's 409s.

* The Binding carries the pod's UID, which kube-apiserver checks as a precondition (releases that keep
  a subresource create's ``metadata.uid``, ``PreserveRequestObjectMetaSystemFieldsOnSubresourceCreate``).
  v1.20 drops it, and binds whatever pod has the name now: a pod deleted and recreated under the same
  name during its binding cycle would get the binding (node, annotations) decided for its predecessor.
  So the engine also passes ``alive(pod)`` (its cache still holds that uid), checked before every
  attempt: a pod the watch has reported deleted is dropped, never bound; on old servers only the
  watch's latency remains as a window.
* Annotations that pre_bind plugins wrote travel in the Binding's ``metadata.annotations``: the API
  server copies them onto the pod in the same write that sets ``spec.nodeName`` (BindingREST's
  ``setPodNodeAndMetadata``), so no reader ever sees the pod bound without them or annotated but not
  bound, and a failed binding leaves no annotations behind.
* Transport errors, 429 and 5xx are retried a few times with backoff; a retry after a lost reply
  comes back as a 409 and is reconciled like any other 409.
* A 409 is reconciled by reading the pod: already on our node → done; bound elsewhere, recreated
  (UID changed) or terminating → ``BindDropped`` (release the reservation, drop the pod); still
  gated → ``BindGated``; anything else → an ordinary failure, retried by the queue.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import structlog

from ...core.model import Pod
from .client import ApiError, KubeClient

log = structlog.get_logger("koordfw.kube")


class BindDropped(Exception):
    """The pod must be dropped from the queue (deleted, recreated, terminating, bound elsewhere)."""


class BindGated(Exception):
    """The pod has scheduling gates again; it waits until they are removed."""


class KubeBinder:
    def __init__(self, client: KubeClient, *, attempts: int = 4, backoff: float = 0.2,
                 check: Callable[[str], None] | None = None, alive: Callable[[Pod], bool] | None = None) -> None:
        """``check(what)`` runs before every request that writes (each attempt of a binding) and raises
        to refuse it (the engine's leadership check raises NotLeading). ``alive(pod)``, asked before every
        attempt too, says whether the pod (that uid) still exists as far as the caller knows; False drops
        the binding (``BindDropped``)."""
        self.client, self.attempts, self.backoff = client, attempts, backoff
        self.check = check
        self.alive = alive
        #: bindings dropped because ``alive`` said the pod was gone
        self.dropped_gone = 0
        self.bound = 0
        self.conflicts_resolved = 0
        self.retries = 0

    async def __call__(self, pod: Pod, node_name: str, annotations: dict) -> bool:
        base = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        meta: dict = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        if annotations:
            meta["annotations"] = {str(k): str(v) for k, v in annotations.items()}
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
        await self._retrying(lambda: self.client.request("POST", base + "/binding", body=body), pod, node_name)
        self.bound += 1
        return True

    async def _retrying(self, call: Callable[[], Awaitable[object]], pod: Pod, node_name: str) -> None:
        delay = self.backoff
        for attempt in range(self.attempts):
            if self.check is not None:
                self.check(f"binding {pod.key}")
            if self.alive is not None and not self.alive(pod):
                self.dropped_gone += 1
                raise BindDropped(f"pod {pod.key} (uid {pod.uid}) was deleted during its binding cycle")
            try:
                await call()
                return
            except ApiError as e:
                if e.status == 404:
                    raise BindDropped(f"pod {pod.key} no longer exists") from None
                if e.status == 409:
                    await self._reconcile(pod, node_name, e)
                    return
                if not e.retryable or attempt == self.attempts - 1:
                    raise
                self.retries += 1
                log.info("retrying a binding request", pod=pod.key, error=str(e))
                await anyio.sleep(delay)
                delay *= 2

    async def _reconcile(self, pod: Pod, node_name: str, err: ApiError) -> None:
        try:
            cur = await self.client.request("GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
        except ApiError as e:
            if e.status == 404:
                raise BindDropped(f"pod {pod.key} no longer exists") from None
            raise ApiError(err.status, f"binding conflict ({err.message}); reading the pod failed: {e}") from None
        meta, spec = cur.get("metadata") or {}, cur.get("spec") or {}
        if meta.get("uid") != pod.uid:
            raise BindDropped(f"pod {pod.key} was recreated (uid {meta.get('uid')})")
        bound_to = spec.get("nodeName")
        if bound_to == node_name:
            self.conflicts_resolved += 1
            return  # an earlier attempt went through and its reply was lost
        if bound_to:
            raise BindDropped(f"pod {pod.key} is already bound to {bound_to}")
        if meta.get("deletionTimestamp"):
            raise BindDropped(f"pod {pod.key} is being deleted")
        if spec.get("schedulingGates"):
            raise BindGated(f"pod {pod.key} has scheduling gates")
        raise err
