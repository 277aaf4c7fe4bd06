"""``koordfw dev-cluster`` (``make kube-up``): a local control plane with koordfw from deploy/, a kubeconfig
printed, batch resources sold on the simulated nodes, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from realkube_testkit import wait_until

from koordfw.core.quantity import parse_quantity

ROOT = Path(__file__).resolve().parents[2]


def test_dev_cluster_runs_koordfw_and_stops_cleanly(tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "koordfw", "dev-cluster", "--nodes", "2", "--dir",
                                 str(tmp_path / "work")], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        text = wait_until(lambda: "KUBECONFIG=" in out.read_text() and out.read_text(), timeout=90,
                          what="the kubeconfig line")
        kubeconfig = re.search(r"export KUBECONFIG=(\S+)", text).group(1)
        env = {**os.environ, "KUBECONFIG": kubeconfig}

        def allocatable() -> dict:
            r = subprocess.run(["kubectl", "get", "nodes", "-o", "json"], env=env, capture_output=True, text=True)
            if r.returncode:
                return {}
            return {n["metadata"]["name"]: n["status"]["allocatable"] for n in json.loads(r.stdout)["items"]}

        nodes = wait_until(lambda: (a := allocatable()) and all("kubernetes.io/batch-cpu" in v for v in a.values())
                           and a, timeout=60, what="the manager's batch resources on every node")
        assert sorted(nodes) == ["dev-node-1", "dev-node-2"]
        # 16 cores, 10 % used, 40 % margin kept: 16 - 6.4 - 1.6 = 8 cores; the system reports nothing
        assert parse_quantity(nodes["dev-node-1"]["kubernetes.io/batch-cpu"]) == 8000
        pids = [int(p) for p in re.findall(r"pid (\d+)", text)]
        assert len(pids) == 5  # manager, scheduler, etcd, kube-apiserver, kube-controller-manager
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    assert rc == 0, out.read_text()[-2000:]
    time.sleep(0.5)
    alive = [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in Path(f"/proc/{p}/status").read_text()]
    assert alive == [], f"left running: {alive}"
