"""Koordinator's CPU accumulator (``nodenumaresource/cpu_accumulator.go``): which exact CPUs a pod gets.

Every ordering below is a total order with the same keys and tie-breakers as Koordinator's, so the
result does not depend on map iteration. The one unstable ``sort.Slice`` in the original (socket lists
by length) is replaced by Python's stable sort over the already strategy-ordered lists; Go's pdqsort
uses a stable insertion sort for up to 12 elements, so both agree for any machine with ≤ 12 sockets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .topology import CPUInfo, CPUTopology

FULL_PCPUS, SPREAD_BY_PCPUS = "FullPCPUs", "SpreadByPCPUs"
EXCLUSIVE_NONE, PCPU_LEVEL, NUMA_NODE_LEVEL = "None", "PCPULevel", "NUMANodeLevel"
MOST_ALLOCATED, LEAST_ALLOCATED = "MostAllocated", "LeastAllocated"

ERR_NOT_ENOUGH_CPUS = "not enough cpus available to satisfy request"
ERR_FAILED_TO_ALLOCATE = "failed to allocate cpus"


class CPUAllocationError(Exception):
    """The accumulator could not satisfy the request (message is Koordinator's)."""


class AllocatedCPU(NamedTuple):
    """A CPU already handed out on the node: how many pods hold it, and the last holder's policy."""

    ref_count: int
    exclusive_policy: str = ""


class _Accumulator:
    def __init__(self, topology: CPUTopology, max_ref_count: int, available: Iterable[int],
                 allocated: Mapping[int, AllocatedCPU], need: int, exclusive_policy: str,
                 numa_strategy: str) -> None:
        self.topo = topology
        self.max_ref = max_ref_count
        self.most = numa_strategy == MOST_ALLOCATED
        details = topology.details
        self.allocatable: dict[int, CPUInfo] = {c: details[c] for c in available if c in details}
        self.ref: dict[int, int] = {}
        if max_ref_count > 1:
            self.ref = {c: allocated[c].ref_count if c in allocated else 0 for c in self.allocatable}
        self.excl_cores: set[int] = set()
        self.excl_nodes: set[int] = set()
        for cpu, a in allocated.items():
            info = details.get(cpu)
            if info is None:
                continue
            if a.exclusive_policy == PCPU_LEVEL:
                self.excl_cores.add(info.core)
            elif a.exclusive_policy == NUMA_NODE_LEVEL:
                self.excl_nodes.add(info.node)
        self.policy = exclusive_policy
        self.exclusive = exclusive_policy in (PCPU_LEVEL, NUMA_NODE_LEVEL)
        self.need = need
        self.result: set[int] = set()

    # -- bookkeeping ----------------------------------------------------------------------------
    def take(self, cpus: Iterable[int]) -> None:
        cpus = list(cpus)
        self.result.update(cpus)
        details = self.topo.details
        for c in cpus:
            self.allocatable.pop(c, None)
            if self.exclusive:
                info = details[c]
                if self.policy == PCPU_LEVEL:
                    self.excl_cores.add(info.core)
                else:
                    self.excl_nodes.add(info.node)
        self.need -= len(cpus)

    def needs(self, n: int) -> bool:
        return self.need >= n

    def satisfied(self) -> bool:
        return self.need < 1

    def failed(self) -> bool:
        return self.need > len(self.allocatable)

    def _excl_pcpu(self, info: CPUInfo) -> bool:
        return self.policy == PCPU_LEVEL and info.core in self.excl_cores

    def _excl_numa(self, info: CPUInfo) -> bool:
        return self.policy == NUMA_NODE_LEVEL and info.node in self.excl_nodes

    def _free_key(self, n: int) -> int:
        """Free-score ordering: MostAllocated puts the smaller count first, anything else the larger."""
        return n if self.most else -n

    def _core_ref(self, core: int) -> int:
        # getCoreRefCount sums the ref counts of the core's CPUs that are still allocatable
        return sum(self.ref.get(c, 0) for c in self.topo.cpus_in_core.get(core, ()) if c in self.allocatable)

    def _extract(self, cpus: list[int]) -> list[int]:
        """One CPU per core, the first seen."""
        details = self.topo.details
        seen: set[int] = set()
        out = []
        for c in cpus:
            core = details[c].core
            if core not in seen:
                seen.add(core)
                out.append(c)
        return out

    def _sort_cores(self, cores: list[int], cpus_in_cores: dict[int, list[int]]) -> None:
        if self.max_ref > 1:
            cores.sort(key=lambda c: (-len(cpus_in_cores[c]), self._core_ref(c), c))
        else:
            cores.sort(key=lambda c: (-len(cpus_in_cores[c]), c))

    # -- candidate lists --------------------------------------------------------------------------
    def free_cores_in_node(self, full_free_only: bool, filter_exclusive: bool) -> list[list[int]]:
        cpc = self.topo.cpus_per_core()
        socket_free: dict[int, int] = {}
        cpus_in_cores: dict[int, list[int]] = {}
        # the same test as _excl_numa, hoisted out of the per-CPU loop
        excl_nodes = self.excl_nodes if filter_exclusive and self.policy == NUMA_NODE_LEVEL else ()
        for info in self.allocatable.values():
            if excl_nodes and info.node in excl_nodes:
                continue
            cpus_in_cores.setdefault(info.core, []).append(info.cpu)
            socket_free[info.socket] = socket_free.get(info.socket, 0) + 1
        cores_in_nodes: dict[int, list[int]] = {}
        for core, cpus in cpus_in_cores.items():
            if full_free_only and len(cpus) != cpc:
                continue
            cores_in_nodes.setdefault(self.allocatable[cpus[0]].node, []).append(core)
        cpus_in_nodes: dict[int, list[int]] = {}
        node_socket: dict[int, int] = {}
        for node, cores in cores_in_nodes.items():
            self._sort_cores(cores, cpus_in_cores)
            lst: list[int] = []
            for c in cores:
                lst.extend(sorted(cpus_in_cores[c]))
            cpus_in_nodes[node] = lst
            node_socket[node] = self.allocatable[lst[0]].socket
        order = sorted(cpus_in_nodes, key=lambda n: (self._free_key(len(cpus_in_nodes[n])),
                                                     self._free_key(socket_free[node_socket[n]]), n))
        return [cpus_in_nodes[n] for n in order]

    def free_cores_in_socket(self, full_free_only: bool) -> list[list[int]]:
        cpc = self.topo.cpus_per_core()
        cpus_in_cores: dict[int, list[int]] = {}
        for info in self.allocatable.values():
            cpus_in_cores.setdefault(info.core, []).append(info.cpu)
        cores_in_sockets: dict[int, list[int]] = {}
        for core, cpus in cpus_in_cores.items():
            if full_free_only and len(cpus) != cpc:
                continue
            cores_in_sockets.setdefault(self.allocatable[cpus[0]].socket, []).append(core)
        cpus_in_sockets: dict[int, list[int]] = {}
        for socket, cores in cores_in_sockets.items():
            self._sort_cores(cores, cpus_in_cores)
            lst: list[int] = []
            for c in cores:
                lst.extend(sorted(cpus_in_cores[c]))
            cpus_in_sockets[socket] = lst
        order = sorted(cpus_in_sockets, key=lambda s: (self._free_key(len(cpus_in_sockets[s])), s))
        return [cpus_in_sockets[s] for s in order]

    def free_cpus_in_node(self, filter_exclusive: bool) -> list[list[int]]:
        cpus_in_nodes: dict[int, list[int]] = {}
        node_free: dict[int, int] = {}
        socket_free: dict[int, int] = {}
        node_socket: dict[int, int] = {}
        for info in self.allocatable.values():
            if filter_exclusive and (self._excl_pcpu(info) or self._excl_numa(info)):
                continue
            cpus_in_nodes.setdefault(info.node, []).append(info.cpu)
            node_free[info.node] = node_free.get(info.node, 0) + 1
            socket_free[info.socket] = socket_free.get(info.socket, 0) + 1
            node_socket[info.node] = info.socket
        for node, cpus in cpus_in_nodes.items():
            # Koordinator re-sorts by the ref count read from the topology's own details, which is
            # always 0 there, so this stays an ID order whatever maxRefCount is.
            cpus.sort()
            if filter_exclusive:
                cpus_in_nodes[node] = self._extract(cpus)
        order = sorted(cpus_in_nodes, key=lambda n: (self._free_key(node_free[n]),
                                                     self._free_key(socket_free[node_socket[n]]), n))
        return [cpus_in_nodes[n] for n in order]

    def free_cpus_in_socket(self, filter_exclusive: bool) -> list[list[int]]:
        cpus_in_sockets: dict[int, list[int]] = {}
        for info in self.allocatable.values():
            if filter_exclusive and self._excl_pcpu(info):
                continue
            cpus_in_sockets.setdefault(info.socket, []).append(info.cpu)
        for socket, cpus in cpus_in_sockets.items():
            cpus.sort()
            if filter_exclusive:
                cpus_in_sockets[socket] = self._extract(cpus)
        order = sorted(cpus_in_sockets, key=lambda s: (self._free_key(len(cpus_in_sockets[s])), s))
        return [cpus_in_sockets[s] for s in order]

    def free_cpus(self, filter_exclusive: bool) -> list[int]:
        cpus_in_cores: dict[int, list[int]] = {}
        core_socket: dict[int, int] = {}
        core_node: dict[int, int] = {}
        node_free: dict[int, int] = {}
        socket_free: dict[int, int] = {}
        for info in self.allocatable.values():
            if filter_exclusive and (self._excl_pcpu(info) or self._excl_numa(info)):
                continue
            cpus_in_cores.setdefault(info.core, []).append(info.cpu)
            core_socket[info.core] = info.socket
            core_node[info.core] = info.node
            node_free[info.node] = node_free.get(info.node, 0) + 1
            socket_free[info.socket] = socket_free.get(info.socket, 0) + 1
        in_socket = self.topo.cpus_in_socket
        colo = {s: sum(1 for c in in_socket.get(s, ()) if c in self.result) for s in socket_free}
        fk = self._free_key
        max_ref = self.max_ref > 1

        def key(core: int) -> tuple:
            s = core_socket[core]
            return (-colo[s], fk(socket_free[s]), fk(node_free[core_node[core]]), len(cpus_in_cores[core]), s,
                    self._core_ref(core) if max_ref else 0, core)

        out: list[int] = []
        for core in sorted(cpus_in_cores, key=key):
            out.extend(sorted(cpus_in_cores[core]))
        return out

    def spread(self, cpus: list[int]) -> list[int]:
        """Round-robin over cores: first CPU of each core in list order, then the second, and so on."""
        if len(cpus) <= self.topo.cpus_per_core():
            return cpus
        details = self.topo.details
        out: list[int] = []
        pending = list(cpus)
        while pending:
            later = []
            seen: set[int] = set()
            for c in pending:
                core = details[c].core
                if core in seen:
                    later.append(c)
                    continue
                out.append(c)
                seen.add(core)
            pending = later
        return out


def take_cpus(topology: CPUTopology, max_ref_count: int, available: Iterable[int],
              allocated: Mapping[int, AllocatedCPU], need: int, bind_policy: str, exclusive_policy: str,
              numa_strategy: str) -> list[int]:
    """Koordinator's ``takeCPUs``: the sorted CPUs chosen for ``need`` CPUs; raises CPUAllocationError."""
    acc = _Accumulator(topology, max_ref_count, available, allocated, need, exclusive_policy, numa_strategy)
    if acc.satisfied():
        return sorted(acc.result)
    if acc.failed():
        raise CPUAllocationError(ERR_NOT_ENOUGH_CPUS)
    topo = topology
    full = bind_policy == FULL_PCPUS
    if full or topo.cpus_per_core() == 1:
        # 1. the whole request on one NUMA node, ordered by the NUMA allocate strategy
        if acc.need <= topo.cpus_per_node():
            for fe in (True, False):
                for cpus in acc.free_cores_in_node(True, fe):
                    if len(cpus) >= acc.need:
                        acc.take(cpus[:acc.need])
                        return sorted(acc.result)
        # 2. ... or on one socket
        if acc.need <= topo.cpus_per_socket():
            for cpus in acc.free_cores_in_socket(True):
                if len(cpus) >= acc.need:
                    acc.take(cpus[:acc.need])
                    return sorted(acc.result)
        # 3. whole sockets, the emptiest first, regardless of the strategy
        lists = sorted(acc.free_cores_in_socket(True), key=len, reverse=True)
        unsatisfied = []
        for cpus in lists:
            if not acc.needs(len(cpus)):
                unsatisfied.append(cpus)
            else:
                acc.take(cpus)
                if acc.satisfied():
                    return sorted(acc.result)
        # 4. whole cores from the sockets with the fewest free cores
        cpc = topo.cpus_per_core()
        if acc.needs(cpc):
            for cpus in sorted(unsatisfied, key=len):
                # like the original, the first core of each further list is taken before checking need
                for i in range(0, len(cpus), cpc):
                    acc.take(cpus[i:i + cpc])
                    if acc.satisfied():
                        return sorted(acc.result)
                    if not acc.needs(cpc):
                        break
    if not full:
        if acc.need <= topo.cpus_per_node():
            for fe in (True, False):
                for cpus in acc.free_cpus_in_node(fe):
                    if len(cpus) >= acc.need:
                        acc.take(acc.spread(cpus)[:acc.need])
                        return sorted(acc.result)
        if acc.need <= topo.cpus_per_socket():
            for fe in (True, False):
                for cpus in acc.free_cpus_in_socket(fe):
                    if len(cpus) >= acc.need:
                        acc.take(acc.spread(cpus)[:acc.need])
                        return sorted(acc.result)
    # fallback: CPU by CPU, staying close to what was already taken
    for fe in (True, False):
        for c in acc.spread(acc.free_cpus(fe)):
            if acc.needs(1):
                acc.take([c])
            if acc.satisfied():
                return sorted(acc.result)
    raise CPUAllocationError(ERR_FAILED_TO_ALLOCATE)


def take_preferred_cpus(topology: CPUTopology, max_ref_count: int, available: Iterable[int],
                        preferred: Iterable[int], allocated: Mapping[int, AllocatedCPU], need: int,
                        bind_policy: str, exclusive_policy: str, numa_strategy: str) -> list[int]:
    """``takePreferredCPUs``: first from ``available ∩ preferred`` (at most ``need``), then the rest."""
    avail = set(available)
    pref = avail & set(preferred)
    result: set[int] = set()
    if pref:
        result.update(take_cpus(topology, max_ref_count, pref, allocated, min(need, len(pref)), bind_policy,
                                exclusive_policy, numa_strategy))
        need -= len(result)
    if need > 0:
        result.update(take_cpus(topology, max_ref_count, avail - result, allocated, need, bind_policy,
                                exclusive_policy, numa_strategy))
    return sorted(result)


def filter_by_required_policy(policy: str, available: Iterable[int], topology: CPUTopology) -> set[int]:
    """``filterCPUsByRequiredCPUBindPolicy``: FullPCPUs keeps only wholly available cores; SpreadByPCPUs
    keeps the lowest available CPU of each core."""
    avail = set(available) & topology.all_cpus
    by_core: dict[int, list[int]] = {}
    for c in avail:
        by_core.setdefault(topology.details[c].core, []).append(c)
    if policy == FULL_PCPUS:
        cpc = topology.cpus_per_core()
        return {c for cpus in by_core.values() if len(cpus) == cpc for c in cpus}
    if policy == SPREAD_BY_PCPUS:
        return {min(cpus) for cpus in by_core.values()}
    return avail


def satisfies_required_policy(policy: str, cpus: Iterable[int], topology: CPUTopology) -> bool:
    """``satisfiedRequiredCPUBindPolicy``: whole cores for FullPCPUs, one CPU per core for SpreadByPCPUs."""
    cpus = list(cpus)
    cores = {topology.details[c].core for c in cpus}
    if policy == FULL_PCPUS:
        return len(cores) * topology.cpus_per_core() == len(cpus)
    if policy == SPREAD_BY_PCPUS:
        return len(cores) == len(cpus)
    return True
