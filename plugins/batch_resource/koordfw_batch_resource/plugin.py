"""The ``batch_resource`` plugin: a ``node_resources`` hook publishing batch-cpu / batch-memory.

A node without a NodeMetric object is left alone (the hook returns ``None``): nothing is known about
its usage, and a cluster snapshot may already carry the slo-controller's values in node.status. A node
whose NodeMetric is too old (``degradeTimeMinutes``) or lacks ``status.updateTime``, or whose strategy
disables colocation, gets both resources reset to 0 (removed), as Koordinator degrades them.
"""

from __future__ import annotations

from typing import Any

import structlog

from koordfw import ManifestError, format_quantity, hookimpl, warn_once
from koordfw.extension import BATCH_CPU, BATCH_MEMORY

from .calculator import BatchResult, calculate
from .metric import parse_node_metric
from .strategy import ColocationStrategy, strategy_for_node

log = structlog.get_logger("koordfw.batch_resource")


class BatchResource:
    def __init__(self) -> None:
        #: node name → the last calculation, for ``report``
        self.results: dict[str, BatchResult] = {}
        #: bad annotations, labels and NodeMetrics already reported
        self.warned: set = set()

    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return ColocationStrategy

    @hookimpl
    def node_resources(self, node: Any, pods: Any, metric: Any, now: float, args: ColocationStrategy) -> dict | None:
        if metric is None:
            return None
        n = getattr(node, "node", node)  # a NodeView or a bare Node
        strategy = strategy_for_node(args, n.name, n.labels, n.annotations, self.warned)
        try:
            info = parse_node_metric(metric)
        except ManifestError as e:
            # Koordinator degrades a node without a usable NodeMetric: its batch resources are reset
            warn_once(log, self.warned, (n.name, "NodeMetric", str(e)),
                      "invalid NodeMetric: the node's batch resources are reset", node=n.name, error=str(e))
            result = BatchResult(node=n.name, degraded=f"invalid NodeMetric ({e})")
        else:
            result = calculate(strategy, n, pods, info, now, self.warned)
        self.results[n.name] = result
        return result.resources

    @hookimpl
    def report(self) -> dict | None:
        if not self.results:
            return None
        rows = []
        for name in sorted(self.results):
            r = self.results[name]
            row: dict[str, Any] = {"node": name,
                                   BATCH_CPU: str(r.batch_cpu),
                                   BATCH_MEMORY: format_quantity("memory", r.batch_memory)}
            if r.degraded:
                row["degraded"] = r.degraded
            else:
                row["policy"] = {"cpu": r.cpu_policy, "memory": r.memory_policy}
                for term in ("capacity", "margin", "reserved", "system_used", "hp_request", "hp_used",
                             "hp_max_used_req"):
                    v = getattr(r, term)
                    row[_camel(term)] = {"cpu": format_quantity("cpu", v["cpu"]),
                                         "memory": format_quantity("memory", v["memory"])}
            rows.append(row)
        return {"batchResources": rows}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


__all__ = ["BatchResource", "BatchResult", "ColocationStrategy"]
