"""Koordinator's own slo-controller-config and ClusterColocationProfile example (examples/koordinator/,
copied unchanged from its repository) run through ``koordfw simulate`` as they are (issue 32): the profile
turns a Spark executor into a BE pod with batch resources, the ConfigMap's colocation settings (Koordinator's
defaults: 60 % of the CPU, 65 % of the memory reclaimable) give the node its batch allocatable, and with
Koordinator's scheduler configuration (schedulerName koord-scheduler) the pod is ours and bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from koordfw.cli import main

ROOT = Path(__file__).resolve().parents[1]
KOORD = ROOT / "examples" / "koordinator"
COMMIT = "a7a1b76bbf81abd26f9c377de1f31a60dd965f6e"

INPUT = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"},
     "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}},
    {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n0"},
     "status": {"updateTime": "2026-11-20T10:00:00Z",
                "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "2Gi"}},
                               "systemUsage": {"resources": {"cpu": "1", "memory": "2Gi"}}}}},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"}, "value": 5000},
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "spark-pi-exec-1", "namespace": "spark-demo",
                  "labels": {"sparkoperator.k8s.io/launched-by-spark-operator": "true", "spark-role": "executor"}},
     "spec": {"containers": [{"name": "executor", "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                                                "limits": {"cpu": "2", "memory": "4Gi"}}}]}},
]


@pytest.mark.parametrize("name, source", [("slo-controller-config.yaml", "config/manager/slo-controller-config.yaml"),
                                          ("cluster-colocation-profile.yaml",
                                           "examples/spark-jobs/cluster-colocation-profile.yaml")])
def test_the_examples_name_their_source(name, source):
    text = (KOORD / name).read_text()
    assert source in text and COMMIT in text and "koordinator-sh/koordinator" in text


def simulate(tmp_path: Path, capsys, *extra: str) -> dict:
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump_all(INPUT))
    rc = main(["simulate", str(KOORD / "slo-controller-config.yaml"), str(KOORD / "cluster-colocation-profile.yaml"),
               str(f), "-o", "json", *extra])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_koordinators_profile_and_slo_config_apply_unchanged(tmp_path, capsys):
    data = simulate(tmp_path, capsys, "--profile", str(KOORD / "scheduler-config.yaml"))
    [pod] = data["pods"]
    assert pod["phase"] == "Bound" and pod["node"] == "n0"
    assert pod["labels"]["koordinator.sh/qosClass"] == "BE" and pod["labels"]["koordinator.sh/priority"] == "1000"
    assert (pod["priorityClassName"], pod["priority"], pod["schedulerName"]) == ("koord-batch", 5000, "koord-scheduler")
    assert pod["containers"][0]["requests"] == {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"}
    [node] = data["nodes"]
    # 16 cores x 60 % (Koordinator's default cpuReclaimThresholdPercent) - 1 core system usage
    assert node["allocatable"]["kubernetes.io/batch-cpu"] == "8600"
    # 64Gi - 35 % margin (memoryReclaimThresholdPercent 65) - 2Gi system usage
    assert int(node["allocatable"]["kubernetes.io/batch-memory"]) == 64 * 2**30 - 64 * 2**30 * 35 // 100 - 2 * 2**30
    assert node["requested"]["kubernetes.io/batch-cpu"] == "2000"


def test_with_koordfws_own_profile_the_koord_scheduler_pod_is_not_ours(tmp_path, capsys):
    [pod] = simulate(tmp_path, capsys)["pods"]
    assert pod["phase"] == "NotOurs" and pod["labels"]["koordinator.sh/qosClass"] == "BE"
    [pod] = simulate(tmp_path, capsys, "--all-schedulers")["pods"]
    assert pod["phase"] == "Bound"
