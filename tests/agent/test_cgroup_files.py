"""The agent's cgroup file reader (:class:`koordfw.agent.cgroups.CgroupFiles`): descriptors of real cgroup
files kept open and read again at offset 0, plain files opened and closed each time.

The real-cgroup tests create groups under a unique parent (``/sys/fs/cgroup/cpu/koordfw-test-<pid>-<rand>``)
and remove them afterwards; they are skipped where cgroup v1 ``cpu`` is not mounted or not writable, or
without root.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

import koordfw
import koordfw.nodestate
from koordfw.agent.cgroups import CGROUP_FILES, CgroupFiles, cgroup_devices, read_value
from koordfw.testing.cgroups import make_real_cgroup, real_cgroups_unavailable, remove_real_cgroups

ROOT = Path("/sys/fs/cgroup")
REASON = real_cgroups_unavailable(("cpu",))
real = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def open_fds() -> set[str]:
    """What this process's descriptors point at (``/proc/self/fd``)."""
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return out


@pytest.fixture
def cg():
    """A fresh cgroup ``cpu/koordfw-test-<pid>-<rand>`` (removed with any children afterwards)."""
    parent = ROOT / "cpu" / f"koordfw-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    make_real_cgroup(parent)
    try:
        yield parent
    finally:
        remove_real_cgroups([p for p in parent.rglob("*") if p.is_dir()] + [parent])


# -- plain files: never kept ----------------------------------------------------------------------------
def test_plain_files_are_opened_and_closed_each_time(tmp_path):
    files = CgroupFiles()
    f = tmp_path / "cpu.shares"
    f.write_text("1024\n")
    assert files.read(f) == "1024"
    assert len(files) == 0 and str(f) not in open_fds()
    f.write_text("2\n")  # rewritten in place
    assert files.read(f) == "2"
    f.unlink()
    f.write_text("3\n")  # replaced by a new file
    assert files.read(str(f)) == "3"
    f.unlink()
    assert files.read(f) is None
    assert files.read(str(tmp_path / "a\0b")) is None  # not a path
    assert files.opens == 3 and files.kept_reads == 0


def test_mountinfo_parsing(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 27 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
        "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:11 - cgroup cgroup rw,cpu\n"
        "31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "32 25 0:28 / /sys/fs/cgroup/odd\\040name rw master:1 - cgroup cgroup rw,memory\n"
        "garbage\n")
    assert cgroup_devices(str(info)) == {os.makedev(0, 26), os.makedev(0, 27), os.makedev(0, 28)}
    assert cgroup_devices(str(tmp_path / "missing")) == frozenset()
    # no cgroup filesystem known: nothing is kept, even a real cgroup file
    files = CgroupFiles(mountinfo=str(tmp_path / "missing"))
    assert files.read("/proc/self/stat") is not None and len(files) == 0


# -- real cgroups ---------------------------------------------------------------------------------------
@real
def test_a_kept_descriptor_reads_the_current_value(cg):
    files = CgroupFiles()
    path = str(cg / "cpu.shares")
    assert files.read(path) == "1024"
    assert path in files and path in open_fds()
    for value in ("333", "777", "2"):
        (cg / "cpu.shares").write_text(value)
        assert files.read(path) == value
    assert files.opens == 1 and files.kept_reads == 3
    assert files.read_bytes(path, 1) == b"2"  # a shorter read of the same descriptor, from the start
    assert files.read(path) == "2"


@real
def test_a_cgroup_removed_and_recreated_is_opened_again(cg):
    files = CgroupFiles()
    child = cg / "pod1"
    make_real_cgroup(child)
    (child / "cpu.shares").write_text("500")
    path = str(child / "cpu.shares")
    assert files.read(path) == "500"
    child.rmdir()
    make_real_cgroup(child)  # the same path, a new cgroup (the kept descriptor now fails with ENODEV)
    (child / "cpu.shares").write_text("600")
    assert files.read(path) == "600"
    assert files.opens == 2 and path in files
    (child / "cpu.shares").write_text("700")
    assert files.read(path) == "700"  # the new descriptor is kept
    assert files.opens == 2


@real
def test_a_removed_cgroup_is_skipped_and_its_descriptor_closed(cg):
    files = CgroupFiles()
    child = cg / "pod2"
    make_real_cgroup(child)
    path = str(child / "cpu.shares")
    assert files.read(path) == "1024"
    before = len(open_fds())
    child.rmdir()
    assert files.read(path) is None  # no exception
    assert path not in files and len(files) == 0
    assert len(open_fds()) == before - 1
    assert files.read(path) is None


