"""Koordinator's ColocationStrategy (the plugin's args) and its per-node overrides.

Resolution order for a node, as ``GetNodeColocationStrategy`` + ``UpdateColocationStrategyForNode``:
cluster strategy (the args) → the first ``nodeConfigs`` entry whose ``nodeSelector`` matches the node →
the node annotation ``node.koordinator.sh/colocation-strategy`` (JSON, same camelCase fields) → the node
labels ``node.koordinator.sh/cpu-reclaim-ratio`` / ``memory-reclaim-ratio`` (a ratio: "0.7" = 70 %).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import structlog
from koordfw_prediction.api import BONFERRONI, check_budget, check_combination

from koordfw import warn_once
from koordfw.extension import ANNOTATION_NODE_COLOCATION_STRATEGY
from koordfw.inputs import camel, loads_json, selector_matches

#: the node's colocation-strategy annotation (the wire name is koordfw.extension's; this package's older name)
ANNOTATION_COLOCATION_STRATEGY = ANNOTATION_NODE_COLOCATION_STRATEGY
LABEL_CPU_RECLAIM_RATIO = "node.koordinator.sh/cpu-reclaim-ratio"
LABEL_MEMORY_RECLAIM_RATIO = "node.koordinator.sh/memory-reclaim-ratio"

USAGE, REQUEST, MAX_USAGE_REQUEST = "usage", "request", "maxUsageRequest"
POLICIES = (USAGE, REQUEST, MAX_USAGE_REQUEST)

log = structlog.get_logger("koordfw.batch_resource")


def _policy(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value not in POLICIES:
        raise ValueError(f"{_name(attribute)}: unknown calculate policy {value!r}; use one of {', '.join(POLICIES)}")


#: integer fields are int32-sized: Koordinator's are int64, but a percentage or a number of minutes
#: beyond 2^31 has no meaning and would only overflow the int64 results
INT_MAX = 2**31 - 1


def _name(attribute: attrs.Attribute) -> str:
    return camel(attribute.name)


def _int(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{_name(attribute)}: expected an integer, got {str(value)[:40]}")
    if not -INT_MAX <= value <= INT_MAX:
        raise ValueError(f"{_name(attribute)}: expected an integer of at most {INT_MAX} in size, got {str(value)[:40]}")


def _bool(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{_name(attribute)}: expected true or false, got {value!r}")


def _ratio(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Koordinator's ``validate:"omitempty,gt=0,max=1"`` (0 is taken as Koordinator's omitted value)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 <= value <= 1):
        raise ValueError(f"{_name(attribute)}: expected a number in [0, 1], got {value!r}")


def _non_negative(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    _int(inst, attribute, value)
    if value < 0:
        raise ValueError(f"{_name(attribute)}: must be >= 0, got {value!r}")


def _opt_percent(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        _non_negative(inst, attribute, value)


def _node_configs(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    for i, cfg in enumerate(value):
        where = f"nodeConfigs[{i}]"
        if not isinstance(cfg, Mapping):
            raise ValueError(f"{where}: expected a mapping")
        sel = cfg.get("nodeSelector")
        if not isinstance(sel, Mapping):
            raise ValueError(f"{where}.nodeSelector: required, a label selector (matchLabels / matchExpressions)")
        _check_selector(sel, f"{where}.nodeSelector")
        unknown = set(cfg) - set(OVERRIDABLE) - {"nodeSelector", "name"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        merge(ColocationStrategy(), {k: v for k, v in cfg.items() if k in OVERRIDABLE}, where=where)


def _risk_budget(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    check_budget(value, _name(attribute))


def _risk_combination(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    check_combination(value, _name(attribute))


@attrs.define
class ColocationStrategy:
    """The ``batch_resource`` args: Koordinator's ColocationStrategy fields (camelCase in the profile).

    ``enable`` defaults to true here (Koordinator's cluster default is false): installing the plugin is
    the opt-in. ``resourceDiffThreshold`` and ``updateTimeThresholdSeconds`` only decide when a live
    engine rewrites node.status (see :func:`koordfw_batch_resource.calculator.needs_sync`).
    """

    enable: bool = attrs.field(default=True, validator=_bool)
    #: as Koordinator (``validate:"omitempty,min=0"``), above 100 is allowed: a negative safety margin
    cpu_reclaim_threshold_percent: int = attrs.field(default=60, validator=_non_negative)
    memory_reclaim_threshold_percent: int = attrs.field(default=65, validator=_non_negative)
    cpu_calculate_policy: str = attrs.field(default=USAGE, validator=_policy)
    memory_calculate_policy: str = attrs.field(default=USAGE, validator=_policy)
    degrade_time_minutes: int = attrs.field(default=15, validator=_non_negative)
    update_time_threshold_seconds: int = attrs.field(default=300, validator=_non_negative)
    resource_diff_threshold: float = attrs.field(default=0.1, validator=_ratio)
    # spelled so that the profile key is Koordinator's ``batchCPUThresholdPercent``
    batch_CPU_threshold_percent: int | None = attrs.field(default=None, validator=_opt_percent)
    batch_memory_threshold_percent: int | None = attrs.field(default=None, validator=_opt_percent)
    #: ``[{nodeSelector: {matchLabels: ..., matchExpressions: ...}, name: ..., <strategy fields>}]``
    node_configs: list[dict] = attrs.field(factory=list, validator=_node_configs)
    #: koordfw's risk-budget mode (not Koordinator's; docs/plugins/risk_budget.md): ``{cpu: ε, memory: ε}``,
    #: the share of node-time LS + Mid + BE usage may exceed capacity. A resource listed here is sized from the
    #: NodeMetric's predicted usage distribution instead of Koordinator's formula; unset: Koordinator's
    risk_budget: dict[str, float] | None = attrs.field(default=None, validator=_risk_budget)
    #: how the distribution's components are combined: ``bonferroni`` (any dependence) or ``independent``
    risk_combination: str = attrs.field(default=BONFERRONI, validator=_risk_combination)
    #: the node side (``koordfw agent``): koordlet's runtime-hook feature gate ``BatchResource`` (default
    #: true), which holds BE pods' cgroups to their batch requests and limits (:mod:`.runtimehook`). Not a
    #: ColocationStrategy field: a ColocationCfg, nodeConfigs entry or node annotation cannot set it
    batch_resource: bool = attrs.field(default=True, validator=_bool, metadata={"node_side": True})


#: camelCase key → field name, for the fields a node may override
OVERRIDABLE: dict[str, str] = {camel(f.name): f.name for f in attrs.fields(ColocationStrategy)
                               if f.name != "node_configs" and not f.metadata.get("node_side")}


def merge(base: ColocationStrategy, override: Mapping[str, Any], *, where: str) -> ColocationStrategy:
    """``base`` with the non-null known fields of ``override`` (camelCase) applied; unknown keys are
    ignored as Go's json.Unmarshal does. A bad value raises ValueError naming ``where`` and the field."""
    changes = {OVERRIDABLE[k]: v for k, v in override.items() if k in OVERRIDABLE and v is not None}
    if not changes:
        return base
    try:
        return attrs.evolve(base, **changes)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def _check_selector(sel: Mapping[str, Any], where: str) -> None:
    ml = sel.get("matchLabels") or {}
    if not isinstance(ml, Mapping):
        raise ValueError(f"{where}.matchLabels: expected a mapping")
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise ValueError(f"{where}.matchExpressions: expected a list")
    for j, e in enumerate(exprs):
        if not isinstance(e, Mapping) or not e.get("key") or e.get("operator") not in (
                "In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"{where}.matchExpressions[{j}]: needs key and operator In/NotIn/Exists/DoesNotExist")


def _reclaim_percent(labels: Mapping[str, str], key: str, node: str = "?", warned: set | None = None) -> int | None:
    """``getNodeReclaimPercent``: a float ratio label → int64(v*100); unparsable, negative, non-finite or
    beyond 2^31 % → ignored (with a warning naming the node and the label)."""
    s = labels.get(key)
    if s is None:
        return None
    try:
        v = float(s)
    except ValueError:
        return None
    if not math.isfinite(v) or v < 0 or v * 100 > INT_MAX:
        warn_once(log, warned, (node, key, s), "ignoring invalid node label", node=node, label=key,
                   error=f"expected a reclaim ratio in [0, {INT_MAX // 100}], got {s[:40]!r}")
        return None
    return int(v * 100)


def strategy_for_node(base: ColocationStrategy, name: str, labels: Mapping[str, str],
                      annotations: Mapping[str, str], warned: set | None = None) -> ColocationStrategy:
    """The effective strategy of one node. A bad annotation is logged (naming the node and the
    annotation) and ignored, as Koordinator does; a bad value in the args was rejected at load time."""
    s = base
    for cfg in base.node_configs:
        if selector_matches(cfg["nodeSelector"], labels):
            s = merge(s, {k: v for k, v in cfg.items() if k in OVERRIDABLE}, where="nodeConfigs")
            break
    raw = annotations.get(ANNOTATION_COLOCATION_STRATEGY)
    if raw:
        try:
            obj = loads_json(raw)
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object")
            s = merge(s, obj, where=f"node {name}: annotation {ANNOTATION_COLOCATION_STRATEGY}")
        except ValueError as e:
            warn_once(log, warned, (name, ANNOTATION_COLOCATION_STRATEGY, raw), "ignoring invalid node annotation",
                       node=name, annotation=ANNOTATION_COLOCATION_STRATEGY, error=str(e))
    cpu = _reclaim_percent(labels, LABEL_CPU_RECLAIM_RATIO, name, warned)
    mem = _reclaim_percent(labels, LABEL_MEMORY_RECLAIM_RATIO, name, warned)
    if cpu is not None or mem is not None:
        s = attrs.evolve(s, cpu_reclaim_threshold_percent=s.cpu_reclaim_threshold_percent if cpu is None else cpu,
                         memory_reclaim_threshold_percent=s.memory_reclaim_threshold_percent if mem is None else mem)
    return s


#: Koordinator's ``sloconfig.DefaultColocationStrategy`` for the fields modelled here: the plugin's
#: defaults but ``enable`` false
KOORDINATOR_DEFAULTS = ColocationStrategy(enable=False)

#: ``IsColocationStrategyValid``: these must be > 0 when set (the others >= 0, as the field validators say)
_POSITIVE = ("degrade_time_minutes", "update_time_threshold_seconds", "resource_diff_threshold")


def _check_valid(s: ColocationStrategy, where: str) -> None:
    for name in _POSITIVE:
        if getattr(s, name) <= 0:
            raise ValueError(f"{where}: {camel(name)}: must be > 0, got {getattr(s, name)!r}")


def from_colocation_config(cfg: Mapping[str, Any], where: str, warned: set | None = None) -> ColocationStrategy:
    """The cluster strategy (with its ``nodeConfigs``) of a Koordinator ColocationCfg object, as
    ``ColocationHandlerForConfigMapEvent.syncConfig``: Koordinator's defaults merged with the cluster
    fields; an invalid cluster strategy raises ValueError naming ``where`` and the field (the caller
    keeps its previous configuration). A ``nodeConfigs`` entry whose strategy is invalid is replaced by the
    cluster strategy (its selector still matches first), one whose selector is invalid is skipped, each
    logged naming the entry."""
    if not isinstance(cfg, Mapping):
        raise ValueError(f"{where}: expected a JSON object")
    base = merge(KOORDINATOR_DEFAULTS,
                 {k: v for k, v in cfg.items() if k in OVERRIDABLE}, where=where)
    _check_valid(base, where)
    raw = cfg.get("nodeConfigs")
    raw = [] if raw is None else raw
    if not isinstance(raw, list):
        raise ValueError(f"{where}: nodeConfigs: expected a list")
    configs: list[dict] = []
    for i, nc in enumerate(raw):
        w = f"{where}: nodeConfigs[{i}]"
        try:
            if not isinstance(nc, Mapping) or not isinstance(nc.get("nodeSelector"), Mapping):
                raise ValueError("nodeSelector: required, a label selector")
            _check_selector(nc["nodeSelector"], "nodeSelector")
        except ValueError as e:
            warn_once(log, warned, (w, str(e)), "skipping an invalid nodeConfigs entry", config=w, error=str(e))
            continue
        overrides = {k: v for k, v in nc.items() if k in OVERRIDABLE and v is not None}
        try:
            _check_valid(merge(base, overrides, where=w), w)
        except ValueError as e:
            warn_once(log, warned, (w, str(e)), "invalid nodeConfigs strategy: the cluster strategy applies",
                      config=w, error=str(e))
            overrides = {}
        entry = {"nodeSelector": dict(nc["nodeSelector"]), **overrides}
        if isinstance(nc.get("name"), str):
            entry["name"] = nc["name"]
        configs.append(entry)
    return attrs.evolve(base, node_configs=configs)
