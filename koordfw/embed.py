"""The embedding API: koordfw's engines and steps for programs that drive them (a replay, a benchmark,
another scheduler, a command of a plugin package): the embedded engine and its result, the agent's
planning step (:class:`NodePlanner`), the API server's pod admission (:class:`PodAdmission`), the
manager's node-resource step (:func:`update_node_resources`), profiles, the virtual clock, and the
plumbing of ``koordfw`` subcommands (:class:`Commands`). The engine modules are imported on first use,
so that importing this module stays light.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from .command_api import Commands, add_plugin_options, registry_from_args
from .core.caller import PluginFailure
from .core.clock import VirtualClock
from .core.cluster import NodeView
from .core.cluster_view import as_view as cluster_view_of
from .core.errors import ManifestError
from .core.events import SchedulerEvents
from .core.model import Pod
from .core.node_runtime import NodePlan
from .core.nodestate import NodeState
from .core.profile import Profile, load_profile, profile_from_dict
from .hookspecs import hookspec

if TYPE_CHECKING:
    from .agent.nodemetric import CollectPolicy, NodeMetricReporter
    from .core.plugins import Registry
    from .engines.embedded import EmbeddedEngine, SimulationResult

__all__ = ["CollectPolicy", "Commands", "EmbeddedEngine", "NodeMetricReporter", "NodePlan", "NodePlanner",
           "PluginFailure", "PodAdmission", "Profile", "SchedulerEvents", "VirtualClock", "add_plugin_options",
           "build_registry", "cluster_view_of", "hookspec", "load_profile", "plan_writes", "profile_from_dict",
           "registry_from_args", "simulate", "update_node_resources"]


def simulate(*a: Any, **kw: Any) -> SimulationResult:
    """Schedule manifests in the embedded cluster; see :func:`koordfw.engines.embedded.simulate`."""
    from .engines.embedded import simulate as _simulate

    return _simulate(*a, **kw)


def build_registry(*a: Any, **kw: Any) -> Registry:
    """Load and configure plugins; see :func:`koordfw.engines.embedded.build_registry`."""
    from .engines.embedded import build_registry as _build

    return _build(*a, **kw)


def plan_writes(*a: Any, **kw: Any) -> list[dict[str, str]]:
    """The cgroup/resctrl writes the node QoS plugins want for a NodeState, as ``koordfw agent plan``
    prints them; see :func:`koordfw.commands.agent.plan_writes`."""
    from .commands.agent import plan_writes as _plan

    return _plan(*a, **kw)


class NodePlanner:
    """The agent's collect and planning steps (``apply`` is nobody's) for node states built by
    the caller: runs every loaded plugin's ``qos_plan`` hook on a :class:`NodeState` and returns the plan,
    as ``koordfw agent plan`` does, but awaitable and on the caller's clock, so a replay can plan many
    nodes round after round on a :class:`VirtualClock` (each plugin keeps its state across rounds: one
    planner stands for one agent, or for the agents of many nodes when its plugins key their state by
    node). ``registry`` is bound to this planner's handles: give it a registry of its own (not one an
    engine uses). Nothing is written or evicted."""

    def __init__(self, registry: Registry, clock: Any = None) -> None:
        from .core.caller import HookCaller
        from .core.node_runtime import NodeRuntime, PlannedNode, node_handles

        self.registry = registry
        self.clock: Any = clock if clock is not None else VirtualClock(0.0)
        self._node = PlannedNode(registry, self.clock, "a NodePlanner applies nothing")
        self._node.node_state = NodeState()
        handle_for = node_handles(self._node)
        registry.bind(handle_for)
        self._runtime = NodeRuntime(HookCaller(registry, handle_for))

    @property
    def node_state(self) -> NodeState:
        """The node state of the round being (or last) planned."""
        ns = self._node.node_state
        assert ns is not None
        return ns

    @node_state.setter
    def node_state(self, value: NodeState) -> None:
        self._node.node_state = value

    async def collect(self, node_state: NodeState) -> list[str]:
        """The plugins' ``collect`` on ``node_state``, as the agent's round starts with: what they return is
        merged into ``node_state.metrics`` (so a :class:`NodeMetricReporter` observing it next publishes
        their NodeMetric fields, e.g. the prediction plugin's ``prodReclaimableMetric``). Returns one
        message per plugin that failed (its contribution left out)."""
        self._node.node_state = node_state
        collected, failures = await self._runtime.run_collect(node_state)
        for res in collected:
            node_state.metrics.update((k, v) for k, v in res.items() if k != NodeState.COLLECTED_CGROUPS)
        return [f"{f.plugin}: {f.message}" for f in failures]

    async def plan(self, node_state: NodeState) -> NodePlan:
        """One round of ``qos_plan`` on ``node_state``; a plugin that raises, or returns something that is
        not a list of FileWrite/Eviction, is left out of the plan and named in ``errors``."""
        self._node.node_state = node_state
        return await self._runtime.run_qos_plan(node_state)


class PodAdmission:
    """The API server's pod admission for an embedder that creates pods itself (a replay): runs the
    registry's ``mutate_pod`` then ``validate_pod`` hooks on a pod manifest (operation CREATE), the plugins
    reading ``objects`` (ClusterColocationProfiles, Namespaces, PriorityClasses) as ``koordfw simulate``'s
    do. ``seed`` seeds the generator the plugins share (a profile's probability draws). The registry may be
    the one a scheduler uses (its class plugins are then shared, each hook given an admission handle)."""

    def __init__(self, registry: Registry, objects: Any = (), *, clock: Any = None, seed: int = 0) -> None:
        from .core.admission import Admission, StaticObjects

        self._admission = Admission(registry, StaticObjects(objects), clock=clock, seed=seed)

    @property
    def active(self) -> bool:
        """Does any plugin implement an admission hook (else :meth:`admit` returns pods unchanged)?"""
        return bool(self._admission.active)

    async def admit(self, manifest: dict[str, Any]) -> Pod:
        """The admitted pod; :class:`ManifestError` when a webhook refuses it or the mutated pod is invalid
        (the message names the plugin)."""
        from .core.model import pod_from_manifest

        if not self._admission.active:
            return pod_from_manifest(manifest)
        out = await self._admission.admit(manifest, "CREATE", patch=False)  # the pod only: no JSON patch
        name = str((manifest.get("metadata") or {}).get("name") or "?")
        if not out.allowed:
            raise ManifestError(f"admission refused pod {name}: {out.message} ({out.plugin})")
        return pod_from_manifest(out.pod)


async def update_node_resources(engine: EmbeddedEngine, last_update: MutableMapping[str, float]) -> list[str]:
    """The manager's node-resource step for every node of ``engine``'s cluster, with Koordinator's update
    rules: each ``node_resources`` hook gets the time the node's resources were last written
    (``last_update[node]``, absent = never), so a plugin such as batch_resource returns ``None`` (no write)
    when the change is below its diff threshold and its last write is recent; the results are applied
    (``EmbeddedEngine.apply_node_resources``: amounts, node annotations, allocatable override) and, when
    amounts were written, ``last_update[node]`` becomes now. Returns the nodes written
    (the caller sends the scheduler a ``NODE_UPDATE`` for them). ``EmbeddedEngine.refresh_node_resources``
    is the same step that always writes."""
    from .engines.embedded import colocation_from_objects, slo_config_from_objects

    rt = engine.scheduler.node_runtime
    if not rt.implements("node_resources"):
        return []
    now = engine.clock.now()
    engine.colocation = colocation_from_objects(engine.cluster)
    slo_config = slo_config_from_objects(engine.cluster)
    written = []
    for view in list(engine.cluster.nodes):
        # the hooks compare with what the node carries now (its allocatable with the extended resources
        # written before), as they compare with node.status on a live cluster
        res = await rt.run_node_resources(_NodeWithAllocatable(view), engine.cluster.pods_on(view.name),
                                          engine.cluster.node_metric(view.name), now, last_update.get(view.name),
                                          engine.colocation, slo_config)
        if engine.apply_node_resources(view.name, res):
            if res.amounts:  # last_update is when the resources (status amounts) were last written
                last_update[view.name] = now
            written.append(view.name)
    return written


class _NodeWithAllocatable:
    """A NodeView whose ``node`` carries the view's current allocatable (the embedded cluster keeps
    written extended resources in its columns, not in the Node object)."""

    def __init__(self, view: NodeView) -> None:
        import attrs

        self._view = view
        self.node = attrs.evolve(view.node, allocatable=view.allocatable)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


def __getattr__(name: str) -> Any:
    # the embedded engine is imported on first use, so that importing koordfw stays light
    if name == "EmbeddedEngine":
        from .engines.embedded import EmbeddedEngine

        return EmbeddedEngine
    if name in ("NodeMetricReporter", "CollectPolicy"):
        # the agent's NodeMetric aggregation (koordlet's states_nodemetric), for replays that build
        # NodeMetrics from modelled usage: NodeMetricReporter(policy).observe(node_state, now) each
        # round, .status(now, pods) the NodeMetric status; CollectPolicy its metricCollectPolicy
        from .agent import nodemetric

        return getattr(nodemetric, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
