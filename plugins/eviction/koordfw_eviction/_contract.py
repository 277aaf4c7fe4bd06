"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import koordfw_eviction as eviction_
    from koordfw.contract import CollectPlugin, PluginArgsProvider, QoSPlugin, ShutdownPlugin

    def _plugins_are_their_kinds() -> None:
        _plugin_args_eviction: PluginArgsProvider = eviction_
        _shutdown_eviction: ShutdownPlugin = eviction_
        _collect_eviction: CollectPlugin = eviction_
        _qos_plan_eviction: QoSPlugin = eviction_
