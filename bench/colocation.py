"""Colocation benchmark on this machine's real cgroup v1 hierarchy: does be_suppress protect LS latency?

Layout (under a unique parent ``/sys/fs/cgroup/<ctl>/koordfw-bench-<pid>``, removed at the end)::

    kubepods/burstable/pod-ls    an aiohttp server; each request burns a fixed CPU cost (--cost-ms)
    kubepods/besteffort/pod-be   one CPU- and memory-hungry burner per CPU (cpu.shares 2, as kubelet sets)

An open-loop client sends requests at a fixed rate (--ls-util of one core / cost); latency is measured
from each request's scheduled send time, so queueing is not hidden. Phases, interleaved, --repeats times:

    alone               LS only
    unmanaged           LS + BE with Kubernetes defaults only (besteffort cpu.shares 2, no agent)
    cpuset[, +idle]     LS + BE with `koordfw agent` and be_suppress policy cpuset (with/without beCPUIdle)
    cfsQuota[, +idle]   the same with policy cfsQuota
    feedback[, +idle]   cfsQuota with be_suppress lsPressureFeedback (PSI / LS throttling AIMD), with/without
                        beCPUIdle (beyond Koordinator)
    feedback-sched+idle the same, the signal being the LS tasks' run delay (lsSchedDelay) instead of node PSI

Per phase: LS p50/p99/p99.9, p99 ratio to LS alone, BE CPU (cores), CPU left idle by LS (cores), node CPU
utilisation, and the agent's own CPU. Separately: the agent's CPU cost per round with 100 pod cgroups, with
be_suppress alone and with every node-side plugin installed (be_suppress with the feedback, llc_isolation,
eviction, cpu_burst, memory_qos, batch_resource; pods with manifests so each plugin has work).
``--plot FILE.png`` draws LS p99 / alone against BE's share of the idle CPU, one point per phase.

    sudo .venv/bin/python bench/colocation.py [--seconds 20] [--repeats 3] [--json] [--plot FILE.png]
    sudo .venv/bin/python bench/colocation.py --cost-only     # only the 100-pod agent cost
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from koordfw.testing.cgroups import make_real_cgroup, remove_real_cgroups

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
NCPU = os.cpu_count() or 1

LS_SERVER = r"""
import sys
from aiohttp import web
ITER = int(sys.argv[2])
def work():
    x = 0
    for i in range(ITER):
        x += i * i
    return x
async def handle(request):
    work()
    return web.Response(text="ok")
app = web.Application()
app.router.add_get("/", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""

BE_BURNER = r"""
buf = bytearray(64 << 20)
n = len(buf)
while True:
    for j in range(0, n, 4096):
        buf[j] = (buf[j] + 1) & 255
"""


def calibrate(cost_ms: float) -> int:
    """Loop iterations costing ``cost_ms`` of CPU time (thread time, so other load does not skew it)."""
    n = 200_000
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time()
        x = 0
        for i in range(n):
            x += i * i
        best = min(best, time.thread_time() - t0)
    return max(1, int(n * cost_ms / 1000 / best))


class Tree:
    def __init__(self) -> None:
        self.parent = f"koordfw-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.kubepods = f"{self.parent}/kubepods"
        self.ls = f"{self.kubepods}/burstable/pod-ls"
        self.be = f"{self.kubepods}/besteffort/pod-be"
        self.made: list[Path] = []

    def mkdir(self, rel: str) -> None:
        parts = rel.split("/")
        for c in CONTROLLERS:
            for k in range(1, len(parts) + 1):
                p = ROOT / c / "/".join(parts[:k])
                if p.exists():
                    continue
                make_real_cgroup(p)
                self.made.append(p)

    def build(self) -> None:
        for d in (self.ls, self.be):
            self.mkdir(d)
        self.write("cpu", f"{self.kubepods}/besteffort", "cpu.shares", "2")
        self.write("cpu", self.be, "cpu.shares", "2")

    def write(self, ctl: str, rel: str, name: str, value: str) -> None:
        (ROOT / ctl / rel / name).write_text(value)

    def read(self, ctl: str, rel: str, name: str) -> str:
        return (ROOT / ctl / rel / name).read_text().strip()

    def attach(self, rel: str, pid: int) -> None:
        for c in CONTROLLERS:
            (ROOT / c / rel / "cgroup.procs").write_text(str(pid))

    def usage_ns(self, rel: str) -> int:
        return int(self.read("cpuacct", rel, "cpuacct.usage"))

    def reset_be(self) -> None:
        """Kubernetes defaults on the besteffort QoS dir (what a stopped agent must leave)."""
        be_qos = f"{self.kubepods}/besteffort"
        self.write("cpu", be_qos, "cpu.cfs_quota_us", "-1")
        allc = self.read("cpuset", self.parent, "cpuset.cpus")
        for d in (be_qos, self.be):
            self.write("cpuset", d, "cpuset.cpus", allc)
        if (ROOT / "cpu" / be_qos / "cpu.idle").exists():
            self.write("cpu", be_qos, "cpu.idle", "0")

    def cleanup(self) -> None:
        remove_real_cgroups(self.made)


def node_busy_ns() -> int:
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return int((sum(vals[:8]) - vals[3] - vals[4]) * 1e9 / os.sysconf("SC_CLK_TCK"))


def proc_cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


async def drive(url: str, rate: float, seconds: float) -> list[float]:
    """Open-loop GETs at ``rate``/s for ``seconds``; latency (s) from each scheduled send time."""
    import aiohttp

    loop = asyncio.get_running_loop()
    lat: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def one(t_sched: float) -> None:
            async with s.get(url) as r:
                await r.read()
            lat.append(loop.time() - t_sched)

        tasks = []
        t0 = loop.time() + 0.05
        for i in range(int(rate * seconds)):
            t = t0 + i / rate
            delay = t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(t)))
        await asyncio.gather(*tasks)
    return lat


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


