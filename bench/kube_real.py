"""kube-scheduler v1.20.2 and ``koordfw scheduler``, each alone, binding the same pods on the same simulated
nodes through the same real kube-apiserver (issue 30's "Speed, side by side").

    python bench/kube_real.py                          # 1,000 nodes, 10,000 pods (the issue's first row)
    python bench/kube_real.py --nodes 5000             # the second row
    python bench/kube_real.py --nodes 200 --pods 1000  # a quick check
    python bench/kube_real.py --json --py-spy          # machine-readable; where koordfw's time goes

For each scheduler a fresh control plane (etcd + kube-apiserver from ``koordfw.testing.control_plane``; no
controller-manager, as kube's scheduler_perf) gets the nodes (scheduler_perf's node-default: 4 cpu, 32Gi,
110 pods; Ready, untainted, written concurrently) and then every pod (scheduler_perf's pod-default: 100m,
500Mi) in one namespace, with that scheduler's own ``schedulerName``; only then does the scheduler start,
as the admin, with the client QPS/burst raised to the same values (``--qps``/``--burst``, default 5000/5000:
kube-scheduler's ``clientConnection.qps/burst``, koordfw's ``--kube-api-qps/--kube-api-burst``). A watch
notes each pod's binding. Reported per scheduler:

* pods/s from the first pod created to the last pod bound, and from the scheduler's start to the last bind
  (the issue's ratio is the first);
* start-up: process start to the first bind (kube-scheduler), and for koordfw also to ``/readyz`` (its
  caches synced);
* API round trips during the run, by verb and resource (the API server's ``apiserver_request_total``,
  before and after; this bench's own watch is one of them);
* for koordfw, its ``/metrics`` (scheduling attempts, time in scheduling cycles) and, with ``--py-spy``,
  the functions its process spent its samples in (py-spy must be installed: ``pip install py-spy``).

Binaries: ``$KUBEBUILDER_ASSETS`` or ``scripts/kube-binaries.sh`` (as the tests). etcd runs with
``--unsafe-no-fsync``: this measures the schedulers, not the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio

from koordfw.testing.control_plane import ControlPlane, free_port

NS = "bench"
KUBE_NAME = "bench-kube-scheduler"
KOORDFW_NAME = "bench-koordfw-scheduler"
NODE_RES = {"cpu": "4", "memory": "32Gi", "pods": "110"}


# -- the cluster ------------------------------------------------------------------------------------------
def node_obj(name: str) -> dict:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
            "spec": {},
            # a Node's status may be given on create (kube's node strategy keeps it)
            "status": {"capacity": NODE_RES, "allocatable": NODE_RES,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": now, "lastTransitionTime": now}],
                       "nodeInfo": {"kubeletVersion": "v1.20.2", "architecture": "amd64", "operatingSystem": "linux",
                                    "containerRuntimeVersion": "simulated", "kernelVersion": "", "osImage": "",
                                    "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}}}


def pod_obj(i: int, scheduler: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{i:06d}", "namespace": NS},
            "spec": {"schedulerName": scheduler, "automountServiceAccountToken": False,
                     "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9",
                                     "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}}


async def gather(n: int, fn: Any, concurrency: int, progress: Any = None) -> None:
    """Call ``await fn(i)`` for i in range(n), ``concurrency`` at a time."""
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            await fn(i)
            if progress:
                progress()

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)


async def populate(plane: ControlPlane, args: argparse.Namespace, scheduler: str, ui: Any) -> float:
    """Nodes, the namespace, then the pods; returns the time the first pod was created."""
    async with plane.client() as c:
        async def add_node(i: int) -> None:
            name = f"node-{i:05d}"
            await c.request("POST", "/api/v1/nodes", body=node_obj(name))
            # admission (TaintNodesByCondition) puts node.kubernetes.io/not-ready on every new node
            await c.request("PATCH", f"/api/v1/nodes/{name}", body={"spec": {"taints": None}},
                            content_type="application/merge-patch+json")

        with ui.task(f"{args.nodes} nodes", args.nodes) as advance:
            await gather(args.nodes, add_node, args.concurrency, advance)
        await c.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": NS}})
        # no controller-manager: the ServiceAccount admission plugin needs the default ServiceAccount
        await c.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts",
                        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"},
                              "automountServiceAccountToken": False})
        t0 = time.time()

        async def add_pod(i: int) -> None:
            await c.request("POST", f"/api/v1/namespaces/{NS}/pods", body=pod_obj(i, scheduler))

        with ui.task(f"{args.pods} pods", args.pods) as advance:
            await gather(args.pods, add_pod, args.concurrency, advance)
    return t0


# -- API server metrics -------------------------------------------------------------------------------------
_REQ = re.compile(r'^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$')


def api_requests(plane: ControlPlane) -> Counter[str]:
    """``verb resource[/subresource]`` -> requests answered so far (kube-apiserver's own counter)."""
    text = plane.request("GET", "/metrics", raw=True)
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = _REQ.match(line)
        if not m:
            continue
        labels = dict(kv.split("=", 1) for kv in re.findall(r'\w+="[^"]*"', m.group(1)))
        labels = {k: v.strip('"') for k, v in labels.items()}
        res = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        out[f"{labels.get('verb', '?')} {res}"] += int(float(m.group(2)))
    return out


# -- the schedulers ---------------------------------------------------------------------------------------
def kube_scheduler_config(args: argparse.Namespace) -> dict:
    return {"apiVersion": "kubescheduler.config.k8s.io/v1beta1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"qps": args.qps, "burst": args.burst},
            "leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": KUBE_NAME}]}


