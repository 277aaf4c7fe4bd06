"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import FilterPlugin, PluginArgsProvider, ReservePlugin, ScorePlugin, StartupPlugin, UnreservePlugin

    from .plugin import LoadAware

    def _plugins_are_their_kinds(load_aware_: LoadAware) -> None:
        _plugin_args_load_aware: PluginArgsProvider = load_aware_
        _startup_load_aware: StartupPlugin = load_aware_
        _filter_load_aware: FilterPlugin = load_aware_
        _score_load_aware: ScorePlugin = load_aware_
        _reserve_load_aware: ReservePlugin = load_aware_
        _unreserve_load_aware: UnreservePlugin = load_aware_
