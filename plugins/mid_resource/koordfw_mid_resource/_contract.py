"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import NodeResourcesPlugin, PluginArgsProvider, ReportPlugin

    from .plugin import MidResource

    def _plugins_are_their_kinds(mid_resource_: MidResource) -> None:
        _plugin_args_mid_resource: PluginArgsProvider = mid_resource_
        _node_resources_mid_resource: NodeResourcesPlugin = mid_resource_
        _report_mid_resource: ReportPlugin = mid_resource_
