"""``koordfw manager``: koord-manager's controllers on a live cluster, without Koordinator installed.

One process keeps shared caches of the cluster (reflectors: nodes, non-terminal pods, NodeMetrics,
Devices, and the ``slo-controller-config`` ConfigMap of the config namespace) and runs a list of
components over them:

* a :class:`Controller` with ``leader_only = True`` (the node-resources controller, the NodeSLO
  controller) starts once the caches are synced **and** this replica leads (``--leader-elect``), and
  is cancelled when the manager stops; when leadership is lost the process stops (exit 1), as
  koord-manager does;
* a component with ``leader_only = False`` (the pod admission webhook server) starts at once, before
  the shared caches have synced, on every replica (it must not wait on caches it does not read: a
  webhook port closed meanwhile lets pods be admitted unmutated).

Writing a component (the NodeSLO controller in ``nodeslo.py``, the webhook server in ``webhook.py``)::

    class MyController:
        name = "myctl"          # shown in /healthz under "controllers"
        leader_only = True

        async def run(self, ctx: ManagerContext) -> None:
            ctx.add_listener(self.on_event)        # (kind, type, obj, old) for every cache change
            while True:
                ...                                 # read ctx.cluster / ctx.slo_config, write via ctx.client
                ctx.check_leading("writing X")      # before every write: raises NotLeading once lost

``run`` returns or is cancelled when the manager stops; an exception in it is logged and stops the
manager (exit 1). Pass the components to :class:`KubeManager` (``controllers=[...]``); the
``koordfw manager`` command builds the list (:func:`koordfw.commands.manager.build_controllers`).

What a component gets in :class:`ManagerContext`: the API client, the plugin registry and its hook
caller (``ctx.caller``: the engine's handles; ``ctx.node_runtime`` runs the points outside the scheduling
cycle over it, ``node_resources`` among them), the cluster cache
(``ctx.cluster``: a :class:`koordfw.core.cluster.ClusterState` with nodes, pods accounted on their
nodes, and the ``NodeMetric``/``Device`` objects by name), the raw cached objects by reflector
(``ctx.reflectors[kind].store``), the ConfigMap's ``data`` (``ctx.slo_config``), the injected wall clock
(``ctx.now()``), the leadership check and the stop event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import anyio
import structlog

from ...core.cluster import ClusterState
from ...core.node_runtime import NodeRuntime
from ...core.plugins import Registry
from ...extension import (
    CONFIG_NAMESPACE,
    SCHEDULING_GROUP_VERSION,
    SLO_CTRL_CONFIG_MAP,
    SLO_GROUP_VERSION,
    TOPOLOGY_GROUP_VERSION,
)
from .client import KubeClient
from .engine import NotLeading, build_cache
from .health import DEFAULT_UNHEALTHY_AFTER, api_health, unhealthy_reason
from .leader import LeaderElector
from .reflector import Reflector

log = structlog.get_logger("koordfw.kube")

#: (kind, event type ADDED/MODIFIED/DELETED, object, previous object or None)
Listener = Callable[[str, str, dict, "dict | None"], None]

#: the optional kinds the manager caches: kind -> API path (a missing CRD is skipped quietly)
MANAGER_OBJECTS = {
    "NodeMetric": f"/apis/{SLO_GROUP_VERSION}/nodemetrics",
    "Device": f"/apis/{SCHEDULING_GROUP_VERSION}/devices",
    # the agent's cpu-basic-info annotation, which CPU normalization reads
    "NodeResourceTopology": f"/apis/{TOPOLOGY_GROUP_VERSION}/noderesourcetopologies",
}


@runtime_checkable
class Controller(Protocol):
    """A component the manager runs (see the module docstring)."""

    name: str
    #: True: runs only while this replica leads; False: runs on every replica once caches sync
    leader_only: bool

    async def run(self, ctx: ManagerContext) -> None: ...


class ManagerContext:
    """What every component of one manager shares (caches, client, registry, clock, leadership)."""

    def __init__(self, *, client: KubeClient, registry: Registry, cluster: ClusterState, caller: Any,
                 reflectors: dict[str, Reflector], config_namespace: str, clock: Callable[[], float],
                 elector: LeaderElector | None) -> None:
        self.client = client
        self.registry = registry
        self.cluster = cluster
        #: the engine's :class:`koordfw.core.caller.HookCaller` (one handle per plugin)
        self.caller = caller
        #: the hook points outside the scheduling cycle (``node_resources``) run over ``caller``
        self.node_runtime = NodeRuntime(caller)
        #: kind ("Node", "Pod", "NodeMetric", "Device", "ConfigMap") -> its reflector (``.store``: raw objects)
        self.reflectors = reflectors
        self.config_namespace = config_namespace
        #: the ``data`` of ``slo-controller-config`` in the config namespace; None while it does not exist
        self.slo_config: dict[str, str] | None = None
        self._clock = clock
        self.elector = elector
        self.listeners: list[Listener] = []
        #: per component: what it reports under /healthz "controllers"
        self.status: dict[str, dict[str, Any]] = {}
        self.stopping = anyio.Event()
        self.leading = anyio.Event()

    def now(self) -> float:
        """The wall clock (seconds since the epoch), injectable for tests."""
        return self._clock()

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(kind, type, obj, old)`` after every change of a cached object (synchronously, in the
        reflector's task: keep it cheap, e.g. mark a key dirty and set an event)."""
        self.listeners.append(fn)

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def check_leading(self, what: str) -> None:
        """Raise :class:`NotLeading` unless this replica leads (call before every API write)."""
        if not self.is_leader():
            raise NotLeading(f"not the leader any more: not {what}")

    def notify(self, kind: str, etype: str, obj: dict, old: dict | None) -> None:
        for fn in list(self.listeners):
            try:
                fn(kind, etype, obj, old)
            except Exception as e:  # one broken listener must not stop the reflector
                log.error("listener failed", kind=kind, error=f"{type(e).__name__}: {e}", exc_info=True)


