"""The ``defrag`` plugin: the descheduling hook around :func:`koordfw_defrag.planner.plan`."""

from __future__ import annotations

from typing import Any

import structlog
from koordfw_gpu_share.api import InventoryCache

from koordfw import ClusterView, Handle, Migration, hookimpl

from .args import Args
from .low_node_load import AnomalyTracker
from .plan import PlanResult
from .planner import plan

log = structlog.get_logger("koordfw.defrag")


class Defrag:
    """Per scheduler: keeps LowNodeLoad's abnormality counts across rounds, the GPU inventory and the
    last plan."""

    def __init__(self) -> None:
        self.tracker = AnomalyTracker()
        self.gpu_inventory = InventoryCache()
        self.last: PlanResult | None = None

    @staticmethod
    @hookimpl
    def plugin_args() -> type[Args]:
        return Args

    @hookimpl
    async def deschedule(self, cluster: ClusterView, args: Args, handle: Handle) -> list[Migration] | None:
        a = args
        if not (a.low_node_load.enabled or a.gpu_defrag.enabled or a.cpu_defrag.enabled):
            return None
        result = await plan(cluster, a, handle, tracker=self.tracker, gpu_inventory=self.gpu_inventory)
        self.last = result
        for note in result.notes:
            log.info("deschedule", note=note)
        dry = a.dry_run or (a.low_node_load.dry_run and not (a.gpu_defrag.enabled or a.cpu_defrag.enabled))
        if dry:
            for m in result.migrations:
                log.info("dry run: would migrate", pod=m.pod, source=m.from_node, target=m.to, reason=m.reason)
            return []
        if a.low_node_load.dry_run:
            return [m for m in result.migrations if m.plugin != "low_node_load"]
        return result.migrations

    @hookimpl
    def report(self, args: Args, handle: Handle) -> dict[str, Any] | None:
        if self.last is None:
            return None
        return {"deschedule": {"before": self.last.before, "after": self.last.after, "notes": self.last.notes,
                               "planSeconds": round(self.last.seconds, 6)}}
