"""The gang plugin's args: Koordinator's ``CoschedulingArgs`` (``pkg/scheduler/apis/config/types.go``)."""

from __future__ import annotations

from typing import Any

import attrs

from .gang import MATCH_POLICIES, parse_go_duration


def _check_timeout(instance: Any, attribute: Any, value: str) -> None:
    try:
        seconds = parse_go_duration(value)
    except ValueError:
        raise ValueError(f"defaultTimeout: {value!r} is not a duration (e.g. \"600s\", \"10m\")") from None
    if seconds <= 0:
        raise ValueError(f"defaultTimeout: must be positive, got {value!r}")


def _check_policy(instance: Any, attribute: Any, value: str) -> None:
    if value not in MATCH_POLICIES:
        raise ValueError(f"defaultMatchPolicy: {value!r} is not one of {', '.join(MATCH_POLICIES)}")


@attrs.define
class CoschedulingArgs:
    """Koordinator's ``CoschedulingArgs`` (profile keys ``defaultTimeout``, ``defaultMatchPolicy``,
    ``enablePreemption``) plus ``evictWholeStrictGangs`` (koordfw's: see :mod:`koordfw_gang.preemption`)."""

    default_timeout: str = attrs.field(default="600s", validator=_check_timeout)
    default_match_policy: str = attrs.field(default="once-satisfied", validator=_check_policy)
    #: job-level preemption for gang members (Koordinator's default: off)
    enable_preemption: bool = False
    #: with it, a Strict gang is evicted whole or not at all (beyond Koordinator)
    evict_whole_strict_gangs: bool = False

    @property
    def timeout_seconds(self) -> float:
        return parse_go_duration(self.default_timeout)
