"""cpu_burst on this machine's real cgroup v1 ``cpu`` controller: a burst-annotated LS pod's container and
pod cgroups get ``cpu.cfs_burst_us`` through the plugin's collect → plan and the agent's executor; the
kernel's own rule (no burst above the quota: EINVAL) is checked too, then everything is restored and
removed. Skipped, with the reason, when not root, when ``/sys/fs/cgroup/cpu`` is not a writable v1
controller, or when the kernel has no ``cpu.cfs_burst_us``."""

from __future__ import annotations

import errno
import json
import os
import uuid
from pathlib import Path

import pytest
from cpu_burst_helpers import manifest
from koordfw_cpu_burst import Args, CPUBurst
from koordfw_cpu_burst.plugin import VALUES_KEY

from koordfw.agent.executor import Executor
from koordfw.core.model import pod_from_manifest
from koordfw.core.nodestate import NodeState, PodState
from koordfw.testing.cgroups import real_cgroups_unavailable, remove_real_cgroups

CPU = Path("/sys/fs/cgroup/cpu")


def _reason() -> str | None:
    why = real_cgroups_unavailable(("cpu",))
    if why is None and not (CPU / "cpu.cfs_burst_us").exists():
        return f"the kernel has no cpu.cfs_burst_us ({CPU}/cpu.cfs_burst_us absent: CFS burst needs Linux 5.14+)"
    return why


REASON = _reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


class Handle:
    """The two things cpu_burst's collect uses of the agent's handle."""

    def __init__(self) -> None:
        self.roots = {"cgroup": "/sys/fs/cgroup"}

    def now(self) -> float:
        return 1000.0


@pytest.fixture
def tree():
    parent = f"koordfw-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    uid = uuid.uuid4().hex[:12]
    kubepods = f"{parent}/kubepods"
    pod_dir = f"{kubepods}/burstable/pod{uid}"
    c_dir = f"{pod_dir}/c{uid}"
    made: list[Path] = []
    try:
        for d in (parent, kubepods, f"{kubepods}/burstable", pod_dir, c_dir):
            (CPU / d).mkdir()
            made.append(CPU / d)
        # the kubelet's values for a pod of one container with a 2-core limit
        for d in (pod_dir, c_dir):
            (CPU / d / "cpu.cfs_quota_us").write_text("200000")
        yield uid, kubepods, pod_dir, c_dir
    finally:
        remove_real_cgroups(made)
        assert not (CPU / parent).exists()


def test_burst_annotated_ls_pod_on_real_cgroups(tree):
    uid, kubepods, pod_dir, c_dir = tree
    m = manifest("svc", {"main": 2000}, qos="LS", uid=uid,
                 annotations={"koordinator.sh/cpuBurst": json.dumps({"policy": "cpuBurstOnly", "cpuBurstPercent": 1000})})
    m["status"]["containerStatuses"][0]["containerID"] = f"containerd://c{uid}"
    pod = pod_from_manifest(m)
    ps = PodState(uid=uid, pod=pod, qos="LS", kube_qos="Burstable", cgroup_dir=pod_dir)
    ns = NodeState(name="n1", cgroup_version=1, kubepods=kubepods, capacity={"cpu": 8000}, pods=(ps,))
    plugin = CPUBurst()
    args = Args()  # the node's policy is none: the annotation turns burst on for this pod
    metrics = plugin.collect(ns, args, Handle())
    assert metrics is not None
    assert metrics[VALUES_KEY][f"cpu/{c_dir}/cpu.cfs_quota_us"] == "200000"
    ns = NodeState(name="n1", cgroup_version=1, kubepods=kubepods, capacity={"cpu": 8000}, pods=(ps,), metrics=metrics)
    writes = plugin.plan(ns, args)
    assert [(w.path, w.value) for w in writes] == [(f"cpu/{c_dir}/cpu.cfs_burst_us", "200000"),
                                                   (f"cpu/{pod_dir}/cpu.cfs_burst_us", "200000")]
    results = Executor({"cgroup": "/sys/fs/cgroup"}, cgroup_version=1).apply(writes)
    assert [r.outcome for r in results] == ["written", "written"]
    # 2 cores × 1000 % would be 2 000 000 µs: clamped to the 200 000 µs quota, which the kernel accepts
    assert (CPU / c_dir / "cpu.cfs_burst_us").read_text().strip() == "200000"
    assert (CPU / pod_dir / "cpu.cfs_burst_us").read_text().strip() == "200000"
    # the kernel's rule the clamp follows: a burst above the quota is EINVAL
    with pytest.raises(OSError) as e:
        fd = os.open(CPU / c_dir / "cpu.cfs_burst_us", os.O_WRONLY)
        try:
            os.write(fd, b"2000000")
        finally:
            os.close(fd)
    assert e.value.errno == errno.EINVAL
    # stop: burst back to 0
    restore = plugin.plan(current_state(ns, plugin, args), args, restore=True)
    Executor({"cgroup": "/sys/fs/cgroup"}, cgroup_version=1).apply(restore)
    assert (CPU / c_dir / "cpu.cfs_burst_us").read_text().strip() == "0"
    assert (CPU / pod_dir / "cpu.cfs_burst_us").read_text().strip() == "0"
    assert (CPU / c_dir / "cpu.cfs_quota_us").read_text().strip() == "200000"


