"""Kubernetes resource quantities (``500m``, ``1.5``, ``2Gi``, ``1e3``, ``1k``, ``1M``).

CPU-like resources are held as integer milli-units (``MilliValue()`` in Go); everything else as
integer units rounded up (``Value()``), which is how Koordinator compares them.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?[0-9]+))?$")

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

#: resources whose canonical integer unit is the milli-unit
MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity exactly. Accepts str, int and float (as YAML may produce)."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"invalid quantity {value!r}: expected a string or a number")
    s = value.strip()
    m = _RE.match(s)
    if not m:
        raise QuantityError(f"invalid quantity {value!r}")
    number, suffix, exponent = m.groups()
    q = Fraction(number)
    if exponent is not None:
        q *= Fraction(10) ** int(exponent)
    elif suffix in _BINARY:
        q *= _BINARY[suffix]
    else:
        q *= _DECIMAL[suffix or ""]
    return q


def parse_duration(value: object) -> float:
    """Go's ``time.ParseDuration`` in seconds (``"30s"``, ``"1m30s"``, ``"1.5h"``, ``"-2s"``, ``"0"``); a
    number is taken as seconds. Raises ``ValueError`` for anything Go would reject."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r}")
    s = value.strip()
    if not s:
        raise ValueError(f"invalid duration {value!r}")
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
    return sign * total


def _ceil(q: Fraction) -> int:
    return -((-q.numerator) // q.denominator)


def to_milli(value: object) -> int:
    return _ceil(parse_quantity(value) * 1000)


def to_int(value: object) -> int:
    return _ceil(parse_quantity(value))


def canonical(resource: str, value: object) -> int:
    """The integer a resource is accounted in: milli for cpu, units (rounded up) otherwise."""
    return to_milli(value) if resource in MILLI_RESOURCES else to_int(value)


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


def parse_resource_list(raw: object, *, where: str = "") -> dict[str, int]:
    """Parse a ResourceList mapping into canonical integers; errors name the offending key."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise QuantityError(f"expected a mapping, got {type(raw).__name__}", field=where or None)
    out: dict[str, int] = {}
    for k, v in raw.items():
        try:
            out[str(k)] = canonical(str(k), v)
        except QuantityError as e:
            raise QuantityError(str(e), field=f"{where}.{k}" if where else str(k)) from None
    return out
