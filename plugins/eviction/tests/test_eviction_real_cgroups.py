"""BEMemoryEvict on this machine's real cgroup v1 memory controller (issue 19).

A test node of 256 MiB: a unique tree ``/sys/fs/cgroup/<ctl>/koordfw-evict-<pid>-<rand>/kubepods`` holds
a BE pod (``besteffort/pod<uid>/ctr``) and an LS pod (``burstable/pod<uid>/ctr``), each a child python
process attached to its container cgroup; ``memory.limit_in_bytes`` of the test ``kubepods`` is 512 MiB so
nothing here can hurt the host. The node's memory is the test tree's: before each round the agent's
``/proc/meminfo`` (its ``proc_root``; ``stat`` is the real ``/proc/stat``) shows a node of 256 MiB whose
used memory is the test ``kubepods`` cgroup's real usage without page cache (what lxcfs shows a container).
Everything else is the agent's real collect: pod discovery and each pod's ``memory.stat``.

When the BE process allocates past 70 % of the node, the real agent round plans the BE pod's eviction and
never the LS pod's; before that, nothing. Skipped unless root with the v1 memory controller writable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent, memory_without_cache
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import make_real_cgroup, real_cgroups_unavailable, remove_real_cgroups

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "memory")
MiB = 1 << 20
CAPACITY = 256 * MiB


REASON = real_cgroups_unavailable(CONTROLLERS, writable="memory")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

#: waits for a line on stdin, then holds that many MiB touched (every page written), and says "ok"
HOLDER = r"""
import sys
held = []
print("ok", flush=True)
for line in sys.stdin:
    held.append(bytearray(b"\x01") * (int(line) << 20))
    print("ok", flush=True)
"""

PODS = """
apiVersion: v1
kind: Node
metadata: {{name: evict-test}}
status:
  capacity: {{cpu: "2", memory: 256Mi}}
  allocatable: {{cpu: "2", memory: 256Mi}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: prod, uid: {ls}, labels: {{koordinator.sh/qosClass: LS}}}}
spec: {{nodeName: evict-test, priority: 9000, containers: [{{name: c, resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: batch-job, namespace: batch, uid: {be}, labels: {{koordinator.sh/qosClass: BE}}}}
spec: {{nodeName: evict-test, priority: 5000, containers: [{{name: c}}]}}
"""


class Holder:
    def __init__(self, cgroup: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        for c in CONTROLLERS:
            (ROOT / c / cgroup / "cgroup.procs").write_text(str(self.p.pid))
        self._ok()

    def _ok(self) -> None:
        assert self.p.stdout is not None
        assert self.p.stdout.readline().strip() == "ok"

    def hold(self, mib: int) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(f"{mib}\n")
        self.p.stdin.flush()
        self._ok()

    def stop(self) -> None:
        self.p.kill()
        self.p.wait()


@pytest.fixture
def tree():
    parent = f"koordfw-evict-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    kubepods = f"{parent}/kubepods"
    be_uid, ls_uid = str(uuid.uuid4()), str(uuid.uuid4())
    be, ls = f"{kubepods}/besteffort/pod{be_uid}/ctr", f"{kubepods}/burstable/pod{ls_uid}/ctr"
    made: list[Path] = []
    holders: list[Holder] = []
    try:
        for c in CONTROLLERS:
            for d in (parent, kubepods, f"{kubepods}/besteffort", f"{kubepods}/burstable", be.rsplit("/", 1)[0],
                      be, ls.rsplit("/", 1)[0], ls):
                p = ROOT / c / d
                make_real_cgroup(p)
                made.append(p)
        (ROOT / "memory" / kubepods / "memory.limit_in_bytes").write_text(str(512 * MiB))
        holders += [Holder(be), Holder(ls)]
        yield {"kubepods": kubepods, "be_uid": be_uid, "ls_uid": ls_uid, "be": holders[0], "ls": holders[1]}
    finally:
        for h in holders:
            h.stop()
        time.sleep(0.05)
        remove_real_cgroups(made)


async def test_real_be_process_past_the_threshold_is_evicted_never_ls(tree, tmp_path):
    kubepods = tree["kubepods"]
    pods = tmp_path / "pods"
    pods.mkdir()
    (pods / "pods.yaml").write_text(PODS.format(be=tree["be_uid"], ls=tree["ls_uid"]))
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").symlink_to("/proc/stat")
    layout = CgroupLayout(ROOT, 1, "cgroupfs", kubepods)

    def node_meminfo() -> int:
        """The 256 MiB test node's /proc/meminfo: used = the test kubepods' usage without page cache."""
        used = memory_without_cache(layout, kubepods)
        assert used is not None
        (proc / "meminfo").write_text(f"MemTotal: {CAPACITY // 1024} kB\n"
                                      f"MemAvailable: {max(CAPACITY - used, 0) // 1024} kB\n")
        return used

    reg = Registry(profile_from_dict({"pluginConfig": {"eviction": {"memoryEvictThresholdPercent": 70}}})).load(
        only={"eviction"})
    agent = Agent(reg, layout, Executor({"cgroup": ROOT}), interval=1.0, node_name="evict-test", pods_from=pods,
                  proc_root=str(proc))
    seen: list[list[tuple[str, str]]] = []

    async def evictor(evictions, ns):
        seen.append([(e.pod, e.pod_uid) for e in evictions])

    agent.evictor = evictor

    async def settled(at_least: int) -> int:
        """The kernel flushes memcg statistics lazily (a periodic worker, ~2 s): wait, bounded, until the
        test kubepods' memory.stat shows what the children hold, then write the node's meminfo."""
        for _ in range(100):
            if (memory_without_cache(layout, kubepods) or 0) >= at_least:
                break
            await anyio.sleep(0.1)
        return node_meminfo()

    tree["ls"].hold(40)  # LS: 40 MiB, more than BE has so far
    tree["be"].hold(8)
    used = await settled(44 * MiB)
    assert used < CAPACITY * 70 // 100, f"the test tree already uses {used // MiB} MiB"
    await agent.run_once()
    ns = agent.node_state
    assert ns is not None and ns.capacity["memory"] == CAPACITY
    by_uid = {p.uid: p for p in ns.pods}
    assert set(by_uid) == {tree["be_uid"], tree["ls_uid"]}
    assert by_uid[tree["be_uid"]].qos == "BE" and by_uid[tree["ls_uid"]].qos == "LS"
    # read from the real memory.stat (the kernel batches its per-CPU counters: a little slack)
    assert by_uid[tree["ls_uid"]].usage["memory"] >= 36 * MiB
    assert seen == [] and agent.last_evictions == []

    tree["be"].hold(160)  # BE grows to ~170 MiB: the node passes 70 %
    used = await settled(CAPACITY * 70 // 100)
    assert used * 100 // CAPACITY >= 70, f"only {used // MiB} MiB used"
    await agent.run_once()
    ns = agent.node_state
    be_usage = next(p for p in ns.pods if p.uid == tree["be_uid"]).usage["memory"]
    assert be_usage >= 150 * MiB
    assert seen == [[("batch/batch-job", tree["be_uid"])]]
    ev = agent.last_evictions[0]
    assert ev.plugin == "eviction" and "BEMemoryEvict" in ev.reason and "70%" in ev.reason
    assert all(uid != tree["ls_uid"] for batch in seen for _, uid in batch)
