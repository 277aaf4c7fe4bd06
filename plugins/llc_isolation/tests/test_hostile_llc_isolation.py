"""Hostile input (issue 16): a pod's unreadable node.koordinator.sh/resctrl annotation (nested too deep,
NaN, numbers beyond any range) leaves that pod unchanged with a problem naming it; the class groups and
the other pods are still planned. Bad args are refused naming the field."""

from __future__ import annotations

import json

import pytest
import yaml

from koordfw.testing.hostile import check_cli_outcome, run_cli

RC = "node.koordinator.sh/resctrl"
DEEP = "[" * 5000 + "]" * 5000
RESCTRL = {"cbmMask": "fff", "cacheIds": [0], "numClosids": 16, "minCbmBits": 1}


def agent_pod(uid, qos, annotations=None, kube="burstable"):
    return {"uid": uid, "usage": {"cpu": "1"}, "cgroupDir": f"kubepods/{kube}/pod{uid}",
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": {"koordinator.sh/qosClass": qos},
                         "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


def plan(tmp_path, pods, config=None):
    state = {"cgroupVersion": 1, "pods": pods, "resctrl": RESCTRL,
             "cgroups": {f"cpu/kubepods/burstable/pod{p['uid']}/tasks": "100" for p in pods},
             "node": {"name": "n1", "capacity": {"cpu": "8", "memory": "32Gi"}}}
    (tmp_path / "s.json").write_text(json.dumps(state))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config or {"pluginConfig": {"llc_isolation": {"BE": {"enable": True}}}}))
    return run_cli(["--log-format", "json", "agent", "--disable", "cpu_topology_agent", "--disable", "be_suppress",
                    "plan", "--state", str(tmp_path / "s.json"), "--config", str(tmp_path / "p.yaml")], timeout=30)


@pytest.mark.parametrize("value", [DEEP, '{"mb":{"schemata":{"percent":NaN}}}', '{"mb":{"schemata":{"percent":1e400}}}',
                                   json.dumps({"llc": {"schemata": {"range": [0, 10**30]}}})],
                         ids=["nested", "NaN", "1e400", "range 10**30"])
def test_a_pod_with_an_unreadable_resctrl_annotation_is_left_unchanged(tmp_path, value):
    out = plan(tmp_path, [agent_pod("good", "LS", {RC: json.dumps({"llc": {"schemata": {"range": [0, 50]}}})}),
                          agent_pod("bad", "LS", {RC: value})])
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert "raised" not in out.stderr, out.stderr[-2000:]
    paths = {w["path"] for w in json.loads(out.stdout)["writes"] if w["plugin"] == "llc_isolation"}
    assert "BE/schemata" in paths and "koordlet-good/schemata" in paths
    assert not any("koordlet-bad" in p for p in paths)
    assert "pod default/bad" in out.stderr and RC in out.stderr


@pytest.mark.parametrize("group, value, field", [("BE", {"catRangeEndPercent": 500}, "catRangeEndPercent"),
                                                 ("BE", {"mbaPercent": float("nan")}, "mbaPercent"),
                                                 ("LS", {"catRangeStartPercent": -1}, "catRangeStartPercent")])
def test_bad_args_are_refused_naming_the_field(tmp_path, group, value, field):
    out = plan(tmp_path, [agent_pod("a", "LS")], {"pluginConfig": {"llc_isolation": {group: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.llc_isolation", field], max_seconds=20) == "error"
