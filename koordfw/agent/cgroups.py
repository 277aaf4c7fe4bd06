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

import collections
import errno
import math
import os
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import attrs
import structlog

from ..core.memo import BoundedCache
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

log = structlog.get_logger("koordfw.agent")


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
#: the filesystem types whose files :class:`CgroupFiles` keeps open
CGROUP_FSTYPES = ("cgroup", "cgroup2")
#: errors of a kept file descriptor whose file went away: its cgroup was removed (kernfs says ENODEV, also
#: when a cgroup of the same path was created since), or a stale handle; the path is opened once more
_GONE = (errno.ENODEV, errno.ENOENT, errno.ESTALE)


def cgroup_devices(mountinfo: str = "/proc/self/mountinfo") -> frozenset[int]:
    """The device numbers (``st_dev``) of the mounted cgroup and cgroup2 filesystems, from ``mountinfo``
    (each cgroup v1 hierarchy is a filesystem of its own); empty when it cannot be read."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return frozenset()
    out: set[int] = set()
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, fstype = head.split(), tail.split()[:1]
        if not sep or len(fields) < 3 or fstype[0:1] == [] or fstype[0] not in CGROUP_FSTYPES:
            continue
        major, _, minor = fields[2].partition(":")
        if major.isdigit() and minor.isdigit():
            out.add(os.makedev(int(major), int(minor)))
    return frozenset(out)


def _default_max_fds() -> int:
    """min(4096, half the soft RLIMIT_NOFILE): the rest of the process keeps room for its own files."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 256
    if soft == resource.RLIM_INFINITY or soft < 0:
        return 4096
    return max(1, min(4096, soft // 2))


class CgroupFiles:
    """Reads of cgroup files through file descriptors kept open between reads.

    A cgroup file is a kernfs seq_file: a read at offset 0 (``pread(fd, n, 0)``) builds its content anew,
    so a kept descriptor always reads the current value, without the path lookup, open and close
    (about 11 µs of a 13 µs read on cgroup v1; the agent reads several hundred such files a round).

    * Only files on a mounted cgroup or cgroup2 filesystem are kept (the opened file's device is one of
      :func:`cgroup_devices`, looked up once); any other file (a test's fake tree of plain files, which a
      test may rewrite or replace; ``/proc``) is opened, read and closed each time as before.
    * At most ``max_fds`` descriptors are open (least recently read closed first; default
      min(4096, soft RLIMIT_NOFILE / 2)); :meth:`forget` closes those under cgroup dirs that went away.
    * A kept descriptor whose cgroup was removed (``ENODEV``; also when it was created again since under
      the same path) or stale (``ESTALE``) is closed and the path opened once more: the new cgroup's file,
      or ``None`` when it is gone, as for a file that was never there.

    Directories the agent lists every round (pod dirs, for their containers) are kept the same way
    (:meth:`subdirs`).

    Thread-safe (a lock around each read: a threaded plugin hook may read while another does).
    """

    def __init__(self, max_fds: int | None = None, *, mountinfo: str = "/proc/self/mountinfo") -> None:
        self.max_fds = _default_max_fds() if max_fds is None else max(0, int(max_fds))
        self._mountinfo = mountinfo
        self._devices: frozenset[int] | None = None
        self._fds: collections.OrderedDict[str, int] = collections.OrderedDict()
        #: the inode numbers of the kept directories (:meth:`subdirs`)
        self._inos: dict[str, int] = {}
        self._lock = threading.Lock()
        #: opens of files (kept or not) and reads through a kept descriptor, since the start
        self.opens = 0
        self.kept_reads = 0

    def __len__(self) -> int:
        return len(self._fds)

    def __contains__(self, path: object) -> bool:
        return path in self._fds

    def devices(self) -> frozenset[int]:
        """The cgroup filesystems' device numbers (:func:`cgroup_devices`), read on first use."""
        if self._devices is None:
            self._devices = cgroup_devices(self._mountinfo)
        return self._devices

    def read_bytes(self, path: str | os.PathLike[str], limit: int = READ_LIMIT) -> bytes | None:
        """The first ``limit`` bytes of a file; ``None`` when absent, unreadable or not a path (NUL)."""
        key = path if type(path) is str else os.fspath(path)
        with self._lock:
            fd = self._fds.get(key)
            if fd is not None:
                try:
                    data = os.pread(fd, limit, 0)
                except OSError as e:
                    self._close(key)
                    if e.errno not in _GONE:
                        return None
                    log.debug("cgroup file went away; opening it again", file=key[:300], error=e.strerror)
                else:
                    self.kept_reads += 1
                    self._fds.move_to_end(key)
                    return data
            try:
                fd = os.open(key, os.O_RDONLY)
            except (OSError, ValueError):
                return None
            self.opens += 1
            try:
                data = os.read(fd, limit)
            except OSError:
                os.close(fd)
                return None
            if self.max_fds and self._keep(fd):
                while len(self._fds) >= self.max_fds:
                    self._evict()
                self._fds[key] = fd
            else:
                os.close(fd)
            return data

    def read(self, path: str | os.PathLike[str], limit: int = READ_LIMIT) -> str | None:
        """:meth:`read_bytes` decoded (invalid bytes replaced) and stripped."""
        data: bytes | None = None
        if type(path) is str:
            with self._lock:  # the common case inline: a kept descriptor that reads
                fd = self._fds.get(path)
                if fd is not None:
                    try:
                        data = os.pread(fd, limit, 0)
                    except OSError:  # gone, or else: read_bytes sorts it out
                        pass
                    else:
                        self.kept_reads += 1
                        self._fds.move_to_end(path)
        if data is None:
            data = self.read_bytes(path, limit)
        return None if data is None else data.decode(errors="replace").strip()

    def on_cgroup_fs(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` (followed) is on a mounted cgroup filesystem; False when it cannot be stat'ed."""
        try:
            return os.stat(path).st_dev in self.devices()
        except (OSError, ValueError):
            return False

    def subdirs(self, path: str, ino: int, *, keep: bool = True) -> list[str] | None:
        """The names of the sub-directories of the directory ``path`` (in the kernel's order), ``None`` when
        it cannot be listed (gone). ``ino`` is its inode number as its parent's listing just showed it
        (``os.DirEntry.inode()``). With ``keep`` (the caller knows ``path`` is on a cgroup filesystem) the
        directory's descriptor is kept and listed again by descriptor (9 µs instead of 21 for a pod dir on
        cgroup v1: no path lookup), as long as ``ino`` is the same (a cgroup removed and created again under
        the same path has another); an empty listing (also what a removed cgroup's descriptor lists) is
        made again by path, so a vanished dir reads as before."""
        key = path + "/"  # never a file's path
        with self._lock:
            fd = self._fds.get(key)
            if fd is not None:
                if self._inos.get(key) == ino:
                    try:
                        with os.scandir(fd) as it:
                            names = [c.name for c in it if c.is_dir(follow_symlinks=False)]
                    except OSError:
                        names = []
                    if names:
                        self.kept_reads += 1
                        self._fds.move_to_end(key)
                        return names
                else:  # another directory under this path now (the old one removed, or renamed away):
                    self._forget_locked((key,))  # nothing kept under it may serve the new one
                    fd = None
            try:
                with os.scandir(path) as it:
                    names = [c.name for c in it if c.is_dir(follow_symlinks=False)]
            except OSError:
                if fd is not None:
                    self._close(key)
                return None
            self.opens += 1
            if fd is None and keep and self.max_fds:
                self._keep_dir(key, path, ino)
            return names

    def _keep_dir(self, key: str, path: str, ino: int) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except (OSError, ValueError):
            return
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return
        if st.st_ino != ino or st.st_dev not in self.devices():
            os.close(fd)
            return
        while len(self._fds) >= self.max_fds:
            self._evict()
        self._fds[key] = fd
        self._inos[key] = ino

    def _evict(self) -> None:
        key, fd = self._fds.popitem(last=False)
        self._inos.pop(key, None)
        os.close(fd)

    def _keep(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_dev in self.devices()
        except OSError:
            return False

    def _close(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        self._inos.pop(key, None)
        if fd is not None:
            os.close(fd)

    def forget(self, dirs: Iterable[str]) -> int:
        """Close the kept descriptors of files under any of ``dirs`` (cgroup dirs, absolute or relative to
        a controller's root, e.g. a removed pod's ``kubepods/besteffort/pod<uid>``); how many were closed."""
        needles = tuple(f"/{d.strip('/')}/" for d in dirs if d.strip("/"))
        if not needles:
            return 0
        with self._lock:  # a kept dir's key ends in "/": it matches its own needle
            return self._forget_locked(needles)

    def _forget_locked(self, needles: tuple[str, ...]) -> int:
        gone = [k for k in self._fds if any(n in k for n in needles)]
        for k in gone:
            self._close(k)
        return len(gone)

    def close(self) -> None:
        """Close every kept descriptor (reads go on, opening files anew)."""
        with self._lock:
            self._inos.clear()
            while self._fds:
                os.close(self._fds.popitem()[1])


#: the process's cgroup file reader: the agent's collection, its executor and (through
#: :func:`koordfw.nodestate.read_cgroup_file`) the node plugins read through it
CGROUP_FILES = CgroupFiles()


def read_cgroup_file(path: str | os.PathLike[str], limit: int = 65536) -> bytes | None:
    """The first ``limit`` bytes of a cgroup file (``None`` when absent, unreadable or not a path), read as
    the agent reads its own: a file on a mounted cgroup filesystem through a descriptor kept open and read
    again at offset 0 (the kernel builds the content anew), any other file opened and closed; see
    :class:`CgroupFiles`. For node plugins that read cgroup files every round."""
    return CGROUP_FILES.read_bytes(path, limit)


def read_value(path: str | Path) -> str | None:
    """The stripped value of a file (its first :data:`READ_LIMIT` bytes), ``None`` when absent or
    unreadable, or when the path is not one (a NUL byte). Read through :data:`CGROUP_FILES`: a cgroup
    file's descriptor is kept open and read again at offset 0; any other file is opened and closed."""
    return CGROUP_FILES.read(path)


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
    _paths: BoundedCache[tuple[str, str, str], str] = attrs.field(factory=lambda: BoundedCache(16384), init=False,
                                                                  repr=False, eq=False)
    _paths_root: Path | None = attrs.field(default=None, init=False, repr=False, eq=False)
    _rel_paths: BoundedCache[tuple[str, str, str], tuple[str, str]] = attrs.field(
        factory=lambda: BoundedCache(16384), init=False, repr=False, eq=False)
    _rel_root: Path | None = attrs.field(default=None, init=False, repr=False, eq=False)
    #: the last :meth:`discover`'s pods by (QoS level, dir, container dirs...)
    _discovered: dict[tuple[str, ...], DiscoveredPod] = attrs.field(factory=dict, init=False, repr=False, eq=False)
    _pod_names: dict[tuple[str, str, str, str], tuple[str, str] | None] = attrs.field(
        factory=dict, init=False, repr=False, eq=False)

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
        keep = CGROUP_FILES.on_cgroup_fs(base)  # a real cgroup tree: pod dirs listed through kept descriptors
        last, found = self._discovered, {}
        # a dir name (under this driver, kubepods and level) → (uid, dir), or None when not a pod's
        last_names: dict[tuple[str, str, str, str], tuple[str, str] | None] = self._pod_names
        names_seen: dict[tuple[str, str, str, str], tuple[str, str] | None] = {}
        for qos, sub in levels:
            d = base / sub if sub else base
            try:
                entries = [e for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for e in sorted(entries, key=lambda e: e.name):
                name_key = (self.driver, self.kubepods, sub, e.name)
                if name_key in last_names:
                    named = last_names[name_key]
                else:
                    uid = self._pod_uid(e.name)
                    rel_dir = f"{self.kubepods}/{sub}/{e.name}" if sub else f"{self.kubepods}/{e.name}"
                    named = (uid, rel_dir) if uid is not None else None
                names_seen[name_key] = named
                if named is None:
                    continue
                uid, rel_dir = named
                # only the sub-directories are sorted: a pod dir lists some 20 control files too
                names = CGROUP_FILES.subdirs(e.path, e.inode(), keep=keep)
                if names is None:
                    continue  # the pod vanished while we looked
                names.sort()
                key = (qos, rel_dir, *names)
                pod = last.get(key)  # the same pod as last round (immutable: shared)
                if pod is None:
                    containers = [(_container_id(n), f"{rel_dir}/{n}") for n in names]
                    pod = DiscoveredPod(uid, qos, rel_dir, tuple(containers))
                found[key] = pod
                out.append(pod)
        self._discovered, self._pod_names = found, names_seen
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
        memo = self._rel_paths
        if self._rel_root is not self.root:
            memo.clear()
            self._rel_root = self.root
        for d in dirs:
            for prefix, name in pre:
                key = (prefix, d, name)
                hit = memo.get(key)
                if hit is None:
                    sd = d.strip("/")
                    rel = f"{prefix}/{sd}/{name}" if prefix else f"{sd}/{name}"
                    hit = memo[key] = (rel, f"{root}/{rel}")
                v = read_value(hit[1])
                if v is not None:
                    out[hit[0]] = v
        return out

    def file_path(self, controller: str, rel_dir: str, name: str) -> str:
        """The absolute path of a file (a plain string), remembered: every pod's are needed every round."""
        key = (controller, rel_dir, name)
        hit = self._paths.get(key)
        if hit is not None and self._paths_root is self.root:
            return hit
        if self._paths_root is not self.root:
            self._paths.clear()
            self._paths_root = self.root
        path = self._paths[key] = f"{self.root}/{self.rel(controller, rel_dir, name)}"
        return path

    _file = file_path

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
        if not line.startswith("Mem"):  # only MemTotal, MemAvailable and MemFree are looked up
            continue
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


__all__ = ["CGROUP_FILES", "KUBEPODS", "CgroupFiles", "CgroupLayout", "DiscoveredPod", "NodeState", "UsageTracker",
           "cgroup_devices", "container_dir_name", "detect_driver", "detect_version", "read_cpu_topology", "read_meminfo",
           "read_proc_stat", "read_value", "resolve_driver"]