def start_koordfw(plane: ControlPlane, args: argparse.Namespace, workdir: Path) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    log = workdir / "koordfw-scheduler.log"
    argv = [sys.executable, "-m", "koordfw", "scheduler", f"--kubeconfig={plane.kubeconfig}",
            f"--scheduler-name={KOORDFW_NAME}", f"--kube-api-qps={args.qps}", f"--kube-api-burst={args.burst}",
            f"--health-address=127.0.0.1:{port}", *args.koordfw_arg]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return proc, port, log


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def koordfw_metrics(port: int) -> dict[str, float]:
    """The scheduler's own counters from /metrics: attempts by result, time in scheduling cycles."""
    out: dict[str, float] = {}
    with suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(("koordfw_schedule_attempts_total", "koordfw_scheduling_cycle_seconds_sum",
                                "koordfw_scheduling_cycle_seconds_count")):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
    return out


def py_spy_top(raw: Path, top: int = 25) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks (``--format raw``)."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        total += k
        frames = [re.sub(r" \(.*?/site-packages/| \(/work/main/", " (", f) for f in stack.split(";")]
        if frames:
            own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    pct = (lambda c: [(f, round(100 * v / total, 1)) for f, v in c.most_common(top)]) if total else (lambda c: [])
    return {"samples": total, "self": pct(own), "inclusive": pct(incl)}


async def watch_binds(plane: ControlPlane, n: int, done: dict[str, float], stop: anyio.Event) -> None:
    """Note the time each pod of the namespace is first seen with ``spec.nodeName``."""
    async with plane.client() as c:
        listing = await c.request("GET", f"/api/v1/namespaces/{NS}/pods", params={"limit": 500})
        rv = listing["metadata"]["resourceVersion"]
        for p in listing["items"]:
            if p["spec"].get("nodeName"):
                done.setdefault(p["metadata"]["name"], time.time())
        while len(done) < n and not stop.is_set():
            async for ev in c.watch(f"/api/v1/namespaces/{NS}/pods", {"resourceVersion": rv,
                                                                      "allowWatchBookmarks": True},
                                    timeout=600):
                obj = ev.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                if ev.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName"):
                    done.setdefault(obj["metadata"]["name"], time.time())
                if len(done) >= n:
                    break


