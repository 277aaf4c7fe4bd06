"""``koordfw replay colocation``: a week of real service usage plus a real batch queue, with and without
colocation (see :mod:`koordfw_colocation_replay.model` and ``docs/replay.md``)."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from koordfw import ConfigError, InputError, format_quantity, parse_quantity
from koordfw.embed import Commands
from koordfw.inputs import load_yaml

from .model import (
    Replay,
    Result,
    batch_fraction,
    default_nodes,
    koordinator_profile,
    reclaim_percent,
    recommended_profile,
    risk_profile,
)
from .traces import TraceError, load_batch, load_ls

MODES = ("kubernetes", "koordfw")


def register(sub: Commands) -> None:
    rsub = sub.group("replay", help="replay published traces through the scheduler", metavar="TRACE")
    p = rsub.add("colocation", help="a week of service VMs plus the Alibaba batch queue, with and without colocation",
                 description="Replay the Bitbrains service VMs (LS) and the tiled Alibaba batch hour (BE) on one "
                             "cluster through the real scheduler, agent plans and manager node resources on a "
                             "virtual clock: kubernetes mode (requests only) against koordfw mode (colocation).")
    p.add_argument("--ls-trace", required=True, metavar="DIR", help="bitbrains-rnd-2013-07 (vm_usage_5min.csv.gz)")
    p.add_argument("--batch-trace", required=True, metavar="DIR", help="alibaba-batch-v2018 (batch_task*.csv)")
    p.add_argument("--nodes", type=int, metavar="N", help="nodes (default: the LS requests at ~95%% allocation)")
    p.add_argument("--node-cpu", default="32", metavar="C", help="cores per node (default 32)")
    p.add_argument("--node-memory", default="128Gi", metavar="M", help="memory per node (default 128Gi)")
    p.add_argument("--days", type=float, metavar="D", help="replay length in days (default: the whole LS trace)")
    p.add_argument("--vms", type=int, metavar="K", help="only the first K VMs of the LS trace")
    p.add_argument("--batch-load", type=float, default=1.0, metavar="F",
                   help="batch work as a multiple of what the batch resources could hold at the tasks' "
                        "measured usage (default 1.0)")
    p.add_argument("--mid-share", type=float, default=0.0, metavar="F",
                   help="the share of the batch jobs run as Mid workloads (koord-mid, QoS LS, on the mid-cpu / "
                        "mid-memory the manager sizes from the agents' predicted Prod peak), drawn per job "
                        "(default 0: none)")
    p.add_argument("--mode", choices=(*MODES, "both"), default="both",
                   help="replay without colocation (kubernetes), with it (koordfw), or both (default)")
    p.add_argument("--profile", metavar="F",
                   help="koordfw mode's profile YAML, or 'recommended' (default: profiling on, BECPUEvict, reclaim "
                        "65 %%, suppress 70 %%), 'koordinator' (Koordinator's defaults: 60 %%, 65 %%, no profiling) or "
                        "'risk:ε' (the risk-budget mode: batch and Mid sized so that LS + BE usage exceeds a node's "
                        "capacity at most ε of the time, e.g. risk:0.5%%)")
    p.add_argument("--seed", type=int, default=42, help="seed of the trace sampling and tie-breaking (default 42)")
    p.add_argument("--output", "-o", choices=("table", "json"), default="table", help="table (default) or json")
    p.add_argument("--hours", action="store_true", help="print the per-hour table too (the JSON always has it)")
    p.add_argument("--plot", metavar="FILE.png", help="utilisation, batch throughput and safety over time")
    p.set_defaults(func=run)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib (pip install matplotlib, or make install)") from None
    return plt


def load_profile_arg(value: str | None) -> dict[str, Any]:
    if value in (None, "", "recommended"):
        return recommended_profile()
    if value == "koordinator":
        return koordinator_profile()
    if value.startswith("risk:"):
        raw = value[len("risk:"):]
        try:
            eps = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
        except ValueError:
            raise ConfigError(f"--profile: {value}: expected risk:ε, ε a fraction or a percentage (risk:0.005, "
                              f"risk:0.5%)") from None
        if not 0 < eps < 1:
            raise ConfigError(f"--profile: {value}: ε must be in (0, 1), got {eps!r}")
        return risk_profile(eps)
    try:
        with open(value, "rb") as f:
            data = load_yaml(f.read())
    except OSError as e:
        raise ConfigError(f"--profile: {value}: cannot read: {e.strerror or e}") from None
    except InputError as e:
        raise ConfigError(f"--profile: {value}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--profile: {value}: expected a mapping")
    return data


def _quantity(value: str, flag: str, memory: bool) -> float:
    try:
        v = float(parse_quantity(value))
    except Exception:
        raise ConfigError(f"{flag}: not a quantity: {value[:40]!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{flag}: must be > 0, got {value!r}")
    return v


def replay(args: argparse.Namespace, progress_for: Any = None) -> dict[str, Any]:
    """Run the modes asked for; the JSON document of the run."""
    node_cpu = _quantity(args.node_cpu, "--node-cpu", False)
    node_mem = int(_quantity(args.node_memory, "--node-memory", True))
    if args.days is not None and not (args.days > 0 and math.isfinite(args.days)):
        raise ConfigError(f"--days: must be > 0, got {args.days!r}")
    profile = load_profile_arg(args.profile)
    if not (0 <= args.mid_share <= 1):
        raise ConfigError(f"--mid-share: must be in [0, 1], got {args.mid_share!r}")
    t0 = time.perf_counter()
    ls = load_ls(args.ls_trace, days=args.days, vms=args.vms)
    tasks = load_batch(args.batch_trace)
    nodes = args.nodes if args.nodes is not None else default_nodes(ls, node_cpu, node_mem)
    if nodes < 1:
        raise ConfigError(f"--nodes: must be >= 1, got {nodes}")
    frac, holdable = batch_fraction(ls, tasks, nodes, node_cpu, args.batch_load, reclaim_percent(profile))
    load_s = time.perf_counter() - t0
    import anyio

    modes = MODES if args.mode == "both" else (args.mode,)
    out: dict[str, Any] = {"nodes": nodes, "node_cpu": node_cpu, "node_memory": node_mem, "slots": ls.slots,
                           "vms": len(ls.vms), "vms_resized": ls.resized, "batch_load": args.batch_load,
                           "batch_job_fraction": round(frac, 6), "batch_holdable_cores": round(holdable, 2),
                           "seed": args.seed, "load_seconds": round(load_s, 2),
                           "profile": args.profile or "recommended", **({"mid_share": args.mid_share}
                                                                          if args.mid_share else {}),
                           "ls_trace": os.path.basename(os.path.normpath(args.ls_trace)),
                           "batch_trace": os.path.basename(os.path.normpath(args.batch_trace)), "modes": {}}
    def one(mode: str, progress: Any = None) -> Result:
        r = Replay(ls, tasks, mode=mode, nodes=nodes, node_cpu=node_cpu, node_memory=node_mem, slots=ls.slots,
                   batch_fraction=frac, seed=args.seed, profile=profile, progress=progress, mid_share=args.mid_share)
        return anyio.run(r.run)

    results: dict[str, Result] = {}
    # with both modes and a second core, the (cheap) kubernetes mode runs in a forked process meanwhile:
    # the same deterministic replay, its progress and then its result sent back over a pipe
    child = reader = None
    if len(modes) == 2 and (os.cpu_count() or 1) >= 2 and "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")
        answer, send = ctx.Pipe(duplex=False)
        # the forked child has this process's memory: ``one`` is not pickled, only the result sent back
        child = ctx.Process(target=_forked, args=(one, "kubernetes", send), daemon=True)
        child.start()
        send.close()
        reader = _Reader(answer, progress_for("kubernetes") if progress_for else None)
        reader.start()
    try:
        for mode in modes:
            if child is not None and mode == "kubernetes":
                continue
            results[mode] = one(mode, progress_for(mode) if progress_for else None)
        if reader is not None:
            reader.join()
            results["kubernetes"] = reader.result()
    finally:
        if child is not None and reader is not None:
            if child.is_alive() and "kubernetes" not in results:
                child.terminate()  # this run failed: the child's result would never be read
            child.join()
            reader.join()
            answer.close()
    for mode in modes:
        res = results[mode]
        out["modes"][mode] = {"summary": res.summary, "hours": res.hours, "series": res.series}
    out["wall_seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _forked(one: Callable[..., Result], mode: str, send: Connection) -> None:
    """The forked child: ``one(mode)``, its progress sent as it goes, then its result (or the exception it
    raised)."""
    try:
        result = one(mode, lambda done, total: send.send(("progress", done, total)))
        send.send(("result", True, result))
    except BaseException as e:  # noqa: BLE001 - re-raised in the parent
        send.send(("result", False, e))
    finally:
        send.close()


class _Reader(threading.Thread):
    """Reads the forked child's pipe in the parent: progress messages go to ``progress`` (the bar or the log
    lines of that mode) while the parent replays the other mode; the result is kept for :meth:`result`."""

    def __init__(self, answer: Connection, progress: Callable[[int, int], None] | None) -> None:
        super().__init__(name="replay-kubernetes-mode", daemon=True)
        self.answer, self.progress = answer, progress
        self._outcome: tuple[bool, Any] | None = None

    def run(self) -> None:
        try:
            while True:
                msg = self.answer.recv()
                if msg[0] == "progress":
                    if self.progress is not None:
                        self.progress(msg[1], msg[2])
                    continue
                self._outcome = (msg[1], msg[2])
                return
        except (EOFError, OSError):
            return

    def result(self) -> Result:
        """The child's result, or its exception raised here."""
        if self._outcome is None:
            raise RuntimeError("the forked kubernetes-mode replay ended without a result")
        ok, value = self._outcome
        if not ok:
            raise value
        return value


