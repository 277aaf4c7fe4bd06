"""Scenario through ``koordfw simulate`` (the CLI): batch overcommit plus load-aware placement.

``data/colocation.yaml``: node-full is full by requests (30 of 31 cores) but uses 4 cores; node-hot has
few requests but burns 21 cores; node-cool is in between. Batch resources (default strategy):

    node-full  batch-cpu = 32000 - 12800 - 1000 - 3000  = 15200   → 3 BE pods of 4000
    node-cool  batch-cpu = 32000 - 12800 - 1000 - 2000  = 16200   → 4 BE pods of 4000
    node-hot   batch-cpu = 32000 - 12800 - 1000 - 20000 < 0 → 0 (removed)
"""

import json
from pathlib import Path

import pytest

from koordfw.cli import main

DATA = Path(__file__).parent / "data" / "colocation.yaml"
EXAMPLES = Path(__file__).parents[3] / "examples" / "colocation"


def simulate(capsys, *extra):
    assert main(["simulate", str(DATA), "-o", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_full_but_idle_node_admits_be_pods_up_to_batch_allocatable(capsys):
    out = simulate(capsys)
    nodes = {n["name"]: n for n in out["nodes"]}
    assert nodes["node-full"]["allocatable"]["kubernetes.io/batch-cpu"] == "15200"
    assert nodes["node-full"]["allocatable"]["kubernetes.io/batch-memory"] == str(128 * 2**30 - 48103633715 - 16 * 2**30)
    assert nodes["node-cool"]["allocatable"]["kubernetes.io/batch-cpu"] == "16200"
    assert "kubernetes.io/batch-cpu" not in nodes["node-hot"]["allocatable"]
    placed = {p["name"]: p["node"] for p in out["pods"]}
    be = [placed[f"be-{i}"] for i in range(9)]
    assert be.count("node-full") == 3 and be.count("node-cool") == 4 and be.count(None) == 2
    assert nodes["node-full"]["requested"]["kubernetes.io/batch-cpu"] == "12000"
    pending = [p for p in out["pods"] if p["node"] is None]
    assert all("Insufficient kubernetes.io/batch-cpu" in p["reason"] for p in pending)
    # the node stays full by requests: its cpu requests did not move
    assert nodes["node-full"]["requested"]["cpu"] == "30"
    rows = {r["node"]: r for r in out["batchResources"]}
    assert rows["node-full"]["hpUsed"] == {"cpu": "3", "memory": "12Gi"}


def test_load_aware_steers_ls_pods_away_from_the_hot_node(capsys):
    placed = {p["name"]: p["node"] for p in simulate(capsys)["pods"]}
    assert placed["web-0"] == placed["web-1"] == "node-cool"
    # without load_aware, LeastAllocated prefers node-hot: it has the fewest requests
    placed = {p["name"]: p["node"] for p in simulate(capsys, "--disable", "load_aware")["pods"]}
    assert placed["web-0"] == placed["web-1"] == "node-hot"


def test_without_batch_resource_be_pods_have_nothing_to_run_on(capsys):
    out = simulate(capsys, "--disable", "batch_resource")
    assert all(p["node"] is None for p in out["pods"] if p["name"].startswith("be-"))


def test_node_without_metric_is_left_alone(capsys, tmp_path):
    """No NodeMetric: batch_resource keeps the node's own allocatable (a snapshot's batch-cpu survives)."""
    (tmp_path / "c.yaml").write_text("""
apiVersion: v1
kind: Node
metadata: {name: snap}
status:
  allocatable: {cpu: "8", memory: 32Gi, kubernetes.io/batch-cpu: "3000", kubernetes.io/batch-memory: 4Gi}
---
apiVersion: v1
kind: Pod
metadata: {name: be, labels: {koordinator.sh/qosClass: BE}}
spec:
  priority: 5500
  containers:
  - name: main
    resources: {requests: {kubernetes.io/batch-cpu: "2000", kubernetes.io/batch-memory: 1Gi}}
""")
    assert main(["simulate", str(tmp_path), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nodes"][0]["allocatable"]["kubernetes.io/batch-cpu"] == "3000"
    assert out["pods"][0]["node"] == "snap"


@pytest.mark.skipif(not (EXAMPLES / "20-nodemetrics.yaml").exists(), reason="example cluster not present")
def test_example_cluster_runs_be_pods_on_batch_resources(capsys):
    assert main(["simulate", str(EXAMPLES), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    batch = [p for p in out["pods"] if p["namespace"] == "batch"]
    assert batch and any(p["node"] for p in batch)
    assert any("kubernetes.io/batch-cpu" in n["allocatable"] for n in out["nodes"])
