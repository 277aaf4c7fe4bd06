"""The ``mid_resource`` plugin: koord-manager's ``MidResource`` noderesource plugin.

``node_resources`` (``koordfw manager``'s node-resources controller, ``koordfw simulate`` before scheduling)
publishes ``kubernetes.io/mid-cpu`` (integer milli-cores) and ``kubernetes.io/mid-memory`` (bytes) from the
node's NodeMetric (:mod:`.calculator`), with the Mid fields of the cluster's ColocationCfg
(``slo-controller-config``) over Koordinator's defaults, or the plugin's args when the engine has no
ColocationCfg (:mod:`.strategy`). A node without a NodeMetric, with one older than ``degradeTimeMinutes`` or
without ``status.updateTime``, or whose colocation is disabled, has both resources removed (Koordinator's
Reset); the hook returns ``None`` when Koordinator's sync rule says no write is needed.
"""
from __future__ import annotations

import json
from typing import Any

import attrs
import structlog
from koordfw_prediction.api import risk_report

from koordfw import ManifestError, format_quantity, hookimpl, warn_once
from koordfw.extension import COLOCATION_CONFIG_KEY, MID_CPU, MID_MEMORY

from .calculator import MidMetric, MidResult, calculate, needs_sync, parse_mid_metric
from .strategy import MidStrategy, from_colocation_config, strategy_for_node

log = structlog.get_logger("koordfw.mid_resource")


class MidResource:
    def __init__(self) -> None:
        #: node name → the last calculation, for ``report``
        self.results: dict[str, MidResult] = {}
        self.warned: set = set()
        self._colocation: MidStrategy | None = None
        self._colocation_key: str | None = None
        #: node → (its NodeMetric object, parsed): a live cache replaces the object when it changes
        self._metrics: dict[str, tuple[Any, MidMetric]] = {}

    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return MidStrategy

    @hookimpl
    def node_resources(self, node: Any, pods: Any, metric: Any, now: float, last_update: float | None,
                       colocation: dict | None, args: MidStrategy) -> dict | None:
        n = getattr(node, "node", node)  # a NodeView or a bare Node
        if colocation is None:
            if metric is None:
                return None  # simulate without a ColocationCfg: a node without NodeMetric keeps its status
            strategy = strategy_for_node(args, n.name, n.labels, n.annotations, self.warned)
        else:
            base = self._cluster_strategy(colocation)
            if base is None:
                return None
            strategy = strategy_for_node(base, n.name, n.labels, n.annotations, self.warned)
            if not base.enable:
                strategy = attrs.evolve(strategy, enable=False)
        info: MidMetric | None = None
        result: MidResult | None = None
        if metric is not None:
            try:
                info = self._parsed(n.name, metric)
            except ManifestError as e:
                warn_once(log, self.warned, (n.name, "NodeMetric", str(e)),
                          "invalid NodeMetric: the node's mid resources are reset", node=n.name, error=str(e))
                result = MidResult(node=n.name, degraded=f"invalid NodeMetric ({e})")
        if result is None:
            result = calculate(strategy, n, pods, info, now, self.warned)
        self.results[n.name] = result
        new = result.resources
        old = {r: n.allocatable.get(r) for r in new}
        if not needs_sync(old, new, last_update=last_update, now=now, strategy=strategy):
            return None
        return new

    def _parsed(self, node: str, metric: Any) -> MidMetric:
        hit = self._metrics.get(node)
        if hit is not None and hit[0] is metric:
            return hit[1]
        info = parse_mid_metric(metric)
        self._metrics[node] = (metric, info)
        return info

    def _cluster_strategy(self, colocation: dict) -> MidStrategy | None:
        key = json.dumps(colocation, sort_keys=True, default=str)
        if key != self._colocation_key:
            self._colocation_key = key
            try:
                self._colocation = from_colocation_config(colocation, COLOCATION_CONFIG_KEY, self.warned)
            except ValueError as e:
                log.error("invalid colocation config; keeping the previous one", error=str(e))
        return self._colocation

    @hookimpl
    def report(self) -> dict | None:
        if not self.results:
            return None
        rows = []
        for name in sorted(self.results):
            r = self.results[name]
            row: dict[str, Any] = {"node": name, MID_CPU: str(r.mid_cpu),
                                   MID_MEMORY: format_quantity("memory", r.mid_memory)}
            if r.degraded:
                row["degraded"] = r.degraded
            else:
                row["mode"] = r.mode
                row["message"] = {"cpu": r.cpu_message, "memory": r.memory_message}
                if r.risk:
                    row["risk"] = {res: risk_report(s) for res, s in r.risk.items()}
            rows.append(row)
        return {"midResources": rows}


__all__ = ["MidResource"]
