"""The single executor of the node agent: applies plugins' :class:`FileWrite` lists to real files.

Contract:

* Writes are applied in list order (plugins order them, e.g. cpuset widening top-down then narrowing
  bottom-up), each under the root of its ``fs`` (``cgroup`` or ``resctrl``).
* A file is written only when its current value differs (compared after stripping whitespace; cpu
  lists such as ``cpuset.cpus`` are compared as sets, so ``0,1,2`` equals ``0-2``).
* A path that is absolute, contains ``..``, or resolves (symlinks included) outside its root is
  refused and logged; nothing is written.
* A cgroup that vanished between plan and write (parent dir or file missing, ``ENOENT``/``ENODEV``
  on write) is skipped and logged, not an error. With ``mkdir`` the parent dir is created instead.
* A write with ``rmdir`` removes the directory ``path`` with one ``rmdir(2)`` (:meth:`Executor.remove_dir`),
  never recursively: resctrl groups and cgroups are removed that way although they list control files,
  and the kernel refuses a cgroup that still has tasks or children (``EBUSY``, counted as an error with
  that reason). The same path rules apply (the parent is resolved, symlinks included, and must lie in
  the root; the last component is removed as named, so a symlink is not followed), and the root itself
  is refused. A directory already gone is skipped and logged (outcome ``vanished``), not an error.
* Every write is logged with structlog (``file``, ``old``, ``new``, ``plugin``; a removal as
  ``remove dir`` with ``dir``, ``plugin``); with ``dry_run`` nothing is written or removed and the
  would-be operations are logged and returned.
* Counts go to Prometheus (``koordfw_agent_writes_total{plugin,fs}``, removals included,
  ``koordfw_agent_write_errors_total{plugin,reason}``) and to :attr:`Executor.stats`.
"""

from __future__ import annotations

import errno
import functools
import os
from pathlib import Path
from typing import Iterable, Mapping

import attrs
import structlog
from prometheus_client import Counter

from ..core.nodestate import FS_CGROUP, FS_RESCTRL, FileWrite, parse_cpuset
from .cgroups import read_value
from ..metrics import REGISTRY

log = structlog.get_logger("koordfw.agent")

_CPU_LIST_FILES = ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.exclusive")


@attrs.frozen
class ExecutorMetrics:
    writes: Counter
    errors: Counter


@functools.cache
def executor_metrics() -> ExecutorMetrics:
    """Created on first use (once per process: a collector can be registered only once)."""
    return ExecutorMetrics(
        writes=Counter("koordfw_agent_writes", "Files written by the node agent", ["plugin", "fs"],
                       registry=REGISTRY),
        errors=Counter("koordfw_agent_write_errors", "Writes refused or failed, by reason",
                       ["plugin", "reason"], registry=REGISTRY),
    )


@attrs.frozen
class WriteResult:
    """What happened to one FileWrite: ``written``, ``removed`` (an ``rmdir`` write), ``unchanged``,
    ``vanished``, ``refused``, ``error`` or ``dry_run``; ``old`` is the value read before (``None`` when
    absent, and for removals)."""

    write: FileWrite
    outcome: str
    old: str | None = None
    error: str = ""


@attrs.define
class ExecutorStats:
    written: int = 0
    unchanged: int = 0
    vanished: int = 0
    refused: int = 0
    errors: int = 0
    removed: int = 0


def values_equal(path: str, old: str | None, new: str) -> bool:
    if old is None:
        return False
    a, b = old.strip(), new.strip()
    if a == b:
        return True
    if path.rsplit("/", 1)[-1] in _CPU_LIST_FILES:
        try:
            return parse_cpuset(a) == parse_cpuset(b)
        except ValueError:
            return False
    return False


