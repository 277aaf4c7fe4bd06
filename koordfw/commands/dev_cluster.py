"""``koordfw dev-cluster``: a real Kubernetes control plane on this machine, with simulated nodes and
koordfw's manager (and its webhook) and scheduler from ``deploy/``, to try koordfw on a real API server
without a cluster (``make kube-up`` runs it).

What runs: etcd, kube-apiserver, kube-controller-manager (:mod:`koordfw.testing.control_plane`), N Node
objects kept Ready (no kubelet: bound pods stay Pending), every API object of ``deploy/`` but the
Deployments and DaemonSets (their commands run here as local processes instead, each with the token of the
ServiceAccount its manifest names), the webhook configurations pointed at the local manager, and a NodeMetric
per node refreshed every 30 s (what ``koordfw agent`` would report; each node reports 10 % of its CPU and
memory in use, by the system) so the manager sells batch resources. Ctrl-C (or SIGTERM) stops everything.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..command_api import Commands
from ..core.errors import KoordfwError
from ._common import number

#: the kinds of deploy/ that would be pods (they run as local processes instead)
_WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}


def register(sub: Commands) -> None:
    p = sub.add("dev-cluster", help="run a local Kubernetes control plane with koordfw on simulated nodes",
                description="Start etcd, kube-apiserver and kube-controller-manager on loopback, simulated "
                            "nodes, deploy/'s objects and koordfw's manager (with its webhook) and scheduler "
                            "under their ServiceAccounts; print a kubeconfig; Ctrl-C stops everything.")
    p.add_argument("--dir", type=Path, help="work folder (default: a new temporary folder, removed at exit)")
    p.add_argument("--nodes", type=number(int, 0, 10_000), default=3, help="simulated nodes (default 3)")
    p.add_argument("--node-cpu", default="16", help="each node's CPU (default 16)")
    p.add_argument("--node-memory", default="64Gi", help="each node's memory (default 64Gi)")
    p.add_argument("--deploy", type=Path, default=Path("deploy"),
                   help="koordfw's manifests to apply (default ./deploy)")
    p.add_argument("--binaries", type=Path,
                   help="folder with kube-apiserver, kube-controller-manager (and etcd); default "
                        "$KUBEBUILDER_ASSETS or what scripts/kube-binaries.sh provides")
    p.add_argument("--no-koordfw", action="store_true", help="start the control plane and nodes only")
    p.set_defaults(func=run)


def _documents(folder: Path) -> list[dict[str, Any]]:
    import yaml

    if not folder.is_dir():
        raise KoordfwError(f"--deploy {folder}: not a folder (run from the checkout, or name deploy/)")
    docs: list[dict[str, Any]] = []
    for f in sorted(folder.glob("*.yaml")):  # kubectl apply -f DIR's order: file names, not recursive
        try:
            docs.extend(d for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict) and d.get("kind"))
        except yaml.YAMLError as e:
            raise KoordfwError(f"{f}: not YAML: {e}") from None
    return docs


def run(args: argparse.Namespace) -> int:
    from ..testing.control_plane import ControlPlane, ControlPlaneError, find_binaries, free_port

    docs = [] if args.no_koordfw else _documents(args.deploy)
    tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="koordfw-dev-")
    workdir = args.dir or Path(tmp.name)  # type: ignore[union-attr]
    procs: list[subprocess.Popen[bytes]] = []
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    plane = None
    try:
        print(f"starting the control plane in {workdir} ...", flush=True)
        plane = ControlPlane.start(workdir, args.binaries or find_binaries())
        nodes = [f"dev-node-{i}" for i in range(1, args.nodes + 1)]
        for n in nodes:
            plane.add_node(n, cpu=args.node_cpu, memory=args.node_memory)
        if docs:
            procs = _deploy(plane, docs, workdir, free_port)
        print(f"\nkube-apiserver {plane.url} (v1.20 API), {len(nodes)} simulated nodes")
        for name, running in plane.processes.items():
            print(f"  {name:<24} pid {running.pid}, log {running.log_path}")
        print(f"\nexport KUBECONFIG={plane.kubeconfig}\nkubectl get nodes\n\nCtrl-C stops everything.", flush=True)
        next_report = 0.0
        while not stop["now"]:
            if docs and time.monotonic() >= next_report:
                for n in nodes:
                    _report(plane, n, args.node_cpu, args.node_memory)
                next_report = time.monotonic() + 30
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                print(f"koordfw: error: a component exited ({dead[0].args!r:.200}); "
                      f"see its log in {workdir}", file=sys.stderr)
                return 1
            time.sleep(0.5)
        print("stopping ...", flush=True)
        return 0
    except ControlPlaneError as e:
        raise KoordfwError(str(e)) from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        if plane is not None:
            plane.stop()
        if tmp is not None:
            tmp.cleanup()


def _report(plane: Any, node: str, cpu: str, memory: str) -> None:
    from ..core.quantity import parse_quantity

    c, m = parse_quantity(cpu), parse_quantity(memory)
    used_cpu, used_memory = f"{int(c * 100)}m", str(int(m / 10))
    # no pods run on a simulated node: what it uses is the system's
    plane.report_node_metric(node, cpu=used_cpu, memory=used_memory, system_cpu=used_cpu, system_memory=used_memory)


def _deploy(plane: Any, docs: list[dict[str, Any]], workdir: Path, free_port: Any) -> list[subprocess.Popen[bytes]]:
    """Apply deploy/'s objects (CRDs first, workloads left out) and start the manager and the scheduler
    as local processes under their ServiceAccounts."""
    import yaml

    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    rest = [d for d in docs if d["kind"] != "CustomResourceDefinition" and d["kind"] not in _WORKLOADS]
    namespaces = [d for d in rest if d["kind"] == "Namespace"]
    webhooks = [d for d in rest if d["kind"].endswith("WebhookConfiguration")]
    for d in crds + namespaces:
        plane.apply(d)
    crt, key = plane.serving_cert("webhook")
    webhook_port = free_port()
    for d in rest:
        if d in namespaces:
            continue
        if d in webhooks:
            d = plane.webhook_at(d, f"https://127.0.0.1:{webhook_port}", crt)
        plane.apply(d)
    exe = [sys.executable, "-m", "koordfw"]
    procs = []
    manager = plane.service_account_kubeconfig("koordfw-system", "koordfw-manager")
    procs.append(_spawn(exe + ["manager", f"--kubeconfig={manager}", "--config-namespace=koordfw-system",
                               f"--health-address=127.0.0.1:{free_port()}",
                               f"--webhook-listen=127.0.0.1:{webhook_port}", f"--tls-cert-file={crt}",
                               f"--tls-private-key-file={key}"], workdir / "koordfw-manager.log"))
    profile = next((yaml.safe_load(d["data"]["profile.yaml"]) for d in rest
                    if d["kind"] == "ConfigMap" and "profile.yaml" in (d.get("data") or {})), None)
    argv = exe + ["scheduler", f"--kubeconfig={plane.service_account_kubeconfig('koordfw-system', 'koordfw-scheduler')}",
                  f"--health-address=127.0.0.1:{free_port()}"]
    if profile is not None:
        path = workdir / "scheduler-profile.yaml"
        path.write_text(yaml.safe_dump(profile))
        argv.append(f"--profile={path}")
    procs.append(_spawn(argv, workdir / "koordfw-scheduler.log"))
    for p, name in zip(procs, ("koordfw-manager", "koordfw-scheduler"), strict=True):
        print(f"  {name:<24} pid {p.pid}, log {workdir / (name + '.log')}")
    return procs


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
