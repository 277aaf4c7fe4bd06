"""The node agent on a cluster: its pods and Node from the API, and what it reports and follows.

* :class:`NodePodSource` watches the pods bound to one node (``fieldSelector=spec.nodeName=NAME``) and
  keeps them as koordfw Pods; :class:`ClusterPodSource` adds the Node object (the agent's pod source).
* :class:`NodeMetricPublisher` writes the node's ``NodeMetric`` status (``slo.koordinator.sh/v1alpha1``,
  cluster-scoped, named like the node), creating the object when no controller has (there is no
  Koordinator slo-controller to do it), with koordlet's default collect policy.
* :class:`NodeOnCluster` runs it all around a :class:`koordfw.agent.loop.Agent`: it follows the node's
  ``NodeSLO`` (the QoS plugins are reconfigured live, :mod:`koordfw.agent.nodeslo`) and its NodeMetric's
  ``spec.metricCollectPolicy``, samples every round into the local time series, publishes the NodeMetric
  every ``reportIntervalSeconds``, and keeps the ``NodeResourceTopology`` (:mod:`koordfw.agent.topology`)
  and the ``Device`` (:mod:`koordfw.agent.nvml`) up to date, each written only when it changed; the
  node plugins' evictions go through the Eviction API (:mod:`koordfw.engines.kube.evictor`).
  Every wait is on the agent's clock, so a VirtualClock drives the whole node in tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import structlog

from ...core.errors import KoordfwError
from ...core.model import Node, Pod, pod_from_manifest
from ...extension import SCHEDULING_GROUP_VERSION, SLO_GROUP_VERSION, TOPOLOGY_GROUP_VERSION
from .client import ApiError, KubeClient
from .reflector import Reflector

log = structlog.get_logger("koordfw.kube")

NODEMETRICS = f"/apis/{SLO_GROUP_VERSION}/nodemetrics"
NODESLOS = f"/apis/{SLO_GROUP_VERSION}/nodeslos"
DEVICES = f"/apis/{SCHEDULING_GROUP_VERSION}/devices"
NODERESOURCETOPOLOGIES = f"/apis/{TOPOLOGY_GROUP_VERSION}/noderesourcetopologies"
#: client-go's retry.DefaultBackoff: at most this many tries on a 409 Conflict
CONFLICT_RETRIES = 5


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




def default_node_metric_spec(report_interval: int) -> dict[str, Any]:
    """The spec a NodeMetric the agent creates gets: the slo-controller's defaults (aggregate 300 s,
    durations 5m/10m/30m, usageWithoutPageCache) with ``report_interval``."""
    return {"metricCollectPolicy": {"aggregateDurationSeconds": 300, "reportIntervalSeconds": report_interval,
                                    "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
                                    "nodeMemoryCollectPolicy": "usageWithoutPageCache"}}


class NodeMetricPublisher:
    """Create-or-update the node's NodeMetric status (``PUT .../status`` guarded by resourceVersion)."""

    def __init__(self, client: KubeClient, node_name: str, *, report_interval: int = 60) -> None:
        self.client, self.node_name, self.report_interval = client, node_name, report_interval
        self.published = 0
        self.last_error = ""

    async def get_or_create(self) -> dict:
        path = f"{NODEMETRICS}/{self.node_name}"
        try:
            return await self.client.request("GET", path)
        except ApiError as e:
            if e.status != 404:
                raise
        body = {"apiVersion": SLO_GROUP_VERSION, "kind": "NodeMetric", "metadata": {"name": self.node_name},
                "spec": default_node_metric_spec(self.report_interval)}
        try:
            return await self.client.request("POST", NODEMETRICS, body=body)
        except ApiError as e:
            if e.status != 409:  # someone else created it meanwhile
                raise
            return await self.client.request("GET", path)

    async def publish(self, status: Mapping[str, Any]) -> dict:
        """Write ``status`` (see :meth:`koordfw.agent.nodemetric.NodeMetricReporter.status`)."""
        path = f"{NODEMETRICS}/{self.node_name}/status"
        try:
            for attempt in range(CONFLICT_RETRIES):
                cur = await self.get_or_create()
                cur["status"] = dict(status)
                try:
                    out = await self.client.request("PUT", path, body=cur)
                    break
                except ApiError as e:
                    if e.status != 409 or attempt == CONFLICT_RETRIES - 1:
                        raise
        except ApiError as e:
            self.last_error = str(e)
            raise
        self.published += 1
        self.last_error = ""
        return out


