"""Linux CPU list format ("0-3,8,10-11"), as written in cpuset.cpus and Koordinator's annotations."""

from __future__ import annotations

from collections.abc import Iterable


class CPUSetError(ValueError):
    """A CPU list that cannot be parsed."""


def parse_cpuset(text: str) -> frozenset[int]:
    """Parse a Linux CPU list; the empty string is the empty set. Raises :class:`CPUSetError`."""
    if not isinstance(text, str):
        raise CPUSetError(f"expected a CPU list string, got {type(text).__name__}")
    out: set[int] = set()
    s = text.strip()
    if not s:
        return frozenset()
    for part in s.split(","):
        p = part.strip()
        lo, sep, hi = p.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise CPUSetError(f"invalid CPU list {text!r}: bad element {p!r}") from None
        if a < 0 or b < a:
            raise CPUSetError(f"invalid CPU list {text!r}: bad range {p!r}")
        out.update(range(a, b + 1))
    return frozenset(out)


def format_cpuset(cpus: Iterable[int]) -> str:
    """Sorted Linux CPU list with ranges for consecutive runs ("0-1", never "0,1")."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
