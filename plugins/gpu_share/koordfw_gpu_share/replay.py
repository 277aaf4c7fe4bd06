"""``koordfw replay openb``: the FGD paper's experiment on the Alibaba GPU trace, through the real
scheduler (koordfw's kernel with the gpu_share plugin, node_resources_fit for CPU/memory fit).

Protocol (the paper simulator's): pods sorted by name, shuffled with the seed; clones drawn uniformly
with replacement from the original list appended until the next would exceed 1.3 × GPU capacity (the
check adds the drawn pod's per-GPU milli, a quirk of the original); nodes permuted; every pod tried once,
in order; no departures; after each pod the allocated and fragmented GPU milli are recorded against the
arrived GPU milli, then binned by integer arrived % (empty bins take the mean of their neighbours).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from koordfw import ConfigError
from koordfw.embed import Commands, EmbeddedEngine
from koordfw.extension import RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO
from koordfw.inputs import make_node, make_pod

from . import frag
from .plugin import POLICIES, GpuShare
from .requests import GPU_MODEL_LABEL, NVIDIA_GPU

TUNE_RATIO = 1.3
PUBLISHED = {  # unallocated GPU % at arrived = 100 %, median of 10 seeds (FGD paper, Fig. 9-14)
    "default": {"random": 13.75, "dotprod": 9.45, "clustering": 8.42, "packing": 8.20, "bestfit": 7.09, "fgd": 4.77},
    "cpu050": {"random": 11.02, "dotprod": 6.94, "clustering": 6.52, "packing": 6.46, "bestfit": 6.42, "fgd": 5.00},
    "cpu100": {"random": 12.56, "dotprod": 8.22, "clustering": 7.46, "packing": 7.45, "bestfit": 6.72, "fgd": 4.79},
    "cpu200": {"random": 17.00, "dotprod": 12.24, "clustering": 10.24, "packing": 9.87, "bestfit": 7.86, "fgd": 5.18},
    "cpu250": {"random": 20.06, "dotprod": 16.22, "clustering": 12.48, "packing": 11.92, "bestfit": 8.71, "fgd": 6.80},
    "gpushare40": {"random": 15.04, "dotprod": 10.66, "clustering": 10.18, "packing": 10.20, "bestfit": 8.53, "fgd": 6.04},
    "gpushare60": {"random": 17.21, "dotprod": 13.17, "clustering": 13.03, "packing": 12.75, "bestfit": 10.91, "fgd": 8.71},
    "gpushare80": {"random": 19.36, "dotprod": 15.89, "clustering": 15.46, "packing": 15.28, "bestfit": 13.27, "fgd": 10.91},
    "gpushare100": {"random": 21.07, "dotprod": 17.93, "clustering": 17.70, "packing": 17.78, "bestfit": 15.40, "fgd": 13.36},
}


def read_csv(path: str | Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    p = Path(path)
    try:
        with p.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    if rows:
        missing = [c for c in required if c not in rows[0]]
        if missing:
            raise ConfigError(f"{p}: missing column(s) {', '.join(missing)}")
    return rows


#: the largest number a trace column may hold (milli-cores, MiB, GPUs): far above any machine
MAX_TRACE_VALUE = 2**40


def _int(row: dict, col: str, where: str) -> int:
    raw = row.get(col)
    try:
        v = int(raw or 0)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: column {col}: not an integer: {str(raw)[:40]!r}") from None
    if not 0 <= v <= MAX_TRACE_VALUE:
        raise ConfigError(f"{where}: column {col}: {str(raw)[:40]!r} outside 0..{MAX_TRACE_VALUE}")
    return v


def load_trace(nodes_csv: str | Path, pods_csv: str | Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    nodes = read_csv(nodes_csv, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    pods = read_csv(pods_csv, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    nrows = [(r["sn"], _int(r, "cpu_milli", f"{nodes_csv}: node {r['sn']}"),
              _int(r, "memory_mib", f"{nodes_csv}: node {r['sn']}"), _int(r, "gpu", f"{nodes_csv}: node {r['sn']}"),
              r.get("model", "") or "") for r in nodes]
    prows: list[tuple[Any, ...]] = [(r["name"], *(_int(r, c, f"{pods_csv}: pod {r['name']}")
                           for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")), r.get("gpu_spec", "") or "")
             for r in pods]
    prows.sort(key=lambda r: r[0])
    return nrows, prows


def tune(prows: list, rng: np.random.Generator, capacity_milli: int, ratio: float = TUNE_RATIO) -> list:
    """Shuffle, then inflate (or shrink) to ``ratio`` × GPU capacity, as ``TunePodsByNodeTotalResource``."""
    order = list(prows)
    rng.shuffle(order)
    target = ratio * capacity_milli
    total = sum(r[3] * r[4] for r in prows)
    # without a pod that asks for GPUs the trace cannot be inflated (the loop below would never end)
    if total < target and total > 0:
        k = 0
        while True:
            r = prows[int(rng.integers(len(prows)))]
            if total + r[4] > target:  # the original checks the per-GPU milli, not the total
                break
            k += 1
            order.append((f"{r[0]}-clone-{k}",) + tuple(r[1:]))
            total += r[3] * r[4]
    else:
        while total > target and order:
            r = order.pop(int(rng.integers(len(order))))
            total -= r[3] * r[4]
    return order


def _pod(r: tuple[Any, ...]) -> Any:
    name, cpu, mem, num, milli, spec = r
    req: dict[str, Any] = {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}
    if num > 0 and milli > 0:
        if num == 1 and milli < 1000:
            req[RESOURCE_GPU_CORE] = str(milli // 10)
            req[RESOURCE_GPU_MEMORY_RATIO] = str(milli // 10)
        else:
            req[NVIDIA_GPU] = str(num)
    extra: dict[str, Any] = {}
    if spec:
        extra["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": GPU_MODEL_LABEL, "operator": "In", "values": spec.split("|")}]}]}}}
    return make_pod(name, "openb", requests=req, **extra)


def _node(r: tuple[Any, ...]) -> Any:
    name, cpu, mem, gpu, model = r
    alloc = {"cpu": f"{cpu}m", "memory": f"{mem}Mi", "pods": "1001"}
    if gpu:
        alloc.update({NVIDIA_GPU: str(gpu), RESOURCE_GPU: str(100 * gpu), RESOURCE_GPU_CORE: str(100 * gpu),
                      RESOURCE_GPU_MEMORY_RATIO: str(100 * gpu)})
    return make_node(name, allocatable=alloc, labels={GPU_MODEL_LABEL: model} if model else {})


def profile_for(policy: str, seed: int, workload: frag.Workload, tie_break: str = "first",
                shares: dict[int, int] | None = None) -> dict:
    """The replay's scheduler profile. ``shares`` (share milli → pods in the trace) becomes fgdlp's
    ``shareSizes``, the way the target workload M comes from the trace for the FGD family."""
    tp = [{"milliCpu": k[0], "milliGpu": k[1], "gpuNumber": k[2], "gpuSpec": k[3], "weight": float(p)}
          for k, p in zip(workload.keys, workload.p.tolist())]
    cfg: dict[str, Any] = {"policy": policy, "seed": seed, "typicalPods": tp, "tieBreak": tie_break}
    if policy in POLICIES and POLICIES[policy].needs_lp and shares:
        cfg["shareSizes"] = [{"milliGpu": m, "weight": float(c)} for m, c in sorted(shares.items())]
    # node_resources_fit filters last: gpu_share's vectorised filter drops the nodes without room for the
    # GPUs first, so the per-node reasons node_resources_fit builds are few (same feasible set and order)
    return {"percentageOfNodesToScore": 100, "disable": ["default_preemption"],
            "plugins": {"filter": {"enabled": [{"name": "node_resources_fit"}]},
                        "score": {"disabled": [{"name": "*"}], "enabled": [{"name": "gpu_share", "weight": 1}]}},
            "pluginConfig": {"gpu_share": cfg}}


def bin_curve(arrived: np.ndarray, used: np.ndarray, fragm: np.ndarray, capacity_milli: int) -> list[dict]:
    """Bin per-pod events by integer arrived % (numpy's half-to-even rounding); empty bins take ±1."""
    cap = capacity_milli / 1000.0
    b = np.round(arrived / cap / 10).astype(np.int64)
    alloc = used / cap / 10
    fr = 100 * fragm / 1000 / cap
    top = int(b.max()) if len(b) else 0
    rows: dict[int, tuple[float, float]] = {}
    for k in range(top + 1):
        m = b == k
        if m.any():
            rows[k] = (float(alloc[m].mean()), float(fr[m].mean()))
    out = []
    for k in range(top + 1):
        if k in rows:
            a, f = rows[k]
        else:
            nb = [rows[j] for j in (k - 1, k + 1) if j in rows]
            if not nb:
                continue
            a, f = float(np.mean([x[0] for x in nb])), float(np.mean([x[1] for x in nb]))
        out.append({"arrived_pct": k, "alloc_pct": round(a, 4), "frag_pct": round(f, 4)})
    return out


@attrs.frozen
class Trace:
    """One seed's input to the protocol: GPU nodes in cluster order (seed-permuted), pods in arrival
    order (shuffled and resampled to 1.3 × capacity), the GPU capacity and the target workload M."""

    nodes: list
    pods: list
    capacity_milli: int
    workload: frag.Workload
    #: share milli → number of shared-GPU pods of that size in the trace file
    shares: dict[int, int] = attrs.field(factory=dict)


def prepare_trace(nodes_csv: str | Path, pods_csv: str | Path, seed: int) -> Trace:
    """Read the trace and apply the protocol's seeded shuffle, resampling and node permutation."""
    nrows, prows = load_trace(nodes_csv, pods_csv)
    gpu_nodes = [r for r in nrows if r[3] > 0]
    capacity = 1000 * sum(r[3] for r in gpu_nodes)
    if capacity == 0:
        raise ConfigError(f"{nodes_csv}: no GPU nodes")
    models = sorted({r[4] for r in gpu_nodes if r[4]})
    workload = frag.typical_pods(((r[1], r[4], r[3], r[5]) for r in prows), models)
    rng = np.random.default_rng(seed)
    order = tune(prows, rng, capacity)
    perm = rng.permutation(len(gpu_nodes))
    shares = Counter(r[4] for r in prows if r[3] == 1 and 0 < r[4] < 1000)
    return Trace([gpu_nodes[j] for j in perm.tolist()], order, capacity, workload, dict(shares))


async def start_replay(trace: Trace, policy: str, seed: int, tie_break: str = "first") -> tuple:
    """The engine of one run, started, with every pod added and queued in arrival order:
    ``(engine, gpu_share plugin object, registry, pods)``. The plugin object is made here and loaded
    in-process (with the built-ins, no other plugin), so the replay reads its state directly."""
    from koordfw import build_registry

    if policy not in POLICIES:
        raise ConfigError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    plugin = GpuShare()
    registry = build_registry(profile_for(policy, seed, trace.workload, tie_break, trace.shares),
                              plugins={"gpu_share": plugin}, only=())
    pods = [_pod(r) for r in trace.pods]
    # binding cycles as tasks of the replay's own task group (the replay drives the cycles itself)
    engine = EmbeddedEngine(registry, nodes=[_node(r) for r in trace.nodes], pods=pods, seed=seed, start_time=0.0,
                            inline_binding=False)
    await engine.start()
    return engine, plugin, registry, pods


async def replay_async(nodes_csv: str | Path, pods_csv: str | Path, policy: str, seed: int, tie_break: str = "first",
                       progress: Callable[..., None] | None = None) -> dict:
    import anyio
    import anyio.lowlevel

    t0 = time.perf_counter()
    trace = prepare_trace(nodes_csv, pods_csv, seed)
    capacity = trace.capacity_milli
    engine, plugin, registry, pods = await start_replay(trace, policy, seed, tie_break)
    cluster = engine.view
    milli_of = {p.uid: r[3] * r[4] for p, r in zip(pods, trace.pods)}
    args = registry.args["gpu_share"]
    n = len(pods)
    arrived = np.zeros(n)
    used = np.zeros(n)
    fragm = np.zeros(n)
    a_sum = u_sum = 0
    t1 = time.perf_counter()
    i = 0
    async with anyio.create_task_group() as tg:
        while (tried := await engine.schedule_one(tg)) is not None:
            uid = tried.uid
            a_sum += milli_of[uid]
            u_sum += plugin.allocated_milli(uid)
            arrived[i], used[i] = a_sum, u_sum
            fragm[i] = plugin.node_frag_milli(cluster, args).sum()
            i += 1
            if i % 64 == 0:
                await anyio.lowlevel.checkpoint()
                if progress is not None:
                    progress(i, n)
    seconds = time.perf_counter() - t0
    curve = bin_curve(arrived[:i], used[:i], fragm[:i], capacity)
    at = {c["arrived_pct"]: c for c in curve}
    c100 = at.get(100, curve[-1] if curve else {"alloc_pct": 0.0, "frag_pct": 0.0})
    await engine.stop()
    return {"policy": policy, "seed": seed, "total_gpus": capacity // 1000, "pods": n,
            "scheduled": int(sum(1 for p in pods if plugin.inv.allocs.get(p.uid) or cluster.pods[p.uid].node_index >= 0)),
            "unallocated_gpu_pct_at_100": round(100.0 - c100["alloc_pct"], 4),
            "frag_gpu_pct_at_100": round(c100["frag_pct"], 4),
            "seconds": round(seconds, 3), "schedule_seconds": round(time.perf_counter() - t1, 3),
            "pods_per_second": round(n / seconds, 1), "curve": curve}


def replay(nodes_csv: str | Path, pods_csv: str | Path, policy: str, seed: int, tie_break: str = "first",
           progress: Callable[..., None] | None = None) -> dict:
    """One run of the protocol; see the module docstring. Synchronous."""
    import anyio

    return anyio.run(lambda: replay_async(nodes_csv, pods_csv, policy, seed, tie_break, progress))


#: most seeds one replay runs (each is a full replay), and the seed range numpy takes
MAX_SEEDS = 10_000
MAX_SEED = 2**32 - 1


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
            else:
                lo = hi = int(part)
        except ValueError:
            raise ConfigError(f"--seeds: expected N, N-M or a comma list, got {text[:60]!r}") from None
        if not 0 <= lo <= hi <= MAX_SEED:
            raise ConfigError(f"--seeds: {part[:40]!r}: seeds are integers 0..{MAX_SEED}, ranges N-M with N <= M")
        if len(out) + (hi - lo + 1) > MAX_SEEDS:
            raise ConfigError(f"--seeds: more than {MAX_SEEDS} seeds")
        out.extend(range(lo, hi + 1))
    if not out:
        raise ConfigError(f"--seeds: no seed in {text!r}")
    return out


def summarize(runs: list[dict]) -> dict:
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["policy"], []).append(r)
    return {p: {"seeds": [r["seed"] for r in rs],
                "median_unallocated_gpu_pct_at_100": round(statistics.median(r["unallocated_gpu_pct_at_100"] for r in rs), 4),
                "median_frag_gpu_pct_at_100": round(statistics.median(r["frag_gpu_pct_at_100"] for r in rs), 4)}
            for p, rs in by.items()}


