"""What Koordinator's cgroup reconciler computes (``pkg/koordlet/qosmanager/plugins/cgreconcile``), as pure
functions of a node state: the memory QoS values of the QoS-level, pod and container cgroups, and the
FileWrites that set them in Koordinator's leveled order.

Values (``calculatePodResources``, ``calculateContainerResources``, ``updateCgroupSummaryForQoS``,
``completeCgroupSummaryForQoS``, ``calculateQoSResources``):

* pod: ``memory.min = request × minLimitPercent / 100``, ``memory.low = request × lowLimitPercent / 100``
  (raised to ``memory.min`` when lower and not 0), the wmark knobs, ``memory.priority``,
  ``memory.use_priority_oom`` (``priorityEnable``) and ``memory.oom.group`` as configured. The request is
  the pod's effective memory request (kube's ``PodRequests``), for a pod labelled BE the sum of its
  containers' (and sidecars') ``kubernetes.io/batch-memory`` requests.
* container: ``memory.min``/``memory.low`` from the container's own request (0 when unset), and
  ``memory.high = ⌊(request + (limit − request) × throttlingPercent / 100) / pageSize⌋ × pageSize`` with the
  container's memory limit, the node's allocatable memory without one; ``throttlingPercent: 0`` resets it
  to ``max``; raised to ``memory.min`` when lower.
* QoS levels: ``memory.min``/``memory.low`` of the burstable and besteffort dirs are the sums over their
  running pods, the kubepods dir (Guaranteed, the ancestor of both) the sum over all three; the priority
  knobs of each level come from its class (Guaranteed: lsrClass, Burstable: lsClass, BestEffort: beClass).

Only active pods (Pending, Running) count. ``memory.min``, ``memory.low`` and ``memory.high`` are
"mergeable" (``LeveledUpdateBatch``): walking the levels top-down each is written only where the new value
is larger than the current one, then bottom-up to its value, so no child is ever above its parent on
the way; the other knobs are written once, top-down. A file is written only where the kernel has it
(it was read this round): Anolis' wmark and priority files are absent elsewhere.
"""

from __future__ import annotations

import resource
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koordfw import FileWrite, NodeState, PodState
from koordfw.extension import BATCH_MEMORY, LABEL_POD_QOS, QOS_BE

from .config import KUBE_QOS_CLASS, MemoryQOSArgs, PodPolicy, Settings, pod_settings

PLUGIN = "memory_qos"
PAGE_SIZE = resource.getpagesize()  # system.PageSize
MAX_INT64 = 2**63 - 1  # what Koordinator writes for "unlimited"; written as the kernel's "max"
#: the memory QoS files, in the order Koordinator's makeCgroupResources writes them; True: mergeable
FILES: tuple[tuple[str, bool], ...] = (
    ("memory.min", True), ("memory.low", True), ("memory.high", True),
    ("memory.wmark_ratio", False), ("memory.wmark_scale_factor", False), ("memory.wmark_min_adj", False),
    ("memory.priority", False), ("memory.use_priority_oom", False), ("memory.oom.group", False),
)
MERGEABLE = frozenset(name for name, m in FILES if m)
#: kube QoS levels in Koordinator's order (Guaranteed first: its cgroup is the others' ancestor)
KUBE_LEVELS = ("Guaranteed", "Burstable", "BestEffort")
_ACTIVE = ("Pending", "Running")
#: a container runtime (``<runtime>://<id>``) → its systemd scope prefix (Koordinator's
#: cgroupPathFormatterInSystemd.ContainerDirFn)
SCOPE_PREFIXES = {"containerd": "cri-containerd-", "docker": "docker-", "cri-o": "crio-", "pouch": "pouch-"}


def _go_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _pct(value: int, percent: int) -> int:
    return _go_div(value * percent, 100)


@attrs.frozen
class CgroupValues:
    """The values one cgroup dir gets: file name → int, in :data:`FILES` order."""

    dir: str
    values: tuple[tuple[str, int], ...]


def _values(dir_: str, vals: Mapping[str, int | None]) -> CgroupValues:
    return CgroupValues(dir_, tuple((f, v) for f, _ in FILES if (v := vals.get(f)) is not None))


def format_value(value: int) -> str:
    return "max" if value >= MAX_INT64 else str(value)


def parse_value(text: str | None) -> int | None:
    """A memory file's value (``max`` = unlimited), ``None`` when not an integer."""
    if text is None:
        return None
    t = text.strip()
    if t == "max":
        return MAX_INT64
    neg = t.startswith("-")
    digits = t[1:] if neg else t
    if not digits or len(digits) > 19 or not digits.isascii() or not digits.isdigit():
        return None
    return -int(digits) if neg else int(digits)


# -- requests and limits ----------------------------------------------------------------------------

