"""Hostile input (issue 16): one node whose NodeMetric or raw-allocatable cannot be read is left out of
LowNodeLoad's round, with a note and a warning naming it, and the other nodes are still balanced; a
PodDisruptionBudget with a non-integer disruptionsAllowed allows no eviction instead of failing the
plan. Out-of-range args (NaN, inf, percentages above 100) are refused naming the field."""

from __future__ import annotations

import json

import pytest
import yaml

from koordfw.testing.hostile import check_cli_outcome, run_cli

RA = "node.koordinator.sh/raw-allocatable"
DEEP = "[" * 5000 + "]" * 5000
PROFILE = {"pluginConfig": {"defrag": {"lowNodeLoad": {
    "lowThresholds": {"cpu": 30}, "highThresholds": {"cpu": 60}, "anomalyCondition": {"consecutiveAbnormalities": 1},
    "nodeMetricExpirationSeconds": 10**9}}}}


def node(name, annotations=None):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations or {}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def metric(name, cpu):
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "status": {"updateTime": "2026-01-01T00:00:00Z",
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}}}


def pod(name, node_name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}}


def cluster(n3=None, n3_metric=None, extra=()):
    return [node("n1"), node("n2"), n3 or node("n3"), metric("n1", "7"), metric("n2", "1"),
            n3_metric or metric("n3", "1"), *(pod(f"hot-{i}", "n1") for i in range(4)), *extra]


def deschedule(tmp_path, objs, profile=PROFILE):
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "c.yaml").write_text(yaml.safe_dump_all(objs))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(profile))
    return run_cli(["--log-format", "json", "simulate", str(tmp_path / "m"), "-o", "json", "--deschedule",
                    "--profile", str(tmp_path / "p.yaml")], timeout=30)


def planned(out):
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert "deschedule failed" not in out.stderr, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data.get("migrations"), "the hot node is still balanced"
    return data


def broken_metric(**status):
    m = metric("n3", "1")
    m["status"].update(status)
    return m


@pytest.mark.parametrize("n3_metric, field", [
    (broken_metric(nodeMetric=["x"]), "status.nodeMetric"),
    (broken_metric(nodeMetric={"nodeUsage": "x"}), "status.nodeMetric.nodeUsage"),
    (broken_metric(podsMetric=[{"namespace": "x"}]), "status.podsMetric[0].name"),
    (broken_metric(podsMetric="x"), "status.podsMetric"),
], ids=["nodeMetric a list", "nodeUsage a string", "pod metric without name", "podsMetric a string"])
def test_a_malformed_node_metric_leaves_only_its_node_out(tmp_path, n3_metric, field):
    out = deschedule(tmp_path, cluster(n3_metric=n3_metric))
    data = planned(out)
    notes = [n for n in data["deschedule"]["notes"] if "n3 left out" in n]
    assert notes and "NodeMetric n3" in notes[0] and field in notes[0]
    assert "node left out of LowNodeLoad" in out.stderr


def test_an_unreadable_raw_allocatable_leaves_only_its_node_out(tmp_path):
    out = deschedule(tmp_path, cluster(n3=node("n3", {RA: DEEP})))
    data = planned(out)
    assert any("Node n3" in n and RA in n for n in data["deschedule"]["notes"])


@pytest.mark.parametrize("value", [float("inf"), 1.5, "3", -1, 10**30])
def test_a_pdb_with_a_bad_disruptions_allowed_allows_no_eviction(tmp_path, value):
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "other"}}}, "status": {"disruptionsAllowed": value}}
    out = deschedule(tmp_path, cluster(extra=[pdb]))
    planned(out)  # the PDB protects no pod of the hot node: the plan goes on
    assert "default/pdb" in out.stderr and "disruptionsAllowed" in out.stderr


BAD_ARGS = [
    ("lowNodeLoad", {"lowThresholds": {"cpu": float("nan")}}, "lowThresholds"),
    ("lowNodeLoad", {"highThresholds": {"cpu": 500}}, "highThresholds"),
    ("lowNodeLoad", {"anomalyCondition": {"timeout": "-1s"}}, "timeout"),
    ("lowNodeLoad", {"numberOfNodes": 10**30}, "numberOfNodes"),
    ("gpuDefrag", {"minGainMilli": float("nan")}, "minGainMilli"),
    ("cpuDefrag", {"popularityThreshold": 500}, "popularityThreshold"),
    ("cpuDefrag", {"minGainMilli": float("inf")}, "minGainMilli"),
    ("maxMigratingPercentPerRound", 500, "maxMigratingPercentPerRound"),
    ("maxMigratingPercentPerRound", float("nan"), "maxMigratingPercentPerRound"),
]


@pytest.mark.parametrize("key, value, field", BAD_ARGS, ids=[f"{k}={v!r}" for k, v, _ in BAD_ARGS])
def test_out_of_range_args_are_refused_naming_the_field(tmp_path, key, value, field):
    out = deschedule(tmp_path, cluster(), {"pluginConfig": {"defrag": {key: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.defrag", field], max_seconds=20) == "error"
