"""batch_resource: Koordinator's batch resource overcommit for koordfw.

Publishes ``kubernetes.io/batch-cpu`` (integer milli-cores) and ``kubernetes.io/batch-memory`` (bytes)
per node from its NodeMetric, through the ``node_resources`` hook. See ``docs/plugins/batch_resource.md``.
"""

from .calculator import ANNOTATION_NODE_RESERVATION, BATCH_CPU, BATCH_MEMORY, BatchResult, calculate, needs_sync, safety_margin
from .metric import NodeMetricInfo, PodUsage, parse_node_metric
from .plugin import BatchResource
from .strategy import (
                         ANNOTATION_COLOCATION_STRATEGY,
                         LABEL_CPU_RECLAIM_RATIO,
                         LABEL_MEMORY_RECLAIM_RATIO,
                         ColocationStrategy,
                         strategy_for_node,
)

__all__ = [
    "ANNOTATION_COLOCATION_STRATEGY", "ANNOTATION_NODE_RESERVATION", "BATCH_CPU", "BATCH_MEMORY",
    "LABEL_CPU_RECLAIM_RATIO", "LABEL_MEMORY_RECLAIM_RATIO", "BatchResource", "BatchResult",
    "ColocationStrategy", "NodeMetricInfo", "PodUsage", "calculate", "needs_sync", "parse_node_metric",
    "safety_margin", "strategy_for_node",
]
