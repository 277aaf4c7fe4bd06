"""cpu_burst through the real node agent over fake kubelet cgroup trees (v1 and v2, cgroupfs and systemd):
collect → plan → apply rounds, the throttled scale-up, a vanished container, and the restore on stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cpu_burst_helpers import manifest
from structlog.testing import capture_logs

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.cli import main
from koordfw.core.clock import VirtualClock
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import FakeNode

LS_UID = "aaaaaaaa-0000-0000-0000-000000000001"
ANNO_UID = "bbbbbbbb-0000-0000-0000-000000000002"
LSR_UID = "cccccccc-0000-0000-0000-000000000003"
BE_UID = "dddddddd-0000-0000-0000-000000000004"
CONFIG = {"cpu_burst": {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300}}


class Tree:
    """A FakeNode with the pods' quotas, burst files and throttling counters as a kernel would have them."""

    def __init__(self, tmp_path: Path, version: int, driver: str) -> None:
        self.fake = FakeNode(tmp_path, version=version, driver=driver)
        self.v = version
        self.driver = driver
        pods = []
        self.dirs: dict[str, tuple[str, str]] = {}
        for uid, name, qos, level, limit, anno in (
                (LS_UID, "svc", "LS", "burstable", 2000, None),
                (ANNO_UID, "svc-annotated", "LS", "burstable", 2000, {"policy": "cpuBurstOnly", "cpuBurstPercent": 50}),
                (LSR_UID, "db", "LSR", "guaranteed", 2000, None),
                (BE_UID, "batch", "BE", "besteffort", 2000, None)):
            m = manifest(name, {"main": limit}, qos=qos, uid=uid,
                         annotations={"koordinator.sh/cpuBurst": json.dumps(anno)} if anno else None)
            m["status"]["containerStatuses"][0]["containerID"] = f"containerd://{uid[:8]}c1"
            pods.append(m)
            cdir = f"cri-containerd-{uid[:8]}c1.scope" if driver == "systemd" else f"{uid[:8]}c1"
            pod_rel = self.fake.add_pod(uid, level, containers=(cdir,))
            c_rel = f"{pod_rel}/{cdir}"
            self.dirs[uid] = (pod_rel, c_rel)
            for rel, quota in ((pod_rel, limit * 100), (c_rel, limit * 100)):
                self.set_quota(rel, quota)
                self.write(rel, self.burst_file, "0")
                self.set_stat(rel, 0, 0)
        (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
        self.pods_from = tmp_path / "pods.yaml"

    @property
    def burst_file(self) -> str:
        return "cpu.cfs_burst_us" if self.v == 1 else "cpu.max.burst"

    def write(self, rel: str, name: str, value: str) -> None:
        (self.fake.ctl("cpu", rel) / name).write_text(value + "\n")

    def set_quota(self, rel: str, quota: int) -> None:
        if self.v == 1:
            self.write(rel, "cpu.cfs_quota_us", str(quota))
        else:
            self.write(rel, "cpu.max", f"{quota} 100000" if quota > 0 else "max 100000")

    def quota(self, rel: str) -> int:
        text = self.fake.read("cpu", rel, "cpu.cfs_quota_us" if self.v == 1 else "cpu.max").split()[0]
        return -1 if text == "max" else int(text)

    def burst(self, rel: str) -> int:
        return int(self.fake.read("cpu", rel, self.burst_file))

    def set_stat(self, rel: str, periods: int, throttled: int) -> None:
        usage = "usage_usec 0\n" if self.v == 2 else ""
        self.write(rel, "cpu.stat", f"{usage}nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time 0")


def agent_for(tree: Tree, config=CONFIG) -> tuple[Agent, VirtualClock]:
    clock = VirtualClock(1000.0)
    registry = Registry(profile_from_dict({"pluginConfig": config})).load(only={"cpu_burst"})
    layout = CgroupLayout(tree.fake.root, tree.v, driver=tree.driver, kubepods=tree.fake.kubepods)
    executor = Executor({"cgroup": tree.fake.root}, cgroup_version=tree.v)
    agent = Agent(registry, layout, executor, node_name="n1", pods_from=tree.pods_from, proc_root=str(tree.fake.proc),
                  sys_root=str(tree.fake.sys), clock=clock)
    return agent, clock


TREES = [(1, "cgroupfs"), (2, "cgroupfs"), (1, "systemd"), (2, "systemd")]


@pytest.mark.parametrize("version, driver", TREES)
async def test_rounds_burst_scale_up_and_restore(tmp_path, version, driver):
    tree = Tree(tmp_path, version, driver)
    agent, clock = agent_for(tree)
    await agent.startup()
    ls_pod, ls_c = tree.dirs[LS_UID]
    an_pod, an_c = tree.dirs[ANNO_UID]
    with capture_logs() as logs:
        results = await agent.run_once()
    assert {r.outcome for r in results} == {"written"}
    # 2 cores × 1000 % = 2 000 000 µs of burst; the kernel takes at most the 200 000 µs quota: clamped, logged
    assert tree.burst(ls_c) == 200000 and tree.burst(ls_pod) == 200000
    assert any(e["event"].startswith("cpu burst clamped") and e["wanted"] == 2000000 for e in logs)
    # the annotation's 50 %: 100 000 µs, within the quota; its policy has no quota burst
    assert tree.burst(an_c) == 100000 and tree.burst(an_pod) == 100000
    # LSR and BE pods are not burstable
    for uid in (LSR_UID, BE_UID):
        assert tree.burst(tree.dirs[uid][1]) == 0 and tree.burst(tree.dirs[uid][0]) == 0
    # no throttling sample yet and no node usage: quotas stay
    assert tree.quota(ls_c) == 200000 and tree.quota(ls_pod) == 200000

    # the containers get throttled (half of the periods); the node is idle: ×1.2 per round up to ×3
    want = 200000
    for i in range(1, 8):
        clock.advance_to(1000.0 + i)
        for uid in (LS_UID, ANNO_UID):
            tree.set_stat(tree.dirs[uid][1], 100 * i, 50 * i)
        await agent.run_once()
        # from round 2 on the node's usage is known (idle) and the counters give a ratio of 0.5
        want = min(int(want * 1.2), 600000)
        assert tree.quota(ls_c) == want, i
        assert tree.quota(ls_pod) == want  # the pod moves by the container's delta
    assert want == 600000
    assert tree.quota(an_c) == 200000  # cpuBurstOnly: no quota burst
    assert tree.burst(ls_c) == 200000  # still the kubelet's quota, not the scaled one

    # no more throttling: the quota stays (cfsRemain)
    clock.advance_to(1010.0)
    tree.set_stat(ls_c, 10000, 350)
    await agent.run_once()
    clock.advance_to(1011.0)
    await agent.run_once()
    assert tree.quota(ls_c) == 600000

    await agent.shutdown()
    for uid in (LS_UID, ANNO_UID):
        pod_rel, c_rel = tree.dirs[uid]
        assert tree.burst(c_rel) == 0 and tree.burst(pod_rel) == 0
        assert tree.quota(c_rel) == 200000 and tree.quota(pod_rel) == 200000


@pytest.mark.parametrize("version, driver", TREES[:2])
async def test_overloaded_share_pool_scales_down(tmp_path, version, driver):
    tree = Tree(tmp_path, version, driver)
    _, ls_c = tree.dirs[LS_UID]
    ls_pod = tree.dirs[LS_UID][0]
    tree.set_quota(ls_c, 500000)
    tree.set_quota(ls_pod, 500000)
    agent, clock = agent_for(tree)
    await agent.startup()
    busy = 0
    for i in range(3):
        clock.advance_to(1000.0 + i)
        busy += 8 * 10**9  # all 8 CPUs busy: the share pool is overloaded
        tree.fake.set_proc_stat(busy)
        await agent.run_once()
    # round 1: no node usage (unknown: remain); rounds 2 and 3: ×0.8 each, not below the base
    assert tree.quota(ls_c) == int(int(500000 * 0.8) * 0.8)
    assert tree.quota(ls_pod) == tree.quota(ls_c)


async def test_a_vanished_container_is_skipped_and_logged(tmp_path):
    tree = Tree(tmp_path, 1, "cgroupfs")
    agent, clock = agent_for(tree)
    await agent.startup()
    ls_pod, ls_c = tree.dirs[LS_UID]
    for c in ("cpu", "cpuset", "cpuacct", "memory"):
        d = tree.fake.ctl(c, ls_c)
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    with capture_logs() as logs:
        results = await agent.run_once()
    assert all(r.outcome != "error" for r in results)
    assert any(e["event"] == "cgroup not found, skipped" and e["dir"] == ls_c for e in logs)
    assert tree.burst(ls_pod) == 200000  # the pod's own burst (its containers' sum, clamped) still applies
    assert tree.burst(tree.dirs[ANNO_UID][1]) == 100000


async def test_a_kernel_without_cpu_burst_only_scales_quotas(tmp_path):
    tree = Tree(tmp_path, 1, "cgroupfs")
    for uid in (LS_UID, ANNO_UID):
        for rel in tree.dirs[uid]:
            (tree.fake.ctl("cpu", rel) / "cpu.cfs_burst_us").unlink()
    agent, _ = agent_for(tree)
    await agent.startup()
    with capture_logs() as logs:
        results = await agent.run_once()
    assert [r for r in results if r.write.path.endswith("cpu.cfs_burst_us")] == []
    assert any(e["event"].startswith("the kernel has no cpu burst file") for e in logs)
    assert not (tree.fake.ctl("cpu", tree.dirs[LS_UID][1]) / "cpu.cfs_burst_us").exists()  # never created


async def test_policy_none_restores_every_round(tmp_path):
    tree = Tree(tmp_path, 2, "cgroupfs")
    ls_pod, ls_c = tree.dirs[LS_UID]
    tree.write(ls_c, "cpu.max.burst", "150000")
    tree.set_quota(ls_c, 300000)
    tree.set_quota(ls_pod, 300000)
    agent, _ = agent_for(tree, config={"cpu_burst": {"policy": "none"}})
    await agent.startup()
    await agent.run_once()
    assert tree.burst(ls_c) == 0 and tree.burst(ls_pod) == 0
    assert tree.quota(ls_c) == 200000 and tree.quota(ls_pod) == 200000
    # the annotation still turns it on for its pod (cpuBurstOnly, 50 %)
    assert tree.burst(tree.dirs[ANNO_UID][1]) == 100000


def test_agent_plan_from_a_state_file(tmp_path, capsys):
    """``koordfw agent plan --state``: the pod and container values come from the state's cgroups."""
    m = manifest("svc", {"main": 2000}, qos="LS", uid=LS_UID)
    pod_dir = f"kubepods/burstable/pod{LS_UID}"
    c_dir = f"{pod_dir}/main-id"
    state = {"cgroupVersion": 1, "node": {"name": "n1", "capacity": {"cpu": "8"}, "usage": {"cpu": "1"}},
             "pods": [{**m, "uid": LS_UID, "cgroupDir": pod_dir}],
             "cgroups": {f"cpu/{pod_dir}/cpu.cfs_quota_us": "200000", f"cpu/{pod_dir}/cpu.cfs_burst_us": "0",
                         f"cpu/{c_dir}/cpu.cfs_quota_us": "200000", f"cpu/{c_dir}/cpu.cfs_burst_us": "0"},
             "config": {"cpu_burst": {"policy": "cpuBurstOnly", "cpuBurstPercent": 40}}}
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    assert main(["agent", "plan", "--state", str(path)]) == 0
    writes = json.loads(capsys.readouterr().out)["writes"]
    assert [(w["path"], w["value"]) for w in writes if w["plugin"] == "cpu_burst"] == [
        (f"cpu/{c_dir}/cpu.cfs_burst_us", "80000"), (f"cpu/{pod_dir}/cpu.cfs_burst_us", "80000")]
