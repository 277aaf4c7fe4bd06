"""The plugin's args: Koordinator's ``resctrlQOS`` per QoS class, plus where resctrl is mounted.

Profile form (camelCase keys, Koordinator's field names)::

    pluginConfig:
      llc_isolation:
        resctrlRoot: /sys/fs/resctrl
        LSR: {enable: true, catRangeStartPercent: 0, catRangeEndPercent: 100, mbaPercent: 100}
        LS:  {enable: true}
        BE:  {enable: true, catRangeEndPercent: 30, mbaPercent: 50}

A field left out takes Koordinator's default for that class (``DefaultResctrlQOS``): ``enable`` false,
``catRangeStartPercent`` 0, ``catRangeEndPercent`` 100 (BE: 30), ``mbaPercent`` 100.
"""

from __future__ import annotations

from typing import Any

import attrs

from koordfw.inputs import camel

from .resctrl import DEFAULT_ROOT


class InvalidArg(TypeError):
    """A bad arg value. A TypeError so that cattrs' error report keeps the message (it reduces a
    ValueError raised in ``__init__`` to "invalid value")."""


def _opt_bool(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidArg(f"{camel(attribute.name)} must be true or false, got {value!r}")


def _opt_percent(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise InvalidArg(f"{camel(attribute.name)} must be an integer percentage in [0, 100], got {value!r}")


@attrs.frozen
class ResctrlQOS:
    """Koordinator's ``ResctrlQOS`` of one class. ``None`` = the class default."""

    enable: Any = attrs.field(default=None, validator=_opt_bool)
    cat_range_start_percent: Any = attrs.field(default=None, validator=_opt_percent)
    cat_range_end_percent: Any = attrs.field(default=None, validator=_opt_percent)
    mba_percent: Any = attrs.field(default=None, validator=_opt_percent)

    def __attrs_post_init__(self) -> None:
        start, end = self.cat_range_start_percent, self.cat_range_end_percent
        if start is not None and end is not None and end <= start:
            raise InvalidArg(f"catRangeEndPercent ({end}) must be greater than catRangeStartPercent ({start})")


@attrs.frozen
class ClassSettings:
    """A class's settings with the defaults filled in."""

    group: str
    enable: bool
    start: int
    end: int
    mba_percent: int


#: Koordinator's DefaultResctrlQOS: (start, end, mba) per class group
CLASS_DEFAULTS = {"LSR": (0, 100, 100), "LS": (0, 100, 100), "BE": (0, 30, 100)}


def _qos(value: Any = None) -> ResctrlQOS:
    return value if isinstance(value, ResctrlQOS) else ResctrlQOS()


@attrs.frozen
class LLCIsolationArgs:
    """Args of ``llc_isolation`` (see the module docstring). ``resctrlRoot``: the resctrl mount point,
    used when the agent does not pass its own ``--resctrl-root``."""

    resctrl_root: str = DEFAULT_ROOT
    LSR: ResctrlQOS = attrs.field(factory=ResctrlQOS)
    LS: ResctrlQOS = attrs.field(factory=ResctrlQOS)
    BE: ResctrlQOS = attrs.field(factory=ResctrlQOS)

    def settings(self, group: str) -> ClassSettings:
        """The effective settings of class group ``group`` (``LSR``/``LS``/``BE``)."""
        q: ResctrlQOS = getattr(self, group)
        start, end, mba = CLASS_DEFAULTS[group]
        start = start if q.cat_range_start_percent is None else q.cat_range_start_percent
        end = end if q.cat_range_end_percent is None else q.cat_range_end_percent
        return ClassSettings(group=group, enable=bool(q.enable), start=start, end=end,
                             mba_percent=mba if q.mba_percent is None else q.mba_percent)

    @property
    def any_enabled(self) -> bool:
        return any(getattr(self, g).enable for g in CLASS_DEFAULTS)
