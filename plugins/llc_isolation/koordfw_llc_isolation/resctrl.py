"""The resctrl filesystem: Koordinator's formulas, the kernel's file formats, and support detection.

Everything here except :func:`detect`, :func:`read_group` and :func:`read_mon_data` is pure. The
formulas follow Koordinator (``pkg/koordlet/util/system/resctrl.go`` and the resctrl runtime hook);
the file formats follow the kernel (``Documentation/arch/x86/resctrl.rst``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

DEFAULT_ROOT = "/sys/fs/resctrl"
INTEL = "GenuineIntel"
AMD = "AuthenticAMD"
# Koordinator's AMD MBA: the CCD bandwidth in its units (25 GB/s * 8 * 0.8) and the "unlimited" value
AMD_CCD_MAX_MB = 160
AMD_UNLIMITED_MB = 2048
INTEL_MBA_STEP = 10

#: Koordinator's class-level groups (LSE shares LSR's group)
CLASS_GROUPS = ("LSR", "LS", "BE")
QOS_TO_GROUP = {"LSE": "LSR", "LSR": "LSR", "LS": "LS", "BE": "BE"}
POD_GROUP_PREFIX = "koordlet-"
MON_FILES = ("llc_occupancy", "mbm_total_bytes", "mbm_local_bytes")


class ResctrlError(ValueError):
    """An invalid mask, percentage, schemata text or resctrl info. The message names the input."""


# ------------------------------------------------------------------------------------------------
# Formulas
# ------------------------------------------------------------------------------------------------


def parse_cbm(cbm: int | str) -> int:
    """The capacity bitmask of all L3 ways as an int, from ``info/L3/cbm_mask`` text or an int.

    Raises :class:`ResctrlError` unless it is a non-empty block of contiguous low bits (``7ff``).
    """
    if isinstance(cbm, str):
        text = cbm.strip().lower().removeprefix("0x")
        try:
            value = int(text, 16)
        except ValueError:
            raise ResctrlError(f"cbm_mask {cbm!r} is not a hex number") from None
    else:
        value = int(cbm)
    # x86 requires the ways to be one contiguous block; Koordinator checks popcount(cbm+1) == 1
    if value <= 0 or ((value + 1) & value) != 0:
        raise ResctrlError(f"cbm_mask {value:x} is not a contiguous block of low bits (like 7ff)")
    return value


def l3_mask(cbm: int | str, start_percent: int, end_percent: int, min_cbm_bits: int = 1) -> int:
    """Koordinator's ``CalculateCatL3MaskValue``: the ways in ``[start%, end%)`` of the cache.

    ``ways = bitlen(cbm)``, ``startWay = ceil(ways*start/100)``, ``endWay = ceil(ways*end/100)``,
    ``mask = (1<<endWay) - (1<<startWay)``. Raises :class:`ResctrlError` for a bad cbm, percentages
    outside ``0 <= start < end <= 100``, or a mask with fewer than ``min_cbm_bits`` ways (the kernel
    would reject it).
    """
    value = parse_cbm(cbm)
    for name, pct in (("catRangeStartPercent", start_percent), ("catRangeEndPercent", end_percent)):
        if isinstance(pct, bool) or not isinstance(pct, int):
            raise ResctrlError(f"{name} must be an integer percentage, got {pct!r}")
    if start_percent < 0 or end_percent > 100 or end_percent <= start_percent:
        raise ResctrlError(f"invalid L3 CAT range: catRangeStartPercent={start_percent}, "
                           f"catRangeEndPercent={end_percent} (need 0 <= start < end <= 100)")
    ways = float(value.bit_length())
    start_way = math.ceil(ways * start_percent / 100)
    end_way = math.ceil(ways * end_percent / 100)
    mask = (1 << end_way) - (1 << start_way)
    got = bin(mask).count("1")
    if got < max(1, min_cbm_bits):
        raise ResctrlError(f"L3 CAT range {start_percent}-{end_percent}% of {int(ways)} ways selects {got} "
                           f"way(s), fewer than min_cbm_bits={max(1, min_cbm_bits)}; widen the range")
    return mask


def mba_value(percent: int | None, vendor: str, *, step: int = INTEL_MBA_STEP, minimum: int = 0) -> int | None:
    """The ``MB:`` value for a bandwidth percentage, or ``None`` when nothing should be written.

    Intel: the percent rounded up to ``step`` (``info/MB/bandwidth_gran``, 10 on every Intel part
    Koordinator knows), at least ``minimum`` (``info/MB/min_bandwidth``). AMD: bandwidth units,
    ``2048`` (unlimited) at 100%, else ``int(160 * pct / 100)``. ``percent`` ``None`` or outside
    ``(0, 100]`` → ``None`` (Koordinator skips the write). Another vendor → :class:`ResctrlError`.
    """
    if percent is None or isinstance(percent, bool) or not isinstance(percent, int):
        return None
    if percent <= 0 or percent > 100:
        return None
    if vendor == AMD:
        if percent == 100:
            return AMD_UNLIMITED_MB
        return int(AMD_CCD_MAX_MB * percent / 100)
    if vendor == INTEL:
        step = step if step > 0 else INTEL_MBA_STEP
        value = percent if percent % step == 0 else percent // step * step + step
        return max(value, minimum)
    raise ResctrlError(f"memory bandwidth allocation is not known for CPU vendor {vendor!r} "
                       f"(only {INTEL} and {AMD})")


def mba_unlimited(vendor: str) -> int:
    """The MB value that does not throttle (what the kernel gives a new group)."""
    return AMD_UNLIMITED_MB if vendor == AMD else 100


# ------------------------------------------------------------------------------------------------
# The schemata format
# ------------------------------------------------------------------------------------------------


def render_line(resource: str, values: Mapping[int, int], *, hex_values: bool) -> str:
    """One schemata line as Koordinator writes it: ``L3:0=3c;1=3c;\\n`` (sorted cache ids)."""
    fmt = "{:x}" if hex_values else "{:d}"
    return resource + ":" + "".join(f"{i}={fmt.format(values[i])};" for i in sorted(values)) + "\n"


def l3_line(cache_ids: Iterable[int], mask: int | Mapping[int, int]) -> str:
    """The ``L3:`` line giving ``mask`` (one int, or per cache id) to every cache id."""
    values = dict(mask) if isinstance(mask, Mapping) else {i: mask for i in cache_ids}
    return render_line("L3", values, hex_values=True)


def mb_line(cache_ids: Iterable[int], value: int | Mapping[int, int]) -> str:
    """The ``MB:`` line giving ``value`` (one int, or per cache id) to every cache id."""
    values = dict(value) if isinstance(value, Mapping) else {i: value for i in cache_ids}
    return render_line("MB", values, hex_values=False)


_DOMAIN = re.compile(r"^\s*(\d+)\s*=\s*([0-9a-fA-F]+)\s*$")


def parse_schemata(text: str, *, source: str = "schemata") -> dict[str, dict[int, int]]:
    """Parse a ``schemata`` file in the kernel's format into ``{resource: {cache id: value}}``.

    Accepts what the kernel prints (resource names right-aligned, zero-padded hex masks, space-padded
    MB values: ``    L3:0=07ff;1=07ff\\n    MB:0=100;1= 50``) and what Koordinator writes (trailing
    ``;``). Cache resources (``L3``, ``L2``, ``L3CODE``...) are hex, ``MB`` is decimal. Raises
    :class:`ResctrlError` naming ``source`` and the line for anything else.
    """
    out: dict[str, dict[int, int]] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not name:
            raise ResctrlError(f"{source}: line {lineno} {raw!r} is not '<resource>:<id>=<value>;...'")
        base = 10 if name.startswith("MB") else 16
        doms = out.setdefault(name, {})
        for part in rest.split(";"):
            if not part.strip():
                continue
            m = _DOMAIN.match(part)
            if not m:
                raise ResctrlError(f"{source}: line {lineno}: bad domain {part.strip()!r} (want <id>=<value>)")
            try:
                doms[int(m.group(1))] = int(m.group(2), base)
            except ValueError:
                raise ResctrlError(f"{source}: line {lineno}: {part.strip()!r} is not a "
                                   f"{'decimal' if base == 10 else 'hex'} value") from None
    return out


def parse_tasks(text: str) -> set[int]:
    """The pids of a ``tasks`` (or cgroup ``tasks``/``cgroup.procs``) file; junk lines are ignored."""
    return {int(t) for t in text.split() if t.isdigit()}


# ------------------------------------------------------------------------------------------------
# Support detection (reads the machine)
# ------------------------------------------------------------------------------------------------


@attrs.frozen
class ResctrlInfo:
    """What the agent needs to know about the node's resctrl (the state file's ``resctrl`` object)."""

    cbm_mask: str = "7ff"
    min_cbm_bits: int = 1
    num_closids: int = 16
    cache_ids: tuple[int, ...] = (0,)
    vendor: str = INTEL
    mba: bool = False
    mba_gran: int = INTEL_MBA_STEP
    mba_min: int = 0

    def to_wire(self) -> dict:
        return {"cbmMask": self.cbm_mask, "minCbmBits": self.min_cbm_bits, "numClosids": self.num_closids,
                "cacheIds": list(self.cache_ids), "vendor": self.vendor, "mba": self.mba,
                "mbaGran": self.mba_gran, "mbaMin": self.mba_min}

    @classmethod
    def from_wire(cls, obj: object, *, where: str = "resctrl") -> ResctrlInfo:
        """From the state file's ``resctrl`` mapping (camelCase keys). Bad fields raise ResctrlError."""
        if isinstance(obj, ResctrlInfo):
            return obj
        if not isinstance(obj, Mapping):
            raise ResctrlError(f"{where}: expected a mapping, got {type(obj).__name__}")
        keys = {"cbmMask", "minCbmBits", "numClosids", "cacheIds", "vendor", "mba", "mbaGran", "mbaMin"}
        extra = set(obj) - keys
        if extra:
            raise ResctrlError(f"{where}: unknown field(s) {sorted(extra)} (known: {sorted(keys)})")

        def num(key: str, default: int, low: int) -> int:
            v = obj.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ResctrlError(f"{where}.{key}: expected an integer >= {low}, got {v!r}")
            return v

        cbm = obj.get("cbmMask", "7ff")
        if not isinstance(cbm, str):
            raise ResctrlError(f"{where}.cbmMask: expected a hex string like '7ff', got {cbm!r}")
        try:
            parse_cbm(cbm)
        except ResctrlError as e:
            raise ResctrlError(f"{where}.cbmMask: {e}") from None
        ids = obj.get("cacheIds", [0])
        if not isinstance(ids, list) or not ids or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise ResctrlError(f"{where}.cacheIds: expected a non-empty list of cache ids, got {ids!r}")
        vendor = obj.get("vendor", INTEL)
        if not isinstance(vendor, str):
            raise ResctrlError(f"{where}.vendor: expected a string, got {vendor!r}")
        mba = obj.get("mba", False)
        if not isinstance(mba, bool):
            raise ResctrlError(f"{where}.mba: expected true or false, got {mba!r}")
        return cls(cbm_mask=cbm.strip().lower(), min_cbm_bits=num("minCbmBits", 1, 0),
                   num_closids=num("numClosids", 16, 1), cache_ids=tuple(sorted(set(ids))), vendor=vendor,
                   mba=mba, mba_gran=num("mbaGran", INTEL_MBA_STEP, 1), mba_min=num("mbaMin", 0, 0))


