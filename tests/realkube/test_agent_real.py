"""``koordfw agent --kubeconfig`` against the real kube-apiserver v1.20.2, on this machine's real cgroup v1 hierarchy,
as the ServiceAccount and RBAC ``deploy/agent.yaml`` gives it.

The agent's kubepods tree is a test-made subtree of the real controllers (``/sys/fs/cgroup/<ctl>/ag-<pid>-<rand>/
kubepods``, ``--kubepods`` pointing there), one real cgroup per pod, removed afterwards: the agent reads real
counters and writes (if ever) nowhere else. No kubelet runs: pods are created bound (``spec.nodeName``) and the test
writes their status Running and Ready as a kubelet would, so the disruption controller counts them.

* The reports: NodeMetric, NodeResourceTopology and Device objects the real CRD schemas (deploy/00-crd-*.yaml)
  accept whole, and no request of the agent refused by RBAC.
* The NodeSLO flow and evictions: the running agent follows a NodeSLO created while it runs (a memory eviction
  threshold that this machine's use now crosses), evicts the BE pod without a budget through the Eviction API
  (``policy/v1beta1`` on this server), and honours the PodDisruptionBudget's 429 on the other: that pod stays, the
  refusal is logged and retried later, the LS pod is never touched, and the agent keeps running and stops cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path

import anyio
import pytest
import yaml
from realkube_testkit import pod, wait_until

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.agent.topology import read_processors
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.node import NodeOnCluster
from koordfw.testing.cgroups import make_real_cgroup, real_cgroups_unavailable, remove_real_cgroups
from koordfw.testing.control_plane import ControlPlane, ControlPlaneError
from koordfw.testing.nvml import FakeGPU, FakeNVML

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
AGENT_SA = ("koordfw-system", "koordfw-agent")
AGENT_USER = "system:serviceaccount:koordfw-system:koordfw-agent"
SLO = "slo.koordinator.sh/v1alpha1"
CRDS = ("nodemetric", "nodeslo", "noderesourcetopology", "device")
#: what the agent's evictor needs and deploy/agent.yaml's ClusterRole did not grant when this test was written
#: (reported): the Eviction API, the DisruptionTarget condition on the pod, the evictPodSuccess/Fail events
EVICTION_RULES = [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                  {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
                  {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}]

REASON = real_cgroups_unavailable(CONTROLLERS)
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def _grants(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
               for r in rules)


@pytest.fixture
def agent_rbac(kube_plane: ControlPlane):
    """deploy/'s CRDs the agent writes, and deploy/agent.yaml's ServiceAccount, ClusterRole and binding (not its
    DaemonSet), which must grant :data:`EVICTION_RULES`.
    Yields the agent's kubeconfig (its ServiceAccount token)."""
    for crd in CRDS:
        kube_plane.apply_file(DEPLOY / f"00-crd-{crd}.yaml")
    # the previous test's sweep may still be deleting the namespace: wait until it is gone (or was never)
    wait_until(lambda: _phase(kube_plane, f"/api/v1/namespaces/{AGENT_SA[0]}") in (None, "Active"), timeout=60,
               what=f"namespace {AGENT_SA[0]} deleted by the last sweep")
    kube_plane.create_namespace(AGENT_SA[0])
    docs = [d for d in yaml.safe_load_all((DEPLOY / "agent.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    for d in docs:
        if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            kube_plane.apply(d)
    missing = [r for r in EVICTION_RULES if not _grants(role.get("rules") or [], r["apiGroups"][0],
                                                        r["resources"][0], r["verbs"][0])]
    assert missing == [], f"deploy/agent.yaml's ClusterRole does not grant what evictions need: {missing}"
    yield kube_plane.service_account_kubeconfig(*AGENT_SA)


class Tree:
    """The test's real kubepods subtree in every controller of :data:`CONTROLLERS`."""

    def __init__(self) -> None:
        self.parent = f"ag-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.kubepods = f"{self.parent}/kubepods"
        self.made: list[Path] = []
        for d in (self.parent, self.kubepods, f"{self.kubepods}/burstable", f"{self.kubepods}/besteffort"):
            self._mk(d)

    def _mk(self, rel: str) -> None:
        for c in CONTROLLERS:
            p = ROOT / c / rel
            make_real_cgroup(p)
            self.made.append(p)

    def add_pod(self, uid: str, level: str = "burstable") -> None:
        self._mk(f"{self.kubepods}/{level}/pod{uid}")
        self._mk(f"{self.kubepods}/{level}/pod{uid}/c1")

    def remove(self) -> None:
        remove_real_cgroups(self.made)


@pytest.fixture
def tree():
    t = Tree()
    try:
        yield t
    finally:
        t.remove()
        assert not any((ROOT / c / t.parent).exists() for c in CONTROLLERS)


def make_pod(plane: ControlPlane, name: str, ns: str, node: str, qos: str, tree: Tree, **labels: str) -> str:
    """A pod bound to ``node``, Running and Ready as its kubelet would say, with its real cgroups; its uid."""
    obj = pod(name, ns, labels={"koordinator.sh/qosClass": qos, **labels}, nodeName=node, scheduler="default-scheduler")

    def created() -> bool:
        try:
            plane.apply(obj)
            return True
        except ControlPlaneError as e:  # a new namespace's ServiceAccount before its token Secret: 500, retry
            if "No API token found" not in str(e):
                raise
            return False
    wait_until(created, what=f"pod {ns}/{name} admitted")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    plane.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                  {"status": {"phase": "Running", "startTime": now, "conditions": [
                      {"type": "Ready", "status": "True", "lastTransitionTime": now},
                      {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}]}},
                  content_type="application/strategic-merge-patch+json")
    uid = plane.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")["metadata"]["uid"]
    tree.add_pod(uid)
    return str(uid)


def agent_cmd(kubeconfig: Path, node: str, tree: Tree, config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "koordfw", "--log-format", "json", "--log-level", "info", "agent",
            "--kubeconfig", str(kubeconfig), "--node-name", node, "--cgroup-root", str(ROOT), "--cgroup-version", "1",
            "--cgroup-driver", "cgroupfs", "--kubepods", tree.kubepods, "--config", str(config),
            "--device-interval", "0", *extra]


def test_the_agent_publishes_reports_the_real_crds_accept(kube_plane, agent_rbac, tree, tmp_path):
    kube_plane.add_node("ag-r1", cpu="8", memory="32Gi")
    kube_plane.create_namespace("ag-reports")
    make_pod(kube_plane, "spark-0", "ag-reports", "ag-r1", "BE", tree)
    make_pod(kube_plane, "web-0", "ag-reports", "ag-r1", "LS", tree)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("plugins:\n  qosPlan: {disabled: [{name: '*'}], enabled: [be_suppress]}\n"
                   "pluginConfig:\n  be_suppress: {enable: false}\n")
    proc = subprocess.run(agent_cmd(agent_rbac, "ag-r1", tree, cfg, "--once", "--dry-run",
                                    "--node-metric-interval", "60"),
                          capture_output=True, text=True, timeout=60, env=kube_plane.env(agent_rbac))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["pods"] == 2
    metric = kube_plane.request("GET", f"/apis/{SLO}/nodemetrics/ag-r1")
    status = metric["status"]
    assert status["updateTime"] and "cpu" in status["nodeMetric"]["nodeUsage"]["resources"]
    assert {(m["namespace"], m["name"], m["qos"]) for m in status["podsMetric"]} == {
        ("ag-reports", "spark-0", "BE"), ("ag-reports", "web-0", "LS")}
    assert metric["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] == 60
    nrt = kube_plane.request("GET", "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/ag-r1")
    detail = json.loads(nrt["metadata"]["annotations"]["node.koordinator.sh/cpu-topology"])["detail"]
    assert [d["id"] for d in detail] == sorted(p.cpu for p in read_processors("/sys"))
    assert nrt["zones"] and all(z["type"] == "Node" and z["resources"] for z in nrt["zones"])
    assert nrt["topologyPolicies"]
    assert nrt["metadata"]["ownerReferences"][0]["name"] == "ag-r1"
    assert kube_plane.refused(AGENT_USER) == []


async def test_the_device_the_agent_builds_is_stored_whole(kube_plane, agent_rbac, tree, tmp_path):
    """The Device from NVML (a fake NVML: no GPU here) written as the agent's ServiceAccount: the real CRD keeps
    every field (a field its schema lacked would be pruned silently)."""
    kube_plane.add_node("ag-d1", cpu="8", memory="32Gi")
    sysfs = tmp_path / "sys"
    nv = FakeNVML([FakeGPU("GPU-aaaa", "0000:3b:00.0", minor=0, numa_node=0, pcie_root="pci0000:3a")])
    nv.write_sysfs(sysfs)
    reg = Registry(profile_from_dict({"plugins": {"qosPlan": {"disabled": [{"name": "*"}],
                                                             "enabled": ["be_suppress"]}}})).load(only={"be_suppress"})
    agent = Agent(reg, CgroupLayout(ROOT, 1, "cgroupfs", tree.kubepods), Executor({"cgroup": ROOT}, dry_run=True),
                  interval=1.0, node_name="ag-d1", sys_root=str(sysfs))
    kubeconfig = yaml.safe_load(agent_rbac.read_text())
    token = kubeconfig["users"][0]["user"]["token"]
    async with KubeClient(kube_plane.url, token=token, ssl_context=kube_plane.ssl_context(), qps=0) as c:
        on = NodeOnCluster(agent, c, publish_interval=None, topology_interval=None, nvml=nv)
        async with anyio.create_task_group() as tg:
            tg.start_soon(on.src.run)
            await on.src.wait_synced()
            assert await on.report_device() == "created"
            assert await on.report_device() == "unchanged"  # what came back is what was sent: nothing pruned
            on.device_reporter.mark_unhealthy("0000:3b:00.0", xid=79)
            assert await on.report_device() == "updated"
            tg.cancel_scope.cancel()
    dev = kube_plane.request("GET", "/apis/scheduling.koordinator.sh/v1alpha1/devices/ag-d1")
    [gpu] = dev["spec"]["devices"]
    assert gpu["id"] == "GPU-aaaa" and gpu["health"] is False and gpu["conditions"][0]["reason"] == "Xid79"
    assert gpu["topology"] == {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"}
    assert gpu["resources"]["koordinator.sh/gpu-core"] == "100"
    assert dev["metadata"]["ownerReferences"][0]["kind"] == "Node"
    kube_plane.delete(dev)
    assert kube_plane.refused(AGENT_USER) == []


def _events(plane: ControlPlane, ns: str, reason: str, pod_name: str) -> list[dict]:
    return [e for e in plane.request("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
            if e.get("reason") == reason and e["regarding"]["name"] == pod_name]


def _log(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        with suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict):
                out.append(rec)
    return out


def test_nodeslo_turns_on_evictions_live_and_the_budget_429_is_honoured(kube_plane, agent_rbac, tree, tmp_path):
    # 64Gi of memory for the Node: this machine's use is far below the default 70% threshold, never evicting,
    # and above the 1% the NodeSLO sets later
    kube_plane.add_node("ag-e1", cpu="8", memory="64Gi")
    ns = "ag-evict"
    kube_plane.create_namespace(ns)
    web = make_pod(kube_plane, "web", ns, "ag-e1", "LS", tree)
    free = make_pod(kube_plane, "spark-free", ns, "ag-e1", "BE", tree)
    guarded = make_pod(kube_plane, "spark-guarded", ns, "ag-e1", "BE", tree, guard="yes")
    kube_plane.apply({"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
                      "metadata": {"name": "guard", "namespace": ns},
                      "spec": {"minAvailable": 1, "selector": {"matchLabels": {"guard": "yes"}}}})

    def pdb_ready():
        obj = kube_plane.request("GET", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/guard")
        st = obj.get("status") or {}
        return st.get("observedGeneration", 0) >= obj["metadata"]["generation"] and st.get("currentHealthy") == 1
    wait_until(pdb_ready, what="the disruption controller's PDB status")

    cfg = tmp_path / "agent.yaml"
    cfg.write_text("plugins:\n  qosPlan: {disabled: [{name: '*'}], enabled: [eviction]}\n"
                   "pluginConfig:\n  eviction: {memoryEvictEnable: true}\n")
    log_path = tmp_path / "agent.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(agent_cmd(agent_rbac, "ag-e1", tree, cfg, "--interval", "0.5",
                                          "--node-metric-interval", "60", "--topology-interval", "30"),
                                stdout=subprocess.DEVNULL, stderr=log, env=kube_plane.env(agent_rbac))
    try:
        # running (its NodeResourceTopology is written once it has synced), evicting nothing below the default
        # threshold
        wait_until(lambda: proc.poll() is not None or _exists(
            kube_plane, "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/ag-e1"), timeout=20,
            what="the agent's NodeResourceTopology")
        time.sleep(2)
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert not any(p["metadata"].get("deletionTimestamp") for p in _pods(kube_plane, ns))
        # the NodeSLO, created while the agent runs: a 1% memory threshold, which this machine's use crosses
        kube_plane.apply({"apiVersion": SLO, "kind": "NodeSLO", "metadata": {"name": "ag-e1"},
                          "spec": {"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 1,
                                                                   "memoryEvictLowerPercent": 0}}})
        wait_until(lambda: _pod(kube_plane, ns, "spark-free")["metadata"].get("deletionTimestamp"), timeout=20,
                   what="spark-free evicted")
        # the guarded pod: marked, refused (429) and tried again after the eviction plugin's cool time
        wait_until(lambda: len(_events(kube_plane, ns, "evictPodFail", "spark-guarded")) >= 2, timeout=25,
                   what="two refused evictions of spark-guarded")
        assert proc.poll() is None, log_path.read_text()[-3000:]
        g = _pod(kube_plane, ns, "spark-guarded")
        assert not g["metadata"].get("deletionTimestamp") and g["metadata"]["uid"] == guarded
        conds = {c["type"]: c for c in g["status"].get("conditions") or []}
        assert conds["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
        assert "BEMemoryEvict" in conds["DisruptionTarget"]["message"]
        fails = _events(kube_plane, ns, "evictPodFail", "spark-guarded")
        assert all("disruption budget" in e["note"] for e in fails)
        assert _events(kube_plane, ns, "evictPodSuccess", "spark-free")
        w = _pod(kube_plane, ns, "web")
        assert not w["metadata"].get("deletionTimestamp") and w["metadata"]["uid"] == web
        assert "DisruptionTarget" not in {c["type"] for c in w["status"].get("conditions") or []}
        assert _pod(kube_plane, ns, "spark-free")["metadata"]["uid"] == free
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert code == 0, log_path.read_text()[-3000:]
    records = _log(log_path)
    failed = [r for r in records if r.get("event") == "eviction failed" and r.get("pod") == f"{ns}/spark-guarded"]
    assert len(failed) >= 2 and all(r.get("detail") == "disruption budget" for r in failed)
    assert any(r.get("event") == "eviction evicted" and r.get("pod") == f"{ns}/spark-free" for r in records)
    assert not [r for r in records if r.get("level") in ("error", "critical")], [
        r for r in records if r.get("level") in ("error", "critical")]
    assert kube_plane.refused(AGENT_USER) == []


def _phase(plane: ControlPlane, path: str) -> str | None:
    """The object's ``status.phase``, ``None`` when it does not exist (one read: it may go between two)."""
    try:
        return (plane.request("GET", path).get("status") or {}).get("phase") or ""
    except ControlPlaneError as e:
        if getattr(e, "status", 0) == 404:
            return None
        raise


def _exists(plane: ControlPlane, path: str) -> bool:
    try:
        plane.request("GET", path)
        return True
    except ControlPlaneError:
        return False


def _pod(plane: ControlPlane, ns: str, name: str) -> dict:
    return dict(plane.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}"))


def _pods(plane: ControlPlane, ns: str) -> list[dict]:
    return list(plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"])
