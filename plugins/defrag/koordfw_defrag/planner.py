"""The pure planning entry point: one descheduling round over a cluster snapshot.

:func:`plan` does not change the cluster (its what-ifs are undone before it returns) and evicts
nothing; it returns the migrations with their reserved targets and the metrics before and after.
Engines execute the result: ``koordfw simulate --deschedule`` in memory, the live scheduler through
the Eviction API (each migration's ``to`` becomes the pod's nominated node).
"""

from __future__ import annotations

import time
from typing import Any

from koordfw_gpu_share.api import InventoryCache

from .args import Args
from .low_node_load import AnomalyTracker, balance
from .plan import PlanBuilder, PlanResult


async def plan(cluster: Any, args: Args, handle: Any, *, tracker: AnomalyTracker | None = None,
               now: float | None = None, gpu_inventory: InventoryCache | None = None) -> PlanResult:
    """Plan one round: LowNodeLoad first (hot nodes), then GPU and CPU defragmentation, all within
    the same budgets and reservations.

    ``handle`` is the scheduler's Handle (its filters check every target); ``tracker`` keeps the
    consecutive-abnormality counts between rounds (a fresh one = first round); ``now`` defaults to the
    handle's clock; ``gpu_inventory`` keeps gpu_defrag's GPU inventory between rounds (a fresh one
    builds it from the cluster).
    """
    from . import cpu_defrag, gpu_defrag

    t0 = time.perf_counter()
    now = handle.clock.now() if now is None else now
    tracker = tracker if tracker is not None else AnomalyTracker()
    builder = PlanBuilder(cluster, handle, args)
    out = PlanResult()
    if args.low_node_load.enabled:
        pools_before: dict = {}
        await balance(builder, args.low_node_load, tracker, now, out.notes, pools_before)
        out.before["lowNodeLoad"] = pools_before
    if args.gpu_defrag.enabled:
        await gpu_defrag.defragment(builder, args.gpu_defrag, handle, out.notes, out.before, out.after,
                                   gpu_inventory)
    if args.cpu_defrag.enabled:
        await cpu_defrag.defragment(builder, args.cpu_defrag, out.notes, out.before, out.after)
    if args.low_node_load.enabled:
        out.after["lowNodeLoad"] = _after_low_node_load(builder, args, now)
    out.migrations = list(builder.migrations)
    out.seconds = time.perf_counter() - t0
    return out


def _after_low_node_load(builder: PlanBuilder, args: Args, now: float) -> dict:
    """Pool counts with the planned moves applied to the reported usage (pods carry their usage)."""
    from .low_node_load import classify, pool_nodes, readable_node_usage

    cluster = builder.cluster
    lnl = args.low_node_load
    pools = lnl.pools()
    members = pool_nodes(cluster, pools, lnl)
    moves = {(m.pod, m.from_node): m.to for m in builder.migrations}
    out = {}
    usages_all = {}
    for pool in pools:
        for v in members[pool.name]:
            u = readable_node_usage(v, cluster, now, lnl.node_metric_expiration_seconds)
            if u is not None:
                usages_all[u.name] = u
    for (key, src), to in moves.items():
        s, t = usages_all.get(src), usages_all.get(to) if to is not None else None  # to None: an eviction
        if s is None:
            continue
        pu = s.pod_usage.get(key, {})
        for r, v in pu.items():
            s.usage[r] = s.usage.get(r, 0) - v
            if t is not None:
                t.usage[r] = t.usage.get(r, 0) + v
        s.usage["pods"] -= 1
        if t is not None:
            t.usage["pods"] += 1
    for pool in pools:
        us = [usages_all[v.name] for v in members[pool.name] if v.name in usages_all]
        if not us:
            continue
        c, _, _ = classify(pool, us)
        out[pool.name] = {"nodes": len(us), "low": len(c.low) + len(c.both_low), "over": len(c.sources),
                          "prodHigh": len(c.prod_high)}
    return out