#: the feedback phases' lsPressureFeedback (node PSI on cgroup v1; the bench's LS pod has no CPU limit,
#: so LS throttling stays 0 and PSI drives it)
FEEDBACK = {"enable": True, "targetPressurePercent": 10, "hysteresisPercent": 5, "decreaseFactor": 0.5,
            "increasePercent": 5, "floorPercent": 5, "calmSeconds": 3}

PHASES = [
    ("alone", None),
    ("unmanaged", None),
    ("cpuset", {"cpuSuppressPolicy": "cpuset", "beCPUIdle": False}),
    ("cpuset+idle", {"cpuSuppressPolicy": "cpuset", "beCPUIdle": True}),
    ("cfsQuota", {"cpuSuppressPolicy": "cfsQuota", "beCPUIdle": False}),
    ("cfsQuota+idle", {"cpuSuppressPolicy": "cfsQuota", "beCPUIdle": True}),
    ("feedback", {"cpuSuppressPolicy": "cfsQuota", "beCPUIdle": False, "lsPressureFeedback": FEEDBACK}),
    ("feedback+idle", {"cpuSuppressPolicy": "cfsQuota", "beCPUIdle": True, "lsPressureFeedback": FEEDBACK}),
    ("feedback-sched+idle", {"cpuSuppressPolicy": "cfsQuota", "beCPUIdle": True,
                             "lsPressureFeedback": {**FEEDBACK, "lsSchedDelay": True}}),
]


def agent_config(tmp: Path, name: str, cfg: dict) -> Path:
    import yaml

    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"plugins": {"qosPlan": {"disabled": [{"name": "*"}],
                                                          "enabled": [{"name": "be_suppress"}]}},
                                 "pluginConfig": {"be_suppress": {"enable": True, **cfg}}}))
    return p


