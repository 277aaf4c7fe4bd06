"""The plain built-ins scenario of bench/throughput.py run from another git worktree, for same-session
before/after ratios (the installed entry points are this tree's: built-ins the other tree lacks are disabled).

    git worktree add /tmp/ipa-old <commit>
    .venv/bin/python bench/throughput_worktree.py /tmp/ipa-old 5000 10000
    .venv/bin/python bench/throughput_worktree.py . 5000 10000

Prints one JSON object: bench/throughput.py's figures plus ``cpu_pods_per_second`` (pods per CPU second of
the scheduling run, which a loaded machine disturbs less than wall-clock time).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    tree, nodes, pods = os.path.abspath(argv[0]), int(argv[1]), int(argv[2])
    sys.path[:0] = [tree, os.path.join(tree, "bench")]
    import throughput

    from koordfw.engines import embedded

    if not embedded.__file__.startswith(tree):
        print(f"koordfw was imported from {embedded.__file__}, not {tree}", file=sys.stderr)
        return 2
    missing = [n for n in ("node_ports", "pod_topology_spread", "inter_pod_affinity")
               if importlib.util.find_spec(f"koordfw.builtin.{n}") is None]
    if missing:
        build = throughput.build_registry
        throughput.build_registry = lambda profile, **kw: build({"disable": missing}, **kw)
    run = throughput.EmbeddedEngine.run
    cpu: dict[str, float] = {}

    async def timed(self, *a, **k):
        t0 = time.process_time()
        try:
            return await run(self, *a, **k)
        finally:
            cpu["s"] = time.process_time() - t0

    throughput.EmbeddedEngine.run = timed
    res = throughput.run(nodes, pods)
    print(json.dumps({"tree": tree, **res, "cpu_pods_per_second": round(pods / cpu["s"], 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
