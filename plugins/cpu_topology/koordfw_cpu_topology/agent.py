"""The node side of cpu_topology: apply each bound pod's cpuset and keep the shared pools right.

For a node where at least one pod holds a cpuset (``scheduling.koordinator.sh/resource-status``):

* a bound pod (any QoS) gets exactly its cpuset on its pod cgroup and every container cgroup;
* LS pods, and LSE/LSR pods without a cpuset, get the **LS share pool**: all CPUs − CPUs bound to
  LSE/LSR pods − the node's reserved CPUs (``node.koordinator.sh/reservation``);
* BE pods get the **BE pool**: all CPUs − CPUs bound to LSE pods − reserved CPUs (LSR cores may be lent
  to BE, LSE cores never), kept inside the besteffort QoS cgroup's current cpuset (which CPU suppress
  may have narrowed).

Only pods whose manifest the agent knows are touched (a pod seen only as a cgroup may be a kubelet
static-policy pod with its own CPUs), SYSTEM pods are left alone, and a node where no pod holds a
cpuset gets no writes at all. For cgroup v1, where a child's cpuset must stay inside its parent's,
each pod is written in a safe order: widen the pod dir, set the containers, then narrow the pod dir.
"""

from __future__ import annotations

import structlog

from koordfw import FileWrite, NodeState, PodState, hookimpl
from koordfw.extension import ANNOTATION_RESOURCE_STATUS, QOS_LS, QOS_LSE, QOS_LSR
from koordfw.inputs import loads_json
from koordfw.nodestate import ContainerState

from .cpuset import format_cpuset, parse_cpuset

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
              be_pool: frozenset[int]) -> frozenset[int] | None:
    if p.pod is None or not p.cgroup_dir:
        return None
    if p.uid in bound:
        return bound[p.uid]
    if p.is_be:
        return be_pool or None
    if p.qos in (QOS_LS, QOS_LSR, QOS_LSE):
        return ls_pool or None
    return None


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


def plan(ns: NodeState) -> list[FileWrite]:
    bound, ls_pool, be_pool = pools(ns)
    if not bound:
        return []
    writes: list[FileWrite] = []
    for p in ns.pods:
        target = target_of(p, bound, ls_pool, be_pool)
        if target is not None:
            writes.extend(pod_writes(ns, p, target))
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
        if not bound or pod is None:
            return None
        target = target_of(pod, bound, ls_pool, be_pool)
        if target is None:
            return None
        if event == "container_start" and container is not None and container.cgroup_dir:
            return [FileWrite(node_state.cpuset_file(container.cgroup_dir), format_cpuset(target), plugin=PLUGIN)]
        return pod_writes(node_state, pod, target)


