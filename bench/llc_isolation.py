"""Cost of one llc_isolation round on a busy node: collect (read the fake resctrl + cgroup trees)
and qos_plan (pure), first round (everything to write) and steady state (nothing to write).

    python bench/llc_isolation.py                       # 110 pods x 20 threads, 2 cache ids
    python bench/llc_isolation.py --pods 250 --threads 50 --json

The trees are koordfw.testing's faithful fakes (``koordfw.testing.resctrl``) on tmpfs-like local disk,
so collect measures real file reads.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from koordfw_llc_isolation.config import LLCIsolationArgs, ResctrlQOS
from koordfw_llc_isolation.plugin import LLCIsolation

from koordfw.agent.executor import Executor
from koordfw.core.model import make_pod
from koordfw.core.nodestate import NodeState, PodState
from koordfw.testing.resctrl import FakeResctrl

QOS = (("LSR", "Guaranteed", ""), ("LS", "Burstable", "burstable/"), ("BE", "BestEffort", "besteffort/"))


def build(tmp: Path, pods: int, threads: int, seed: int):
    rng = random.Random(seed)
    states, pids = [], [1]
    next_pid = 1000
    cgroot = tmp / "cgroup"
    for i in range(pods):
        qos, kube_qos, sub = QOS[rng.randrange(3)]
        uid = f"{i:08x}-0000-0000-0000-000000000000"
        d = f"kubepods/{sub}pod{uid}"
        for c in range(2):
            n = threads // 2
            cdir = cgroot / "cpu" / d / f"c{c}"
            cdir.mkdir(parents=True)
            ids = list(range(next_pid, next_pid + n))
            next_pid += n
            pids += ids
            (cdir / "tasks").write_text("".join(f"{p}\n" for p in ids))
        pod = make_pod(f"p{i}", labels={"koordinator.sh/qosClass": qos})
        states.append(PodState(uid=uid, pod=pod, qos=qos, kube_qos=kube_qos, cgroup_dir=d))
    fake = FakeResctrl(tmp / "resctrl", pids=pids, num_closids=16)
    handle = SimpleNamespace(roots={"resctrl": str(fake.root), "cgroup": str(cgroot), "proc": str(fake.proc_root)})
    return fake, handle, tuple(states), Executor({"resctrl": fake.root, "cgroup": cgroot})


def timed(fn, repeat: int) -> tuple[float, object]:
    samples, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=110)
    ap.add_argument("--threads", type=int, default=20, help="threads per pod (split over 2 containers)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    args = LLCIsolationArgs(LSR=ResctrlQOS(enable=True), LS=ResctrlQOS(enable=True), BE=ResctrlQOS(enable=True))
    with tempfile.TemporaryDirectory() as d:
        fake, handle, pods, executor = build(Path(d), a.pods, a.threads, a.seed)
        plugin = LLCIsolation()
        plugin.startup(args=args, handle=handle)

        def state():
            ns = NodeState(name="bench", pods=pods)
            ns.metrics.update(plugin.collect(node_state=ns, args=args, handle=handle) or {})
            return ns

        collect_ms, ns = timed(state, a.repeat)
        plan_first_ms, writes = timed(lambda: plugin.qos_plan(node_state=ns, args=args, handle=handle), a.repeat)
        dry = Executor(executor.roots, dry_run=True)
        t0 = time.perf_counter()
        dry.apply(writes)
        apply_ms = (time.perf_counter() - t0) * 1000
        # reach the steady state through the fake kernel in bulk (one comma-separated tasks write per
        # group, as Linux >= 6.2 accepts), untimed: the fake's speed is not the plugin's
        by_file: dict[str, list[str]] = {}
        for w in writes:
            by_file.setdefault(w.path, []).append(w.value)
        for path, values in by_file.items():
            group, name = path.split("/")
            if group not in fake.groups():
                fake.mkdir(group)
            if name == "tasks":
                fake.write(group, "tasks", ",".join(values))
            else:
                for v in values:
                    fake.write(group, "schemata", v)
        collect2_ms, ns2 = timed(state, a.repeat)
        plan_steady_ms, steady = timed(lambda: plugin.qos_plan(node_state=ns2, args=args, handle=handle), a.repeat)
    out = {"pods": a.pods, "threads": a.pods * a.threads, "first_round_writes": len(writes or []),
           "steady_writes": len(steady or []), "collect_ms": round(collect_ms, 2),
           "plan_first_ms": round(plan_first_ms, 2), "executor_dry_run_first_ms": round(apply_ms, 1),
           "collect_steady_ms": round(collect2_ms, 2), "plan_steady_ms": round(plan_steady_ms, 2)}
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:28s} {v}")


if __name__ == "__main__":
    main()
