"""What the node QoS loop reads and writes on the filesystem: cgroup path rules, cpu lists, and the
writes and evictions plugins ask for (:class:`FileWrite`, :class:`Eviction`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import attrs

from ..model import BEST_EFFORT, BURSTABLE, GUARANTEED

FS_CGROUP = "cgroup"
FS_RESCTRL = "resctrl"
FILESYSTEMS = (FS_CGROUP, FS_RESCTRL)

#: Kubernetes QoS level → the kubelet's QoS cgroup name (cgroupfs driver); Guaranteed pods sit in kubepods
QOS_LEVEL_DIRS = {BEST_EFFORT: "besteffort", BURSTABLE: "burstable", GUARANTEED: ""}
#: Kubernetes QoS level → the Koordinator QoS class it implies (apis/extension/qos_utils.go)
KOORD_QOS_OF_KUBE = {GUARANTEED: "LSR", BURSTABLE: "LS", BEST_EFFORT: "BE"}

CFS_PERIOD_US = 100000  # DefaultCPUCFSPeriod

#: CPU ids are below this: the kernel's largest ``CONFIG_NR_CPUS`` (x86_64 ``MAXSMP``); also the most CPUs
#: a node without a topology may have, and the most entries of a topology or a resctrl cache id list
MAX_CPUS = 8192
#: core, socket and NUMA node ids of a topology are int32, as in Koordinator's ``CPUInfo``
MAX_TOPOLOGY_ID = 2**31 - 1
#: the longest cgroup value (characters) a state may give: what the agent reads of a file (64 KiB)
MAX_CGROUP_VALUE = 65536
#: the longest component of a cgroup path (bytes, ``NAME_MAX``) and the longest path (``PATH_MAX``)
NAME_MAX = 255
PATH_MAX = 4096
#: cgroup files holding a cpu (or memory node) list, checked with :func:`parse_cpuset`
CPU_LIST_FILES = ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.effective", "cpuset.cpus.exclusive",
                  "cpuset.mems.effective")
#: the kernel's CFS period range (µs) for ``cpu.cfs_period_us`` / the period of ``cpu.max``
CFS_PERIOD_RANGE = (1000, 1000000)
_INT64_MAX = 2**63 - 1


# -- cpuset lists ------------------------------------------------------------------------------------

_CPU_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def parse_cpuset(text: str | None, *, limit: int = MAX_CPUS) -> list[int]:
    """Parse a Linux cpu list (``"0-3,8,10-11"``) into sorted CPU ids. Empty text → ``[]``.

    Ids must be below ``limit`` (:data:`MAX_CPUS`, 8192: no kernel has more CPUs), so the result has at
    most ``limit`` entries and the work is linear in the text whatever ranges it names (overlapping
    ranges are merged before they are expanded). Raises ``ValueError`` naming the bad part.
    """
    if text is None:
        return []
    ranges: list[tuple[int, int]] = []
    for part in str(text).strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = _CPU_RANGE.fullmatch(part)
        if m is None or len(part) > 24:
            raise ValueError(f"invalid cpu list {_show(text)}: bad element {_show(part)}")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if b < a:
            raise ValueError(f"invalid cpu list {_show(text)}: bad range {_show(part)}")
        if b >= limit:
            raise ValueError(f"invalid cpu list {_show(text)}: {_show(part)}: cpu ids must be below {limit}")
        ranges.append((a, b))
    out: list[int] = []
    last = -1
    for a, b in sorted(ranges):
        if b > last:
            out.extend(range(max(a, last + 1), b + 1))
            last = b
    return out


def _show(v: Any, width: int = 60) -> str:
    """``repr(v)`` cut to ``width`` characters, for error messages about untrusted values."""
    r = repr(v) if not isinstance(v, int) or abs(v) < 10**width else f"an integer of {len(str(abs(v)))} digits"
    return r if len(r) <= width else f"{r[:width]}… ({len(r)} characters)"


def _key(k: str) -> str:
    """A mapping key as part of a field name: as written when short and printable, else ``[repr]``."""
    return k if k.isprintable() and len(k) <= 200 else f"[{_show(k)}]"


def check_cgroup_dir(path: Any, what: str = "cgroup dir") -> str:
    """A cgroup dir relative to a controller's root, normalised (no leading/trailing ``/``).

    Refused (``ValueError``): a non-string, a NUL byte, a ``.`` or ``..`` component, a component longer
    than :data:`NAME_MAX` bytes or a path longer than :data:`PATH_MAX`, and a path that names the root
    itself (``""``, ``"/"``): a pod's or QoS level's files never sit at a controller's root.
    """
    if not isinstance(path, str):
        raise ValueError(f"expected a {what} string, got {type(path).__name__}")
    if "\x00" in path:
        raise ValueError(f"{what} {_show(path)} contains a NUL byte")
    if len(path.encode("utf-8", "surrogateescape")) > PATH_MAX:
        raise ValueError(f"{what} is longer than {PATH_MAX} bytes")
    parts = [p for p in path.split("/") if p]
    for p in parts:
        if p in (".", ".."):
            raise ValueError(f"{what} {_show(path)} has a {p!r} component")
        if len(p.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise ValueError(f"{what} {_show(path)} has a component longer than {NAME_MAX} bytes")
    if not parts:
        raise ValueError(f"{what} {_show(path)} is the cgroup root itself")
    return "/".join(parts)


def format_cpuset(cpus: Iterable[int]) -> str:
    """Render CPU ids as the kernel prints a cpu list (sorted ranges): ``[0,1,2,5]`` → ``"0-2,5"``."""
    ids = sorted(set(int(c) for c in cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


# -- values ------------------------------------------------------------------------------------------

def _check_fs(inst: Any, attribute: Any, value: str) -> None:
    if value not in FILESYSTEMS:
        raise ValueError(f"FileWrite.fs must be one of {FILESYSTEMS}, got {value!r}")


@attrs.frozen
class FileWrite:
    """One desired file value, returned by ``qos_plan`` / ``runtime_hook``.

    ``path``: relative to the root of ``fs``; ``value``: the text to write; ``plugin``: filled in by the
    agent with the name of the plugin that asked; ``mkdir``: create the parent directory when missing
    (resctrl groups need it; cgroups of pods are never created, a missing one has vanished).
    ``rmdir``: remove the directory ``path`` instead of writing (``value`` is ignored, ``mkdir`` must be
    false); the kernel's pseudo-filesystems remove a resctrl group or a cgroup with ``rmdir(2)`` even
    though it lists control files. Build one with :meth:`remove_dir`.
    """

    path: str
    value: str = attrs.field(converter=str)
    fs: str = attrs.field(default=FS_CGROUP, validator=_check_fs)
    plugin: str = ""
    mkdir: bool = False
    rmdir: bool = attrs.field(default=False)

    @rmdir.validator
    def _check_rmdir(self, attribute: Any, value: bool) -> None:
        if value and self.mkdir:
            raise ValueError(f"FileWrite {self.path!r}: rmdir and mkdir exclude each other")

    @classmethod
    def remove_dir(cls, path: str, fs: str = FS_CGROUP, plugin: str = "") -> FileWrite:
        """A request to remove the directory ``path`` (relative to the root of ``fs``)."""
        return cls(path, "", fs=fs, plugin=plugin, rmdir=True)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "value": self.value, "plugin": self.plugin, "fs": self.fs}
        if self.rmdir:
            out["rmdir"] = True
        return out


def _check_pod_key(inst: Any, attribute: Any, value: str) -> None:
    ns, sep, name = value.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise ValueError(f"Eviction.pod must be 'namespace/name', got {_show(value)}")


@attrs.frozen
class Eviction:
    """One pod a node plugin wants evicted, returned by ``qos_plan`` next to its :class:`FileWrite` s.

    ``pod_uid``: the pod's uid (the Eviction API's precondition, so a recreated pod of the same name is
    never hit); ``pod``: ``namespace/name``; ``reason``: why, for the log, the Event and the pod's
    ``DisruptionTarget`` condition; ``plugin``: filled in by the agent. The agent hands a round's
    evictions, in the order the plugins gave them, to its evictor: on a cluster the Eviction API
    (rate-limited, a pod that is not BE or is a system pod refused at execution), else a log line.
    """

    pod_uid: str
    pod: str = attrs.field(validator=_check_pod_key)
    reason: str = ""
    plugin: str = ""

    @property
    def namespace(self) -> str:
        return self.pod.partition("/")[0]

    @property
    def name(self) -> str:
        return self.pod.partition("/")[2]

    def to_dict(self) -> dict[str, str]:
        return {"pod": self.pod, "uid": self.pod_uid, "reason": self.reason, "plugin": self.plugin}
