"""``koordfw simulate`` admits pending pods through the pod admission hooks before scheduling: the input's
ClusterColocationProfiles (colocation_profile) turn an unchanged Spark executor into a batch pod, the JSON
output shows what admission changed, refused pods are reported, bad documents exit 2 naming file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from koordfw.cli import main

NODES = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"},
          "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "kubernetes.io/batch-cpu": "6000",
                                     "kubernetes.io/batch-memory": "24Gi"}}} for i in range(2)]
NAMESPACES = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "spark", "labels": {"colocation": "on"}}}]
PC = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"}, "value": 5500}
PROFILE = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
           "metadata": {"name": "spark-executors"},
           "spec": {"namespaceSelector": {"matchLabels": {"colocation": "on"}},
                    "selector": {"matchLabels": {"spark-role": "executor"}}, "qosClass": "BE",
                    "priorityClassName": "koord-batch", "schedulerName": "koord-scheduler",
                    "labels": {"koordinator.sh/mutated": "true"}}}


def pod(name: str, ns: str = "spark", role: str = "executor", priority: int | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                                                "limits": {"cpu": "2", "memory": "4Gi"}}}]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns,
                                                            "labels": {"spark-role": role}}, "spec": spec}


def simulate(tmp_path: Path, docs: list[dict], capsys, *extra: str) -> tuple[int, dict | str]:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    rc = main(["simulate", str(f), "-o", "json", *extra])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else out.err)


def test_profiles_are_applied_before_scheduling(tmp_path, capsys):
    docs = [*NODES, *NAMESPACES, PC, PROFILE, pod("exec-1"), pod("driver", role="driver"), pod("web", ns="default")]
    # the profile hands the executor to koord-scheduler: as live, koordfw (koordfw-scheduler) leaves it alone
    rc, out = simulate(tmp_path, docs, capsys)
    assert rc == 0 and {p["name"]: p["phase"] for p in out["pods"]}["exec-1"] == "NotOurs"
    rc, out = simulate(tmp_path, docs, capsys, "--all-schedulers")
    assert rc == 0
    pods = {p["name"]: p for p in out["pods"]}
    ex = pods["exec-1"]
    assert ex["phase"] == "Bound"
    assert ex["labels"] == {"spark-role": "executor", "koordinator.sh/mutated": "true", "koordinator.sh/qosClass": "BE"}
    assert (ex["priorityClassName"], ex["priority"], ex["schedulerName"]) == ("koord-batch", 5500, "koord-scheduler")
    assert ex["containers"] == [{"name": "main", "requests": {"kubernetes.io/batch-cpu": "2000",
                                                              "kubernetes.io/batch-memory": "4Gi"}}]
    for name in ("driver", "web"):  # not selected: unchanged
        assert pods[name]["labels"] == {"spark-role": "driver" if name == "driver" else "executor"}
        assert pods[name]["containers"][0]["requests"] == {"cpu": "2", "memory": "4Gi"}
        assert pods[name]["priorityClassName"] == "" and pods[name]["schedulerName"] == "default-scheduler"
    # the batch pod is accounted in batch resources on its node
    node = next(n for n in out["nodes"] if n["name"] == ex["node"])
    assert node["requested"].get("kubernetes.io/batch-cpu") == "2000"


def test_a_namespace_selector_matches_the_api_servers_namespace_label(tmp_path, capsys):
    prof = {**PROFILE, "spec": {**PROFILE["spec"], "namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "default"}}}}
    rc, out = simulate(tmp_path, [*NODES, PC, prof, pod("web", ns="default"), pod("other", ns="x")], capsys)
    assert rc == 0
    pods = {p["name"]: p for p in out["pods"]}
    assert pods["web"]["labels"].get("koordinator.sh/qosClass") == "BE"
    assert "koordinator.sh/qosClass" not in pods["other"]["labels"]


def test_refused_pods_are_reported_and_not_scheduled(tmp_path, capsys):
    be_prod = pod("bad", ns="default", priority=9500)
    be_prod["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
    rc, out = simulate(tmp_path, [*NODES, be_prod, pod("ok", ns="default")], capsys)
    assert rc == 0
    pods = {p["name"]: p for p in out["pods"]}
    assert pods["bad"]["phase"] == "Rejected" and pods["bad"]["node"] is None
    assert pods["bad"]["reason"] == ("admission: Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod "
                                     "cannot be used in combination")
    assert pods["ok"]["phase"] == "Bound"
    assert out["summary"]["rejected"] == 1 and out["summary"]["pending"] == 0


def test_without_the_plugin_pods_are_unchanged(tmp_path, capsys):
    rc, out = simulate(tmp_path, [*NODES, *NAMESPACES, PC, PROFILE, pod("exec-1")], capsys,
                       "--disable", "colocation_profile")
    assert rc == 0
    assert out["pods"][0]["labels"] == {"spark-role": "executor"}


@pytest.mark.parametrize("doc, field", [
    ({**PROFILE, "spec": {**PROFILE["spec"], "qosClass": "GOLD"}}, "spec.qosClass"),
    ({**PROFILE, "spec": {**PROFILE["spec"], "labels": {"a": 1}}}, "spec.labels.a"),
    ({**PROFILE, "spec": {**PROFILE["spec"], "selector": {"matchExpressions": [{"key": "a"}]}}},
     "spec.selector.matchExpressions[0].operator"),
    ({**PC, "value": "high"}, "value"),
    ({**PC, "preemptionPolicy": "Sometimes"}, "preemptionPolicy"),
    ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "labels": {"a": ["b"]}}}, "metadata.labels.a"),
])
def test_bad_admission_documents_exit_2_naming_file_and_field(tmp_path, capsys, doc, field):
    rc, err = simulate(tmp_path, [*NODES, doc], capsys)
    assert rc == 2
    assert str(tmp_path / "in.yaml") in err and f"field {field}:" in err
    assert len(err.strip().splitlines()) == 1
