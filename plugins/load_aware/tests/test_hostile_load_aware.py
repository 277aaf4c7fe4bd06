"""Hostile input (issue 16): one node with an unreadable raw-allocatable or usage-thresholds annotation,
or a malformed NodeMetric, takes down no more than itself: the annotation is ignored with one warning
naming the node and the annotation, the other nodes still take pods. Out-of-range args are refused at
profile load naming the field."""

from __future__ import annotations

import json

import pytest
from koordfw_load_aware import ANNOTATION_USAGE_THRESHOLDS as UT
from koordfw_load_aware import node_allocatable

from koordfw.extension import ANNOTATION_NODE_RAW_ALLOCATABLE as RA
from koordfw.inputs import make_node
from koordfw.testing.hostile import check_cli_outcome, simulate_objects

DEEP = "[" * 5000 + "]" * 5000
DEEP_OBJ = '{"a":' * 3000 + "1" + "}" * 3000


def node(name, annotations=None):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations or {}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def metric(name, **spec):
    obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
           "status": {"updateTime": "2026-01-01T00:00:00Z",
                      "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}}}}
    if spec:
        obj["spec"] = spec
    return obj


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def simulate(tmp_path, objs, profile=None):
    return simulate_objects(tmp_path, objs, profile)


BAD_ANNOTATIONS = [
    (RA, '{"cpu": 1e400}'), (RA, '{"cpu": NaN}'), (RA, "cpu=4"), (RA, DEEP), (RA, '{"cpu": "-4"}'), (RA, "[1, 2]"),
    (RA, '{"cpu": "1e30"}'),
    (UT, DEEP_OBJ), (UT, '{"usageThresholds": {"cpu": NaN}}'), (UT, '{"usageThresholds": {"cpu": 1e400}}'),
    (UT, '{"usageThresholds": {"cpu": 500}}'),
]


@pytest.mark.parametrize("key, value", BAD_ANNOTATIONS, ids=[f"{k.split('/')[-1]}={v[:20]}" for k, v in BAD_ANNOTATIONS])
def test_a_bad_node_annotation_is_ignored_and_named_once(tmp_path, key, value):
    out = simulate(tmp_path, [node("n1", {key: value}), node("n2"), metric("n1"), metric("n2"),
                              *(pod(f"p{i}") for i in range(4))])
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    pods = json.loads(out.stdout)["pods"]
    assert all(p["phase"] == "Bound" for p in pods)
    warnings = [ln for ln in out.stderr.splitlines() if "ignoring invalid node annotation" in ln]
    assert len(warnings) == 1, out.stderr
    assert '"node": "n1"' in warnings[0] and key in warnings[0]


@pytest.mark.parametrize("interval", [float("inf"), -1, 10**30, "60"])
def test_a_malformed_node_metric_is_left_out(tmp_path, interval):
    out = simulate(tmp_path, [node("n1"), node("n2"), metric("n1"),
                              metric("n2", metricCollectPolicy={"reportIntervalSeconds": interval}),
                              *(pod(f"p{i}") for i in range(4))])
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert all(p["phase"] == "Bound" for p in json.loads(out.stdout)["pods"])
    assert "NodeMetric n2" in out.stderr and "reportIntervalSeconds" in out.stderr


def test_negative_raw_allocatable_keeps_the_node_allocatable():
    n = make_node("n1", annotations={RA: '{"cpu": "-4", "memory": "1Gi"}'})
    assert node_allocatable(n)["cpu"] == 8000


BAD_ARGS = [
    ("usageThresholds", {"cpu": 500}), ("usageThresholds", {"cpu": -1}), ("resourceWeights", {"cpu": 10**30}),
    ("resourceWeights", {"cpu": 0}), ("estimatedScalingFactors", {"cpu": 500}), ("estimatedScalingFactors", {"cpu": 0}),
    ("dominantResourceWeight", 500), ("prodUsageThresholds", {"cpu": 101}), ("nodeMetricExpirationSeconds", 10**30),
    ("estimatedSecondsAfterPodScheduled", 10**30), ("estimatedSecondsAfterInitialized", -1),
    ("aggregated", {"usageThresholds": {"cpu": 500}}), ("aggregated", {"usageAggregatedDuration": "-5m"}),
]


@pytest.mark.parametrize("field, value", BAD_ARGS, ids=[f"{f}={v!r}" for f, v in BAD_ARGS])
def test_out_of_range_args_are_refused_naming_the_field(tmp_path, field, value):
    out = simulate(tmp_path, [node("n1"), pod("a")], {"pluginConfig": {"load_aware": {field: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.load_aware", field], max_seconds=20) == "error"
