"""The node QoS loop: collect → plan → apply, every ``interval`` seconds, with restore on stop.

One round:

1. **collect**: discover the kubelet's pod cgroups, read node and per-pod CPU/memory usage (rates from
   the previous round's counters), read the current values of the QoS-level, pod and container knobs
   into ``NodeState.cgroups``; then call every plugin's ``collect`` and merge its mapping into
   ``node_state.metrics``.
2. **runtime hooks**: for a pod (container) not seen in the previous round, call ``runtime_hook``
   with ``event="pod_start"`` (``"container_start"``). On the first round every pod is new, so the
   agent reconciles from what it finds on start.
3. **plan**: call every plugin's ``qos_plan``; each returned :class:`FileWrite` (and :class:`Eviction`)
   gets the plugin's name.
4. **apply**: the single :class:`~koordfw.agent.executor.Executor` writes what differs; then the round's
   evictions, in plan order, go to :attr:`Agent.evictor` (on a cluster the Eviction API, see
   :mod:`koordfw.engines.kube.evictor`; by default :func:`log_evictions`, which only logs them).

A failing plugin (exception, timeout, wrong return type) is logged and skipped; the others go on. A
write the executor refuses or fails fails only itself; a round that fails as a whole (the cgroup root
gone, a bug) is logged and the next round runs after ``interval`` as usual, so the loop never dies of
its input. ``interval`` is a finite number of seconds in :data:`MIN_INTERVAL`..:data:`MAX_INTERVAL`
(``ValueError`` otherwise), so the loop's clock can neither stop (NaN, infinity) nor spin (0).
Every time the agent reads (the CPU rates, the wait between rounds, ``handle.now()``) comes from its
injectable :class:`~koordfw.core.clock.Clock`, the engines' wall clock by default; with a
:class:`~koordfw.core.clock.VirtualClock` the loop runs a round each time the clock is advanced past
the next one, without sleeping.
When the long-running loop stops (SIGTERM/SIGINT, cancellation) every plugin's ``shutdown`` runs,
shielded from cancellation, with ``handle.node_state`` freshly collected and ``handle.apply`` to write
its restores. ``--once`` runs one round and leaves its writes in place.
"""

from __future__ import annotations

import functools
import math
import os
import re
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import structlog
from prometheus_client import Counter, Histogram

from ..core.caller import HookCaller, PluginFailure
from ..core.clock import Clock, RealClock
from ..core.events import EventLog
from ..core.model import Node, Pod
from ..core.nodestate import KOORD_QOS_OF_KUBE, ContainerState, Eviction, FileWrite, HostApp, NodeState, PodState
from ..core.plugins import Impl, Registry
from ..core.stash import new_stash
from ..core.status import Status
from ..extension import BATCH_CPU, BATCH_MEMORY
from ..metrics import REGISTRY, track_caller
from .cgroups import (
    CGROUP_FILES,
    POD_FILES,
    QOS_FILES,
    CgroupLayout,
    UsageTracker,
    read_cpu_topology,
    read_meminfo,
    read_proc_stat,
    read_value,
)
from .executor import Executor, WriteResult

log = structlog.get_logger("koordfw.agent")

#: the shortest and longest ``interval`` between rounds, in seconds
MIN_INTERVAL = 0.01
MAX_INTERVAL = 86400.0


def check_interval(value: Any) -> float:
    """``value`` as a round interval in seconds; ``ValueError`` unless finite and within the bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"interval: expected a number of seconds, got {value!r}")
    if not (math.isfinite(value) and MIN_INTERVAL <= value <= MAX_INTERVAL):
        raise ValueError(f"interval: expected {MIN_INTERVAL} to {MAX_INTERVAL} seconds, got {value!r}")
    return float(value)


@attrs.frozen
class AgentMetrics:
    rounds: Counter
    duration: Histogram
    plugin_errors: Counter
    evictions: Counter


@functools.cache
def agent_metrics() -> AgentMetrics:
    """Created on first use (once per process: a collector can be registered only once)."""
    return AgentMetrics(
        rounds=Counter("koordfw_agent_rounds", "Node QoS loop rounds", registry=REGISTRY),
        duration=Histogram("koordfw_agent_loop_seconds", "Duration of one collect→plan→apply round",
                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
                           registry=REGISTRY),
        plugin_errors=Counter("koordfw_agent_plugin_errors", "Plugin failures in the node QoS loop",
                              ["plugin", "hook"], registry=REGISTRY),
        evictions=Counter("koordfw_agent_evictions", "Pod evictions planned by node plugins, by outcome "
                          "(evicted, logged, refused, failed, rate-limited, already-evicted)",
                          ["plugin", "outcome"], registry=REGISTRY),
    )


#: what evicts a round's planned pods: awaited with the evictions in plan order and the round's node state
Evictor = Callable[[Sequence[Eviction], NodeState], Awaitable[Any]]


async def log_evictions(evictions: Sequence[Eviction], node_state: NodeState) -> None:
    """The agent's evictor without an API server: log each eviction it would make, evict nothing."""
    m = agent_metrics()
    for e in evictions:
        log.warning("would evict (no API server to evict through)", pod=e.pod, uid=e.pod_uid, reason=e.reason,
                    plugin=e.plugin, node=node_state.name)
        m.evictions.labels(e.plugin, "logged").inc()


