"""The runtime of the hook points outside the scheduling cycle (the scheduling points are
:class:`koordfw.core.runtime.Framework`'s): ``node_resources`` (the manager's node-resource step),
``qos_plan`` / ``collect`` / ``runtime_hook`` (the node agent), ``mutate_pod`` / ``validate_pod`` (pod
admission), ``deschedule``, ``report`` and the ``startup`` / ``shutdown`` lifecycle.

Every engine runs these points through one :class:`NodeRuntime` over its own
:class:`~koordfw.core.caller.HookCaller`, so each call has the plugin's timeout, its timing, the
current-plugin marker and failure isolation (a plugin that raised or timed out is logged by the caller
and left out: the others still run), and each point's results are checked by one validator, here:

* ``node_resources``: :func:`check_node_resources` (amounts by :func:`koordfw.core.quantity.bad_node_resources`,
  node annotations, the allocatable override);
* ``qos_plan`` and ``runtime_hook``: :func:`split_plan` (FileWrites and Evictions, stamped with the plugin);
* ``mutate_pod``: a pod manifest (a dict) or None; ``validate_pod``: a :class:`Status` (or what
  :func:`as_status` reads as one).

:class:`NodeHandle` is the one :class:`koordfw.AgentHandle` implementation: the agent's, the dry
planners' (``koordfw agent plan``, :class:`koordfw.NodePlanner`) over a :class:`PlannedNode`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import attrs
import structlog

from .caller import HookCaller, PluginFailure
from .clock import Clock
from .cluster_view import as_view
from .events import EventLog
from .model import Migration
from .nodestate import ContainerState, Eviction, FileWrite, NodeState, PodState
from .plugins import Impl, Registry
from .quantity import bad_node_resources
from .results import NodeResourcesResult
from .stash import new_stash
from .status import Code, Status, as_status

log = structlog.get_logger("koordfw")

__all__ = ["AdmissionVerdict", "NodeHandle", "NodeHost", "NodePlan", "NodeResources", "NodeRuntime",
           "PlannedNode", "PointFailure", "check_node_resources", "split_plan", "stamp_writes"]


@attrs.frozen
class PointFailure:
    """One plugin's contribution left out of a point: it raised or timed out (``bad_output`` False; the
    caller logged it), or it returned something the point's validator refused (``bad_output`` True;
    logged by the runtime)."""

    plugin: str
    point: str
    message: str
    bad_output: bool = False


# -- results of the node-side points --------------------------------------------------------------------------
def _stamped(w: Any, plugin: str) -> Any:
    """``w`` with ``plugin`` as its plugin (itself when it has it already, or no plugin is given)."""
    return attrs.evolve(w, plugin=plugin) if plugin and w.plugin != plugin else w


def stamp_writes(writes: Any, plugin: str) -> list[FileWrite]:
    """A list of :class:`FileWrite` (``None``: none), each stamped with ``plugin``; ``TypeError`` on anything else."""
    if writes is None:
        return []
    if not isinstance(writes, (list, tuple)):
        raise TypeError(f"expected a list of FileWrite, got {type(writes).__name__}")
    out = []
    for i, w in enumerate(writes):
        if not isinstance(w, FileWrite):
            raise TypeError(f"item {i}: expected a FileWrite, got {type(w).__name__}")
        out.append(_stamped(w, plugin))
    return out


def split_plan(res: Any, plugin: str) -> tuple[list[FileWrite], list[Eviction]]:
    """A ``qos_plan`` result as (writes, evictions), each stamped with ``plugin``; ``TypeError`` on an item
    that is neither a :class:`FileWrite` nor an :class:`Eviction` (the whole plan of that plugin is dropped)."""
    if res is None:
        return [], []
    if not isinstance(res, (list, tuple)):
        raise TypeError(f"expected a list of FileWrite/Eviction, got {type(res).__name__}")
    evictions: list[Eviction] = []
    writes: list[FileWrite] = []
    for i, w in enumerate(res):  # each stamped as stamp_writes would, in this one pass
        if isinstance(w, FileWrite):
            writes.append(_stamped(w, plugin))
        elif isinstance(w, Eviction):
            evictions.append(_stamped(w, plugin))
        else:
            raise TypeError(f"item {i}: expected a FileWrite or an Eviction, got {type(w).__name__}")
    return writes, evictions


class NodePlan:
    """What the node QoS plugins planned for one node state (:meth:`NodeRuntime.run_qos_plan`): the cgroup /
    resctrl ``writes`` (:class:`FileWrite`, each stamped with its plugin, in plan order) and the
    ``evictions`` (:class:`Eviction`), plus one message per plugin that failed or returned a bad plan
    (``failures`` the same, structured)."""

    __slots__ = ("writes", "evictions", "errors", "failures")

    def __init__(self, writes: list[FileWrite], evictions: list[Eviction], errors: list[str],
                 failures: Sequence[PointFailure] = ()) -> None:
        self.writes = writes
        self.evictions = evictions
        self.errors = errors
        self.failures: list[PointFailure] = list(failures)


@attrs.frozen
class NodeResources:
    """The merged ``node_resources`` results for one node: ``amounts`` (resource → amount, None being
    Koordinator's reset; on allocatable and capacity) or None when no plugin returned amounts;
    ``annotations`` (key → value, None removing it) and ``allocatable`` (an override of allocatable only)
    the plugins asked for; ``failures`` the plugins left out. Every engine applies all three parts."""

    amounts: dict[str, int | None] | None
    failures: tuple[PointFailure, ...] = ()
    annotations: dict[str, str | None] = attrs.field(factory=dict)
    allocatable: dict[str, int] = attrs.field(factory=dict)

    @property
    def wants_write(self) -> bool:
        """Did any plugin ask for a write?"""
        return bool(self.amounts or self.annotations or self.allocatable)


def check_node_resources(res: Any) -> tuple[NodeResourcesResult | None, str]:
    """A ``node_resources`` result as a :class:`NodeResourcesResult` (``None`` for "no write"), or the
    reason it is refused: amounts as :func:`bad_node_resources` says, annotations with a non-empty string
    key and a string or None value, an allocatable override with integer amounts (None is not a reset
    there: kube's allocatable keeps what the kubelet reports). The one rule for every engine."""
    if res is None:
        return None, ""
    if isinstance(res, NodeResourcesResult):
        parts = {"amounts": res.amounts, "annotations": res.annotations, "allocatable": res.allocatable}
        for part, value in parts.items():
            if not isinstance(value, Mapping):
                return None, f"{part}: expected a mapping, got {type(value).__name__}"
        bad = bad_node_resources(dict(res.amounts))
        if bad:
            return None, f"invalid amounts {bad}"
        bad = {str(k)[:60]: repr(v)[:40] for k, v in res.allocatable.items() if v is None}
        bad = bad or bad_node_resources(dict(res.allocatable))
        if bad:
            return None, f"invalid allocatable {bad}"
        bad = {str(k)[:60]: repr(v)[:40] for k, v in res.annotations.items()
               if not isinstance(k, str) or not k or not (v is None or isinstance(v, str))}
        if bad:
            return None, f"invalid annotations {bad} (expected a string or None per key)"
        return res, ""
    bad = bad_node_resources(res)
    if bad:
        return None, f"invalid amounts {bad}"
    return NodeResourcesResult(amounts=res), ""


class _PreparedNode:
    """A node view as the plugins earlier in profile order left it this round: their annotations and
    allocatable override applied to its ``node`` (and ``annotations`` / ``allocatable``); the rest is the view's."""

    def __init__(self, view: Any, annotations: Mapping[str, str | None], allocatable: Mapping[str, int]) -> None:
        self._view = view
        node = view.node
        anns = {k: v for k, v in {**node.annotations, **annotations}.items() if v is not None}
        self.annotations = anns
        self.node = attrs.evolve(node, annotations=anns, allocatable={**node.allocatable, **allocatable})
        self.allocatable = {**view.allocatable, **allocatable}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)


@attrs.frozen
class AdmissionVerdict:
    """A ``mutate_pod`` or ``validate_pod`` run: ``code`` 200 (allowed; ``pod`` the mutated manifest after
    mutate_pod), 403 (a validate_pod rejection) or 500 (a plugin failed or returned a bad result);
    ``plugin`` names the deciding plugin."""

    code: int
    pod: dict[str, Any]
    message: str = ""
    plugin: str = ""

    @property
    def allowed(self) -> bool:
        return self.code == 200


# -- the node handle ----------------------------------------------------------------------------------------------
class NodeHost(Protocol):
    """What a :class:`NodeHandle` reads: the node agent (:class:`koordfw.agent.loop.Agent`), or a
    :class:`PlannedNode` for a dry plan."""

    registry: Registry

    @property
    def clock(self) -> Clock: ...
    @property
    def node_state(self) -> NodeState | None: ...
    @property
    def unevicted(self) -> frozenset[str]: ...
    @property
    def roots(self) -> Mapping[str, str]: ...
    @property
    def events(self) -> EventLog: ...
    async def apply_writes(self, writes: list[FileWrite]) -> Any: ...


class PlannedNode:
    """The host of a dry plan (``koordfw agent plan``, :class:`koordfw.NodePlanner`): a node state set by
    the caller, a clock, no filesystem roots; nothing is ever applied (``refusal`` says so)."""

    def __init__(self, registry: Registry, clock: Clock, refusal: str) -> None:
        self.registry = registry
        self.clock = clock
        self.node_state: NodeState | None = None
        self.unevicted: frozenset[str] = frozenset()
        self.roots: Mapping[str, str] = {}
        self.events = EventLog()
        self._refusal = refusal

    async def apply_writes(self, writes: list[FileWrite]) -> Any:
        raise RuntimeError(self._refusal)


class NodeHandle:
    """The :class:`koordfw.AgentHandle` one node-side plugin gets: the node state of this round, the host's
    clock, its own name and args, the filesystem roots, the event recorder, and ``apply`` (writes stamped
    with its name)."""

    def __init__(self, host: NodeHost, plugin_name: str) -> None:
        self._host = host
        self.plugin_name = plugin_name
        self.stash = new_stash()  # this plugin's, for this host's lifetime

    @property
    def args(self) -> Any:
        return self._host.registry.args.get(self.plugin_name)

    @property
    def clock(self) -> Clock:
        return self._host.clock

    def now(self) -> float:
        return float(self._host.clock.now())

    @property
    def node_state(self) -> NodeState | None:
        return self._host.node_state

    @property
    def unevicted(self) -> frozenset[str]:
        """Uids of the last round's planned evictions that were not carried out (see ``Agent.unevicted``):
        a plugin keeping its own evicted-pods cache forgets them, so they are planned again."""
        return self._host.unevicted

    @property
    def roots(self) -> dict[str, str]:
        return {fs: str(p) for fs, p in self._host.roots.items()}

    @property
    def events(self) -> EventLog:
        return self._host.events

    async def apply(self, writes: Sequence[FileWrite]) -> Any:
        """Apply writes now through the host (used by ``shutdown`` to restore)."""
        return await self._host.apply_writes(stamp_writes(list(writes), self.plugin_name))

    def __repr__(self) -> str:
        return f"<AgentHandle of {self.plugin_name}>"


def node_handles(host: NodeHost) -> Callable[[str], NodeHandle]:
    """A ``handle_for`` making one :class:`NodeHandle` per plugin of ``host``."""
    handles: dict[str, NodeHandle] = {}

    def handle_for(plugin: str) -> NodeHandle:
        h = handles.get(plugin)
        if h is None:
            h = handles[plugin] = NodeHandle(host, plugin)
        return h

    return handle_for


# -- the runtime ---------------------------------------------------------------------------------------------------
class NodeRuntime:
    """The points outside the scheduling cycle, run over ``caller`` (the engine's: its handles are the
    plugins'). Each ``run_<point>`` calls every implementation in profile order; a plugin that fails, or
    whose result the point's validator refuses, is left out and reported in the result's failures."""

    def __init__(self, caller: HookCaller) -> None:
        self.caller = caller

    def implements(self, *points: str) -> bool:
        """Does any plugin implement one of ``points`` (else running them is a no-op)?"""
        return any(self.caller.impls(p) for p in points)

    def plugins(self, *points: str) -> set[str]:
        """The plugins implementing any of ``points``."""
        return {i.plugin for p in points for i in self.caller.impls(p)}

    async def _each(self, point: str, only: Collection[str] | None = None, **kw: Any
                    ) -> tuple[list[tuple[Impl, Any]], list[PointFailure]]:
        """Every implementation of ``point`` (of the plugins in ``only``, when given): (results, failures)."""
        out: list[tuple[Impl, Any]] = []
        failures: list[PointFailure] = []
        for impl in self.caller.impls(point):
            if only is not None and impl.plugin not in only:
                continue
            try:
                out.append((impl, await self.caller.call(impl, **kw)))
            except PluginFailure as f:
                failures.append(PointFailure(impl.plugin, point, f.status.message))
        return out, failures

    @staticmethod
    def _refused(point: str, plugin: str, why: str, **kw: Any) -> PointFailure:
        log.error(f"plugin returned a bad {point} result; it is left out", plugin=plugin, hook=point, error=why, **kw)
        return PointFailure(plugin, point, why, bad_output=True)

    # -- lifecycle, report -------------------------------------------------------------------------------
    async def run_lifecycle(self, point: str, only: Collection[str] | None = None) -> list[PointFailure]:
        """``startup`` or ``shutdown`` of every plugin (of those in ``only``); all run, the failures returned."""
        if point not in ("startup", "shutdown"):
            raise ValueError(f"not a lifecycle point: {point!r}")
        return (await self._each(point, only))[1]

    async def run_startup_raising(self) -> list[tuple[str, PluginFailure]]:
        """Every plugin's ``startup`` (all of them run): (plugin, the failure as raised, its cause attached)
        of each that failed (a caller telling a plugin's bad input from its bug reads ``__cause__``)."""
        failed: list[tuple[str, PluginFailure]] = []
        for impl in self.caller.impls("startup"):
            try:
                await self.caller.call(impl)
            except PluginFailure as f:  # the caller logged the cause
                failed.append((impl.plugin, f))
        return failed

    async def run_report(self) -> dict[str, Any]:
        """The ``report`` sections of every plugin merged (a result that is not a mapping is left out, logged)."""
        extra: dict[str, Any] = {}
        results, _ = await self._each("report")
        for impl, res in results:
            if res is None:
                continue
            if isinstance(res, dict):
                extra.update(res)
            else:
                self._refused("report", impl.plugin, f"expected a mapping or None, got {type(res).__name__}")
        return extra

    # -- descheduling -------------------------------------------------------------------------------------
    async def run_deschedule(self, cluster: Any) -> tuple[dict[str, list[Migration]], list[PointFailure]]:
        """Every plugin's ``deschedule`` once: (plugin → the migrations it planned, each named after its
        plugin unless it named one; the plugins that failed or returned something other than Migrations)."""
        plans: dict[str, list[Migration]] = {}
        results, failures = await self._each("deschedule", cluster=as_view(cluster))  # plugins read, never write
        for impl, res in results:
            try:
                items = list(res or ())
            except TypeError:
                items = [res]
            bad = next((m for m in items if not isinstance(m, Migration)), None)
            if bad is not None:
                failures.append(self._refused("deschedule", impl.plugin,
                                              f"expected Migrations or None, got a {type(bad).__name__}"))
                continue
            plans[impl.plugin] = [m if m.plugin else attrs.evolve(m, plugin=impl.plugin) for m in items]
        return plans, failures

    # -- the manager's node resources -----------------------------------------------------------------------
    async def run_node_resources(self, node: Any, pods: Any, metric: Any, now: float, last_update: float | None,
                                 colocation: dict[str, Any] | None,
                                 slo_config: Mapping[str, str] | None = None) -> NodeResources:
        """Every plugin's ``node_resources`` for one node, in profile order, merged (numpy amounts as ints);
        each plugin is given the node with the earlier plugins' annotations and allocatable override
        applied. A result refused by :func:`check_node_resources` is left out, logged."""
        merged: dict[str, int | None] = {}
        annotations: dict[str, str | None] = {}
        allocatable: dict[str, int] = {}
        wanted = False
        failures: list[PointFailure] = []
        name = getattr(getattr(node, "node", None), "name", None)
        for impl in self.caller.impls("node_resources"):
            seen = _PreparedNode(node, annotations, allocatable) if annotations or allocatable else node
            try:
                res = await self.caller.call(impl, node=seen, pods=pods, metric=metric, now=now,
                                             last_update=last_update, colocation=colocation, slo_config=slo_config)
            except PluginFailure as f:  # the caller logged the cause; this names the node
                failures.append(PointFailure(impl.plugin, "node_resources", f.status.message))
                log.error("node_resources failed; its results are left out", node=name, plugin=impl.plugin,
                          error=f.status.message)
                continue
            out, why = check_node_resources(res)
            if why:
                failures.append(self._refused("node_resources", impl.plugin, why, node=name))
                continue
            if out is None:
                continue
            if out.amounts or not isinstance(res, NodeResourcesResult):  # a dict, even empty, asks for a write
                wanted = True
                merged.update({k: None if v is None else int(v) for k, v in out.amounts.items()})
            annotations.update(out.annotations)
            allocatable.update({k: int(v) for k, v in out.allocatable.items()})
        return NodeResources(merged if wanted else None, tuple(failures), annotations, allocatable)

    # -- the node agent --------------------------------------------------------------------------------------
    async def run_collect(self, node_state: NodeState) -> tuple[list[Mapping[str, Any]], list[PointFailure]]:
        """Every plugin's ``collect``: (the mappings returned, in profile order; the failures). Anything
        else returned is ignored, as ``None`` is."""
        results, failures = await self._each("collect", node_state=node_state)
        return [res for _impl, res in results if isinstance(res, Mapping)], failures

    async def run_runtime_hook(self, event: str, pod: PodState, container: ContainerState | None,
                               node_state: NodeState) -> tuple[list[FileWrite], list[PointFailure]]:
        """Every plugin's ``runtime_hook`` for one pod or container start: the writes (stamped), the failures."""
        writes: list[FileWrite] = []
        results, failures = await self._each("runtime_hook", event=event, pod=pod, container=container,
                                             node_state=node_state)
        for impl, res in results:
            try:
                writes += stamp_writes(res, impl.plugin)
            except TypeError as e:
                failures.append(self._refused("runtime_hook", impl.plugin, str(e)))
        return writes, failures

    async def run_qos_plan(self, node_state: NodeState) -> NodePlan:
        """One round of ``qos_plan`` on ``node_state``; a plugin that raises, or returns something that is not
        a list of FileWrite/Eviction (:func:`split_plan`), is left out of the plan and named in its errors."""
        writes: list[FileWrite] = []
        evictions: list[Eviction] = []
        results, failures = await self._each("qos_plan", node_state=node_state)
        for impl, res in results:
            try:
                w, e = split_plan(res, impl.plugin)
            except TypeError as exc:
                failures.append(self._refused("qos_plan", impl.plugin, str(exc)))
                continue
            writes += w
            evictions += e
        if len(failures) > 1:  # in profile order, as the plugins ran
            order = {impl.plugin: n for n, impl in enumerate(self.caller.impls("qos_plan"))}
            failures.sort(key=lambda f: order.get(f.plugin, 0))
        errors = [f"{f.plugin}: bad plan: {f.message}" if f.bad_output else f"{f.plugin}: {f.message}"
                  for f in failures]
        return NodePlan(writes, evictions, errors, failures)

    # -- admission ------------------------------------------------------------------------------------------
    async def run_mutate_pod(self, pod: dict[str, Any], operation: str, namespace: dict[str, Any] | None
                             ) -> AdmissionVerdict:
        """The ``mutate_pod`` plugins in profile order, each given the pod the one before returned (``pod``
        itself is passed to the first: copy it before if it must stay as it is); the first that fails or
        returns something other than a dict or None decides (500)."""
        current = pod
        for impl in self.caller.impls("mutate_pod"):
            try:
                out = await self.caller.call(impl, pod=current, operation=operation, namespace=namespace)
            except PluginFailure as f:
                return AdmissionVerdict(500, current, f.status.message, impl.plugin)
            if out is None:
                continue
            if not isinstance(out, dict):
                msg = (f"plugin {impl.plugin} returned {type(out).__name__} from mutate_pod, "
                       "expected the pod manifest (a dict) or None")
                self._refused("mutate_pod", impl.plugin, msg)
                return AdmissionVerdict(500, current, msg, impl.plugin)
            current = out
        return AdmissionVerdict(200, current)

    async def run_validate_pod(self, pod: dict[str, Any], old: dict[str, Any] | None, operation: str,
                               namespace: dict[str, Any] | None) -> AdmissionVerdict:
        """The ``validate_pod`` plugins in profile order; the first rejection (403) or failure (500) decides."""
        for impl in self.caller.impls("validate_pod"):
            try:
                # validate_pod is pure: the manifests are passed as they are, not copied
                out = await self.caller.call(impl, pod=pod, old=old, operation=operation, namespace=namespace)
            except PluginFailure as f:
                return AdmissionVerdict(500, pod, f.status.message, impl.plugin)
            if isinstance(out, str) and not out:
                continue
            st: Status = as_status(out, impl.plugin)
            if st.code in (Code.SUCCESS, Code.SKIP):
                continue
            if st.code is Code.ERROR:
                return AdmissionVerdict(500, pod, st.message, impl.plugin)
            return AdmissionVerdict(403, pod, st.message or f"rejected by {impl.plugin}", impl.plugin)
        return AdmissionVerdict(200, pod)
