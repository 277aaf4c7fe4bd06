"""``koordfw explain node NAME PATH...``: what a node was sold as batch and Mid resources, from which
predictions, at what risk, one line per resource (docs/plugins/risk_budget.md).

It reads manifests as ``koordfw simulate`` does (offline: nodes, pods, NodeMetrics, the slo-controller-config)
and runs the node-resources plugins once; the lines come from their reports (``batchResources``,
``midResources``), so they say exactly what ``simulate`` and ``koordfw manager`` compute.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from ..command_api import Commands
from ..extension import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from ._common import add_plugin_options, registry_from_args

_NAMES = {"cpu": (BATCH_CPU, MID_CPU), "memory": (BATCH_MEMORY, MID_MEMORY)}


def register(sub: Commands) -> None:
    p = sub.add("explain", help="explain a node's batch and Mid resources: what was sold, from what, at what risk",
                description="Read manifests as `simulate` does and print, for the node, one line per resource: "
                            "the batch and Mid amounts sold, the predictions (quantiles) they come from and the "
                            "risk budget they were sized at (docs/plugins/risk_budget.md).")
    p.add_argument("kind", choices=("node",), help="what to explain (node)")
    p.add_argument("name", help="the node's name")
    p.add_argument("paths", nargs="+", metavar="PATH")
    add_plugin_options(p)
    p.set_defaults(func=run)


def _q(resource: str, v: Any) -> str:
    """An amount as the reports print it: cpu in milli-cores (``1975m``), memory as a quantity."""
    from .. import format_quantity

    if isinstance(v, str):
        return v
    return f"{int(v)}m" if resource == "cpu" else format_quantity("memory", int(v))


def explain_lines(data: Mapping[str, Any], node: str) -> list[str]:
    """The lines for ``node`` from a simulation's ``to_dict()``; empty when no plugin sized it."""
    batch = {r["node"]: r for r in data.get("batchResources") or []}.get(node)
    mid = {r["node"]: r for r in data.get("midResources") or []}.get(node)
    if batch is None and mid is None:
        return []
    lines = []
    for res, (bname, mname) in _NAMES.items():
        sold = []
        if batch is not None:
            sold.append(f"{bname.split('/')[-1]} {_q(res, _amount(res, batch.get(bname)))}")
        if mid is not None:
            sold.append(f"{mname.split('/')[-1]} {_q(res, _amount(res, mid.get(mname)))}")
        degraded = [r["degraded"] for r in (batch, mid) if r is not None and r.get("degraded")]
        risk = ((batch or {}).get("risk") or {}).get(res) or ((mid or {}).get("risk") or {}).get(res)
        if degraded:
            how = f"reset: {degraded[0]}"
        elif risk is not None and "quantile" in risk:
            parts = " + ".join(f"{m} {_q(res, v)}" for m, v in risk["parts"].items())
            mid_req = ((batch or {}).get("risk") or {}).get(res, {}).get("midRequests")
            after = f", batch = A - Mid requests {_q(res, mid_req)}" if mid_req is not None else ""
            how = (f"A {_q(res, risk['amount'])}{after}; from q {_q(res, risk['quantile'])} = {parts} at "
                   f"p{risk['level'] * 100:.6g} ({risk['combination']}): capacity {_q(res, risk['capacity'])} - "
                   f"reserved {_q(res, risk['reserved'])} - unpredicted {_q(res, risk['unpredicted'])} - q; "
                   f"risk P(LS + Mid + BE > capacity) <= {risk['epsilon']:g}")
        elif risk is not None:
            how = f"A 0: {risk.get('reason', 'no distribution')}; risk budget {risk.get('epsilon', '?')}"
        else:
            how = "Koordinator's formulas"
            if batch is not None and "hpUsed" in batch:
                how += (f": batch = capacity {batch['capacity'][res]} - margin {batch['margin'][res]} - system "
                        f"{batch['systemUsed'][res]} - HP used {batch['hpUsed'][res]} ({batch['policy'][res]})")
            if mid is not None and mid.get("message"):
                how += f"; {mid['message'][res]}"
            how += "; no risk budget (the risk is not bounded)"
        lines.append(f"{node} {res}: sold {', '.join(sold)}; {how}")
    return lines


def _amount(res: str, v: Any) -> Any:
    if v is None:
        return "none"
    if res == "cpu":
        try:
            return int(v)  # batch-cpu / mid-cpu are milli-cores written as integers
        except (TypeError, ValueError):
            return v
    return v


def run(args: argparse.Namespace) -> int:
    import anyio

    from ..core.manifests import load_manifests
    from ..engines.embedded import run_simulation

    manifests = load_manifests(args.paths)
    for line in manifests.warnings():
        print(f"koordfw: warning: {line}", file=sys.stderr)
    registry = registry_from_args(args)
    result = anyio.run(lambda: run_simulation(manifests, registry))
    lines = explain_lines(result.to_dict(), args.name)
    if not lines:
        print(f"koordfw: node {args.name!r}: no batch or Mid resources were sized for it (unknown node, or no "
              "batch_resource / mid_resource plugin)", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0
