"""A faithful fake of the kernel's resctrl filesystem, as real files under a directory.

A generic kernel-interface fake for any plugin's or the agent's tests (the llc_isolation plugin's
tests and benchmark use it). It implements the kernel's file formats itself and imports no plugin,
so a plugin's own parsers are checked against it rather than shared with it.

The machine the tests run on has no resctrl, so :class:`FakeResctrl` lays out what the kernel shows
(``Documentation/arch/x86/resctrl.rst``): ``info/`` (``L3``, ``MB``, ``L3_MON``, ``last_cmd_status``),
the root group (``schemata``, ``tasks``, ``cpus``, ``cpus_list``, ``mode``, ``size``, ``mon_data``,
``mon_groups``), and control groups created by mkdir. Files are printed in the kernel's format:
right-aligned resource names, zero-padded hex masks, space-padded MB values.

Plain files cannot react to writes as the kernel does, so the kernel's side is emulated explicitly:

* :meth:`FakeResctrl.write` / :meth:`mkdir` apply one write with the kernel's semantics (a schemata
  write updates only the resources and domains it names and is validated; writing a pid to ``tasks``
  moves that task out of its old group; an unknown pid fails with ESRCH; mkdir beyond
  ``num_closids`` fails with ENOSPC);
* :meth:`FakeResctrl.settle` lets any other writer (the agent's executor) write plain files, then
  re-interprets every file that changed since the last settle as such a write and re-renders it.
  Call it after each write (see :meth:`apply`): the kernel reacts to every ``write(2)``, and two
  writes to one plain file between settles would leave only the last.
* ``rmdir(2)`` cannot be replayed that way: on a plain filesystem rmdir of a group directory, which
  holds its control files as real files here, fails with ``ENOTEMPTY`` before anything could react,
  whereas the kernel removes the group (its files are kernfs nodes, not directory entries), moves its
  tasks to the root group and frees its CLOSID. So the one ``rmdir(2)`` is routed to the fake instead:
  :meth:`FakeResctrl.rmdir_path` has the kernel's semantics for a path (a control group is removed;
  any other directory of the tree is ``EPERM``, as ``rdtgroup_rmdir`` answers; a missing one
  ``ENOENT``), and :class:`KernelExecutor` is the agent's executor whose only system-call seam
  (:meth:`koordfw.agent.executor.Executor.remove_dir`) calls it, settling after every write. Path
  checks, logging and counting stay the real executor's.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from koordfw.agent.executor import Executor

__all__ = ["AMD", "INTEL", "FakeResctrl", "KernelExecutor"]

#: the ``vendor_id`` values of ``/proc/cpuinfo`` the fake can emulate
INTEL = "GenuineIntel"
AMD = "AuthenticAMD"

_GROUP_FILES = ("schemata", "tasks")
_DOMAIN = re.compile(r"^\s*(\d+)\s*=\s*([0-9a-fA-F]+)\s*$")


class _SchemataError(ValueError):
    """A schemata write the kernel refuses to parse; the message goes to ``last_cmd_status``."""


def _parse_cbm(cbm: int | str) -> int:
    """``info/L3/cbm_mask`` text (or an int) as an int: a non-empty block of contiguous low bits."""
    if isinstance(cbm, str):
        try:
            value = int(cbm.strip().lower().removeprefix("0x"), 16)
        except ValueError:
            raise ValueError(f"cbm_mask {cbm!r} is not a hex number") from None
    else:
        value = int(cbm)
    if value <= 0 or ((value + 1) & value) != 0:
        raise ValueError(f"cbm_mask {value:x} is not a contiguous block of low bits (like 7ff)")
    return value


def _mba_unlimited(vendor: str) -> int:
    """The MB value the kernel gives a new group (no throttling)."""
    return 2048 if vendor == AMD else 100


def _parse_schemata(text: str, *, source: str) -> dict[str, dict[int, int]]:
    """A schemata write as the kernel parses it: ``{resource: {cache id: value}}``; cache resources
    are hex, ``MB`` decimal; blank lines and a trailing ``;`` are accepted."""
    out: dict[str, dict[int, int]] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not name:
            raise _SchemataError(f"{source}: line {lineno} {raw!r} is not '<resource>:<id>=<value>;...'")
        base = 10 if name.startswith("MB") else 16
        doms = out.setdefault(name, {})
        for part in rest.split(";"):
            if not part.strip():
                continue
            m = _DOMAIN.match(part)
            if not m:
                raise _SchemataError(f"{source}: line {lineno}: bad domain {part.strip()!r} (want <id>=<value>)")
            try:
                doms[int(m.group(1))] = int(m.group(2), base)
            except ValueError:
                raise _SchemataError(f"{source}: line {lineno}: {part.strip()!r} is not a "
                                     f"{'decimal' if base == 10 else 'hex'} value") from None
    return out


def _parse_tasks(text: str) -> set[int]:
    """The pids of a ``tasks`` file; junk lines are ignored."""
    return {int(t) for t in text.split() if t.isdigit()}


def _contiguous(mask: int) -> bool:
    low = mask >> ((mask & -mask).bit_length() - 1) if mask else 0
    return (low & (low + 1)) == 0


class FakeResctrl:
    """A resctrl tree under ``root`` plus a ``cpuinfo`` file naming ``vendor``.

    ``pids`` are the processes that exist (all start in the root group). Cache ids may be sparse
    (``(0, 2)``) like on AMD machines with CCX numbering.
    """

    def __init__(self, root: str | os.PathLike, *, cbm_mask: int | str = "7ff", min_cbm_bits: int = 1,
                 num_closids: int = 16, cache_ids: Iterable[int] = (0, 1), vendor: str = INTEL,
                 mba: bool = True, mba_num_closids: int | None = None, monitoring: bool = True,
                 pids: Iterable[int] = (1,), cpus: int = 4) -> None:
        self.root = Path(root)
        self.cbm = _parse_cbm(cbm_mask)
        self.min_cbm_bits = min_cbm_bits
        self.num_closids = num_closids
        self.cache_ids = tuple(sorted(cache_ids))
        self.vendor = vendor
        self.mba = mba
        self.mba_num_closids = mba_num_closids if mba_num_closids is not None else (
            num_closids if vendor == AMD else min(num_closids, 8))
        self.monitoring = monitoring
        self.cpus = cpus
        self.pids: set[int] = set(pids)
        # kernel-side truth: group → resource → cache id → value; group → tasks
        self._schemata: dict[str, dict[str, dict[int, int]]] = {}
        self._tasks: dict[str, set[int]] = {}
        self._snapshot: dict[Path, str] = {}
        self.last_cmd_status = "ok"
        self._build()

    # --------------------------------------------------------------------------------------------
    # Layout
    # --------------------------------------------------------------------------------------------

    @property
    def proc_root(self) -> Path:
        """A ``/proc`` look-alike next to the tree, holding ``cpuinfo``."""
        return self.root.parent / f"{self.root.name}-proc"

    @property
    def cpuinfo(self) -> Path:
        """A ``/proc/cpuinfo`` look-alike naming ``vendor`` (what support detection reads)."""
        return self.proc_root / "cpuinfo"

    @property
    def gran(self) -> int:
        return 1 if self.vendor == AMD else 10

    @property
    def min_bandwidth(self) -> int:
        return 0 if self.vendor == AMD else 10

    def _build(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        info = self.root / "info"
        width = self.cbm.bit_length()
        files = {
            "info/last_cmd_status": "ok\n",
            "info/L3/cbm_mask": f"{self.cbm:x}\n",
            "info/L3/min_cbm_bits": f"{self.min_cbm_bits}\n",
            "info/L3/num_closids": f"{self.num_closids}\n",
            "info/L3/shareable_bits": "0\n",
            "info/L3/bit_usage": ";".join(f"{i}={'X' * width}" for i in self.cache_ids) + "\n",
        }
        if self.mba:
            files.update({
                "info/MB/bandwidth_gran": f"{self.gran}\n",
                "info/MB/delay_linear": "1\n" if self.vendor == INTEL else "0\n",
                "info/MB/min_bandwidth": f"{self.min_bandwidth}\n",
                "info/MB/num_closids": f"{self.mba_num_closids}\n",
            })
        if self.monitoring:
            files.update({
                "info/L3_MON/max_threshold_occupancy": "1048576\n",
                "info/L3_MON/mon_features": "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
                "info/L3_MON/num_rmids": "128\n",
            })
        for rel, text in files.items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        info.mkdir(exist_ok=True)
        self.proc_root.mkdir(parents=True, exist_ok=True)
        self.cpuinfo.write_text("".join(
            f"processor\t: {i}\nvendor_id\t: {self.vendor}\nmodel name\t: fake\n\n" for i in range(self.cpus)))
        self._init_group("")
        self._tasks[""] = set(self.pids)
        self._render("")
        (self.root / "mon_groups").mkdir(exist_ok=True)
        self._snap_all()

    def _dir(self, group: str) -> Path:
        return self.root / group if group else self.root

    def _defaults(self) -> dict[str, dict[int, int]]:
        values = {"L3": {i: self.cbm for i in self.cache_ids}}
        if self.mba:
            values["MB"] = {i: _mba_unlimited(self.vendor) for i in self.cache_ids}
        return values

    def _init_group(self, group: str) -> None:
        d = self._dir(group)
        d.mkdir(exist_ok=True)
        self._schemata[group] = self._defaults()
        self._tasks[group] = set()
        mask = (1 << self.cpus) - 1
        (d / "cpus").write_text(f"{mask:x}\n" if not group else "0\n")
        (d / "cpus_list").write_text(f"0-{self.cpus - 1}\n" if not group else "\n")
        (d / "mode").write_text("shareable\n")
        (d / "size").write_text(self._size_text())
        if self.monitoring:
            for i in self.cache_ids:
                mon = d / "mon_data" / f"mon_L3_{i:02d}"
                mon.mkdir(parents=True, exist_ok=True)
                for event in ("llc_occupancy", "mbm_total_bytes", "mbm_local_bytes"):
                    (mon / event).write_text("0\n")
            if group:
                (d / "mon_groups").mkdir(exist_ok=True)

    def _size_text(self) -> str:
        # a fake 1.375 MiB per way, like an 11-way 15 MiB L3
        per_way = 1441792
        width = self.cbm.bit_length()
        return "    L3:" + ";".join(f"{i}={per_way * width}" for i in self.cache_ids) + "\n"

    def _render(self, group: str) -> None:
        d = self._dir(group)
        digits = (self.cbm.bit_length() + 3) // 4
        names = sorted(self._schemata[group], key=lambda r: (r != "L3", r))
        pad = max(len(n) for n in names)
        lines = []
        for name in names:
            vals = self._schemata[group][name]
            if name == "MB":
                # the kernel prints MB values with "%*u", width 3
                doms = ";".join(f"{i}={vals[i]:>3d}" for i in sorted(vals))
            else:
                doms = ";".join(f"{i}={vals[i]:0{digits}x}" for i in sorted(vals))
            lines.append(f"{name:>{pad}}:{doms}\n")
        texts = {"schemata": "".join(lines), "tasks": "".join(f"{p}\n" for p in sorted(self._tasks[group]))}
        for f, text in texts.items():
            (d / f).write_text(text)
            self._snapshot[d / f] = text  # what the kernel shows is, by definition, settled

    def _snap_all(self) -> None:
        self._snapshot = {}
        for group in self.groups():
            for f in _GROUP_FILES:
                p = self._dir(group) / f
                self._snapshot[p] = p.read_text()

    # --------------------------------------------------------------------------------------------
    # The kernel's semantics
    # --------------------------------------------------------------------------------------------

    def groups(self) -> list[str]:
        """Every control group, the root as ``""`` first."""
        return [""] + sorted(g for g in self._schemata if g)

    def _fail(self, code: int, status: str) -> OSError:
        self.last_cmd_status = status
        (self.root / "info" / "last_cmd_status").write_text(status + "\n")
        return OSError(code, os.strerror(code) + f" ({status})")

    def _ok(self) -> None:
        self.last_cmd_status = "ok"
        (self.root / "info" / "last_cmd_status").write_text("ok\n")

    def mkdir(self, group: str) -> None:
        """Create a control group; ENOSPC when every closid is in use, EEXIST if it exists."""
        if group in self._schemata:
            raise OSError(errno.EEXIST, f"group {group!r} exists")
        limit = min(self.num_closids, self.mba_num_closids) if self.mba else self.num_closids
        if len(self._schemata) >= limit:
            raise self._fail(errno.ENOSPC, "out of CLOSIDs")
        self._init_group(group)
        self._render(group)

    def rmdir(self, group: str) -> None:
        """Remove a control group; its tasks go back to the root group, as in the kernel."""
        if not group or group not in self._schemata:
            raise OSError(errno.ENOENT, f"no group {group!r}")
        self._tasks[""] |= self._tasks.pop(group)
        del self._schemata[group]
        shutil.rmtree(self._dir(group))
        self._render("")

    def rmdir_path(self, path: str | os.PathLike) -> None:
        """One ``rmdir(2)`` of ``path`` with the kernel's semantics inside this tree (see the module
        docstring); a path outside the tree is a plain ``os.rmdir``."""
        p = Path(os.path.abspath(path))
        root = Path(os.path.abspath(self.root))
        if p != root and root not in p.parents:
            os.rmdir(p)
            return
        if not os.path.lexists(p):
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), str(p))
        if p == root:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(p))  # the mount point
        group = p.name
        if p.parent != root or group not in self._schemata:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(p))
        self.rmdir(group)

    def write(self, group: str, filename: str, data: str) -> None:
        """One ``write(2)`` of ``data`` to ``group/filename`` with the kernel's semantics."""
        if group not in self._schemata:
            raise OSError(errno.ENOENT, f"no group {group!r}")
        if filename == "schemata":
            self._write_schemata(group, data)
        elif filename == "tasks":
            self._write_tasks(group, data)
        else:
            raise OSError(errno.EACCES, f"{filename} is not writable in this fake")
        self._render(group)

    def _write_schemata(self, group: str, data: str) -> None:
        try:
            parsed = _parse_schemata(data, source=f"{group or '/'}/schemata")
        except _SchemataError as e:
            raise self._fail(errno.EINVAL, str(e)) from None
        new = {r: dict(v) for r, v in self._schemata[group].items()}
        for resource, doms in parsed.items():
            if resource not in new:
                raise self._fail(errno.EINVAL, f"Unknown or unsupported resource name '{resource}'")
            for dom, value in doms.items():
                if dom not in new[resource]:
                    raise self._fail(errno.EINVAL, f"Unknown domain ID: {dom}")
                if resource == "MB":
                    top = 2048 if self.vendor == AMD else 100
                    if value < self.min_bandwidth or value > top:
                        raise self._fail(errno.EINVAL, f"MB value {value} out of range "
                                                        f"[{self.min_bandwidth},{top}]")
                    if self.vendor == INTEL and value % self.gran:
                        # the kernel rounds to the granularity on Intel
                        value = (value + self.gran - 1) // self.gran * self.gran
                else:
                    if value & ~self.cbm:
                        raise self._fail(errno.EINVAL, f"Mask out of range: {value:x}")
                    if not _contiguous(value):
                        raise self._fail(errno.EINVAL, f"Non-contiguous bit mask: {value:x}")
                    if bin(value).count("1") < self.min_cbm_bits:
                        raise self._fail(errno.EINVAL, f"Need at least {self.min_cbm_bits} bits in the mask")
                new[resource][dom] = value
        self._schemata[group] = new
        self._ok()

    def _write_tasks(self, group: str, data: str) -> None:
        # since Linux 6.2 a write may carry a comma/space separated list; older kernels take one pid
        for token in data.replace(",", " ").split():
            if not token.isdigit():
                raise self._fail(errno.EINVAL, f"Task list parsing error pid {token}")
            pid = int(token)
            if pid not in self.pids:
                raise self._fail(errno.ESRCH, f"No task {pid}")
            for g, tasks in self._tasks.items():
                if g != group and pid in tasks:
                    tasks.discard(pid)
                    self._render(g)
            self._tasks[group].add(pid)
        self._ok()

    def settle(self) -> list[tuple[str, str, str]]:
        """Interpret plain-file writes made since the last settle as kernel writes.

        A new directory becomes a mkdir (with what was written into it replayed on the new group); a
        changed ``schemata`` or ``tasks`` is replayed as one write of its new content. Returns the
        ``(group, file, error)`` of writes the kernel would have refused (the tree shows the kernel's
        state afterwards, as after a failed ``write(2)``).
        """
        errors: list[tuple[str, str, str]] = []
        for entry in sorted(os.listdir(self.root)):
            p = self.root / entry
            if p.is_dir() and entry not in ("info", "mon_groups", "mon_data") and entry not in self._schemata:
                written = {f: (p / f).read_text() for f in _GROUP_FILES if (p / f).is_file()}
                shutil.rmtree(p)
                try:
                    self.mkdir(entry)
                except OSError as e:
                    errors.append((entry, "", str(e)))
                    continue
                for f, text in written.items():
                    self._snapshot[p / f] = ""
                    (p / f).write_text(text)
        for group in self.groups():
            d = self._dir(group)
            if not d.is_dir():
                continue
            for f in _GROUP_FILES:
                p = d / f
                text = p.read_text() if p.is_file() else ""
                if text == self._snapshot.get(p):
                    continue
                try:
                    if f == "tasks":
                        # an executor may append or truncate; only pids not already here are moves
                        new = _parse_tasks(text) - self._tasks[group]
                        for pid in sorted(new):
                            try:
                                self.write(group, f, str(pid))
                            except OSError as e:
                                errors.append((group, f, str(e)))
                    else:
                        self.write(group, f, text)
                except OSError as e:
                    errors.append((group, f, str(e)))
                self._render(group)
        return errors

    def apply(self, executor: Any, writes: Iterable[Any]) -> tuple[list[Any], list[tuple[str, str, str]]]:
        """Run ``executor.apply_one`` for each write with the kernel reacting after each one.

        Returns the executor's results and the writes the kernel refused (see :meth:`settle`). Removals
        (``rmdir`` writes) need a :class:`KernelExecutor`; a plain executor meets ``ENOTEMPTY``.
        """
        results, errors = [], []
        for w in writes:
            results.append(executor.apply_one(w))
            errors += self.settle()
            if isinstance(executor, KernelExecutor) and executor.fake is self:
                # it settled already: what the kernel refused is in its list
                errors += executor.kernel_errors
                executor.kernel_errors = []
        return results, errors

    # --------------------------------------------------------------------------------------------
    # Test conveniences
    # --------------------------------------------------------------------------------------------

    def spawn(self, *pids: int, group: str = "") -> None:
        """New processes (children inherit their parent's group; here: ``group``)."""
        for pid in pids:
            self.pids.add(pid)
            self._tasks[group].add(pid)
        self._render(group)

    def exit(self, *pids: int) -> None:
        """Processes that ended: they vanish from every tasks file."""
        for pid in pids:
            self.pids.discard(pid)
            for g, tasks in self._tasks.items():
                if pid in tasks:
                    tasks.discard(pid)
                    self._render(g)

    def schemata(self, group: str = "") -> dict[str, dict[int, int]]:
        return {r: dict(v) for r, v in self._schemata[group].items()}

    def tasks(self, group: str = "") -> set[int]:
        return set(self._tasks[group])

    def set_mon(self, group: str, values: Mapping[int, Mapping[str, int]]) -> None:
        """Set monitoring counters: ``{cache id: {"llc_occupancy": bytes, ...}}``."""
        for i, events in values.items():
            for event, v in events.items():
                (self._dir(group) / "mon_data" / f"mon_L3_{i:02d}" / event).write_text(f"{v}\n")


class KernelExecutor(Executor):
    """The agent's executor with a :class:`FakeResctrl` as the kernel behind its resctrl root.

    Everything is the real executor's (path safety, compare, logging, metrics, ``dry_run``); the fake
    settles after every write, and the one ``rmdir(2)`` of a removal goes to
    :meth:`FakeResctrl.rmdir_path`. ``kernel_errors`` collects what the fake kernel refused.
    """

    def __init__(self, fake: FakeResctrl, roots: Mapping[str, str | os.PathLike], *, dry_run: bool = False) -> None:
        roots = dict(roots)
        roots.setdefault("resctrl", fake.root)
        super().__init__(roots, dry_run=dry_run)
        self.fake = fake
        self.kernel_errors: list[tuple[str, str, str]] = []

    def apply_one(self, w: Any) -> Any:
        result = super().apply_one(w)
        self.kernel_errors += self.fake.settle()
        return result

    def remove_dir(self, target: Path) -> None:
        self.fake.rmdir_path(target)
