"""Koordinator's CPUNormalizationCfg (``cpu-normalization-config`` of ``slo-controller-config``): the cluster
strategy (``enable``, ``defaultRatio``, ``ratioModel``) and ``nodeConfigs`` (a ``nodeSelector`` plus a
strategy merged over the cluster's), and the ratio of one CPU (``getCPUNormalizationRatio``).

Parsing is strict where Koordinator's JSON decoding is (a field of the wrong type fails the whole
configuration, which the caller then keeps at its previous value), and the error names the CPU model and
the field: ``ratioModel."Intel Xeon 8269CY".baseRatio: expected a number, got 'fast'``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from koordfw.inputs import selector_matches

#: CPU normalization ratios outside [1, 5] are refused (Koordinator: "in case of unexpected resource amplification")
MIN_RATIO = 1.0
MAX_RATIO = 5.0
#: the ratio written when normalization is disabled for the node
DEFAULT_RATIO_STR = "1.00"
#: ModelRatioCfg's fields, by (hyper-threading, turbo)
RATIO_FIELDS = {(True, True): "hyperThreadTurboEnabledRatio", (True, False): "hyperThreadEnabledRatio",
                (False, True): "turboEnabledRatio", (False, False): "baseRatio"}


@attrs.frozen
class Strategy:
    """CPUNormalizationStrategy: ``ratio_model`` maps a CPU model to its ModelRatioCfg (field → ratio)."""

    enable: bool | None = False
    default_ratio: float | None = None
    ratio_model: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)


@attrs.frozen
class Config:
    """CPUNormalizationCfg: the cluster strategy and the node strategies (selector, merged strategy)."""

    cluster: Strategy = Strategy()
    node_configs: tuple[tuple[Mapping[str, Any] | None, Strategy], ...] = ()

    def strategy_for(self, labels: Mapping[str, str]) -> Strategy:
        """``GetStrategyCopy``: the first node config whose selector matches the labels, else the cluster's."""
        for selector, strategy in self.node_configs:
            if selector_matches(selector, labels):
                return strategy
        return self.cluster


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: expected a number, got {json.dumps(v)[:40]}")
    return float(v)


def _strategy(obj: Mapping[str, Any], base: Strategy, where: str) -> Strategy:
    """``util.MergeCfg``: the fields ``obj`` sets over ``base`` (a ratioModel entry replaces the model's whole entry)."""
    enable, default, model = base.enable, base.default_ratio, dict(base.ratio_model)
    if obj.get("enable") is not None:
        if not isinstance(obj["enable"], bool):
            raise ValueError(f"{where}enable: expected true or false, got {json.dumps(obj['enable'])[:40]}")
        enable = obj["enable"]
    if obj.get("defaultRatio") is not None:
        default = _number(obj["defaultRatio"], f"{where}defaultRatio")
    raw_model = obj.get("ratioModel")
    if raw_model is not None:
        if not isinstance(raw_model, dict):
            raise ValueError(f"{where}ratioModel: expected an object of CPU models")
        for name, cfg in raw_model.items():
            at = f"{where}ratioModel.{json.dumps(name)}"
            if not isinstance(cfg, dict):
                raise ValueError(f"{at}: expected an object of ratios, got {json.dumps(cfg)[:40]}")
            model[name] = {f: _number(cfg[f], f"{at}.{f}") for f in RATIO_FIELDS.values() if cfg.get(f) is not None}
    return Strategy(enable, default, model)


def parse_config(text: str | None) -> Config:
    """The configuration of the ``cpu-normalization-config`` value (None or "": Koordinator's default,
    disabled with no models); ValueError naming the field on a bad value."""
    if not text:
        return Config()
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object (Koordinator's CPUNormalizationCfg)")
    cluster = _strategy(obj, Strategy(), "")
    nodes = []
    for i, nc in enumerate(obj.get("nodeConfigs") or []):
        if not isinstance(nc, dict):
            raise ValueError(f"nodeConfigs[{i}]: expected an object")
        sel = nc.get("nodeSelector")
        if sel is not None and not isinstance(sel, dict):
            raise ValueError(f"nodeConfigs[{i}].nodeSelector: expected a label selector")
        nodes.append((sel, _strategy(nc, cluster, f"nodeConfigs[{i}].")))
    return Config(cluster, tuple(nodes))


def ratio_from_model(info: Mapping[str, Any], strategy: Strategy) -> float:
    """``getCPUNormalizationRatioFromModel``: the ratio of the CPU's model for its HT and turbo state."""
    if not strategy.ratio_model:
        raise ValueError("ratio model is nil")
    model = str(info.get("cpuModel") or "")
    cfg = strategy.ratio_model.get(model)
    if cfg is None:
        raise ValueError(f"no ratio for CPU {model}")
    field = RATIO_FIELDS[(bool(info.get("hyperThreadEnabled")), bool(info.get("turboEnabled")))]
    if field not in cfg:
        raise ValueError(f"missing {field[0].upper() + field[1:]} for CPU {model}")
    return cfg[field]


def cpu_ratio(info: Mapping[str, Any], strategy: Strategy) -> float:
    """``getCPUNormalizationRatio``: the model's ratio, else the strategy's ``defaultRatio``, else ValueError."""
    try:
        return ratio_from_model(info, strategy)
    except ValueError as e:
        if strategy.default_ratio is not None:
            return strategy.default_ratio
        raise ValueError(f"failed to get cpu normalization ratio from model, err: {e}") from None


def check_ratio(ratio: float) -> None:
    """``isCPUNormalizationRatioValid``: ValueError outside [1, 5]."""
    if ratio < MIN_RATIO:
        raise ValueError(f"the ratio is too small, cur[{ratio:g}] < min[{MIN_RATIO:g}]")
    if ratio > MAX_RATIO:
        raise ValueError(f"the ratio is too big, cur[{ratio:g}] > max[{MAX_RATIO:g}]")


def format_ratio(ratio: float) -> str:
    """Two decimals, as Koordinator's ``strconv.FormatFloat(ratio, 'f', 2, 64)``."""
    return f"{ratio:.2f}"


def parse_enabled_label(value: str | None) -> bool | None:
    """``GetCPUNormalizationEnabled``: Go's ParseBool of the node label (None without it); ValueError otherwise."""
    if value is None:
        return None
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"parse cpu normalization enabled failed: {value[:40]!r} is not a boolean")


def parse_basic_info(annotations: Mapping[str, str], key: str) -> dict[str, Any] | None:
    """``GetCPUBasicInfo``: the CPUBasicInfo JSON of an annotation (None without it); ValueError when bad."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        info = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"unmarshal cpu basic info failed, err: {e}") from None
    if not isinstance(info, dict):
        raise ValueError("unmarshal cpu basic info failed: expected a JSON object")
    return info
