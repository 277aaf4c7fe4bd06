"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import NodeResourcesPlugin, PluginArgsProvider

    from .plugin import CPUNormalization

    def _plugins_are_their_kinds(cpu_normalization_: CPUNormalization) -> None:
        _plugin_args_cpu_normalization: PluginArgsProvider = cpu_normalization_
        _node_resources_cpu_normalization: NodeResourcesPlugin = cpu_normalization_