class AgentPluginHandle:
    """The :class:`koordfw.AgentHandle` one node-side plugin gets: the node state collected this tick,
    the agent's clock, its own name and args, and ``apply`` (writes stamped with its name)."""

    __slots__ = ("_a", "plugin_name", "stash")

    def __init__(self, agent: Agent, plugin_name: str) -> None:
        self._a = agent
        self.plugin_name = plugin_name
        self.stash = new_stash()  # this plugin's, for this agent's lifetime

    @property
    def args(self) -> Any:
        return self._a.registry.args.get(self.plugin_name)

    @property
    def clock(self) -> Any:
        return self._a.clock

    def now(self) -> float:
        return float(self._a.clock.now())

    @property
    def node_state(self) -> NodeState | None:
        return self._a.node_state

    @property
    def unevicted(self) -> frozenset[str]:
        """Uids of the last round's planned evictions that were not carried out (see :attr:`Agent.unevicted`):
        a plugin keeping its own evicted-pods cache forgets them, so they are planned again."""
        return self._a.unevicted

    @property
    def roots(self) -> dict[str, str]:
        return {fs: str(p) for fs, p in self._a.executor.roots.items()}

    @property
    def events(self) -> EventLog:
        return self._a.recorder

    async def apply(self, writes: Sequence[FileWrite]) -> list[WriteResult]:
        """Apply writes now through the executor (used by ``shutdown`` to restore)."""
        return self._a.executor.apply(_stamp(list(writes), self.plugin_name))

    def __repr__(self) -> str:
        return f"<AgentHandle of {self.plugin_name}>"


def _stamped(w: FileWrite | Eviction, plugin: str) -> Any:
    """``w`` with ``plugin`` as its plugin (itself when it has it already, or no plugin is given)."""
    return attrs.evolve(w, plugin=plugin) if plugin and w.plugin != plugin else w


def _stamp(writes: Any, plugin: str) -> list[FileWrite]:
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
    for i, w in enumerate(res):  # each stamped as _stamp would, in this one pass (not a second type check)
        if isinstance(w, FileWrite):
            writes.append(_stamped(w, plugin))
        elif isinstance(w, Eviction):
            evictions.append(_stamped(w, plugin))
        else:
            raise TypeError(f"item {i}: expected a FileWrite or an Eviction, got {type(w).__name__}")
    return writes, evictions


#: memory.stat keys koordlet's ParseMemoryStatRaw requires (v1 hierarchical totals, v2 plain)
_MEMORY_STAT_KEYS = {
    1: ("total_cache", "total_rss", "total_inactive_file", "total_active_file", "total_inactive_anon",
        "total_active_anon", "total_unevictable"),
    2: ("file", "anon", "inactive_file", "active_file", "inactive_anon", "active_anon", "unevictable"),
}


#: one ``key value`` line of memory.stat with a key koordlet needs, each line after a "\n" (lines joined by
#: "\n", one put before the first; the value up to 20 ASCII digits, whitespace around it but no line
#: break). Led by the literal "\n" rather than a multi-line ``^``, the pattern is searched for, not tried
#: at every character: 5 µs instead of 13 for a pod's memory.stat
_MEMORY_STAT_LINE = {v: re.compile(rf"\n({'|'.join(keys)}) [^\S\n]*([0-9]{{1,20}})[^\S\n]*(?=\n|\Z)")
                     for v, keys in _MEMORY_STAT_KEYS.items()}