def register(sub: Commands) -> None:
    rsub = sub.group("replay", help="replay published traces through the scheduler", metavar="TRACE")
    o = rsub.add("openb", help="the Alibaba GPU trace with the FGD paper's protocol",
                 description="Replay the Alibaba cluster-trace-gpu-v2023 (openb) pods on its GPU nodes "
                             "through the scheduler with the gpu_share plugin, as the FGD paper does.")
    o.add_argument("--nodes", required=True, metavar="NODES.csv", help="the trace's node file (openb_node_list_*.csv)")
    o.add_argument("--pods", required=True, metavar="PODS.csv", help="the trace's pod file (openb_pod_list_*.csv)")
    o.add_argument("--policy", action="append", metavar="NAME",
                   help=f"placement policy (repeatable): {', '.join(POLICIES)} (default fgd)")
    o.add_argument("--seed", type=int, default=42, help="seed (default 42)")
    o.add_argument("--seeds", metavar="A-B", help="several seeds, e.g. 42-51 (overrides --seed)")
    o.add_argument("--tie-break", choices=("first", "random"), default="first",
                   help="equal best scores: first node of the (seed-permuted) node list, as the paper's "
                        "simulator does (default), or the kernel's uniform random choice")
    o.add_argument("--output", "-o", choices=("table", "json"), default="table", help="table (default) or json")
    o.add_argument("--plot", metavar="FILE.png", help="plot unallocated GPU %% against arrived %% (needs matplotlib)")
    o.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    policies = args.policy or ["fgd"]
    for pol in policies:
        if pol not in POLICIES:
            raise ConfigError(f"--policy: unknown policy {pol!r}; use one of {', '.join(POLICIES)}")
    seeds = parse_seeds(args.seeds) if args.seeds else [args.seed]
    if args.plot:
        _pyplot()  # a missing matplotlib is reported before the replays, not after them
    if not all(0 <= x <= MAX_SEED for x in seeds):
        raise ConfigError(f"--seed: seeds are integers 0..{MAX_SEED}, got {args.seed}")
    runs = []
    tty = args.output == "table" and sys.stderr.isatty()
    for pol in policies:
        for s in seeds:
            if tty:
                from rich.console import Console
                from rich.progress import Progress

                with Progress(transient=True, console=Console(stderr=True)) as bar:
                    task = bar.add_task(f"{pol} seed {s}", total=1)
                    r = replay(args.nodes, args.pods, pol, s, args.tie_break,
                               progress=lambda d, t, task=task: bar.update(task, completed=d, total=t))
            else:
                r = replay(args.nodes, args.pods, pol, s, args.tie_break)
            runs.append(r)
    if args.plot:
        plot(runs, args.plot)
    if args.output == "json":
        out: Any = runs[0] if len(runs) == 1 else {"runs": runs, "medians": summarize(runs)}
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"{'policy':<11} {'seed':>5} {'unalloc%@100':>13} {'frag%@100':>10} {'pods':>6} {'seconds':>8} {'pods/s':>8}")
    for r in runs:
        print(f"{r['policy']:<11} {r['seed']:>5} {r['unallocated_gpu_pct_at_100']:>13.2f} "
              f"{r['frag_gpu_pct_at_100']:>10.2f} {r['pods']:>6} {r['seconds']:>8.2f} {r['pods_per_second']:>8.0f}")
    if len(runs) > 1:
        for pol, m in summarize(runs).items():
            print(f"median {pol:<11} unallocated {m['median_unallocated_gpu_pct_at_100']:.2f}%  "
                  f"frag {m['median_frag_gpu_pct_at_100']:.2f}%  ({len(m['seeds'])} seeds)")
    return 0


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib (pip install 'koordfw-gpu-share[plot]')") from None
    return plt


def plot(runs: list[dict], path: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["policy"], []).append(r)
    for pol, rs in by.items():
        xs = sorted({c["arrived_pct"] for r in rs for c in r["curve"]})
        ys = [statistics.median([next((100 - c["alloc_pct"] for c in r["curve"] if c["arrived_pct"] == x), np.nan)
                                 for r in rs]) for x in xs]
        ax.plot(xs, ys, label=pol)
    ax.set_xlabel("arrived GPU request (% of capacity)")
    ax.set_ylabel("unallocated GPU (%)")
    ax.set_xlim(75, 130)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
