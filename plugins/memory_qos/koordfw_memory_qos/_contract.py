"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import CollectPlugin, PluginArgsProvider, QoSPlugin, RuntimeHookPlugin, ShutdownPlugin

    from .plugin import MemoryQoS

    def _plugins_are_their_kinds(memory_qos_: MemoryQoS) -> None:
        _plugin_args_memory_qos: PluginArgsProvider = memory_qos_
        _shutdown_memory_qos: ShutdownPlugin = memory_qos_
        _collect_memory_qos: CollectPlugin = memory_qos_
        _qos_plan_memory_qos: QoSPlugin = memory_qos_
        _runtime_hook_memory_qos: RuntimeHookPlugin = memory_qos_
