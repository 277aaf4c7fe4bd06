"""The defrag plugin's args: ``pluginConfig: {defrag: {...}}``.

``lowNodeLoad`` mirrors Koordinator's ``LowNodeLoadArgs`` (v1alpha2) field names; top-level thresholds
form the pool ``__default_node_pool__``. The budgets apply to the whole plan of one round, across the
strategies. Every strategy is off until configured, so an installed plugin changes nothing by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from koordfw import parse_duration
from koordfw.inputs import camel

DEFAULT_POOL = "__default_node_pool__"

_T = TypeVar("_T")

def duration_seconds(value: Any) -> float:
    """A Go duration ("1m", "90s", "1m30s") or a number of seconds → seconds; negative is invalid."""
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError(f"invalid duration {value!r}: negative")
    return seconds


def _percent_map(value: Any) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of resource name to percent, got {value!r}")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{k}: expected a finite number (percent), got {v!r}")
        if v < 0 or v > 100:
            raise ValueError(f"{k}: percent {v} outside 0..100")
        out[str(k)] = float(v)
    return out


def _named(convert: Callable[[Any], _T], name: str, value: Any) -> _T:
    """``convert(value)`` with its error messages prefixed by the field's camelCase name."""
    try:
        return convert(value)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def _weights(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of resource name to weight, got {value!r}")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= INT_MAX:
            raise ValueError(f"{k}: expected an integer weight in [0, {INT_MAX}], got {str(v)[:40]}")
        out[str(k)] = v
    return out


# the fields' converters: named functions, the only kind mypy's attrs plugin can type
def _timeout(value: Any) -> float:
    return _named(duration_seconds, "timeout", value)


def _low_thresholds(value: Any) -> dict[str, float]:
    return _named(_percent_map, "lowThresholds", value)


def _high_thresholds(value: Any) -> dict[str, float]:
    return _named(_percent_map, "highThresholds", value)


def _prod_low_thresholds(value: Any) -> dict[str, float]:
    return _named(_percent_map, "prodLowThresholds", value)


def _prod_high_thresholds(value: Any) -> dict[str, float]:
    return _named(_percent_map, "prodHighThresholds", value)


def _resource_weights(value: Any) -> dict[str, int]:
    return _named(_weights, "resourceWeights", value)


#: counts and weights are int32-sized
INT_MAX = 2**31 - 1


def _non_negative(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A finite number >= 0 (an int32 for integer fields)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{camel(attribute.name)}: expected a finite number >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{camel(attribute.name)}: must be >= 0, got {value}")
    if isinstance(value, int) and value > INT_MAX:
        raise ValueError(f"{camel(attribute.name)}: must be at most {INT_MAX}, got {str(value)[:40]}")


def _percent(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A finite percentage in [0, 100]."""
    _non_negative(inst, attribute, value)
    if value > 100:
        raise ValueError(f"{camel(attribute.name)}: must be at most 100, got {value}")


@attrs.define
class AnomalyCondition:
    """Koordinator's ``LoadAnomalyCondition``: a node is abnormal after this many rounds over its high
    threshold in a row (1 = at once); ``consecutiveNormalities`` normal rounds reset it, and so does no
    observation for ``timeout``."""

    timeout: Any = attrs.field(default="1m", converter=_timeout)
    consecutive_abnormalities: int = attrs.field(default=5, validator=_non_negative)
    consecutive_normalities: int = attrs.field(default=3, validator=_non_negative)


@attrs.define
class NamespaceFilter:
    include: list[str] = attrs.field(factory=list)
    exclude: list[str] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        if self.include and self.exclude:
            raise ValueError("evictableNamespaces: only one of include and exclude may be set")


@attrs.define
class PodSelector:
    name: str = ""
    selector: dict = attrs.field(factory=dict)


@attrs.define
class NodePool:
    """One ``LowNodeLoadNodePool``. Thresholds are percents per resource (``cpu``, ``memory``, ...)."""

    name: str = ""
    node_selector: dict = attrs.field(factory=dict)
    use_deviation_thresholds: bool = False
    low_thresholds: dict = attrs.field(factory=dict, converter=_low_thresholds)
    high_thresholds: dict = attrs.field(factory=dict, converter=_high_thresholds)
    prod_low_thresholds: dict = attrs.field(factory=dict, converter=_prod_low_thresholds)
    prod_high_thresholds: dict = attrs.field(factory=dict, converter=_prod_high_thresholds)
    resource_weights: dict = attrs.field(factory=dict, converter=_resource_weights)
    anomaly_condition: AnomalyCondition | None = None

    @property
    def configured(self) -> bool:
        return bool(self.low_thresholds or self.high_thresholds)

    @property
    def prod_configured(self) -> bool:
        return bool(self.prod_low_thresholds or self.prod_high_thresholds)


@attrs.define
class LowNodeLoadArgs:
    """Koordinator's ``LowNodeLoadArgs``. Off unless thresholds (top level or in a pool) are given."""

    paused: bool = False
    dry_run: bool = False
    number_of_nodes: int = attrs.field(default=0, validator=_non_negative)
    node_fit: bool = True
    node_metric_expiration_seconds: int = attrs.field(default=180, validator=_non_negative)
    evictable_namespaces: NamespaceFilter | None = None
    node_selector: dict = attrs.field(factory=dict)
    pod_selectors: list[PodSelector] = attrs.field(factory=list)
    use_deviation_thresholds: bool = False
    low_thresholds: dict = attrs.field(factory=dict, converter=_low_thresholds)
    high_thresholds: dict = attrs.field(factory=dict, converter=_high_thresholds)
    prod_low_thresholds: dict = attrs.field(factory=dict, converter=_prod_low_thresholds)
    prod_high_thresholds: dict = attrs.field(factory=dict, converter=_prod_high_thresholds)
    resource_weights: dict = attrs.field(factory=dict, converter=_resource_weights)
    anomaly_condition: AnomalyCondition = attrs.field(factory=AnomalyCondition)
    node_pools: list[NodePool] = attrs.field(factory=list)

    def pools(self) -> list[NodePool]:
        """The configured pools; the top-level thresholds become ``__default_node_pool__`` (first)."""
        out = []
        top = NodePool(name=DEFAULT_POOL, use_deviation_thresholds=self.use_deviation_thresholds,
                       low_thresholds=self.low_thresholds, high_thresholds=self.high_thresholds,
                       prod_low_thresholds=self.prod_low_thresholds, prod_high_thresholds=self.prod_high_thresholds,
                       resource_weights=self.resource_weights, anomaly_condition=self.anomaly_condition)
        if top.configured or top.prod_configured:
            out.append(top)
        for p in self.node_pools:
            if p.anomaly_condition is None:
                p = attrs.evolve(p, anomaly_condition=self.anomaly_condition)
            out.append(p)
        return out

    @property
    def enabled(self) -> bool:
        return not self.paused and any(p.configured or p.prod_configured for p in self.pools())


@attrs.define
class GpuDefragArgs:
    """Migrations that lower GPU fragmentation (gpu_share's measures) under the target workload."""

    enabled: bool = False
    #: a move is planned only when it lowers the expected fragmented GPU milli by at least this much
    min_gain_milli: float = attrs.field(default=100.0, validator=_non_negative)
    #: move CPU-only pods off GPU nodes too (they hold the CPU that GPU tasks need)
    include_cpu_pods: bool = True
    #: targets tried per move with the scheduler's filters before the pod is given up for the round
    max_target_tries: int = attrs.field(default=8, validator=_non_negative)
    #: the fragmentation measure the descent lowers: ``capacity`` (gpu_share's node_frag_capacity: a GPU
    #: counts as usable only as far as the node's CPU leaves room for the pods that would use it) or
    #: ``fgd`` (the paper's node_frag)
    measure: str = attrs.field(default="capacity", validator=attrs.validators.in_(("capacity", "fgd")))


@attrs.define
class CpuDefragArgs:
    """Migrations that lower CPU fragmentation: free CPU left in pieces the typical pods cannot use."""

    enabled: bool = False
    min_gain_milli: float = attrs.field(default=500.0, validator=_non_negative)
    max_target_tries: int = attrs.field(default=8, validator=_non_negative)
    #: the typical-pod cut (percent of pods covered), as the GPU measure's
    popularity_threshold: float = attrs.field(default=95.0, validator=_percent)


@attrs.define
class Args:
    low_node_load: LowNodeLoadArgs = attrs.field(factory=LowNodeLoadArgs)
    gpu_defrag: GpuDefragArgs = attrs.field(factory=GpuDefragArgs)
    cpu_defrag: CpuDefragArgs = attrs.field(factory=CpuDefragArgs)
    #: budgets of one round (0 = no limit); the percent is of the bound pods
    max_migrating_per_round: int = attrs.field(default=0, validator=_non_negative)
    max_migrating_percent_per_round: float = attrs.field(default=0.0, validator=_percent)
    max_migrating_per_node: int = attrs.field(default=0, validator=_non_negative)
    max_migrating_per_namespace: int = attrs.field(default=0, validator=_non_negative)
    #: plan and report, but return no migration to the engine
    dry_run: bool = False
