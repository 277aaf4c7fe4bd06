"""The Mid-tier fields of Koordinator's ColocationStrategy (the plugin's args) and their per-node overrides.

Field names are Koordinator's (``apis/configuration/slo_controller_config.go``), camelCase in the profile
and in the ``colocation-config`` of the ``slo-controller-config`` ConfigMap:

* ``midReclaimMode``: ``"static"`` sizes Mid from capacity (``midStatic*ReservedPercent``); anything else
  (the default, unset) from the NodeMetric's ``prodReclaimableMetric``;
* ``midCPUThresholdPercent`` / ``midMemoryThresholdPercent`` (0-100, default 100): the cap, a share of
  the node's capacity;
* ``midUnallocatedPercent`` (0-100, default 0): the share of the unallocated resources (capacity -
  reserved - Prod requests) added to the reclaimable;
* ``midStaticCPUReservedPercent`` / ``midStaticMemoryReservedPercent`` (>= 0, default 0): the static mode's
  share of capacity;
* ``enable``, ``degradeTimeMinutes``, ``updateTimeThresholdSeconds``, ``resourceDiffThreshold`` and
  ``nodeConfigs``: shared with the batch resources (the same ColocationStrategy), read here again.

Resolution for a node, as ``GetNodeColocationStrategy`` + ``UpdateColocationStrategyForNode``: the cluster
strategy → the first ``nodeConfigs`` entry whose ``nodeSelector`` matches → the node annotation
``node.koordinator.sh/colocation-strategy`` (JSON) → the node labels
``node.koordinator.sh/mid-static-cpu-reserved-ratio`` / ``mid-static-memory-reserved-ratio`` (a ratio:
"0.1" = 10 %).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import structlog
from koordfw_prediction.api import BONFERRONI, check_budget, check_combination

from koordfw import warn_once
from koordfw.extension import (
    ANNOTATION_NODE_COLOCATION_STRATEGY,
    LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
)
from koordfw.inputs import camel, loads_json, selector_matches

log = structlog.get_logger("koordfw.mid_resource")

#: ``configuration.MidReclaimModeStatic``
MID_RECLAIM_MODE_STATIC = "static"
INT_MAX = 2**31 - 1


def _name(attribute: attrs.Attribute) -> str:
    return camel(attribute.name)


def _int(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT_MAX:
        raise ValueError(f"{_name(attribute)}: expected an integer in [0, {INT_MAX}], got {str(value)[:40]}")


def _percent(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """``validate:"omitempty,min=0,max=100"`` (and ``IsColocationStrategyValid``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise ValueError(f"{_name(attribute)}: expected an integer percentage in [0, 100], got {str(value)[:40]}")


def _positive(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    _int(inst, attribute, value)
    if value <= 0:
        raise ValueError(f"{_name(attribute)}: must be > 0, got {value!r}")


def _ratio(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 < value <= 1):
        raise ValueError(f"{_name(attribute)}: expected a number in (0, 1], got {value!r}")


def _bool(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{_name(attribute)}: expected true or false, got {value!r}")


def _mode(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{_name(attribute)}: expected a string (\"static\" or unset), got {value!r}")


def _node_configs(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    for i, cfg in enumerate(value):
        where = f"nodeConfigs[{i}]"
        if not isinstance(cfg, Mapping) or not isinstance(cfg.get("nodeSelector"), Mapping):
            raise ValueError(f"{where}.nodeSelector: required, a label selector (matchLabels / matchExpressions)")
        merge(MidStrategy(), cfg, where=where)


def _risk_budget(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    check_budget(value, _name(attribute))


def _risk_combination(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    check_combination(value, _name(attribute))


@attrs.define
class MidStrategy:
    """The ``mid_resource`` args. ``enable`` defaults to true (installing the plugin is the opt-in; the
    cluster's ColocationCfg starts from Koordinator's false); the Mid defaults are Koordinator's
    (``sloconfig.DefaultColocationStrategy``)."""

    enable: bool = attrs.field(default=True, validator=_bool)
    degrade_time_minutes: int = attrs.field(default=15, validator=_positive)
    update_time_threshold_seconds: int = attrs.field(default=300, validator=_positive)
    resource_diff_threshold: float = attrs.field(default=0.1, validator=_ratio)
    mid_reclaim_mode: str | None = attrs.field(default=None, validator=_mode)
    # spelled so that the wire names are Koordinator's ``midCPUThresholdPercent`` and so on
    mid_CPU_threshold_percent: int = attrs.field(default=100, validator=_percent)
    mid_memory_threshold_percent: int = attrs.field(default=100, validator=_percent)
    mid_unallocated_percent: int = attrs.field(default=0, validator=_percent)
    mid_static_CPU_reserved_percent: int = attrs.field(default=0, validator=_int)
    mid_static_memory_reserved_percent: int = attrs.field(default=0, validator=_int)
    #: koordfw's risk-budget mode (docs/plugins/risk_budget.md), the same fields as batch_resource's:
    #: ``{cpu: ε, memory: ε}`` sizes those resources from the predicted usage distribution; unset: Koordinator's
    risk_budget: dict[str, float] | None = attrs.field(default=None, validator=_risk_budget)
    risk_combination: str = attrs.field(default=BONFERRONI, validator=_risk_combination)
    node_configs: list[dict] = attrs.field(factory=list, validator=_node_configs)


#: camelCase wire name → field name, for the fields a node may override
OVERRIDABLE: dict[str, str] = {camel(f.name): f.name for f in attrs.fields(MidStrategy) if f.name != "node_configs"}

#: Koordinator's defaults of these fields (``enable`` false)
KOORDINATOR_DEFAULTS = MidStrategy(enable=False)


def merge(base: MidStrategy, override: Mapping[str, Any], *, where: str) -> MidStrategy:
    """``base`` with the non-null known fields of ``override`` (camelCase); other keys are ignored as Go's
    json.Unmarshal does (the batch fields of the same ColocationStrategy). A bad value raises ValueError
    naming ``where`` and the field."""
    changes = {OVERRIDABLE[k]: v for k, v in override.items() if k in OVERRIDABLE and v is not None}
    if not changes:
        return base
    try:
        return attrs.evolve(base, **changes)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def _label_percent(labels: Mapping[str, str], key: str, node: str, warned: set | None) -> int | None:
    """``getNodeReclaimPercent``: a float ratio label → int64(v*100); an invalid one is logged and ignored."""
    s = labels.get(key)
    if s is None:
        return None
    try:
        v = float(s)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0 or v * 100 > INT_MAX:
        warn_once(log, warned, (node, key, s), "ignoring invalid node label", node=node, label=key,
                  error=f"expected a ratio >= 0, got {s[:40]!r}")
        return None
    return int(v * 100)


def strategy_for_node(base: MidStrategy, name: str, labels: Mapping[str, str], annotations: Mapping[str, str],
                      warned: set | None = None) -> MidStrategy:
    """The effective strategy of one node; a bad annotation or label is logged naming the node and ignored."""
    s = base
    for cfg in base.node_configs:
        if selector_matches(cfg["nodeSelector"], labels):
            s = merge(s, cfg, where="nodeConfigs")
            break
    raw = annotations.get(ANNOTATION_NODE_COLOCATION_STRATEGY)
    if raw:
        try:
            obj = loads_json(raw)
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object")
            s = merge(s, obj, where=f"node {name}: annotation {ANNOTATION_NODE_COLOCATION_STRATEGY}")
        except ValueError as e:
            warn_once(log, warned, (name, ANNOTATION_NODE_COLOCATION_STRATEGY, raw), "ignoring invalid node annotation",
                      node=name, annotation=ANNOTATION_NODE_COLOCATION_STRATEGY, error=str(e))
    cpu = _label_percent(labels, LABEL_MID_STATIC_CPU_RESERVED_RATIO, name, warned)
    mem = _label_percent(labels, LABEL_MID_STATIC_MEMORY_RESERVED_RATIO, name, warned)
    if cpu is not None:
        s = attrs.evolve(s, mid_static_CPU_reserved_percent=cpu)
    if mem is not None:
        s = attrs.evolve(s, mid_static_memory_reserved_percent=mem)
    return s


def from_colocation_config(cfg: Mapping[str, Any], where: str, warned: set | None = None) -> MidStrategy:
    """The cluster strategy of a ColocationCfg: Koordinator's defaults merged with its fields. An invalid
    cluster strategy raises ValueError (the caller keeps its previous one); an invalid ``nodeConfigs`` entry
    is logged and skipped."""
    if not isinstance(cfg, Mapping):
        raise ValueError(f"{where}: expected a JSON object")
    base = merge(KOORDINATOR_DEFAULTS, cfg, where=where)
    raw = cfg.get("nodeConfigs") or []
    if not isinstance(raw, list):
        raise ValueError(f"{where}: nodeConfigs: expected a list")
    configs: list[dict] = []
    for i, nc in enumerate(raw):
        w = f"{where}: nodeConfigs[{i}]"
        try:
            if not isinstance(nc, Mapping) or not isinstance(nc.get("nodeSelector"), Mapping):
                raise ValueError("nodeSelector: required, a label selector")
            overrides = {k: v for k, v in nc.items() if k in OVERRIDABLE and v is not None}
            merge(base, overrides, where=w)
        except ValueError as e:
            warn_once(log, warned, (w, str(e)), "skipping an invalid nodeConfigs entry", config=w, error=str(e))
            continue
        configs.append({"nodeSelector": dict(nc["nodeSelector"]), **overrides})
    return attrs.evolve(base, node_configs=configs)
