"""The node side of cpu_topology: apply each bound pod's cpuset and keep the shared pools right.

For a node where at least one pod holds a cpuset (``scheduling.koordinator.sh/resource-status``):

* a bound pod (any QoS) gets exactly its cpuset on its pod cgroup and every container cgroup;
* LS pods, and LSE/LSR pods without a cpuset, get the **LS share pool**: all CPUs − CPUs bound to
  LSE/LSR pods − the node's reserved CPUs (``node.koordinator.sh/reservation``);
* BE pods get the **BE pool**: all CPUs − CPUs bound to LSE pods − reserved CPUs (LSR cores may be lent
  to BE, LSE cores never), kept inside the besteffort QoS cgroup's current cpuset (which CPU suppress
  may have narrowed).

A NUMA-aware pod (its resource-status has ``numaNodeResources`` with cpu, written by the scheduler under a NUMA
topology policy) without a cpuset of its own gets the LS share pool's CPUs **of its NUMA nodes** (koordlet's
cpuset hook, ``getCPUFromSharePoolByAllocFn``; BE pods only with Koordinator's BECPUManager gate, not here),
and its pod dir and containers get ``cpuset.mems`` = those NUMA nodes, as kubelet's memory manager pins a
pod's memory (koordlet leaves ``cpuset.mems`` alone).

Only pods whose manifest the agent knows are touched (a pod seen only as a cgroup may be a kubelet
static-policy pod with its own CPUs), SYSTEM pods are left alone, and a node where no pod holds a
cpuset gets no writes at all. For cgroup v1, where a child's cpuset must stay inside its parent's,
each pod is written in a safe order: widen the pod dir, set the containers, then narrow the pod dir.
"""

from __future__ import annotations

import structlog

from koordfw import FileWrite, NodeState, PodState, hookimpl
from koordfw.extension import ANNOTATION_RESOURCE_STATUS, BATCH_CPU, QOS_BE, QOS_LS, QOS_LSE, QOS_LSR
from koordfw.inputs import loads_json
from koordfw.nodestate import ContainerState

from .cpuset import format_cpuset, parse_cpuset
from .numa import parse_numa_node_resources

log = structlog.get_logger("koordfw.cpu_topology")

PLUGIN = "cpu_topology_agent"


