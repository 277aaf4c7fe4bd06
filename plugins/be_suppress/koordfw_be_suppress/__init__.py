"""be_suppress: Koordinator's BE CPU suppress on the node agent (``qos_plan`` + ``shutdown``).

Koordinator ``pkg/koordlet/qosmanager/plugins/cpusuppress``: every round the CPU that best-effort pods
may use is ``capacity × cpuSuppressThresholdPercent − non-BE pod usage − non-BE host-app usage −
max(system usage, node reservation)`` (at least ``cpuSuppressMinPercent`` of capacity when set), and it
is enforced on the kubelet's besteffort QoS cgroup either as a cpuset (policy ``cpuset``, default) or as
a CFS quota (policy ``cfsQuota``); the other knob is restored. With ``enable: false`` (Koordinator's
default) both knobs are restored. Beyond Koordinator: ``beCPUIdle`` marks the besteffort cgroup
SCHED_IDLE (``cpu.idle = 1``) where the kernel has ``cpu.idle`` (Linux 5.15+), and ``lsPressureFeedback``
(:mod:`koordfw_be_suppress.feedback`) narrows the budget below Koordinator's while LS pods wait for CPU
(PSI) or are throttled (AIMD with a dead band and a floor).
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import structlog

from koordfw import AgentHandle, BoundedCache, FileWrite, Handle, NodeState, Pod, PodState, StashKey, hookimpl, warn_once
from koordfw.extension import (
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
    ANNOTATION_RESOURCE_STATUS,
    LABEL_POD_QOS,
    QOS_LSE,
    QOS_LSR,
)
from koordfw.inputs import camel, loads_json
from koordfw.nodestate import CFS_PERIOD_US, CPUInfo, format_cpuset
from koordfw.nodestate import parse_cpuset as _parse_cpuset

from .feedback import FeedbackState, LSPressureFeedback

log = structlog.get_logger("koordfw.be_suppress")

NAME = "be_suppress"
POLICY_CPUSET = "cpuset"
POLICY_CFS_QUOTA = "cfsQuota"
BE_MIN_QUOTA = 2000  # µs, beMinQuota
BE_MIN_CPUSET_CORES = 2  # beMinCPUSetCores
SUPPRESS_BYPASS_QUOTA_DELTA_RATIO = 0.01
BE_MAX_INCREASE_CPU_PERCENT = 0.1


def _percent(inst: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= 100):
        raise ValueError(f"{camel(attribute.name)}: must be between 0 and 100, got {value!r}")


#: (object, annotation value) already warned about: the plan runs every round, the warning once (a log
#: line's dedup, no effect on plans: process-wide)
_WARNED: BoundedCache[tuple[str, str], bool] = BoundedCache(4096)


def parse_cpuset(text: Any) -> list[int]:
    """A cpu list read from an annotation: a string, parsed by the kernel's parser (which refuses CPU ids
    from 8192 up before expanding anything). ``ValueError`` names the bad part."""
    if not isinstance(text, str):
        raise ValueError(f"expected a cpu list string, got {type(text).__name__}")
    return _parse_cpuset(text)


def _policy(inst: Any, attribute: Any, value: str) -> None:
    if value not in (POLICY_CPUSET, POLICY_CFS_QUOTA):
        raise ValueError(f"cpuSuppressPolicy: must be {POLICY_CPUSET!r} or {POLICY_CFS_QUOTA!r}, got {value!r}")


@attrs.frozen
class Args:
    """NodeSLO ``resourceUsedThresholdWithBE`` (Koordinator's names and defaults) plus ``beCPUIdle``."""

    enable: bool = False
    cpu_suppress_threshold_percent: int = attrs.field(default=65, validator=_percent)
    cpu_suppress_min_percent: int | None = attrs.field(default=None, validator=_percent)
    cpu_suppress_policy: str = attrs.field(default=POLICY_CPUSET, validator=_policy)
    # the odd capitalisation gives the profile key Koordinator-style spelling ``beCPUIdle``
    be_CPU_idle: bool = True
    #: beyond Koordinator: the LS-pressure feedback (off by default)
    ls_pressure_feedback: LSPressureFeedback = attrs.field(factory=LSPressureFeedback)


@hookimpl
def plugin_args() -> type[Args]:
    return Args


# -- the amount (calculateBESuppressCPU) -----------------------------------------------------------

def node_reserved_milli(ns: NodeState) -> int:
    """max(kubelet reserved = capacity − allocatable, node.koordinator.sh/reservation) for cpu."""
    kubelet = max(ns.capacity.get("cpu", 0) - ns.allocatable.get("cpu", ns.capacity.get("cpu", 0)), 0)
    if not ns.annotations.get(ANNOTATION_NODE_RESERVATION):  # none: what an empty Reservation says, unbuilt
        return kubelet
    try:
        anno = ns.reservation().resources.get("cpu", 0)
    except (ValueError, RecursionError) as e:  # Koordinator logs and ignores a malformed reservation
        warn_once(log, _WARNED, (ns.name, str(ns.annotations.get(ANNOTATION_NODE_RESERVATION))),
                   "ignoring malformed node reservation", node=ns.name, error=str(e) or type(e).__name__)
        anno = 0
    return max(kubelet, anno)


def be_suppress_milli(ns: NodeState, args: Args) -> int | None:
    """The CPU (milli) BE pods may use now; ``None`` when the round must be skipped (no node usage or no
    pods, as Koordinator skips). May be negative: the policies apply their own minimum."""
    if "cpu" not in ns.usage or not ns.pods:
        return None
    pods_all = pods_non_be = 0
    for p in ns.pods:
        u = p.usage.get("cpu", 0)
        pods_all += u
        if not p.is_be:  # pods without metadata have qos "" and count as non-BE
            pods_non_be += u
    apps_all = apps_non_be = 0
    for a in ns.host_apps:
        if "cpu" not in a.usage:
            continue
        apps_all += a.usage["cpu"]
        if not a.is_be:
            apps_non_be += a.usage["cpu"]
    system = max(ns.usage["cpu"] - pods_all - apps_all, 0)
    system = max(system, node_reserved_milli(ns))
    cap = ns.capacity.get("cpu", 0)
    suppress = cap * args.cpu_suppress_threshold_percent // 100 - pods_non_be - apps_non_be - system
    if args.cpu_suppress_min_percent is not None:
        suppress = max(suppress, cap * args.cpu_suppress_min_percent // 100)
    return suppress


# -- policy cfsQuota (adjustByCfsQuota) ------------------------------------------------------------

def cfs_quota_target(suppress_milli: int, capacity_milli: int, current: int) -> int | None:
    """The new besteffort ``cfs_quota_us``, or ``None`` to keep the current one (change too small)."""
    new = max(suppress_milli * CFS_PERIOD_US // 1000, BE_MIN_QUOTA)
    cap_cores = -(-capacity_milli // 1000)  # Quantity.Value() rounds up
    min_delta = float(cap_cores) * float(CFS_PERIOD_US) * SUPPRESS_BYPASS_QUOTA_DELTA_RATIO
    if abs(float(new) - float(current)) < min_delta and new != BE_MIN_QUOTA:
        return None
    max_inc = float(cap_cores) * float(CFS_PERIOD_US) * BE_MAX_INCREASE_CPU_PERCENT
    # no step limit while the quota is unset (-1): the first suppression applies at once
    if float(new) - float(current) > max_inc and current != -1:
        new = current + int(max_inc)
    return new


# -- policy cpuset (adjustByCPUSet, calculateBESuppressCPUSetPolicy) -------------------------------

def pick_cpus(n: int, procs: list[CPUInfo]) -> list[int]:
    """Choose ``n`` CPUs, hyper-thread pairs first, spread round-robin over (NUMA node, socket) buckets.

    Returns them in selection order; ``[]`` when fewer than ``n`` are available.
    """
    if len(procs) < n:
        return []
    nprocs = len(procs)
    buckets: dict[int, list[CPUInfo]] = {}
    for p in procs:
        buckets.setdefault((p.node + nprocs) * (p.socket + 1), []).append(p)
    order = [sorted(b, key=lambda c: (c.core, c.id)) for b in buckets.values()]
    order.sort(key=lambda b: (-len(b), b[0].id))
    out: list[int] = []
    used: set[int] = set()
    need = n
    # pair phase: one same-core pair per bucket per round; stop after a round without progress
    i, before = 0, -1
    while True:
        if need <= 1:
            break
        if i == 0:
            if before == need:
                break
            before = need
        b = order[i]
        for j in range(len(b) - 1):
            if b[j].id in used:
                continue
            if b[j].core == b[j + 1].core:
                out += [b[j].id, b[j + 1].id]
                used.update((b[j].id, b[j + 1].id))
                need -= 2
                break
        i = (i + 1) % len(order)
    # single phase: from where the pair phase stopped, one CPU per bucket per round
    start, before = i, -1
    while True:
        if need <= 0:
            break
        if i == start:
            if before == need:
                break
            before = need
        for c in order[i]:
            if c.id not in used:
                out.append(c.id)
                used.add(c.id)
                need -= 1
                break
        i = (i + 1) % len(order)
    return out


def _raw_qos(pod: Pod | None) -> str:
    return pod.labels.get(LABEL_POD_QOS, "") if pod is not None else ""


def _pod_cpuset(ps: PodState) -> list[int]:
    """CPUs the scheduler bound a pod to (``scheduling.koordinator.sh/resource-status`` cpuset)."""
    raw = ps.annotations.get(ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return []
    try:
        obj = loads_json(raw)
        return parse_cpuset(obj.get("cpuset") or "") if isinstance(obj, dict) else []
    except ValueError as e:  # this pod's cpuset only is unknown
        warn_once(log, _WARNED, (ps.uid, raw), "ignoring malformed resource-status", pod=ps.pod.key if ps.pod else ps.uid,
                   annotation=ANNOTATION_RESOURCE_STATUS, error=str(e))
        return []


def _system_qos_exclusive(ns: NodeState) -> set[int]:
    raw = ns.annotations.get(ANNOTATION_NODE_SYSTEM_QOS_RESOURCE)
    if not raw:
        return set()
    try:
        obj = loads_json(raw)
        if not isinstance(obj, dict) or not obj.get("cpuset"):
            return set()
        if obj.get("cpusetExclusive") is False:  # IsCPUSetExclusive: unset means exclusive
            return set()
        return set(parse_cpuset(obj["cpuset"]))
    except ValueError as e:
        warn_once(log, _WARNED, (ns.name, raw), "ignoring malformed system-qos-resource", node=ns.name,
                   annotation=ANNOTATION_NODE_SYSTEM_QOS_RESOURCE, error=str(e))
        return set()


def _reserved_cpus(ns: NodeState) -> set[int]:
    if not ns.annotations.get(ANNOTATION_NODE_RESERVATION):  # none: no reserved CPUs (every round's case)
        return set()
    try:
        return set(ns.reservation().reserved_cpus)
    except (ValueError, RecursionError):
        return set()


def cpuset_target(ns: NodeState, suppress_milli: int) -> list[int]:
    """The BE cpuset (selection order) for the cpuset policy; ``[]`` means write nothing."""
    pool: dict[int, str] = {}
    for ps in ns.pods:
        qos = _raw_qos(ps.pod)
        for cpu in _pod_cpuset(ps):
            pool[cpu] = qos
    excluded = _reserved_cpus(ns) | _system_qos_exclusive(ns)
    lsr: list[CPUInfo] = []
    ls: list[CPUInfo] = []
    topo = ns.topology()
    for p in topo:
        if p.id in excluded:
            continue
        if pool.get(p.id) == QOS_LSR:
            lsr.append(p)
        elif pool.get(p.id) != QOS_LSE:  # LSE CPUs are never lent to BE
            ls.append(p)
    cpus = max(-(-suppress_milli // 1000), BE_MIN_CPUSET_CORES)
    old = ns.cpuset(ns.qos_dir("besteffort"))
    old_n = len(old) if old is not None else len(topo)
    max_inc = math.ceil(float(len(topo)) * BE_MAX_INCREASE_CPU_PERCENT)
    if cpus - old_n > max_inc:
        cpus = old_n + max_inc
    if not lsr and not ls:
        return []
    lsr_n = cpus * len(lsr) // (len(lsr) + len(ls))
    out: list[int] = []
    if lsr_n > 0:
        out += pick_cpus(lsr_n, lsr)
    if cpus - lsr_n > 0:
        out += pick_cpus(cpus - lsr_n, ls)
    return out


def recover_cpuset(ns: NodeState) -> list[int]:
    """calcBECPUSet: all CPUs minus SYSTEM-exclusive, reserved and LSE-bound CPUs."""
    excluded = _system_qos_exclusive(ns) | _reserved_cpus(ns)
    for ps in ns.pods:
        pod = ps.pod  # _raw_qos(pod) == QOS_LSE, inline: this runs for every pod of every round
        if pod is not None and pod.labels.get(LABEL_POD_QOS) == QOS_LSE:
            excluded.update(_pod_cpuset(ps))
    cpus = ns.cpu_ids
    return [c for c in cpus if c not in excluded] if excluded else cpus


# -- writes -----------------------------------------------------------------------------------------

def be_cgroup_dirs(ns: NodeState, containers: bool = True) -> list[str]:
    """The besteffort QoS dir, its pod dirs and (optionally) their container dirs, top-down."""
    root = ns.qos_dir("besteffort")
    under = root + "/"
    pods = [p for p in ns.pods if p.cgroup_dir.startswith(under)]
    dirs = [root]
    dirs += sorted([p.cgroup_dir for p in pods])
    if containers:
        dirs += sorted([c.cgroup_dir for p in pods for c in p.containers if c.cgroup_dir])
    return dirs


def _kubelet_static(ns: NodeState) -> bool:
    raw = ns.annotations.get(ANNOTATION_KUBELET_CPU_MANAGER_POLICY)
    if not raw:
        return False
    try:
        obj = loads_json(raw)
    except ValueError as e:
        warn_once(log, _WARNED, (ns.name, raw), "ignoring malformed kubelet cpu-manager-policy", node=ns.name,
                   annotation=ANNOTATION_KUBELET_CPU_MANAGER_POLICY, error=str(e))
        return False
    return isinstance(obj, dict) and obj.get("policy") == "static"


#: the most entries :data:`_CPUSET_WRITES` and :data:`_CPUSET_TEXT` hold (the oldest goes first)
_CACHE_MAX = 4096
#: (cgroup version, cgroup dir, value) → the ``cpuset.cpus`` FileWrite of that dir (:func:`_cpuset_write`):
#: a pod's writes are the same round after round while it stays and the node's CPUs and the BE cpuset do
#: not change (the key is all a write's path and value depend on), so each is built once, not once a round
#: (FileWrite is frozen: the same object is safely handed out again). A function of the key alone:
#: process-wide
_CPUSET_WRITES: BoundedCache[tuple[int, str, str], FileWrite] = BoundedCache(_CACHE_MAX)


def _cpuset_write(ns: NodeState, rel_dir: str, value: str) -> FileWrite:
    """``FileWrite(ns.cpuset_file(rel_dir), value, plugin=NAME)``, remembered."""
    key = (ns.cgroup_version, rel_dir, value)
    w = _CPUSET_WRITES.get(key)
    if w is None:
        w = _CPUSET_WRITES[key] = FileWrite(ns.cpuset_file(rel_dir), value, plugin=NAME)
    return w


#: CPU ids (as recover_cpuset gives them) → their cpu list text (:func:`format_cpuset`): each node's recover
#: value, the same every round; a function of the key alone: process-wide
_CPUSET_TEXT: BoundedCache[tuple[int, ...], str] = BoundedCache(_CACHE_MAX)


def _cpuset_text(cpus: list[int]) -> str:
    """``format_cpuset(cpus)``, remembered by the ids as given."""
    key = tuple(cpus)
    text = _CPUSET_TEXT.get(key)
    if text is None:
        text = _CPUSET_TEXT[key] = format_cpuset(cpus)
    return text


def cpuset_writes(ns: NodeState, cpus: list[int]) -> list[FileWrite]:
    """applyCPUSetWithNonePolicy: old ∪ new top-down, then new bottom-up; static policy: containers only."""
    if not cpus:
        return []
    new = format_cpuset(cpus)
    root = ns.qos_dir("besteffort")
    if _kubelet_static(ns):
        dirs = [c.cgroup_dir for p in ns.pods if p.cgroup_dir.startswith(root + "/")
                for c in p.containers if c.cgroup_dir]
        return recover_writes_cpuset(ns, containers=False) + [_cpuset_write(ns, d, new) for d in sorted(dirs)]
    dirs = be_cgroup_dirs(ns)
    old = ns.cpuset(root) or []
    merged = format_cpuset(set(old) | set(cpus))
    out = [_cpuset_write(ns, d, merged) for d in dirs]
    out += [_cpuset_write(ns, d, new) for d in reversed(dirs)]
    return out


def recover_writes_cpuset(ns: NodeState, containers: bool = True) -> list[FileWrite]:
    cpus = recover_cpuset(ns)
    if not cpus:
        return []
    value = _cpuset_text(cpus)
    return [_cpuset_write(ns, d, value) for d in be_cgroup_dirs(ns, containers)]


def recover_writes_quota(ns: NodeState) -> list[FileWrite]:
    return [ns.cpu_quota_write(ns.qos_dir("besteffort"), -1, plugin=NAME)]


def idle_writes(ns: NodeState, on: bool) -> list[FileWrite]:
    """``cpu.idle`` of the besteffort dir, only where the kernel has it (the file was read)."""
    path = ns.cpu_idle_file(ns.qos_dir("besteffort"))
    if path not in ns.cgroups:
        return []
    return [FileWrite(path, "1" if on else "0", plugin=NAME)]


def restore_writes(ns: NodeState) -> list[FileWrite]:
    """Undo everything this plugin may have throttled: quota −1, cpuset all allowed CPUs, cpu.idle 0."""
    return recover_writes_quota(ns) + recover_writes_cpuset(ns) + idle_writes(ns, False)


def plan(ns: NodeState, args: Args, budget_milli: int | None = None) -> list[FileWrite]:
    """The desired writes for one round (pure). ``budget_milli``: the LS-pressure feedback's budget, applied
    when below Koordinator's."""
    if not args.enable:
        return restore_writes(ns)
    out: list[FileWrite] = []
    suppress = be_suppress_milli(ns, args)
    if suppress is not None and budget_milli is not None:
        suppress = min(suppress, budget_milli)
    if suppress is not None:
        if args.cpu_suppress_policy == POLICY_CFS_QUOTA:
            be_dir = ns.qos_dir("besteffort")
            cur = ns.cpu_quota(be_dir)
            target = cfs_quota_target(suppress, ns.capacity.get("cpu", 0), -1 if cur is None else cur)
            if target is not None:
                out.append(ns.cpu_quota_write(be_dir, target, plugin=NAME))
            out += recover_writes_cpuset(ns)
        else:
            out += cpuset_writes(ns, cpuset_target(ns, suppress))
            out += recover_writes_quota(ns)
    out += idle_writes(ns, args.be_CPU_idle)
    return out


#: the feedback loop's state, in the handle's stash (one per agent); only the live agent calls ``collect``
FEEDBACK = StashKey[FeedbackState]()


def _forget_feedback(handle: Handle | AgentHandle) -> None:
    if FEEDBACK in handle.stash:
        del handle.stash[FEEDBACK]


@hookimpl
def collect(node_state: NodeState, args: Args, handle: AgentHandle) -> dict[str, Any] | None:
    """Read the LS pressure signal and take one feedback step (only with ``lsPressureFeedback.enable``)."""
    cfg = args.ls_pressure_feedback
    if not args.enable or not cfg.enable:
        _forget_feedback(handle)
        return None
    fb = handle.stash.setdefault(FEEDBACK, FeedbackState())
    roots = getattr(handle, "roots", None)
    now = float(handle.now())
    sig = fb.read_signal(node_state, cfg, roots.get("cgroup") if isinstance(roots, dict) else None, now)
    fb.step(cfg, be_suppress_milli(node_state, args), node_state.capacity.get("cpu", 0), sig, now)
    return {"be_suppress": dict(fb.report())}


def feedback_budget(handle: AgentHandle) -> int | None:
    """This round's feedback budget of the agent behind ``handle`` (``None``: Koordinator's alone)."""
    fb = handle.stash.get(FEEDBACK, None)
    return fb.applied_milli if fb is not None else None


@hookimpl
def qos_plan(node_state: NodeState, args: Args, handle: AgentHandle) -> list[FileWrite]:
    budget = feedback_budget(handle) if args.enable and args.ls_pressure_feedback.enable else None
    return plan(node_state, args, budget)


@hookimpl
async def shutdown(args: Args, handle: Handle | AgentHandle) -> None:
    """Restore the besteffort knobs through the agent (no-op for engines without a node)."""
    _forget_feedback(handle)
    if not isinstance(handle, AgentHandle) or handle.node_state is None:
        return
    await handle.apply(restore_writes(handle.node_state))
