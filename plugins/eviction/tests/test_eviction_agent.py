"""The eviction plugin in the node agent against a fake kubelet cgroup tree, and in ``agent plan``."""

from __future__ import annotations

import json

from koordfw.agent.cgroups import CgroupLayout, detect_version
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.core.clock import VirtualClock
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import FakeNode

GiB = 1 << 30

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: prod, uid: ls-1, labels: {koordinator.sh/qosClass: LS}}
spec: {priority: 9000, containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: spark-1, namespace: batch, uid: be-1, labels: {koordinator.sh/qosClass: BE}}
spec: {priority: 5000, containers: [{name: c, resources: {requests: {kubernetes.io/batch-cpu: "1000"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: spark-2, namespace: batch, uid: be-2, labels: {koordinator.sh/qosClass: BE}}
spec: {priority: 5000, containers: [{name: c, resources: {requests: {kubernetes.io/batch-cpu: "1000"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: spark-3, namespace: batch, uid: be-3, labels: {koordinator.sh/qosClass: BE}}
spec: {priority: 5500, containers: [{name: c, resources: {requests: {kubernetes.io/batch-cpu: "1000"}}}]}
"""


def agent_for(node: FakeNode, pods_dir, config=None):
    reg = Registry(profile_from_dict({"pluginConfig": config or {}})).load(only={"eviction"})
    layout = CgroupLayout(node.root, detect_version(node.root), node.driver, node.kubepods)
    return Agent(reg, layout, Executor({"cgroup": node.root}), interval=1.0, node_name="n1", pods_from=pods_dir,
                 proc_root=str(node.proc), sys_root=str(node.sys), clock=VirtualClock(100.0))


async def test_agent_evicts_be_pods_never_ls_under_memory_pressure(tmp_path):
    node = FakeNode(tmp_path)
    d = tmp_path / "pods"
    d.mkdir()
    (d / "pods.yaml").write_text(PODS)
    ls = node.add_pod("ls-1", "burstable")
    be = {u: node.add_pod(u, "besteffort") for u in ("be-1", "be-2", "be-3")}
    node.set_memory(ls, 20 * GiB)  # the LS pod uses the most: it is never a victim
    node.set_memory(be["be-1"], 3 * GiB)
    node.set_memory(be["be-2"], 5 * GiB)
    node.set_memory(be["be-3"], 1 * GiB)
    # 32 GiB, 2 GiB available: 93 % used; threshold 70, lower 68 → 32 GiB × 25 // 100 = 8 GiB
    (node.proc / "meminfo").write_text("MemTotal:       33554432 kB\nMemAvailable:    2097152 kB\n")
    agent = agent_for(node, d)
    seen = []

    async def evictor(evictions, ns):
        seen.append([(e.pod, e.pod_uid, e.plugin) for e in evictions])

    agent.evictor = evictor
    await agent.run_once()
    # priority 5000 first, by usage: spark-2 (5 GiB), spark-1 (3 GiB) reach 8 GiB; spark-3 stays
    assert seen == [[("batch/spark-2", "be-2", "eviction"), ("batch/spark-1", "be-1", "eviction")]]
    # the next round is within the 4 s cool-down and both are pending: nothing more
    agent.clock.advance(1.0)
    await agent.run_once()
    assert len(seen) == 1 and agent.last_evictions == []
    # below the threshold: nothing
    (node.proc / "meminfo").write_text("MemTotal:       33554432 kB\nMemAvailable:   16777216 kB\n")
    agent.clock.advance(10.0)
    await agent.run_once()
    assert len(seen) == 1


async def test_agent_memory_eviction_off(tmp_path):
    node = FakeNode(tmp_path)
    d = tmp_path / "pods"
    d.mkdir()
    (d / "pods.yaml").write_text(PODS)
    node.set_memory(node.add_pod("be-1", "besteffort"), 3 * GiB)
    (node.proc / "meminfo").write_text("MemTotal:       33554432 kB\nMemAvailable:    2097152 kB\n")
    agent = agent_for(node, d, {"eviction": {"memoryEvictEnable": False}})
    await agent.run_once()
    assert agent.last_evictions == []


def test_agent_plan_prints_the_be_victims(tmp_path, capsys):
    from koordfw.cli import main

    def p(name, uid, qos, prio, mem):
        return {"metadata": {"name": name, "namespace": "batch", "uid": uid, "labels": {"koordinator.sh/qosClass": qos}},
                "spec": {"priority": prio, "containers": [{"name": "c"}]}, "usage": {"memory": mem}}

    st = {"node": {"name": "n1", "capacity": {"cpu": "8", "memory": "100Gi"}, "usage": {"memory": "90Gi"}},
          "pods": [p("ls", "u-ls", "LS", 100, "60Gi"), p("be-a", "u-a", "BE", 100, "10Gi"), p("be-b", "u-b", "BE", 100, "15Gi")],
          "config": {"eviction": {"memoryEvictThresholdPercent": 80}}}
    f = tmp_path / "state.json"
    f.write_text(json.dumps(st))
    assert main(["agent", "--disable", "be_suppress", "plan", "--state", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    # 90 % ≥ 80 %: 100Gi × (90 − 78) // 100 = 12Gi; be-b (15Gi) is enough
    assert [(e["pod"], e["uid"], e["plugin"]) for e in out["evictions"]] == [("batch/be-b", "u-b", "eviction")]
    assert "BEMemoryEvict" in out["evictions"][0]["reason"]
