"""The agent against a fake kubelet cgroup tree (v1 and v2, cgroupfs and systemd)."""

from __future__ import annotations

import os

import anyio
import pytest

from koordfw.agent.cgroups import CgroupLayout, detect_version
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.core.clock import VirtualClock
from koordfw.core.nodestate import FileWrite
from koordfw.testing.cgroups import FakeNode

from .agent_testkit import make_registry

ENABLED = {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}


def make_agent(node: FakeNode, config=None, pods_from=None, clock=None, dry_run=False):
    layout = CgroupLayout(node.root, detect_version(node.root), node.driver, node.kubepods)
    return Agent(make_registry(config or ENABLED), layout, Executor({"cgroup": node.root}, dry_run=dry_run),
                 interval=1.0, node_name="n1", pods_from=pods_from, proc_root=str(node.proc),
                 sys_root=str(node.sys), clock=clock or VirtualClock(100.0))


async def two_rounds(node, agent, clock, usages, node_busy_s):
    """Round 1 takes the first samples; round 2 sees 1 s of the given usage (cores per pod dir)."""
    await agent.run_once()
    clock.advance(1.0)
    for rel, cores in usages.items():
        node.set_usage(rel, int(cores * 1e9))
    node.set_proc_stat(int(node_busy_s * 1e9))
    return await agent.run_once()


@pytest.mark.parametrize("version, driver", [(1, "cgroupfs"), (1, "systemd"), (2, "cgroupfs"), (2, "systemd")])
def test_discovery_and_qos_from_cgroup_level(tmp_path, version, driver):
    node = FakeNode(tmp_path, version=version, driver=driver)
    ls = node.add_pod("1111-aaaa", "burstable")
    be = node.add_pod("2222-bbbb", "besteffort", containers=("c1", "c2"))
    g = node.add_pod("3333-cccc", "guaranteed")
    layout = CgroupLayout(node.root, detect_version(node.root), driver, node.kubepods)
    assert layout.version == version
    found = {p.uid: p for p in layout.discover()}
    assert set(found) == {"1111-aaaa", "2222-bbbb", "3333-cccc"}
    assert found["1111-aaaa"].kube_qos == "Burstable" and found["1111-aaaa"].cgroup_dir == ls
    assert found["2222-bbbb"].cgroup_dir == be and len(found["2222-bbbb"].containers) == 2
    assert found["3333-cccc"].kube_qos == "Guaranteed" and found["3333-cccc"].cgroup_dir == g


@pytest.mark.parametrize("version", [1, 2])
async def test_round_throttles_be_quota(tmp_path, version):
    node = FakeNode(tmp_path, version=version)
    ls = node.add_pod("ls1", "burstable")
    be = node.add_pod("be1", "besteffort")
    clock = VirtualClock(100.0)
    agent = make_agent(node, clock=clock)
    results = await two_rounds(node, agent, clock, {ls: 3.0, be: 2.0}, node_busy_s=6.0)
    ns = agent.node_state
    assert ns.usage["cpu"] == 6000
    assert {p.uid: p.usage["cpu"] for p in ns.pods} == {"ls1": 3000, "be1": 2000}
    assert {p.uid: p.qos for p in ns.pods} == {"ls1": "LS", "be1": "BE"}
    # 8 cores × 65% = 5200 − LS 3000 − system (6000−5000 = 1000) = 1200 milli → 120000 µs
    quota_file = "cpu.cfs_quota_us" if version == 1 else "cpu.max"
    want = "120000" if version == 1 else "120000 100000"
    assert node.read("cpu", node.qos("besteffort"), quota_file) == want
    assert any(r.outcome == "written" and r.write.path.endswith(quota_file) for r in results)
    if version == 1:
        assert node.read("cpu", node.qos("besteffort"), "cpu.idle") == "1"
    # a third round with the same usage writes nothing
    clock.advance(1.0)
    node.set_usage(ls, int(6e9))
    node.set_usage(be, int(4e9))
    node.set_proc_stat(int(12e9))
    assert [r for r in await agent.run_once() if r.outcome == "written"] == []


