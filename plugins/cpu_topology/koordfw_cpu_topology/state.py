"""Per-node CPU bookkeeping (Koordinator's ``NodeAllocation`` for CPUs) and the allocation entry point
(``resourceManager.allocateCPUSet`` without NUMA-topology hints)."""

from __future__ import annotations

from collections.abc import Iterable

from .accumulator import (
    ERR_NOT_ENOUGH_CPUS,
    AllocatedCPU,
    CPUAllocationError,
    filter_by_required_policy,
    satisfies_required_policy,
    take_preferred_cpus,
)
from .topology import CPUTopology


class NodeAllocation:
    """CPUs held by pods on one node: per CPU its ref count and the exclusive policy of its last holder."""

    __slots__ = ("cpus", "pods")

    def __init__(self) -> None:
        self.pods: dict[str, tuple[frozenset[int], str]] = {}
        self.cpus: dict[int, AllocatedCPU] = {}

    def add(self, uid: str, cpus: frozenset[int], exclusive_policy: str) -> None:
        if uid in self.pods:
            return
        self.pods[uid] = (cpus, exclusive_policy)
        for c in cpus:
            prev = self.cpus.get(c)
            self.cpus[c] = AllocatedCPU((prev.ref_count if prev else 0) + 1, exclusive_policy)

    def release(self, uid: str) -> None:
        entry = self.pods.pop(uid, None)
        if entry is None:
            return
        for c in entry[0]:
            prev = self.cpus.get(c)
            if prev is None:
                continue
            if prev.ref_count <= 1:
                del self.cpus[c]
            else:
                self.cpus[c] = AllocatedCPU(prev.ref_count - 1, prev.exclusive_policy)

    def available_cpus(self, topology: CPUTopology, max_ref_count: int, reserved: frozenset[int],
                       *preferred: Iterable[int]) -> tuple[frozenset[int], dict[int, AllocatedCPU]]:
        """All CPUs − CPUs with ref count ≥ maxRefCount − reserved; ``preferred`` sets give one
        reference back each (Koordinator's reservation restore)."""
        info = dict(self.cpus)
        for pref in preferred:
            for c in pref:
                a = info.get(c)
                if a is not None:
                    if a.ref_count <= 1:
                        del info[c]
                    else:
                        info[c] = AllocatedCPU(a.ref_count - 1, a.exclusive_policy)
        full = {c for c, a in info.items() if a.ref_count >= max_ref_count}
        return topology.all_cpus - full - reserved, info


def allocate_cpuset(topology: CPUTopology, allocation: NodeAllocation, reserved: frozenset[int], *,
                    need: int, bind_policy: str, required: bool, exclusive_policy: str, numa_strategy: str,
                    max_ref_count: int = 1, preferred: frozenset[int] = frozenset()) -> list[int]:
    """The CPUs a pod gets on a node, or CPUAllocationError with Koordinator's reason."""
    available, allocated = allocation.available_cpus(topology, max_ref_count, reserved, preferred)
    if required:
        available = frozenset(filter_by_required_policy(bind_policy, available, topology))
    if len(available) < need:
        raise CPUAllocationError(ERR_NOT_ENOUGH_CPUS)
    result = take_preferred_cpus(topology, max_ref_count, available, preferred, allocated, need, bind_policy,
                                 exclusive_policy, numa_strategy)
    if required and not satisfies_required_policy(bind_policy, result, topology):
        raise CPUAllocationError(f"insufficient CPUs to satisfy required cpu bind policy {bind_policy}")
    return result
