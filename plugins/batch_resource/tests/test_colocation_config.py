"""The batch_resource hook under a cluster ColocationCfg (the ``colocation`` the manager passes), as
koord-manager's config handler and GetNodeColocationStrategy: Koordinator's defaults (enable false),
the cluster switch winning, nodeConfigs first match and their fallbacks, an invalid configuration
keeping the previous one, and the sync rule."""

from __future__ import annotations

import datetime as dt

import pytest
from koordfw_batch_resource import BatchResource, ColocationStrategy

from koordfw.inputs import make_node

NOW = 1_800_000_000.0
CPU, MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"


def metric(update: float = NOW - 30) -> dict:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
            "status": {"updateTime": dt.datetime.fromtimestamp(update, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}},
                                      "systemUsage": {"resources": {"cpu": "0", "memory": "0"}}},
                       "podsMetric": []}}


def call(plugin: BatchResource, colocation, *, labels=None, annotations=None, allocatable=None, met="fresh",
         last_update=None, now=NOW):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110", **(allocatable or {})}
    node = make_node("n1", allocatable=alloc, labels=labels, annotations=annotations)
    return plugin.node_resources(node, [], metric() if met == "fresh" else met, now, last_update, colocation,
                                 ColocationStrategy())


def cpu_for(reclaim: int) -> int:
    return 8000 * reclaim // 100


SEL_A = {"matchLabels": {"pool": "a"}}


@pytest.mark.parametrize("name, colocation, labels, annotations, want", [
    ("defaults are off", {}, {}, {}, {CPU: None, MEM: None}),
    ("enabled", {"enable": True}, {}, {}, cpu_for(60)),
    ("cluster off wins over a node on", {"enable": False, "nodeConfigs": [{"nodeSelector": SEL_A, "enable": True}]},
     {"pool": "a"}, {}, {CPU: None, MEM: None}),
    ("node off", {"enable": True, "nodeConfigs": [{"nodeSelector": SEL_A, "enable": False}]}, {"pool": "a"}, {},
     {CPU: None, MEM: None}),
    ("first match wins", {"enable": True, "nodeConfigs": [
        {"nodeSelector": SEL_A, "cpuReclaimThresholdPercent": 80},
        {"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]},
         "cpuReclaimThresholdPercent": 50}]}, {"pool": "a"}, {}, cpu_for(80)),
    ("no match: cluster", {"enable": True, "cpuReclaimThresholdPercent": 70,
                           "nodeConfigs": [{"nodeSelector": SEL_A, "cpuReclaimThresholdPercent": 80}]},
     {"pool": "b"}, {}, cpu_for(70)),
    ("invalid node strategy: the cluster's, still the first match", {"enable": True, "nodeConfigs": [
        {"nodeSelector": SEL_A, "degradeTimeMinutes": 0},
        {"nodeSelector": SEL_A, "cpuReclaimThresholdPercent": 50}]}, {"pool": "a"}, {}, cpu_for(60)),
    ("invalid selector: skipped", {"enable": True, "nodeConfigs": [
        {"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Near"}]}, "cpuReclaimThresholdPercent": 90},
        {"nodeSelector": SEL_A, "cpuReclaimThresholdPercent": 50}]}, {"pool": "a"}, {}, cpu_for(50)),
    ("node annotation over nodeConfigs", {"enable": True, "nodeConfigs": [
        {"nodeSelector": SEL_A, "cpuReclaimThresholdPercent": 50}]}, {"pool": "a"},
     {"node.koordinator.sh/colocation-strategy": '{"cpuReclaimThresholdPercent": 75}'}, cpu_for(75)),
])
def test_strategy_resolution(name, colocation, labels, annotations, want):
    got = call(BatchResource(), colocation, labels=labels, annotations=annotations)
    assert got is not None
    if isinstance(want, dict):
        assert got == want
    else:
        assert got[CPU] == want


def test_no_node_metric_under_a_configuration_resets():
    assert call(BatchResource(), {"enable": True}, met=None) == {CPU: None, MEM: None}
    # without a configuration (simulate without the ConfigMap) the node is left alone
    assert call(BatchResource(), None, met=None) is None


def test_an_invalid_configuration_keeps_the_previous_one():
    p = BatchResource()
    assert call(p, {"enable": True, "cpuReclaimThresholdPercent": 70})[CPU] == cpu_for(70)
    for bad in ({"enable": True, "cpuReclaimThresholdPercent": "x"}, {"enable": True, "degradeTimeMinutes": 0},
                {"enable": True, "resourceDiffThreshold": 0}, {"enable": "yes"}, {"nodeConfigs": {}}):
        assert call(p, bad)[CPU] == cpu_for(70), bad
    # before any valid one: nothing is written
    assert call(BatchResource(), {"enable": True, "updateTimeThresholdSeconds": 0}) is None


def test_sync_rule_returns_none_for_small_changes():
    p = BatchResource()
    cfg = {"enable": True}
    have = {CPU: str(cpu_for(60) + 200), MEM: str(int(32 * 2**30 * 0.65) - 2**30)}
    # 4800 vs 5000 on the node: a 4 % difference, written last 10 s ago: no write
    assert call(p, cfg, allocatable=have, last_update=NOW - 10) is None
    assert call(p, cfg, allocatable=have, last_update=NOW - 301)[CPU] == cpu_for(60)
    # a stale metric resets, a presence change: written at once
    assert call(p, cfg, allocatable=have, last_update=NOW - 10, met=metric(NOW - 901)) == {CPU: None, MEM: None}