def _memory_stat_lines(text: str) -> str:
    """``text``'s first 256 lines (str.splitlines) joined by "\n", after a "\n"; ``text`` itself (after
    the "\n") when that is the same, which kernel output is: ASCII, no other line break, < 256 lines."""
    # str.splitlines' other line breaks in ASCII: \r \x0b \x0c \x1c \x1d \x1e
    if (text.isascii() and text.count("\n") < 256 and "\r" not in text and "\x0b" not in text
            and "\x0c" not in text and "\x1c" not in text and "\x1d" not in text and "\x1e" not in text):
        return "\n" + text
    lines = text.splitlines()
    if len(lines) > 256:
        lines = lines[:256]
    return "\n" + "\n".join(lines)


def memory_without_cache(layout: CgroupLayout, rel_dir: str) -> int | None:
    """A cgroup's memory usage without page cache, as koordlet measures pods and host applications
    (``MemoryStatRaw.Usage``: inactive_anon + active_anon + unevictable of ``memory.stat``, its first 256
    lines); the raw usage file where ``memory.stat`` is missing or lacks a field koordlet needs."""
    text = read_value(layout.file_path("memory", rel_dir, "memory.stat"))
    if text:
        kv = dict(_MEMORY_STAT_LINE[layout.version].findall(_memory_stat_lines(text)))  # a key's last line wins
        keys = _MEMORY_STAT_KEYS[layout.version]
        if len(kv) == len(keys):
            return int(kv[keys[4]]) + int(kv[keys[5]]) + int(kv[keys[6]])
    return layout.memory_usage(rel_dir)


