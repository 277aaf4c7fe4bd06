"""Koordinator's resource amplification, the pure parts: the ResourceAmplificationCfg
(``resource-amplification-config``), the ratio annotation (``Calculate``: the configured ratios, cpu's
multiplied by the CPU normalization ratio) and the amplified allocatable (the node webhook's
``handleUpdate``: allocatable = raw allocatable × ratio, the raw kept in ``node.koordinator.sh/raw-allocatable``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import format_quantity
from koordfw.inputs import selector_matches

#: the node webhook amplifies only these (``supportedResources``)
SUPPORTED_RESOURCES = ("cpu", "memory")


@attrs.frozen
class Strategy:
    """ResourceAmplificationStrategy."""

    enable: bool | None = False
    ratios: Mapping[str, float] = attrs.field(factory=dict)  # resourceAmplificationRatio


@attrs.frozen
class Config:
    cluster: Strategy = Strategy()
    node_configs: tuple[tuple[Mapping[str, Any] | None, Strategy], ...] = ()

    def strategy_for(self, labels: Mapping[str, str]) -> Strategy:
        for selector, strategy in self.node_configs:
            if selector_matches(selector, labels):
                return strategy
        return self.cluster


def _strategy(obj: Mapping[str, Any], base: Strategy, where: str) -> Strategy:
    enable, ratios = base.enable, dict(base.ratios)
    if obj.get("enable") is not None:
        if not isinstance(obj["enable"], bool):
            raise ValueError(f"{where}enable: expected true or false, got {json.dumps(obj['enable'])[:40]}")
        enable = obj["enable"]
    raw = obj.get("resourceAmplificationRatio")
    if raw is not None:
        if not isinstance(raw, dict):
            raise ValueError(f"{where}resourceAmplificationRatio: expected an object of resource ratios")
        for k, v in raw.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{where}resourceAmplificationRatio.{k}: expected a number, got {json.dumps(v)[:40]}")
            ratios[k] = float(v)
    return Strategy(enable, ratios)


def parse_config(text: str | None) -> Config:
    """The ``resource-amplification-config`` value (None or "": disabled); ValueError naming the field."""
    if not text:
        return Config()
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object (Koordinator's ResourceAmplificationCfg)")
    cluster = _strategy(obj, Strategy(), "")
    nodes = []
    for i, nc in enumerate(obj.get("nodeConfigs") or []):
        if not isinstance(nc, dict):
            raise ValueError(f"nodeConfigs[{i}]: expected an object")
        nodes.append((nc.get("nodeSelector"), _strategy(nc, cluster, f"nodeConfigs[{i}].")))
    return Config(cluster, tuple(nodes))


def parse_normalization_ratio(text: str | None) -> float:
    """``GetCPUNormalizationRatio``: -1 without the annotation; ValueError when it is not a positive number."""
    if text is None:
        return -1.0
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"parse cpu normalization ratio failed: {text[:40]!r}") from None
    if not v > 0:
        raise ValueError(f"illegal cpu normalization ratio: {v:g}")
    return v


def calculate_ratios(strategy: Strategy, normalization_text: str | None) -> dict[str, float]:
    """``Calculate``: the node's ratios (empty: no annotation). The configured ratios when the strategy is
    enabled; cpu's is the configured one (1 when unset) × the CPU normalization ratio, kept when above 1.
    ValueError on a bad normalization ratio or a resulting ratio below 1."""
    ratios = dict(strategy.ratios) if strategy.enable else {}
    final = ratios.get("cpu", 0.0)
    final = final if final > 0 else 1.0
    norm = parse_normalization_ratio(normalization_text)
    if norm > 0:
        final *= norm
    if final > 1:
        ratios["cpu"] = final
    for k, v in ratios.items():
        if v < 1:
            raise ValueError(f"ratio with resource type {k} and value {v:g} is invalid")
    return ratios


def format_ratios(ratios: Mapping[str, float]) -> str:
    """The annotation's JSON: keys sorted, each ratio with two decimals (Koordinator's ``Ratio`` marshalling)."""
    return "{" + ",".join(f"{json.dumps(k)}:{v:.2f}" for k, v in sorted(ratios.items())) + "}"


def parse_ratios(text: str | None) -> dict[str, float]:
    """``GetNodeResourceAmplificationRatios``: {} without the annotation; ValueError when it is not a map of numbers."""
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"failed to unmarshal node resource amplification ratio: {e}") from None
    if not isinstance(obj, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in obj.values()):
        raise ValueError("failed to unmarshal node resource amplification ratio: expected a map of numbers")
    return {str(k): float(v) for k, v in obj.items()}


def amplify(value: int, ratio: float) -> int:
    """``extension.Amplify``: ceil(value × ratio) when the ratio is above 1."""
    if ratio <= 1:
        return value
    import math

    return int(math.ceil(float(value) * ratio))


def multiply_milli(resource: str, value: int, ratio: float) -> int:
    """``util.MultiplyMilliQuant`` in canonical units (cpu in milli, others in units): the milli value × ratio,
    truncated; a unit resource's fractional result is then truncated to whole units."""
    if resource == "cpu":
        return int(float(value) * ratio)
    return int(float(value * 1000) * ratio) // 1000


def raw_allocatable_text(raw: Mapping[str, int]) -> str:
    """The ``node.koordinator.sh/raw-allocatable`` value: a JSON ResourceList of quantity strings."""
    return json.dumps({k: format_quantity(k, v) for k, v in sorted(raw.items())}, separators=(",", ":"))


def amplified_allocatable(allocatable: Mapping[str, int], raw: Mapping[str, int] | None, old_ratios: Mapping[str, float],
                          ratios: Mapping[str, float]) -> tuple[dict[str, int], dict[str, int]]:
    """The webhook's ``handleUpdate`` as a reconciler: (raw allocatable to keep, allocatable to write).

    The raw allocatable is taken from the node's allocatable when none is kept yet, or when the node's
    allocatable is no longer what the last amplification wrote (``raw × old_ratios``: the kubelet or an
    administrator changed it, Koordinator's ``isSupportedResourceChanged``), so an amplified value is never
    amplified again. Each supported resource is then raw × its ratio (raw when the ratio is not above 1)."""
    current = {r: allocatable[r] for r in SUPPORTED_RESOURCES if r in allocatable}
    if raw is not None:
        last = {r: multiply_milli(r, v, old_ratios[r]) if old_ratios.get(r, 0) > 1 else v
                for r, v in raw.items() if r in SUPPORTED_RESOURCES}
        if last != current:
            raw = None
    kept = dict(current) if raw is None else {r: v for r, v in raw.items() if r in SUPPORTED_RESOURCES}
    out = {r: multiply_milli(r, v, ratios[r]) if ratios.get(r, 0) > 1 else v for r, v in kept.items()}
    return kept, out
