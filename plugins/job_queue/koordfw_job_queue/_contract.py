"""mypy checks that this package's plugin satisfies the Protocols of its kinds (:mod:`koordfw.core.contract`):
each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        DeschedulePlugin,
        EnqueueExtensions,
        PluginArgsProvider,
        PreEnqueuePlugin,
        ReportPlugin,
    )

    from .plugin import JobQueue

    _q = JobQueue()
    _args: PluginArgsProvider = _q
    _events: EnqueueExtensions = _q
    _gate: PreEnqueuePlugin = _q
    _reclaim: DeschedulePlugin = _q
    _report: ReportPlugin = _q
