"""`koordfw agent plan` on the documented state format, and `koordfw agent --once` on a fake tree."""

from __future__ import annotations

import json

import pytest

from koordfw.cli import main
from koordfw.testing.cgroups import FakeNode

STATE = {
    "cgroupVersion": 1,
    "node": {"name": "n1", "capacity": {"cpu": "16", "memory": "64Gi"}, "allocatable": {"cpu": "16", "memory": "64Gi"},
             "annotations": {"node.koordinator.sh/reservation": json.dumps({"resources": {"cpu": "1"}})},
             "cpuTopology": {"detail": [{"id": i, "core": i % 8, "socket": (i % 8) // 4, "node": (i % 8) // 4}
                                        for i in range(16)]},
             "usage": {"cpu": "12", "memory": "20Gi"}},
    "pods": [
        {"metadata": {"name": "web", "uid": "u-web", "labels": {"koordinator.sh/qosClass": "LS"}},
         "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]},
         "uid": "u-web", "usage": {"cpu": "7"}},
        {"uid": "u-unknown", "usage": {"cpu": "1"}},
        {"metadata": {"name": "batch", "uid": "u-batch"}, "spec": {"containers": [{"name": "c"}]},
         "uid": "u-batch", "usage": {"cpu": "3"}},
    ],
    "hostApps": [{"name": "agent", "qos": "LS", "cgroupPath": "host/agent", "usage": {"cpu": "0.5"}}],
    "cgroups": {"cpu/kubepods/besteffort/cpu.cfs_quota_us": "1500000",
                "cpuset/kubepods/besteffort/cpuset.cpus": "0-9"},
    "config": {"be_suppress": {"enable": True}},
}


def run_plan(tmp_path, capsys, state, *extra):
    p = tmp_path / "state.json"
    p.write_text(json.dumps(state))
    prof = tmp_path / "only-be-suppress.yaml"  # other installed QoS plugins stay out of the plan
    prof.write_text("plugins:\n  qosPlan: {disabled: [{name: '*'}], enabled: [be_suppress]}\n")
    capsys.readouterr()
    rc = main(["agent", "plan", "--state", str(p), "--config", str(prof), *extra])
    out = capsys.readouterr()
    return rc, out


@pytest.mark.parametrize("config, want", [
    # 16×65% = 10400 − LS 7000 − unknown 1000 − app 500 − system max(12−11−0.5, 1) 1000 = 900 → 2 CPUs;
    # pairs first: siblings (0,8) on socket 0; current 0-9 → union 0-9 top-down, then the new set bottom-up
    ({"enable": True}, [("cpuset/kubepods/besteffort/podu-batch/cpuset.cpus", "0-9"),
                        ("cpuset/kubepods/besteffort/podu-batch/cpuset.cpus", "0,8"),
                        ("cpuset/kubepods/besteffort/cpuset.cpus", "0,8"),
                        ("cpu/kubepods/besteffort/cpu.cfs_quota_us", "-1")]),
    # 900 milli → 90000 µs, shrink from 1500000 at once; cpusets back to all CPUs
    ({"enable": True, "cpuSuppressPolicy": "cfsQuota"},
     [("cpu/kubepods/besteffort/cpu.cfs_quota_us", "90000"),
      ("cpuset/kubepods/besteffort/cpuset.cpus", "0-15"),
      ("cpuset/kubepods/besteffort/podu-batch/cpuset.cpus", "0-15")]),
    ({"enable": False}, [("cpu/kubepods/besteffort/cpu.cfs_quota_us", "-1"),
                         ("cpuset/kubepods/besteffort/cpuset.cpus", "0-15"),
                         ("cpuset/kubepods/besteffort/podu-batch/cpuset.cpus", "0-15")]),
])
def test_agent_plan(tmp_path, capsys, config, want):
    rc, out = run_plan(tmp_path, capsys, {**STATE, "config": {"be_suppress": config}})
    assert rc == 0, out.err
    writes = json.loads(out.out)["writes"]
    assert [(w["path"], w["value"]) for w in writes] == want
    assert all(w["plugin"] == "be_suppress" and w["fs"] == "cgroup" for w in writes)


def test_agent_plan_bad_state_names_the_field(tmp_path, capsys):
    bad = {**STATE, "pods": [{"uid": "x", "usage": {"cpu": "lots"}}]}
    rc, out = run_plan(tmp_path, capsys, bad)
    assert rc == 2
    assert "state.json" in out.err and "pods[0].usage.cpu" in out.err


def test_agent_plan_bad_config_is_an_error(tmp_path, capsys):
    rc, out = run_plan(tmp_path, capsys, {**STATE, "config": {"be_suppress": {"cpuSuppressPolicy": "nope"}}})
    assert rc == 2 and "be_suppress" in out.err


def test_agent_once_on_fake_tree(tmp_path, capsys):
    node = FakeNode(tmp_path)
    node.add_pod("be1", "besteffort")
    (node.ctl("cpu", "kubepods/besteffort") / "cpu.cfs_quota_us").write_text("2000\n")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("plugins:\n  qosPlan: {disabled: [{name: '*'}], enabled: [be_suppress]}\n"
                   "pluginConfig:\n  be_suppress: {enable: false}\n")
    rc = main(["agent", "--cgroup-root", str(node.root), "--config", str(cfg), "--once"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pods"] == 1
    assert {"path": "cpu/kubepods/besteffort/cpu.cfs_quota_us", "value": "-1", "plugin": "be_suppress",
            "fs": "cgroup", "old": "2000", "outcome": "written"} in out["writes"]
    assert node.read("cpu", "kubepods/besteffort", "cpu.cfs_quota_us") == "-1"


def test_metrics_listen_refuses_non_loopback(tmp_path, capsys):
    node = FakeNode(tmp_path)
    rc = main(["agent", "--cgroup-root", str(node.root), "--once", "--metrics-listen", "0.0.0.0:9999"])
    assert rc == 2 and "loopback" in capsys.readouterr().err


@pytest.mark.parametrize("flags, words", [
    (["--topology-interval", "-1"], ["--topology-interval", "0 (off) or 1"]),
    (["--device-interval", "nan"], ["--device-interval"]),
    (["--kubelet-config", "{missing}"], ["cannot read the kubelet configuration"]),
    (["--kubelet-config", "{bad}"], ["field cpuManagerPolicyOptions", "mapping of strings"]),
    (["--kubelet-config", "{badcpus}"], ["field reservedSystemCPUs"]),
])
def test_bad_cluster_flags_are_one_line_and_exit_2(tmp_path, capsys, flags, words):
    node = FakeNode(tmp_path)
    (tmp_path / "bad.yaml").write_text("cpuManagerPolicy: static\ncpuManagerPolicyOptions: {full-pcpus-only: true}\n")
    (tmp_path / "badcpus.yaml").write_text("cpuManagerPolicy: static\nreservedSystemCPUs: 0-x\n")
    names = {"missing": tmp_path / "missing.yaml", "bad": tmp_path / "bad.yaml", "badcpus": tmp_path / "badcpus.yaml"}
    flags = [f.format(**names) for f in flags]
    rc = main(["agent", "--cgroup-root", str(node.root), "--once", *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert all(w in err for w in words), err


def test_kubelet_config_is_the_cpu_manager_policy_the_plugins_see(tmp_path):
    """The kubelet's CPU manager policy as the NodeResourceTopology annotation reports it, and in the node
    state the plugins get (be_suppress: static → container dirs only), without an API too."""
    from koordfw.agent.cgroups import CgroupLayout
    from koordfw.agent.executor import Executor
    from koordfw.agent.loop import Agent
    from koordfw.agent.topology import kubelet_policy_annotation, kubelet_policy_json, read_kubelet_config
    from koordfw.core.plugins import Registry
    from koordfw.core.profile import profile_from_dict

    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("kind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: '1,0'\n")
    k = read_kubelet_config(str(cfg))
    assert json.loads(kubelet_policy_json(k)) == {"policy": "static", "reservedCPUs": "0-1"}
    assert kubelet_policy_json(read_kubelet_config(None)) == "{}"
    node = FakeNode(tmp_path / "n")
    agent = Agent(Registry(profile_from_dict({})).load(only=set()), CgroupLayout(node.root, 1),
                  Executor({"cgroup": node.root}), node_name="n1", proc_root=str(node.proc), sys_root=str(node.sys))
    agent.extra_annotations = kubelet_policy_annotation(k)
    anns = agent.collect_state().annotations
    assert json.loads(anns["kubelet.koordinator.sh/cpu-manager-policy"])["policy"] == "static"