def run_phase(tree: Tree, name: str, cfg: dict | None, url: str, rate: float, seconds: float, settle: float,
              tmp: Path) -> dict:
    burners: list[subprocess.Popen] = []
    agent = None
    try:
        if name != "alone":
            for _ in range(NCPU):
                b = subprocess.Popen([sys.executable, "-c", BE_BURNER])
                tree.attach(tree.be, b.pid)
                burners.append(b)
        if cfg is not None:
            agent = subprocess.Popen([sys.executable, "-m", "koordfw", "--log-level", "error", "agent",
                                      "--cgroup-root", str(ROOT), "--kubepods", tree.kubepods,
                                      "--config", str(agent_config(tmp, name, cfg)), "--interval", "1"],
                                     stdout=subprocess.DEVNULL)
        time.sleep(settle if cfg is not None else (0.5 if burners else 0.2))
        ls0, be0, node0, t0 = tree.usage_ns(tree.ls), tree.usage_ns(tree.be), node_busy_ns(), time.monotonic()
        a0 = proc_cpu_s(agent.pid) if agent else 0.0
        lat = asyncio.run(drive(url, rate, seconds))
        dt = time.monotonic() - t0
        ls_cores = (tree.usage_ns(tree.ls) - ls0) / 1e9 / dt
        be_cores = (tree.usage_ns(tree.be) - be0) / 1e9 / dt
        node_util = (node_busy_ns() - node0) / 1e9 / dt / NCPU
        agent_cores = (proc_cpu_s(agent.pid) - a0) / dt if agent else 0.0
        knobs = {"quota": tree.read("cpu", f"{tree.kubepods}/besteffort", "cpu.cfs_quota_us"),
                 "cpuset": tree.read("cpuset", f"{tree.kubepods}/besteffort", "cpuset.cpus")}
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)  # the agent restores the BE knobs on SIGTERM
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
        for b in burners:
            b.kill()
            b.wait()
    restored = tree.read("cpu", f"{tree.kubepods}/besteffort", "cpu.cfs_quota_us") == "-1"
    tree.reset_be()
    return {"name": name, "managed": cfg is not None, "lat": lat, "ls_cores": ls_cores, "be_cores": be_cores,
            "node_util": node_util, "agent_cores": agent_cores, "knobs": knobs, "restored": restored}


#: every node-side plugin and a config giving each of them work (llc_isolation idles without resctrl)
ALL_NODE_PLUGINS = ("be_suppress", "llc_isolation", "eviction", "cpu_burst", "memory_qos", "batch_resource")
ALL_NODE_CONFIG = {
    "be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                    "lsPressureFeedback": {"enable": True}},
    "llc_isolation": {"LS": {"enable": True}, "BE": {"enable": True, "catRangeEndPercent": 30, "mbaPercent": 50}},
    "eviction": {"memoryEvictThresholdPercent": 70, "cpuEvictEnable": True,
                 "cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 80},
    "cpu_burst": {"policy": "auto"},
    "memory_qos": {"lsClass": {"enable": True}, "beClass": {"enable": True}},
}


def _pod_manifests(pods: list[tuple[str, str, str]]) -> str:
    """Pod manifests for (uid, level, container id): LS burstable pods with CPU limits, BE pods with
    batch-cpu/batch-memory, each with its container's status."""
    import yaml

    docs = []
    for i, (uid, level, cid) in enumerate(pods):
        if level == "burstable":
            labels = {"koordinator.sh/qosClass": "LS"}
            res = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
        else:
            labels = {"koordinator.sh/qosClass": "BE"}
            res = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
                   "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}}
        docs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"p{i}", "namespace": "bench", "uid": uid, "labels": labels},
                     "spec": {"nodeName": "bench", "containers": [{"name": "c", "resources": res}]},
                     "status": {"phase": "Running", "containerStatuses": [
                         {"name": "c", "containerID": f"containerd://{cid}", "ready": True}]}})
    return yaml.safe_dump_all(docs)


