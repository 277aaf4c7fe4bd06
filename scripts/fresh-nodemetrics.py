#!/usr/bin/env python3
"""Rewrite the ``status.updateTime`` of NodeMetrics to now, so that a live cluster reads them as fresh.

The example NodeMetrics (``examples/colocation/20-nodemetrics.yaml``) carry the date they were written;
``koordfw simulate`` starts its clock there, but a live scheduler compares them with the wall clock and
load_aware drops nodes whose metric is older than its expiration (180 s by default). Usage::

    python3 scripts/fresh-nodemetrics.py examples/colocation/20-nodemetrics.yaml            # print them
    python3 scripts/fresh-nodemetrics.py --apply examples/colocation/20-nodemetrics.yaml    # and apply them

``--apply`` runs ``kubectl apply -f -`` (creates the objects; the status is a subresource the create
ignores) and then ``kubectl patch nodemetric NAME --subresource=status --type=merge`` per object (kubectl
1.24 or newer). Run it again within the expiration, or run the agent, which reports real ones.
Other documents in the files are printed and applied unchanged. Needs PyYAML (installed with koordfw).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys

import yaml


def refresh(docs: list, now: str) -> list:
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "NodeMetric":
            d.setdefault("status", {})["updateTime"] = now
    return docs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files holding NodeMetrics")
    p.add_argument("--apply", action="store_true", help="apply them with kubectl and write their status")
    p.add_argument("--now", help="the time to write (RFC 3339; default: the current time)")
    args = p.parse_args(argv)
    now = args.now or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    docs = []
    for f in args.files:
        with open(f, encoding="utf-8") as fh:
            docs += [d for d in yaml.safe_load_all(fh) if d is not None]
    text = yaml.safe_dump_all(refresh(docs, now), sort_keys=False)
    if not args.apply:
        sys.stdout.write(text)
        return 0
    subprocess.run(["kubectl", "apply", "-f", "-"], input=text.encode(), check=True)
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "NodeMetric":
            subprocess.run(["kubectl", "patch", "nodemetric", d["metadata"]["name"], "--subresource=status",
                            "--type=merge", "-p", json.dumps({"status": d["status"]})], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
