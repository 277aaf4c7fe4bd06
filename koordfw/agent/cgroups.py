"""The node as the agent sees it: cgroup version, the kubelet's pod cgroups, CPU topology and usage.

Pods are found from the kubelet's cgroup layout under the ``cpu`` controller (v1) or the unified root
(v2):

* cgroupfs driver: ``kubepods/pod<uid>`` (Guaranteed), ``kubepods/burstable/pod<uid>``,
  ``kubepods/besteffort/pod<uid>``; containers are the sub-directories of a pod dir;
* systemd driver: ``kubepods.slice/kubepods-pod<uid>.slice``,
  ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`` (``-`` in the uid
  written as ``_``), ...; containers are the ``*.scope`` sub-directories
  (``cri-containerd-<id>.scope``, ``docker-<id>.scope``, ``crio-<id>.scope``).

The driver is detected as Koordinator's koordlet does from the cgroup names
(``GetCgroupDriverFromCgroupName``, pkg/koordlet/util/system/cgroup_driver_linux.go): systemd when the
cpu controller's root holds ``kubepods.slice``, else cgroupfs when it holds ``kubepods``
(:func:`detect_driver`, :func:`resolve_driver`).

Usage is read as counters (v1 ``cpuacct.usage`` in ns, v2 ``cpu.stat`` ``usage_usec``; ``/proc/stat``
for the node) and turned into milli-cores by :class:`UsageTracker` from two samples.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

import attrs

from ..core.model import BEST_EFFORT, BURSTABLE, GUARANTEED
from ..core.nodestate import MAX_CPUS, CPUInfo, NodeState, parse_cpuset

#: the kubelet's top-level pod cgroup per cgroup driver (Koordinator's KubeRootNameSystemd/-Cgroupfs)
KUBEPODS = {"systemd": "kubepods.slice", "cgroupfs": "kubepods"}
#: the container runtimes of a container ID (``<runtime>://<id>``) → the systemd scope's name prefix
#: (Koordinator's cgroupPathFormatterInSystemd.ContainerDirFn)
SCOPE_PREFIXES = {"containerd": "cri-containerd-", "docker": "docker-", "cri-o": "crio-", "pouch": "pouch-"}
_POD_CGROUPFS = re.compile(r"^pod([0-9a-zA-Z_-]+)$")
_POD_SYSTEMD = re.compile(r"^kubepods(?:-(burstable|besteffort))?-pod([0-9a-zA-Z_]+)\.slice$")

#: files read into ``NodeState.cgroups`` for QoS-level dirs, per (version) as (controller, file)
QOS_FILES = {
    1: (("cpu", "cpu.cfs_quota_us"), ("cpu", "cpu.cfs_period_us"), ("cpu", "cpu.shares"), ("cpu", "cpu.idle"),
        ("cpuset", "cpuset.cpus"), ("memory", "memory.limit_in_bytes")),
    2: (("cpu", "cpu.max"), ("cpu", "cpu.weight"), ("cpu", "cpu.idle"), ("cpuset", "cpuset.cpus"),
        ("cpuset", "cpuset.cpus.effective"), ("memory", "memory.max")),
}
#: files read for pod and container dirs (kept small: it is read for every pod and container every round)
POD_FILES = {
    1: (("cpuset", "cpuset.cpus"),),
    2: (("cpuset", "cpuset.cpus"),),
}


def _uint(text: str | None, digits: int = 20) -> int | None:
    """A non-negative decimal of at most ``digits`` ASCII digits (a kernel counter is a u64), else None."""
    if text is None:
        return None
    t = text.strip()
    return int(t) if t and len(t) <= digits and t.isascii() and t.isdigit() else None


def detect_version(root: str | os.PathLike[str]) -> int:
    """2 when ``root`` is a unified hierarchy (has ``cgroup.controllers``), else 1 (per-controller dirs)."""
    r = Path(root)
    if (r / "cgroup.controllers").exists():
        return 2
    if (r / "cpu").is_dir() or (r / "cpu,cpuacct").is_dir():
        return 1
    raise FileNotFoundError(f"{r}: neither a cgroup v2 root (cgroup.controllers) nor a v1 root (cpu/)")


def detect_driver(root: str | os.PathLike[str], version: int) -> str:
    """The kubelet's cgroup driver from the cgroup names under the cpu controller's root (the unified
    root on v2): ``systemd`` when ``kubepods.slice`` is there (looked for first, as Koordinator does),
    else ``cgroupfs`` when ``kubepods`` is. Raises FileNotFoundError naming both paths when neither is."""
    base = CgroupLayout(Path(root), version).controller_root("cpu")
    for driver in ("systemd", "cgroupfs"):
        if (base / KUBEPODS[driver]).is_dir():
            return driver
    raise FileNotFoundError(f"cannot tell the kubelet's cgroup driver: neither {base / KUBEPODS['systemd']} "
                            f"(systemd) nor {base / KUBEPODS['cgroupfs']} (cgroupfs) exists; pass --cgroup-driver "
                            "(and --kubepods when the kubelet has another --cgroup-root)")


def resolve_driver(root: str | os.PathLike[str], version: int, driver: str = "auto",
                   kubepods: str | None = None) -> tuple[str, str]:
    """(driver, kubepods dir) for ``--cgroup-driver`` ``auto|systemd|cgroupfs`` and ``--kubepods``. With
    ``auto`` a given kubepods dir decides (``*.slice`` is systemd's naming), else :func:`detect_driver`."""
    if driver == "auto":
        if kubepods:
            driver = "systemd" if kubepods.rstrip("/").endswith(".slice") else "cgroupfs"
        else:
            driver = detect_driver(root, version)
    elif driver not in KUBEPODS:
        raise ValueError(f"unknown cgroup driver {driver!r}: expected auto, systemd or cgroupfs")
    return driver, kubepods or KUBEPODS[driver]


def container_dir_name(driver: str, container_id: str) -> str:
    """The cgroup dir name of a container from its status' ``containerID`` (``containerd://<id>``):
    systemd ``cri-containerd-<id>.scope`` (``docker-``, ``crio-``, ``pouch-``), cgroupfs ``<id>``."""
    runtime, sep, cid = container_id.partition("://")
    if not sep or not cid:
        raise ValueError(f"container ID {container_id!r}: expected <runtime>://<id>")
    if runtime not in SCOPE_PREFIXES:
        raise ValueError(f"container ID {container_id!r}: unknown runtime {runtime!r} "
                         f"(expected {', '.join(SCOPE_PREFIXES)})")
    return f"{SCOPE_PREFIXES[runtime]}{cid}.scope" if driver == "systemd" else cid


#: the most bytes :func:`read_value` reads of a file
READ_LIMIT = 65536


def read_value(path: str | Path) -> str | None:
    """The stripped value of a file (its first :data:`READ_LIMIT` bytes), ``None`` when absent or
    unreadable, or when the path is not one (a NUL byte). Raw os.open/os.read: several hundred small
    cgroup files are read per round."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (OSError, ValueError):
        return None
    try:
        return os.read(fd, READ_LIMIT).decode(errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


@attrs.frozen
class DiscoveredPod:
    uid: str
    kube_qos: str
    cgroup_dir: str
    containers: tuple[tuple[str, str], ...]  # (container id, cgroup dir)


@attrs.define
class CgroupLayout:
    """Where things are: the cgroup root, its version, the kubelet's driver and kubepods dir."""

    root: Path
    version: int
    driver: str = "cgroupfs"
    kubepods: str = "kubepods"

    _prefixes: dict[str, str] = attrs.field(factory=dict, init=False, repr=False, eq=False)

    def controller_prefix(self, controller: str) -> str:
        """The controller's dir relative to the root (``""`` on v2), e.g. ``cpu`` or ``cpu,cpuacct``.
        Looked up once per controller: paths of every pod are built from it every round."""
        hit = self._prefixes.get(controller)
        if hit is not None:
            return hit
        if self.version == 2:
            prefix = ""
        elif controller in ("cpu", "cpuacct") and not (self.root / controller).exists():
            prefix = "cpu,cpuacct"
        else:
            prefix = controller
        if not prefix or (self.root / prefix).is_dir():  # remembered once the controller is mounted
            self._prefixes[controller] = prefix
        return prefix

    def controller_root(self, controller: str) -> Path:
        prefix = self.controller_prefix(controller)
        return self.root / prefix if prefix else self.root

    def path(self, controller: str, rel_dir: str, filename: str = "") -> Path:
        p = self.controller_root(controller) / rel_dir.strip("/")
        return p / filename if filename else p

    def pod_dir(self, uid: str, kube_qos: str) -> str:
        """The kubelet's cgroup dir of a pod (relative to a controller's root) for this driver, e.g.
        ``kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid with _>.slice``."""
        return NodeState(cgroup_version=self.version, cgroup_driver=self.driver,
                         kubepods=self.kubepods).pod_dir(uid, kube_qos)

    def container_dir(self, uid: str, kube_qos: str, container_id: str) -> str:
        """The cgroup dir of a container of that pod from its ``containerID`` (see :func:`container_dir_name`)."""
        return f"{self.pod_dir(uid, kube_qos)}/{container_dir_name(self.driver, container_id)}"

    def rel(self, controller: str, rel_dir: str, filename: str) -> str:
        """The path of a file relative to the cgroup root (the executor's and NodeState's form)."""
        prefix = self.controller_prefix(controller)
        return "/".join(x for x in (prefix, rel_dir.strip("/"), filename) if x)

    def discover(self) -> list[DiscoveredPod]:
        """The pod cgroups under kubepods, with the kube QoS level they sit in and their containers."""
        base = self.path("cpu", self.kubepods)
        if not base.is_dir():
            return []
        out: list[DiscoveredPod] = []
        if self.driver == "systemd":
            levels = ((GUARANTEED, ""), (BURSTABLE, "kubepods-burstable.slice"), (BEST_EFFORT, "kubepods-besteffort.slice"))
        else:
            levels = ((GUARANTEED, ""), (BURSTABLE, "burstable"), (BEST_EFFORT, "besteffort"))
        for qos, sub in levels:
            d = base / sub if sub else base
            try:
                entries = [e for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for e in sorted(entries, key=lambda e: e.name):
                uid = self._pod_uid(e.name)
                if uid is None:
                    continue
                rel_dir = f"{self.kubepods}/{sub}/{e.name}" if sub else f"{self.kubepods}/{e.name}"
                try:  # only the sub-directories are sorted: a pod dir lists some 20 control files too
                    names = sorted(c.name for c in os.scandir(e.path) if c.is_dir(follow_symlinks=False))
                except OSError:
                    continue  # the pod vanished while we looked
                containers = [(_container_id(n), f"{rel_dir}/{n}") for n in names]
                out.append(DiscoveredPod(uid, qos, rel_dir, tuple(containers)))
        return out

    def _pod_uid(self, name: str) -> str | None:
        if self.driver == "systemd":
            m = _POD_SYSTEMD.match(name)
            return m.group(2).replace("_", "-") if m else None
        m = _POD_CGROUPFS.match(name)
        return m.group(1) if m else None

    def read_files(self, dirs: Iterable[str], files: Iterable[tuple[str, str]]) -> dict[str, str]:
        """Current values of ``files`` in each dir, keyed by path relative to the root; absent ones left out."""
        # plain strings, not pathlib: this runs for every pod and container every round
        out: dict[str, str] = {}
        root = str(self.root)
        pre = [(self.controller_prefix(c), name) for c, name in files]
        for d in dirs:
            d = d.strip("/")
            for prefix, name in pre:
                rel = f"{prefix}/{d}/{name}" if prefix else f"{d}/{name}"
                v = read_value(f"{root}/{rel}")
                if v is not None:
                    out[rel] = v
        return out

    def _file(self, controller: str, rel_dir: str, name: str) -> str:
        return f"{self.root}/{self.rel(controller, rel_dir, name)}"

    def cpu_usage_ns(self, rel_dir: str) -> int | None:
        """Cumulative CPU time of a cgroup in ns (v1 cpuacct.usage, v2 cpu.stat usage_usec)."""
        if self.version == 1:
            return _uint(read_value(self._file("cpuacct", rel_dir, "cpuacct.usage")))
        v = read_value(self._file("cpu", rel_dir, "cpu.stat"))
        if not v:
            return None
        for line in v.splitlines():
            k, _, n = line.partition(" ")
            if k == "usage_usec":
                usec = _uint(n)
                return None if usec is None else usec * 1000
        return None

    def memory_usage(self, rel_dir: str) -> int | None:
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return _uint(read_value(self._file("memory", rel_dir, name)))


def _container_id(name: str) -> str:
    # systemd scopes: cri-containerd-<id>.scope, docker-<id>.scope, crio-<id>.scope, pouch-<id>.scope
    if name.endswith(".scope"):
        for prefix in SCOPE_PREFIXES.values():
            if name.startswith(prefix):
                return name[len(prefix):-6]
        return name[:-6].rsplit("-", 1)[-1]
    return name


@attrs.define
class UsageTracker:
    """Turns cumulative counters into rates (milli-cores) between two samples; the first sample has none."""

    _last: dict[str, tuple[float, int]] = attrs.field(factory=dict)

    def rate_milli(self, key: str, now: float, cumulative_ns: int | None) -> int | None:
        """Milli-cores since the previous sample of ``key``; ``None`` without one, when the counter went
        back, or when ``now`` (seconds) is not a finite number (such a sample is dropped)."""
        if cumulative_ns is None or not isinstance(now, (int, float)) or not math.isfinite(now):
            self._last.pop(key, None)
            return None
        prev = self._last.get(key)
        self._last[key] = (now, cumulative_ns)
        if prev is None or now <= prev[0] or cumulative_ns < prev[1]:
            return None
        return int((cumulative_ns - prev[1]) / ((now - prev[0]) * 1e9) * 1000)

    def forget_except(self, keys: set[str]) -> None:
        for k in list(self._last):
            if k not in keys:
                del self._last[k]


def read_proc_stat(proc_root: str | os.PathLike[str] = "/proc") -> int | None:
    """Busy CPU time of the node in ns from ``/proc/stat`` (all but idle and iowait)."""
    v = read_value(Path(proc_root) / "stat")
    if not v:
        return None
    first = v.splitlines()[0].split()
    if not first or first[0] != "cpu":
        return None
    fields = [_uint(x) for x in first[1:]]
    vals = [x for x in fields if x is not None]
    if len(vals) < 4 or len(vals) < len(fields):
        return None
    # user nice system idle iowait irq softirq steal (guest time is already inside user/nice)
    busy = sum(vals[:8]) - vals[3] - (vals[4] if len(vals) > 4 else 0)
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return int(busy * 1e9 / hz)


def read_meminfo(proc_root: str | os.PathLike[str] = "/proc") -> tuple[int, int] | None:
    """(MemTotal, MemTotal − MemAvailable) in bytes."""
    v = read_value(Path(proc_root) / "meminfo")
    if not v:
        return None
    info = {}
    for line in v.splitlines():
        k, _, rest = line.partition(":")
        parts = rest.split()
        kb = _uint(parts[0]) if parts else None
        if kb is not None:
            info[k] = kb * 1024
    if "MemTotal" not in info:
        return None
    return info["MemTotal"], info["MemTotal"] - info.get("MemAvailable", info.get("MemFree", 0))


def read_cpu_topology(sys_root: str | os.PathLike[str] = "/sys") -> tuple[CPUInfo, ...]:
    """Logical CPUs from ``/sys/devices/system/cpu`` (online ones), with core, socket and NUMA node."""
    base = Path(sys_root) / "devices/system/cpu"
    online = read_value(base / "online")
    try:
        ids = parse_cpuset(online) if online else []
    except ValueError:
        ids = []
    if not ids:
        ids = sorted(i for i in (_uint(p.name[3:], 4) for p in base.glob("cpu[0-9]*")) if i is not None
                     and i < MAX_CPUS)
    node_of: dict[int, int] = {}
    for n in (Path(sys_root) / "devices/system/node").glob("node[0-9]*"):
        node_id = _uint(n.name[4:], 4)
        if node_id is None:
            continue
        cl = read_value(n / "cpulist")
        try:
            cpus = parse_cpuset(cl) if cl else []
        except ValueError:
            cpus = []
        for c in cpus:
            node_of[c] = node_id
    out = []
    for i in ids:
        t = base / f"cpu{i}" / "topology"
        core = read_value(t / "core_id")
        sock = read_value(t / "physical_package_id")  # -1 where the firmware does not say
        core_i = _uint(core, 9)
        core_i = i if core_i is None else core_i
        sock_i = _uint(sock, 4) or 0
        # core ids repeat per socket: make them node-unique as Koordinator's topology does
        out.append(CPUInfo(i, sock_i * 100000 + core_i, sock_i, node_of.get(i, 0)))
    return tuple(out)


def monotonic() -> float:
    return time.monotonic()


__all__ = ["KUBEPODS", "CgroupLayout", "DiscoveredPod", "NodeState", "UsageTracker", "container_dir_name",
           "detect_driver", "detect_version", "read_cpu_topology", "read_meminfo", "read_proc_stat", "resolve_driver"]