class KubeManager:
    """Run with ``await manager.run()``; ``manager.stop()`` asks for a graceful stop."""

    def __init__(self, registry: Registry, client: KubeClient, *, controllers: list[Controller],
                 config_namespace: str = CONFIG_NAMESPACE, leader_elector: LeaderElector | None = None,
                 clock: Callable[[], float] = time.time, watch_timeout: int = 300,
                 unhealthy_after: float = DEFAULT_UNHEALTHY_AFTER) -> None:
        self.client = client
        self.unhealthy_after = unhealthy_after
        self._run_started: float | None = None
        self.controllers = list(controllers)
        self.elector = leader_elector
        # the kernel's cache without a queue (scheduler_name None): nodes, assigned pods, objects
        self.scheduler, self.feeder, refl = build_cache(registry, client, scheduler_name=None,
                                                        objects=MANAGER_OBJECTS, watch_timeout=watch_timeout)
        self.cluster = self.scheduler.cluster
        kinds = ["Node", "Pod", *MANAGER_OBJECTS]
        self.reflectors: dict[str, Reflector] = dict(zip(kinds, refl, strict=True))
        self.ctx = ManagerContext(client=client, registry=registry, cluster=self.cluster,
                                  caller=self.scheduler.caller, reflectors=self.reflectors,
                                  config_namespace=config_namespace, clock=clock, elector=leader_elector)
        for kind, r in self.reflectors.items():
            r.handler = self._notifying(kind, r.handler)
        self.reflectors["ConfigMap"] = Reflector(
            client, f"/api/v1/namespaces/{config_namespace}/configmaps", self._on_config_map,
            field_selector=f"metadata.name={SLO_CTRL_CONFIG_MAP}", name="ConfigMap", watch_timeout=watch_timeout)
        self.started = anyio.Event()  # caches synced and (if electing) leading
        self.stopped_reason = ""
        self._stop = anyio.Event()
        self.ctx.stopping = self._stop

    def _notifying(self, kind: str, handler: Callable) -> Callable:
        async def handle(etype: str, obj: dict, old: dict | None) -> None:
            await handler(etype, obj, old)
            self.ctx.notify(kind, etype, obj, old)
        return handle

    async def _on_config_map(self, etype: str, obj: dict, old: dict | None) -> None:
        if etype == "DELETED":
            self.ctx.slo_config = None
        else:
            data = obj.get("data")
            self.ctx.slo_config = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
        self.ctx.notify("ConfigMap", etype, obj, old)

    # -- running ------------------------------------------------------------------------------------
    def stop(self, reason: str = "stop requested") -> None:
        self.stopped_reason = self.stopped_reason or reason
        self._stop.set()

    async def wait_synced(self) -> None:
        for r in self.reflectors.values():
            await r.synced.wait()

    async def run(self) -> None:
        """Run until ``stop()`` (or lost leadership, or a component failing)."""
        self._run_started = self.client.clock()
        await self.scheduler.startup()
        try:
            async with anyio.create_task_group() as tg:
                for r in self.reflectors.values():
                    tg.start_soon(r.run)
                tg.start_soon(self._cancel_on_stop, tg.cancel_scope)
                # the others (the webhook) start at once: a closed port while the shared caches list
                # would let the API server admit pods unmutated (failurePolicy Ignore); the webhook has
                # its own caches and answers an error until they have synced
                for c in self.controllers:
                    if not c.leader_only:
                        tg.start_soon(self._run_component, c)
                await self.wait_synced()
                log.info("manager caches synced", nodes=self.cluster.num_nodes,
                         config=self.ctx.slo_config is not None)
                if self.elector is not None:
                    await self.elector.acquire()
                    tg.start_soon(self._hold_leadership)
                self.ctx.leading.set()
                self.started.set()
                log.info("manager leading", controllers=[c.name for c in self.controllers if c.leader_only])
                for c in self.controllers:
                    if c.leader_only:
                        tg.start_soon(self._run_component, c)
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            if self.elector is not None:
                with anyio.CancelScope(shield=True):
                    await self.elector.release()
            with anyio.CancelScope(shield=True):
                await self.scheduler.shutdown()

    async def _run_component(self, c: Controller) -> None:
        self.ctx.status.setdefault(c.name, {})["running"] = True
        try:
            await c.run(self.ctx)
        except NotLeading as e:
            log.error("component stopped: leadership lost", component=c.name, error=str(e))
            self.stop("lost leadership")
        except Exception as e:
            log.error("component failed", component=c.name, error=f"{type(e).__name__}: {e}", exc_info=True)
            self.stop(f"component {c.name} failed: {type(e).__name__}: {e}")
        finally:
            self.ctx.status[c.name]["running"] = False

    async def _cancel_on_stop(self, scope: anyio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()

    async def _hold_leadership(self) -> None:
        assert self.elector is not None
        await self.elector.hold()
        self.stop("lost leadership")

    # -- reporting ----------------------------------------------------------------------------------
    def unhealthy_reason(self) -> str | None:
        """Why ``/healthz`` should fail now, or None (see ``health.unhealthy_reason``)."""
        unsynced = [name for name, r in self.reflectors.items() if not r.synced.is_set()]
        return unhealthy_reason(self.client, unsynced=unsynced, started_at=self._run_started,
                                after=self.unhealthy_after)

    def health(self) -> dict[str, Any]:
        return {"synced": all(r.synced.is_set() for r in self.reflectors.values()), "running": self.started.is_set(),
                "leader": None if self.elector is None else self.elector.is_leader,
                "nodes": self.cluster.num_nodes, "config": self.ctx.slo_config is not None,
                "controllers": {k: dict(v) for k, v in self.ctx.status.items()}, **api_health(self.client)}


__all__ = ["Controller", "KubeManager", "Listener", "ManagerContext", "NotLeading"]
