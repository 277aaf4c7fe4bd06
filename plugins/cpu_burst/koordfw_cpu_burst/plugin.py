"""The ``cpu_burst`` node-agent plugin: ``collect`` (cgroup values, throttling, usage, the burst-period
buckets), ``qos_plan`` (the writes, pure) and ``shutdown`` (burst 0 and the kubelet's quotas again).

Which pods: Koordinator's ``IsPodCPUBurstable`` (the ``koordinator.sh/qosClass`` label is not LSR, LSE or
BE; a pod without the label is burstable) and active (phase Pending or Running), known from their
manifest (the containers' CPU limits and statuses are needed; a pod the agent found only in the cgroup
tree is left alone). Containers are the pod's ``status.containerStatuses`` whose name is in its spec; a
container's cgroup is ``<pod dir>/<id>`` (systemd: ``<runtime prefix><id>.scope``) from its
``containerID``, as koordlet's ``GetContainerCgroupParentDir``.
"""

from __future__ import annotations

import functools
import os
import types
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import structlog

from koordfw import AgentHandle, BoundedCache, FileWrite, Handle, NodeState, PodState, hookimpl, warn_once
from koordfw.extension import ANNOTATION_POD_CPU_BURST, LABEL_POD_QOS, QOS_BE, QOS_LSE, QOS_LSR
from koordfw.nodestate import read_cgroup_file

from .burst import (
    BurstLimiter,
    NodeBurst,
    PodUsage,
    QuotaStep,
    burst_clamp,
    fresh_limiter_allows,
    limiter_allows,
    milli_cpu_to_quota,
    node_state_for_burst,
    pod_quota_sequence,
    quota_step,
    recycle,
    static_cpu_burst,
)
from .config import POLICY_NONE, Args, BurstConfig, merge_pod_config, parse_pod_config

log = structlog.get_logger("koordfw.cpu_burst")

NAME = "cpu_burst"
#: node_state.metrics keys filled by ``collect`` for ``qos_plan``
VALUES_KEY = "cpu_burst.cgroups"  # path → value of the pod and container files read
THROTTLED_KEY = "cpu_burst.throttled"  # container id → throttled ratio of the last sample
USAGE_KEY = "cpu_burst.containerUsage"  # container id → CPU cores used since the previous round
ALLOWED_KEY = "cpu_burst.allowed"  # container id → the burst-period bucket's verdict this round
NODE_USAGE_KEY = "cpu_burst.nodeUsage"  # node CPU milli, averaged as Koordinator's overload window
POD_USAGE_KEY = "cpu_burst.podUsage"  # pod uid → CPU milli, averaged alike
#: the container runtimes of a containerID → systemd scope prefix (koordlet's cgroup path formatter)
SCOPE_PREFIXES = {"containerd": "cri-containerd-", "docker": "docker-", "cri-o": "crio-", "pouch": "pouch-"}
#: Koordinator averages the node's and pods' usage over min(5 × reconcile interval, 10 s)
WINDOW_ROUNDS, WINDOW_MAX_SECONDS = 5, 10.0
READ_LIMIT = 65536
_ACTIVE = ("Pending", "Running")


# -- the pods and containers --------------------------------------------------------------------------

@attrs.frozen
class ContainerView:
    name: str
    container_id: str
    limit_milli: int  # -1: no CPU limit
    running: bool
    cgroup_dir: str  # "" when the id names no known runtime


@attrs.frozen
class PodView:
    state: PodState
    key: str
    cfg: BurstConfig
    containers: tuple[ContainerView, ...]


def container_dir(driver: str, pod_dir: str, container_id: str) -> str:
    """``GetContainerCgroupParentDir``; ``""`` for an id that is not ``<runtime>://<id>`` of a known
    runtime (koordlet skips such a container)."""
    runtime, sep, cid = container_id.partition("://")
    if not sep or not cid or runtime not in SCOPE_PREFIXES or "/" in cid or "\0" in cid or cid in (".", ".."):
        return ""
    name = f"{SCOPE_PREFIXES[runtime]}{cid}.scope" if driver == "systemd" else cid
    return f"{pod_dir}/{name}"


def raw_qos(ps: PodState) -> str:
    """GetPodQoSClassRaw: the label's class, ``""`` without one (an unknown name is ``""`` as well)."""
    q = ps.pod.labels.get(LABEL_POD_QOS, "") if ps.pod is not None else ""
    return q if q in ("LSE", "LSR", "LS", "BE", "SYSTEM") else ""


