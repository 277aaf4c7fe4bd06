"""A fake node for node-agent and node-plugin tests: a kubelet-like cgroup tree (v1 or v2, cgroupfs or
systemd driver) plus the /proc and /sys files the agent reads, all under one directory."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

#: where the real cgroup v1 controllers are mounted on this kind of machine
REAL_CGROUP_ROOT = Path("/sys/fs/cgroup")


def real_cgroups_unavailable(controllers: Sequence[str], *, writable: str | None = None,
                             root: Path = REAL_CGROUP_ROOT) -> str | None:
    """Why a test cannot create real cgroup v1 groups here, or None when it can: not root, one of
    ``controllers`` not mounted as a v1 hierarchy under ``root``, or ``writable`` (default: the first
    controller) refusing a new directory. For ``pytest.mark.skipif(reason=...)``."""
    if os.geteuid() != 0:
        return "needs root (creates real cgroups)"
    for c in controllers:
        if not (root / c / "cgroup.procs").exists() or (root / c / "cgroup.controllers").exists():
            return f"cgroup v1 controller {c} not mounted at {root / c}"
    probe = root / (writable or controllers[0]) / f"koordfw-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"{probe.parent} not writable: {e.strerror}"
    return None


def make_real_cgroup(path: Path) -> None:
    """Create one cgroup directory in a real (mounted) hierarchy; a new cpuset cgroup starts empty, so
    it gets its parent's ``cpuset.cpus`` and ``cpuset.mems`` (tasks cannot join it otherwise)."""
    path.mkdir()
    for f in ("cpuset.cpus", "cpuset.mems"):
        if (path / f).exists():
            (path / f).write_text((path.parent / f).read_text())


def remove_real_cgroups(paths: Iterable[Path], attempts: int = 100) -> None:
    """Remove real cgroup directories, deepest first, retrying while the kernel still counts tasks that
    have just been killed (rmdir fails with EBUSY until they are gone); vanished ones are skipped."""
    for p in sorted(paths, key=lambda p: -len(p.parts)):
        for _ in range(attempts):
            try:
                p.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)


class FakeNode:
    """A kubelet-like cgroup v1 tree (cgroupfs driver) plus /proc and /sys files, all under tmp_path."""

    def __init__(self, root: Path, ncpu: int = 8, version: int = 1, driver: str = "cgroupfs") -> None:
        self.root = root / "cgroup"
        self.proc = root / "proc"
        self.sys = root / "sys"
        self.version = version
        self.driver = driver
        self.kubepods = "kubepods.slice" if driver == "systemd" else "kubepods"
        self.ncpu = ncpu
        self.proc.mkdir(parents=True)
        self.root.mkdir(parents=True)
        if version == 2:
            (self.root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        cpu_dir = self.sys / "devices/system/cpu"
        for i in range(ncpu):
            t = cpu_dir / f"cpu{i}" / "topology"
            t.mkdir(parents=True)
            (t / "core_id").write_text(str(i % (ncpu // 2)))
            (t / "physical_package_id").write_text("0")
        (cpu_dir / "online").write_text(f"0-{ncpu - 1}")
        self.busy_ns = 0
        self.set_proc_stat(0)
        (self.proc / "meminfo").write_text("MemTotal:       33554432 kB\nMemAvailable:   16777216 kB\n")
        for d in (self.kubepods, self.qos("burstable"), self.qos("besteffort")):
            self.mkcg(d, quota="-1", cpus=f"0-{ncpu - 1}")
            if version == 1 and d != self.kubepods:
                (self.root / "cpu" / d / "cpu.idle").write_text("0")

    def qos(self, level: str) -> str:
        if self.driver == "systemd":
            return f"{self.kubepods}/kubepods-{level}.slice"
        return f"{self.kubepods}/{level}"

    def set_proc_stat(self, busy_ns: int) -> None:
        import os

        hz = os.sysconf("SC_CLK_TCK")
        ticks = busy_ns * hz // 10**9
        (self.proc / "stat").write_text(f"cpu  {ticks} 0 0 999999 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")

    def ctl(self, controller: str, rel: str) -> Path:
        return self.root / rel if self.version == 2 else self.root / controller / rel

    def mkcg(self, rel: str, quota: str = "-1", cpus: str = "") -> None:
        for c in ("cpu", "cpuset", "cpuacct", "memory"):
            self.ctl(c, rel).mkdir(parents=True, exist_ok=True)
        if self.version == 1:
            (self.ctl("cpu", rel) / "cpu.cfs_quota_us").write_text(quota + "\n")
            (self.ctl("cpu", rel) / "cpu.cfs_period_us").write_text("100000\n")
            (self.ctl("cpuset", rel) / "cpuset.cpus").write_text((cpus or f"0-{self.ncpu - 1}") + "\n")
            (self.ctl("cpuacct", rel) / "cpuacct.usage").write_text("0\n")
            (self.ctl("memory", rel) / "memory.usage_in_bytes").write_text("0\n")
        else:
            (self.ctl("cpu", rel) / "cpu.max").write_text(("max" if quota == "-1" else quota) + " 100000\n")
            (self.ctl("cpu", rel) / "cpu.idle").write_text("0\n")
            (self.ctl("cpu", rel) / "cpuset.cpus").write_text("\n")
            (self.ctl("cpu", rel) / "cpuset.cpus.effective").write_text(f"0-{self.ncpu - 1}\n")
            (self.ctl("cpu", rel) / "cpu.stat").write_text("usage_usec 0\n")
            (self.ctl("memory", rel) / "memory.current").write_text("0\n")

    def rmcg(self, rel: str) -> None:
        """Remove a leaf cgroup from every controller that has it (its files first: a fake tree is plain
        directories, where the kernel's rmdir takes a cgroup's control files with it)."""
        for c in ("cpu", "cpuacct", "cpuset", "memory"):
            d = self.ctl(c, rel)
            if d.exists():
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()

    def add_pod(self, uid: str, level: str, containers: tuple[str, ...] | list[str] = ("c1",)) -> str:
        if self.driver == "systemd":
            esc = uid.replace("-", "_")
            name = f"kubepods-{level}-pod{esc}.slice" if level != "guaranteed" else f"kubepods-pod{esc}.slice"
        else:
            name = f"pod{uid}"
        base = self.kubepods if level == "guaranteed" else self.qos(level)
        rel = f"{base}/{name}"
        self.mkcg(rel)
        for c in containers:
            self.mkcg(f"{rel}/{c}")
        return rel

    def set_usage(self, rel: str, ns: int) -> None:
        if self.version == 1:
            (self.ctl("cpuacct", rel) / "cpuacct.usage").write_text(f"{ns}\n")
        else:
            (self.ctl("cpu", rel) / "cpu.stat").write_text(f"usage_usec {ns // 1000}\n")

    def set_memory(self, rel: str, nbytes: int) -> None:
        """A cgroup's memory usage (v1 ``memory.usage_in_bytes``, v2 ``memory.current``)."""
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        (self.ctl("memory", rel) / name).write_text(f"{nbytes}\n")

    def read(self, controller: str, rel: str, name: str) -> str:
        return (self.ctl(controller, rel) / name).read_text().strip()
