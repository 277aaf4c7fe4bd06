"""Linux CPU list format ("0-3,8,10-11"), as written in cpuset.cpus and Koordinator's annotations.

The kernel's parser and formatter (``koordfw.core.nodestate``) do the work; this module is stricter
about what the scheduler accepts in an annotation: only strings, no empty elements, and CPU ids below
:data:`MAX_CPUS` (8192, the kernel's largest ``NR_CPUS``), checked before anything is expanded, so that
``"0-100000000"`` in an annotation costs nothing instead of gigabytes.
"""

from __future__ import annotations

import re

from koordfw.core.nodestate import format_cpuset
from koordfw.core.nodestate import parse_cpuset as _parse

__all__ = ["MAX_CPUS", "CPUSetError", "format_cpuset", "parse_cpuset"]

#: CPU ids are below this (the kernel's largest CONFIG_NR_CPUS), as the kernel's own parser bounds them
MAX_CPUS = 8192
_ELEMENT = re.compile(r"\s*([0-9]{1,12})\s*(?:-\s*([0-9]{1,12})\s*)?")


class CPUSetError(ValueError):
    """A CPU list that cannot be parsed."""


def parse_cpuset(text: str) -> frozenset[int]:
    """Parse a Linux CPU list; the empty string is the empty set. Raises :class:`CPUSetError`."""
    if not isinstance(text, str):
        raise CPUSetError(f"expected a CPU list string, got {type(text).__name__}")
    if len(text) > 16 * MAX_CPUS:
        raise CPUSetError(f"invalid CPU list: longer than {16 * MAX_CPUS} characters")
    if text.strip():
        for p in text.split(","):
            if not p.strip():
                raise CPUSetError(f"invalid CPU list {_show(text)}: empty element")
            m = _ELEMENT.fullmatch(p)
            if m is None:
                raise CPUSetError(f"invalid CPU list {_show(text)}: bad element {_show(p)}")
            hi = int(m.group(2) if m.group(2) is not None else m.group(1))
            if hi >= MAX_CPUS:
                raise CPUSetError(f"invalid CPU list {_show(text)}: {_show(p.strip())}: cpu ids must be below {MAX_CPUS}")
    try:
        return frozenset(_parse(text))
    except ValueError as e:
        raise CPUSetError(str(e)) from None


def _show(text: str, width: int = 40) -> str:
    r = repr(text)
    return r if len(r) <= width else f"{r[:width]}… ({len(text)} characters)"
