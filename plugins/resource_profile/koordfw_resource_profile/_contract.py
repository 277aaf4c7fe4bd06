"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import MutatingAdmissionPlugin, NodeResourcesPlugin, PluginArgsProvider

    from .plugin import ResourceProfile

    def _plugins_are_their_kinds(resource_profile_: ResourceProfile) -> None:
        _plugin_args_resource_profile: PluginArgsProvider = resource_profile_
        _node_resources_resource_profile: NodeResourcesPlugin = resource_profile_
        _mutate_pod_resource_profile: MutatingAdmissionPlugin = resource_profile_
