"""mypy checks that this package's plugin satisfies the Protocols of its kinds (:mod:`koordfw.core.contract`):
each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        DeschedulePlugin,
        EnqueueExtensions,
        PluginArgsProvider,
        PostBindPlugin,
        PreEnqueuePlugin,
        ReportPlugin,
    )

    from .plugin import JobQueue

    def _plugins_are_their_kinds(job_queue_: JobQueue) -> None:
        _plugin_args_job_queue: PluginArgsProvider = job_queue_
        _events_to_register_job_queue: EnqueueExtensions = job_queue_
        _pre_enqueue_job_queue: PreEnqueuePlugin = job_queue_
        _post_bind_job_queue: PostBindPlugin = job_queue_
        _deschedule_job_queue: DeschedulePlugin = job_queue_
        _report_job_queue: ReportPlugin = job_queue_
