"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        FilterPlugin,
        NodeResourcesPlugin,
        PluginArgsProvider,
        PreBindPlugin,
        PreFilterPlugin,
        PreScorePlugin,
        ReservePlugin,
        ScorePlugin,
        StartupPlugin,
        UnreservePlugin,
    )

    from .plugin import GpuShare

    def _plugins_are_their_kinds(gpu_share_: GpuShare) -> None:
        _plugin_args_gpu_share: PluginArgsProvider = gpu_share_
        _startup_gpu_share: StartupPlugin = gpu_share_
        _pre_filter_gpu_share: PreFilterPlugin = gpu_share_
        _filter_gpu_share: FilterPlugin = gpu_share_
        _pre_score_gpu_share: PreScorePlugin = gpu_share_
        _score_gpu_share: ScorePlugin = gpu_share_
        _reserve_gpu_share: ReservePlugin = gpu_share_
        _unreserve_gpu_share: UnreservePlugin = gpu_share_
        _pre_bind_gpu_share: PreBindPlugin = gpu_share_
        _node_resources_gpu_share: NodeResourcesPlugin = gpu_share_
