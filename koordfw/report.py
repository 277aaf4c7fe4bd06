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


def _cell(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) or "-"
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "-"
    return "-" if v is None or v == "" else str(v)


def _tree_order(rows: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Depth-first order of rows linked by ``parent`` → ``name`` (roots: parents not among the rows)."""
    names = {r.get("name") for r in rows}
    children: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        parent = r.get("parent") if r.get("parent") in names else None
        children.setdefault(parent, []).append(r)
    out: list[tuple[int, dict[str, Any]]] = []

    def walk(parent: Any, depth: int) -> None:
        for r in sorted(children.get(parent, []), key=lambda r: str(r.get("name"))):
            out.append((depth, r))
            if r.get("name") != parent:
                walk(r.get("name"), depth + 1)

    walk(None, 0)
    seen = {id(r) for _, r in out}
    out += [(0, r) for r in rows if id(r) not in seen]  # cycles: still shown
    return out


def section_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """A plugin's report section as a table; rows with name/parent are shown as an indented tree."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    t = Table(title=title)
    for c in cols:
        t.add_column(c, overflow="fold")
    ordered = _tree_order(rows) if "name" in cols and "parent" in cols else [(0, r) for r in rows]
    for depth, r in ordered:
        t.add_row(*[("  " * depth + ("└ " if depth else "") + _cell(r.get(c))) if c == "name" else _cell(r.get(c))
                    for c in cols])
    return t


def workloads_table(rows: list[dict[str, Any]]) -> Table:
    """The pods of each workload: bound of all, pending (and refused) with their reasons, the expansion note."""
    t = Table(title="workloads")
    for col in ("workload", "bound", "pending", "reasons / note"):
        t.add_column(col, overflow="fold")
    for r in rows:
        reasons = [f"{n}x {why}" if n > 1 else why for why, n in r["reasons"].items()]
        pending = str(r["pending"]) + (f" (+{r['rejected']} rejected)" if r["rejected"] else "")
        t.add_row(f"{r['kind']} {r['namespace']}/{r['name']}", f"{r['bound']} of {r['pods']}",
                  f"[yellow]{pending}[/yellow]" if r["pending"] or r["rejected"] else pending,
                  "; ".join([*reasons, *([r["note"]] if r["note"] else [])]) or "-")
    return t


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
        # resources requested that the node does not advertise (a removed device plugin) show as x/0
        names = list(a) + [k for k in r if k not in a]
        other = ", ".join(f"{k} {r.get(k, '0')}/{a.get(k, '0')}" for k in names if k not in ("cpu", "memory", "pods"))
        nodes.add_row(n["name"], str(n["pods"]),
                      f"{r.get('cpu', '0')}/{a.get('cpu', '0')} ({_pct(r.get('cpu'), a.get('cpu'), 'cpu')})",
                      f"{r.get('memory', '0')}/{a.get('memory', '0')} ({_pct(r.get('memory'), a.get('memory'), 'memory')})",
                      other)
    console.print(nodes)
    for key, section in data.items():
        if key in ("pods", "nodes", "summary", "migrations", "workloads"):
            continue
        if isinstance(section, list) and section and all(isinstance(r, dict) for r in section):
            console.print(section_table(key, section))
        else:
            console.print(f"[bold]{key}[/bold]: {section}")
    if data.get("migrations"):
        mt = Table(title="migrations")
        for col in ("pod", "from", "to", "plugin", "reason"):
            mt.add_column(col)
        for m in data["migrations"]:
            mt.add_row(m["pod"], m["from_node"], m["to"] or "-", m["plugin"], m["reason"])
        console.print(mt)
    if data.get("workloads"):
        console.print(workloads_table(data["workloads"]))
    s = data["summary"]
    console.print(f"bound {s['bound']}, pending {s['pending']} in {s['seconds']:.3f}s "
                  f"({s['pods_per_second']} pods/s)")
