"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import koordfw_be_suppress as be_suppress_
    from koordfw.contract import CollectPlugin, PluginArgsProvider, QoSPlugin, ShutdownPlugin

    def _plugins_are_their_kinds() -> None:
        _plugin_args_be_suppress: PluginArgsProvider = be_suppress_
        _shutdown_be_suppress: ShutdownPlugin = be_suppress_
        _collect_be_suppress: CollectPlugin = be_suppress_
        _qos_plan_be_suppress: QoSPlugin = be_suppress_
