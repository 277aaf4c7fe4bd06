"""Hostile input (issue 16): a pod's or the node's unreadable annotation (nested too deep, a cpuset of a
hundred million CPUs) costs only that object: it is ignored with one warning naming it, and BE
suppression still plans for the node, in bounded time and memory. Bad args are refused naming the field."""

from __future__ import annotations

import json

import pytest
import yaml
from koordfw_be_suppress import parse_cpuset

from koordfw.testing.hostile import check_cli_outcome, run_cli

RS = "scheduling.koordinator.sh/resource-status"
SQ = "node.koordinator.sh/system-qos-resource"
KUBELET = "kubelet.koordinator.sh/cpu-manager-policy"
RESV = "node.koordinator.sh/reservation"
DEEP = "[" * 5000 + "]" * 5000
HUGE = json.dumps({"cpuset": "0-100000000"})


def agent_pod(uid, qos, annotations=None, kube="burstable"):
    res = {"requests": {"cpu": "1"}} if kube != "besteffort" else {}
    return {"uid": uid, "usage": {"cpu": "1"}, "cgroupDir": f"kubepods/{kube}/pod{uid}",
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": {"koordinator.sh/qosClass": qos},
                         "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": res}]}}


GOOD = [agent_pod("lse", "LSE", {RS: '{"cpuset":"0-1"}'}), agent_pod("ls", "LS"), agent_pod("be", "BE", kube="besteffort")]


def plan(tmp_path, pods=GOOD, node_annotations=None, config=None):
    state = {"cgroupVersion": 1, "pods": pods, "cgroups": {},
             "node": {"name": "n1", "capacity": {"cpu": "8", "memory": "32Gi"}, "usage": {"cpu": "4"},
                      "annotations": node_annotations or {},
                      "cpuTopology": {"detail": [{"id": i, "core": i // 2} for i in range(8)]}}}
    (tmp_path / "s.json").write_text(json.dumps(state))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config or {"pluginConfig": {"be_suppress": {"enable": True}}}))
    return run_cli(["--log-format", "json", "agent", "--disable", "cpu_topology_agent", "--disable", "llc_isolation",
                    "plan", "--state", str(tmp_path / "s.json"), "--config", str(tmp_path / "p.yaml")], timeout=30)


def be_writes(out):
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert "raised" not in out.stderr, out.stderr[-2000:]
    return {w["path"]: w["value"] for w in json.loads(out.stdout)["writes"] if w["plugin"] == "be_suppress"}


@pytest.mark.parametrize("value", [DEEP, HUGE, '{"cpuset": 7}'], ids=["nested", "0-100000000", "not a string"])
def test_a_pod_with_an_unreadable_resource_status_is_ignored(tmp_path, value):
    out = plan(tmp_path, GOOD + [agent_pod("bad", "LSR", {RS: value})])
    writes = be_writes(out)
    be = [v for p, v in writes.items() if p.startswith("cpuset/kubepods/besteffort/cpuset.cpus")]
    assert be and not set(parse_cpuset(be[-1])) & {0, 1}  # the LSE pod's CPUs 0-1 are still kept from BE
    warnings = [ln for ln in out.stderr.splitlines() if "ignoring malformed resource-status" in ln]
    assert len(warnings) == 1 and "default/bad" in warnings[0] and RS in warnings[0]


@pytest.mark.parametrize("key, value", [(SQ, DEEP), (SQ, HUGE), (KUBELET, DEEP), (RESV, DEEP),
                                        (RESV, json.dumps({"reservedCPUs": "0-100000000"}))],
                         ids=["system-qos nested", "system-qos huge", "kubelet nested", "reservation nested",
                              "reservation huge"])
def test_an_unreadable_node_annotation_is_ignored(tmp_path, key, value):
    out = plan(tmp_path, node_annotations={key: value})
    assert be_writes(out)
    assert "n1" in out.stderr and "ignoring malformed" in out.stderr


def test_the_parser_bounds_cpu_ids_before_expanding():
    with pytest.raises(ValueError, match="below 8192"):
        parse_cpuset("0-100000000")
    assert parse_cpuset("0-2,1-3") == [0, 1, 2, 3]


@pytest.mark.parametrize("field, value", [("cpuSuppressThresholdPercent", float("nan")),
                                          ("cpuSuppressThresholdPercent", 500), ("cpuSuppressMinPercent", -1),
                                          ("cpuSuppressPolicy", "x")])
def test_bad_args_are_refused_naming_the_field(tmp_path, field, value):
    out = plan(tmp_path, config={"pluginConfig": {"be_suppress": {field: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.be_suppress", field], max_seconds=20) == "error"
