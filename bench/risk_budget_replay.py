"""The colocation replay's week per profile (issue 33): Koordinator's defaults, the recommended profile and
the risk-budget mode at ε = 0.5 % and 1 %, with and without Mid workloads; a table and a plot.

    .venv/bin/python bench/risk_budget_replay.py --out /tmp/risk-week              # ~25 min on 2 cores
    .venv/bin/python bench/risk_budget_replay.py --out /tmp/risk-week --reuse      # table and plot again
    .venv/bin/python bench/risk_budget_replay.py --days 2 --out /tmp/risk-2d       # a quick look

Each run is ``koordfw replay colocation --mode koordfw --profile P [--mid-share F] -o json`` on the shipped
traces (``../shared/data``); the kubernetes baseline comes from the first profile's ``--mode both`` run. The
plot (``--plot``, default ``OUT/risk-week.png``) draws the cluster's CPU utilisation over the replay, one
line per profile, and each profile's node-slots over capacity against its budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
PROFILES = [("koordinator", "Koordinator defaults", None), ("recommended", "recommended", None),
            ("risk:0.5%", "risk ε = 0.5 %", 0.005), ("risk:1%", "risk ε = 1 %", 0.01)]


def json_path(out: Path, profile: str, mid_share: float) -> Path:
    return out / (f"{profile}{'-mid' if mid_share else ''}".replace(":", "-").replace("%", "pct") + ".json")


def run(out: Path, profile: str, mid_share: float, days: float | None, both: bool) -> dict[str, Any]:
    f = json_path(out, profile, mid_share)
    if not f.exists():
        argv = [str(ROOT / ".venv" / "bin" / "koordfw"), "replay", "colocation", "--ls-trace",
                str(DATA / "bitbrains-rnd-2013-07"), "--batch-trace", str(DATA / "alibaba-batch-v2018"),
                "--mode", "both" if both else "koordfw", "--profile", profile, "--mid-share", str(mid_share),
                "-o", "json"]
        if days is not None:
            argv += ["--days", str(days)]
        print(f"running {profile} (mid share {mid_share})", file=sys.stderr)
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: {res.stderr[-2000:]}")
        f.write_text(res.stdout)
    return json.loads(f.read_text())


def row(label: str, s: dict[str, Any], budget: float | None) -> str:
    over = s["node_over_capacity_slot_fraction"]
    ratio = f"{over / budget:.2f}×" if budget else "–"
    return (f"| {label} | {100 * s['cpu_utilisation_mean']:.1f} % | {100 * s['cpu_utilisation_p95']:.1f} % | "
            f"{100 * over:.2f} % | {ratio} | {s['ls_starved_slots']} | {s['batch_cpu_hours']:,.0f} | "
            f"{s.get('mid_cpu_hours', 0):,.0f} | {s['evictions']:,} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder of the runs' JSON (kept: --reuse reads it)")
    ap.add_argument("--reuse", action="store_true", help="only the table and the plot from the JSON in --out")
    ap.add_argument("--mid-share", type=float, default=0.1, help="Mid share of the second set of runs (0.1)")
    ap.add_argument("--days", type=float, help="replay length (default: the week)")
    ap.add_argument("--plot", type=Path, help="the PNG (default OUT/risk-week.png)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    docs: dict[tuple[str, float], dict[str, Any]] = {}
    for share in (0.0, a.mid_share):
        for i, (p, _label, _b) in enumerate(PROFILES):
            if a.reuse and not json_path(a.out, p, share).exists():
                continue
            docs[(p, share)] = run(a.out, p, share, a.days, both=(i == 0 and share == 0))
    head = ("| profile | mean CPU | p95 CPU | node-slots over capacity | over / ε | LS-starved slots | "
            "batch CPU-hours | Mid CPU-hours | evictions |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for share in (0.0, a.mid_share):
        print(f"\nMid share {share}:\n{head}")
        first = docs.get((PROFILES[0][0], share))
        if first is not None and "kubernetes" in first["modes"]:
            print(row("kubernetes (no colocation)", first["modes"]["kubernetes"]["summary"], None))
        for p, label, budget in PROFILES:
            d = docs.get((p, share))
            if d is not None:
                print(row(label, d["modes"]["koordfw"]["summary"], budget))
    plot(a.plot or a.out / "risk-week.png", docs, a.mid_share)
    return 0


def plot(path: Path, docs: dict[tuple[str, float], dict[str, Any]], mid_share: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(2, 2, figsize=(14, 8), gridspec_kw={"width_ratios": [3, 1]})
    for r, share in enumerate((0.0, mid_share)):
        ax, bars = axes[r]
        first = docs.get((PROFILES[0][0], share))
        if first is not None and "kubernetes" in first["modes"]:
            u = np.asarray([h["cpu_utilisation_mean"] for h in first["modes"]["kubernetes"]["hours"]])
            ax.plot(np.arange(len(u)) / 24, 100 * u, lw=0.6, color="grey", label="kubernetes")
        names, over, budgets = [], [], []
        for p, label, budget in PROFILES:
            d = docs.get((p, share))
            if d is None:
                continue
            s = d["modes"]["koordfw"]
            # the hourly means (the JSON's per-hour table)
            u = np.asarray([h["cpu_utilisation_mean"] for h in s["hours"]])
            ax.plot(np.arange(len(u)) / 24, 100 * u, lw=0.8,
                    label=f"{label} (mean {100 * s['summary']['cpu_utilisation_mean']:.1f} %)")
            names.append(label)
            over.append(100 * s["summary"]["node_over_capacity_slot_fraction"])
            budgets.append(100 * budget if budget else np.nan)
        ax.axhline(60, color="black", lw=0.5, ls=":")
        ax.set_ylabel("cluster CPU utilisation, %")
        ax.set_title(f"Mid share {share:g}: utilisation (hourly means)")
        ax.legend(fontsize=7, loc="lower right")
        x = np.arange(len(names))
        bars.bar(x, over, color="tab:orange", label="measured")
        bars.scatter(x, budgets, color="black", marker="_", s=400, label="budget ε", zorder=3)
        bars.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
        bars.set_ylabel("node-slots over capacity, %")
        bars.set_title("over capacity vs budget")
        bars.legend(fontsize=7)
    axes[1][0].set_xlabel("day of the replay")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
