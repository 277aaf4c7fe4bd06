"""The executor's directory removals (``FileWrite(rmdir=True)``): path safety, vanished, dry run, errors."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from koordfw.agent.executor import Executor, executor_metrics
from koordfw.core.nodestate import FileWrite
from koordfw.metrics import REGISTRY
from koordfw.testing.cgroups import real_cgroups_unavailable


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """``root/`` with ``grp/``, ``a/b/``, ``full/file``, ``out`` → ``outside/`` and ``link`` → ``outside/d``."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    for d in (root / "grp", root / "a" / "b", root / "full", outside / "d"):
        d.mkdir(parents=True)
    (root / "full" / "file").write_text("x")
    os.symlink(outside, root / "out")
    os.symlink(outside / "d", root / "link")
    return root, outside


@pytest.mark.parametrize("path, dry_run, outcome, gone, error", [
    ("grp", False, "removed", "grp", ""),
    ("grp/", False, "removed", "grp", ""),
    ("a/b", False, "removed", "a/b", ""),
    ("missing", False, "vanished", None, ""),
    ("nodir/missing", False, "vanished", None, ""),
    ("grp", True, "dry_run", None, ""),
    ("missing", True, "vanished", None, ""),
    # a plain directory with files: rmdir(2) refuses, nothing is deleted recursively
    ("full", False, "error", None, "ENOTEMPTY"),
    # outside the root: lexically, through a symlinked parent, absolute
    ("../outside/d", False, "refused", None, "escapes"),
    ("out/d", False, "refused", None, "escapes"),
    ("/tmp", False, "refused", None, "escapes"),
    # the root itself, however it is spelled
    ("", False, "refused", None, "root"),
    (".", False, "refused", None, "root"),
    ("./", False, "refused", None, "root"),
    # the last component is a symlink: rmdir(2) does not follow it, the target stays
    ("link", False, "error", None, "ENOTDIR"),
])
def test_rmdir_table(tmp_path, path, dry_run, outcome, gone, error):
    root, outside = _tree(tmp_path)
    ex = Executor({"cgroup": tmp_path / "cg", "resctrl": root}, dry_run=dry_run)
    [r] = ex.apply([FileWrite.remove_dir(path, fs="resctrl", plugin="t")])
    assert r.outcome == outcome
    assert error in r.error
    if gone is not None:
        assert not (root / gone).exists()
    for kept in ("a", "full/file") + (() if gone == "grp" else ("grp",)):
        assert (root / kept).exists()
    assert (outside / "d").is_dir() and root.is_dir()
    counts = {"removed": ex.stats.removed, "vanished": ex.stats.vanished, "refused": ex.stats.refused,
              "error": ex.stats.errors}
    assert counts.get(outcome, 0) == (1 if outcome in counts else 0)
    assert sum(counts.values()) == (0 if outcome == "dry_run" else 1)


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class BusyExecutor(Executor):
    """The kernel's answer for a cgroup that still has tasks."""

    def remove_dir(self, target: Path) -> None:
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))


def test_rmdir_ebusy_is_an_error_with_its_reason(tmp_path):
    executor_metrics()
    root, _ = _tree(tmp_path)
    before = _sample("koordfw_agent_write_errors_total", plugin="busy-t", reason="EBUSY")
    ex = BusyExecutor({"cgroup": root}, cgroup_version=2)  # on v1 "grp" would be a hierarchy's root
    [r] = ex.apply([FileWrite.remove_dir("grp", plugin="busy-t")])
    assert r.outcome == "error" and r.error.startswith("EBUSY") and "in use" in r.error
    assert ex.stats.errors == 1 and (root / "grp").is_dir()
    assert _sample("koordfw_agent_write_errors_total", plugin="busy-t", reason="EBUSY") == before + 1


def test_rmdir_counts_in_the_write_metric(tmp_path):
    executor_metrics()
    root, _ = _tree(tmp_path)
    before = _sample("koordfw_agent_writes_total", plugin="rm-t", fs="cgroup")
    ex = Executor({"cgroup": root}, cgroup_version=2)
    assert [r.outcome for r in ex.apply([FileWrite.remove_dir("grp", plugin="rm-t")])] == ["removed"]
    assert _sample("koordfw_agent_writes_total", plugin="rm-t", fs="cgroup") == before + 1


def test_removed_cgroup_forgets_its_known_values(tmp_path):
    """A write after the removal of its cgroup finds the dir gone instead of trusting the round's read."""
    root = tmp_path / "cg"
    (root / "cpu" / "x").mkdir(parents=True)
    ex = Executor({"cgroup": root})
    res = ex.apply([FileWrite.remove_dir("cpu/x"), FileWrite("cpu/x/cpu.shares", "2")],
                   current={"cpu/x/cpu.shares": "2", "cpu/y/cpu.shares": "2"})
    assert [r.outcome for r in res] == ["removed", "vanished"]


def test_filewrite_rmdir_contract():
    w = FileWrite.remove_dir("koordlet-1", fs="resctrl", plugin="p")
    assert w.rmdir and not w.mkdir and w.value == ""
    assert w.to_dict() == {"path": "koordlet-1", "value": "", "plugin": "p", "fs": "resctrl", "rmdir": True}
    assert "rmdir" not in FileWrite("a/b", "1").to_dict()
    with pytest.raises(ValueError, match="rmdir and mkdir"):
        FileWrite("g", "", rmdir=True, mkdir=True)


CPU = Path("/sys/fs/cgroup/cpu")


_REAL = real_cgroups_unavailable(("cpu",))


@pytest.mark.skipif(_REAL is not None, reason=_REAL or "")
def test_rmdir_real_cgroup_busy_then_removed():
    """On real cgroupfs: a cgroup with a task is EBUSY; once empty, rmdir removes it with its files."""
    name = f"koordfw-test-rmdir-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    d = CPU / name
    d.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (d / "cgroup.procs").write_text(str(proc.pid))
        ex = Executor({"cgroup": "/sys/fs/cgroup"})
        [busy] = ex.apply([FileWrite.remove_dir(f"cpu/{name}", plugin="t")])
        assert busy.outcome == "error" and busy.error.startswith("EBUSY") and d.is_dir()
        proc.kill()
        proc.wait()
        for _ in range(50):  # the exit reaches the cgroup asynchronously
            [r] = ex.apply([FileWrite.remove_dir(f"cpu/{name}", plugin="t")])
            if r.outcome != "error":
                break
            time.sleep(0.02)
        assert r.outcome == "removed" and not d.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)