def bound_cpus(p: PodState) -> frozenset[int] | None:
    """The pod's cpuset from its resource-status annotation (``None`` when absent or unreadable)."""
    raw = p.annotations.get(ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return None
    try:
        obj = loads_json(raw)
        cpus = parse_cpuset(obj.get("cpuset") or "") if isinstance(obj, dict) else frozenset()
    except ValueError as e:  # InputError and CPUSetError are ValueErrors: this pod's cpuset only is unknown
        log.warning("ignoring unreadable resource-status", pod=p.pod.key if p.pod is not None else p.uid,
                    annotation=ANNOTATION_RESOURCE_STATUS, error=str(e))
        return None
    return frozenset(cpus) or None


def numa_nodes(p: PodState) -> frozenset[int] | None:
    """The NUMA nodes a NUMA-aware pod was placed on: those of its ``numaNodeResources`` holding cpu (or
    batch-cpu); ``None`` when it has none (or the annotation is unreadable)."""
    raw = p.annotations.get(ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return None
    try:
        obj = loads_json(raw)
        split = parse_numa_node_resources(obj) if isinstance(obj, dict) else {}
    except ValueError:
        return None  # bound_cpus logs the unreadable annotation
    nodes = frozenset(n for n, res in split.items() if res.get("cpu", 0) > 0 or res.get(BATCH_CPU, 0) > 0)
    return nodes or None


def pools(ns: NodeState) -> tuple[dict[str, frozenset[int]], frozenset[int], frozenset[int]]:
    """(bound cpusets by pod uid, LS share pool, BE pool) for a node state."""
    all_cpus = frozenset(ns.cpu_ids)
    try:
        reserved = frozenset(ns.reservation().reserved_cpus)
    except ValueError as e:
        log.warning("ignoring unreadable reservation", node=ns.name, error=str(e))
        reserved = frozenset()
    bound: dict[str, frozenset[int]] = {}
    lse: set[int] = set()
    exclusive: set[int] = set()
    for p in ns.pods:
        if p.pod is None:
            continue
        cpus = bound_cpus(p)
        if cpus is None:
            continue
        bound[p.uid] = cpus
        if p.qos in (QOS_LSE, QOS_LSR):
            exclusive |= cpus
        if p.qos == QOS_LSE:
            lse |= cpus
    ls_pool = all_cpus - exclusive - reserved
    be_pool = all_cpus - lse - reserved
    be_parent = ns.cpuset(ns.qos_dir("besteffort"))
    if be_parent:
        be_pool &= frozenset(be_parent)
    return bound, ls_pool, be_pool


def target_of(p: PodState, bound: dict[str, frozenset[int]], ls_pool: frozenset[int],
              be_pool: frozenset[int], ns: NodeState | None = None) -> frozenset[int] | None:
    if p.pod is None or not p.cgroup_dir:
        return None
    if p.uid in bound:
        return bound[p.uid]
    if p.is_be:
        return be_pool or None
    numa = numa_nodes(p) if ns is not None else None
    if numa is not None and ns is not None:
        # the share pool of its NUMA nodes
        return frozenset(c.id for c in ns.topology() if c.node in numa and c.id in ls_pool) or None
    if p.qos in (QOS_LS, QOS_LSR, QOS_LSE):
        return ls_pool or None
    return None


def mems_writes(ns: NodeState, p: PodState) -> list[FileWrite]:
    """``cpuset.mems`` of a NUMA-aware (non-BE) pod: its NUMA nodes, on the pod dir then its containers when
    widening, the other way round when narrowing (cgroup v1 keeps a child inside its parent)."""
    numa = numa_nodes(p)
    if numa is None or p.qos == QOS_BE or not p.cgroup_dir:
        return []
    value = format_cpuset(numa)
    pod_file = ns.cgroup_file("cpuset", p.cgroup_dir, "cpuset.mems")
    containers = [FileWrite(ns.cgroup_file("cpuset", c.cgroup_dir, "cpuset.mems"), value, plugin=PLUGIN)
                  for c in p.containers if c.cgroup_dir]
    raw = ns.cgroups.get(pod_file)
    try:
        old = frozenset(parse_cpuset(raw)) if raw else None
    except ValueError:
        old = None
    if old is None or numa >= old:
        return [FileWrite(pod_file, value, plugin=PLUGIN), *containers]
    return [*containers, FileWrite(pod_file, value, plugin=PLUGIN)]


def pod_writes(ns: NodeState, p: PodState, target: frozenset[int]) -> list[FileWrite]:
    """Writes putting ``target`` on the pod dir and its containers, in an order cgroup v1 accepts."""
    value = format_cpuset(target)
    pod_file = ns.cpuset_file(p.cgroup_dir)
    containers = [FileWrite(ns.cpuset_file(c.cgroup_dir), value, plugin=PLUGIN) for c in p.containers
                  if c.cgroup_dir]
    cur = ns.cpuset(p.cgroup_dir)
    old = frozenset(cur) if cur is not None else None
    if old is None or target >= old:
        return [FileWrite(pod_file, value, plugin=PLUGIN), *containers]
    if target <= old:
        return [*containers, FileWrite(pod_file, value, plugin=PLUGIN)]
    return [FileWrite(pod_file, format_cpuset(old | target), plugin=PLUGIN), *containers,
            FileWrite(pod_file, value, plugin=PLUGIN)]


def _numa_aware(ns: NodeState) -> bool:
    return any(p.pod is not None and numa_nodes(p) is not None for p in ns.pods)


def plan(ns: NodeState) -> list[FileWrite]:
    bound, ls_pool, be_pool = pools(ns)
    if not bound and not _numa_aware(ns):
        return []
    writes: list[FileWrite] = []
    for p in ns.pods:
        target = target_of(p, bound, ls_pool, be_pool, ns)
        if target is not None:
            writes.extend(pod_writes(ns, p, target))
        writes.extend(mems_writes(ns, p))
    return writes


class CPUSetAgent:
    """Node-agent plugin (entry point ``cpu_topology_agent``)."""

    @hookimpl
    def qos_plan(self, node_state: NodeState) -> list[FileWrite]:
        return plan(node_state)

    @hookimpl
    def runtime_hook(self, event: str, pod: PodState | None, container: ContainerState | None,
                     node_state: NodeState) -> list[FileWrite] | None:
        """A new pod or container gets its cpuset right away instead of at the next round."""
        bound, ls_pool, be_pool = pools(node_state)
        if pod is None or (not bound and numa_nodes(pod) is None):
            return None
        target = target_of(pod, bound, ls_pool, be_pool, node_state)
        numa = numa_nodes(pod) if pod.qos != QOS_BE else None
        if event == "container_start" and container is not None and container.cgroup_dir:
            out = []
            if target is not None:
                out.append(FileWrite(node_state.cpuset_file(container.cgroup_dir), format_cpuset(target), plugin=PLUGIN))
            if numa is not None:
                out.append(FileWrite(node_state.cgroup_file("cpuset", container.cgroup_dir, "cpuset.mems"),
                                     format_cpuset(numa), plugin=PLUGIN))
            return out or None
        writes = pod_writes(node_state, pod, target) if target is not None else []
        return [*writes, *mems_writes(node_state, pod)] or None


