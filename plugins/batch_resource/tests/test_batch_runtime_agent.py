"""batch_resource's node side through the real agent against fake kubelet trees (v1/v2, cgroupfs/systemd),
and through ``koordfw agent plan --state``."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from koordfw_batch_resource.runtimehook import Rule, plan

from koordfw.agent.cgroups import CgroupLayout, detect_version
from koordfw.agent.executor import FORCE_UPDATE_SECONDS, Executor
from koordfw.agent.loop import Agent
from koordfw.cli import main
from koordfw.core.clock import VirtualClock
from koordfw.core.nodestate import NodeState
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import FakeNode

CPU, MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
UID = "5f0c1d2e-0000-4000-8000-000000000001"
LS_UID = "5f0c1d2e-0000-4000-8000-000000000002"
V1_UNLIMITED = "9223372036854771712"


def manifests(path, *, gone: bool = False):
    containers = [
        {"name": "c0", "resources": {"requests": {CPU: "500", MEM: "2Gi"}, "limits": {CPU: "500", MEM: "2Gi"}}},
        {"name": "c1", "resources": {"requests": {CPU: "1500", MEM: "1Gi"}}},  # no limits: unlimited
    ]
    statuses = [{"name": "c0", "containerID": "containerd://aaa"}, {"name": "c1", "containerID": "containerd://bbb"}]
    if gone:  # a third container the runtime reports but whose cgroup is not there (yet, or any more)
        containers.append({"name": "c2", "resources": {"limits": {CPU: "1", MEM: "1Gi"}}})
        statuses.append({"name": "c2", "containerID": "containerd://ccc"})
    docs = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "spark-exec", "namespace": "batch", "uid": UID,
                          "labels": {"koordinator.sh/qosClass": "BE"}},
             "spec": {"containers": containers},
             "status": {"phase": "Running", "containerStatuses": statuses}},
            {"apiVersion": "v1", "kind": "Pod",  # an LS pod with batch resources: not touched
             "metadata": {"name": "web", "namespace": "shop", "uid": LS_UID, "labels": {"koordinator.sh/qosClass": "LS"}},
             "spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": "1", CPU: "1000"}}}]},
             "status": {"phase": "Running", "containerStatuses": [{"name": "w", "containerID": "containerd://www"}]}}]
    path.write_text(yaml.safe_dump_all(docs))


def cdir(node: FakeNode, cid: str) -> str:
    return f"cri-containerd-{cid}.scope" if node.driver == "systemd" else cid


def kubelet_defaults(node: FakeNode, rel: str) -> None:
    """What the kubelet leaves on a BE pod's or container's cgroup: minimal shares, no limits."""
    if node.version == 1:
        (node.ctl("cpu", rel) / "cpu.shares").write_text("2\n")
        (node.ctl("memory", rel) / "memory.limit_in_bytes").write_text(V1_UNLIMITED + "\n")
    else:
        (node.ctl("cpu", rel) / "cpu.weight").write_text("1\n")
        (node.ctl("memory", rel) / "memory.max").write_text("max\n")


def setup(tmp_path, version, driver, config=None, gone=False):
    node = FakeNode(tmp_path, version=version, driver=driver)
    pod = node.add_pod(UID, "besteffort", containers=(cdir(node, "aaa"), cdir(node, "bbb")))
    ls = node.add_pod(LS_UID, "burstable", containers=(cdir(node, "www"),))
    for rel in (pod, f"{pod}/{cdir(node, 'aaa')}", f"{pod}/{cdir(node, 'bbb')}", ls, f"{ls}/{cdir(node, 'www')}"):
        kubelet_defaults(node, rel)
    manifests(tmp_path / "pods.yaml", gone=gone)
    only = {"batch_resource"} | ({"be_suppress"} & set(config or {}))
    registry = Registry(profile_from_dict({"pluginConfig": config or {}})).load(only=only)
    layout = CgroupLayout(node.root, detect_version(node.root), node.driver, node.kubepods)
    agent = Agent(registry, layout, Executor({"cgroup": node.root}), node_name="n1", pods_from=tmp_path / "pods.yaml",
                  proc_root=str(node.proc), sys_root=str(node.sys), clock=VirtualClock(100.0))
    return node, agent, pod, ls


def knobs(node: FakeNode, rel: str) -> tuple[str, str, str]:
    if node.version == 1:
        return (node.read("cpu", rel, "cpu.shares"), node.read("cpu", rel, "cpu.cfs_quota_us"),
                node.read("memory", rel, "memory.limit_in_bytes"))
    return (node.read("cpu", rel, "cpu.weight"), node.read("cpu", rel, "cpu.max"), node.read("memory", rel, "memory.max"))


WANT = {  # (pod, c0, c1) after the first round
    1: (("2048", "-1", V1_UNLIMITED), ("512", "50000", str(2 << 30)), ("1536", "-1", V1_UNLIMITED)),
    2: (("79", "max 100000", "max"), ("20", "50000 100000", str(2 << 30)), ("59", "max 100000", "max")),
}


@pytest.mark.parametrize("version, driver", [(1, "cgroupfs"), (1, "systemd"), (2, "cgroupfs"), (2, "systemd")])
async def test_pod_start_then_reconcile(tmp_path, version, driver):
    node, agent, pod, ls = setup(tmp_path, version, driver)
    await agent.startup()
    first = await agent.run_once()
    mine = [r for r in first if r.write.plugin == "batch_resource"]
    assert mine and {r.outcome for r in mine} <= {"written", "unchanged"}
    c0, c1 = f"{pod}/{cdir(node, 'aaa')}", f"{pod}/{cdir(node, 'bbb')}"
    assert (knobs(node, pod), knobs(node, c0), knobs(node, c1)) == WANT[version]
    # the LS pod keeps what the kubelet set, its batch request notwithstanding
    assert knobs(node, ls)[0] == ("2" if version == 1 else "1")
    # the next round: nothing to write (v1's "-1" memory limit reads back as a number: not rewritten)
    assert [r for r in await agent.run_once() if r.outcome == "written"] == []
    # something resets a knob behind the agent's back: the executor trusts what it wrote for koordlet's
    # force-update period (--resource-force-update-seconds, 60 s), then reads the file again and the
    # round puts the value back
    shares = "cpu.shares" if version == 1 else "cpu.weight"
    (node.ctl("cpu", c0) / shares).write_text("2\n")
    agent.clock.advance_to(agent.clock.now() + FORCE_UPDATE_SECONDS)
    again = [r for r in await agent.run_once() if r.outcome == "written"]
    assert [(r.write.path.rsplit("/", 1)[-1], r.write.value) for r in again] == [(shares, WANT[version][1][0])]


@pytest.mark.parametrize("version", [1, 2])
async def test_cfs_quota_policy_unsets_the_quotas(tmp_path, version):
    """BE suppress by cfsQuota (Koordinator: NodeSLO resourceUsedThresholdWithBE) leaves the quotas -1."""
    node, agent, pod, _ = setup(tmp_path, version, "cgroupfs",
                                config={"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}})
    await agent.run_once()
    c0 = f"{pod}/{cdir(node, 'aaa')}"
    assert knobs(node, c0)[1] == ("-1" if version == 1 else "max 100000")
    assert knobs(node, c0)[2] == str(2 << 30) and knobs(node, c0)[0] == WANT[version][1][0]


@pytest.mark.parametrize("version", [1, 2])
async def test_node_side_switched_off(tmp_path, version):
    node, agent, pod, _ = setup(tmp_path, version, "cgroupfs", config={"batch_resource": {"batchResource": False}})
    assert [r for r in await agent.run_once() if r.write.plugin == "batch_resource"] == []
    assert knobs(node, pod)[0] == ("2" if version == 1 else "1")


@pytest.mark.parametrize("version", [1, 2])
async def test_a_vanished_cgroup_is_skipped(tmp_path, version, caplog):
    # a container without a cgroup is not planned at all; one that vanishes between plan and write is
    # skipped by the executor (outcome "vanished", logged) and the rest of the pod is still written
    node, agent, pod, _ = setup(tmp_path, version, "systemd", gone=True)
    ns = agent.collect_state()
    writes = plan(ns, Rule(), {})
    assert not any("ccc" in w.path for w in writes)
    c1 = f"{pod}/{cdir(node, 'bbb')}"
    for ctl in ("cpu", "cpuset", "cpuacct", "memory"):
        shutil.rmtree(node.ctl(ctl, c1), ignore_errors=True)
    results = agent.executor.apply(writes)
    outcomes = {r.write.path: r.outcome for r in results}
    assert {o for p, o in outcomes.items() if cdir(node, "bbb") in p} == {"vanished"}
    assert {o for p, o in outcomes.items() if cdir(node, "bbb") not in p} <= {"written", "unchanged"}
    assert knobs(node, f"{pod}/{cdir(node, 'aaa')}") == WANT[version][1]
    # the agent's round goes on without the container
    assert {r.outcome for r in await agent.run_once()} <= {"written", "unchanged"}


# -- koordfw agent plan --state ---------------------------------------------------------------------

def state(version: int, cgroups: dict, annotations: dict | None = None, config: dict | None = None) -> dict:
    return {
        "cgroupVersion": version,
        "node": {"name": "n1", "capacity": {"cpu": "8", "memory": "32Gi"}, "annotations": annotations or {}},
        "pods": [{"metadata": {"name": "spark-exec", "namespace": "batch", "uid": UID,
                               "labels": {"koordinator.sh/qosClass": "BE"}},
                  "spec": {"containers": [{"name": "c0", "resources": {"limits": {CPU: "2000", MEM: "4Gi"}}},
                                          {"name": "c1", "resources": {"limits": {CPU: "1000", MEM: "1Gi"}}}]},
                  "status": {"phase": "Running", "containerStatuses": [
                      {"name": "c0", "containerID": "containerd://aaa"},
                      {"name": "c1", "containerID": "containerd://bbb"}]}}],
        "cgroups": cgroups,
        "config": config or {},
    }


def run_plan(tmp_path, capsys, st) -> list[tuple[str, str]]:
    p = tmp_path / "state.json"
    p.write_text(json.dumps(st))
    assert main(["agent", "plan", "--state", str(p)]) == 0
    out = json.loads(capsys.readouterr().out)
    return [(w["path"], w["value"]) for w in out["writes"] if w["plugin"] == "batch_resource"]


POD = f"kubepods/besteffort/pod{UID}"


def test_plan_cli_v1_pod_first(tmp_path, capsys):
    got = run_plan(tmp_path, capsys, state(1, {f"cpu/{POD}/aaa/cpu.cfs_quota_us": "-1",
                                               f"cpu/{POD}/bbb/cpu.cfs_quota_us": "-1"}))
    assert got == [
        (f"cpu/{POD}/cpu.shares", "3072"), (f"cpu/{POD}/cpu.cfs_quota_us", "300000"),
        (f"memory/{POD}/memory.limit_in_bytes", str(5 << 30)),
        (f"cpu/{POD}/aaa/cpu.shares", "2048"), (f"cpu/{POD}/aaa/cpu.cfs_quota_us", "200000"),
        (f"memory/{POD}/aaa/memory.limit_in_bytes", str(4 << 30)),
        (f"cpu/{POD}/bbb/cpu.shares", "1024"), (f"cpu/{POD}/bbb/cpu.cfs_quota_us", "100000"),
        (f"memory/{POD}/bbb/memory.limit_in_bytes", str(1 << 30)),
    ]


def test_plan_cli_v1_tightening_writes_the_containers_first(tmp_path, capsys):
    """A larger cpu normalization ratio shrinks every quota: cgroup v1 refuses a pod quota below a
    container's, so the containers go first (Koordinator's leveled update)."""
    cur = {f"cpu/{POD}/cpu.cfs_quota_us": "300000", f"cpu/{POD}/aaa/cpu.cfs_quota_us": "200000",
           f"cpu/{POD}/bbb/cpu.cfs_quota_us": "100000"}
    got = run_plan(tmp_path, capsys, state(1, cur, {"node.koordinator.sh/cpu-normalization-ratio": "2.0"}))
    quotas = [(p, v) for p, v in got if p.endswith("cfs_quota_us")]
    assert quotas == [(f"cpu/{POD}/aaa/cpu.cfs_quota_us", "100000"), (f"cpu/{POD}/bbb/cpu.cfs_quota_us", "50000"),
                      (f"cpu/{POD}/cpu.cfs_quota_us", "150000")]


def test_plan_cli_v2_keeps_the_period_and_converts_shares(tmp_path, capsys):
    cur = {f"{POD}/cpu.max": "max 50000", f"{POD}/aaa/cpu.max": "max 100000", f"{POD}/bbb/memory.max": "max"}
    got = dict(run_plan(tmp_path, capsys, state(2, cur)))
    assert got[f"{POD}/cpu.max"] == "300000 50000" and got[f"{POD}/cpu.weight"] == "118"
    assert got[f"{POD}/aaa/cpu.max"] == "200000 100000" and got[f"{POD}/aaa/cpu.weight"] == "79"
    assert got[f"{POD}/memory.max"] == str(5 << 30) and got[f"{POD}/bbb/memory.max"] == str(1 << 30)


def test_plan_cli_unchanged_values_are_not_listed(tmp_path, capsys):
    cur = {f"cpu/{POD}/aaa/cpu.shares": "2048", f"cpu/{POD}/aaa/cpu.cfs_quota_us": "200000",
           f"memory/{POD}/aaa/memory.limit_in_bytes": str(4 << 30), f"cpu/{POD}/bbb/cpu.shares": "2"}
    got = run_plan(tmp_path, capsys, state(1, cur))
    assert not any("/aaa/" in p for p, _ in got) and any("/bbb/" in p for p, _ in got)


def test_plan_cli_invalid_ratio_is_ignored(tmp_path, capsys):
    got = dict(run_plan(tmp_path, capsys, state(1, {}, {"node.koordinator.sh/cpu-normalization-ratio": "fast"})))
    assert got[f"cpu/{POD}/cpu.cfs_quota_us"] == "300000"


def test_plan_without_container_cgroups_writes_the_pod_only():
    ns = NodeState.from_state_file(state(1, {}))
    assert {w.path.rsplit("/", 1)[0] for w in plan(ns, Rule(), {})} == {f"cpu/{POD}", f"memory/{POD}"}


@pytest.mark.parametrize("name, change", [
    ("int64 quantities", lambda s: s["pods"][0]["spec"]["containers"][0]["resources"].update(
        limits={CPU: str(2**63 - 1), MEM: str(2**63 - 1)})),
    ("statuses not a list", lambda s: s["pods"][0]["status"].update(containerStatuses={"c0": "x"})),
    ("odd status entries", lambda s: s["pods"][0]["status"].update(
        containerStatuses=[None, {"name": 3}, {"name": "c0", "containerID": 7}, {"name": "c0", "containerID": "aaa"}],
        initContainerStatuses="x")),
    ("deep annotation", lambda s: s["pods"][0]["metadata"].update(annotations={
        "node.koordinator.sh/extended-resource-spec": "[" * 5000 + "]" * 5000})),
    ("kata pod", lambda s: s["pods"][0]["spec"].update(runtimeClassName="kata")),
    ("garbage current values", lambda s: s["cgroups"].update({
        f"cpu/{POD}/aaa/cpu.cfs_quota_us": "-" + "9" * 30, f"memory/{POD}/memory.limit_in_bytes": "lots"})),
])
def test_plan_survives_hostile_state(tmp_path, capsys, name, change):
    st = state(1, {f"cpu/{POD}/aaa/cpu.cfs_quota_us": "-1"})
    change(st)
    got = run_plan(tmp_path, capsys, st)
    assert all(p.startswith(("cpu/", "memory/")) for p, _ in got), name
    if name == "kata pod":  # containers of kata pods are not reconciled, the pod is
        assert got and not any("/aaa/" in p for p, _ in got)


def test_runtime_hook_events():
    """pod_start: the pod and its containers (PreRunPodSandbox); container_start: that container only."""
    from koordfw_batch_resource import BatchResource, ColocationStrategy

    from koordfw.core.nodestate import ContainerState

    ns = NodeState.from_state_file(state(1, {f"cpu/{POD}/aaa/cpu.shares": "2", f"cpu/{POD}/bbb/cpu.shares": "2"}))
    ps = ns.pods[0]
    plugin, args = BatchResource(), ColocationStrategy()
    start = plugin.runtime_hook("pod_start", ps, None, ns, args)
    assert {w.path.rsplit("/", 1)[0] for w in start} == {f"cpu/{POD}", f"memory/{POD}", f"cpu/{POD}/aaa",
                                                         f"memory/{POD}/aaa", f"cpu/{POD}/bbb", f"memory/{POD}/bbb"}
    c = ContainerState(name="bbb", id="bbb", cgroup_dir=f"{POD}/bbb")
    one = plugin.runtime_hook("container_start", ps, c, ns, args)
    assert [(w.path, w.value) for w in one] == [
        (f"cpu/{POD}/bbb/cpu.shares", "1024"), (f"cpu/{POD}/bbb/cpu.cfs_quota_us", "100000"),
        (f"memory/{POD}/bbb/memory.limit_in_bytes", str(1 << 30))]
    assert plugin.runtime_hook("pod_start", ps, None, ns, ColocationStrategy(batch_resource=False)) is None
    assert plugin.qos_plan(ns, args) == start


def test_batch_resource_arg_is_node_side_only():
    """``batchResource`` is the profile's key (koordlet's gate); a ColocationCfg, a nodeConfigs entry or the
    node's colocation-strategy annotation cannot switch it."""
    from koordfw_batch_resource.strategy import OVERRIDABLE, from_colocation_config

    from koordfw.core.errors import ConfigError
    from koordfw.core.plugins import Registry as R

    reg = R(profile_from_dict({"pluginConfig": {"batch_resource": {"batchResource": False}}})).load(
        only={"batch_resource"})
    assert reg.args["batch_resource"].batch_resource is False
    assert "batchResource" not in OVERRIDABLE
    assert from_colocation_config({"enable": True, "batchResource": False}, "cfg").batch_resource is True
    with pytest.raises(ConfigError, match="batchResource"):
        R(profile_from_dict({"pluginConfig": {"batch_resource": {"nodeConfigs": [
            {"nodeSelector": {}, "batchResource": False}]}}})).load(only={"batch_resource"})


