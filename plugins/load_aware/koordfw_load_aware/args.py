"""LoadAwareSchedulingArgs (Koordinator ``apis/config/v1`` defaults), camelCase in the profile."""

from __future__ import annotations

from typing import Any

import attrs

from .metric import parse_duration

AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")


def _percents(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    for k, v in (value or {}).items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{attribute.name}.{k}: expected a non-negative integer, got {v!r}")


def _weights(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        _percents(inst, attribute, value)


def _agg_type(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value and value not in AGGREGATION_TYPES:
        raise ValueError(f"{attribute.name}: unknown aggregation type {value!r}; use one of {', '.join(AGGREGATION_TYPES)}")


def _duration(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        parse_duration(value, where=attribute.name)


def _non_negative(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name}: expected a non-negative integer, got {value!r}")


def _estimator(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value != "defaultEstimator":
        raise ValueError(f"{attribute.name}: unknown estimator {value!r}; only defaultEstimator is available")


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
    node_metric_expiration_seconds: int = attrs.field(default=180, validator=_non_negative)
    enable_schedule_when_node_metrics_expired: bool = False
    #: defaulted to cpu 1 / memory 1 only when dominantResourceWeight is 0 (see ``weights``)
    resource_weights: dict[str, int] | None = attrs.field(default=None, validator=_weights)
    dominant_resource_weight: int = attrs.field(default=0, validator=_non_negative)
    usage_thresholds: dict[str, int] = attrs.field(factory=lambda: {"cpu": 65, "memory": 95}, validator=_percents)
    prod_usage_thresholds: dict[str, int] = attrs.field(factory=dict, validator=_percents)
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimator: str = attrs.field(default="defaultEstimator", validator=_estimator)
    estimated_scaling_factors: dict[str, int] = attrs.field(factory=lambda: {"cpu": 85, "memory": 70},
                                                            validator=_percents)
    estimated_seconds_after_pod_scheduled: int | None = attrs.field(default=None, validator=_non_negative)
    estimated_seconds_after_initialized: int | None = attrs.field(default=None, validator=_non_negative)
    aggregated: AggregatedArgs | None = None

    @property
    def weights(self) -> dict[str, int]:
        if self.resource_weights is not None:
            return dict(self.resource_weights)
        return {} if self.dominant_resource_weight else {"cpu": 1, "memory": 1}
