"""mypy checks that this package's plugins satisfy the Protocols of their kinds
(:mod:`koordfw.core.contract`): each assignment below is checked, none runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koordfw.contract import (
        BindPlugin,
        EnqueueExtensions,
        FilterPlugin,
        PostBindPlugin,
        PreBindPlugin,
        PreFilterPlugin,
        PreScorePlugin,
        ReportPlugin,
        ReservePlugin,
        ScoreExtensions,
        ScorePlugin,
        StartupPlugin,
        UnreservePlugin,
    )

    from .plugin import ReservationPlugin

    def _plugins_are_their_kinds(reservation_: ReservationPlugin) -> None:
        _startup_reservation: StartupPlugin = reservation_
        _report_reservation: ReportPlugin = reservation_
        _events_to_register_reservation: EnqueueExtensions = reservation_
        _pre_filter_reservation: PreFilterPlugin = reservation_
        _filter_reservation: FilterPlugin = reservation_
        _pre_score_reservation: PreScorePlugin = reservation_
        _score_reservation: ScorePlugin = reservation_
        _normalize_score_reservation: ScoreExtensions = reservation_
        _reserve_reservation: ReservePlugin = reservation_
        _unreserve_reservation: UnreservePlugin = reservation_
        _pre_bind_reservation: PreBindPlugin = reservation_
        _bind_reservation: BindPlugin = reservation_
        _post_bind_reservation: PostBindPlugin = reservation_
