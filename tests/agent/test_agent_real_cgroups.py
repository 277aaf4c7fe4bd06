"""The agent on this machine's real cgroup v1 hierarchy: a busy BE process is throttled, then released.

Everything lives under a unique test parent (``/sys/fs/cgroup/<ctl>/koordfw-test-<pid>-<rand>``) that is
removed afterwards. Skipped where cgroup v1 cpu/cpuacct/cpuset are not mounted or not writable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from koordfw_be_suppress import Args, plan

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.testing.cgroups import make_real_cgroup, real_cgroups_unavailable, remove_real_cgroups

from .agent_testkit import make_registry

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "cpuset")


REASON = real_cgroups_unavailable(CONTROLLERS)
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture
def real_tree():
    parent = f"koordfw-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    uid = uuid.uuid4().hex[:12]
    pod = f"{parent}/kubepods/besteffort/pod{uid}"
    dirs = [f"{parent}", f"{parent}/kubepods", f"{parent}/kubepods/burstable", f"{parent}/kubepods/besteffort",
            pod, f"{pod}/ctr"]
    made: list[Path] = []
    procs: list[subprocess.Popen] = []
    try:
        for c in CONTROLLERS:
            for d in dirs:
                p = ROOT / c / d
                make_real_cgroup(p)
                made.append(p)
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        procs.append(busy)
        for c in CONTROLLERS:
            (ROOT / c / pod / "ctr" / "cgroup.procs").write_text(str(busy.pid))
        yield parent, pod
    finally:
        for p in procs:
            p.kill()
            p.wait()
        time.sleep(0.05)
        remove_real_cgroups(made)


def _usage_cores(pod: str, seconds: float) -> float:
    f = ROOT / "cpuacct" / pod / "cpuacct.usage"
    a, t0 = int(f.read_text()), time.monotonic()
    time.sleep(seconds)
    b, t1 = int(f.read_text()), time.monotonic()
    return (b - a) / 1e9 / (t1 - t0)


async def test_busy_be_process_throttled_then_released(real_tree):
    parent, pod = real_tree
    kubepods = f"{parent}/kubepods"
    be_dir = f"{kubepods}/besteffort"
    # threshold 0 + min 10%: the BE budget is exactly 10% of the node, whatever else runs here
    config = {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 0,
                              "cpuSuppressMinPercent": 10}}
    agent = Agent(make_registry(config), CgroupLayout(ROOT, 1, "cgroupfs", kubepods), Executor({"cgroup": ROOT}),
                  interval=1.0, node_name="real")
    await agent.run_once()
    time.sleep(0.3)
    await agent.run_once()
    ns = agent.node_state
    assert [p.qos for p in ns.pods] == ["BE"]
    assert ns.pods[0].usage["cpu"] > 0  # the busy process is seen
    planned = [w for w in plan(ns, Args(True, 0, 10, "cfsQuota")) if w.path.endswith("cfs_quota_us")]
    want = ns.capacity["cpu"] * 10 // 100 * 100  # milli → µs per 100 ms period
    quota = int((ROOT / "cpu" / be_dir / "cpu.cfs_quota_us").read_text())
    assert quota == want
    # the round after the write plans the same value again (nothing left to change)
    assert not planned or planned[0].value == str(want)
    throttled = _usage_cores(pod, 1.0)
    assert throttled <= want / 100000 * 1.25 + 0.02, f"BE used {throttled:.3f} cores under a {want} µs quota"
    if (ROOT / "cpu" / be_dir / "cpu.idle").exists():
        assert (ROOT / "cpu" / be_dir / "cpu.idle").read_text().strip() == "1"

    await agent.shutdown()
    assert (ROOT / "cpu" / be_dir / "cpu.cfs_quota_us").read_text().strip() == "-1"
    if (ROOT / "cpu" / be_dir / "cpu.idle").exists():
        assert (ROOT / "cpu" / be_dir / "cpu.idle").read_text().strip() == "0"
    released = _usage_cores(pod, 0.5)
    assert released > 0  # running again (how much depends on the other load on this machine)
