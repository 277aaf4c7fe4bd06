"""Beyond Koordinator: BE suppression that watches the LS tail (``lsPressureFeedback``).

Koordinator's budget (``capacity × cpuSuppressThresholdPercent − non-BE usage − system``) is computed
from usage alone: it does not see LS requests waiting for a CPU. This feedback loop narrows the BE
budget from what LS actually suffers and is always at most Koordinator's budget (the threshold-based
one stays the upper bound).

Signals, read by ``collect`` every round:

* **CPU pressure**: PSI ``some avg10`` (percent of the last 10 s in which a runnable task waited for a
  CPU). On cgroup v2 the LS pods' own ``cpu.pressure`` (the largest among non-BE pods) where present,
  else the node's ``/proc/pressure/cpu`` (``psiPath``).
* **LS run-queue wait** (``lsSchedDelay``, for cgroup v1, which has no per-cgroup pressure): the LS pods'
  tasks (``tasks`` of the pod and container cgroups) and their ``/proc/<tid>/schedstat`` run delay; the
  sum of the deltas over the round's wall time, as a percent (capped at 100), replaces the node PSI, which
  also counts BE's own waiting. Cgroup v2 ``cpu.pressure`` is still preferred.
* **LS throttling**: the LS (non-BE) pods' ``cpu.stat`` deltas since the previous round,
  ``Δnr_throttled / Δnr_periods`` as a percent (``throttled_time`` / ``throttled_usec`` deltas are
  reported beside it).

AIMD with a dead band: the signal is *high* when pressure > ``targetPressurePercent`` or throttling >
``targetThrottledPercent``; *calm* when both are below their target − ``hysteresisPercent``; in between
the budget holds. High: ``budget × decreaseFactor`` (at least ``floorPercent`` of capacity). Calm for
``calmSeconds`` (the agent's clock) since the last high round: ``+ increasePercent`` of capacity per
round, up to Koordinator's budget and never beyond. Unreadable or malformed PSI: logged once per file and
content, and that round uses Koordinator's budget (the loop restarts from it). Without ``collect`` (``koordfw agent
plan``) there is no feedback: Koordinator's budget.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import structlog

from koordfw import NodeState, warn_once
from koordfw.inputs import camel
from koordfw.nodestate import read_cgroup_file

log = structlog.get_logger("koordfw.be_suppress")

#: the PSI file of the whole node
NODE_PSI = "/proc/pressure/cpu"
#: bytes read of a PSI or cpu.stat file (both are a few lines)
MAX_READ = 4096
#: LS tasks followed for ``lsSchedDelay`` (the rest are ignored)
MAX_TASKS = 4096


def _pct(inst: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= 100) \
            or not math.isfinite(value):
        raise ValueError(f"lsPressureFeedback.{camel(attribute.name)}: must be between 0 and 100, got {value!r}")


def _factor(inst: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < 1):
        raise ValueError(f"lsPressureFeedback.decreaseFactor: must be between 0 and 1 (exclusive), got {value!r}")


def _seconds(inst: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= 86400):
        raise ValueError(f"lsPressureFeedback.calmSeconds: must be between 0 and 86400, got {value!r}")


@attrs.frozen
class LSPressureFeedback:
    """``be_suppress`` arg ``lsPressureFeedback`` (off by default)."""

    enable: bool = False
    #: PSI ``some avg10`` (%) above which LS is under pressure
    target_pressure_percent: float = attrs.field(default=10.0, validator=_pct)
    #: LS pods' throttled periods (%) above which LS is under pressure
    target_throttled_percent: float = attrs.field(default=10.0, validator=_pct)
    #: the dead band: calm only below target − this (both signals)
    hysteresis_percent: float = attrs.field(default=5.0, validator=_pct)
    #: multiplicative decrease of the budget per high round
    decrease_factor: float = attrs.field(default=0.5, validator=_factor)
    #: additive increase per calm round, % of the node's CPU capacity
    increase_percent: float = attrs.field(default=5.0, validator=_pct)
    #: the budget's floor, % of the node's CPU capacity (Koordinator's budget wins when it is lower)
    floor_percent: float = attrs.field(default=5.0, validator=_pct)
    #: seconds without a high round before CPU is given back
    calm_seconds: float = attrs.field(default=3.0, validator=_seconds)
    #: the node PSI file (tests point it at a fake one)
    psi_path: str = NODE_PSI
    #: cgroup v1: the LS tasks' run delay (``/proc/<tid>/schedstat``) instead of the node PSI
    ls_sched_delay: bool = False
    #: where ``<tid>/schedstat`` is read
    proc_root: str = "/proc"


def parse_psi_some_avg10(text: str) -> float:
    """``some avg10`` of a PSI file (``some avg10=1.23 avg60=… total=…``); ``ValueError`` otherwise."""
    for line in text.splitlines()[:8]:
        kind, _, rest = line.partition(" ")
        if kind != "some":
            continue
        for field in rest.split():
            k, _, v = field.partition("=")
            if k == "avg10":
                x = float(v)
                if not math.isfinite(x) or not (0 <= x <= 100):
                    raise ValueError(f"avg10 out of range: {v!r}")
                return x
        raise ValueError("no avg10 in the 'some' line")
    raise ValueError("no 'some' line")


def parse_cpu_stat(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines()[:32]:
        k, _, v = line.partition(" ")
        v = v.strip()
        if v.isascii() and v.isdigit() and len(v) <= 20:
            out[k] = int(v)
    return out


def _read_all(path: Path, limit: int = 1 << 20) -> str | None:
    """A cgroup's task list (up to ``limit`` bytes)."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("ascii", "replace")
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=4096)
def _cpu_stat_path(cgroup_root: str, version: int, rel_dir: str) -> str:
    """``<root>/<the dir's cpu.stat>``, remembered: every LS pod's is read each round."""
    return f"{cgroup_root}/{NodeState(cgroup_version=version).cgroup_file('cpu', rel_dir, 'cpu.stat')}"


