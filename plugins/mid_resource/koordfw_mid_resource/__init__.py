"""mid_resource: Koordinator's Mid tier for koordfw (koord-manager's ``midresource`` noderesource plugin).

Publishes ``kubernetes.io/mid-cpu`` (integer milli-cores) and ``kubernetes.io/mid-memory`` (bytes) per node
from its NodeMetric's ``prodReclaimableMetric`` (what the node's peak predictor, the ``prediction`` plugin,
reports), capped by ``midCPUThresholdPercent`` / ``midMemoryThresholdPercent``, through the
``node_resources`` hook. See ``docs/plugins/mid_resource.md``.
"""

from .calculator import MidMetric, MidResult, calculate, degrade_reason, needs_sync, parse_mid_metric
from .plugin import MidResource
from .strategy import MID_RECLAIM_MODE_STATIC, MidStrategy, from_colocation_config, strategy_for_node

__all__ = ["MID_RECLAIM_MODE_STATIC", "MidMetric", "MidResource", "MidResult", "MidStrategy", "calculate",
           "degrade_reason", "from_colocation_config", "needs_sync", "parse_mid_metric", "strategy_for_node"]
