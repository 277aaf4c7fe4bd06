"""Reading the two traces: the Bitbrains service VMs (LS) and the Alibaba batch hour (BE).

Every bad input is a :class:`TraceError` naming the file, the line (1 = the header) and the column.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np

from koordfw import ConfigError

LS_FILE = "vm_usage_5min.csv.gz"
LS_COLUMNS = ("vm", "t", "cores", "cap_mhz", "use_mhz", "mem_prov_kb", "mem_used_kb")
TASK_FILE = "batch_task.csv"
TASK_COLUMNS = ("arrival_s", "job_id", "task_name", "duration_s", "plan_cpu", "plan_mem", "inst_num")
USAGE_FILE = "batch_task_usage.csv"
USAGE_COLUMNS = ("job_id", "task_name", "instances_seen", "mean_duration_s", "mean_cpu_avg", "mean_mem_avg")
SLOT = 300
#: a value no trace column reaches (a guard against a corrupt number, not a limit of the model)
MAX_VALUE = 1e12


class TraceError(ConfigError):
    """A trace file that cannot be used: the message names the file, the line and the column."""


def _open(path: Path) -> io.TextIOBase:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise TraceError(f"{path}: not a readable gzip file: {e}") from None
    if b"\x00" in raw[:4096]:
        raise TraceError(f"{path}: line 1: not a CSV file (binary data)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise TraceError(f"{path}: line {line}: not a CSV file (not UTF-8 text)") from None
    return io.StringIO(text, newline="")


def read_table(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """(line number, the row's ``columns`` in that order, stripped) of a CSV with a header holding every
    column of ``columns``."""
    f = _open(path)
    reader = csv.reader(f)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{path}: line 1: empty file, expected a CSV header with {', '.join(columns)}") from None
    except csv.Error as e:
        raise TraceError(f"{path}: line 1: not a CSV file: {e}") from None
    header = [h.strip() for h in header]
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(f"{path}: line 1: missing column(s) {', '.join(missing)} (a CSV header with "
                         f"{', '.join(columns)} is expected)")
    idx = [header.index(c) for c in columns]
    width = len(header)
    line = 1
    try:
        for row in reader:
            line = reader.line_num
            if not row or not "".join(row).strip():
                continue
            if len(row) < width:
                raise TraceError(f"{path}: line {line}: {len(row)} fields, the header has {width}")
            yield line, [row[i].strip() for i in idx]
    except csv.Error as e:
        raise TraceError(f"{path}: line {line + 1}: not a CSV file: {e}") from None


def read_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV with a header holding every column of ``columns``."""
    for line, values in read_table(path, columns):
        yield line, dict(zip(columns, values, strict=True))


def number(path: Path, line: int, row: dict[str, str], col: str, *, integer: bool = False,
           minimum: float = 0.0) -> float:
    return value(path, line, row[col], col, integer=integer, minimum=minimum)


def value(path: Path, line: int, raw: str, col: str, *, integer: bool = False, minimum: float = 0.0) -> float:
    """``raw`` (column ``col`` of ``line``) as a finite number >= ``minimum`` (an integer if asked)."""
    try:
        v = float(raw)
    except ValueError:
        raise TraceError(f"{path}: line {line}: column {col}: not a number: {raw[:40]!r}") from None
    if minimum <= v <= MAX_VALUE and (not integer or v.is_integer()):
        return v  # the usual case (NaN and infinities fail the comparison and get their message below)
    if not math.isfinite(v) or abs(v) > MAX_VALUE:
        raise TraceError(f"{path}: line {line}: column {col}: not a finite number: {raw[:40]!r}")
    if v < minimum:
        what = "negative" if v < 0 and minimum == 0 else f"below {minimum:g}"
        raise TraceError(f"{path}: line {line}: column {col}: {what}: {raw[:40]!r}")
    raise TraceError(f"{path}: line {line}: column {col}: not an integer: {raw[:40]!r}")


@attrs.frozen
class LSTrace:
    """The service VMs: ``slots`` 5-minute steps from ``start``; per VM its request (the week's maximum
    provisioned cores and memory) and per slot its usage (cores, bytes; a slot without a sample repeats
    the VM's previous one, before its first sample it is 0)."""

    start: int
    vms: list[str]
    request_cores: np.ndarray
    request_memory: np.ndarray
    #: (slots, vms) cores used
    cpu: np.ndarray
    #: (slots, vms) bytes used
    memory: np.ndarray
    #: VMs whose provisioned cores changed during the slice (their request is the maximum)
    resized: int

    @property
    def slots(self) -> int:
        return int(self.cpu.shape[0])


def _fast_table(path: Path, columns: tuple[str, ...]) -> np.ndarray | None:
    """The file's ``columns`` as floats in one numpy pass, or None when anything is unusual (the row-by-row
    reader then finds and names the bad line and column)."""
    f = _open(path)
    text = f.getvalue() if isinstance(f, io.StringIO) else f.read()
    head, _, body = text.partition("\n")
    header = [h.strip() for h in head.strip().split(",")]
    if any(c not in header for c in columns) or not body.strip():
        return None
    try:
        arr = np.loadtxt(io.StringIO(body), delimiter=",", dtype=float, ndmin=2,
                         usecols=[header.index(c) for c in columns])
    except ValueError:
        return None
    if not np.isfinite(arr).all() or (arr < 0).any() or (np.abs(arr) > MAX_VALUE).any():
        return None
    return arr


def load_ls(directory: str | Path, *, days: float | None = None, vms: int | None = None) -> LSTrace:
    d = Path(directory)
    path = d / LS_FILE if d.is_dir() else d
    rows: list[tuple[int, int, float, float, float, float]] = []
    names: dict[str, int] = {}
    fast = _fast_table(path, LS_COLUMNS)
    if fast is not None and (fast[:, 1] % SLOT == 0).all() and (fast[:, 0] == np.round(fast[:, 0])).all():
        fast = fast[fast[:, 2] > 0]
        ids = fast[:, 0].astype(np.int64)
        uniq, first = np.unique(ids, return_index=True)
        order_ids = uniq[np.argsort(first, kind="stable")]
        if vms is not None:
            order_ids = order_ids[:vms]
        names = {str(int(v)): k for k, v in enumerate(order_ids.tolist())}
        keep = np.isin(ids, order_ids)
        fast, ids = fast[keep], ids[keep]
        # each row's VM index (its rank in first-appearance order): a look-up in the sorted ids
        by_id = np.argsort(order_ids, kind="stable")
        vm_idx = by_id[np.searchsorted(order_ids[by_id], ids)].astype(float)
        per_core = fast[:, 3] / fast[:, 2]
        used = np.where(per_core > 0, fast[:, 4] / np.where(per_core > 0, per_core, 1.0), 0.0)
        rows_arr = np.column_stack([fast[:, 1], vm_idx, fast[:, 2], used, fast[:, 5] * 1024.0, fast[:, 6] * 1024.0])
    else:
        for line, r in read_rows(path, LS_COLUMNS):
            t = number(path, line, r, "t", integer=True)
            cores = number(path, line, r, "cores")
            cap = number(path, line, r, "cap_mhz")
            use = number(path, line, r, "use_mhz")
            prov = number(path, line, r, "mem_prov_kb")
            used_kb = number(path, line, r, "mem_used_kb")
            if int(t) % SLOT:
                raise TraceError(f"{path}: line {line}: column t: {r['t']!r} is not a multiple of {SLOT} s")
            if cores <= 0:
                continue  # a powered-off VM
            vm = r["vm"]
            if vm not in names:
                if vms is not None and len(names) >= vms:
                    continue
                names[vm] = len(names)
            per = cap / cores
            rows.append((int(t), names[vm], cores, use / per if per > 0 else 0.0, prov * 1024.0, used_kb * 1024.0))
        rows_arr = np.array(rows, dtype=float) if rows else np.zeros((0, 6))
    if not len(rows_arr):
        raise TraceError(f"{path}: no usable rows (every VM powered off, or an empty file)")
    arr = rows_arr
    start = int(arr[:, 0].min())
    slot = ((arr[:, 0] - start) // SLOT).astype(np.int64)
    nslots = int(slot.max()) + 1
    if days is not None:
        nslots = min(nslots, max(1, int(round(days * 86400 / SLOT))))
    keep = slot < nslots
    arr, slot = arr[keep], slot[keep]
    vmi = arr[:, 1].astype(np.int64)
    n = len(names)
    cpu = np.full((nslots, n), np.nan)
    mem = np.full((nslots, n), np.nan)
    cpu[slot, vmi] = np.minimum(arr[:, 3], arr[:, 2])  # a VM cannot use more than its cores
    mem[slot, vmi] = np.minimum(arr[:, 5], arr[:, 4])
    for a in (cpu, mem):  # forward-fill gaps per VM, 0 before the first sample
        for j in range(n):
            col = a[:, j]
            ok = ~np.isnan(col)
            if not ok.any():
                col[:] = 0.0
                continue
            idx = np.where(ok, np.arange(nslots), 0)
            np.maximum.accumulate(idx, out=idx)
            filled = col[idx]
            filled[: int(np.argmax(ok))] = 0.0
            a[:, j] = filled
    req_cores = np.zeros(n)
    req_mem = np.zeros(n)
    np.maximum.at(req_cores, vmi, arr[:, 2])
    np.maximum.at(req_mem, vmi, arr[:, 4])
    # a VM is resized when a row's cores differ from its first row's
    seen, first_row = np.unique(vmi, return_index=True)
    first_cores = np.zeros(n)
    first_cores[seen] = arr[first_row, 2]
    resized = int(np.unique(vmi[arr[:, 2] != first_cores[vmi]]).size)
    order = sorted(names, key=lambda k: names[k])
    return LSTrace(start, order, req_cores, req_mem, cpu, mem, resized)


#: Alibaba's plan_mem / mean_mem_avg are percent of one machine's memory; we take the v2018 machine as
#: 96 cores and 512 GiB (its machine_meta normalises memory to 100)
ALIBABA_MACHINE_MEMORY = 512 * 2**30
_DAG = re.compile(r"^([A-Za-z]+)(\d+)((?:_\d+)*)$")


@attrs.frozen
class Task:
    """One Alibaba task: ``inst`` instances of ``duration`` s (their mean) at ``cpu`` cores each (measured
    mean), planned ``plan_cpu`` cores and ``plan_mem`` bytes, using ``mem`` bytes; ``parents`` are task names
    of the same job (the DAG); ``parallelism`` how many ran at once in the trace (inst × duration / task
    wall time)."""

    job: str
    name: str
    arrival: float
    inst: int
    duration: float
    cpu: float
    mem: float
    plan_cpu: float
    plan_mem: float
    parents: tuple[str, ...]
    parallelism: int
    kind: str


def dag_parents(name: str) -> tuple[str, tuple[str, ...]]:
    """(kind, parent task names) from an Alibaba task name: ``M3_1_2`` is task 3 (a map) after 1 and 2;
    a name that is not of that form (``task_xyz``, ``MergeTask``) has no parents."""
    m = _DAG.match(name)
    if not m:
        return "other", ()
    kind = m.group(1)
    deps = tuple(p for p in m.group(3).split("_") if p)
    return kind, deps


def load_batch(directory: str | Path) -> list[Task]:
    d = Path(directory)
    tpath, upath = d / TASK_FILE, d / USAGE_FILE
    usage: dict[tuple[str, str], tuple[float, float, float]] = {}
    for line, (job, name, _seen, md_s, mc_s, mm_s) in read_table(upath, USAGE_COLUMNS):
        usage[(job, name)] = (value(upath, line, md_s, "mean_duration_s"), value(upath, line, mc_s, "mean_cpu_avg"),
                              value(upath, line, mm_s, "mean_mem_avg"))
    rows: list[tuple[str, str, float, int, float, float, float, float, float, tuple[str, ...], int, str]] = []
    by_job: dict[str, dict[str, str]] = {}
    cols = TASK_COLUMNS
    for line, (arr_s, job, name, dur_s, pcpu_s, pmem_s, inst_s) in read_table(tpath, cols):
        arrival = value(tpath, line, arr_s, cols[0])
        duration = value(tpath, line, dur_s, cols[3])
        plan_cpu = value(tpath, line, pcpu_s, cols[4])
        plan_mem = value(tpath, line, pmem_s, cols[5])
        inst = int(value(tpath, line, inst_s, cols[6], integer=True))
        if not job or not name:
            raise TraceError(f"{tpath}: line {line}: column {'job_id' if not job else 'task_name'}: empty")
        if inst == 0 or plan_cpu == 0:
            continue
        md, mc, mm = usage.get((job, name), (duration, plan_cpu, plan_mem))
        md = md if md > 0 else max(duration, 1.0)
        kind, deps = dag_parents(name)
        par = max(1, min(inst, int(math.ceil(inst * md / max(duration, 1.0)))))
        ids = by_job.setdefault(job, {})
        m = _DAG.match(name)
        if m:
            ids[m.group(2)] = name
        rows.append((job, name, arrival, inst, md, mc / 100.0, mm / 100.0 * ALIBABA_MACHINE_MEMORY,
                     plan_cpu / 100.0, max(plan_mem, 0.01) / 100.0 * ALIBABA_MACHINE_MEMORY, deps, par, kind))
    if not rows:
        raise TraceError(f"{tpath}: no tasks with instances")
    # parents by task number → names; a parent the job lacks is dropped (the trace holds partial jobs)
    out = []
    for job, name, arrival, inst, md, cpu, mem, pcpu, pmem, deps, par, kind in rows:
        ids = by_job[job]
        parents = tuple(ids[p] for p in deps if p in ids and ids[p] != name)
        out.append(Task(job, name, arrival, inst, md, cpu, mem, pcpu, pmem, parents, par, kind))
    return out