class LogProgress:
    """Progress as log lines on stderr (when it is not a terminal): one per mode every ``step`` (10 %) of
    the slots or every ``interval`` seconds, whichever comes first, and at the end."""

    def __init__(self, stream: Any = None, *, step: float = 0.1, interval: float = 30.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.step, self.interval = step, interval
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def __call__(self, mode: str) -> Callable[[int, int], None]:
        last = {"fraction": 0.0, "at": time.monotonic()}

        def report(done: int, total: int) -> None:
            now = time.monotonic()
            fraction = done / total if total else 1.0
            if done < total and fraction - last["fraction"] < self.step and now - last["at"] < self.interval:
                return
            last.update(fraction=fraction, at=now)
            with self.lock:
                print(f"koordfw replay: {mode} mode {100 * fraction:.0f}% ({done}/{total} slots of 5 min, "
                      f"{now - self.t0:.0f} s)", file=self.stream, flush=True)

        return report


def run(args: argparse.Namespace) -> int:
    if args.plot:
        _pyplot()  # a missing matplotlib is reported before the run, not after it
    tty = sys.stderr.isatty()
    try:
        if tty:
            from rich.console import Console
            from rich.progress import Progress

            with Progress(transient=True, console=Console(stderr=True)) as bar:
                tasks: dict[str, Any] = {}

                def progress_for(mode: str) -> Any:
                    tasks[mode] = bar.add_task(f"{mode} mode", total=1)
                    return lambda d, t: bar.update(tasks[mode], completed=d, total=t)

                doc = replay(args, progress_for)
        else:
            doc = replay(args, LogProgress())
    except TraceError:
        raise
    if args.plot:
        plot(doc, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.output == "json":
        slim = {k: v for k, v in doc.items() if k != "modes"}
        slim["modes"] = {m: {"summary": d["summary"], "hours": d["hours"]} for m, d in doc["modes"].items()}
        json.dump(slim, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print_tables(doc, hours=args.hours)
    return 0


ROWS = (("cpu_utilisation_mean", "CPU utilisation, mean", "pct"), ("cpu_utilisation_p95", "CPU utilisation, p95", "pct"),
        ("allocation_mean", "allocation (requests / allocatable)", "pct"),
        ("batch_instances_completed", "batch instances completed", "int"),
        ("batch_wait_p50_s", "batch queueing delay p50", "dur"), ("batch_wait_p99_s", "batch queueing delay p99", "dur"),
        ("batch_cpu_hours", "batch CPU-hours delivered", "f1"), ("be_throttled_cpu_hours", "BE throttled CPU-hours", "f1"),
        ("evictions", "evictions", "int"), ("instances_retried", "instances retried", "int"),
        ("ls_starved_slots", "LS starved node-slots", "int"),
        ("node_over_capacity_slot_fraction", "node-slots LS + BE demand > capacity", "pct2"),
        ("node_slots_above_suppress_threshold_fraction", "node-slots above suppress threshold", "pct2"),
        ("executor_pods_created", "executor pods created", "int"), ("wall_seconds", "wall time", "dur"))


def _fmt(v: Any, kind: str) -> str:
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "pct2":
        return f"{100 * v:.2f}%"
    if kind == "int":
        return f"{int(v):,}"
    if kind == "f1":
        return f"{v:,.1f}"
    if kind == "dur":
        return f"{v:.1f} s" if v < 120 else (f"{v / 60:.1f} min" if v < 7200 else f"{v / 3600:.1f} h")
    return str(v)


def print_tables(doc: dict[str, Any], *, hours: bool = False) -> None:
    modes = list(doc["modes"])
    print(f"cluster: {doc['nodes']} nodes of {doc['node_cpu']:g} cores, "
          f"{format_quantity('memory', int(doc['node_memory']))} (the LS requests at ~95% allocation unless "
          f"--nodes); {doc['vms']} LS pods, one per VM, requests = the week's maximum provisioned "
          f"({doc['vms_resized']} VMs resized); {doc['slots']} slots of 5 min")
    unplaced = max(d["summary"]["ls_pods_unplaced"] for d in doc["modes"].values())
    if unplaced:
        print(f"warning: {unplaced} LS pod(s) fit on no node (a VM larger than a node): left out of the replay")
    print(f"batch: the Alibaba hour tiled, {100 * doc['batch_job_fraction']:.2f}% of its jobs each hour (seed "
          f"{doc['seed']}): --batch-load {doc['batch_load']:g} × {doc['batch_holdable_cores']:.0f} cores of batch "
          f"resources at measured usage; executor pods (up to 8 planned cores, one task shape each) run the "
          f"instances back to back")
    w = 38
    print(f"{'':<{w}}" + "".join(f"{m:>16}" for m in modes))
    for key, label, kind in ROWS:
        print(f"{label:<{w}}" + "".join(f"{_fmt(doc['modes'][m]['summary'][key], kind):>16}" for m in modes))
    if hours:
        for m in modes:
            print(f"\n{m}: per hour")
            print(f"{'hour':>4} {'util':>6} {'p95':>6} {'alloc':>6} {'done':>9} {'wait50':>8} {'wait99':>8} "
                  f"{'cpu-h':>8} {'thr-h':>7} {'evict':>5} {'over':>4} {'starv':>5} {'>thr':>4}")
            for h in doc["modes"][m]["hours"]:
                print(f"{h['hour']:>4} {100 * h['cpu_utilisation_mean']:>5.1f}% {100 * h['cpu_utilisation_p95']:>5.1f}% "
                      f"{100 * h['allocation']:>5.1f}% {h['batch_instances_completed']:>9,} "
                      f"{h['batch_wait_p50_s']:>8.0f} {h['batch_wait_p99_s']:>8.0f} {h['batch_cpu_hours']:>8.1f} "
                      f"{h['be_throttled_cpu_hours']:>7.1f} {h['evictions']:>5} {h['node_over_capacity_slots']:>4} "
                      f"{h['ls_starved_slots']:>5} {h['node_slots_above_suppress_threshold']:>4}")
    print(f"\nwall time {doc['wall_seconds']:.1f} s (traces read in {doc['load_seconds']:.1f} s)")


#: one colour per mode, the same in every panel
MODE_COLOURS = {"kubernetes": "tab:blue", "koordfw": "tab:orange"}


def plot_title(doc: dict[str, Any]) -> str:
    """Cluster size, profile and traces, for the figure's title."""
    memory = format_quantity("memory", int(doc["node_memory"]))
    return (f"{doc['nodes']} nodes × {doc['node_cpu']:g} cores, {memory}; {doc['vms']} LS pods; "
            f"koordfw profile: {doc.get('profile', 'recommended')}\n"
            f"LS: {doc.get('ls_trace', 'bitbrains')} (5-min slots: {doc['slots']}); "
            f"batch: {doc.get('batch_trace', 'alibaba')} × {doc['batch_load']:g}, seed {doc['seed']}")


def plot(doc: dict[str, Any], path: str) -> None:
    """Three panels sharing the day axis, one colour per mode: cluster CPU utilisation, batch instances
    completed per hour, and the node-slots (nodes in a 5-min slot) where LS + BE demand exceeded capacity
    or usage was above the suppress threshold. Means are in the legends; a series that is 0 throughout is
    drawn with markers and says so, so that it is not hidden under the axis."""
    plt = _pyplot()
    import numpy as np

    fig, axes = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True)
    for i, (m, d) in enumerate(doc["modes"].items()):
        s = d["series"]
        colour = MODE_COLOURS.get(m, f"C{i + 2}")
        util = 100 * np.asarray(s["utilisation"], dtype=float)
        x = np.arange(len(util)) * 300 / 86400
        axes[0].plot(x, util, color=colour, lw=0.8, label=f"{m}: mean {util.mean():.1f} %")
        axes[0].axhline(util.mean(), color=colour, lw=0.6, ls=":")
        done = np.asarray(s["completed_per_hour"], dtype=float)
        xh = np.arange(len(done)) / 24
        axes[1].plot(xh, done, color=colour, lw=0.9, marker="." if len(done) <= 48 else None,
                     label=f"{m}: mean {done.mean():,.0f} / hour")
        axes[1].axhline(done.mean(), color=colour, lw=0.6, ls=":")
        for key, what, style, marker in (("over_capacity_slots", "LS + BE demand > capacity", "-", "o"),
                                         ("above_threshold_slots", "above suppress threshold", "--", "s")):
            y = np.asarray(s[key], dtype=float)
            total = int(y.sum())
            nonzero = np.flatnonzero(y)
            # 0 throughout: markers along the axis; a few non-zero slots: markers on them (a spike one slot
            # wide is thinner than a pixel on a week's axis)
            if not len(nonzero):
                marker_at: Any = max(1, len(y) // 24)
            elif len(nonzero) <= 60:
                marker_at = nonzero.tolist()
            else:
                marker_at = None
            axes[2].plot(x, y, color=colour, lw=0.8, ls=style, marker=marker if marker_at is not None else None,
                         markevery=marker_at, ms=4, mfc="none", clip_on=False, zorder=4 - i,
                         label=f"{m}: {what}: " + ("0 throughout" if not len(nonzero) else
                                                   f"{total:,} node-slot{'s' if total != 1 else ''}, "
                                                   f"mean {y.mean():.2f} per slot"))
    axes[0].set_ylabel("cluster CPU utilisation (%)")
    axes[0].set_title("CPU utilisation (dotted: mean)", fontsize=9, loc="left")
    axes[1].set_ylabel("batch instances / hour")
    axes[1].set_title("batch throughput: instances completed per hour (dotted: mean)", fontsize=9, loc="left")
    axes[2].set_ylabel("node-slots")
    axes[2].set_title("safety: node-slots (a node in a 5-min slot) in trouble; solid: LS + BE demand > capacity, "
                      "dashed: above the BE suppress threshold", fontsize=9, loc="left")
    axes[2].set_xlabel("day")
    axes[2].set_ylim(bottom=-0.05 * max(1.0, axes[2].get_ylim()[1]))
    for a in axes:
        a.legend(fontsize=7, loc="upper right")
        a.grid(alpha=0.3)
    fig.suptitle(plot_title(doc), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
