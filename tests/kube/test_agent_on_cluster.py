"""`koordfw agent --kubeconfig`: pod metadata from the API instead of guesses, and the NodeMetric published."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import yaml
from kube_testkit import node, pod

from koordfw.agent.topology import read_processors
from koordfw.testing.cgroups import FakeNode


async def test_agent_reads_pods_from_the_api_and_publishes_node_metric(api, tmp_path):
    api.create(node("n1", cpu="8"))
    # a pod labelled BE by Koordinator but sitting in the burstable QoS cgroup: only the API knows
    be = api.create(pod("spark-0", "1", node_name="n1", labels={"koordinator.sh/qosClass": "BE"}))
    ls = api.create(pod("web-0", "2", node_name="n1", labels={"koordinator.sh/qosClass": "LS"}))
    api.create(pod("elsewhere", "1", node_name="n2"))
    fake = FakeNode(tmp_path, ncpu=8)
    for p, level in ((be, "burstable"), (ls, "burstable")):
        rel = fake.add_pod(p["metadata"]["uid"], level)
        fake.set_usage(rel, 5 * 10**9)
        fake.set_memory(rel, 2**30)
    # the node's NodeSLO turns BE suppression on over --config's enable: false (fields present override)
    api.create({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n1"},
                "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("plugins:\n  qosPlan: {disabled: [{name: '*'}], enabled: [be_suppress]}\n"
                   "pluginConfig:\n  be_suppress: {enable: false}\n")
    cmd = [sys.executable, "-m", "koordfw", "agent", "--kubeconfig", str(kubeconfig), "--node-name", "n1",
           "--cgroup-root", str(fake.root), "--config", str(cfg), "--once", "--dry-run",
           "--node-metric-interval", "60"]
    proc = await anyio.to_thread.run_sync(lambda: subprocess.run(cmd, capture_output=True, text=True, timeout=120))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["pods"] == 2  # the pod of another node is not this agent's
    # suppression by CFS quota, as the NodeSLO says (--config alone would restore the quota, already -1); the
    # amount depends on this machine's /proc/stat, which the command reads
    [quota] = [w for w in out["writes"] if w["path"] == "cpu/kubepods/besteffort/cpu.cfs_quota_us"]
    assert int(quota["value"]) >= 2000 and quota["old"] == "-1"
    metric = api.get("nodemetrics", "n1")
    assert metric is not None, "the agent published no NodeMetric"
    status = metric["status"]
    assert status["updateTime"] and "cpu" in status["nodeMetric"]["nodeUsage"]["resources"]
    names = {(m["namespace"], m["name"], m["qos"]) for m in status["podsMetric"]}
    assert names == {("default", "spark-0", "BE"), ("default", "web-0", "LS")}
    # the agent's NodeResourceTopology: this machine's CPUs (the CLI reads the real /sys)
    nrt = api.get("noderesourcetopologies", "n1")
    detail = json.loads(nrt["metadata"]["annotations"]["node.koordinator.sh/cpu-topology"])["detail"]
    assert [d["id"] for d in detail] == sorted(p.cpu for p in read_processors("/sys"))
    assert nrt["metadata"]["annotations"]["kubelet.koordinator.sh/cpu-manager-policy"] == "{}"  # no --kubelet-config
    assert api.get("devices", "n1") is None  # no NVML here