async def run_one(which: str, args: argparse.Namespace, ui: Any) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"kube-real-{which}-"))
    plane = ControlPlane.start(workdir, controller_manager=False)
    proc: subprocess.Popen | None = None
    spy: subprocess.Popen | None = None
    try:
        name = KUBE_NAME if which == "kube-scheduler" else KOORDFW_NAME
        t_create = await populate(plane, args, name, ui)
        before = api_requests(plane)
        done: dict[str, float] = {}
        stop = anyio.Event()
        result: dict[str, Any] = {"scheduler": which, "nodes": args.nodes, "pods": args.pods}
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_binds, plane, args.pods, done, stop)
            await anyio.sleep(0.5)  # the watch is open
            t_start = time.time()
            port = 0
            if which == "kube-scheduler":
                plane.start_scheduler(kube_scheduler_config(args), name="bench-kube-scheduler", timeout=120)
            else:
                proc, port, log = start_koordfw(plane, args, workdir)
                if args.py_spy:
                    spy_out = workdir / "py-spy.txt"
                    spy = subprocess.Popen([args.py_spy_bin, "record", "--pid", str(proc.pid), "--format", "raw",
                                            "--rate", "50", "--nonblocking", "-o", str(spy_out)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ready_at = None
            with ui.task(f"{which}: binding", args.pods) as advance:
                seen = 0
                deadline = time.monotonic() + args.timeout
                while len(done) < args.pods:
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(f"koordfw scheduler exited with {proc.returncode}: "
                                           + (workdir / "koordfw-scheduler.log").read_text()[-3000:])
                    if port and ready_at is None and http_ok(f"http://127.0.0.1:{port}/readyz"):
                        ready_at = time.time()
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{which}: {len(done)}/{args.pods} bound after {args.timeout:.0f} s "
                                           f"(logs in {workdir})")
                    advance(len(done) - seen)
                    seen = len(done)
                    await anyio.sleep(0.05)
                advance(len(done) - seen)
            stop.set()
            tg.cancel_scope.cancel()
        t_last, t_first = max(done.values()), min(done.values())
        after = api_requests(plane)
        # both write a Scheduled event per pod; how far behind the bindings are they?
        events_at_last_bind = after.get("POST events", 0) - before.get("POST events", 0)
        t_events = None
        events_deadline = time.monotonic() + 180
        while time.monotonic() < events_deadline:
            written = api_requests(plane).get("POST events", 0) - before.get("POST events", 0)
            if written >= args.pods:
                t_events = time.time()
                break
            await anyio.sleep(0.25)
        calls = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
        result.update({
            "pods_per_s_from_first_create": round(args.pods / (t_last - t_create), 1),
            "pods_per_s_from_start": round(args.pods / (t_last - t_start), 1),
            "create_to_last_bind_s": round(t_last - t_create, 2), "start_to_last_bind_s": round(t_last - t_start, 2),
            "start_to_first_bind_s": round(t_first - t_start, 2),
            "first_to_last_bind_s": round(t_last - t_first, 2),
            "api_requests": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
            "api_requests_total": sum(calls.values()),
            "events_at_last_bind": events_at_last_bind,
            "start_to_last_event_s": None if t_events is None else round(t_events - t_start, 2)})
        if ready_at is not None:
            result["start_to_caches_synced_s"] = round(ready_at - t_start, 2)
        if port:
            result["koordfw_metrics"] = koordfw_metrics(port)
        if spy is not None:
            assert proc is not None
            os.kill(proc.pid, signal.SIGTERM)  # py-spy writes its file when its target exits
            with suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            with suppress(subprocess.TimeoutExpired):
                spy.wait(20)
            raw = workdir / "py-spy.txt"
            if raw.exists():
                result["py_spy"] = py_spy_top(raw)
        return result
    finally:
        if spy is not None and spy.poll() is None:
            spy.terminate()
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        plane.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


# -- output -----------------------------------------------------------------------------------------------
class Ui:
    """A rich progress bar on a terminal (unless --json); nothing otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.progress = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), transient=True)

    def __enter__(self) -> Ui:
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress:
            self.progress.stop()

    def task(self, what: str, total: int) -> Any:
        ui = self

        class _Task:
            def __enter__(self) -> Any:
                if ui.progress is None:
                    return lambda n=1: None
                tid = ui.progress.add_task(what, total=total)
                self.tid = tid
                return lambda n=1: ui.progress.advance(tid, n)

            def __exit__(self, *exc: object) -> None:
                if ui.progress is not None:
                    ui.progress.remove_task(self.tid)
        return _Task()


def table(results: list[dict[str, Any]]) -> str:
    rows = [("scheduler", "pods/s (create→last bind)", "pods/s (start→last bind)", "start→first bind s",
             "API requests", "events at last bind", "start→last event s")]
    for r in results:
        rows.append((r["scheduler"], str(r["pods_per_s_from_first_create"]), str(r["pods_per_s_from_start"]),
                     str(r["start_to_first_bind_s"]), str(r["api_requests_total"]), str(r["events_at_last_bind"]),
                     str(r["start_to_last_event_s"] or "> 180 after")))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(row)) for row in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000, help="simulated nodes (default 1000; the issue: 1000 and 5000)")
    ap.add_argument("--pods", type=int, default=10000, help="pods (default 10000)")
    ap.add_argument("--qps", type=int, default=5000, help="client QPS of both schedulers (default 5000)")
    ap.add_argument("--burst", type=int, default=5000, help="client burst of both schedulers (default 5000)")
    ap.add_argument("--only", choices=("kube-scheduler", "koordfw"), help="run one scheduler only")
    ap.add_argument("--concurrency", type=int, default=64, help="concurrent requests while populating (default 64)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up on a run after SECONDS (default 1800)")
    ap.add_argument("--py-spy", action="store_true", help="sample the koordfw scheduler with py-spy (where time goes)")
    ap.add_argument("--koordfw-arg", action="append", default=[], metavar="ARG",
                    help="an extra argument for `koordfw scheduler` (repeatable), e.g. --koordfw-arg=--profile=p.yaml")
    ap.add_argument("--keep", action="store_true", help="keep the work folders (logs, etcd data)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    args.py_spy_bin = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if args.py_spy and not Path(args.py_spy_bin).exists():
        ap.error("--py-spy: py-spy is not installed (pip install py-spy)")
    which = [args.only] if args.only else ["kube-scheduler", "koordfw"]
    results = []
    with Ui(sys.stderr.isatty() and not args.json) as ui:
        for w in which:
            results.append(anyio.run(run_one, w, args, ui))
    out: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "qps": args.qps, "burst": args.burst,
                           "cpus": os.cpu_count(), "results": results}
    if len(results) == 2:
        k, f = results
        out["ratio_koordfw_to_kube_from_first_create"] = round(
            f["pods_per_s_from_first_create"] / k["pods_per_s_from_first_create"], 2)
        out["ratio_koordfw_to_kube_from_start"] = round(f["pods_per_s_from_start"] / k["pods_per_s_from_start"], 2)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.nodes} nodes, {args.pods} pods, client QPS/burst {args.qps}/{args.burst}, {os.cpu_count()} CPUs")
    print(table(results))
    if "ratio_koordfw_to_kube_from_first_create" in out:
        print(f"koordfw / kube-scheduler: {out['ratio_koordfw_to_kube_from_first_create']}x (from first create), "
              f"{out['ratio_koordfw_to_kube_from_start']}x (from scheduler start)")
    for r in results:
        print(f"\n{r['scheduler']}: API requests during the run: "
              + ", ".join(f"{k} {v}" for k, v in list(r["api_requests"].items())[:8]))
        if "start_to_caches_synced_s" in r:
            print(f"  caches synced {r['start_to_caches_synced_s']} s after start")
        if r.get("koordfw_metrics"):
            print("  " + ", ".join(f"{k} {v:g}" for k, v in r["koordfw_metrics"].items()))
        if r.get("py_spy"):
            print(f"  py-spy ({r['py_spy']['samples']} samples), most self time:")
            for f, p in r["py_spy"]["self"][:15]:
                print(f"    {p:5.1f}%  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
