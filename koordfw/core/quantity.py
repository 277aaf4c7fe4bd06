"""Kubernetes resource quantities (``500m``, ``1.5``, ``2Gi``, ``1e3``, ``1k``, ``1M``).

CPU-like resources are held as integer milli-units (``MilliValue()`` in Go); everything else as
integer units rounded up (``Value()``), which is how Koordinator compares them.
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction
from typing import Any

from .safeload import shorten as _short

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
#: the decimal suffixes that multiply (``8k``, as colocation_profile writes batch-cpu): their integer factors
_DECIMAL_UP = {s: int(f) for s, f in _DECIMAL.items() if f > 1}
_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?[0-9]+))?$")

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

#: resources whose canonical integer unit is the milli-unit
MILLI_RESOURCES = frozenset({"cpu"})

#: Kubernetes: "no quantity may represent a number greater than 2^63-1"; koordfw holds canonical amounts
#: (milli-cpu, bytes, units) as int64 and refuses larger ones instead of capping them
MAX_CANONICAL = 2**63 - 1
#: longest number part accepted (Go's int64 has 19 digits; a quantity's digits beyond that are noise)
_MAX_DIGITS = 40
#: largest decimal exponent accepted (``1e18`` bytes is an exabyte; beyond ``e30`` nothing fits int64)
_MAX_EXPONENT = 30


class QuantityError(ValueError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity exactly. Accepts str, int and float (as YAML may produce)."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        if abs(value) > MAX_CANONICAL * 1000:
            raise QuantityError(f"invalid quantity {_short(value)}: larger than 2^63-1")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}: not a finite number")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"invalid quantity {_short(value)}: expected a string or a number")
    s = value.strip()
    if len(s) > _MAX_DIGITS + 8:
        raise QuantityError(f"invalid quantity {_short(value)}: longer than {_MAX_DIGITS + 8} characters")
    m = _RE.match(s)
    if not m:
        raise QuantityError(f"invalid quantity {_short(value)}")
    number, suffix, exponent = m.groups()
    q = Fraction(number)
    if exponent is not None:
        e = int(exponent)
        if abs(e) > _MAX_EXPONENT:
            raise QuantityError(f"invalid quantity {_short(value)}: exponent beyond ±{_MAX_EXPONENT}")
        q *= Fraction(10) ** e
    elif suffix in _BINARY:
        q *= _BINARY[suffix]
    else:
        q *= _DECIMAL[suffix or ""]
    return q


def parse_duration(value: object, *, allow_negative: bool = True) -> float:
    """Go's ``time.ParseDuration`` in seconds (``"30s"``, ``"1m30s"``, ``"1.5h"``, ``"-2s"``, ``"0"``); a
    number is taken as seconds. Raises ``ValueError`` for anything Go would reject, and for a negative
    duration unless ``allow_negative`` (a TTL, a timeout)."""
    seconds = _parse_duration(value)
    if seconds < 0 and not allow_negative:
        raise ValueError(f"must not be negative, got {value!r}")
    return seconds


def _parse_duration(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError(f"invalid duration {_short(value)}: too large") from None
        if not math.isfinite(seconds):
            raise ValueError(f"invalid duration {value!r}: not a finite number")
        return _bounded_duration(seconds, value)
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {_short(value)}")
    s = value.strip()
    if not s or len(s) > 64:
        raise ValueError(f"invalid duration {_short(value)}")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {value!r} (use Go syntax such as 1m30s)")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {value!r}")
    return _bounded_duration(sign * total, value)


#: Go's time.Duration is int64 nanoseconds: about 292 years
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9


def _bounded_duration(seconds: float, value: object) -> float:
    if abs(seconds) > MAX_DURATION_SECONDS:
        raise ValueError(f"invalid duration {_short(value)}: longer than Go's time.Duration (292 years)")
    return seconds


def _ceil(q: Fraction) -> int:
    return -((-q.numerator) // q.denominator)


def _bounded(amount: int, value: object, unit: str) -> int:
    if abs(amount) > MAX_CANONICAL:
        raise QuantityError(f"invalid quantity {_short(value)}: larger than 2^63-1 {unit}")
    return amount


def to_milli(value: object) -> int:
    return _bounded(_ceil(parse_quantity(value) * 1000), value, "milli-units")


def to_int(value: object) -> int:
    return _bounded(_ceil(parse_quantity(value)), value, "units")


def canonical(resource: str, value: object) -> int:
    """The integer a resource is accounted in: milli for cpu, units (rounded up) otherwise.

    Raises :class:`QuantityError` for anything that is not a finite quantity within int64 in that unit."""
    # the forms the API server, the agents and the webhook write most (``"1234"``, ``"500m"``, ``"512Mi"``,
    # ``"8k"``), without the exact Fraction path; 15 characters at most, so that plain and milli amounts
    # are within int64 in either unit (suffixed ones are bounded as the exact path bounds them)
    milli = resource in MILLI_RESOURCES
    if type(value) is str and 0 < len(value) <= 15 and value.isascii():
        if value.isdigit():
            return int(value) * 1000 if milli else int(value)
        last = value[-1]
        if last == "m" and len(value) > 1 and value[:-1].isdigit():
            n = int(value[:-1])
            return n if milli else -(-n // 1000)
        if last == "i" and len(value) > 2 and value[-2:] in _BINARY and value[:-2].isdigit():
            n = int(value[:-2]) * _BINARY[value[-2:]]
            return _bounded(n * 1000, value, "milli-units") if milli else _bounded(n, value, "units")
        if last in _DECIMAL_UP and len(value) > 1 and value[:-1].isdigit():
            n = int(value[:-1]) * _DECIMAL_UP[last]
            return _bounded(n * 1000, value, "milli-units") if milli else _bounded(n, value, "units")
    return to_milli(value) if milli else to_int(value)


def format_quantity(resource: str, amount: int) -> str:
    """Render a canonical amount back as Kubernetes would print it (compact, exact)."""
    if resource in MILLI_RESOURCES:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount and amount % 2**30 == 0:
        return f"{amount // 2**30}Gi"
    if amount and amount % 2**20 == 0:
        return f"{amount // 2**20}Mi"
    if amount and amount % 2**10 == 0 and amount >= 2**10 * 16:
        return f"{amount // 2**10}Ki"
    return str(amount)


def parse_resource_list(raw: object, *, where: str = "", allow_negative: bool = False) -> dict[str, int]:
    """Parse a ResourceList mapping into canonical integers; errors name the offending key.

    Amounts must be non-negative (Kubernetes' validation of requests, limits, capacity and
    allocatable) unless ``allow_negative``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise QuantityError(f"expected a mapping, got {type(raw).__name__}", field=where or None)
    out: dict[str, int] = {}
    for k, v in raw.items():
        field = f"{where}.{k}" if where else str(k)
        if not isinstance(k, str) or not k:
            raise QuantityError(f"invalid resource name {_short(k)}", field=field)
        try:
            amount = canonical(k, v)
        except QuantityError as e:
            raise QuantityError(str(e), field=field) from None
        if amount < 0 and not allow_negative:
            raise QuantityError(f"invalid quantity {_short(v)}: must be greater than or equal to 0", field=field)
        out[k] = amount
    return out


def bad_node_resources(res: Any) -> dict[str, str]:
    """What a ``node_resources`` hook's result holds that is not ``{resource name: amount or None}``, an
    amount being an integer (numpy's too; not a bool) in ``[0, MAX_CANONICAL]`` and a name a non-empty
    string: ``{name: repr(value)}`` of the offenders, ``{"<result>": type}`` for a result that is not a
    dict, ``{}`` when it is valid. The one rule for every place that applies these results (the
    embedded engine, ``koordfw.embed.update_node_resources`` and ``koordfw manager``), so a plugin's result is
    accepted or refused alike everywhere."""
    if not isinstance(res, dict):
        return {"<result>": type(res).__name__}
    return {str(k)[:60]: repr(v)[:40] for k, v in res.items()
            if not isinstance(k, str) or not k or (v is not None and (
                isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= int(v) <= MAX_CANONICAL))}