def agent_cost_100_pods(rounds: int, plugins: tuple[str, ...] = ("be_suppress",), config: dict | None = None) -> dict:
    """CPU time of one agent round with 100 pod cgroups (1 container each), on real cgroups, with ``plugins``
    installed (their ``pluginConfig`` ``config``; default be_suppress cfsQuota alone).

    The rounds run back to back, but on a virtual clock advanced by the agent's interval (1 s) before each,
    so whatever the agent and its plugins do by time (CPU rates, windows, koordlet's reconcile intervals,
    the executor's 60 s re-reads) happens as in ``rounds`` seconds of a live agent."""
    import anyio

    from koordfw.agent.cgroups import CgroupLayout
    from koordfw.agent.executor import Executor
    from koordfw.agent.loop import Agent
    from koordfw.core.clock import VirtualClock
    from koordfw.core.plugins import Registry
    from koordfw.core.profile import profile_from_dict

    tree = Tree()
    config = config or {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}
    try:
        pods = []
        for i in range(100):
            level = "besteffort" if i % 2 else "burstable"
            uid, cid = str(uuid.UUID(int=i)), f"{i:064x}"
            tree.mkdir(f"{tree.kubepods}/{level}/pod{uid}/{cid}")
            pods.append((uid, level, cid))
        prof = profile_from_dict({"plugins": {"qosPlan": {"disabled": [{"name": "*"}], "enabled": list(plugins)}},
                                  "pluginConfig": config})
        reg = Registry(prof).load(only=set(plugins))
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "pods.yaml").write_text(_pod_manifests(pods))
            clock = VirtualClock(time.time())
            agent = Agent(reg, CgroupLayout(ROOT, 1, "cgroupfs", tree.kubepods), Executor({"cgroup": ROOT}),
                          node_name="bench", pods_from=tmp, clock=clock)
            planned: list[int] = []

            async def count(evictions: list, ns: object) -> None:  # no API server: count, do not log each
                planned.append(len(evictions))

            agent.evictor = count

            async def go() -> None:
                await agent.startup()
                await agent.run_once()  # warm-up (first samples)
                agent.cpu_seconds, agent.rounds = 0.0, 0
                for _ in range(rounds):
                    clock.advance(agent.interval)
                    await agent.run_once()
                await agent.shutdown()

            anyio.run(go)
        per_round = agent.cpu_seconds / max(agent.rounds, 1)
        return {"plugins": list(plugins), "pods": len(agent.node_state.pods) if agent.node_state else 0,
                "rounds": agent.rounds, "cpu_ms_per_round": per_round * 1000,
                "percent_of_one_core_at_1s": per_round * 100, "evictions_planned": sum(planned),
                "load_average": list(os.getloadavg())}
    finally:
        tree.cleanup()


def agent_costs(rounds: int) -> dict:
    return {"be_suppress": agent_cost_100_pods(rounds),
            "all_node_plugins": agent_cost_100_pods(rounds, ALL_NODE_PLUGINS, ALL_NODE_CONFIG)}


