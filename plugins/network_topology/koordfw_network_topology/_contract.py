"""mypy checks that this package's plugin satisfies the Protocols of its kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        EnqueueExtensions,
        FilterPlugin,
        PreFilterPlugin,
        PreScorePlugin,
        ReportPlugin,
        ScorePlugin,
        UnreservePlugin,
    )

    from .plugin import NetworkTopology

    def _plugins_are_their_kinds(network_topology_: NetworkTopology) -> None:
        _report_network_topology: ReportPlugin = network_topology_
        _events_to_register_network_topology: EnqueueExtensions = network_topology_
        _pre_filter_network_topology: PreFilterPlugin = network_topology_
        _filter_network_topology: FilterPlugin = network_topology_
        _pre_score_network_topology: PreScorePlugin = network_topology_
        _score_network_topology: ScorePlugin = network_topology_
        _unreserve_network_topology: UnreservePlugin = network_topology_
