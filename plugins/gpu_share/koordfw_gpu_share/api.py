"""gpu_share's public API for other packages: the only module of ``koordfw_gpu_share`` another plugin
imports (issue 17, one front door per concept; an import-linter contract in the root ``pyproject.toml``
enforces it). The defrag plugin plans GPU and CPU defragmentation with it.

What another package may use, and nothing else:

* the GPU device model: :class:`InventoryCache` (one cluster's :class:`Inventory`, built from its
  Koordinator ``Device`` objects, or from the nodes' allocatable, and the pods'
  ``scheduling.koordinator.sh/device-allocated`` annotations; rebuilt only when nodes, labels or
  Devices change, reconciled when pods come, go or free capacity, as the gpu_share plugin keeps its
  own) and :class:`Alloc` (what one pod holds; ``Inventory.allocs`` maps pod uids to them). Read an
  inventory's columns, do not change them: copy what you modify;
* GPU requests: :func:`pod_gpu_request` (Koordinator's validation and normalisation; raises
  :class:`InvalidGpuRequest`), :class:`GpuRequest`, and :func:`pod_key`, a pod's typical-pod key;
* the fragmentation measure (the FGD paper's, :mod:`koordfw_gpu_share.frag`): :class:`Workload`,
  :data:`PodKey`, :func:`typical_pods`, :func:`node_frag`, :func:`node_frag_capacity`, and
  :func:`target_workload`, the workload M as the gpu_share plugin configured with :class:`Args` uses it;
* :func:`sub_select`, the paper's choice of the least-sufficient fitting GPUs.

Nothing here reads the running gpu_share plugin: a caller that wants the plugin's configuration passes
its args (``handle.plugin_args("gpu_share")``), and allocations the scheduler has reserved but not yet
bound (no annotation yet) are not in an :class:`InventoryCache`'s inventory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from koordfw import BoundedCache, IdentityKey

from .frag import PodKey, Workload, make_workload, node_frag, node_frag_capacity, typical_pods
from .inventory import Alloc, Inventory
from .plugin import Args, typical_weights
from .policies import pod_tag, sub_select
from .requests import GpuRequest, InvalidGpuRequest, pod_gpu_request, pod_key

__all__ = ["Alloc", "Args", "GpuRequest", "InvalidGpuRequest", "Inventory", "InventoryCache", "PodKey", "Workload",
           "node_frag", "node_frag_capacity", "pod_gpu_request", "pod_key", "sub_select", "target_workload",
           "typical_pods"]


class InventoryCache:
    """One cluster's GPU :class:`Inventory` as its Device objects (or allocatable) and the pods'
    device-allocated annotations describe it, kept between calls.

    The inventory is rebuilt when the cluster object, its node count, its nodes' labels or its Device
    objects change, and reconciled (departed pods' allocations dropped, newly bound annotated pods added)
    when pods come or go or capacity is freed: the keys the gpu_share plugin uses for its own. A bad
    Device is logged once per cache, not at every rebuild."""

    def __init__(self) -> None:
        self._inv: Inventory | None = None
        self._inv_key: tuple | None = None
        self._sync_key: tuple | None = None
        self._warned: BoundedCache[Any, bool] = BoundedCache(65536)

    def inventory(self, cluster: Any) -> Inventory:
        """The inventory of ``cluster``, brought up to date."""
        devs = cluster.objects_of("Device")
        key = (cluster.num_nodes, cluster.labels_generation, IdentityKey(cluster, *devs.values()))
        if key != self._inv_key or self._inv is None:
            self._inv = Inventory(cluster, self._warned)
            self._inv_key = key
            self._sync_key = None
        sk = (cluster.free_generation, len(cluster.pods))
        if sk != self._sync_key:
            self._inv.reconcile(pod_tag)
            self._sync_key = sk
        return self._inv


def target_workload(cluster: Any, models: Sequence[str], args: Args | None = None) -> Workload:
    """The target workload M for GPU models ``models`` (an inventory's ``models``): ``args.typical_pods``
    (their weights normalised) when given, else learnt from the cluster's pods with
    ``args.popularity_threshold`` (95 % without args), as the paper's ``GetTypicalPods`` does. Pods with
    an invalid GPU request are left out."""
    a = args if args is not None else Args()
    if a.typical_pods:
        return make_workload(typical_weights(a.typical_pods), models)
    keys = []
    for e in cluster.pods.values():
        try:
            keys.append(pod_key(e.pod))
        except InvalidGpuRequest:
            continue
    return typical_pods(keys, models, a.popularity_threshold)