def plot(phases: list[dict], path: str) -> None:
    """LS p99 / alone against BE's share of the idle CPU, one labelled point per phase (matplotlib Agg)."""
    try:
        import matplotlib
    except ImportError:
        print("--plot needs matplotlib: .venv/bin/pip install -e '.[bench]' (make install does)", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for p in phases:
        ax.scatter(p["be_share_of_idle"] * 100, p["ls_p99_ratio"], s=30)
        ax.annotate(p["name"], (p["be_share_of_idle"] * 100, p["ls_p99_ratio"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    ax.axhline(1.1, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("BE CPU, % of the CPU LS leaves idle")
    ax.set_ylabel("LS p99 / LS alone")
    ax.set_title(f"colocation on real cgroups ({NCPU} CPUs, {os.uname().release})", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _print_cost(cost: dict) -> None:
    for key, c in cost.items():
        print(f"agent cost, {c['pods']} pod cgroups, {key} ({', '.join(c['plugins'])}): {c['cpu_ms_per_round']:.2f} "
              f"ms CPU per round = {c['percent_of_one_core_at_1s']:.2f}% of one core at a 1 s interval "
              f"(load average {c['load_average'][0]:.2f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="measured seconds per phase (default 20)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repetitions of all phases (default 3)")
    ap.add_argument("--cost-ms", type=float, default=3.0, help="CPU cost of one LS request (default 3 ms)")
    ap.add_argument("--ls-util", type=float, default=0.3, help="LS load as a fraction of one core (default 0.3)")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds for the agent to act before measuring")
    ap.add_argument("--agent-rounds", type=int, default=20, help="rounds for the 100-pod agent cost")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--plot", metavar="FILE.png", help="draw LS p99 ratio against BE share, one point per phase")
    ap.add_argument("--cost-only", action="store_true", help="only the 100-pod agent cost (both plugin sets)")
    args = ap.parse_args(argv)
    from koordfw.log import configure

    configure("console", "warning")
    if not (ROOT / "cpu" / "cgroup.procs").exists():
        print(f"needs cgroup v1 controllers at {ROOT}/<controller> (and root)", file=sys.stderr)
        return 2
    if args.cost_only:
        cost = agent_costs(args.agent_rounds)
        if args.json:
            json.dump({"machine": {"cpus": NCPU, "kernel": os.uname().release}, "agent_cost_100_pods": cost},
                      sys.stdout, indent=2)
            print()
        else:
            _print_cost(cost)
        return 0
    iters = calibrate(args.cost_ms)
    rate = args.ls_util * 1000 / args.cost_ms
    tree = Tree()
    server = None
    runs: list[dict] = []
    try:
        tree.build()
        port = 20000 + os.getpid() % 20000
        server = subprocess.Popen([sys.executable, "-c", LS_SERVER, str(port), str(iters)])
        tree.attach(tree.ls, server.pid)
        url = f"http://127.0.0.1:{port}/"
        import urllib.request

        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        asyncio.run(drive(url, rate, 1.0))  # warm-up
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repeats):
                for name, cfg in PHASES:
                    runs.append(run_phase(tree, name, cfg, url, rate, args.seconds, args.settle, Path(tmp)))
                    print(f"  repeat {r + 1}/{args.repeats} {name}: p99 {pct(runs[-1]['lat'], 0.99):.1f} ms, "
                          f"BE {runs[-1]['be_cores']:.2f} cores", file=sys.stderr)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        time.sleep(0.1)
        tree.cleanup()
    cost = agent_costs(args.agent_rounds)

    def agg(name: str) -> dict:
        rs = [x for x in runs if x["name"] == name]
        lat = [v for x in rs for v in x["lat"]]
        # per-repeat p99s show the spread between repetitions
        return {"name": name, "managed": rs[0]["managed"], "ls_p50_ms": pct(lat, 0.5), "ls_p99_ms": pct(lat, 0.99),
                "ls_p999_ms": pct(lat, 0.999), "ls_p99_per_repeat_ms": [round(pct(x["lat"], 0.99), 2) for x in rs],
                "be_cores": statistics.mean(x["be_cores"] for x in rs),
                "idle_cores_left_by_ls": statistics.mean(NCPU - x["ls_cores"] for x in rs),
                "node_cpu_util": statistics.mean(x["node_util"] for x in rs),
                "agent_cores": statistics.mean(x["agent_cores"] for x in rs),
                "be_knobs_seen": rs[-1]["knobs"], "restored_on_stop": all(x["restored"] for x in rs)}

    phases = [agg(n) for n, _ in PHASES]
    alone = phases[0]
    for p in phases:
        p["ls_p99_ratio"] = p["ls_p99_ms"] / alone["ls_p99_ms"]
        p["be_share_of_idle"] = p["be_cores"] / p["idle_cores_left_by_ls"] if p["idle_cores_left_by_ls"] else 0.0
    result = {"machine": {"cpus": NCPU, "kernel": os.uname().release},
              "settings": {"seconds": args.seconds, "repeats": args.repeats, "cost_ms": args.cost_ms,
                           "rate_per_s": rate, "iterations_per_request": iters},
              "phases": phases, "agent_cost_100_pods": cost}
    if args.plot:
        plot(phases, args.plot)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"LS: {rate:.0f} req/s × {args.cost_ms:g} ms CPU; BE: {NCPU} burners; {args.repeats} × {args.seconds:g} s "
          f"per phase; {NCPU} CPUs, kernel {os.uname().release}")
    hdr = (f"{'phase':<20}{'p50 ms':>8}{'p99 ms':>8}{'p99.9 ms':>9}{'p99/alone':>10}{'BE cores':>9}"
           f"{'BE/idle':>8}{'node util':>10}{'agent %':>8}  p99 per repeat")
    print(hdr)
    for p in phases:
        print(f"{p['name']:<20}{p['ls_p50_ms']:>8.2f}{p['ls_p99_ms']:>8.2f}{p['ls_p999_ms']:>9.2f}"
              f"{p['ls_p99_ratio']:>10.2f}{p['be_cores']:>9.2f}{p['be_share_of_idle']:>8.0%}"
              f"{p['node_cpu_util']:>10.0%}{p['agent_cores'] * 100:>8.2f}  {p['ls_p99_per_repeat_ms']}")
    _print_cost(cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
