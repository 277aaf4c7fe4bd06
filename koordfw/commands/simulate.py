"""``koordfw simulate PATH...``: schedule manifests in the embedded cluster and print the result."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from ..command_api import Commands
from ..core.errors import ConfigError
from ._common import add_plugin_options, registry_from_args

if TYPE_CHECKING:
    from rich.console import Console


def register(sub: Commands) -> None:
    p = sub.add("simulate", help="schedule manifests in the embedded in-memory cluster",
                description="Load nodes, pods and other objects from YAML/JSON files or directories, "
                            "schedule every pending pod and print placements and node utilisation.")
    p.add_argument("paths", nargs="+", metavar="PATH")
    add_plugin_options(p)
    p.add_argument("--output", "-o", choices=("table", "json", "yaml"), default="table",
                   help="table (default), json or yaml")
    p.add_argument("--seed", type=int, default=0, help="seed for tie-breaking (default 0)")
    p.add_argument("--deschedule", action="store_true", help="after scheduling, apply the descheduling plan and reschedule")
    p.add_argument("--deschedule-cycles", type=int, default=1, metavar="N",
                   help="with --deschedule: plan, apply and reschedule N times, each plan on the settled result "
                        "of the one before and within the profile's per-round budget (default 1)")
    p.add_argument("--all-schedulers", action="store_true",
                   help="schedule every pending pod, whatever its spec.schedulerName (the preview of moving "
                        "workloads onto koordfw); without it, as the live scheduler, pods naming another "
                        "scheduler are left alone and listed as not ours")
    p.add_argument("--now", metavar="TIME", type=_rfc3339,
                   help="start the virtual clock at TIME (RFC 3339, e.g. 2026-12-04T10:00:00Z): NodeMetrics are "
                        "then as old as they really are; default: the newest time in the input, so that its "
                        "NodeMetrics are read as fresh")
    p.add_argument("--fail-on-pending", action="store_true",
                   help="exit 1 when any pod stays pending (or is refused by admission); for CI checks")
    p.set_defaults(func=run)


def _rfc3339(value: str) -> float:
    from ..core.errors import ManifestError
    from ..core.model.objects import parse_time

    try:
        t = parse_time(value)
    except ManifestError as e:
        raise argparse.ArgumentTypeError(f"expected an RFC 3339 time such as 2026-12-04T10:00:00Z: {e}") from None
    if t is None:
        raise argparse.ArgumentTypeError("expected an RFC 3339 time such as 2026-12-04T10:00:00Z")
    return t


def run(args: argparse.Namespace) -> int:
    import anyio

    from ..core.manifests import load_manifests
    from ..engines.embedded import run_simulation
    from ..report import render_simulation

    if args.deschedule_cycles < 1:
        raise ConfigError(f"--deschedule-cycles: must be at least 1, got {args.deschedule_cycles}")
    cycles = args.deschedule_cycles if args.deschedule else 0
    manifests = load_manifests(args.paths)
    manifests.expand_workloads()  # their pods too get the unit warnings (run_simulation does not expand twice)
    for line in [*manifests.warnings(), *manifests.unit_warnings()]:
        print(f"koordfw: warning: {line}", file=sys.stderr)
    registry = registry_from_args(args)
    for e in registry.errors:
        print(f"koordfw: warning: plugin {e.name!r} from {e.distribution!r} failed to load: {e.error}", file=sys.stderr)
    show_progress = args.output == "table" and sys.stderr.isatty() and len(manifests.pods) >= 200
    if show_progress:
        from rich.progress import Progress

        with Progress(transient=True, console=_stderr_console()) as bar:
            task = bar.add_task("scheduling", total=len(manifests.pods))
            result = anyio.run(lambda: run_simulation(
                manifests, registry, seed=args.seed, deschedule=cycles,
                all_schedulers=args.all_schedulers, now=args.now,
                progress=lambda done, total: bar.update(task, completed=done, total=total)))
    else:
        result = anyio.run(lambda: run_simulation(manifests, registry, seed=args.seed, deschedule=cycles,
                                                  all_schedulers=args.all_schedulers, now=args.now))
    data = result.to_dict()
    if args.output == "json":
        json.dump(data, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    elif args.output == "yaml":
        import yaml

        yaml.safe_dump(data, sys.stdout, sort_keys=False)
    else:
        render_simulation(data)
    s = data["summary"]
    if args.fail_on_pending and (s["pending"] or s.get("rejected")):
        print(f"koordfw: {s['pending']} pod(s) pending, {s.get('rejected', 0)} refused (--fail-on-pending)",
              file=sys.stderr)
        return 1
    return 0


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)
