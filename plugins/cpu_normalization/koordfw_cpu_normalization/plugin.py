"""cpu_normalization: the manager's CPU normalization (Koordinator's ``CPUNormalization`` noderesource plugin).

For each node, through ``node_resources``, it writes ``node.koordinator.sh/cpu-normalization-ratio``: the
ratio of the node's CPU model (the ``node.koordinator.sh/cpu-basic-info`` annotation the agent reports on
the node's NodeResourceTopology: model, hyper-threading, turbo) in the ``ratioModel`` of the
``cpu-normalization-config`` key of ``slo-controller-config`` (the node's ``nodeConfigs`` entry first), or
its ``defaultRatio``; two decimals, in [1, 5]. Disabled for the node (the strategy's ``enable``, overridden
by the node label ``node.koordinator.sh/cpu-normalization-enabled``): "1.00". On any error (a bad label, no
NodeResourceTopology or cpu-basic-info, no ratio for the model, a ratio out of range) nothing is written
and the node keeps what it has, as Koordinator's plugin returns an error.

batch_resource scales ``kubernetes.io/batch-cpu`` by the ratio (it runs after this plugin and is given the
node with the ratio applied), resource_amplification multiplies it into the cpu amplification ratio, and
the agent divides BE pods' CFS quotas by it; LSE/LSR cpusets stay physical.

Without ``slo-controller-config`` in ``koordfw simulate`` the plugin's args are the configuration (the same
fields), and with none given it writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import Handle, NodeResourcesResult, NodeView, hookimpl, warn_once
from koordfw.extension import (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    CPU_NORMALIZATION_CONFIG_KEY,
    LABEL_CPU_NORMALIZATION_ENABLED,
    SLO_CTRL_CONFIG_MAP,
)

from .strategy import (
    DEFAULT_RATIO_STR,
    Config,
    check_ratio,
    cpu_ratio,
    format_ratio,
    parse_basic_info,
    parse_config,
    parse_enabled_label,
)

log = structlog.get_logger("koordfw.cpu_normalization")

NRT_KIND = "NodeResourceTopology"


@attrs.define
class CPUNormalizationArgs:
    """The configuration when the engine has no ``slo-controller-config`` (``koordfw simulate``): the
    CPUNormalizationCfg's fields. ``enable`` None (the default) with no ``nodeConfigs``: the plugin is idle."""

    enable: bool | None = None
    default_ratio: float | None = None  # pluginConfig key: defaultRatio
    ratio_model: dict[str, dict[str, float]] = attrs.field(factory=dict)  # pluginConfig key: ratioModel
    node_configs: list[dict[str, Any]] = attrs.field(factory=list)  # pluginConfig key: nodeConfigs

    def as_config_text(self) -> str:
        import json

        obj: dict[str, Any] = {"enable": self.enable, "defaultRatio": self.default_ratio,
                               "ratioModel": self.ratio_model, "nodeConfigs": self.node_configs}
        return json.dumps({k: v for k, v in obj.items() if v is not None})


class CPUNormalization:
    def __init__(self, args: CPUNormalizationArgs | None = None) -> None:
        self.args = args or CPUNormalizationArgs()
        #: the configuration text last applied and its Config (Koordinator's cfgCache; kept on a bad update)
        self._text: str | None = None
        self._config: Config | None = None
        self.warned: set[Any] = set()

    @staticmethod
    @hookimpl
    def plugin_args() -> type[CPUNormalizationArgs]:
        return CPUNormalizationArgs

    def config(self, slo_config: Mapping[str, str] | None, colocation: Mapping[str, Any] | None) -> Config | None:
        """The configuration in force: the ConfigMap's key (no ConfigMap on a manager, or no key: the default,
        disabled), the args without a cluster configuration; None while nothing valid has been read or the
        args leave the plugin idle. A bad value is logged naming the ConfigMap, key and field, and the
        previous configuration kept (Koordinator's configHandler)."""
        if slo_config is None and colocation is None:
            if self.args.enable is None and not self.args.node_configs:
                return None
            text: str | None = self.args.as_config_text()
            where = "pluginConfig cpu_normalization"
        else:
            text = (slo_config or {}).get(CPU_NORMALIZATION_CONFIG_KEY)
            where = f"ConfigMap {SLO_CTRL_CONFIG_MAP}, key {CPU_NORMALIZATION_CONFIG_KEY}"
        if text != self._text or self._config is None:
            try:
                cfg = parse_config(text)
            except ValueError as e:
                warn_once(log, self.warned, ("config", text), "invalid cpu normalization config; keeping the previous one",
                          config=where, error=str(e))
                return self._config
            self._text, self._config = text, cfg
        return self._config

    @hookimpl
    def node_resources(self, node: NodeView, colocation: Mapping[str, Any] | None,
                       slo_config: Mapping[str, str] | None, handle: Handle) -> NodeResourcesResult | None:
        cfg = self.config(slo_config, colocation)
        if cfg is None:
            return None
        try:
            ratio = self.calculate(cfg, node.node.labels, node.name, handle)
        except ValueError as e:
            warn_once(log, self.warned, (node.name, str(e)), "cpu normalization: no ratio for the node; nothing written",
                      node=node.name, error=str(e))
            return None
        return NodeResourcesResult(annotations={ANNOTATION_CPU_NORMALIZATION_RATIO: ratio})

    @staticmethod
    def calculate(cfg: Config, labels: Mapping[str, str], name: str, handle: Handle) -> str:
        """``Calculate``: the ratio annotation's value for one node; ValueError when none can be given."""
        strategy = cfg.strategy_for(labels)
        try:
            enabled = parse_enabled_label(labels.get(LABEL_CPU_NORMALIZATION_ENABLED))
        except ValueError as e:
            raise ValueError(f"label {LABEL_CPU_NORMALIZATION_ENABLED}: {e}") from None
        if not (enabled if enabled is not None else bool(strategy.enable)):
            return DEFAULT_RATIO_STR
        nrt = handle.cluster.objects_of(NRT_KIND).get(name)
        if nrt is None:
            raise ValueError(f"no NodeResourceTopology {name}")
        anns = (nrt.get("metadata") or {}).get("annotations") or {}
        try:
            info = parse_basic_info(anns, ANNOTATION_CPU_BASIC_INFO)
        except ValueError as e:
            raise ValueError(f"NodeResourceTopology {name}: annotation {ANNOTATION_CPU_BASIC_INFO}: {e}") from None
        if info is None:
            raise ValueError(f"NodeResourceTopology {name}: no annotation {ANNOTATION_CPU_BASIC_INFO}")
        ratio = cpu_ratio(info, strategy)
        check_ratio(ratio)
        return format_ratio(ratio)