@real
def test_the_number_of_kept_descriptors_is_bounded(cg):
    files = CgroupFiles(max_fds=5)
    names = sorted(p.name for p in cg.iterdir() if p.is_file() and os.access(p, os.R_OK))
    paths = [str(cg / n) for n in names]
    assert len(paths) > 5
    base = len(open_fds())
    for p in paths:
        files.read(p)
        assert len(files) <= 5
        assert len(open_fds()) - base <= 5
    kept = [p for p in paths if p in files]
    assert kept == paths[-5:]  # the least recently read are closed first
    files.read(paths[-5])  # a read makes a file the most recent
    files.read(paths[0])
    assert paths[-5] in files and paths[-4] not in files
    files.close()
    assert len(files) == 0 and len(open_fds()) == base


@real
def test_forget_closes_the_descriptors_of_removed_dirs(cg):
    files = CgroupFiles()
    for name in ("podA", "podB"):
        make_real_cgroup(cg / name)
        make_real_cgroup(cg / name / "ctr")
        files.read(cg / name / "cpu.shares")
        files.read(cg / name / "ctr" / "cpu.shares")
    assert len(files) == 4
    rel = f"{cg.name}/podA"  # a dir relative to the controller's root, as the agent names pods
    assert files.forget([rel]) == 2
    assert len(files) == 2 and str(cg / "podB" / "ctr" / "cpu.shares") in files
    assert files.forget(["", "/"]) == 0


@real
def test_the_agent_and_plugins_share_the_process_reader(cg):
    (cg / "cpu.shares").write_text("42")
    path = str(cg / "cpu.shares")
    try:
        assert read_value(path) == "42"
        assert path in CGROUP_FILES
        (cg / "cpu.shares").write_text("43")
        assert koordfw.nodestate.read_cgroup_file(path) == b"43\n"
    finally:
        CGROUP_FILES.forget([cg.name])
    assert path not in CGROUP_FILES


@real
def test_pod_dirs_are_listed_through_kept_descriptors(cg):
    files = CgroupFiles()
    pod = cg / "pod3"
    make_real_cgroup(pod)
    make_real_cgroup(pod / "c1")

    def ino() -> int:
        return next(e.inode() for e in os.scandir(cg) if e.name == "pod3")

    assert files.subdirs(str(pod), ino()) == ["c1"]
    assert files.opens == 1 and str(pod) + "/" in files
    make_real_cgroup(pod / "c2")  # seen at once through the kept descriptor
    assert sorted(files.subdirs(str(pod), ino()) or []) == ["c1", "c2"]
    (pod / "c1").rmdir()
    assert files.subdirs(str(pod), ino()) == ["c2"]
    assert files.opens == 1 and files.kept_reads == 2
    (pod / "c2").rmdir()
    assert files.subdirs(str(pod), ino()) == []  # empty: listed again by path, as a removed cgroup lists
    pod.rmdir()
    make_real_cgroup(pod)  # the same path, another cgroup (another inode): its descriptor is opened anew
    make_real_cgroup(pod / "c3")
    assert files.subdirs(str(pod), ino()) == ["c3"]
    old_ino = ino()
    (pod / "c3").rmdir()
    pod.rmdir()
    assert files.subdirs(str(pod), old_ino) is None  # gone: None, as an OSError of the listing was
    assert str(pod) + "/" not in files
    # not a cgroup tree (or keep=False): listed by path, nothing kept
    assert files.subdirs(str(cg), 0, keep=False) == [] and str(cg) + "/" not in files


def test_plain_dirs_are_listed_by_path(tmp_path):
    files = CgroupFiles()
    (tmp_path / "pod" / "c1").mkdir(parents=True)
    (tmp_path / "pod" / "cpu.shares").write_text("2")
    ino = os.stat(tmp_path / "pod").st_ino
    assert files.subdirs(str(tmp_path / "pod"), ino) == ["c1"]  # keep asked for, but not a cgroup filesystem
    assert len(files) == 0
    assert files.subdirs(str(tmp_path / "gone"), 1) is None


@pytest.mark.parametrize("text", [
    "total_rss 5\ntotal_cache 7",
    "total_rss 5\r\ntotal_cache 7",  # \r: its own line break for str.splitlines
    "total_rss 5\x1ctotal_cache 7\x0btotal_unevictable 1",
    "total_rss 5\x85total_cache 7\u2028anon 3",  # not ASCII
    "\n".join(["total_rss 1"] * 300 + ["total_cache 2"]),  # beyond the first 256 lines
    "\n".join(["x 1"] * 255 + ["total_cache 2"]),  # line 256: still read
    "total_rss  \t 5 \t\ntotal_rss 6\n\ntotal_cache 99999999999999999999999",
])
def test_memory_stat_lines_as_splitlines(text):
    """The agent's memory.stat reading takes kernel text as is: the same lines as str.splitlines' first 256."""
    from koordfw.agent.loop import _MEMORY_STAT_LINE, _memory_stat_lines

    lines = text.splitlines()[:256]
    assert _memory_stat_lines(text) == "\n" + "\n".join(lines)
    for version, rx in _MEMORY_STAT_LINE.items():
        keys = rx.pattern.split("(", 1)[1].split(")", 1)[0]
        old = re.compile(rf"^({keys}) [^\S\n]*([0-9]{{1,20}})[^\S\n]*$", re.M)  # the multi-line form it replaced
        assert rx.findall(_memory_stat_lines(text)) == old.findall("\n".join(lines)), version