def is_be_raw(ps: PodState) -> bool:
    """``GetPodQoSClassRaw(pod) == BE``: the pod's own label, not a class derived from its kube QoS."""
    return ps.pod is not None and ps.pod.labels.get(LABEL_POD_QOS) == QOS_BE


def _raw_spec(ps: PodState) -> Mapping[str, Any]:
    raw = ps.pod.raw if ps.pod is not None else None
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _sidecar_names(ps: PodState) -> set[str]:
    init = _raw_spec(ps).get("initContainers")
    if not isinstance(init, list):
        return set()
    return {str(c.get("name")) for c in init if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"}


def pod_memory_request(ps: PodState) -> int:
    """The request memory.min/low are computed from: kube's effective request, for a BE pod the sum of its
    containers' and sidecars' batch-memory requests (``GetPodBEMemoryByteRequestIgnoreUnlimited``)."""
    assert ps.pod is not None
    if not is_be_raw(ps):
        return ps.pod.requests.get("memory", 0)
    sidecars = _sidecar_names(ps)
    conts = list(ps.pod.containers) + [c for c in ps.pod.init_containers if c.name in sidecars]
    return sum(c.requests[BATCH_MEMORY] for c in conts if c.requests.get(BATCH_MEMORY, -1) >= 0)


def container_request_limit(ps: PodState, c: Any) -> tuple[int, int]:
    """(request, limit) of a container in bytes; limit −1 when unset, request 0 when unset."""
    if not is_be_raw(ps):
        req, lim = c.requests.get("memory", 0), c.limits.get("memory", -1)
    else:
        req, lim = c.requests.get(BATCH_MEMORY, -1), c.limits.get(BATCH_MEMORY, -1)
    return max(req, 0), lim


# -- cgroup dirs ------------------------------------------------------------------------------------

def container_dir_name(driver: str, container_id: str) -> str | None:
    """The cgroup dir name of a container from its ``containerID`` (``containerd://<id>``), ``None``
    when the ID cannot be parsed."""
    runtime, sep, cid = container_id.strip('"').partition("://")
    if not sep or cid in ("", ".", "..") or "/" in cid or "\x00" in cid or len(cid) > 200:
        return None
    if driver != "systemd":
        return cid
    prefix = SCOPE_PREFIXES.get(runtime)
    return f"{prefix}{cid}.scope" if prefix is not None else None


def container_ids(ps: PodState) -> dict[str, str]:
    """Container name → ``containerID`` from the pod's status (init containers' first, as
    ``FindContainerIdAndStatusByName`` looks them up); containers without an ID are not running."""
    raw = ps.pod.raw if ps.pod is not None else None
    status = raw.get("status") if isinstance(raw, Mapping) else None
    out: dict[str, str] = {}
    if not isinstance(status, Mapping):
        return out
    for key in ("containerStatuses", "initContainerStatuses"):  # the later wins: init first
        items = status.get(key)
        for s in items if isinstance(items, list) else ():
            if isinstance(s, Mapping) and isinstance(s.get("name"), str) and isinstance(s.get("containerID"), str) \
                    and s["containerID"]:
                out[s["name"]] = s["containerID"]
    return out


def container_dirs(ns: NodeState, ps: PodState) -> list[tuple[Any, str]]:
    """(spec container, cgroup dir) of each running app container of the pod, in spec order."""
    if ps.pod is None or not ps.cgroup_dir:
        return []
    ids = container_ids(ps)
    out = []
    for c in ps.pod.containers:
        cid = ids.get(c.name)
        name = container_dir_name(ns.cgroup_driver, cid) if cid else None
        if name is not None:
            out.append((c, f"{ps.cgroup_dir}/{name}"))
    return out


def is_active(ps: PodState) -> bool:
    return ps.pod is not None and ps.pod.phase in _ACTIVE and bool(ps.cgroup_dir)


# -- values -----------------------------------------------------------------------------------------

def _static(cfg: Settings) -> dict[str, int | None]:
    return {"memory.wmark_ratio": cfg.wmark_ratio, "memory.wmark_scale_factor": cfg.wmark_scale_permill,
            "memory.wmark_min_adj": cfg.wmark_min_adj, "memory.priority": cfg.priority,
            "memory.use_priority_oom": cfg.priority_enable, "memory.oom.group": cfg.oom_kill_group}


def pod_values(ps: PodState, cfg: Settings) -> CgroupValues:
    """calculatePodResources."""
    req = pod_memory_request(ps)
    mn, low = _pct(req, cfg.min_limit_percent), _pct(req, cfg.low_limit_percent)
    if 0 < low < mn:
        low = mn
    return _values(ps.cgroup_dir, {"memory.min": mn, "memory.low": low, **_static(cfg)})


def container_values(ns: NodeState, ps: PodState, c: Any, dir_: str, cfg: Settings) -> CgroupValues:
    """calculateContainerResources."""
    req, lim = container_request_limit(ps, c)
    mn, low = _pct(req, cfg.min_limit_percent), _pct(req, cfg.low_limit_percent)
    tp = cfg.throttling_percent
    if tp == 0:
        high = MAX_INT64
    else:
        top = lim if lim > 0 else ns.allocatable.get("memory", 0)
        high = _go_div(req + _pct(top - req, tp), PAGE_SIZE) * PAGE_SIZE
    if 0 < low < mn:
        low = mn
    if 0 < high < mn:
        high = mn
    return _values(dir_, {"memory.min": mn, "memory.low": low, "memory.high": high, **_static(cfg)})


def policy_of(ps: PodState, policies: Mapping[str, PodPolicy | None]) -> PodPolicy | None:
    return policies.get(ps.uid)


@attrs.frozen
class Plan:
    """The values of one round, by level."""

    qos: tuple[CgroupValues, ...]
    pods: tuple[CgroupValues, ...]
    containers: tuple[CgroupValues, ...]


def compute(ns: NodeState, args: MemoryQOSArgs, policies: Mapping[str, PodPolicy | None]) -> Plan:
    """calculateResources: the QoS-level, pod and container values for the node's active pods.
    ``policies``: pod uid → its parsed annotation (absent or ``None``: none or unreadable)."""
    sums: dict[str, dict[str, int]] = {k: {} for k in KUBE_LEVELS}
    pods: list[CgroupValues] = []
    conts: list[CgroupValues] = []
    for ps in ns.pods:
        if not is_active(ps):
            continue
        assert ps.pod is not None
        cfg = pod_settings(args, ps.qos, policy_of(ps, policies))
        kube = ps.kube_qos or ps.pod.kube_qos
        req = pod_memory_request(ps)
        s = sums.setdefault(kube, {})
        s["memory.min"] = s.get("memory.min", 0) + _pct(req, cfg.min_limit_percent)
        s["memory.low"] = s.get("memory.low", 0) + _pct(req, cfg.low_limit_percent)
        pods.append(pod_values(ps, cfg))
        conts += [container_values(ns, ps, c, d, cfg) for c, d in container_dirs(ns, ps)]
    total = {f: sum(sums[k][f] for k in KUBE_LEVELS if f in sums[k]) for f in ("memory.min", "memory.low")
             if any(f in sums[k] for k in KUBE_LEVELS)}
    sums["Guaranteed"] = total
    qos = []
    for kube in KUBE_LEVELS:
        cls = args.class_settings(KUBE_QOS_CLASS[kube])
        vals: dict[str, int | None] = {**sums[kube], "memory.priority": cls.priority,
                                       "memory.use_priority_oom": cls.priority_enable,
                                       "memory.oom.group": cls.oom_kill_group}
        qos.append(_values(ns.qos_dir(kube), vals))
    return Plan(tuple(qos), tuple(pods), tuple(conts))


# -- writes -----------------------------------------------------------------------------------------

def leveled_writes(ns: NodeState, levels: Iterable[Iterable[CgroupValues]], current: Mapping[str, str]) -> list[FileWrite]:
    """LeveledUpdateBatch as FileWrites: top-down every knob (a mergeable one only when it grows, and
    only when its current value is known), then bottom-up the mergeable ones. ``current``: path → the
    file's text for every file that exists; the others are not written."""
    levels = [list(level) for level in levels]
    out: list[FileWrite] = []
    for level in levels:
        for cv in level:
            for name, value in cv.values:
                path = ns.cgroup_file("memory", cv.dir, name)
                if path not in current:
                    continue
                if name in MERGEABLE:
                    cur = parse_value(current[path])
                    if cur is None or value <= cur:
                        continue
                out.append(FileWrite(path, format_value(value), plugin=PLUGIN))
    for level in reversed(levels):
        for cv in level:
            for name, value in cv.values:
                path = ns.cgroup_file("memory", cv.dir, name)
                if name in MERGEABLE and path in current:
                    out.append(FileWrite(path, format_value(value), plugin=PLUGIN))
    return out


def plan_writes(ns: NodeState, args: MemoryQOSArgs, policies: Mapping[str, PodPolicy | None],
                current: Mapping[str, str]) -> list[FileWrite]:
    """Every round: the whole node, leveled."""
    p = compute(ns, args, policies)
    return leveled_writes(ns, (p.qos, p.pods, p.containers), current)


def direct_writes(ns: NodeState, values: Iterable[CgroupValues], current: Mapping[str, str]) -> list[FileWrite]:
    """The values as they are, in order, where the files exist (a pod's or container's start)."""
    out = []
    for cv in values:
        for name, value in cv.values:
            path = ns.cgroup_file("memory", cv.dir, name)
            if path in current:
                out.append(FileWrite(path, format_value(value), plugin=PLUGIN))
    return out
