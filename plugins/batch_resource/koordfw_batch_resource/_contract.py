"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        CollectPlugin,
        NodeResourcesPlugin,
        PluginArgsProvider,
        QoSPlugin,
        ReportPlugin,
        RuntimeHookPlugin,
    )

    from .plugin import BatchResource

    def _plugins_are_their_kinds(batch_resource_: BatchResource) -> None:
        _plugin_args_batch_resource: PluginArgsProvider = batch_resource_
        _report_batch_resource: ReportPlugin = batch_resource_
        _collect_batch_resource: CollectPlugin = batch_resource_
        _qos_plan_batch_resource: QoSPlugin = batch_resource_
        _runtime_hook_batch_resource: RuntimeHookPlugin = batch_resource_
        _node_resources_batch_resource: NodeResourcesPlugin = batch_resource_
