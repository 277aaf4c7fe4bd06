"""Terminal rendering (rich) of a simulation's result.

Every amount is shown in human units: cores for cpu-like resources, binary units (``64.2Gi``) for
memory-like ones, counts for the rest; the JSON and YAML outputs keep Kubernetes' machine units. Tables
fit the terminal's width: values wrap, headers never do (a table too wide is split into column groups,
each repeating its first column)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from rich.console import Console
from rich.table import Table

from .core.quantity import QuantityError, canonical

#: resources counted in milli-cores (``cpu`` as a quantity, the extended ones as plain milli-core integers)
CPU_LIKE = frozenset({"cpu", "kubernetes.io/batch-cpu", "kubernetes.io/mid-cpu"})
#: prefixes dropped from resource names in headers and cells (``batch-cpu`` for ``kubernetes.io/batch-cpu``)
SHORT_PREFIXES = ("kubernetes.io/", "koordinator.sh/")
_UNITS = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def short_name(resource: str) -> str:
    for prefix in SHORT_PREFIXES:
        if resource.startswith(prefix):
            return resource[len(prefix):]
    return resource


def is_memory_like(resource: str) -> bool:
    name = short_name(resource)
    return name.endswith("memory") or name == "ephemeral-storage" or name.startswith("hugepages-")


def _num(x: Fraction) -> str:
    """At most one decimal, without a trailing ``.0`` (``13.7``, ``8``)."""
    if x.denominator == 1:
        return str(x.numerator)
    s = f"{float(x):.1f}"
    return s[:-2] if s.endswith(".0") else s


def milli_cores(resource: str, value: object) -> int:
    return canonical("cpu", value) if resource == "cpu" else canonical(resource, value)


def bytes_text(n: int) -> str:
    for suffix, size in _UNITS:
        if abs(n) >= size:
            return _num(Fraction(n, size)) + suffix
    return str(n)


def amount(resource: str, value: object, *, unit: bool = True) -> str:
    """One amount in human units (``13.7 cores``, ``64.2Gi``); counts and anything not a quantity unchanged."""
    try:
        if resource in CPU_LIKE:
            cores = Fraction(milli_cores(resource, value), 1000)
            return _num(cores) + ((" core" if cores == 1 else " cores") if unit else "")
        if is_memory_like(resource):
            return bytes_text(canonical(resource, value))
    except (QuantityError, TypeError, ValueError):
        pass
    return str(value)


def ratio(resource: str, used: object, total: object) -> str:
    """``used/total`` in one unit (``8/13.7 cores``, ``16Gi/64.2Gi``, ``1/2``)."""
    if resource in CPU_LIKE:
        try:
            u, t = (_num(Fraction(milli_cores(resource, v), 1000)) for v in (used, total))
        except (QuantityError, TypeError, ValueError):
            return f"{used}/{total}"
        return f"{u}/{t} cores"
    return f"{amount(resource, used)}/{amount(resource, total)}"


def _pct(used: str | None, total: str | None, resource: str) -> str:
    if not total:
        return "-"
    t = canonical(resource, total)
    u = canonical(resource, used or "0")
    return f"{100 * u / t:.0f}%" if t else "-"


def _human(resource: str, v: Any) -> str:
    """``v`` in human units when ``resource`` is cpu- or memory-like and ``v`` a quantity; else as is."""
    if resource in CPU_LIKE or is_memory_like(resource):
        return amount(resource, v)
    return str(v)


def _cell(v: Any, column: str = "", sep: str = ", ") -> str:
    if isinstance(v, dict):
        return sep.join(f"{short_name(str(k))}={_human(str(k), x)}" for k, x in v.items()) or "-"
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "-"
    return "-" if v is None or v == "" else _human(column, v)


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


def _min_width(header: str, cells: list[str]) -> int:
    """The narrowest a column should be: its header whole, and its longest line (up to 16 characters)."""
    words = [len(line) for c in cells for line in c.split("\n")]
    return max(len(header), min(max(words, default=1), 16))


def split_columns(headers: list[str], widths: list[int], total: int) -> list[list[int]]:
    """Column groups that each fit ``total`` characters, every group after the first repeating column 0."""
    border = 3  # "│ " before a cell and the space after it
    groups: list[list[int]] = [[0]]
    used = 1 + border + widths[0]
    for i in range(1, len(headers)):
        if used + border + widths[i] > total and len(groups[-1]) > 1:
            groups.append([0])
            used = 1 + border + widths[0]
        groups[-1].append(i)
        used += border + widths[i]
    return groups


def section_tables(title: str, rows: list[dict[str, Any]], width: int = 100) -> list[Table]:
    """A plugin's report section as tables (more than one when its columns do not fit ``width``); rows
    with name/parent are shown as an indented tree; resource columns are headed by their short names."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    ordered = _tree_order(rows) if "name" in cols and "parent" in cols else [(0, r) for r in rows]
    # a mapping's entries one a line (``cpu=12.8 cores`` over ``memory=44.8Gi``): narrow columns, whole values
    cells = [[("  " * depth + ("└ " if depth else "") + _cell(r.get(c), c)) if c == "name" else _cell(r.get(c), c, "\n")
              for c in cols] for depth, r in ordered]
    headers = [short_name(c) for c in cols]
    widths = [_min_width(h, [row[i] for row in cells]) for i, h in enumerate(headers)]
    groups = split_columns(headers, widths, width)
    tables = []
    for n, group in enumerate(groups, 1):
        t = Table(title=title if len(groups) == 1 else f"{title} ({n}/{len(groups)})")
        for i in group:
            t.add_column(headers[i], overflow="fold", min_width=len(headers[i]))
        for row in cells:
            t.add_row(*[row[i] for i in group])
        tables.append(t)
    return tables


