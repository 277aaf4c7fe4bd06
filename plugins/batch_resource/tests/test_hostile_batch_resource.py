"""Hostile input (issue 16): a node's unreadable colocation-strategy or reservation annotation, reclaim
label or NodeMetric takes down no more than itself: the annotation or label is ignored with one warning
naming the node, a malformed NodeMetric degrades that node (its batch resources reset, as Koordinator
does without a usable metric) and says why; the other nodes still get batch resources and batch pods
bind. Out-of-range args are refused at profile load naming the field."""

from __future__ import annotations

import json

import pytest
from koordfw_batch_resource.calculator import annotation_reservation
from koordfw_batch_resource.metric import CPU

from koordfw.extension import ANNOTATION_NODE_RESERVATION
from koordfw.nodestate import parse_reservation
from koordfw.testing.hostile import check_cli_outcome, simulate_objects

CS = "node.koordinator.sh/colocation-strategy"
RESV = "node.koordinator.sh/reservation"
RATIO = "node.koordinator.sh/cpu-reclaim-ratio"
DEEP = "[" * 5000 + "]" * 5000


def node(name, annotations=None, labels=None):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def metric(name, **status):
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "status": {"updateTime": "2026-01-01T00:00:00Z",
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}},
                                      "systemUsage": {"resources": {"cpu": "0", "memory": "0"}}}, **status}}


def batch_pod(name):
    req = {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"koordinator.sh/qosClass": "BE"}},
            "spec": {"priority": 5000, "containers": [{"name": "c", "resources": {"requests": req, "limits": req}}]}}


def simulate(tmp_path, objs, profile=None):
    return simulate_objects(tmp_path, objs, profile)


def run_ok(out):
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert "node_resources failed" not in out.stderr and "plugin raised" not in out.stderr, out.stderr[-2000:]
    data = json.loads(out.stdout)
    return ({p["name"]: p for p in data["pods"]}, {r["node"]: r for r in data["batchResources"]})


BAD_NODE = [
    ("strategy nested", {"annotations": {CS: DEEP}}, CS),
    ("strategy NaN", {"annotations": {CS: '{"resourceDiffThreshold": NaN}'}}, CS),
    ("strategy bad value", {"annotations": {CS: '{"resourceDiffThreshold": 5}'}}, CS),
    ("reservation nested", {"annotations": {RESV: DEEP}}, RESV),
    ("reservation huge cpuset", {"annotations": {RESV: json.dumps({"reservedCPUs": "0-1000000000000000"})}}, RESV),
    ("ratio inf", {"labels": {RATIO: "inf"}}, RATIO),
    ("ratio 1e300", {"labels": {RATIO: "1e300"}}, RATIO),
]


@pytest.mark.parametrize("kw, field", [b[1:] for b in BAD_NODE], ids=[b[0] for b in BAD_NODE])
def test_a_bad_node_annotation_or_label_is_ignored_and_named(tmp_path, kw, field):
    out = simulate(tmp_path, [node("n1", **kw), node("n2"), metric("n1"), metric("n2"),
                              *(batch_pod(f"b{i}") for i in range(4))])
    pods, batch = run_ok(out)
    assert all(p["phase"] == "Bound" for p in pods.values())
    assert batch["n1"]["kubernetes.io/batch-cpu"] != "0" and batch["n2"]["kubernetes.io/batch-cpu"] != "0"
    # (mid_resource, reading the same ColocationStrategy annotation, names it too: count batch_resource's)
    warnings = [ln for ln in out.stderr.splitlines()
                if "ignoring invalid node" in ln and '"plugin": "batch_resource"' in ln]
    assert len(warnings) == 1 and '"node": "n1"' in warnings[0] and field in warnings[0]


@pytest.mark.parametrize("status, field", [({"hostApplicationMetric": "x"}, "status.hostApplicationMetric"),
                                           ({"podsMetric": [{"namespace": "x"}]}, "status.podsMetric[0].name")])
def test_a_malformed_node_metric_degrades_only_its_node(tmp_path, status, field):
    out = simulate(tmp_path, [node("n1"), node("n2"), metric("n1"), metric("n2", **status),
                              *(batch_pod(f"b{i}") for i in range(2))])
    pods, batch = run_ok(out)
    assert all(p["node"] == "n1" for p in pods.values())
    assert batch["n2"]["kubernetes.io/batch-cpu"] == "0" and field in batch["n2"]["degraded"]
    assert "NodeMetric n2" in out.stderr and field in out.stderr


def test_reserved_cpus_are_bounded_and_counted_once():
    assert annotation_reservation("n", {ANNOTATION_NODE_RESERVATION: '{"reservedCPUs": "0-5,4-9"}'})[CPU] == 10 * 1000
    with pytest.raises(ValueError, match="below 8192"):
        parse_reservation('{"reservedCPUs": "0-1000000000000000"}', "n")


BAD_ARGS = [("memoryReclaimThresholdPercent", -5), ("cpuReclaimThresholdPercent", 10**30),
            ("resourceDiffThreshold", float("nan")), ("resourceDiffThreshold", float("inf")),
            ("resourceDiffThreshold", 5), ("degradeTimeMinutes", 10**30), ("batchCPUThresholdPercent", -1),
            ("nodeConfigs", [{"nodeSelector": {}, "resourceDiffThreshold": float("nan")}])]


@pytest.mark.parametrize("field, value", BAD_ARGS, ids=[f"{f}={v!r}" for f, v in BAD_ARGS])
def test_out_of_range_args_are_refused_naming_the_field(tmp_path, field, value):
    out = simulate(tmp_path, [node("n1"), batch_pod("a")], {"pluginConfig": {"batch_resource": {field: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.batch_resource", field], max_seconds=20) == "error"


def test_reclaim_above_100_stays_allowed_as_in_koordinator(tmp_path):
    """Koordinator validates reclaim thresholds with min=0 only; above 100 is a negative margin."""
    out = simulate(tmp_path, [node("n1"), metric("n1"), batch_pod("a")],
                   {"pluginConfig": {"batch_resource": {"cpuReclaimThresholdPercent": 500}}})
    pods, batch = run_ok(out)
    assert pods["a"]["phase"] == "Bound"
