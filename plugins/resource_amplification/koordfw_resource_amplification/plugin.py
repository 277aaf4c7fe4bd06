"""resource_amplification: Koordinator's node resource amplification (the ``ResourceAmplification``
noderesource plugin, and its node webhook's allocatable amplification, which koordfw's manager does itself).

Through ``node_resources``, for each node:

* ``node.koordinator.sh/resource-amplification-ratio``: the ``resourceAmplificationRatio`` of the
  ``resource-amplification-config`` key of ``slo-controller-config`` (the node's ``nodeConfigs`` entry
  first) when ``enable``; cpu's ratio is the configured one (1 when unset) × the node's
  ``node.koordinator.sh/cpu-normalization-ratio``, kept only above 1; JSON with two decimals; removed when
  no ratio is left (or on an error, as Koordinator's Prepare removes what Calculate did not give);
* with ``amplifyAllocatable`` (the default; Koordinator's node webhook behind its alpha gate), cpu and
  memory allocatable = raw allocatable × ratio, the raw kept in ``node.koordinator.sh/raw-allocatable``:
  taken from the node's allocatable the first time and whenever that is no longer what the last
  amplification wrote (the kubelet changed it), never from an amplified value. Without a ratio the raw
  allocatable is written back and the annotation removed.

Without ``slo-controller-config`` in ``koordfw simulate`` the args are the configuration; with none (no
``enable``, no ``nodeConfigs``) the plugin is idle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import Handle, ManifestError, NodeResourcesResult, NodeView, hookimpl, warn_once
from koordfw.extension import (
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    RESOURCE_AMPLIFICATION_CONFIG_KEY,
    SLO_CTRL_CONFIG_MAP,
)
from koordfw.inputs import raw_allocatable

from .amplification import (
    Config,
    amplified_allocatable,
    calculate_ratios,
    format_ratios,
    parse_config,
    parse_ratios,
    raw_allocatable_text,
)

log = structlog.get_logger("koordfw.resource_amplification")


@attrs.define
class ResourceAmplificationArgs:
    """``amplifyAllocatable``: write the amplified allocatable (Koordinator's node webhook); off, only the
    ratio annotation is written. The other fields are the ResourceAmplificationCfg used when the engine
    has no ``slo-controller-config`` (``koordfw simulate``)."""

    amplify_allocatable: bool = True  # pluginConfig key: amplifyAllocatable
    enable: bool | None = None
    resource_amplification_ratio: dict[str, float] = attrs.field(factory=dict)  # resourceAmplificationRatio
    node_configs: list[dict[str, Any]] = attrs.field(factory=list)  # pluginConfig key: nodeConfigs

    def as_config_text(self) -> str:
        obj: dict[str, Any] = {"enable": self.enable, "resourceAmplificationRatio": self.resource_amplification_ratio,
                               "nodeConfigs": self.node_configs}
        return json.dumps({k: v for k, v in obj.items() if v is not None})


class ResourceAmplification:
    def __init__(self, args: ResourceAmplificationArgs | None = None) -> None:
        self.args = args or ResourceAmplificationArgs()
        self._text: str | None = None
        self._config: Config | None = None
        self.warned: set[Any] = set()

    @staticmethod
    @hookimpl
    def plugin_args() -> type[ResourceAmplificationArgs]:
        return ResourceAmplificationArgs

    def config(self, slo_config: Mapping[str, str] | None, colocation: Mapping[str, Any] | None) -> Config | None:
        """As cpu_normalization's: the ConfigMap's key (default: disabled), the args without a cluster
        configuration (None when they leave the plugin idle); a bad value is logged naming the field and
        the previous configuration kept."""
        if slo_config is None and colocation is None:
            if self.args.enable is None and not self.args.node_configs:
                return None
            text: str | None = self.args.as_config_text()
            where = "pluginConfig resource_amplification"
        else:
            text = (slo_config or {}).get(RESOURCE_AMPLIFICATION_CONFIG_KEY)
            where = f"ConfigMap {SLO_CTRL_CONFIG_MAP}, key {RESOURCE_AMPLIFICATION_CONFIG_KEY}"
        if text != self._text or self._config is None:
            try:
                cfg = parse_config(text)
            except ValueError as e:
                warn_once(log, self.warned, ("config", text), "invalid resource amplification config; keeping the "
                          "previous one", config=where, error=str(e))
                return self._config
            self._text, self._config = text, cfg
        return self._config

    @hookimpl
    def node_resources(self, node: NodeView, colocation: Mapping[str, Any] | None,
                       slo_config: Mapping[str, str] | None, handle: Handle) -> NodeResourcesResult | None:
        cfg = self.config(slo_config, colocation)
        if cfg is None:
            return None
        n = node.node
        try:
            ratios = calculate_ratios(cfg.strategy_for(n.labels), n.annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO))
        except ValueError as e:
            warn_once(log, self.warned, (n.name, str(e)), "resource amplification: calculate failed; the ratio is "
                      "removed", node=n.name, error=str(e))
            ratios = {}
        text = format_ratios(ratios) if ratios else None
        annotations: dict[str, str | None] = {ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: text}
        allocatable: dict[str, int] = {}
        if self.args.amplify_allocatable:
            try:
                raw = raw_allocatable(n)
            except ManifestError as e:
                warn_once(log, self.warned, (n.name, "raw", str(e)), "ignoring invalid raw allocatable", error=str(e))
                raw = None
            if text is None:
                annotations[ANNOTATION_NODE_RAW_ALLOCATABLE] = None  # the feature is off: the raw goes back
                allocatable = {r: v for r, v in (raw or {}).items() if r in ("cpu", "memory")}
            else:
                try:
                    old = parse_ratios(n.annotations.get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO))
                except ValueError:
                    old = {}
                kept, allocatable = amplified_allocatable(n.allocatable, raw, old, ratios)
                if kept:
                    annotations[ANNOTATION_NODE_RAW_ALLOCATABLE] = raw_allocatable_text(kept)
        annotations = {k: v for k, v in annotations.items() if n.annotations.get(k) != v}
        allocatable = {k: v for k, v in allocatable.items() if n.allocatable.get(k) != v}
        if not annotations and not allocatable:
            return None
        return NodeResourcesResult(annotations=annotations, allocatable=allocatable)