async def _create_or_update(client: KubeClient, collection: str, name: str, build: Callable[[dict | None], dict | None],
                            ) -> tuple[str, dict | None]:
    """GET ``name``; ``build(current or None)`` gives the object to write (None: unchanged). POST when absent,
    else PUT with the current resourceVersion, retried on 409 as RetryOnConflict. Returns (outcome, object)."""
    for attempt in range(CONFLICT_RETRIES):
        try:
            cur: dict | None = await client.request("GET", f"{collection}/{name}")
        except ApiError as e:
            if e.status != 404:
                raise
            cur = None
        new = build(cur)
        if new is None:
            return "unchanged", cur
        try:
            if cur is None:
                return "created", await client.request("POST", collection, body=new)
            new.setdefault("metadata", {})["resourceVersion"] = cur["metadata"]["resourceVersion"]
            return "updated", await client.request("PUT", f"{collection}/{name}", body=new)
        except ApiError as e:
            if e.status != 409 or attempt == CONFLICT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


class NodeOnCluster:
    """One node agent's cluster side (see the module docstring). ``await run()`` until cancelled."""

    def __init__(self, agent: Any, client: KubeClient, *, publish_interval: float | None = 60.0,
                 topology_interval: float | None = 30.0, device_interval: float | None = 60.0,
                 nvml: Any = None, kubelet_config: str | None = None, kubelet_root: str | None = None,
                 resctrl_root: str = "/sys/fs/resctrl", watch_timeout: int = 300) -> None:
        from ...agent.nodemetric import NodeMetricReporter
        from ...agent.topology import read_kubelet_config

        self.agent, self.client = agent, client
        self.name: str = agent.node_name
        self.clock = agent.clock
        self.publish_interval = publish_interval
        self.topology_interval = topology_interval
        self.device_interval = device_interval
        self.kubelet = read_kubelet_config(kubelet_config)
        if self.kubelet.policy:  # the node plugins see the CPU manager policy as the NRT reports it
            from ...agent.topology import kubelet_policy_annotation, read_processors

            agent.extra_annotations = kubelet_policy_annotation(self.kubelet, read_processors(agent.sys_root))
        self.kubelet_root = kubelet_root
        self.resctrl_root = resctrl_root
        self.src = ClusterPodSource(client, self.name, watch_timeout=watch_timeout)
        agent.pod_source = self.src
        from .evictor import NodeEvictor  # the node plugins' evictions go through the Eviction API

        self.evictor = NodeEvictor(client, self.name, clock=self.clock.now)
        if not getattr(agent.executor, "dry_run", False):  # --dry-run: the agent's default evictor only logs
            agent.evictor = self.evictor
        self.publisher = NodeMetricPublisher(client, self.name, report_interval=int(publish_interval or 60))
        self.reporter = NodeMetricReporter(sample_interval=agent.interval)
        agent.on_collect.append(lambda ns: self.reporter.observe(ns, self.clock.now()))
        #: the --config pluginConfig: what a NodeSLO is applied over, and what is back when it goes
        self.local_config: dict[str, Any] = dict(agent.registry.profile.plugin_config)
        self.slo: dict | None = None
        self.slo_applied = 0
        self.slo_errors: list[str] = []
        #: set (and replaced) each time a NodeSLO event was handled, applied or refused
        self.slo_event = anyio.Event()
        self.host_app_specs: dict[str, dict[str, Any]] = {}
        self.metric_spec_changes = 0
        self.nvml = nvml
        self.device_reporter: Any = None
        self.device_outcome = ""
        self._no_gpu = ""
        self.topology_outcome = ""
        self.metric_event = anyio.Event()
        self._slo_reflector = Reflector(client, NODESLOS, self._on_nodeslo, name=f"nodeslo@{self.name}",
                                        field_selector=f"metadata.name={self.name}", optional=True,
                                        watch_timeout=watch_timeout)
        self._metric_reflector = Reflector(client, NODEMETRICS, self._on_nodemetric, name=f"nodemetric@{self.name}",
                                           field_selector=f"metadata.name={self.name}", optional=True,
                                           watch_timeout=watch_timeout)

    # -- NodeSLO ----------------------------------------------------------------------------------
    def apply_nodeslo(self, obj: dict | None) -> bool:
        """Reconfigure the agent's plugins from ``obj`` (None: the NodeSLO is gone: back to ``--config``).
        A malformed NodeSLO is logged naming the field and changes nothing; returns whether it applied."""
        from ...agent.nodeslo import NodeSLOError, apply_nodeslo, host_apps_from_nodeslo

        lay = self.agent.layout
        try:
            if obj is not None:
                apps, specs = host_apps_from_nodeslo(obj, cgroup_version=lay.version, cgroup_driver=lay.driver,
                                                     kubepods=lay.kubepods)
            else:
                apps, specs = (), {}
            config = apply_nodeslo(self.agent.registry, self.local_config, obj)
        except NodeSLOError as e:
            self.slo_errors.append(str(e))
            log.error("NodeSLO not applied; the previous config stays", node=self.name, error=str(e))
            return False
        self.slo = obj
        self.agent.host_apps = tuple(apps)
        self.host_app_specs = specs
        self.slo_applied += 1
        log.info("QoS config from NodeSLO" if obj is not None else "NodeSLO gone: QoS config from --config",
                 node=self.name, pluginConfig=config)
        return True

    async def _on_nodeslo(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype == "MODIFIED" and old is not None and old.get("spec") == obj.get("spec"):
            return  # koordlet ignores updates that leave the spec as it was
        try:
            self.apply_nodeslo(None if etype == "DELETED" else obj)
        except Exception as e:  # noqa: BLE001 - a NodeSLO must never stop the watch; the previous config stays
            self.slo_errors.append(f"{type(e).__name__}: {e}")
            log.exception("NodeSLO not applied; the previous config stays", node=self.name)
        ev, self.slo_event = self.slo_event, anyio.Event()
        ev.set()

    # -- NodeMetric ---------------------------------------------------------------------------------
    async def _on_nodemetric(self, etype: str, obj: dict, old: dict | None) -> None:
        from ...agent.nodemetric import collect_policy

        if etype == "DELETED" or (old is not None and old.get("spec") == obj.get("spec")):
            return
        try:
            policy = collect_policy(obj)
        except KoordfwError as e:
            log.error("NodeMetric collect policy not applied; the previous one stays", node=self.name, error=str(e))
            return
        if policy != self.reporter.policy:
            self.reporter.set_policy(policy)
            self.metric_spec_changes += 1

    def metric_status(self) -> dict[str, Any]:
        """The NodeMetric status now, from the local time series."""
        pods = [p for p in self.src.source.pods()]
        return self.reporter.status(self.clock.now(), pods, self.agent.host_apps, self.host_app_specs)

    async def publish_metric(self) -> None:
        await self.publisher.publish(self.metric_status())
        ev, self.metric_event = self.metric_event, anyio.Event()
        ev.set()

    # -- NodeResourceTopology -----------------------------------------------------------------------
    def topology_report(self) -> tuple[dict[str, str], list[dict], str]:
        from ...agent.topology import cpu_basic_info, numa_memory, read_processors, topology_annotations, topology_policy, zones

        a = self.agent
        procs = read_processors(a.sys_root)
        anns = topology_annotations(procs, self.src.node, self.src.source.pods(), kubelet=self.kubelet,
                                    basic_info=cpu_basic_info(a.proc_root, a.sys_root, self.resctrl_root),
                                    kubelet_root=self.kubelet_root)
        return anns, zones(procs, numa_memory(a.sys_root)), topology_policy(self.kubelet)

    async def report_topology(self) -> str:
        from ...agent.topology import node_resource_topology, nrt_changed, updated_nrt

        anns, zone_list, policy = self.topology_report()
        uid = self.src.node.uid if self.src.node is not None else ""

        def build(cur: dict | None) -> dict | None:
            if cur is None:
                return node_resource_topology(self.name, uid, anns, zone_list, policy)
            if not nrt_changed(cur, anns, zone_list, policy):
                return None
            return updated_nrt(cur, anns, zone_list, policy)

        self.topology_outcome, _ = await _create_or_update(self.client, NODERESOURCETOPOLOGIES, self.name, build)
        return self.topology_outcome

    # -- Device -------------------------------------------------------------------------------------
    def _devices(self) -> Any:
        from ...agent.nvml import DeviceReporter, NoGpu, load_pynvml

        if self.device_reporter is None:
            nvml = self.nvml
            if nvml is None:
                try:
                    nvml = load_pynvml()
                except NoGpu as e:
                    log.info("no Device reported", node=self.name, reason=str(e))
                    self.device_interval = None
                    return None
            self.device_reporter = DeviceReporter(nvml, sys_root=self.agent.sys_root)
        return self.device_reporter

    async def report_device(self) -> str:
        from ...agent.nodemetric import rfc3339
        from ...agent.nvml import NoGpu, carry_transition_times, device_changed

        rep = self._devices()
        if rep is None:
            return "off"
        uid = self.src.node.uid if self.src.node is not None else ""
        try:
            dev = rep.device(self.name, uid, now=rfc3339(self.clock.now()))
        except NoGpu as e:
            if str(e) != self._no_gpu:  # every interval would say it again
                log.info("no Device reported", node=self.name, reason=str(e))
                self._no_gpu = str(e)
            self.device_outcome = "no-gpu"
            return self.device_outcome
        self._no_gpu = ""

        def build(cur: dict | None) -> dict | None:
            new = carry_transition_times(cur, dict(dev))
            if cur is None:
                return new
            if not device_changed(cur, new):
                return None
            out = dict(cur)
            out["spec"] = {**(cur.get("spec") or {}), "devices": new["spec"]["devices"]}
            meta = dict(cur.get("metadata") or {})
            meta["labels"] = new["metadata"].get("labels") or {}
            meta.pop("annotations", None)  # koordlet replaces the annotations with its own (none for GPUs)
            out["metadata"] = meta
            return out

        self.device_outcome, _ = await _create_or_update(self.client, DEVICES, self.name, build)
        return self.device_outcome

    # -- running ------------------------------------------------------------------------------------
    async def _every(self, interval: Callable[[], float | None], fn: Callable[[], Awaitable[Any]], what: str,
                     *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """``await fn()`` every ``interval()`` seconds on the agent's clock (the first after one interval,
        as koordlet's workers), until cancelled or ``interval()`` is None. The first interval is counted
        from when the task is started (``tg.start``), not from when the event loop first runs it."""
        every = interval()
        deadline = self.clock.now() + every if every else 0.0
        task_status.started()
        while True:
            if not every:
                return
            await self.clock.sleep(max(0.0, deadline - self.clock.now()))
            try:
                await fn()
            except ApiError as e:
                log.warning(f"could not report the {what}", node=self.name, error=str(e))
            except (KoordfwError, OSError, ValueError) as e:
                log.error(f"could not build the {what}", node=self.name, error=str(e))
            every = interval()
            deadline = self.clock.now() + every if every else 0.0

    async def run(self, *, once: bool = False, handle_signals: bool = True) -> None:
        """Watch, then run the agent; with ``once`` one round, then every report once."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.src.run)
            tg.start_soon(self._slo_reflector.run)
            tg.start_soon(self._metric_reflector.run)
            await self.src.wait_synced()
            await self._slo_reflector.synced.wait()
            await self._metric_reflector.synced.wait()
            if not once:
                if self.publish_interval:
                    await tg.start(self._every, lambda: self.reporter.policy.report_seconds, self.publish_metric,
                                   "NodeMetric")
                await tg.start(self._every, lambda: self.topology_interval, self.report_topology,
                               "NodeResourceTopology")
                await tg.start(self._every, lambda: self.device_interval, self.report_device, "Device")
                if self.topology_interval:  # at start too: the scheduler needs the topology before pods come
                    tg.start_soon(self._first, self.report_topology, "NodeResourceTopology")
                if self.device_interval:
                    tg.start_soon(self._first, self.report_device, "Device")
            await self.agent.run(once=once, handle_signals=handle_signals)
            if once:
                if self.publish_interval:
                    await self.publish_metric()
                if self.topology_interval:
                    await self.report_topology()
                if self.device_interval:
                    await self.report_device()
            tg.cancel_scope.cancel()

    async def _first(self, fn: Callable[[], Awaitable[Any]], what: str) -> None:
        try:
            await fn()
        except ApiError as e:
            log.warning(f"could not report the {what}", node=self.name, error=str(e))
        except (KoordfwError, OSError, ValueError) as e:
            log.error(f"could not build the {what}", node=self.name, error=str(e))


async def run_agent_on_cluster(agent: Any, client: KubeClient, *, publish_interval: float | None = 60.0,
                               once: bool = False, **options: Any) -> NodeOnCluster:
    """Run a node agent (``koordfw.agent.loop.Agent``) on a cluster (:class:`NodeOnCluster`; ``options``
    are its keyword arguments). Returns it after ``once``'s round (else runs until cancelled)."""
    node = NodeOnCluster(agent, client, publish_interval=publish_interval, **options)
    await node.run(once=once)
    return node
