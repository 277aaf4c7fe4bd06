"""Cron schedules as kube's CronJob controller reads them (robfig/cron's standard 5-field parser): the
first time a schedule fires at or after a given time, for ``koordfw simulate``'s CronJob expansion."""

from __future__ import annotations

import calendar
import time

__all__ = ["next_schedule"]

# -- fields ----------------------------------------------------------------------------------------------

_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_NAMES: tuple[dict[str, int], ...] = ({}, {}, {}, {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m},
          {d.lower(): (i + 1) % 7 for i, d in enumerate(calendar.day_abbr)})
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def _cron_field(text: str, i: int) -> tuple[set[int], bool]:
    lo, hi = _RANGES[i]
    out: set[int] = set()
    star = False
    for part in text.split(","):
        rng, _, step_s = part.partition("/")
        step = int(step_s) if step_s else 1
        if step < 1:
            raise ValueError(f"bad step in {part!r}")
        if rng in ("*", "?"):
            a, b, star = lo, hi, star or not step_s
        else:
            a_s, _, b_s = rng.partition("-")
            a = int(_NAMES[i].get(a_s.lower(), a_s))
            b = int(_NAMES[i].get(b_s.lower(), b_s)) if b_s else (hi if step_s else a)
        if not lo <= a <= b <= hi:
            raise ValueError(f"{part!r} is outside {lo}-{hi}")
        out.update(range(a, b + 1, step))
    if i == 4 and 7 in out:
        out = (out - {7}) | {0}
    return out, star


def next_schedule(schedule: str, after: float) -> float | None:
    """The first time (UTC seconds, on a minute) at or after ``after`` a standard 5-field cron schedule
    (or ``@hourly``-style macro) fires, within 5 years; None when it never does. Raises ValueError on a
    schedule kube's parser refuses."""
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        text = text.partition(" ")[2].strip()
    text = _MACROS.get(text, text)
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"expected 5 fields, found {len(parts)}")
    try:
        (mins, _), (hours, _), (doms, dom_star), (months, _), (dows, dow_star) = (
            _cron_field(p, i) for i, p in enumerate(parts))
    except ValueError as e:
        raise ValueError(str(e) if "outside" in str(e) or "step" in str(e) else f"bad field: {e}") from None
    start = int(-(-after // 60) * 60)
    day0 = start - start % 86400
    for d in range(366 * 5):
        t = day0 + d * 86400
        tm = time.gmtime(t)
        dow = (tm.tm_wday + 1) % 7
        if tm.tm_mon not in months:
            continue
        day_ok = (tm.tm_mday in doms and dow in dows) if dom_star or dow_star else (tm.tm_mday in doms or dow in dows)
        if not day_ok:
            continue
        for h in sorted(hours):
            for m in sorted(mins):
                at = t + h * 3600 + m * 60
                if at >= start:
                    return float(at)
    return None
