"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        DeschedulePlugin,
        FilterPlugin,
        PluginArgsProvider,
        PostFilterPlugin,
        PreFilterAddPodExtension,
        PreFilterPlugin,
        PreFilterRemovePodExtension,
        ReportPlugin,
    )

    from .plugin import ElasticQuota

    def _plugins_are_their_kinds(elastic_quota_: ElasticQuota) -> None:
        _plugin_args_elastic_quota: PluginArgsProvider = elastic_quota_
        _report_elastic_quota: ReportPlugin = elastic_quota_
        _pre_filter_elastic_quota: PreFilterPlugin = elastic_quota_
        _pre_filter_add_pod_elastic_quota: PreFilterAddPodExtension = elastic_quota_
        _pre_filter_remove_pod_elastic_quota: PreFilterRemovePodExtension = elastic_quota_
        _filter_elastic_quota: FilterPlugin = elastic_quota_
        _post_filter_elastic_quota: PostFilterPlugin = elastic_quota_
        _deschedule_elastic_quota: DeschedulePlugin = elastic_quota_
