"""``cpu_defrag``: migrations that lower CPU fragmentation.

The same measure as the GPU one, with the node's free milli-cores as its single "device" and memory
as the secondary resource: for the target workload M (the most common (cpu, memory) requests of the
cluster's pods covering ``popularityThreshold`` % of them), a node's fragment is the free CPU that a
typical pod cannot use because the CPU or the memory left is too small. Moving pods so that free CPU
gathers on fewer nodes frees whole cores for the large (e.g. LSR/LSE, whole-core) pods. Pods that hold
GPUs are left to ``gpu_defrag``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from koordfw_gpu_share import api

from koordfw.extension import RESOURCE_GPU

from .args import CpuDefragArgs
from .fragengine import Descent, MovablePod, SlotModel
from .plan import PlanBuilder
from .safety import gang_id, unevictable_reason

PLUGIN = "cpu_defrag"
_GPU_PREFIXES = ("nvidia.com/", RESOURCE_GPU, "amd.com/", "dcu.com/", "huawei.com/")


def _holds_gpu(pod: Any) -> bool:
    return any(v and k.startswith(_GPU_PREFIXES) for k, v in pod.requests.items())


def build(cluster: Any, args: CpuDefragArgs) -> tuple[SlotModel, list[MovablePod]]:
    n = cluster.num_nodes
    ci, mi, pi = (cluster.resource_index(r) for r in ("cpu", "memory", "pods"))
    free = cluster.allocatable[:n] - cluster.requested[:n]
    live = cluster.live_mask
    keys = [(int(e.pod.requests.get("memory", 0)), int(e.pod.requests.get("cpu", 0)), 1, "")
            for e in cluster.pods.values() if e.pod.requests.get("cpu", 0) > 0 and not _holds_gpu(e.pod)]
    w = api.typical_pods(keys, (), args.popularity_threshold)
    total = np.where(live, cluster.allocatable[:n, ci], 0)[:, None].astype(np.int64)
    cpu_free = np.maximum(free[:, ci], 0)[:, None].astype(np.int64)
    model = SlotModel(names=[v.name for v in cluster.views], total=total, core_free=cpu_free.copy(),
                      mem_free=cpu_free.copy(), side_left=free[:, mi].copy(), model=np.full(n, -1, dtype=np.int64),
                      workload=w, extra_free={"pods": free[:, pi].copy()})
    pods = []
    for uid, e in cluster.pods.items():
        if e.node_index < 0 or not live[e.node_index] or cluster.is_assumed(uid):
            continue
        p = e.pod
        cpu = int(p.requests.get("cpu", 0))
        if cpu <= 0 or _holds_gpu(p) or unevictable_reason(p) is not None or gang_id(p):
            continue
        pods.append(MovablePod(p, e.node_index, (0,), cpu, cpu, 1, int(p.requests.get("memory", 0)), "",
                               {"pods": 1}))
    return model, pods


def metrics(model: SlotModel) -> dict:
    f = model.frag_of()
    total = int(model.total.sum())
    return {"cpuMilli": total, "idleCpuMilli": int(model.left.sum()), "fragmentedCpuMilli": round(float(f.sum()), 1),
            "fragmentedCpuPct": round(100.0 * float(f.sum()) / total, 4) if total else 0.0}


async def defragment(builder: PlanBuilder, args: CpuDefragArgs, notes: list[str], before: dict, after: dict) -> int:
    model, pods = build(builder.cluster, args)
    before["cpu"] = metrics(model)
    if not pods or len(model.workload) == 0:
        notes.append(f"{PLUGIN}: no movable pod")
        after["cpu"] = metrics(model)
        return 0
    d = Descent(model, pods, builder, plugin=PLUGIN, min_gain=args.min_gain_milli, max_tries=args.max_target_tries,
                describe=lambda g: f"lowers fragmented CPU by {g:.0f} milli-cores")
    moved = await d.run()
    after["cpu"] = metrics(model)
    return moved