class PodSource:
    """Pod metadata by uid (and the node object) from a directory of manifests, re-read when it changes."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[float, int] | None = None
        self.pods: dict[str, Pod] = {}
        self.node: Node | None = None

    def refresh(self, node_name: str) -> None:
        if self.path is None:
            return
        files = sorted(self.path.rglob("*")) if self.path.is_dir() else [self.path]
        stamp = (max((f.stat().st_mtime for f in files if f.is_file()), default=0.0), len(files))
        if stamp == self._stamp:
            return
        from ..core.errors import ManifestError
        from ..core.manifests import load_manifests

        try:
            m = load_manifests([self.path])
        except ManifestError as e:  # keep the previous metadata; a half-written file is common
            log.warning("cannot load pod manifests", path=str(self.path), error=str(e))
            return
        self._stamp = stamp
        self.pods = {p.uid: p for p in m.pods}
        nodes = [n for n in m.nodes if n.name == node_name] or m.nodes[:1]
        self.node = nodes[0] if nodes else None


class Agent:
    """The node agent engine. Build it, then ``await agent.run()`` (or ``run_once``)."""

    def __init__(self, registry: Registry, layout: CgroupLayout, executor: Executor, *, interval: float = 1.0,
                 node_name: str | None = None, pods_from: str | os.PathLike[str] | None = None,
                 proc_root: str = "/proc", sys_root: str = "/sys", clock: Clock | None = None) -> None:
        self.registry = registry
        self.layout = layout
        self.executor = executor
        self.interval = interval  # checked by the property
        self.node_name = node_name or socket.gethostname()
        self.pod_source = PodSource(pods_from)
        self.proc_root = proc_root
        self.sys_root = sys_root
        self.clock: Clock = clock if clock is not None else RealClock()  # the engines' clock; tests inject one
        if executor.clock is None:  # the executor's write cache ages on the agent's clock
            executor.clock = self.clock
        self.recorder = EventLog()
        self._handles: dict[str, AgentPluginHandle] = {}
        registry.bind(self.handle_for)
        self.caller = HookCaller(registry, self.handle_for)
        track_caller(self.caller)
        self.node_state: NodeState | None = None
        self.usage = UsageTracker()
        self.topology = read_cpu_topology(sys_root)
        self._seen: set[str] = set()
        #: the pod and container cgroup dirs found last round (kept descriptors of the ones gone are closed)
        self._dirs: set[str] = set()
        #: pod cgroup dir → (its discovered containers, their ContainerStates) of last round: the same
        #: (frozen) ContainerState tuple while a pod's containers stay the same
        self._containers: dict[str, tuple[tuple[tuple[str, str], ...], tuple[ContainerState, ...]]] = {}
        self.metrics = agent_metrics()
        self.rounds = 0
        self.last_results: list[WriteResult] = []
        #: the evictions the plugins planned in the last round (plan order) and what evicts them
        self.last_evictions: list[Eviction] = []
        #: uids of the last round's planned evictions the evictor did not carry out (a disruption budget's 429,
        #: refused at execution, rate-limited, an API error), when it reports outcomes as the cluster's does
        self.unevicted: frozenset[str] = frozenset()
        self.evictor: Evictor = log_evictions
        self.cpu_seconds = 0.0  # process CPU spent inside rounds (the agent's own cost)
        #: host applications to measure (their usage lands in ``NodeState.host_apps``); the NodeSLO's
        #: ``hostApplications`` on a cluster
        self.host_apps: tuple[HostApp, ...] = ()
        #: annotations the agent itself reports for its node (e.g. the kubelet CPU manager policy of the
        #: NodeResourceTopology), seen by plugins under the Node's own annotations
        self.extra_annotations: Mapping[str, str] = {}
        #: called with each round's node state after the plugins' ``collect`` (e.g. the NodeMetric's samples)
        self.on_collect: list[Callable[[NodeState], Any]] = []

    def handle_for(self, plugin: str) -> AgentPluginHandle:
        """The handle of ``plugin`` (one per plugin)."""
        h = self._handles.get(plugin)
        if h is None:
            h = self._handles[plugin] = AgentPluginHandle(self, plugin)
        return h

    @property
    def interval(self) -> float:
        """Seconds between rounds (:func:`check_interval` bounds it)."""
        return self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = check_interval(value)

    # -- collect ---------------------------------------------------------------------------------
    def collect_state(self) -> NodeState:
        now = self.clock.now()
        lay = self.layout
        self.pod_source.refresh(self.node_name)
        found = lay.discover()
        pods: list[PodState] = []
        dirs: list[str] = []
        keys: set[str] = {"node"}
        last_containers = self._containers
        new_containers: dict[str, tuple[tuple[tuple[str, str], ...], tuple[ContainerState, ...]]] = {}
        for d in found:
            meta = self.pod_source.pods.get(d.uid)
            cpu = self.usage.rate_milli(d.cgroup_dir, now, lay.cpu_usage_ns(d.cgroup_dir))
            keys.add(d.cgroup_dir)
            usage: dict[str, int] = {}
            if cpu is not None:
                usage["cpu"] = cpu
            mem = memory_without_cache(lay, d.cgroup_dir)
            if mem is not None:
                usage["memory"] = mem
            if meta is not None:
                qos, kube_qos = meta.qos_class, meta.kube_qos
            else:  # no metadata: the QoS level of the cgroup decides
                qos, kube_qos = KOORD_QOS_OF_KUBE[d.kube_qos], d.kube_qos
            hit = last_containers.get(d.cgroup_dir)
            if hit is not None and hit[0] == d.containers:
                containers = hit[1]
            else:
                containers = tuple(ContainerState(name=cid, id=cid, cgroup_dir=cdir) for cid, cdir in d.containers)
            new_containers[d.cgroup_dir] = (d.containers, containers)
            pods.append(PodState(uid=d.uid, pod=meta, qos=qos, kube_qos=kube_qos, cgroup_dir=d.cgroup_dir,
                                 containers=containers, usage=usage))
            dirs.append(d.cgroup_dir)
            # containers: no read; their cpusets follow their pod's, and the executor trusts what it wrote
        self._containers = new_containers
        found_dirs = set(dirs)
        for d in found:
            found_dirs.update(c for _, c in d.containers)
        if self._dirs - found_dirs:  # removed pods and containers: close the files kept open of them
            CGROUP_FILES.forget(self._dirs - found_dirs)
        self._dirs = found_dirs
        apps = []
        for a in self.host_apps:
            key = f"hostapp:{a.name}"
            keys.add(key)
            app_usage: dict[str, int] = {}
            cpu = self.usage.rate_milli(key, now, lay.cpu_usage_ns(a.cgroup_path))
            if cpu is not None:
                app_usage["cpu"] = cpu
            mem = memory_without_cache(lay, a.cgroup_path)
            if mem is not None:
                app_usage["memory"] = mem
            apps.append(attrs.evolve(a, usage=app_usage))
        self.usage.forget_except(keys)
        node_usage: dict[str, int] = {}
        busy = self.usage.rate_milli("node", now, read_proc_stat(self.proc_root))
        if busy is not None:
            node_usage["cpu"] = busy
        meminfo = read_meminfo(self.proc_root)
        capacity = {"cpu": len(self.topology) * 1000 or (os.cpu_count() or 1) * 1000}
        if meminfo is not None:
            capacity["memory"] = meminfo[0]
            node_usage["memory"] = meminfo[1]
        node = self.pod_source.node
        allocatable = dict(capacity)
        labels: Mapping[str, str] = {}
        annotations: Mapping[str, str] = {}
        if node is not None:
            capacity.update({k: v for k, v in node.capacity.items() if k in ("cpu", "memory")})
            allocatable = {**capacity, **{k: v for k, v in node.allocatable.items()
                                          if k in ("cpu", "memory", BATCH_CPU, BATCH_MEMORY)}}
            labels, annotations = node.labels, node.annotations
        if self.extra_annotations:
            annotations = {**self.extra_annotations, **annotations}
        proto = NodeState(cgroup_version=lay.version, cgroup_driver=lay.driver, kubepods=lay.kubepods)
        qos_dirs = [lay.kubepods, proto.qos_dir("burstable"), proto.qos_dir("besteffort")]
        cgroups = lay.read_files(qos_dirs, QOS_FILES[lay.version])
        cgroups.update(lay.read_files(dirs, POD_FILES[lay.version]))
        profile = self.registry.profile
        return NodeState(name=self.node_name, cgroup_version=lay.version, cgroup_driver=lay.driver,
                         kubepods=lay.kubepods, capacity=capacity, allocatable=allocatable, usage=node_usage,
                         labels=labels, annotations=annotations, cpu_topology=self.topology, pods=tuple(pods),
                         host_apps=tuple(apps), cgroups=cgroups, config=dict(profile.plugin_config), metrics={})

    # -- one round -------------------------------------------------------------------------------
    def node_plugins(self) -> set[str]:
        """Plugins with a node-side hook; only they get ``startup``/``shutdown`` from the agent (a
        scheduler plugin's startup expects a cluster, which a node does not have)."""
        return {i.plugin for p in ("collect", "qos_plan", "runtime_hook") for i in self.caller.impls(p)}

    async def _call(self, point: str, only: set[str] | None = None, **kw: Any) -> list[tuple[str, Any]]:
        out = []
        results: list[tuple[Impl, Any, Status | None]]
        if only is not None:
            results = []
            for impl in self.caller.impls(point):
                if impl.plugin not in only:
                    continue
                try:
                    results.append((impl, await self.caller.call(impl, **kw), None))
                except PluginFailure as f:
                    results.append((impl, None, f.status))
        else:
            results = await self.caller.call_safe(point, **kw)
        for impl, res, status in results:
            if status is not None:
                self.metrics.plugin_errors.labels(impl.plugin, point).inc()
                continue
            out.append((impl.plugin, res))
        return out

    async def _writes(self, point: str, **kw: Any) -> list[FileWrite]:
        writes: list[FileWrite] = []
        for plugin, res in await self._call(point, **kw):
            try:
                writes += _stamp(res, plugin)
            except TypeError as e:
                self.metrics.plugin_errors.labels(plugin, point).inc()
                log.error("plugin returned a bad plan", plugin=plugin, hook=point, error=str(e))
        return writes

    async def run_once(self) -> list[WriteResult]:
        """One collect → plan → apply round; returns what the executor did."""
        t0, c0 = time.perf_counter(), time.process_time()
        ns = self.collect_state()
        self.node_state = ns
        reads: dict[str, str] = {}
        for _plugin, res in await self._call("collect", node_state=ns):
            if isinstance(res, Mapping):
                read = res.get(NodeState.COLLECTED_CGROUPS)
                if isinstance(read, Mapping):
                    reads.update((str(k), str(v)) for k, v in read.items())
                ns.metrics.update((k, v) for k, v in res.items() if k != NodeState.COLLECTED_CGROUPS)
        if reads and isinstance(ns.cgroups, dict):
            # what the plugins read this round joins the agent's reads (which win: read first), so the
            # executor compares with them instead of reading each file again
            for path, value in reads.items():
                ns.cgroups.setdefault(path, value)
        for cb in self.on_collect:
            try:
                cb(ns)
            except Exception as e:  # noqa: BLE001 - a reporter's bug must not stop the QoS round
                log.exception("collect callback failed", error=f"{type(e).__name__}: {e}")
        writes: list[FileWrite] = []
        for p in ns.pods:
            if p.uid not in self._seen:
                writes += await self._writes("runtime_hook", event="pod_start", pod=p, container=None, node_state=ns)
            for c in p.containers:
                if c.cgroup_dir not in self._seen:
                    writes += await self._writes("runtime_hook", event="container_start", pod=p, container=c,
                                                 node_state=ns)
        self._seen = {p.uid for p in ns.pods} | {c.cgroup_dir for p in ns.pods for c in p.containers}
        evictions: list[Eviction] = []
        for plugin, res in await self._call("qos_plan", node_state=ns):
            try:
                w, planned = split_plan(res, plugin)
            except TypeError as err:
                self.metrics.plugin_errors.labels(plugin, "qos_plan").inc()
                log.error("plugin returned a bad plan", plugin=plugin, hook="qos_plan", error=str(err))
                continue
            writes += w
            evictions += planned
        results = self.executor.apply(writes, current=ns.cgroups)
        self.last_results = results
        self.last_evictions = evictions
        self.unevicted = frozenset()
        if evictions:
            try:
                outcomes = await self.evictor(evictions, ns)
            except Exception as err:  # noqa: BLE001 - an evictor's failure must not stop the QoS round
                log.exception("evicting failed", error=f"{type(err).__name__}: {err}")
            else:
                # koordlet remembers a pod as evicted only when the eviction succeeded (evictPodIfNotEvicted)
                self.unevicted = frozenset(
                    o.eviction.pod_uid for o in (outcomes if isinstance(outcomes, (list, tuple)) else ())
                    if getattr(o, "outcome", None) in ("failed", "refused", "rate-limited"))
        self.rounds += 1
        dt = time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        self.metrics.rounds.inc()
        self.metrics.duration.observe(dt)
        log.debug("round", pods=len(ns.pods), writes=sum(r.outcome == "written" for r in results),
                  seconds=round(dt, 6))
        return results

    async def startup(self) -> None:
        await self._call("startup", only=self.node_plugins())

    async def shutdown(self) -> None:
        """Run every plugin's ``shutdown`` (restores) on a fresh node state, shielded from cancellation."""
        with anyio.CancelScope(shield=True):
            try:
                self.node_state = self.collect_state()
            except OSError as e:
                log.error("cannot re-read the node on shutdown; restoring from the last state", error=str(e))
            await self._call("shutdown", only=self.node_plugins())
        # the descriptors kept of the kubepods tree's files (reads after this open them again)
        CGROUP_FILES.forget([self.layout.kubepods])
        self._dirs = set()
        self._containers = {}

    async def run(self, *, once: bool = False, handle_signals: bool = True) -> None:
        """Run until SIGTERM/SIGINT (or one round with ``once``), then restore through ``shutdown``.

        With ``once`` nothing is restored: the point of one round is to leave its writes in place.
        """
        await self.startup()
        if once:
            # CPU usage is a rate: prime the counters so the single round reports it
            self.collect_state()
            await self.clock.sleep(min(self.interval, 0.5))
            await self.run_once()
            return
        try:
            async with anyio.create_task_group() as tg:
                if handle_signals:
                    tg.start_soon(self._wait_signal, tg.cancel_scope)
                while True:
                    start = self.clock.now()
                    try:
                        await self.run_once()
                    except OSError as e:  # e.g. the cgroup root went away; try again next round
                        log.error("round failed", error=str(e))
                    except Exception as e:  # noqa: BLE001 - a round's bug must not stop the node's QoS loop
                        log.exception("round failed", error=f"{type(e).__name__}: {e}")
                    # at most one interval, should the wall clock step back
                    delay = min(self.interval, self.interval - (self.clock.now() - start))
                    if delay > 0:
                        await self.clock.sleep(delay)
                    else:  # the round took the whole interval: the next one runs now
                        await anyio.sleep(0)
        finally:
            await self.shutdown()

    async def _wait_signal(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("stopping on signal", signal=signal.Signals(signum).name)
                scope.cancel()
                return
