"""batch_resource: Koordinator's batch resource overcommit for koordfw.

Publishes ``kubernetes.io/batch-cpu`` (integer milli-cores) and ``kubernetes.io/batch-memory`` (bytes)
per node from its NodeMetric, through the ``node_resources`` hook (Koordinator's slo-controller). On the
node (``koordfw agent``) it holds BE pods to what they requested of them, as koordlet's ``BatchResource``
runtime hook and reconciler do: ``cpu.shares`` (v2 ``cpu.weight``) from the batch-cpu requests, the CFS
quota from the batch-cpu limits and the memory limit from the batch-memory limits, for each BE pod and
container (``runtime_hook`` at a start, ``qos_plan`` every round; :mod:`.runtimehook`). See
``docs/plugins/batch_resource.md``.
"""

from .calculator import ANNOTATION_NODE_RESERVATION, BATCH_CPU, BATCH_MEMORY, BatchResult, calculate, needs_sync, safety_margin
from .metric import NodeMetricInfo, PodUsage, parse_node_metric
from .plugin import BatchResource
from .runtimehook import (
                          BatchSpec,
                          Knobs,
                          Rule,
                          container_knobs,
                          milli_cpu_to_quota,
                          milli_cpu_to_shares,
                          pod_knobs,
                          shares_to_weight,
)
from .strategy import (
                         ANNOTATION_COLOCATION_STRATEGY,
                         LABEL_CPU_RECLAIM_RATIO,
                         LABEL_MEMORY_RECLAIM_RATIO,
                         ColocationStrategy,
                         strategy_for_node,
)

__all__ = [
    "ANNOTATION_COLOCATION_STRATEGY", "ANNOTATION_NODE_RESERVATION",
    "BATCH_CPU", "BATCH_MEMORY", "LABEL_CPU_RECLAIM_RATIO", "LABEL_MEMORY_RECLAIM_RATIO", "BatchResource",
    "BatchResult", "BatchSpec", "ColocationStrategy", "Knobs", "NodeMetricInfo", "PodUsage", "Rule", "calculate",
    "container_knobs", "milli_cpu_to_quota", "milli_cpu_to_shares", "needs_sync", "parse_node_metric",
    "pod_knobs", "safety_margin", "shares_to_weight", "strategy_for_node",
]
