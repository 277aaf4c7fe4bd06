"""``koordfw simulate`` reads the manager's inputs: the slo-controller-config ConfigMap (Koordinator's
ColocationCfg) drives batch resources, and a node with a Device but no device allocatable gets the device
resources derived as koord-manager does, so GPU-share pods schedule there."""

from __future__ import annotations

import json

import pytest

from koordfw.cli import main

G = 2**30

NODES = """
apiVersion: v1
kind: Node
metadata: {name: gpu-node, labels: {pool: gpu}}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
---
apiVersion: v1
kind: Node
metadata: {name: cpu-node}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
---
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata: {name: gpu-node}
spec:
  devices:
  - {type: gpu, minor: 0, health: true, resources: {koordinator.sh/gpu-core: "100",
     koordinator.sh/gpu-memory-ratio: "100", koordinator.sh/gpu-memory: 16Gi}}
  - {type: gpu, minor: 1, health: false, resources: {koordinator.sh/gpu-core: "100",
     koordinator.sh/gpu-memory-ratio: "100", koordinator.sh/gpu-memory: 16Gi}}
"""

GPU_POD = """
apiVersion: v1
kind: Pod
metadata: {name: half-gpu, namespace: default}
spec:
  schedulerName: koordfw-scheduler
  containers:
  - name: c
    resources:
      requests: {cpu: "1", memory: 1Gi, koordinator.sh/gpu: "50"}
      limits: {koordinator.sh/gpu: "50"}
"""


def metric(name: str) -> str:
    return json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                       "status": {"updateTime": "2027-01-15T08:00:00Z",
                                  "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "2Gi"}},
                                                 "systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
                                  "podsMetric": []}})


def config_map(cfg: object) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                       "data": {"colocation-config": cfg if isinstance(cfg, str) else json.dumps(cfg)}})


def run(capsys, tmp_path, *docs: str) -> dict:
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(docs))
    # simulate's clock starts at the newest timestamp of the input: the NodeMetrics are fresh
    assert main(["simulate", str(f), "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def allocatable(out: dict) -> dict[str, dict[str, str]]:
    return {n["name"]: n["allocatable"] for n in out["nodes"]}


def test_a_gpu_share_pod_schedules_on_a_node_with_a_device(capsys, tmp_path):
    out = run(capsys, tmp_path, NODES, GPU_POD)
    assert [(p["name"], p["node"]) for p in out["pods"]] == [("half-gpu", "gpu-node")]
    a = allocatable(out)["gpu-node"]
    # the unhealthy GPU does not count
    assert a["koordinator.sh/gpu"] == "100" and a["koordinator.sh/gpu-core"] == "100"
    assert a["koordinator.sh/gpu-memory"] == "16Gi" and a["koordinator.sh/gpu-memory-ratio"] == "100"
    assert "koordinator.sh/gpu" not in allocatable(out)["cpu-node"]


def test_the_config_map_drives_batch_resources_and_node_configs(capsys, tmp_path):
    cfg = {"enable": True, "cpuReclaimThresholdPercent": 50,
           "nodeConfigs": [{"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                            "cpuReclaimThresholdPercent": 75}]}
    out = run(capsys, tmp_path, NODES, metric("gpu-node"), metric("cpu-node"), config_map(cfg))
    a = allocatable(out)
    # byUsage: 8000m - the safety margin (100 - reclaim %) - 500m of system usage (no pods)
    assert a["gpu-node"]["kubernetes.io/batch-cpu"] == str(8000 * 75 // 100 - 500)
    assert a["cpu-node"]["kubernetes.io/batch-cpu"] == str(8000 * 50 // 100 - 500)


def test_a_config_map_without_enable_is_koordinators_default_off(capsys, tmp_path):
    out = run(capsys, tmp_path, NODES, metric("gpu-node"), config_map({"cpuReclaimThresholdPercent": 50}))
    assert "kubernetes.io/batch-cpu" not in allocatable(out)["gpu-node"]


@pytest.mark.parametrize("value, message", [
    ('{"enable": true', "field data.colocation-config: invalid JSON"),
    ("[1]", "field data.colocation-config: expected a JSON object"),
])
def test_a_malformed_config_map_is_one_error_line(capsys, tmp_path, value, message):
    f = tmp_path / "in.yaml"
    f.write_text(NODES + "\n---\n" + config_map(value))
    assert main(["simulate", str(f), "-o", "json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ConfigMap koordinator-system/slo-controller-config" in err[0] and message in err[0]