async def test_a_nodeslo_switching_to_cfs_quota_suppression_unsets_the_quotas(tmp_path):
    """Koordinator's rule follows the NodeSLO's resourceUsedThresholdWithBE; the agent maps it onto
    be_suppress's args (docs/agent.md), and the hook reads those from the round's pluginConfig."""
    from koordfw.agent.nodeslo import apply_nodeslo

    local = {"be_suppress": {"enable": False}}
    node, agent, pod, _ = setup(tmp_path, 1, "cgroupfs", config=local)
    await agent.run_once()
    c0 = f"{pod}/{cdir(node, 'aaa')}"
    assert knobs(node, c0)[1] == "50000"
    slo = {"metadata": {"name": "n1"},
           "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}}
    apply_nodeslo(agent.registry, local, slo)
    await agent.run_once()
    assert knobs(node, c0)[1] == "-1" and knobs(node, c0)[0] == "512"
    apply_nodeslo(agent.registry, local, None)  # the NodeSLO is gone: the local config again
    await agent.run_once()
    assert knobs(node, c0)[1] == "50000"


async def test_the_reconciler_runs_when_its_input_changes_or_every_10_seconds(tmp_path):
    """koordlet's runtime hooks reconciler: on a pod update (the pods, their manifests and cgroup dirs, the
    rule) and otherwise every --runtime-hooks-reconcile-interval (10 s); a round in between reads and
    plans nothing for batch_resource."""
    import os

    from koordfw_batch_resource.plugin import RECONCILE_INTERVAL_SECONDS, RECONCILE_KEY

    node, agent, pod, _ = setup(tmp_path, 1, "cgroupfs")
    await agent.run_once()
    assert agent.node_state.metrics[RECONCILE_KEY] is True
    await agent.run_once()
    assert agent.node_state.metrics[RECONCILE_KEY] is False
    assert "batch_resource.current" not in agent.node_state.metrics
    agent.clock.advance_to(agent.clock.now() + RECONCILE_INTERVAL_SECONDS - 1)
    await agent.run_once()
    assert agent.node_state.metrics[RECONCILE_KEY] is False
    agent.clock.advance_to(agent.clock.now() + 1)
    await agent.run_once()
    assert agent.node_state.metrics[RECONCILE_KEY] is True
    await agent.run_once()
    assert agent.node_state.metrics[RECONCILE_KEY] is False
    # the manifests change (a pod update): reconciled in the next round
    st = os.stat(tmp_path / "pods.yaml")
    os.utime(tmp_path / "pods.yaml", (st.st_atime + 5, st.st_mtime + 5))
    await agent.run_once()
    assert agent.node_state.metrics[RECONCILE_KEY] is True
    # a container cgroup goes: reconciled in the next round
    await agent.run_once()
    for ctl in ("cpu", "cpuset", "cpuacct", "memory"):
        shutil.rmtree(node.ctl(ctl, f"{pod}/{cdir(node, 'bbb')}"), ignore_errors=True)
    await agent.run_once()
    assert agent.node_state.metrics[RECONCILE_KEY] is True
