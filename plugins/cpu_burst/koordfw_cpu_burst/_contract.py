"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import CollectPlugin, PluginArgsProvider, QoSPlugin, ShutdownPlugin

    from .plugin import CPUBurst

    def _plugins_are_their_kinds(cpu_burst_: CPUBurst) -> None:
        _plugin_args_cpu_burst: PluginArgsProvider = cpu_burst_
        _shutdown_cpu_burst: ShutdownPlugin = cpu_burst_
        _collect_cpu_burst: CollectPlugin = cpu_burst_
        _qos_plan_cpu_burst: QoSPlugin = cpu_burst_
