"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import CollectPlugin, PluginArgsProvider, QoSPlugin, ShutdownPlugin, StartupPlugin

    from .plugin import LLCIsolation

    def _plugins_are_their_kinds(llc_isolation_: LLCIsolation) -> None:
        _plugin_args_llc_isolation: PluginArgsProvider = llc_isolation_
        _startup_llc_isolation: StartupPlugin = llc_isolation_
        _shutdown_llc_isolation: ShutdownPlugin = llc_isolation_
        _collect_llc_isolation: CollectPlugin = llc_isolation_
        _qos_plan_llc_isolation: QoSPlugin = llc_isolation_
