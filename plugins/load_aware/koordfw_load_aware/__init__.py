"""load_aware: Koordinator's LoadAware scheduling for koordfw.

Filters nodes whose estimated usage would exceed the usage thresholds and scores nodes by their least
used resources, from NodeMetric objects. See ``docs/plugins/load_aware.md``.
"""

from .args import AggregatedArgs, LoadAwareArgs
from .estimator import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, estimate_pod, estimate_resource, go_round
from .metric import MetricInfo, parse_duration, parse_node_metric
from .plugin import (
                     ANNOTATION_USAGE_THRESHOLDS,
                     REASON_AGGREGATED,
                     REASON_EXPIRED,
                     REASON_PROD,
                     REASON_USAGE,
                     LoadAware,
                     node_allocatable,
                     node_profile,
)

__all__ = [
    "ANNOTATION_USAGE_THRESHOLDS", "DEFAULT_MEMORY", "DEFAULT_MILLI_CPU",
    "REASON_AGGREGATED", "REASON_EXPIRED", "REASON_PROD", "REASON_USAGE", "AggregatedArgs", "LoadAware",
    "LoadAwareArgs", "MetricInfo", "estimate_pod", "estimate_resource", "go_round", "node_allocatable",
    "node_profile", "parse_duration", "parse_node_metric",
]
