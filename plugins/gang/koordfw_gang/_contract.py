"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        EnqueueExtensions,
        ErrorHandlerPlugin,
        PermitPlugin,
        PluginArgsProvider,
        PostBindPlugin,
        PostFilterPlugin,
        PreBindPlugin,
        PreEnqueuePlugin,
        PreFilterPlugin,
        QueueSortPlugin,
        ReportPlugin,
        StartupPlugin,
        UnreservePlugin,
    )

    from .plugin import Coscheduling

    def _plugins_are_their_kinds(gang_: Coscheduling) -> None:
        _plugin_args_gang: PluginArgsProvider = gang_
        _startup_gang: StartupPlugin = gang_
        _report_gang: ReportPlugin = gang_
        _queue_sort_gang: QueueSortPlugin = gang_
        _events_to_register_gang: EnqueueExtensions = gang_
        _pre_enqueue_gang: PreEnqueuePlugin = gang_
        _pre_filter_gang: PreFilterPlugin = gang_
        _post_filter_gang: PostFilterPlugin = gang_
        _unreserve_gang: UnreservePlugin = gang_
        _permit_gang: PermitPlugin = gang_
        _pre_bind_gang: PreBindPlugin = gang_
        _post_bind_gang: PostBindPlugin = gang_
        _error_handler_gang: ErrorHandlerPlugin = gang_