async def test_pods_from_manifests_give_the_qos(tmp_path, fake_node):
    ls = fake_node.add_pod("be-labelled", "burstable")
    d = tmp_path / "pods"
    d.mkdir()
    (d / "p.yaml").write_text("""
apiVersion: v1
kind: Pod
metadata: {name: batch, uid: be-labelled, labels: {koordinator.sh/qosClass: BE}}
spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
---
apiVersion: v1
kind: Node
metadata: {name: n1, annotations: {node.koordinator.sh/reservation: '{"resources": {"cpu": "2"}}'}}
status: {capacity: {cpu: "8"}, allocatable: {cpu: "7"}}
""")
    clock = VirtualClock(100.0)
    agent = make_agent(fake_node, pods_from=d, clock=clock)
    await two_rounds(fake_node, agent, clock, {ls: 4.0}, node_busy_s=4.5)
    ns = agent.node_state
    p = ns.pod("be-labelled")
    assert p.qos == "BE" and p.pod is not None and p.pod.name == "batch"
    assert ns.allocatable["cpu"] == 7000 and "node.koordinator.sh/reservation" in ns.annotations
    # BE pod usage does not count; system = max(0.5, reserved 2) → 5200 − 2000 = 3200 → 320000
    assert fake_node.read("cpu", fake_node.qos("besteffort"), "cpu.cfs_quota_us") == "320000"


async def test_shutdown_restores(fake_node):
    ls = fake_node.add_pod("ls1", "burstable")
    be = fake_node.add_pod("be1", "besteffort")
    clock = VirtualClock(100.0)
    agent = make_agent(fake_node, {"be_suppress": {"enable": True}}, clock=clock)  # cpuset policy
    await two_rounds(fake_node, agent, clock, {ls: 5.0, be: 1.0}, node_busy_s=6.5)
    assert fake_node.read("cpuset", fake_node.qos("besteffort"), "cpuset.cpus") == "0,4"
    assert fake_node.read("cpuset", be, "cpuset.cpus") == "0,4"
    assert fake_node.read("cpu", fake_node.qos("besteffort"), "cpu.idle") == "1"
    await agent.shutdown()
    assert fake_node.read("cpuset", fake_node.qos("besteffort"), "cpuset.cpus") == "0-7"
    assert fake_node.read("cpuset", be, "cpuset.cpus") == "0-7"
    assert fake_node.read("cpuset", be + "/c1", "cpuset.cpus") == "0-7"
    assert fake_node.read("cpu", fake_node.qos("besteffort"), "cpu.cfs_quota_us") == "-1"
    assert fake_node.read("cpu", fake_node.qos("besteffort"), "cpu.idle") == "0"


async def test_run_loop_restores_when_cancelled(fake_node):
    fake_node.add_pod("ls1", "burstable")
    fake_node.add_pod("be1", "besteffort")
    fake_node.set_proc_stat(0)
    agent = make_agent(fake_node, {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                                                   "cpuSuppressMinPercent": 10}})
    agent.interval = 0.01
    # make usage available from the first round on by pre-seeding the tracker
    be_dir = fake_node.qos("besteffort")
    with anyio.move_on_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: agent.run(handle_signals=False))
            while agent.rounds < 1:
                await anyio.sleep(0.01)
            agent.clock.advance(1)  # also ends the loop's wait for its next round
            fake_node.set_proc_stat(int(1e9))
            while fake_node.read("cpu", be_dir, "cpu.cfs_quota_us") == "-1":
                await anyio.sleep(0.01)
            assert fake_node.read("cpu", be_dir, "cpu.cfs_quota_us") != "-1"
            tg.cancel_scope.cancel()
    assert fake_node.read("cpu", be_dir, "cpu.cfs_quota_us") == "-1"
    assert fake_node.read("cpu", be_dir, "cpu.idle") == "0"


async def test_disabled_plugin_restores_on_start(fake_node):
    be_dir = fake_node.qos("besteffort")
    (fake_node.ctl("cpu", be_dir) / "cpu.cfs_quota_us").write_text("2000\n")
    (fake_node.ctl("cpuset", be_dir) / "cpuset.cpus").write_text("0-1\n")
    fake_node.add_pod("be1", "besteffort")
    agent = make_agent(fake_node, {"be_suppress": {"enable": False}})
    await agent.run_once()
    assert fake_node.read("cpu", be_dir, "cpu.cfs_quota_us") == "-1"
    assert fake_node.read("cpuset", be_dir, "cpuset.cpus") == "0-7"


