"""LoadAwareSchedulingArgs (Koordinator ``apis/config/v1`` defaults), camelCase in the profile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from koordfw.inputs import camel

from .metric import parse_duration

AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")


def _int_map(lo: int, hi: int, what: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    """attrs validator of a resource → integer mapping with every value in [lo, hi] (Koordinator's
    ``validateResourceThresholds`` / ``validateResourceWeights`` / ``validateEstimatedScalingFactors``)."""

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None:
            return
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{camel(attribute.name)}.{k}: expected {what} in [{lo}, {hi}], got {v!r}")
    return check


_percents = _int_map(0, 100, "an integer percentage")
_weights = _int_map(1, 100, "an integer weight")
_factors = _int_map(1, 100, "an integer percentage")


def _agg_type(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value and value not in AGGREGATION_TYPES:
        raise ValueError(f"{camel(attribute.name)}: unknown aggregation type {value!r}; "
                         f"use one of {', '.join(AGGREGATION_TYPES)}")


def _duration(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        if parse_duration(value, where=camel(attribute.name)) < 0:
            raise ValueError(f"{camel(attribute.name)}: must be >= 0, got {value!r}")


#: seconds fields: at most ~31 years, far inside float precision and Go's time.Duration
MAX_SECONDS = 10**9


def _seconds(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SECONDS:
        raise ValueError(f"{camel(attribute.name)}: expected an integer number of seconds in [0, {MAX_SECONDS}], "
                         f"got {value!r}")


def _dominant(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise ValueError(f"{camel(attribute.name)}: expected an integer weight in [0, 100], got {value!r}")


def _estimator(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value != "defaultEstimator":
        raise ValueError(f"{camel(attribute.name)}: unknown estimator {value!r}; only defaultEstimator is available")


@attrs.define
class AggregatedArgs:
    """Thresholds and scores over aggregated (percentile) usage, ``aggregatedNodeUsages`` in the NodeMetric."""

    usage_thresholds: dict[str, int] = attrs.field(factory=dict, validator=_percents)
    usage_aggregation_type: str = attrs.field(default="", validator=_agg_type)
    usage_aggregated_duration: str | None = attrs.field(default=None, validator=_duration)
    score_aggregation_type: str = attrs.field(default="", validator=_agg_type)
    score_aggregated_duration: str | None = attrs.field(default=None, validator=_duration)

    def usage_duration(self) -> float | None:
        return None if self.usage_aggregated_duration is None else parse_duration(
            self.usage_aggregated_duration, where="usageAggregatedDuration")

    def score_duration(self) -> float | None:
        return None if self.score_aggregated_duration is None else parse_duration(
            self.score_aggregated_duration, where="scoreAggregatedDuration")


@attrs.define
class LoadAwareArgs:
    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = attrs.field(default=180, validator=_seconds)
    enable_schedule_when_node_metrics_expired: bool = False
    #: defaulted to cpu 1 / memory 1 only when dominantResourceWeight is 0 (see ``weights``)
    resource_weights: dict[str, int] | None = attrs.field(default=None, validator=_weights)
    dominant_resource_weight: int = attrs.field(default=0, validator=_dominant)
    usage_thresholds: dict[str, int] = attrs.field(factory=lambda: {"cpu": 65, "memory": 95}, validator=_percents)
    prod_usage_thresholds: dict[str, int] = attrs.field(factory=dict, validator=_percents)
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimator: str = attrs.field(default="defaultEstimator", validator=_estimator)
    estimated_scaling_factors: dict[str, int] = attrs.field(factory=lambda: {"cpu": 85, "memory": 70},
                                                            validator=_factors)
    estimated_seconds_after_pod_scheduled: int | None = attrs.field(default=None, validator=_seconds)
    estimated_seconds_after_initialized: int | None = attrs.field(default=None, validator=_seconds)
    aggregated: AggregatedArgs | None = None

    @property
    def weights(self) -> dict[str, int]:
        if self.resource_weights is not None:
            return dict(self.resource_weights)
        return {} if self.dominant_resource_weight else {"cpu": 1, "memory": 1}