def current_state(ns: NodeState, plugin: CPUBurst, args: Args) -> NodeState:
    """The node state with the files as they are now (what shutdown reads before restoring)."""
    metrics = plugin.collect(ns, args, Handle())
    return NodeState(name=ns.name, cgroup_version=1, kubepods=ns.kubepods, capacity=ns.capacity, pods=ns.pods,
                     metrics=metrics or {})


# -- the whole agent on real cgroups: a busy LS container in a 20 % quota ------------------------------------

CONTROLLERS = ("cpu", "cpuacct", "cpuset")


@pytest.fixture
def busy_tree(tmp_path):
    import subprocess
    import sys
    import time

    from koordfw.testing.cgroups import make_real_cgroup

    root = CPU.parent
    for c in CONTROLLERS:
        if not (root / c / "cgroup.procs").exists():
            pytest.skip(f"cgroup v1 controller {c} not mounted at {root / c}")
    parent = f"koordfw-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    uid = uuid.uuid4().hex[:12]
    kubepods = f"{parent}/kubepods"
    pod_dir = f"{kubepods}/burstable/pod{uid}"
    c_dir = f"{pod_dir}/c{uid}"
    made: list[Path] = []
    procs: list[subprocess.Popen] = []
    try:
        for c in CONTROLLERS:
            for d in (parent, kubepods, f"{kubepods}/burstable", f"{kubepods}/besteffort", pod_dir, c_dir):
                make_real_cgroup(root / c / d)
                made.append(root / c / d)
        for d in (pod_dir, c_dir):  # the kubelet's quota for a 200m limit
            (CPU / d / "cpu.cfs_quota_us").write_text("20000")
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        procs.append(busy)
        for c in CONTROLLERS:
            (root / c / c_dir / "cgroup.procs").write_text(str(busy.pid))
        m = manifest("svc", {"main": 200}, qos="LS", uid=uid)
        m["status"]["containerStatuses"][0]["containerID"] = f"containerd://c{uid}"
        (tmp_path / "pods.json").write_text(json.dumps(m))
        yield kubepods, pod_dir, c_dir, tmp_path / "pods.json"
    finally:
        for p in procs:
            p.kill()
            p.wait()
        time.sleep(0.05)
        remove_real_cgroups(made)


async def test_agent_rounds_and_restore_on_real_cgroups(busy_tree):
    import time

    from koordfw_cpu_burst.burst import NodeBurst
    from koordfw_cpu_burst.plugin import THROTTLED_KEY

    from koordfw.agent.cgroups import CgroupLayout
    from koordfw.agent.loop import Agent
    from koordfw.core.plugins import Registry
    from koordfw.core.profile import profile_from_dict

    kubepods, pod_dir, c_dir, pods_from = busy_tree
    # threshold 100 %: this (shared) machine's share pool is overloaded only when all its CPUs are busy
    config = {"cpu_burst": {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                            "sharePoolThresholdPercent": 100}}
    registry = Registry(profile_from_dict({"pluginConfig": config})).load(only={"cpu_burst"})
    root = CPU.parent
    agent = Agent(registry, CgroupLayout(root, 1, "cgroupfs", kubepods), Executor({"cgroup": root}),
                  node_name="real", pods_from=pods_from)
    await agent.startup()
    await agent.run_once()
    # 0.2 cores × 1000 % = 200 000 µs wanted; the kernel takes at most the 20 000 µs quota
    assert (CPU / c_dir / "cpu.cfs_burst_us").read_text().strip() == "20000"
    assert (CPU / pod_dir / "cpu.cfs_burst_us").read_text().strip() == "20000"
    time.sleep(0.5)
    await agent.run_once()
    ns = agent.node_state
    ratio = ns.metrics[THROTTLED_KEY][f"containerd://c{c_dir.rsplit('/c', 1)[1]}"]
    assert ratio > 0  # a busy loop in a 20 % quota is throttled
    # scaled up ×1.2 when the share pool was idle in that round (the plugin's own verdict, recomputed)
    node = registry.plugins["cpu_burst"].obj.node_burst(ns, registry.args["cpu_burst"])
    quota = int((CPU / c_dir / "cpu.cfs_quota_us").read_text())
    want = {NodeBurst.IDLE: 24000, NodeBurst.COOLING: 20000, NodeBurst.UNKNOWN: 20000, NodeBurst.OVERLOAD: 20000}
    assert quota == want[node], node
    assert int((CPU / pod_dir / "cpu.cfs_quota_us").read_text()) == quota
    await agent.shutdown()
    assert (CPU / c_dir / "cpu.cfs_burst_us").read_text().strip() == "0"
    assert (CPU / pod_dir / "cpu.cfs_burst_us").read_text().strip() == "0"
    assert (CPU / c_dir / "cpu.cfs_quota_us").read_text().strip() == "20000"
    assert (CPU / pod_dir / "cpu.cfs_quota_us").read_text().strip() == "20000"