async def test_dry_run_changes_nothing(fake_node):
    be_dir = fake_node.qos("besteffort")
    (fake_node.ctl("cpu", be_dir) / "cpu.cfs_quota_us").write_text("2000\n")
    fake_node.add_pod("be1", "besteffort")
    agent = make_agent(fake_node, {"be_suppress": {"enable": False}}, dry_run=True)
    results = await agent.run_once()
    assert any(r.outcome == "dry_run" for r in results)
    assert fake_node.read("cpu", be_dir, "cpu.cfs_quota_us") == "2000"


def test_executor_refuses_escapes_and_tolerates_vanished(fake_node, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("keep")
    # a crafted pod dir that is a symlink out of the root
    os.symlink(outside, fake_node.root / "cpu" / "kubepods" / "besteffort" / "podevil")
    ex = Executor({"cgroup": fake_node.root})
    res = ex.apply([
        FileWrite("cpu/kubepods/besteffort/podevil/f", "x", plugin="t"),
        FileWrite("cpu/kubepods/../../outside/f", "x", plugin="t"),
        FileWrite(str(outside / "f"), "x", plugin="t"),
        FileWrite("cpu/kubepods/besteffort/podgone/cpu.cfs_quota_us", "5", plugin="t"),
        FileWrite("cpu/kubepods/besteffort/cpu.cfs_quota_us", "5000", plugin="t"),
        FileWrite("cpuset/kubepods/besteffort/cpuset.cpus", "0,1,2,3,4,5,6,7", plugin="t"),
    ])
    assert [r.outcome for r in res] == ["refused", "refused", "refused", "vanished", "written", "unchanged"]
    assert (outside / "f").read_text() == "keep"
    assert ex.stats.refused == 3 and ex.stats.vanished == 1 and ex.stats.written == 1


def test_executor_mkdir_for_resctrl_groups(tmp_path):
    root = tmp_path / "resctrl"
    root.mkdir()
    ex = Executor({"cgroup": tmp_path / "cg", "resctrl": root})
    [r] = ex.apply([FileWrite("koordlet-BE/schemata", "L3:0=f", fs="resctrl", mkdir=True, plugin="llc")])
    assert r.outcome == "written" and (root / "koordlet-BE/schemata").read_text() == "L3:0=f"


async def test_bad_plugin_plan_is_logged_not_fatal(fake_node):
    from koordfw import hookimpl

    class Broken:
        @hookimpl
        def qos_plan(self, node_state):
            return ["not a FileWrite"]

    class Raises:
        @hookimpl
        def qos_plan(self, node_state):
            raise RuntimeError("boom")

    from koordfw.core.plugins import Registry
    from koordfw.core.profile import profile_from_dict

    reg = Registry(profile_from_dict({"pluginConfig": {"be_suppress": {"enable": False}}})).load(
        only={"be_suppress"}, extra={"broken": Broken, "raises": Raises})
    be_dir = fake_node.qos("besteffort")
    (fake_node.ctl("cpu", be_dir) / "cpu.cfs_quota_us").write_text("2000\n")
    agent = make_agent(fake_node)
    agent.registry = reg
    from koordfw.core.caller import HookCaller

    reg.bind(agent.handle_for)
    agent.caller = HookCaller(reg, agent.handle_for)
    await agent.run_once()
    assert fake_node.read("cpu", be_dir, "cpu.cfs_quota_us") == "-1"


def test_collect_state_reuses_a_pods_container_states_while_its_containers_stay(tmp_path):
    """collect_state builds a pod's ContainerStates once while discover finds the same containers, and
    anew the round a container is added or removed (the next round sees it)."""
    node = FakeNode(tmp_path)
    rel = node.add_pod("u1", "burstable", containers=("c1",))
    agent = make_agent(node)
    first = agent.collect_state().pods[0].containers
    assert [(c.name, c.cgroup_dir) for c in first] == [("c1", f"{rel}/c1")]
    assert agent.collect_state().pods[0].containers is first
    node.mkcg(f"{rel}/c2")
    second = agent.collect_state().pods[0].containers
    assert [(c.name, c.cgroup_dir) for c in second] == [("c1", f"{rel}/c1"), ("c2", f"{rel}/c2")]
    node.rmcg(f"{rel}/c1")
    assert [(c.name, c.cgroup_dir) for c in agent.collect_state().pods[0].containers] == [("c2", f"{rel}/c2")]
    assert set(agent._containers) == {rel}
