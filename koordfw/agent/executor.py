"""The single executor of the node agent: applies plugins' :class:`FileWrite` lists to real files.

Contract:

* Writes are applied in list order (plugins order them, e.g. cpuset widening top-down then narrowing
  bottom-up), each under the root of its ``fs`` (``cgroup`` or ``resctrl``).
* A file is written only when its current value differs (compared after stripping whitespace; cpu
  lists such as ``cpuset.cpus`` are compared as sets, so ``0,1,2`` equals ``0-2``).
* A path that is absolute, contains ``..``, or resolves (symlinks included) outside its root is
  refused and logged; nothing is written. So is a path the kernel would reject or that is not a path
  at all: a NUL byte, a component longer than ``NAME_MAX`` (255 bytes), more than ``PATH_MAX`` (4096
  bytes), a symlink loop; and a value with a NUL byte or that is not valid text. Such a refusal fails
  only its own write (outcome ``refused``); the others of the round go on.
* No file directly in a root's top directory is written on the cgroup filesystem: a cgroup write's
  directory (after resolving symlinks) must lie strictly below the cgroup root, and on cgroup v1
  strictly below a controller's root (``cpu/cpu.cfs_quota_us`` and ``cpu.cfs_quota_us`` are refused,
  ``cpu/kubepods/cpu.cfs_quota_us`` is not; on v2 ``kubepods/cpu.max`` is allowed). The root's own
  files are the whole machine's knobs, never a pod's or a QoS level's. A removal likewise never names
  the root or (v1) a controller's root. The resctrl root *is* a group (the default one), so its
  ``schemata`` may be written. The version is detected from the root (``cgroup.controllers`` at the top:
  v2) unless given.
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
* A write equal to the value the executor last wrote (or found) in that cgroup file less than
  ``force_update_seconds`` ago (default 60: koordlet's ``--resource-force-update-seconds``, its
  executor's cacheable updates) is skipped without reading the file; past that age the file is read
  again, so a value changed behind the agent's back is corrected within that time. A value read this
  round (``current``) always wins over the cache. The cache ages on :attr:`Executor.clock` (the agent's).
* Counts go to Prometheus (``koordfw_agent_writes_total{plugin,fs}``, removals included,
  ``koordfw_agent_write_errors_total{plugin,reason}``) and to :attr:`Executor.stats`.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import structlog
from prometheus_client import Counter

from ..core.nodestate import FS_CGROUP, FS_RESCTRL, NAME_MAX, PATH_MAX, FileWrite, parse_cpuset
from ..metrics import REGISTRY
from .cgroups import read_value

log = structlog.get_logger("koordfw.agent")

_CPU_LIST_FILES = ("cpuset.cpus", "cpuset.mems", "cpuset.cpus.exclusive")

REFUSE_ESCAPE = "path escapes the root"
REFUSE_ROOT = "path is the root itself"


def _escape_reason(path: object) -> str:
    """Why ``path`` (relative to a root) is not a safe relative path, ``""`` when it is."""
    if not isinstance(path, str):
        return f"path is not a string ({type(path).__name__})"
    if "\x00" in path:
        return "path has a NUL byte"
    if os.path.isabs(path):
        return f"{REFUSE_ESCAPE} (absolute)"
    parts = path.split("/")
    if ".." in parts:
        return f"{REFUSE_ESCAPE} (a '..' component)"
    if len(os.fsencode(path)) > PATH_MAX:
        return f"path is longer than PATH_MAX ({PATH_MAX} bytes)"
    if any(len(os.fsencode(p)) > NAME_MAX for p in parts):
        return f"path has a component longer than NAME_MAX ({NAME_MAX} bytes)"
    return ""


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _depth_reason(fs: str, parts: list[str], rmdir: bool, cgroup_version: int) -> str:
    """Why a write (or removal) with these path components relative to its root is refused for where it
    lands, ``""`` when it may go ahead (see the module docstring)."""
    if not parts:
        return REFUSE_ROOT
    if fs != FS_CGROUP:
        return ""
    dirs = parts if rmdir else parts[:-1]
    if not dirs:
        return "a file of the cgroup root itself"
    if cgroup_version == 1 and len(dirs) < 2:
        return f"{'is' if rmdir else 'a file of'} the root of the cgroup v1 hierarchy {dirs[0]!r}"
    return ""


def path_refusal(w: FileWrite, cgroup_version: int = 1) -> str:
    """Why the executor refuses ``w`` from its path and value alone (no filesystem access), ``""`` when
    it does not; symlinks are checked again when the write is applied. ``agent plan`` uses it too."""
    why = _escape_reason(w.path)
    if why:
        return why
    why = _depth_reason(w.fs, _parts(w.path), w.rmdir, cgroup_version)
    if why:
        return why
    if not w.rmdir:
        if "\x00" in w.value:
            return "value has a NUL byte"
        try:
            w.value.encode()
        except UnicodeEncodeError:
            return "value is not valid text (an unpaired surrogate)"
    return ""


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


#: koordlet's ``--resource-force-update-seconds`` default: how long a value the executor wrote is trusted
FORCE_UPDATE_SECONDS = 60.0


class Executor:
    """Applies FileWrites under ``roots`` (``{"cgroup": "/sys/fs/cgroup", "resctrl": "/sys/fs/resctrl"}``)."""

    def __init__(self, roots: Mapping[str, str | os.PathLike[str]] | None = None, *, dry_run: bool = False,
                 cgroup_version: int | None = None, force_update_seconds: float = FORCE_UPDATE_SECONDS,
                 clock: Any = None) -> None:
        roots = dict(roots or {})
        roots.setdefault(FS_CGROUP, "/sys/fs/cgroup")
        roots.setdefault(FS_RESCTRL, "/sys/fs/resctrl")
        self.roots = {fs: Path(p) for fs, p in roots.items()}
        self._real_roots = {fs: p.resolve() for fs, p in self.roots.items()}
        self.dry_run = dry_run
        self._cgroup_version = cgroup_version
        self.force_update_seconds = force_update_seconds
        #: what the write cache ages on (``now()`` in seconds); ``None``: the monotonic clock (the agent
        #: sets its own clock here)
        self.clock = clock
        #: cgroup path → (the value last written or found equal, when)
        self._cache: dict[str, tuple[str, float]] = {}
        self._pruned: float | None = None
        self.stats = ExecutorStats()
        self._metrics = executor_metrics()

    @property
    def cgroup_version(self) -> int:
        """1 or 2: given, else detected from the cgroup root (2 when it has ``cgroup.controllers``);
        1, the stricter rule, while the root does not exist yet."""
        if self._cgroup_version is None:
            root = self.roots[FS_CGROUP]
            if not root.is_dir():
                return 1
            self._cgroup_version = 2 if (root / "cgroup.controllers").exists() else 1
        return self._cgroup_version

    def _lexical(self, w: FileWrite) -> str | None:
        """The joined path when ``w.path`` is a safe relative path (no symlink check yet)."""
        root = self.roots.get(w.fs)
        if root is None or _escape_reason(w.path) or not _parts(w.path):
            return None
        return f"{root}/{w.path}"

    def _resolved(self, fs: str, parts: list[str]) -> Path | None:
        """``root/parts`` with symlinks resolved, ``None`` when that leaves the root or cannot be resolved."""
        real_root = self._real_roots[fs]
        try:
            target = self.roots[fs].joinpath(*parts).resolve()
        except (OSError, RuntimeError, ValueError):  # a symlink loop, a name the kernel refuses
            return None
        if target != real_root and real_root not in target.parents:
            return None
        return target

    def resolve(self, w: FileWrite) -> Path | None:
        """The absolute path of a write, or ``None`` when it would escape its root (symlinks resolved)."""
        if self._lexical(w) is None:
            return None
        return self._resolved(w.fs, _parts(w.path))

    def _where_refused(self, w: FileWrite, target: Path) -> str:
        """:func:`_depth_reason` for where the write lands once symlinks are resolved."""
        rel = target.relative_to(self._real_roots[w.fs]).parts
        return _depth_reason(w.fs, list(rel), w.rmdir, self.cgroup_version)

    def apply(self, writes: Iterable[FileWrite], current: Mapping[str, str] | None = None) -> list[WriteResult]:
        """Apply in order. ``current``: cgroup values read this round (``NodeState.cgroups``); a write
        equal to its entry is skipped without re-reading the file (a value changed behind the agent's
        back since the read is corrected the next round)."""
        known = dict(current or {})
        self._prune()
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
            if w.fs == FS_CGROUP and w.path not in known:
                hit = self._cached(w)
                if hit is not None:
                    self.stats.unchanged += 1
                    out.append(WriteResult(w, "unchanged", hit))
                    continue
            r = self.apply_one(w)
            if w.fs == FS_CGROUP and r.outcome in ("written", "dry_run"):
                known[w.path] = w.value
            elif w.fs == FS_CGROUP:
                known.pop(w.path, None)
            out.append(r)
        return out

    def _now(self) -> float:
        return float(self.clock.now()) if self.clock is not None else time.monotonic()

    def _prune(self) -> None:
        """Drop cache entries past the force-update period (at most once a period): nothing trusts them
        any more, and the files of pods the kubelet removed would otherwise stay in the cache."""
        now = self._now()
        if self._pruned is not None and 0 <= now - self._pruned < self.force_update_seconds:
            return
        self._pruned = now
        self._cache = {p: v for p, v in self._cache.items() if 0 <= now - v[1] < self.force_update_seconds}

    def _cached(self, w: FileWrite) -> str | None:
        """The value the cache holds for ``w``'s file when it equals ``w.value`` and is fresh, else ``None``."""
        hit = self._cache.get(w.path)
        if hit is None or not values_equal(w.path, hit[0], w.value):
            return None
        if not 0 <= self._now() - hit[1] < self.force_update_seconds:
            return None
        return hit[0]

    def _remember(self, w: FileWrite, outcome: str) -> None:
        if w.fs != FS_CGROUP:
            return
        if outcome in ("written", "unchanged") and not self.dry_run:
            self._cache[w.path] = (w.value, self._now())
        else:
            self._cache.pop(w.path, None)

    def apply_one(self, w: FileWrite) -> WriteResult:
        """Apply one write. Never raises for what the write asks: a bad one is refused or an error."""
        try:
            r = self._apply_rmdir(w) if w.rmdir else self._apply_write(w)
        except (OSError, ValueError, RuntimeError) as e:  # the last guard: a bad write fails only itself
            r = self._error(w, self.roots.get(w.fs, Path("?")) / str(w.path)[:NAME_MAX], None, e)
        if w.rmdir:
            if w.fs == FS_CGROUP and r.outcome in ("removed", "vanished"):
                prefix = w.path.rstrip("/") + "/"
                self._cache = {p: v for p, v in self._cache.items() if not p.startswith(prefix)}
        else:
            self._remember(w, r.outcome)
        return r

    def _refuse(self, w: FileWrite, why: str) -> WriteResult:
        self.stats.refused += 1
        self._metrics.errors.labels(w.plugin, "refused").inc()
        log.error("refused write" if not w.rmdir else "refused removal", file=str(w.path)[:300], fs=w.fs,
                  plugin=w.plugin, reason=why, root=str(self.roots.get(w.fs)))
        return WriteResult(w, "refused", error=why)

    def _apply_write(self, w: FileWrite) -> WriteResult:
        if w.fs not in self.roots:
            return self._refuse(w, f"unknown filesystem {w.fs!r}")
        why = path_refusal(w, self.cgroup_version)
        if why:
            return self._refuse(w, why)
        # fast path: an unchanged value needs no write, so no symlink resolution either
        joined = f"{self.roots[w.fs]}/{w.path}"
        old = read_value(joined)
        if old is not None and values_equal(w.path, old, w.value):
            self.stats.unchanged += 1
            return WriteResult(w, "unchanged", old)
        target = self.resolve(w)
        if target is None:
            return self._refuse(w, REFUSE_ESCAPE)
        why = self._where_refused(w, target)
        if why:
            return self._refuse(w, f"{why} (through a symlink)")
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
                os.write(fd, w.value.encode())  # valid text: checked by path_refusal
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
        to apply the kernel's semantics instead; see ``koordfw.testing.resctrl``."""
        os.rmdir(target)

    def _rmdir_target(self, w: FileWrite) -> Path | str:
        """The directory a removal names: its parent resolved inside the root, its last component as
        given (so a symlink is never followed); else why it is refused (escapes, is the root or, on
        cgroup v1, a controller's root)."""
        if w.fs not in self.roots:
            return f"unknown filesystem {w.fs!r}"
        why = _escape_reason(w.path) or _depth_reason(w.fs, _parts(w.path), True, self.cgroup_version)
        if why:
            return why
        parts = _parts(w.path)
        parent = self._resolved(w.fs, parts[:-1])
        if parent is None:
            return REFUSE_ESCAPE
        target = parent / parts[-1]
        why = self._where_refused(w, target)
        return f"{why} (through a symlink)" if why else target

    def _apply_rmdir(self, w: FileWrite) -> WriteResult:
        target = self._rmdir_target(w)
        if isinstance(target, str):
            return self._refuse(w, target)
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

    def _error(self, w: FileWrite, target: Path, old: str | None, e: Exception) -> WriteResult:
        self.stats.errors += 1
        if isinstance(e, OSError):
            reason, why = errno.errorcode.get(e.errno or 0, "OSError"), e.strerror or str(e)
        else:
            reason, why = type(e).__name__, str(e)
        self._metrics.errors.labels(w.plugin, reason).inc()
        log.error("write failed", file=str(target), old=old, new=str(w.value)[:300], plugin=w.plugin, error=why)
        return WriteResult(w, "error", old, error=f"{reason}: {why}")
