"""``koordfw deschedule PATH...``: plan one descheduling round against a snapshot and print it.

Nothing is evicted: the snapshot's bound pods stay where they are (pending pods stay pending), the
plugins' ``deschedule`` hooks run once with the scheduler's filters available for target checks, and
the plan is printed as ``{"migrations": [...], "before": {...}, "after": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from koordfw import ConfigError
from koordfw.embed import Commands, add_plugin_options
from koordfw.inputs import Manifests


def register(sub: Commands) -> None:
    p = sub.add("deschedule", help="plan a descheduling round (LowNodeLoad, GPU/CPU defrag) on a snapshot",
                description="Load nodes, bound pods, NodeMetrics, PDBs... from YAML/JSON files or "
                            "directories and print the migrations the descheduling plugins plan, with "
                            "the metrics before and after. Nothing is evicted.")
    p.add_argument("paths", nargs="+", metavar="PATH")
    add_plugin_options(p)
    p.add_argument("--output", "-o", choices=("table", "json"), default="table", help="table (default) or json")
    p.set_defaults(func=run)


async def plan_snapshot(manifests: Manifests, registry: Any) -> dict:
    """Run every plugin's ``deschedule`` hook once on the snapshot; the defrag plugin's plan is shown
    even in dry-run mode."""

    from koordfw.embed import EmbeddedEngine

    engine = EmbeddedEngine.from_manifests(registry, manifests)
    await engine.start(enqueue_pending=False)
    await engine.refresh_node_resources()
    planned, errors = await engine.deschedule_plans()
    # defrag's own plan comes from its last result below, with its before/after figures
    migrations = [m for name, ms in planned.items() if name != "defrag" for m in ms]
    out: dict = {"migrations": [], "before": {}, "after": {}}
    last = getattr(registry.plugin("defrag"), "last", None)
    if last is not None:
        migrations = list(last.migrations) + migrations
        out["before"], out["after"] = last.before, last.after
        out["notes"] = list(last.notes)
        out["planSeconds"] = round(last.seconds, 6)
        args = registry.args.get("defrag")
        out["dryRun"] = bool(args is not None and (args.dry_run or args.low_node_load.dry_run))
    out["migrations"] = [{"pod": m.pod, "from": m.from_node, "to": m.to, "reason": m.reason, "plugin": m.plugin}
                         for m in migrations]
    if errors:
        out["errors"] = errors
    await engine.stop()
    return out


def run(args: argparse.Namespace) -> int:
    import anyio

    from koordfw.embed import registry_from_args
    from koordfw.inputs import load_manifests

    manifests = load_manifests(args.paths)
    registry = registry_from_args(args)
    for e in registry.errors:
        print(f"koordfw: warning: plugin {e.name!r} from {e.distribution!r} failed to load: {e.error}", file=sys.stderr)
    if "defrag" not in registry.plugins:
        raise ConfigError("the defrag plugin is disabled or not loaded")
    a = registry.args.get("defrag")
    if a is not None and not (a.low_node_load.enabled or a.gpu_defrag.enabled or a.cpu_defrag.enabled):
        print("koordfw: note: no descheduling strategy is enabled; set pluginConfig.defrag.lowNodeLoad "
              "thresholds, gpuDefrag.enabled or cpuDefrag.enabled in the profile", file=sys.stderr)
    out = anyio.run(lambda: plan_snapshot(manifests, registry))
    if args.output == "json":
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    render(out)
    return 0


def render(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title=f"{len(out['migrations'])} migration(s)" + (" (dry run)" if out.get("dryRun") else ""))
    for col in ("pod", "from", "to", "plugin", "reason"):
        t.add_column(col)
    for m in out["migrations"]:
        t.add_row(m["pod"], m["from"], m["to"] or "-", m["plugin"], m["reason"])
    console.print(t)
    for section in sorted(set(out.get("before", {})) | set(out.get("after", {}))):
        b, a = out["before"].get(section, {}), out["after"].get(section, {})
        console.print(f"[bold]{section}[/bold]: before {json.dumps(b)}  after {json.dumps(a)}")
    for n in out.get("notes", []):
        console.print(f"note: {n}")
    for e in out.get("errors", []):
        console.print(f"[red]error[/red]: {e}")
