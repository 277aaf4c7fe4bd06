"""``gpu_defrag``: migrations that lower GPU fragmentation (the FGD paper's measure, from gpu_share).

The GPU inventory comes from gpu_share's public API (:mod:`koordfw_gpu_share.api`): it is built from the
``Device`` objects / allocatable and the pods' ``scheduling.koordinator.sh/device-allocated``
annotations, kept in an :class:`~koordfw_gpu_share.api.InventoryCache` between rounds. The target
workload M is gpu_share's as its args configure it (``typicalPods``, else learnt from the cluster's pods
with its ``popularityThreshold``, 95 % when gpu_share is not loaded).
"""

from __future__ import annotations

from typing import Any

import structlog
from koordfw_gpu_share import api

from .args import GpuDefragArgs
from .fragengine import Descent, MovablePod, SlotModel
from .plan import PlanBuilder
from .safety import gang_id, unevictable_reason

log = structlog.get_logger("koordfw.defrag")
PLUGIN = "gpu_defrag"


def gpu_state(cluster: Any, handle: Any, cache: api.InventoryCache | None = None) -> tuple[api.Inventory, api.Workload]:
    """The GPU inventory (allocations included) and the target workload M. ``cache`` keeps the
    inventory between rounds (a fresh one builds it)."""
    inv = (cache if cache is not None else api.InventoryCache()).inventory(cluster)
    gargs = handle.plugin_args("gpu_share") if handle is not None else None
    return inv, api.target_workload(cluster, inv.models, gargs)


def memory_by_key(cluster: Any) -> dict[api.PodKey, int]:
    """Mean memory request (bytes) of the cluster's pods per typical-pod key (cpu, milli, num, spec)."""
    sums: dict[api.PodKey, list[int]] = {}
    for e in cluster.pods.values():
        try:
            key = api.pod_key(e.pod)
        except api.InvalidGpuRequest:
            continue
        acc = sums.setdefault(key, [0, 0])
        acc[0] += int(e.pod.requests.get("memory", 0))
        acc[1] += 1
    return {k: total // n for k, (total, n) in sums.items()}


def build(cluster: Any, handle: Any, args: GpuDefragArgs,
          cache: api.InventoryCache | None = None) -> tuple[SlotModel, list[MovablePod], api.Inventory]:
    inv, w = gpu_state(cluster, handle, cache)
    if args.measure == "capacity":  # typical pods' memory limits how many of them a node can take too
        w = w.with_memory(memory_by_key(cluster))
    n = cluster.num_nodes
    ci, mi = cluster.resource_index("cpu"), cluster.resource_index("memory")
    free = cluster.allocatable[:n] - cluster.requested[:n]
    live = cluster.live_mask
    total = inv.total_core.copy()
    total[~live] = 0
    model = SlotModel(names=[v.name for v in cluster.views], total=total, core_free=inv.core_free.copy(),
                      mem_free=inv.mem_free.copy(), side_left=free[:, ci].copy(), model=inv.model.copy(),
                      workload=w, extra_free={"memory": free[:, mi].copy(),
                                              "pods": free[:, cluster.resource_index("pods")].copy()},
                      measure=api.node_frag_capacity if args.measure == "capacity" else api.node_frag)
    pods = []
    for uid, e in cluster.pods.items():
        if e.node_index < 0 or not live[e.node_index] or cluster.is_assumed(uid):
            continue
        p = e.pod
        if unevictable_reason(p) is not None or gang_id(p):
            continue
        a = inv.allocs.get(uid)
        try:
            req = api.pod_gpu_request(p)
        except api.InvalidGpuRequest:
            continue
        cpu = int(p.requests.get("cpu", 0))
        extra = {"memory": int(p.requests.get("memory", 0)), "pods": 1}
        if req is None:
            if not args.include_cpu_pods or inv.ngpu[e.node_index] == 0 or cpu == 0:
                continue
            pods.append(MovablePod(p, e.node_index, (), 0, 0, 0, cpu, "", extra))
            continue
        if a is None or a.node != e.node_index:
            continue  # GPUs unknown (no device-allocated annotation): leave it where it is
        pods.append(MovablePod(p, e.node_index, tuple(a.slots), a.core, a.mem, len(a.slots), cpu, req.spec, extra))
    return model, pods, inv


def metrics(model: SlotModel) -> dict:
    """GPU state for the plan's before/after: fragmentation by the paper's measure (comparable with
    gpu_share's replay), and by the capacity-aware one when the descent uses it."""
    left = model.left
    f = api.node_frag(model.side_left, left, model.model, model.workload)
    total = int((model.total > 0).sum())
    out = {"gpus": total, "idleGpuMilli": int(left.sum()), "wholeFreeGpus": int(((left >= 1000) & (model.total > 0)).sum()),
           "fragmentedGpuMilli": round(float(f.sum()), 1),
           "fragmentedGpuPct": round(100.0 * float(f.sum()) / (1000 * total), 4) if total else 0.0}
    if model.measure is not api.node_frag:
        out["capacityFragmentedGpuMilli"] = round(float(model.frag_of().sum()), 1)
    return out


async def defragment(builder: PlanBuilder, args: GpuDefragArgs, handle: Any, notes: list[str],
                     before: dict, after: dict, cache: api.InventoryCache | None = None) -> int:
    """Plan GPU defragmentation moves into ``builder``; fills the ``gpu`` metrics before and after.
    ``cache`` keeps the GPU inventory between rounds."""
    model, pods, _ = build(builder.cluster, handle, args, cache)
    if not model.total.any():
        notes.append(f"{PLUGIN}: no node has GPUs")
        return 0
    before["gpu"] = metrics(model)
    if not pods:
        notes.append(f"{PLUGIN}: no movable pod")
        after["gpu"] = metrics(model)
        return 0
    d = Descent(model, pods, builder, plugin=PLUGIN, min_gain=args.min_gain_milli, max_tries=args.max_target_tries,
                describe=lambda g: f"lowers fragmented GPU by {g:.0f} milli")
    moved = await d.run()
    after["gpu"] = metrics(model)
    log.info("gpu_defrag planned", moves=moved, steps=d.steps, seconds=round(d.seconds, 3), dropped=dict(d.dropped),
             before=before["gpu"]["fragmentedGpuMilli"], after=after["gpu"]["fragmentedGpuMilli"])
    return moved