def _read(path: Path | str) -> str | None:
    # through the agent's kept descriptors (koordfw.read_cgroup_file): every LS pod's cpu.stat each round
    data = read_cgroup_file(path, MAX_READ)
    return None if data is None else data.decode("ascii", "replace")


@attrs.define
class Signal:
    """One round's LS signal: pressure (%), throttled (%), or ``None`` for each unknown."""

    pressure: float | None
    throttled: float | None
    throttled_seconds: float | None = None
    source: str = ""


@attrs.define
class FeedbackState:
    """What the live agent keeps between rounds (one per agent handle)."""

    budget_milli: float | None = None
    last_high: float | None = None
    #: LS pod cgroup dir → (nr_periods, nr_throttled, throttled time ns)
    stat: dict[str, tuple[int, int, int]] = attrs.field(factory=dict)
    last_now: float | None = None
    #: tid → run delay (ns) of the LS tasks last round (``lsSchedDelay``)
    delay: dict[int, int] = attrs.field(factory=dict)
    signal: Signal | None = None
    #: Koordinator's budget and the applied one this round (for metrics and ``qos_plan``)
    koordinator_milli: int | None = None
    applied_milli: int | None = None
    said: set[Any] = attrs.field(factory=set)

    def read_signal(self, ns: NodeState, cfg: LSPressureFeedback, cgroup_root: str | None, now: float) -> Signal:
        """Read PSI and the LS pods' cpu.stat (I/O; called from ``collect``)."""
        ls_pods = [p for p in ns.pods if not p.is_be and p.cgroup_dir]
        pressure: float | None = None
        source = ""
        if cgroup_root and ns.cgroup_version == 2:
            for p in ls_pods:
                path = Path(cgroup_root) / ns.cgroup_file("cpu", p.cgroup_dir, "cpu.pressure")
                text = _read(path)
                if text is None:
                    continue
                try:
                    v = parse_psi_some_avg10(text)
                except ValueError as e:
                    warn_once(log, self.said, (str(path), "malformed"), "ignoring malformed cgroup cpu.pressure",
                              path=str(path), error=str(e))
                    continue
                pressure = v if pressure is None else max(pressure, v)
                source = "cgroup"
        if pressure is None and cfg.ls_sched_delay and cgroup_root:
            pressure = self._sched_delay(ns, ls_pods, cfg, cgroup_root, now)
            if pressure is not None:
                source = "schedstat"
        if pressure is None:
            text = _read(Path(cfg.psi_path))
            if text is None:
                warn_once(log, self.said, (cfg.psi_path, "unreadable"), "cannot read CPU pressure; lsPressureFeedback "
                          "uses Koordinator's budget", path=cfg.psi_path)
            else:
                try:
                    pressure = parse_psi_some_avg10(text)
                    source = "node"
                except ValueError as e:
                    warn_once(log, self.said, (cfg.psi_path, "malformed"), "ignoring malformed PSI file; "
                              "lsPressureFeedback uses Koordinator's budget", path=cfg.psi_path, error=str(e))
        throttled = throttled_s = None
        if cgroup_root:
            cur: dict[str, tuple[int, int, int]] = {}
            for p in ls_pods:
                st = parse_cpu_stat(_read(_cpu_stat_path(cgroup_root, ns.cgroup_version, p.cgroup_dir)))
                if "nr_periods" not in st or "nr_throttled" not in st:
                    continue
                t_ns = st["throttled_time"] if "throttled_time" in st else st.get("throttled_usec", 0) * 1000
                cur[p.cgroup_dir] = (st["nr_periods"], st["nr_throttled"], t_ns)
            dp = dt = dns = 0
            for d, (a, b, c) in cur.items():
                prev = self.stat.get(d)
                if prev is None or a < prev[0] or b < prev[1] or c < prev[2]:  # new or recreated cgroup
                    continue
                dp, dt, dns = dp + a - prev[0], dt + b - prev[1], dns + c - prev[2]
            if self.stat:
                throttled = 100.0 * dt / dp if dp > 0 else 0.0
                if self.last_now is not None and now > self.last_now:
                    throttled_s = dns / 1e9 / (now - self.last_now)
            self.stat = cur
        self.last_now = now
        return Signal(pressure, throttled, throttled_s, source)

    def _sched_delay(self, ns: NodeState, ls_pods: list[Any], cfg: LSPressureFeedback, cgroup_root: str,
                     now: float) -> float | None:
        """100 × Σ Δrun delay of the LS tasks / the round's wall time, capped at 100; ``None`` on the first
        round (no previous sample)."""
        tasks_file = "tasks" if ns.cgroup_version == 1 else "cgroup.threads"
        tids: list[int] = []
        for p in ls_pods:
            for d in [p.cgroup_dir, *(c.cgroup_dir for c in p.containers if c.cgroup_dir)]:
                text = _read_all(Path(cgroup_root) / ns.cgroup_file("cpu", d, tasks_file))
                for line in (text or "").split():
                    if line.isascii() and line.isdigit() and len(line) <= 10 and len(tids) < MAX_TASKS:
                        tids.append(int(line))
        cur: dict[int, int] = {}
        for tid in tids:
            fields = (_read(Path(cfg.proc_root) / str(tid) / "schedstat") or "").split()
            if len(fields) >= 2 and fields[1].isascii() and fields[1].isdigit() and len(fields[1]) <= 20:
                cur[tid] = int(fields[1])
        prev, prev_now = self.delay, self.last_now
        self.delay = cur
        if prev_now is None or now <= prev_now or not prev:
            return None
        waited = sum(v - prev[t] for t, v in cur.items() if t in prev and v >= prev[t])
        return min(100.0, 100.0 * waited / 1e9 / (now - prev_now))

    def step(self, cfg: LSPressureFeedback, koordinator_milli: int | None, capacity_milli: int, sig: Signal,
             now: float) -> int | None:
        """One AIMD step; the budget (milli-CPU) ``qos_plan`` applies, at most ``koordinator_milli``."""
        self.signal = sig
        self.koordinator_milli = koordinator_milli
        if koordinator_milli is None:  # Koordinator skips this round: so does the feedback
            self.applied_milli = None
            return None
        upper = float(koordinator_milli)
        if sig.pressure is None:  # no PSI: Koordinator's budget, and the loop starts again from it
            self.budget_milli = None
            self.last_high = None
            self.applied_milli = koordinator_milli
            return koordinator_milli
        floor = capacity_milli * cfg.floor_percent / 100
        budget = upper if self.budget_milli is None else min(self.budget_milli, upper)
        throttled = sig.throttled or 0.0
        high = sig.pressure > cfg.target_pressure_percent or throttled > cfg.target_throttled_percent
        calm = (sig.pressure < cfg.target_pressure_percent - cfg.hysteresis_percent
                and throttled < cfg.target_throttled_percent - cfg.hysteresis_percent)
        if high:
            budget = max(budget * cfg.decrease_factor, floor)
            self.last_high = now
        elif calm and (self.last_high is None or now - self.last_high >= cfg.calm_seconds):
            budget += capacity_milli * cfg.increase_percent / 100
        budget = min(budget, upper)  # never above Koordinator's (even when that is below the floor)
        self.budget_milli = budget
        self.applied_milli = int(budget)
        return self.applied_milli

    def report(self) -> Mapping[str, Any]:
        sig = self.signal
        return {"lsPressurePercent": sig.pressure if sig else None,
                "lsThrottledPercent": sig.throttled if sig else None,
                "lsThrottledSecondsPerSecond": sig.throttled_seconds if sig else None,
                "pressureSource": sig.source if sig else "",
                "koordinatorBudgetMilli": self.koordinator_milli, "budgetMilli": self.applied_milli}
