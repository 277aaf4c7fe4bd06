"""``koordfw plugins``: every plugin with its distribution, version and hooks."""

from __future__ import annotations

import argparse
import json
import sys

from ..command_api import Commands
from ._common import add_plugin_options, registry_from_args


def register(sub: Commands) -> None:
    p = sub.add("plugins", help="list installed plugins and the hooks they implement")
    add_plugin_options(p)
    p.add_argument("--output", "-o", choices=("table", "json"), default="table", help="table (default) or json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    registry = registry_from_args(args)
    rows = registry.describe()
    if args.output == "json":
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="koordfw plugins")
    for col in ("plugin", "distribution", "version", "hooks"):
        t.add_column(col)
    for r in rows:
        hooks = ", ".join(r["hooks"]) if not r.get("error") else f"[red]failed to load: {r['error']}[/red]"
        t.add_row(r["name"], r["distribution"], r["version"], hooks)
    Console().print(t)
    return 0
