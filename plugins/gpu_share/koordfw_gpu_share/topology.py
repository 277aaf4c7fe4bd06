"""GPU topology: where a node's GPUs sit (NUMA node, PCIe switch), the NUMA hints gpu_share offers to the NUMA
topology policy, and the choice of GPUs within a topology scope.

The topology comes from each GPU's ``topology`` in Koordinator's ``Device`` (``socketID``, ``nodeID``,
``pcieID``; :mod:`.inventory` keeps it as columns). Three pieces, each Koordinator's deviceshare:

* :func:`numa_hints` (``generateTopologyHints``): for every set of the node's NUMA nodes whose GPUs can hold
  the request, a hint; the narrowest feasible sets are preferred; a set whose choice is the whole node's
  choice scores 500, so the device preference outweighs the CPU's in the merge. GPUs without a NUMA node
  take no part; a node none of whose GPUs reports one gives no preference.
* :func:`in_affinity` (the allocator's ``numaNodes`` filter): the GPUs allowed on the NUMA nodes the merged
  hint chose. A GPU whose topology says ``nodeID: -1`` is allowed anywhere; one without a topology is not.
* :func:`scope_choose` (``allocateByDeviceTopology`` / ``allocateFromScope``, for whole GPUs): the GPUs
  come from the deepest scope that holds them all (a PCIe switch, else a NUMA node, else the node); among
  scopes as deep, the one whose ancestors already hold allocations (binpacking the tree), then the first in
  (NUMA node, pcieID) order; within it the lowest minors that fit. A pod's ``requiredTopologyScope`` (the
  ``scheduling.koordinator.sh/device-allocate-hint`` annotation) keeps shallower scopes from giving GPUs. A
  node with a GPU lacking a topology has no tree, and the plugin's policy chooses as before; so does a
  shared GPU (Koordinator scores shared GPUs within the tree with its own scorer; gpu_share's policies are
  the scorer here).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from koordfw_cpu_topology.api import NUMATopologyHint, iterate_masks

from koordfw.extension import ANNOTATION_DEVICE_ALLOCATE_HINT, DEVICE_TOPOLOGY_SCOPE_LEVEL
from koordfw.inputs import loads_json

from .inventory import Inventory

#: a hint that the whole node's GPU choice also makes (Koordinator's ``defaultNUMAScore``)
DEFAULT_NUMA_SCORE = 500
#: the resource name of the GPU hints in the merge (Koordinator's device type)
GPU_HINT_RESOURCE = "gpu"
ERR_INSUFFICIENT_NUMA_SCOPED_DEVICES = "Insufficient NUMA Scoped Devices"


def in_affinity(inv: Inventory, i: int, mask: int) -> np.ndarray:
    """(G,) bool: the slots of node ``i`` allowed under the NUMA ``mask``."""
    numa = inv.numa[i]
    on = (numa >= 0) & ((mask >> np.maximum(numa, 0)) & 1 == 1)
    return on | (numa == -1)


def used_slots(inv: Inventory, i: int) -> np.ndarray:
    """(G,) bool: the slots of node ``i`` that hold some allocation."""
    return (inv.total_core[i] > 0) & ((inv.core_free[i] < inv.total_core[i]) | (inv.mem_free[i] < inv.total_mem[i]))


def has_tree(inv: Inventory, i: int) -> bool:
    """Whether every GPU of node ``i`` reports a topology (Koordinator builds the scope tree only then)."""
    healthy = inv.total_core[i] > 0
    return bool(healthy.any()) and not bool((healthy & (inv.numa[i] == -2)).any())


#: scope levels (Koordinator's DeviceTopologyScopeLevel): the node 1, a NUMA node 2, a PCIe switch 3
LEVEL_NODE, LEVEL_NUMA, LEVEL_PCIE = 1, 2, 3


def scope_choose(inv: Inventory, i: int, fit: np.ndarray, count: int, required: int = 0) -> list[int] | None:
    """``count`` whole GPUs of node ``i`` from the deepest topology scope that holds them (see the module
    doc), or None when no scope does (or the node has no tree). ``required``: the level of the pod's
    ``requiredTopologyScope`` (0: none); a scope shallower than it gives no GPUs itself."""
    if not has_tree(inv, i):
        return None
    healthy = inv.total_core[i] > 0
    used = used_slots(inv, i)
    minor = inv.minor[i]

    def pick(slots: np.ndarray) -> list[int] | None:
        ok = [int(s) for s in slots[np.argsort(minor[slots], kind="stable")] if fit[s]]
        return ok[:count] if len(ok) >= count else None

    node_slots = np.flatnonzero(healthy)
    if len(node_slots) < count:
        return None
    depth0, notempty0 = 1, int(used[node_slots].any())
    best: tuple[int, int, list[int]] | None = None
    numa = inv.numa[i]
    pcie = inv.pcie[i]
    for n in sorted(set(numa[node_slots].tolist())):
        ns = node_slots[numa[node_slots] == n]
        if len(ns) < count:
            continue
        d1, e1 = depth0 + 1, notempty0 + int(used[ns].any())
        found: tuple[int, int, list[int]] | None = None
        for p in sorted(set(pcie[ns].tolist())):
            ps = ns[pcie[ns] == p]
            if len(ps) < count or required > LEVEL_PCIE:
                continue
            got = pick(ps)
            if got is not None:
                cand = (d1 + 1, e1 + int(used[ps].any()), got)
                if found is None or cand[0] > found[0] or (cand[0] == found[0] and cand[1] > found[1]):
                    found = cand
        if found is None and required <= LEVEL_NUMA:
            got = pick(ns)
            if got is not None:
                found = (d1, e1, got)
        if found is not None and (best is None or found[0] > best[0] or (found[0] == best[0] and found[1] > best[1])):
            best = found
    if best is not None:
        return best[2]
    return pick(node_slots) if required <= LEVEL_NODE else None


def proxy_choice(inv: Inventory, i: int, fit: np.ndarray, count: int, whole: bool) -> list[int] | None:
    """The choice a NUMA set is compared with for the hint score: the scope choice for whole GPUs on a node
    with a tree, else the fitting slots with the least left (lowest slot first)."""
    got = scope_choose(inv, i, fit, count) if whole else None
    if got is not None:
        return got
    cand = np.flatnonzero(fit)
    if len(cand) < count:
        return None
    order = cand[np.lexsort((cand, inv.left[i][cand]))]
    return [int(s) for s in order[:count]]


def numa_hints(inv: Inventory, i: int, fit: np.ndarray, count: int, whole: bool
               ) -> tuple[list[NUMATopologyHint] | None, bool]:
    """The GPU hints of node ``i`` (``fit``: the slots that can hold one GPU's share): (None, True) when
    no GPU reports a NUMA node (no preference); ([], False) when no set of NUMA nodes can hold the
    request; else (hints, True)."""
    numa = inv.numa[i]
    healthy = inv.total_core[i] > 0
    nodes = sorted({int(n) for n in numa[healthy].tolist() if n >= 0})
    if not nodes:
        return None, True
    best = proxy_choice(inv, i, fit, count, whole)
    best_set = frozenset(best) if best is not None else None
    feasible: list[tuple[int, bool]] = []
    for mask in iterate_masks(nodes):
        allowed = in_affinity(inv, i, mask) & (numa != -1)  # the set's own GPUs (nodeID -1 belongs to none)
        if int((allowed & healthy).sum()) < count:
            continue
        scoped = fit & allowed
        if int(scoped.sum()) < count:
            continue
        got = proxy_choice(inv, i, scoped, count, whole)
        feasible.append((mask, got is not None and best_set is not None and frozenset(got) == best_set))
    if not feasible:
        return [], False
    width = min(m.bit_count() for m, _ in feasible)
    return [NUMATopologyHint(m, preferred=m.bit_count() == width, score=DEFAULT_NUMA_SCORE if same else 0)
            for m, same in feasible], True


ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES = "Insufficient Topology Scoped GPU Devices"
ERR_NODE_MISSING_GPU_DEVICE_TOPOLOGY_TREE = "node(s) missing GPU Device Topology Tree"


def required_scope(annotations: Mapping[str, str]) -> int:
    """The level of the pod's GPU ``requiredTopologyScope`` from ``scheduling.koordinator.sh/device-allocate-hint``
    (0: none). Raises ValueError naming the field for a bad annotation or an unknown scope."""
    raw = annotations.get(ANNOTATION_DEVICE_ALLOCATE_HINT)
    if not raw:
        return 0
    data = loads_json(raw)
    if not isinstance(data, Mapping):
        raise ValueError("expected a JSON object of device type -> hint")
    gpu = data.get("gpu")
    if gpu is None:
        return 0
    if not isinstance(gpu, Mapping):
        raise ValueError("gpu: expected an object")
    scope = gpu.get("requiredTopologyScope") or ""
    if not scope:
        return 0
    if scope not in DEVICE_TOPOLOGY_SCOPE_LEVEL:
        raise ValueError(f"gpu.requiredTopologyScope: {str(scope)[:40]!r} is not one of "
                         f"{', '.join(DEVICE_TOPOLOGY_SCOPE_LEVEL)}")
    return DEVICE_TOPOLOGY_SCOPE_LEVEL[scope]