def section_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """A plugin's report section as one table (however wide); see :func:`section_tables`."""
    return section_tables(title, rows, width=10**6)[0]


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
        phase = {"Bound": "Bound", "NotOurs": "[dim]not ours[/dim]"}.get(p["phase"], f"[yellow]{p['phase']}[/yellow]")
        pods.add_row(f"{p['namespace']}/{p['name']}", p["node"] or "-", phase, extra)
    console.print(pods)
    nodes = Table(title="nodes")
    for col in ("node", "pods", "cpu", "memory", "other requested/allocatable"):
        nodes.add_column(col, overflow="fold", min_width=len(col) if col != "other requested/allocatable" else 5)
    for n in data["nodes"]:
        a, r = n["allocatable"], n["requested"]
        # resources requested that the node does not advertise (a removed device plugin) show as x/0
        names = list(a) + [k for k in r if k not in a]
        other = ", ".join(f"{short_name(k)} {ratio(k, r.get(k, '0'), a.get(k, '0'))}"
                          for k in names if k not in ("cpu", "memory", "pods"))
        nodes.add_row(n["name"], str(n["pods"]),
                      f"{ratio('cpu', r.get('cpu', '0'), a.get('cpu', '0'))} ({_pct(r.get('cpu'), a.get('cpu'), 'cpu')})",
                      f"{ratio('memory', r.get('memory', '0'), a.get('memory', '0'))} "
                      f"({_pct(r.get('memory'), a.get('memory'), 'memory')})",
                      other or "-")
    console.print(nodes)
    annotated = [n for n in data["nodes"] if n.get("annotations")]
    if annotated:  # what node_resources plugins wrote on the nodes (koord-manager's node annotations)
        anns = Table(title="node annotations")
        for col in ("node", "annotation", "value"):
            anns.add_column(col, overflow="fold")
        for n in annotated:
            for k, v in n["annotations"].items():
                anns.add_row(n["name"], k, v)
        console.print(anns)
    for key, section in data.items():
        if key in ("pods", "nodes", "summary", "migrations", "workloads"):
            continue
        if isinstance(section, list) and section and all(isinstance(r, dict) for r in section):
            for table in section_tables(key, section, width=console.width):
                console.print(table)
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
    more = "".join(f", {label} {s[k]}" for k, label in (("rejected", "refused"), ("notOurs", "not ours")) if s.get(k))
    console.print(f"bound {s['bound']}, pending {s['pending']}{more} in {s['seconds']:.3f}s "
                  f"({s['pods_per_second']} pods/s)")
