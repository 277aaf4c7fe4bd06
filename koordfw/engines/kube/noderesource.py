"""The node-resources controller of ``koordfw manager`` (koord-manager's ``noderesource`` controller).

For every node, on a change of the node, its pods, its NodeMetric or its Device, on a change of the
``colocation-config`` key of ``slo-controller-config``, and every ``resync_period``, it calls the plugins'
``node_resources`` hooks and writes what they return into ``Node.status.allocatable`` and
``.capacity`` through the ``nodes/{name}/status`` subresource (one JSON merge patch per node, which also
carries the node annotations and the allocatable override a plugin returns in a ``NodeResourcesResult``:
the CPU normalization ratio, the amplification ratio, the raw and the amplified allocatable). The
policy is the plugins': the batch_resource plugin returns ``kubernetes.io/batch-cpu``/``batch-memory``
(``None`` values when it resets them on degrade), the gpu_share plugin the device resources from the
node's Device; a plugin returns ``None`` when Koordinator's rule says the node needs no write
(``resourceDiffThreshold`` / ``updateTimeThresholdSeconds``, from ``last_update``: the time this
controller last wrote the node's status).

The configuration, as Koordinator's ``ColocationHandlerForConfigMapEvent``: no ConfigMap, or no
``colocation-config`` key, is Koordinator's default configuration (``colocation`` = ``{}``); a value
that is not a JSON object is logged naming the ConfigMap and the key, and the previous configuration
is kept (none yet: nothing is written until a valid one arrives). Field values are the plugins' to
check (they log the field and keep their previous configuration).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import structlog

from ...core.node_runtime import NodeResources
from ...core.quantity import format_quantity
from ...extension import COLOCATION_CONFIG_KEY, SLO_CTRL_CONFIG_MAP
from .client import ApiError
from .manager import ManagerContext

log = structlog.get_logger("koordfw.kube")


def status_patch(node: Any, resources: dict[str, int | None],
                 allocatable: dict[str, int] | None = None) -> dict[str, dict[str, str | None]] | None:
    """The merge patch of ``status`` that sets ``resources`` on both allocatable and capacity (``None``
    deletes) and ``allocatable`` (an override) on allocatable only, or None when the node already has
    exactly these values."""
    alloc: dict[str, str | None] = {}
    cap: dict[str, str | None] = {}
    for k, amount in sorted((allocatable or {}).items()):
        if node.allocatable.get(k) != amount:
            alloc[k] = format_quantity(k, amount)
    for k, v in sorted(resources.items()):
        cur_a, cur_c = node.allocatable.get(k), node.capacity.get(k)
        if v is None:
            if cur_a is not None:
                alloc[k] = None
            if cur_c is not None:
                cap[k] = None
            continue
        if cur_a != v:
            alloc[k] = format_quantity(k, v)
        if cur_c != v:
            cap[k] = format_quantity(k, v)
    if not alloc and not cap:
        return None
    out: dict[str, dict[str, str | None]] = {}
    if alloc:
        out["allocatable"] = alloc
    if cap:
        out["capacity"] = cap
    return out


def annotations_patch(node: Any, annotations: dict[str, str | None]) -> dict[str, str | None] | None:
    """The merge patch of ``metadata.annotations`` setting ``annotations`` (``None`` deletes), or None when
    the node carries them already."""
    out = {k: v for k, v in sorted(annotations.items()) if node.annotations.get(k) != v}
    return out or None


def node_patch(node: Any, res: NodeResources) -> dict[str, Any] | None:
    """One merge patch of ``nodes/{name}/status`` for a node's merged results: the status amounts and
    allocatable override, and the annotations under ``metadata`` (the Node status strategy keeps what a
    status write says of labels and annotations), so the amplified allocatable and the ratio and raw
    allocatable it was computed from land together or not at all. None when nothing differs."""
    status = status_patch(node, res.amounts or {}, res.allocatable)
    meta = annotations_patch(node, res.annotations)
    if status is None and meta is None:
        return None
    body: dict[str, Any] = {"status": status or {}}
    if meta:
        body["metadata"] = {"annotations": meta}
    return body


class NodeResourceController:
    """A manager :class:`~koordfw.engines.kube.manager.Controller` (leader only)."""

    name = "noderesource"
    leader_only = True

    def __init__(self, *, resync_period: float = 60.0) -> None:
        self.resync_period = resync_period
        #: node -> ctx.now() of this controller's last successful status write (Koordinator's NodeSyncContext)
        self.last_update: dict[str, float] = {}
        #: the last valid ColocationCfg object; None while none has been read
        self.colocation: dict[str, Any] | None = None
        self._raw: str | None = None  # the colocation-config text last applied (None: absent)
        self._slo_data: dict[str, str] | None = None  # the ConfigMap's data the last resync saw
        self.dirty: set[str] = set()
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self.reconciles = 0
        self.writes = 0
        self.unchanged = 0  # reconciles where every plugin said "no write needed"
        self.errors = 0
        self.config_errors = 0
        self.ctx: ManagerContext | None = None

    # -- events -------------------------------------------------------------------------------------
    def _mark(self, *names: str | None) -> None:
        for n in names:
            if n:
                self.dirty.add(n)
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self._wake.set()

    def resync(self) -> None:
        """Mark every node for recomputation now (what the resync period does)."""
        if self.ctx is not None:
            self._mark(*(v.name for v in self.ctx.cluster.nodes))

    def on_event(self, kind: str, etype: str, obj: dict, old: dict | None) -> None:
        meta = obj.get("metadata") or {}
        if kind == "NodeMetric":
            # EnqueueRequestForNodeMetric: an update that leaves the status alone is no reason; a deleted
            # NodeMetric forgets the node's last write, so the degraded resources are written at once
            if etype == "MODIFIED" and old is not None and old.get("status") == obj.get("status"):
                return
            if etype == "DELETED":
                self.last_update.pop(meta.get("name", ""), None)
            self._mark(meta.get("name"))
        elif kind == "NodeResourceTopology":
            # the agent's cpu-basic-info (CPU normalization reads it); zones and the rest do not matter here
            if etype != "MODIFIED" or old is None or (old.get("metadata") or {}).get("annotations") != meta.get("annotations"):
                self._mark(meta.get("name"))
        elif kind in ("Node", "Device"):
            # NodeMetric and Device objects are named like their node (cluster-scoped)
            self._mark(meta.get("name"))
        elif kind == "Pod":
            self._mark((obj.get("spec") or {}).get("nodeName"), ((old or {}).get("spec") or {}).get("nodeName"))
        elif kind == "ConfigMap" and meta.get("name") == SLO_CTRL_CONFIG_MAP and self.ctx is not None:
            # the colocation-config and the other keys plugins read (cpu-normalization-config, ...)
            changed = self._load_config(self.ctx)
            if changed or self.ctx.slo_config != self._slo_data:
                self._slo_data = None if self.ctx.slo_config is None else dict(self.ctx.slo_config)
                self.resync()

    def _load_config(self, ctx: ManagerContext) -> bool:
        """Read colocation-config from the cached ConfigMap; True when the configuration changed."""
        raw = None if ctx.slo_config is None else ctx.slo_config.get(COLOCATION_CONFIG_KEY) or None
        if raw == self._raw and self.colocation is not None:
            return False
        where = f"ConfigMap {ctx.config_namespace}/{SLO_CTRL_CONFIG_MAP}, key {COLOCATION_CONFIG_KEY}"
        if raw is None:
            cfg: dict[str, Any] = {}  # Koordinator's default ColocationCfg
        else:
            try:
                cfg = json.loads(raw)
                if not isinstance(cfg, dict):
                    raise ValueError(f"expected a JSON object, got {type(cfg).__name__}")
            except ValueError as e:
                self.config_errors += 1
                log.error("invalid colocation config; keeping the previous one", config=where, error=str(e))
                self._raw = raw
                return False
        self._raw = raw
        changed = cfg != self.colocation
        if changed:
            log.info("colocation config loaded", config=where, nodeConfigs=len(cfg.get("nodeConfigs") or []))
        self.colocation = cfg
        return changed

    # -- running ------------------------------------------------------------------------------------
    async def run(self, ctx: ManagerContext) -> None:
        self.ctx = ctx
        ctx.add_listener(self.on_event)
        self._load_config(ctx)
        self.resync()
        next_resync = anyio.current_time() + self.resync_period
        while not ctx.stopping.is_set():
            if not self.dirty:
                self._idle.set()
                self._update_status(ctx)
                with anyio.move_on_after(max(0.0, next_resync - anyio.current_time())):
                    await self._wake.wait()
                self._wake = anyio.Event()
            if anyio.current_time() >= next_resync:
                next_resync = anyio.current_time() + self.resync_period
                self.resync()
            await self.process(ctx)

    async def settled(self) -> None:
        """Wait until every node marked so far has been reconciled (for tests and benchmarks)."""
        await self._idle.wait()

    async def process(self, ctx: ManagerContext) -> None:
        """Reconcile the nodes marked dirty (each once, in name order)."""
        while self.dirty:
            batch = sorted(self.dirty)
            self.dirty.clear()
            for i, name in enumerate(batch):
                await self.reconcile(ctx, name)
                if i % 64 == 63:
                    await anyio.lowlevel.checkpoint()

    def _update_status(self, ctx: ManagerContext) -> None:
        ctx.status.setdefault(self.name, {}).update(
            reconciles=self.reconciles, writes=self.writes, unchanged=self.unchanged, errors=self.errors,
            configErrors=self.config_errors, config=self.colocation is not None)

    async def compute(self, ctx: ManagerContext, name: str) -> NodeResources | None:
        """The merged ``node_resources`` results for one node (None: no plugin asks for a write)."""
        view = ctx.cluster.node(name)
        if view is None:
            self.last_update.pop(name, None)
            return None
        res = await ctx.node_runtime.run_node_resources(view, ctx.cluster.pods_on(name), ctx.cluster.node_metric(name),
                                                        ctx.now(), self.last_update.get(name), self.colocation,
                                                        ctx.slo_config)
        self.errors += len(res.failures)
        return res if res.wants_write else None

    async def reconcile(self, ctx: ManagerContext, name: str) -> bool:
        """Recompute one node and write its status when a plugin asks; True when a patch was sent."""
        if self.colocation is None:
            return False  # Koordinator's IsCfgAvailable: nothing is done without a configuration
        self.reconciles += 1
        res = await self.compute(ctx, name)
        if res is None:
            self.unchanged += 1
            return False
        view = ctx.cluster.node(name)
        assert view is not None
        now = ctx.now()
        patch = node_patch(view.node, res)
        if patch is None:
            # Koordinator's Status().Update of an unchanged node: a no-op for the API, but a sync all the same
            if res.amounts is not None:
                self.last_update[name] = now
            return False
        ctx.check_leading(f"patching nodes/{name}/status")
        try:
            await ctx.client.request("PATCH", f"/api/v1/nodes/{name}/status", body=patch,
                                     content_type="application/merge-patch+json")
        except ApiError as e:
            self.errors += 1
            if e.status == 404:
                self.last_update.pop(name, None)
                return False
            log.warning("could not patch node status; retrying at the next resync", node=name, error=str(e))
            return False
        if res.amounts is not None:  # last_update is when the resources were last written
            self.last_update[name] = now
        self.writes += 1
        log.debug("node resources written", node=name, patch=patch)
        return True


__all__ = ["NodeResourceController", "annotations_patch", "node_patch", "status_patch"]
