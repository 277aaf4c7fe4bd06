"""koordfw_reservation: Koordinator's Reservation for koordfw. The plugin is
:class:`koordfw_reservation.plugin.ReservationPlugin`, registered under the entry-point name ``reservation``;
the CRD model and its reader are in :mod:`koordfw_reservation.api`."""

from .api import Owner, Reservation, reservation_from_manifest
from .plugin import ReservationPlugin

__all__ = ["Owner", "Reservation", "ReservationPlugin", "reservation_from_manifest"]