class Executor:
    """Applies FileWrites under ``roots`` (``{"cgroup": "/sys/fs/cgroup", "resctrl": "/sys/fs/resctrl"}``)."""

    def __init__(self, roots: Mapping[str, str | os.PathLike[str]] | None = None, *, dry_run: bool = False) -> None:
        roots = dict(roots or {})
        roots.setdefault(FS_CGROUP, "/sys/fs/cgroup")
        roots.setdefault(FS_RESCTRL, "/sys/fs/resctrl")
        self.roots = {fs: Path(p) for fs, p in roots.items()}
        self._real_roots = {fs: p.resolve() for fs, p in self.roots.items()}
        self.dry_run = dry_run
        self.stats = ExecutorStats()
        self._metrics = executor_metrics()

    def _lexical(self, w: FileWrite) -> str | None:
        """The joined path when ``w.path`` is relative and free of ``..`` (no symlink check yet)."""
        root = self.roots.get(w.fs)
        if root is None or not w.path or os.path.isabs(w.path) or ".." in w.path.split("/"):
            return None
        return f"{root}/{w.path}"

    def resolve(self, w: FileWrite) -> Path | None:
        """The absolute path of a write, or ``None`` when it would escape its root (symlinks resolved)."""
        if self._lexical(w) is None:
            return None
        real_root = self._real_roots[w.fs]
        target = (self.roots[w.fs] / w.path).resolve()
        if target != real_root and real_root not in target.parents:
            return None
        return target

    def apply(self, writes: Iterable[FileWrite], current: Mapping[str, str] | None = None) -> list[WriteResult]:
        """Apply in order. ``current``: cgroup values read this round (``NodeState.cgroups``); a write
        equal to its entry is skipped without re-reading the file (a value changed behind the agent's
        back since the read is corrected the next round)."""
        known = dict(current or {})
        out = []
        for w in writes:
            if w.rmdir:
                r = self.apply_one(w)
                if w.fs == FS_CGROUP and r.outcome in ("removed", "dry_run", "vanished"):
                    # the files of a removed cgroup are gone with it
                    prefix = w.path.rstrip("/") + "/"
                    known = {p: v for p, v in known.items() if not p.startswith(prefix)}
                out.append(r)
                continue
            if w.fs == FS_CGROUP and w.path in known and values_equal(w.path, known[w.path], w.value):
                self.stats.unchanged += 1
                out.append(WriteResult(w, "unchanged", known[w.path]))
                continue
            r = self.apply_one(w)
            if w.fs == FS_CGROUP and r.outcome in ("written", "dry_run"):
                known[w.path] = w.value
            elif w.fs == FS_CGROUP:
                known.pop(w.path, None)
            out.append(r)
        return out

    def apply_one(self, w: FileWrite) -> WriteResult:
        if w.rmdir:
            return self._apply_rmdir(w)
        # fast path: an unchanged value needs no write, so no symlink resolution either
        joined = self._lexical(w)
        if joined is not None:
            old = read_value(joined)
            if old is not None and values_equal(w.path, old, w.value):
                self.stats.unchanged += 1
                return WriteResult(w, "unchanged", old)
        target = self.resolve(w)
        if target is None:
            self.stats.refused += 1
            self._metrics.errors.labels(w.plugin, "refused").inc()
            log.error("refused write outside the filesystem root", file=w.path, fs=w.fs, plugin=w.plugin,
                      root=str(self.roots.get(w.fs)))
            return WriteResult(w, "refused", error="path escapes the root")
        if not target.parent.is_dir():
            if not w.mkdir:
                return self._vanished(w, target)
            if not self.dry_run:
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    return self._error(w, target, None, e)
        old = read_value(target)
        if values_equal(w.path, old, w.value):
            self.stats.unchanged += 1
            return WriteResult(w, "unchanged", old)
        if self.dry_run:
            log.info("would write", file=str(target), old=old, new=w.value, plugin=w.plugin)
            return WriteResult(w, "dry_run", old)
        try:
            # a single write(2): the kernel's cgroup files want the whole value in one call
            fd = os.open(target, os.O_WRONLY | os.O_TRUNC | (os.O_CREAT if w.mkdir or old is None else 0), 0o644)
            try:
                os.write(fd, w.value.encode())
            finally:
                os.close(fd)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENODEV) and not target.parent.exists():
                return self._vanished(w, target)
            return self._error(w, target, old, e)
        self.stats.written += 1
        self._metrics.writes.labels(w.plugin, w.fs).inc()
        log.info("write", file=str(target), old=old, new=w.value, plugin=w.plugin)
        return WriteResult(w, "written", old)

    def remove_dir(self, target: Path) -> None:
        """The one ``rmdir(2)`` of a removal. A fake of a kernel filesystem laid out as plain files
        (where rmdir of a group that lists control files would fail with ``ENOTEMPTY``) overrides this
        to apply the kernel's semantics instead; see ``koordfw_llc_isolation.fake``."""
        os.rmdir(target)

    def _rmdir_target(self, w: FileWrite) -> Path | None:
        """The directory a removal names: its parent resolved inside the root, its last component as
        given (so a symlink is never followed); ``None`` when it escapes or is the root itself."""
        if self._lexical(w) is None:
            return None
        parts = [p for p in w.path.split("/") if p not in ("", ".")]
        if not parts:
            return None
        real_root = self._real_roots[w.fs]
        parent = self.roots[w.fs].joinpath(*parts[:-1]).resolve()
        if parent != real_root and real_root not in parent.parents:
            return None
        return parent / parts[-1]

    def _apply_rmdir(self, w: FileWrite) -> WriteResult:
        target = self._rmdir_target(w)
        if target is None:
            self.stats.refused += 1
            self._metrics.errors.labels(w.plugin, "refused").inc()
            log.error("refused removal of the filesystem root or outside it", dir=w.path, fs=w.fs,
                      plugin=w.plugin, root=str(self.roots.get(w.fs)))
            return WriteResult(w, "refused", error="path is the root or escapes it")
        if not os.path.lexists(target):
            return self._gone(w, target)
        if self.dry_run:
            log.info("would remove dir", dir=str(target), plugin=w.plugin)
            return WriteResult(w, "dry_run")
        try:
            self.remove_dir(target)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return self._gone(w, target)
            self.stats.errors += 1
            reason = errno.errorcode.get(e.errno or 0, "OSError")
            self._metrics.errors.labels(w.plugin, reason).inc()
            why = e.strerror or str(e)
            if e.errno == errno.EBUSY:
                why += " (still in use: a cgroup with tasks or child groups, or a mount point)"
            elif e.errno == errno.ENOTEMPTY:
                why += " (a plain directory with files: only kernel pseudo-filesystems remove them with rmdir)"
            log.error("remove dir failed", dir=str(target), plugin=w.plugin, error=why)
            return WriteResult(w, "error", error=f"{reason}: {why}")
        self.stats.removed += 1
        self._metrics.writes.labels(w.plugin, w.fs).inc()
        log.info("remove dir", dir=str(target), plugin=w.plugin)
        return WriteResult(w, "removed")

    def _gone(self, w: FileWrite, target: Path) -> WriteResult:
        self.stats.vanished += 1
        log.info("skipped removal of a directory already gone", dir=str(target), plugin=w.plugin)
        return WriteResult(w, "vanished")

    def read(self, fs: str, path: str) -> str | None:
        """Read a file under a root (``None`` when absent or escaping); used to reconcile on start."""
        target = self.resolve(FileWrite(path, "", fs=fs))
        return None if target is None else read_value(target)

    def _vanished(self, w: FileWrite, target: Path) -> WriteResult:
        self.stats.vanished += 1
        log.info("skipped write to a vanished cgroup", file=str(target), plugin=w.plugin)
        return WriteResult(w, "vanished")

    def _error(self, w: FileWrite, target: Path, old: str | None, e: OSError) -> WriteResult:
        self.stats.errors += 1
        reason = errno.errorcode.get(e.errno or 0, "OSError")
        self._metrics.errors.labels(w.plugin, reason).inc()
        log.error("write failed", file=str(target), old=old, new=w.value, plugin=w.plugin,
                  error=e.strerror or str(e))
        return WriteResult(w, "error", old, error=f"{reason}: {e.strerror or e}")
