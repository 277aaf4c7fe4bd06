"""Terminal rendering (rich) of a simulation's result."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from .core.quantity import canonical


def _pct(used: str | None, total: str | None, resource: str) -> str:
    if not total:
        return "-"
    t = canonical(resource, total)
    u = canonical(resource, used or "0")
    return f"{100 * u / t:.0f}%" if t else "-"


def render_simulation(data: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    pods = Table(title="placements")
    for col in ("pod", "node", "phase", "reason / plugin annotations"):
        pods.add_column(col, overflow="fold")
    for p in data["pods"]:
        extra = p["reason"] if p["phase"] != "Bound" else ", ".join(f"{k}={v}" for k, v in p["annotations"].items())
        pods.add_row(f"{p['namespace']}/{p['name']}", p["node"] or "-",
                     p["phase"] if p["phase"] == "Bound" else f"[yellow]{p['phase']}[/yellow]", extra)
    console.print(pods)
    nodes = Table(title="nodes")
    for col in ("node", "pods", "cpu", "memory", "other requested/allocatable"):
        nodes.add_column(col, overflow="fold")
    for n in data["nodes"]:
        a, r = n["allocatable"], n["requested"]
        other = ", ".join(f"{k} {r.get(k, '0')}/{v}" for k, v in a.items() if k not in ("cpu", "memory", "pods"))
        nodes.add_row(n["name"], str(n["pods"]),
                      f"{r.get('cpu', '0')}/{a.get('cpu', '0')} ({_pct(r.get('cpu'), a.get('cpu'), 'cpu')})",
                      f"{r.get('memory', '0')}/{a.get('memory', '0')} ({_pct(r.get('memory'), a.get('memory'), 'memory')})",
                      other)
    console.print(nodes)
    for key, section in data.items():
        if key in ("pods", "nodes", "summary", "migrations"):
            continue
        console.print(f"[bold]{key}[/bold]: {section}")
    if data.get("migrations"):
        mt = Table(title="migrations")
        for col in ("pod", "from", "to", "plugin", "reason"):
            mt.add_column(col)
        for m in data["migrations"]:
            mt.add_row(m["pod"], m["from_node"], m["to"] or "-", m["plugin"], m["reason"])
        console.print(mt)
    s = data["summary"]
    console.print(f"bound {s['bound']}, pending {s['pending']} in {s['seconds']:.3f}s "
                  f"({s['pods_per_second']} pods/s)")
