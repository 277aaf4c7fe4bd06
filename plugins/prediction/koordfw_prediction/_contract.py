"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import CollectPlugin, PluginArgsProvider, ReportPlugin

    from .plugin import Prediction

    def _plugins_are_their_kinds(prediction_: Prediction) -> None:
        _plugin_args_prediction: PluginArgsProvider = prediction_
        _collect_prediction: CollectPlugin = prediction_
        _report_prediction: ReportPlugin = prediction_