def test_discover_sees_container_changes_between_rounds(fake_node):
    """discover reuses last round's pod while its dir and containers are the same, and only then."""
    from koordfw.agent.cgroups import CgroupLayout

    lay = CgroupLayout(fake_node.root, 1)
    rel = fake_node.add_pod("u1", "burstable", containers=("c1",))
    first = lay.discover()
    assert [c for _, c in first[0].containers] == [f"{rel}/c1"]
    assert lay.discover()[0] is first[0]
    fake_node.mkcg(f"{rel}/c2")
    assert [c for _, c in lay.discover()[0].containers] == [f"{rel}/c1", f"{rel}/c2"]
    fake_node.rmcg(f"{rel}/c1")
    assert [c for _, c in lay.discover()[0].containers] == [f"{rel}/c2"]


@real
def test_a_pod_dir_renamed_away_and_made_again_is_not_read_through_the_old_descriptors(cg):
    """cgroup v1 dirs can be renamed; a kept descriptor follows the renamed cgroup. When the listing shows
    another dir under the path (another inode), what was kept under it is closed."""
    files = CgroupFiles()
    pod = cg / "pod4"
    make_real_cgroup(pod)
    make_real_cgroup(pod / "c1")
    (pod / "cpu.shares").write_text("111")

    def ino() -> int:
        return next(e.inode() for e in os.scandir(cg) if e.name == "pod4")

    assert files.subdirs(str(pod), ino()) == ["c1"]
    assert files.read(pod / "cpu.shares") == "111"
    pod.rename(cg / "moved")
    make_real_cgroup(pod)
    (pod / "cpu.shares").write_text("222")
    assert files.subdirs(str(pod), ino()) == []
    assert str(pod / "cpu.shares") not in files
    assert files.read(pod / "cpu.shares") == "222"


@real
def test_the_agent_closes_what_it_kept_on_shutdown(cg):
    import anyio

    from koordfw.agent.cgroups import CgroupLayout
    from koordfw.agent.executor import Executor
    from koordfw.agent.loop import Agent

    from .agent_testkit import make_registry

    kubepods = f"{cg.name}/kubepods"
    for d in ("kubepods", "kubepods/burstable", "kubepods/besteffort", "kubepods/besteffort/podu1",
              "kubepods/besteffort/podu1/ctr"):
        make_real_cgroup(cg / d)
    agent = Agent(make_registry(), CgroupLayout(ROOT, 1, "cgroupfs", kubepods), Executor({"cgroup": ROOT}),
                  node_name="n")

    def kept() -> list[str]:
        return [k for k in list(CGROUP_FILES._fds) if f"/{kubepods}/" in k]

    async def go() -> None:
        await agent.run_once()
        assert [p.uid for p in agent.node_state.pods] == ["u1"]  # type: ignore[union-attr]
        assert kept()  # the pod's usage files, its dir, the QoS level files
        await agent.shutdown()

    anyio.run(go)
    assert kept() == []


@pytest.mark.parametrize("text", [
    "MemTotal:       16000 kB\nMemFree:         2000 kB\nMemAvailable:    8000 kB\nBuffers: 1 kB\nSwapTotal: 5 kB\n",
    "SwapTotal: 5 kB\nMemFree: 10 kB\nHugePages_Total: 0\nMemTotal: 100 kB\nMemTotal: 200 kB\n",  # the last wins
    "Buffers: 1 kB\nMemFree: x kB\nMemTotal: 100\nMem: 3 kB\nMemAvailable:\n",
    "Cached: 5 kB\nActive: 1 kB\n",  # no MemTotal
    "",
])
def test_read_meminfo_as_parsing_every_line(tmp_path, text):
    """read_meminfo looks at the Mem* lines only: the same answer as parsing every line."""
    from koordfw.agent.cgroups import _uint, read_meminfo

    (tmp_path / "meminfo").write_text(text)
    info = {}
    for line in text.strip().splitlines():
        k, _, rest = line.partition(":")
        parts = rest.split()
        kb = _uint(parts[0]) if parts else None
        if kb is not None:
            info[k] = kb * 1024
    want = None if "MemTotal" not in info else (
        info["MemTotal"], info["MemTotal"] - info.get("MemAvailable", info.get("MemFree", 0)))
    assert read_meminfo(tmp_path) == want
