"""Scenario tests through the node agent: the real Agent round and ``koordfw agent plan --state``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from koordfw_llc_isolation.resctrl import AMD, INTEL, cpu_vendor, mba_value

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.loop import Agent
from koordfw.cli import main
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.resctrl import FakeResctrl, KernelExecutor

BE_UID = "aaaaaaaa-0000-0000-0000-000000000001"
LS_UID = "bbbbbbbb-0000-0000-0000-000000000002"
POD_UID = "cccccccc-0000-0000-0000-000000000003"
CONFIG = {"llc_isolation": {"LS": {"enable": True}, "BE": {"enable": True, "mbaPercent": 45}}}


def cgroup_tree(root: Path) -> None:
    for rel, pids in {f"kubepods/besteffort/pod{BE_UID}/c1": [300, 301],
                      f"kubepods/burstable/pod{LS_UID}/c1": [200],
                      f"kubepods/burstable/pod{POD_UID}/c1": [400]}.items():
        d = root / "cpu" / rel
        d.mkdir(parents=True)
        (d / "tasks").write_text("".join(f"{p}\n" for p in pids))
        (d / "cpuacct.usage").write_text("0\n")


def manifests(path: Path) -> None:
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "svc", "uid": LS_UID, "labels": {"koordinator.sh/qosClass": "LS"}},
             "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
             "status": {"phase": "Running"}},
            {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "cache-pinned", "uid": POD_UID,
                          "annotations": {"node.koordinator.sh/resctrl":
                                          '{"llc": {"schemata": {"range": [50, 100]}}}'}},
             "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
             "status": {"phase": "Running"}}]
    path.write_text(yaml.safe_dump_all(pods))


async def agent_on_fake_trees(tmp_path, **fake_args):
    """The real agent with llc_isolation over a fake resctrl tree and a fake kubelet cgroup tree."""
    # the agent's plugin reads the vendor from this machine's /proc/cpuinfo: make the fake match it
    host = cpu_vendor()
    vendor = host if host in (INTEL, AMD) else INTEL
    fake_args.setdefault("mba", host in (INTEL, AMD))
    fake = FakeResctrl(tmp_path / "resctrl", pids=[1, 200, 300, 301, 400], vendor=vendor, **fake_args)
    cgroup_tree(tmp_path / "cgroup")
    manifests(tmp_path / "pods.yaml")
    registry = Registry(profile_from_dict({"pluginConfig": CONFIG})).load(only={"llc_isolation"})
    executor = KernelExecutor(fake, {"cgroup": tmp_path / "cgroup", "resctrl": fake.root})
    agent = Agent(registry, CgroupLayout(tmp_path / "cgroup", 1), executor, node_name="n1",
                  pods_from=tmp_path / "pods.yaml")
    await agent.startup()
    return fake, executor, agent, vendor


async def test_agent_round_against_fake_trees(tmp_path):
    fake, executor, agent, vendor = await agent_on_fake_trees(tmp_path)
    results = await agent.run_once()
    mine = [r for r in results if r.write.plugin == "llc_isolation"]
    assert mine and {r.outcome for r in mine} == {"written"}
    assert executor.kernel_errors == []
    assert fake.groups() == ["", "BE", "LS", f"koordlet-{POD_UID}"]
    assert fake.tasks("BE") == {300, 301} and fake.tasks("LS") == {200}
    assert fake.tasks(f"koordlet-{POD_UID}") == {400} and fake.tasks("") == {1}
    assert fake.schemata("BE")["L3"] == {0: 0xf, 1: 0xf}
    if fake.mba:
        assert fake.schemata("BE")["MB"] == {0: mba_value(45, vendor), 1: mba_value(45, vendor)}
    second = await agent.run_once()
    assert [r for r in second if r.write.plugin == "llc_isolation"] == []
    assert agent.node_state.metrics["resctrl.BE.llc_occupancy"] == 0


async def test_agent_removes_the_group_of_a_pod_that_left(tmp_path):
    """The real agent round: the pod-level group goes with its pod (cgroup and manifest gone) and the
    CLOSID it held is free again in the fake kernel."""
    # CLOSIDs for the root, LS, BE and one pod-level group only
    fake, executor, agent, _ = await agent_on_fake_trees(tmp_path, mba=False, num_closids=4)
    await agent.run_once()
    group = f"koordlet-{POD_UID}"
    assert group in fake.groups()
    # the pod leaves: its process ends, the kubelet removes its cgroup, its manifest goes
    fake.exit(400)
    pod_dir = tmp_path / "cgroup" / "cpu" / "kubepods" / "burstable" / f"pod{POD_UID}"
    for f in sorted(pod_dir.rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    pod_dir.rmdir()
    docs = [d for d in yaml.safe_load_all((tmp_path / "pods.yaml").read_text()) if d["metadata"]["uid"] != POD_UID]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(docs))
    results = await agent.run_once()
    mine = [(r.write.path, r.write.rmdir, r.outcome) for r in results if r.write.plugin == "llc_isolation"]
    assert mine == [(group, True, "removed")] and executor.kernel_errors == []
    assert fake.groups() == ["", "BE", "LS"]
    fake.mkdir("reused")  # the CLOSID is free again
    assert [r for r in await agent.run_once() if r.write.plugin == "llc_isolation"] == []


def _state(tmp_path: Path, resctrl: dict | None) -> Path:
    state = {
        "cgroupVersion": 1,
        "node": {"name": "n1", "capacity": {"cpu": "8", "memory": "32Gi"}},
        "pods": [
            {"metadata": {"name": "batch", "uid": BE_UID, "labels": {"koordinator.sh/qosClass": "BE"}},
             "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}},
            {"metadata": {"name": "svc", "uid": LS_UID, "labels": {"koordinator.sh/qosClass": "LS"}},
             "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
             "status": {"phase": "Running"}},
        ],
        "cgroups": {f"cpu/kubepods/besteffort/pod{BE_UID}/c1/tasks": "300\n301",
                    f"cpu/kubepods/burstable/pod{LS_UID}/c1/tasks": "200"},
        "config": CONFIG,
    }
    if resctrl is not None:
        state["resctrl"] = resctrl
    p = tmp_path / "state.json"
    p.write_text(json.dumps(state))
    return p


@pytest.mark.parametrize("resctrl, want", [
    ({"cbmMask": "7ff", "minCbmBits": 1, "numClosids": 16, "cacheIds": [0, 1], "vendor": "GenuineIntel",
      "mba": True}, [
        ("LS/schemata", "L3:0=7ff;1=7ff;\n"), ("LS/schemata", "MB:0=100;1=100;\n"), ("LS/tasks", "200"),
        ("BE/schemata", "L3:0=f;1=f;\n"), ("BE/schemata", "MB:0=50;1=50;\n"),
        ("BE/tasks", "300"), ("BE/tasks", "301")]),
    ({"cbmMask": "ffff", "numClosids": 16, "cacheIds": [0, 1, 2, 3], "vendor": "AuthenticAMD",
      "mba": {"bandwidthGran": 1, "minBandwidth": 0, "numClosids": 16}}, [
        ("LS/schemata", "L3:0=ffff;1=ffff;2=ffff;3=ffff;\n"), ("LS/schemata", "MB:0=2048;1=2048;2=2048;3=2048;\n"),
        ("LS/tasks", "200"),
        ("BE/schemata", "L3:0=1f;1=1f;2=1f;3=1f;\n"), ("BE/schemata", "MB:0=72;1=72;2=72;3=72;\n"),
        ("BE/tasks", "300"), ("BE/tasks", "301")]),
    ({"cbmMask": "fffff", "numClosids": 16, "cacheIds": [0], "vendor": "GenuineIntel"}, [
        ("LS/schemata", "L3:0=fffff;\n"), ("LS/tasks", "200"),
        ("BE/schemata", "L3:0=3f;\n"), ("BE/tasks", "300"), ("BE/tasks", "301")]),
])
def test_agent_plan_cli(tmp_path, capsys, resctrl, want):
    path = _state(tmp_path, resctrl)
    assert main(["agent", "plan", "--state", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    mine = [w for w in out["writes"] if w["plugin"] == "llc_isolation"]
    assert {w["fs"] for w in mine} == {"resctrl"}
    assert [(w["path"], w["value"]) for w in mine] == want


def test_agent_plan_cli_without_resctrl(tmp_path, capsys):
    """No resctrl info in the state and none mounted here: no resctrl writes, one reason logged."""
    path = _state(tmp_path, None)
    assert main(["agent", "plan", "--state", str(path)]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [w for w in out["writes"] if w["fs"] == "resctrl"] == []
    assert captured.err.count("llc_isolation idle") == 1 and "no resctrl info" in captured.err


def test_listed_by_koordfw_plugins(capsys):
    assert main(["plugins", "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    row = rows["llc_isolation"]
    assert row["distribution"] == "koordfw-llc-isolation" and not row.get("error")
    assert {"collect", "qos_plan", "shutdown", "plugin_args", "startup"} <= set(row["hooks"])
