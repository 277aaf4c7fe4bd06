"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import MutatingAdmissionPlugin, PluginArgsProvider, ValidatingAdmissionPlugin

    from . import plugin as colocation_profile_

    def _plugins_are_their_kinds() -> None:
        _plugin_args_colocation_profile: PluginArgsProvider = colocation_profile_
        _mutate_pod_colocation_profile: MutatingAdmissionPlugin = colocation_profile_
        _validate_pod_colocation_profile: ValidatingAdmissionPlugin = colocation_profile_