@attrs.frozen
class Support:
    """The outcome of :func:`detect`: ``info`` when usable, else ``reason`` says why not."""

    info: ResctrlInfo | None
    reason: str = ""

    @property
    def supported(self) -> bool:
        return self.info is not None


def _read(path: Path) -> str:
    return path.read_text()


def cpu_vendor(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The ``vendor_id`` of the first CPU in ``cpuinfo``, or ``""`` when absent/unreadable."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return ""


def _kernel_has_resctrl(filesystems: str | os.PathLike) -> bool | None:
    try:
        text = Path(filesystems).read_text()
    except OSError:
        return None
    return any(line.split()[-1] == "resctrl" for line in text.splitlines() if line.split())


def detect(root: str | os.PathLike = DEFAULT_ROOT, *, cpuinfo: str | os.PathLike = "/proc/cpuinfo",
           filesystems: str | os.PathLike = "/proc/filesystems") -> Support:
    """Probe the resctrl filesystem at ``root``. Never raises: an unusable tree gives a reason.

    Needs ``schemata`` at the root (mounted), ``info/L3/{cbm_mask,min_cbm_bits,num_closids}``, an
    ``L3:`` line in the root schemata (the cache ids). MBA is usable when ``info/MB`` exists and the
    root schemata has an ``MB:`` line; its closid count also bounds the number of groups.
    """
    rootp = Path(root)
    if not (rootp / "schemata").is_file():
        why = f"resctrl is not mounted at {rootp} (no {rootp / 'schemata'})"
        has = _kernel_has_resctrl(filesystems)
        if has is False:
            why += ("; the kernel has no resctrl filesystem (CONFIG_X86_CPU_RESCTRL off, or a CPU without "
                    "Intel RDT / AMD PQoS)")
        else:
            why += f"; mount it with: mount -t resctrl resctrl {rootp}"
        return Support(None, why)
    l3 = rootp / "info" / "L3"
    if not l3.is_dir():
        return Support(None, f"{rootp} has no info/L3: this CPU has no L3 cache allocation (CAT)")
    try:
        cbm = _read(l3 / "cbm_mask").strip()
        parse_cbm(cbm)
        min_bits = int(_read(l3 / "min_cbm_bits").strip())
        closids = int(_read(l3 / "num_closids").strip())
        root_schemata = parse_schemata(_read(rootp / "schemata"), source=str(rootp / "schemata"))
    except (OSError, ValueError) as e:
        return Support(None, f"unreadable resctrl info under {rootp}: {e}")
    ids = sorted(root_schemata.get("L3", {}))
    if not ids:
        lines = ", ".join(sorted(root_schemata)) or "none"
        return Support(None, f"{rootp / 'schemata'} has no L3 line (resources: {lines}); "
                             "CDP mode (L3CODE/L3DATA) is not supported, remount without -o cdp")
    mb_dir = rootp / "info" / "MB"
    mba = mb_dir.is_dir() and "MB" in root_schemata
    gran, minimum = INTEL_MBA_STEP, 0
    if mba:
        try:
            gran = int(_read(mb_dir / "bandwidth_gran").strip())
            minimum = int(_read(mb_dir / "min_bandwidth").strip())
            closids = min(closids, int(_read(mb_dir / "num_closids").strip()))
        except (OSError, ValueError):
            mba = False
    vendor = cpu_vendor(cpuinfo)
    if mba and vendor not in (INTEL, AMD):
        mba = False
    return Support(ResctrlInfo(cbm_mask=cbm.lower(), min_cbm_bits=min_bits, num_closids=closids,
                               cache_ids=tuple(ids), vendor=vendor or INTEL, mba=mba, mba_gran=gran,
                               mba_min=minimum))


# ------------------------------------------------------------------------------------------------
# Reading groups (for the collector and the observed state)
# ------------------------------------------------------------------------------------------------


@attrs.frozen
class GroupState:
    """What a resctrl group holds now: its schemata values and its task ids."""

    schemata: Mapping[str, Mapping[int, int]] = attrs.field(factory=dict)
    tasks: frozenset[int] = frozenset()


def read_group(root: str | os.PathLike, group: str) -> GroupState | None:
    """The current schemata and tasks of ``root/group`` (``""`` = the root group), ``None`` if gone."""
    d = Path(root) / group if group else Path(root)
    try:
        schemata = parse_schemata((d / "schemata").read_text(), source=str(d / "schemata"))
        tasks = parse_tasks((d / "tasks").read_text())
    except (OSError, ResctrlError):
        return None
    return GroupState(schemata=schemata, tasks=frozenset(tasks))


def list_groups(root: str | os.PathLike) -> list[str]:
    """The control groups under ``root`` (directories other than ``info``, ``mon_groups``, ``mon_data``)."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    return [e for e in entries if e not in ("info", "mon_groups", "mon_data") and (Path(root) / e).is_dir()]


def read_mon_data(root: str | os.PathLike, group: str) -> dict[str, int]:
    """Sum each monitoring event of ``root/group/mon_data/mon_L3_*`` over the L3 domains.

    Events that are missing or read ``Unavailable`` (the kernel's answer for an RMID it cannot count)
    are left out; a vanished group gives ``{}``.
    """
    base = (Path(root) / group if group else Path(root)) / "mon_data"
    try:
        domains = sorted(d for d in os.listdir(base) if d.startswith("mon_L3_"))
    except OSError:
        return {}
    out: dict[str, int] = {}
    for dom in domains:
        for event in MON_FILES:
            try:
                text = (base / dom / event).read_text().strip()
            except OSError:
                continue
            if text.isdigit():
                out[event] = out.get(event, 0) + int(text)
    return out
