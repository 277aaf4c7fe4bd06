"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import NodeResourcesPlugin, PluginArgsProvider

    from .plugin import ResourceAmplification

    def _plugins_are_their_kinds(resource_amplification_: ResourceAmplification) -> None:
        _plugin_args_resource_amplification: PluginArgsProvider = resource_amplification_
        _node_resources_resource_amplification: NodeResourcesPlugin = resource_amplification_