def is_burstable(ps: PodState) -> bool:
    """IsPodCPUBurstable: not LSR, LSE or BE."""
    return raw_qos(ps) not in (QOS_LSR, QOS_LSE, QOS_BE)


def _statuses(raw: Any) -> list[Mapping[str, Any]]:
    status = raw.get("status") if isinstance(raw, Mapping) else None
    items = status.get("containerStatuses") if isinstance(status, Mapping) else None
    return [s for s in items if isinstance(s, Mapping)] if isinstance(items, list) else []


class CPUBurst:
    """Class-based: the burst-period buckets, the previous counters and the once-only logs live here."""

    def __init__(self) -> None:
        self.limiters: dict[str, BurstLimiter] = {}
        self._stat: dict[str, tuple[int, int]] = {}  # container id → (nr_periods, nr_throttled)
        self._usage: dict[str, tuple[float, int]] = {}  # container id → (time, usage ns)
        self._samples: deque[tuple[float, int | None, dict[str, int]]] = deque(maxlen=64)
        self._said: BoundedCache[Any, bool] = BoundedCache(10000)
        #: the last :meth:`pods` answer: (node state, args, restore, pods)
        self._pods_memo: tuple[NodeState, Args, bool, tuple[PodView, ...]] | None = None
        #: pod uid → (its inputs, its view's key, config and containers, or ``None`` when skipped): what
        #: :meth:`_pods` made of the pod last time; reused while the same Pod object (PodSource keeps it
        #: until the manifests change; frozen), cgroup dir, driver, node config and ``restore`` come back
        self._views: dict[str, tuple[tuple[Any, ...], tuple[str, BurstConfig, tuple[ContainerView, ...]] | None]] = {}

    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return Args

    # -- helpers -----------------------------------------------------------------------------------
    def _once(self, key: Any, event: str, level: str = "info", **kw: Any) -> None:
        if key in self._said:
            return
        self._said[key] = True
        getattr(log, level)(event, plugin=NAME, **kw)

    def pods(self, ns: NodeState, args: Args, *, restore: bool = False) -> list[PodView]:
        """The burstable pods of the node with their merged config and containers; ``restore``: every
        pod, whatever its phase, with policy ``none`` (burst 0, the kubelet's quota), annotation or not.
        A function of its inputs: the round's ``collect`` and ``qos_plan`` share one computation."""
        hit = self._pods_memo
        if hit is not None and hit[0] is ns and hit[1] is args and hit[2] == restore:
            return list(hit[3])
        out = self._pods(ns, args, restore)
        self._pods_memo = (ns, args, restore, tuple(out))
        return out

    def _pods(self, ns: NodeState, args: Args, restore: bool) -> list[PodView]:
        node_cfg = args.burst_config()
        out = []
        views = self._views
        seen: set[str] = set()
        for ps in ns.pods:
            pod = ps.pod
            if pod is None or not ps.cgroup_dir:
                continue
            inputs = (pod, ps.cgroup_dir, ns.cgroup_driver, node_cfg, restore)
            hit = views.get(ps.uid)
            if hit is not None and hit[0][0] is pod and hit[0][1:] == inputs[1:]:
                view = hit[1]
            else:
                view = self._pod_view(ps, ns, node_cfg, restore)
                views[ps.uid] = (inputs, view)
            seen.add(ps.uid)
            if view is not None:
                out.append(PodView(ps, *view))
        if len(views) > len(seen):
            for uid in [u for u in views if u not in seen]:
                del views[uid]
        return out

    def _pod_view(self, ps: PodState, ns: NodeState, node_cfg: BurstConfig, restore: bool,
                  ) -> tuple[str, BurstConfig, tuple[ContainerView, ...]] | None:
        """A burstable pod's key, merged config and containers (``None``: not burstable, or not active
        unless ``restore``); a function of the Pod, its cgroup dir, the driver, ``node_cfg`` and ``restore``."""
        assert ps.pod is not None
        if not is_burstable(ps):
            return None
        if not restore and ps.pod.phase not in _ACTIVE:
            return None
        key = ps.pod.key
        raw = ps.pod.annotations.get(ANNOTATION_POD_CPU_BURST)
        cfg = node_cfg
        if raw is not None:
            try:
                cfg = merge_pod_config(node_cfg, parse_pod_config(raw)) or node_cfg
            except ValueError as e:  # Koordinator logs it and uses the node's config
                warn_once(log, self._said, ("annotation", ps.uid, raw), "ignoring malformed cpu burst annotation",
                          plugin=NAME, pod=key, annotation=ANNOTATION_POD_CPU_BURST, error=str(e)[:200])
        if restore:
            cfg = attrs.evolve(cfg, policy=POLICY_NONE)
        spec = {c.name: c for c in ps.pod.containers}
        containers = []
        for st in _statuses(ps.pod.raw):
            name, cid = st.get("name"), st.get("containerID") or ""
            if not isinstance(name, str) or name not in spec or not isinstance(cid, str):
                continue
            state = st.get("state")
            running = isinstance(state, Mapping) and isinstance(state.get("running"), Mapping)
            limit = spec[name].limits.get("cpu", -1)
            containers.append(ContainerView(name, cid, limit, running,
                                            container_dir(ns.cgroup_driver, ps.cgroup_dir, cid) if cid else ""))
        return key, cfg, tuple(containers)

    # -- files ---------------------------------------------------------------------------------------
    @staticmethod
    def files(ns: NodeState, rel_dir: str) -> Mapping[str, str]:
        """The files this plugin reads of a pod or container dir: quota, burst, cpu.stat, usage."""
        return _files(ns.cgroup_version, rel_dir)

    # -- node QoS loop -------------------------------------------------------------------------------
    @hookimpl
    def collect(self, node_state: NodeState, args: Args, handle: AgentHandle) -> dict | None:
        roots = getattr(handle, "roots", None)
        root = roots.get("cgroup") if isinstance(roots, Mapping) else None
        if not root:
            return None
        now = float(handle.now())
        ns = node_state
        pods = self.pods(ns, args)
        values = read_values(root, ns, pods)
        merged = {**values, **ns.cgroups}
        throttled: dict[str, float] = {}
        usage: dict[str, float] = {}
        seen: set[str] = set()
        for p in pods:
            for c in p.containers:
                if not c.cgroup_dir:
                    continue
                seen.add(c.container_id)
                f = self.files(ns, c.cgroup_dir)
                stat = parse_kv(merged.get(f["stat"]))
                if "nr_periods" in stat and "nr_throttled" in stat:
                    cur = (stat["nr_periods"], stat["nr_throttled"])
                    prev = self._stat.get(c.container_id)
                    self._stat[c.container_id] = cur
                    if prev is not None:  # CalcCPUThrottledRatio, from the second point on
                        dp, dt = cur[0] - prev[0], cur[1] - prev[1]
                        throttled[c.container_id] = dt / dp if dp > 0 else 0.0
                used_ns = (_uint(merged.get(f["usage"])) if f["usage"]
                           else (stat["usage_usec"] * 1000 if "usage_usec" in stat else None))
                if used_ns is not None:
                    prev_u = self._usage.get(c.container_id)
                    self._usage[c.container_id] = (now, used_ns)
                    if prev_u is not None and now > prev_u[0] and used_ns >= prev_u[1]:
                        usage[c.container_id] = (used_ns - prev_u[1]) / 1e9 / (now - prev_u[0])
        for d in (self._stat, self._usage):
            for k in [k for k in d if k not in seen]:
                del d[k]
        allowed: dict[str, bool] = {}
        for p in pods:
            for c in quota_candidates(ns, p, merged):
                allowed[c.container_id] = limiter_allows(self.limiters, c.container_id, p.cfg, c.limit_milli,
                                                         usage.get(c.container_id), now)
        for gone in recycle(self.limiters, now):
            log.info("recycle limiter for container", plugin=NAME, container=gone)
        node_avg, pod_avg = self._window(now, ns)
        out: dict[str, Any] = {VALUES_KEY: values, THROTTLED_KEY: throttled, USAGE_KEY: usage, ALLOWED_KEY: allowed,
                               POD_USAGE_KEY: pod_avg, NodeState.COLLECTED_CGROUPS: values}
        if node_avg is not None:
            out[NODE_USAGE_KEY] = node_avg
        return out

    def _window(self, now: float, ns: NodeState) -> tuple[int | None, dict[str, int]]:
        """The node's and pods' CPU usage averaged over the last min(5 rounds, 10 s) of samples."""
        self._samples.append((now, ns.usage.get("cpu"), {p.uid: p.usage["cpu"] for p in ns.pods if "cpu" in p.usage}))
        if len(self._samples) >= 2:
            step = now - self._samples[-2][0]
            span = min(WINDOW_ROUNDS * step, WINDOW_MAX_SECONDS) if step > 0 else 0.0
        else:
            span = 0.0
        recent = [s for s in self._samples if now - s[0] <= span] or [self._samples[-1]]
        while self._samples and now - self._samples[0][0] > WINDOW_MAX_SECONDS:
            self._samples.popleft()
        nodes = [s[1] for s in recent if s[1] is not None]
        node_avg = sum(nodes) // len(nodes) if nodes else None
        sums: dict[str, int] = {}  # summed in sample order, as sum() of each pod's list was
        counts: dict[str, int] = {}
        for _, _, pods in recent:
            for uid, v in pods.items():
                if uid in sums:
                    sums[uid] += v
                    counts[uid] += 1
                else:
                    sums[uid] = v
                    counts[uid] = 1
        return node_avg, {uid: total // counts[uid] for uid, total in sums.items()}

    @hookimpl
    def qos_plan(self, node_state: NodeState, args: Args, handle: AgentHandle) -> list | None:
        return self.plan(node_state, args) or None

    @hookimpl
    async def shutdown(self, args: Args, handle: Handle | AgentHandle) -> None:
        """Burst 0 and the kubelet's quotas (policy ``none`` is exactly that) on the fresh node state."""
        if not isinstance(handle, AgentHandle) or handle.node_state is None or args is None:
            return
        ns = handle.node_state
        root = handle.roots.get("cgroup")
        pods = self.pods(ns, args, restore=True)
        if root:
            ns = attrs.evolve(ns, metrics={**ns.metrics, VALUES_KEY: read_values(root, ns, pods)})
        writes = self.plan(ns, args, restore=True)
        if writes:
            log.info("restoring cpu burst and cfs quotas", plugin=NAME, writes=len(writes))
            await handle.apply(writes)

    # -- the plan --------------------------------------------------------------------------------------
    def node_burst(self, ns: NodeState, args: Args) -> NodeBurst:
        metrics = ns.metrics
        node_usage = metrics.get(NODE_USAGE_KEY, ns.usage.get("cpu"))
        pod_avg = metrics.get(POD_USAGE_KEY)
        pods = []
        for ps in ns.pods:
            if ps.pod is None:  # not a pod koordlet knows (no metadata): its usage stays in the pool
                continue
            qos = raw_qos(ps)
            if qos not in ("LSE", "LSR", "BE"):  # node_state_for_burst counts an LS or unlabelled pod nowhere
                continue
            usage = pod_avg.get(ps.uid) if isinstance(pod_avg, Mapping) else ps.usage.get("cpu")
            pods.append(PodUsage(qos, ps.pod.requests.get("cpu", 0), usage))
        return node_state_for_burst(args.share_pool_threshold_percent, len(ns.cpu_ids), node_usage, pods)

    def plan(self, ns: NodeState, args: Args, *, restore: bool = False) -> list[FileWrite]:
        """The writes of one round (pure given ``ns``): Koordinator's ``start`` over every burstable pod."""
        collected = ns.metrics.get(VALUES_KEY)
        values = {**(collected if isinstance(collected, Mapping) else {}), **ns.cgroups}
        node = self.node_burst(ns, args)
        throttled = ns.metrics.get(THROTTLED_KEY) or {}
        allowed = ns.metrics.get(ALLOWED_KEY) or {}
        out: list[FileWrite] = []
        for p in self.pods(ns, args, restore=restore):
            out += self.pod_writes(ns, p, values, node, throttled, allowed)
        return out

    def pod_writes(self, ns: NodeState, p: PodView, values: Mapping[str, str], node: NodeBurst,
                   throttled: Mapping[str, float], allowed: Mapping[str, bool]) -> list[FileWrite]:
        pod_dir = p.state.cgroup_dir
        pod_files = self.files(ns, pod_dir)
        pod_quota = parse_quota(values.get(pod_files["quota"]), ns.cgroup_version)
        # applyCFSQuotaBurst's steps first: the burst must fit the quotas before and after them
        steps: list[QuotaStep] = []
        currents: dict[str, int | None] = {}
        for c in p.containers:
            if not c.cgroup_dir:
                continue
            currents[c.cgroup_dir] = parse_quota(values.get(self.files(ns, c.cgroup_dir)["quota"]), ns.cgroup_version)
        for c in quota_candidates(ns, p, values):
            ok = allowed.get(c.container_id)
            if ok is None:
                ok = fresh_limiter_allows(c.container_id, p.cfg)
            cur = currents[c.cgroup_dir]
            assert cur is not None  # quota_candidates checked it
            step = quota_step(c.cgroup_dir, milli_cpu_to_quota(c.limit_milli), cur, p.cfg, ok,
                              throttled.get(c.container_id), node)
            if step is not None:
                steps.append(step)
        sequence = pod_quota_sequence(pod_quota, steps)
        final = dict(sequence)
        # applyCPUBurst
        out: list[FileWrite] = []
        pod_burst = 0
        for c in p.containers:
            if not c.container_id or not c.cgroup_dir:
                continue
            want = static_cpu_burst(c.limit_milli, p.cfg)
            pod_burst += want
            base = milli_cpu_to_quota(c.limit_milli)
            out += self._burst_write(ns, p, c.cgroup_dir, want, values,
                                     [base, currents.get(c.cgroup_dir), final.get(c.cgroup_dir)], c.name)
        out += self._burst_write(ns, p, pod_dir, pod_burst, values,
                                 [kubelet_pod_quota(pod_quota, p, currents), pod_quota, final.get("")], "")
        for d, quota in sequence:
            out.append(self._quota_write(ns, d or pod_dir, quota, values))
        for s in steps:
            log.debug("scale container cfs quota", plugin=NAME, pod=p.key, dir=s.container_dir,
                      operation=s.op.value, node=node.value, current=s.current, target=s.target)
        return out

    def _burst_write(self, ns: NodeState, p: PodView, rel_dir: str, want: int, values: Mapping[str, str],
                     quotas: Iterable[int | None], container: str) -> list[FileWrite]:
        f = self.files(ns, rel_dir)
        if f["burst"] not in values:
            if f["quota"] not in values:  # the cgroup is gone (or was never there)
                self._once(("vanished", rel_dir), "cgroup not found, skipped", pod=p.key, container=container or None,
                           dir=rel_dir)
            else:  # the kernel has no CFS burst (before Linux 5.14)
                self._once(("unsupported", ns.cgroup_version), "the kernel has no cpu burst file, burst skipped",
                           file=f["burst"].rsplit("/", 1)[-1])
            return []
        value = burst_clamp(want, quotas)
        if value != want:
            self._once(("clamp", rel_dir, want, value), "cpu burst clamped to the cgroup's cfs quota (the kernel "
                       "refuses a larger burst)", pod=p.key, container=container or None, wanted=want, burst=value)
        return [FileWrite(f["burst"], str(value), plugin=NAME)]

    @staticmethod
    def _quota_write(ns: NodeState, rel_dir: str, quota: int, values: Mapping[str, str]) -> FileWrite:
        path = _files(ns.cgroup_version, rel_dir)["quota"]  # ns.cpu_quota_file(rel_dir), remembered
        if ns.cgroup_version == 1:
            return FileWrite(path, str(quota), plugin=NAME)
        parts = (values.get(path) or "").split()
        period = parts[1] if len(parts) == 2 and parts[1].isdigit() else "100000"
        return FileWrite(path, f"{quota} {period}" if quota > 0 else f"max {period}", plugin=NAME)


def kubelet_pod_quota(pod_quota: int | None, p: PodView, currents: Mapping[str, int | None]) -> int | None:
    """The pod's quota without this plugin's scaling: its current one minus what its containers have
    above their base (the pod moves by the containers' deltas); ``None`` when unlimited or unknown."""
    if pod_quota is None or pod_quota <= 0:
        return None
    extra = 0
    for c in p.containers:
        base, cur = milli_cpu_to_quota(c.limit_milli), currents.get(c.cgroup_dir) if c.cgroup_dir else None
        if base > 0 and cur is not None and cur > 0:
            extra += cur - base
    return pod_quota - extra


def quota_candidates(ns: NodeState, p: PodView, values: Mapping[str, str]) -> list[ContainerView]:
    """The containers applyCFSQuotaBurst gets as far as genOperationByContainer with: running, with a
    CPU limit, a cgroup and a readable quota."""
    out = []
    for c in p.containers:
        if not c.running or milli_cpu_to_quota(c.limit_milli) <= 0 or not c.cgroup_dir:
            continue
        if parse_quota(values.get(_files(ns.cgroup_version, c.cgroup_dir)["quota"]), ns.cgroup_version) is None:
            continue
        out.append(c)
    return out


# -- reading ------------------------------------------------------------------------------------------

def _uint(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.strip()
    return int(t) if t and len(t) <= 20 and t.isascii() and t.isdigit() else None


def parse_quota(text: str | None, version: int = 1) -> int | None:
    """v1 ``cpu.cfs_quota_us`` (``-1`` unlimited) or v2 ``cpu.max`` (``max 100000``) → µs, -1 unlimited;
    ``None`` for anything else (unreadable)."""
    if text is None:
        return None
    parts = text.split()
    if version == 1:
        if len(parts) != 1:
            return None
        return -1 if parts[0] == "-1" else _uint(parts[0])
    if len(parts) != 2 or _uint(parts[1]) is None:
        return None
    return -1 if parts[0] == "max" else _uint(parts[0])


def parse_kv(text: str | None) -> dict[str, int]:
    """``cpu.stat``'s ``key value`` lines (at most 64)."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines()[:64]:
        k, _, v = line.partition(" ")
        t = v.strip()  # _uint inline: this runs for every line of every container's cpu.stat each round
        if t and len(t) <= 20 and t.isascii() and t.isdigit():
            out[k.strip()] = int(t)
    return out


def read_file(path: str) -> str | None:
    """A cgroup file's stripped text; ``None`` when absent (a vanished cgroup, a kernel without the file),
    not a path (NUL), unreadable or not UTF-8. Through :func:`koordfw.read_cgroup_file` (a kept descriptor
    re-read: a few hundred small files a round)."""
    data = read_cgroup_file(path, READ_LIMIT)
    if data is None:
        return None
    try:
        return data.decode().strip()
    except UnicodeDecodeError:
        return None


@functools.lru_cache(maxsize=16384)
def _join(root: str, rel: str) -> str:
    """``os.path.join(root, rel)``, remembered: the same few hundred paths are read every round."""
    return os.path.join(root, rel)


@functools.lru_cache(maxsize=16384)
def _files(version: int, rel_dir: str) -> Mapping[str, str]:
    """:meth:`CPUBurst.files`, remembered: the same dirs' paths are needed several times every round."""
    ns = NodeState(cgroup_version=version)
    v1 = version == 1
    return types.MappingProxyType({
        "quota": ns.cpu_quota_file(rel_dir),
        "burst": ns.cgroup_file("cpu", rel_dir, "cpu.cfs_burst_us" if v1 else "cpu.max.burst"),
        "stat": ns.cgroup_file("cpu", rel_dir, "cpu.stat"),
        "usage": ns.cgroup_file("cpuacct", rel_dir, "cpuacct.usage") if v1 else ""})


def _needs_usage(cfg: BurstConfig) -> bool:
    """A container's CPU usage feeds only its burst-period bucket (:func:`limiter_allows`): read it only
    when the pod's config has one."""
    period = cfg.cfs_quota_burst_period_seconds
    return period is not None and period >= 0


@functools.lru_cache(maxsize=4096)
def _pod_reads(root: str, version: int, pod_dir: str, container_dirs: tuple[str, ...], usage: bool,
               ) -> tuple[tuple[str, str], ...]:
    """What :func:`read_values` reads of one pod, in its order: (relative path, absolute path) of the pod
    dir's quota and burst, then of each container dir's quota, burst, cpu.stat (and usage with ``usage``);
    remembered: the same pods' paths every round."""
    out: list[tuple[str, str]] = []
    f = _files(version, pod_dir)
    rels = [f["quota"], f["burst"]]
    for d in container_dirs:
        if d:
            f = _files(version, d)
            rels += [f[key] for key in (("quota", "burst", "stat", "usage") if usage else ("quota", "burst", "stat"))]
    for rel in rels:
        if rel:
            out.append((rel, _join(root, rel)))
    return tuple(out)


def read_values(root: str, ns: NodeState, pods: Iterable[PodView]) -> dict[str, str]:
    """The files that exist of the pods' dirs (quota, burst: all the plan reads of a pod) and of their
    containers' (quota, burst, cpu.stat for the throttled ratio, the CPU usage when a bucket needs it)."""
    out: dict[str, str] = {}
    version = ns.cgroup_version
    for p in pods:
        for rel, path in _pod_reads(root, version, p.state.cgroup_dir, tuple(c.cgroup_dir for c in p.containers),
                                    _needs_usage(p.cfg)):
            if rel not in out:
                v = read_file(path)
                if v is not None:
                    out[rel] = v
    return out
