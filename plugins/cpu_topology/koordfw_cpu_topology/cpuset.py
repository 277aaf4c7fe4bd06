"""Linux CPU list format ("0-3,8,10-11"), as written in cpuset.cpus and Koordinator's annotations.

The kernel's parser and formatter (public as ``koordfw.nodestate.parse_cpuset`` and ``koordfw.nodestate.format_cpuset``) do
the work, CPU ids bounded below :data:`MAX_CPUS` (8192, the kernel's largest ``NR_CPUS``) before anything
is expanded, so that ``"0-100000000"`` in an annotation costs nothing instead of gigabytes; this module is
stricter about what the scheduler accepts in an annotation: only strings, and no empty elements.
"""

from __future__ import annotations

from koordfw.nodestate import MAX_CPUS, format_cpuset
from koordfw.nodestate import parse_cpuset as _parse

__all__ = ["MAX_CPUS", "CPUSetError", "format_cpuset", "parse_cpuset"]



class CPUSetError(ValueError):
    """A CPU list that cannot be parsed."""


def parse_cpuset(text: str) -> frozenset[int]:
    """Parse a Linux CPU list; the empty string is the empty set. Raises :class:`CPUSetError`."""
    if not isinstance(text, str):
        raise CPUSetError(f"expected a CPU list string, got {type(text).__name__}")
    if text.strip() and any(not p.strip() for p in text.split(",")):
        raise CPUSetError(f"invalid CPU list {_show(text)}: empty element")
    try:
        return frozenset(_parse(text))
    except ValueError as e:
        raise CPUSetError(str(e)) from None


def _show(text: str, width: int = 40) -> str:
    r = repr(text)
    return r if len(r) <= width else f"{r[:width]}… ({len(text)} characters)"
