"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        FilterPlugin,
        PluginArgsProvider,
        PreBindPlugin,
        PreFilterPlugin,
        PreScorePlugin,
        QoSPlugin,
        ReportPlugin,
        ReservePlugin,
        RuntimeHookPlugin,
        ScorePlugin,
        UnreservePlugin,
    )

    from .agent import CPUSetAgent
    from .plugin import CPUTopologyPlugin

    def _plugins_are_their_kinds(cpu_topology_: CPUTopologyPlugin, cpu_topology_agent_: CPUSetAgent) -> None:
        _plugin_args_cpu_topology: PluginArgsProvider = cpu_topology_
        _report_cpu_topology: ReportPlugin = cpu_topology_
        _pre_filter_cpu_topology: PreFilterPlugin = cpu_topology_
        _filter_cpu_topology: FilterPlugin = cpu_topology_
        _pre_score_cpu_topology: PreScorePlugin = cpu_topology_
        _score_cpu_topology: ScorePlugin = cpu_topology_
        _reserve_cpu_topology: ReservePlugin = cpu_topology_
        _unreserve_cpu_topology: UnreservePlugin = cpu_topology_
        _pre_bind_cpu_topology: PreBindPlugin = cpu_topology_
        _qos_plan_cpu_topology_agent: QoSPlugin = cpu_topology_agent_
        _runtime_hook_cpu_topology_agent: RuntimeHookPlugin = cpu_topology_agent_
