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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio
import structlog

from ...core.errors import KoordfwError
from ...core.model import Node, Pod, pod_from_manifest
from ...core.quantity import format_quantity
from ...extension import SLO_GROUP_VERSION
from .client import ApiError, KubeClient
from .reflector import Reflector

log = structlog.get_logger("koordfw.kube")

NODEMETRICS = f"/apis/{SLO_GROUP_VERSION}/nodemetrics"


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
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
                body = {"apiVersion": SLO_GROUP_VERSION, "kind": "NodeMetric",
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


class ClusterPodSource:
    """The agent's pod-metadata source (``refresh(node_name)``, ``pods`` by uid, ``node``) backed by
    the API: a watch on the node's pods and on its Node object, instead of manifests on disk."""

    def __init__(self, client: KubeClient, node_name: str, *, watch_timeout: int = 300) -> None:
        self.source = NodePodSource(client, node_name, watch_timeout=watch_timeout)
        self.node: Node | None = None
        self._node_reflector = Reflector(client, "/api/v1/nodes", self._on_node, name=f"node@{node_name}",
                                         field_selector=f"metadata.name={node_name}", watch_timeout=watch_timeout)

    @property
    def pods(self) -> dict[str, Pod]:
        return {p.uid: p for p in self.source.pods()}

    def refresh(self, node_name: str) -> None:
        """Nothing to do: the watches keep the pods and the node current."""

    async def _on_node(self, etype: str, obj: dict, old: dict | None) -> None:
        from ...core.model import node_from_manifest

        if etype == "DELETED":
            self.node = None
            return
        try:
            self.node = node_from_manifest(obj)
        except KoordfwError as e:
            log.error("ignoring a node the model cannot read", error=str(e))

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.source.run)
            tg.start_soon(self._node_reflector.run)

    async def wait_synced(self) -> None:
        await self.source.synced.wait()
        await self._node_reflector.synced.wait()


async def run_agent_on_cluster(agent: Any, client: KubeClient, *, publish_interval: float | None = 60.0,
                               once: bool = False) -> None:
    """Run a node agent (``koordfw.agent.loop.Agent``) with pod metadata from the API and, every
    ``publish_interval`` seconds (None: never), its node state published as the node's NodeMetric."""
    src = ClusterPodSource(client, agent.node_name)
    agent.pod_source = src
    publisher = NodeMetricPublisher(client, agent.node_name, report_interval=int(publish_interval or 60))

    def sample() -> tuple[dict, list]:
        ns = agent.node_state
        if ns is None:
            raise ApiError(0, "no node state collected yet")
        return dict(ns.usage), [(p.pod, dict(p.usage)) for p in ns.pods if p.pod is not None]

    async with anyio.create_task_group() as tg:
        tg.start_soon(src.run)
        await src.wait_synced()
        if publish_interval and not once:
            tg.start_soon(publisher.run, sample)
        await agent.run(once=once)
        if once and publish_interval:
            await publisher.publish(*sample())
        tg.cancel_scope.cancel()
