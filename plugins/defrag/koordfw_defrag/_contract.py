"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import DeschedulePlugin, PluginArgsProvider, ReportPlugin

    from .plugin import Defrag

    def _plugins_are_their_kinds(defrag_: Defrag) -> None:
        _plugin_args_defrag: PluginArgsProvider = defrag_
        _report_defrag: ReportPlugin = defrag_
        _deschedule_defrag: DeschedulePlugin = defrag_
