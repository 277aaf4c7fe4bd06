"""cpu_topology's public API for other packages: the NUMA hint exchange of the topology policy (Koordinator's
``frameworkext/topologymanager``: ``NUMATopologyHintProvider`` and the affinity store).

The cpu_topology plugin owns the NUMA topology policy: for a pod on a node under ``BestEffort``,
``Restricted`` or ``SingleNUMANode`` it merges NUMA hints per resource (its own for cpu and memory) and keeps
the best merged hint. Another plugin that places NUMA-local resources (gpu_share's GPUs) takes part through
the pod's :class:`~koordfw.CycleState`, with nothing else of this package:

* at ``pre_filter`` it adds a provider under :data:`NUMA_HINT_PROVIDERS` (``state.setdefault``-style: read
  the dict, add its entry by plugin name). A provider is called with the node (a :class:`~koordfw.NodeView`)
  and returns ``(hints, refusal)``: ``hints`` maps a resource name to its hints (``None``: no preference,
  an empty list: no NUMA set can hold it), ``refusal`` is a message when the node cannot take the pod at all;
* from the filters on, :data:`NUMA_AFFINITY` answers, for a node, the NUMA nodes the policy takes there
  (a bitmask, bit *n* = NUMA node *n*; ``None``: the node is under no policy, or any NUMA node will do):
  what cpu_topology's reserve chose on it, or the merged hint it will choose. At ``reserve`` the provider
  places its resources on those NUMA nodes (Koordinator's ``Allocate(affinity)``), whichever plugin's
  reserve runs first.

A provider's hints must be a function of the node's state: cpu_topology memoises merges by their inputs. A
provider may also answer for many nodes at once (:class:`SingleNUMAProvider`), which lets cpu_topology decide
SingleNUMANode for a whole batch of nodes with numpy instead of a merge per node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from koordfw import StateKey

from .numa_policy import (
    POLICY_BEST_EFFORT,
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    NUMATopologyHint,
    iterate_masks,
    mask_bits,
    mask_of,
)

__all__ = ["NUMA_AFFINITY", "NUMA_HINT_PROVIDERS", "POLICY_BEST_EFFORT", "POLICY_NONE", "POLICY_RESTRICTED",
           "POLICY_SINGLE_NUMA_NODE", "HintProvider", "SingleNUMAProvider", "NUMATopologyHint", "ProviderResult", "iterate_masks",
           "mask_bits", "mask_of"]

#: what a provider returns for one node: (resource name -> hints or None, refusal message or None)
ProviderResult = tuple[Mapping[str, Sequence[NUMATopologyHint] | None] | None, str | None]
#: a NUMA hint provider: the node (a NodeView) -> its hints for the pod of the cycle
HintProvider = Callable[[Any], ProviderResult]

@runtime_checkable
class SingleNUMAProvider(Protocol):
    """A provider that also answers, for many nodes at once, where a single NUMA node holds its resources."""

    def __call__(self, view: Any) -> ProviderResult: ...

    def single_numa(self, idx: np.ndarray, zones: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """For the cluster's nodes ``idx``: (has a preference at all: a node without one, e.g. without NUMA
        information, takes any NUMA node; a (len(idx), len(zones)) bool array: NUMA node ``zones[k]`` alone
        holds the request, i.e. the provider would give a hint of exactly that node)."""
        ...

    def versions(self, idx: np.ndarray) -> tuple[Any, np.ndarray]:
        """What the provider's answers for nodes ``idx`` depend on beyond the pod's requests: a token (hashable)
        and a number per node; while both stay the same, so do the hints for a pod of the same requests."""
        ...


#: plugin name -> its provider, for this pod's cycle (set at pre_filter)
NUMA_HINT_PROVIDERS: StateKey[dict[str, HintProvider]] = StateKey("cpu_topology/numa_hint_providers")
#: a node (NodeView) -> the NUMA mask the policy takes there (None: no policy, or any NUMA node); set at filter
NUMA_AFFINITY: StateKey[Callable[[Any], int | None]] = StateKey("cpu_topology/numa_affinity")
