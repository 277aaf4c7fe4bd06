"""The node agent's view of the API: its own pods, and the NodeMetric it publishes.

* :class:`NodePodSource` watches the pods bound to one node (``fieldSelector=spec.nodeName=NAME``)
  and keeps them as koordfw Pods, so the agent reads QoS classes and annotations (cpuset, devices)
  from the API instead of guessing them from cgroups.
* :class:`NodeMetricPublisher` writes the node's usage as a Koordinator ``NodeMetric``
  (``slo.koordinator.sh/v1alpha1``, cluster-scoped, named like the node): ``status.updateTime``,
  ``status.nodeMetric.nodeUsage.resources`` and ``status.podsMetric[]``, which is what the
  load-aware scheduling plugin reads.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any, Callable, Iterable, Mapping

import anyio
import structlog

from ...core.errors import KoordfwError
from ...core.model import Pod, pod_from_manifest
from ...core.quantity import format_quantity
from .client import ApiError, KubeClient
from .reflector import Reflector

log = structlog.get_logger("koordfw.kube")

NODEMETRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"


class NodePodSource:
    """The non-terminal pods of one node. ``await run()`` until cancelled; ``pods()`` is the snapshot.

    ``on_change(pods)`` callbacks run after each change with the new snapshot.
    """

    def __init__(self, client: KubeClient, node_name: str, *, watch_timeout: int = 300) -> None:
        self.node_name = node_name
        self._pods: dict[str, Pod] = {}
        self.on_change: list[Callable[[list[Pod]], Any]] = []
        self.changed = anyio.Event()
        self.reflector = Reflector(
            client, "/api/v1/pods", self._handle, name=f"pods@{node_name}", watch_timeout=watch_timeout,
            field_selector=f"spec.nodeName={node_name},status.phase!=Succeeded,status.phase!=Failed")

    @property
    def synced(self) -> anyio.Event:
        return self.reflector.synced

    async def run(self) -> None:
        await self.reflector.run()

    def pods(self) -> list[Pod]:
        return list(self._pods.values())

    def pod(self, uid: str) -> Pod | None:
        return self._pods.get(uid)

    async def wait_changed(self) -> list[Pod]:
        """Wait for the next change and return the snapshot."""
        await self.changed.wait()
        self.changed = anyio.Event()
        return self.pods()

    async def _handle(self, etype: str, obj: dict, old: dict | None) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        if etype == "DELETED":
            self._pods.pop(uid, None)
        else:
            try:
                self._pods[uid] = pod_from_manifest(obj)
            except KoordfwError as e:
                log.error("ignoring a pod the model cannot read", node=self.node_name, error=str(e))
                return
        self.changed.set()
        snap = self.pods()
        for cb in self.on_change:
            r = cb(snap)
            if hasattr(r, "__await__"):
                await r


def _micro_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _resources(usage: Mapping[str, int]) -> dict[str, str]:
    return {k: format_quantity(k, int(v)) for k, v in sorted(usage.items())}


def node_metric_status(node_usage: Mapping[str, int], pods_usage: Iterable[tuple[Pod, Mapping[str, int]]], *,
                       update_time: str | None = None, system_usage: Mapping[str, int] | None = None) -> dict:
    """The NodeMetric ``status`` (canonical ints in: cpu milli, memory bytes)."""
    st: dict[str, Any] = {"updateTime": update_time or _micro_now(),
                          "nodeMetric": {"nodeUsage": {"resources": _resources(node_usage)}}}
    if system_usage is not None:
        st["nodeMetric"]["systemUsage"] = {"resources": _resources(system_usage)}
    st["podsMetric"] = [{"namespace": p.namespace, "name": p.name, "podUsage": {"resources": _resources(u)},
                         "priority": p.priority_class_with_default, "qos": p.qos_class}
                        for p, u in pods_usage]
    return st


class NodeMetricPublisher:
    """Create-or-update the node's NodeMetric. ``report_interval`` goes into ``spec.metricCollectPolicy``."""

    def __init__(self, client: KubeClient, node_name: str, *, report_interval: int = 60) -> None:
        self.client, self.node_name, self.report_interval = client, node_name, report_interval
        self.published = 0
        self.last_error = ""

    async def publish(self, node_usage: Mapping[str, int], pods_usage: Iterable[tuple[Pod, Mapping[str, int]]] = (),
                      *, system_usage: Mapping[str, int] | None = None) -> dict:
        status = node_metric_status(node_usage, list(pods_usage), system_usage=system_usage)
        path = f"{NODEMETRICS}/{self.node_name}"
        try:
            try:
                cur = await self.client.request("GET", path)
            except ApiError as e:
                if e.status != 404:
                    raise
                body = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                        "metadata": {"name": self.node_name},
                        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": self.report_interval,
                                                         "aggregateDurationSeconds": self.report_interval}}}
                cur = await self.client.request("POST", NODEMETRICS, body=body)
            # the status subresource, guarded by the object's resourceVersion
            cur["status"] = status
            out = await self.client.request("PUT", path + "/status", body=cur)
        except ApiError as e:
            self.last_error = str(e)
            raise
        self.published += 1
        self.last_error = ""
        return out

    async def run(self, sample: Callable[[], Any], *, interval: float | None = None) -> None:
        """Publish ``await sample()`` → (node_usage, pods_usage) every interval until cancelled."""
        every = float(interval if interval is not None else self.report_interval)
        while True:
            t0 = time.monotonic()
            try:
                res = sample()
                if hasattr(res, "__await__"):
                    res = await res
                node_usage, pods_usage = res
                await self.publish(node_usage, pods_usage)
            except ApiError as e:
                log.warning("could not publish NodeMetric", node=self.node_name, error=str(e))
            await anyio.sleep(max(0.0, every - (time.monotonic() - t0)))
