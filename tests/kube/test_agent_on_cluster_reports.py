"""The node agent on a cluster (fake API server, fake cgroup/proc/sys tree, virtual clock): it follows its
NodeSLO live (the next plan uses the new thresholds; a malformed one is logged and the previous config
kept; deleted: back to --config), publishes its NodeMetric every reportIntervalSeconds of the object's
spec, and keeps its NodeResourceTopology and Device as koordlet does, which cpu_topology and gpu_share
then read."""

from __future__ import annotations

import functools
import json

import anyio
import pytest
import yaml
from kube_testkit import node, pod

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.agent.nodemetric import rfc3339
from koordfw.core.clock import VirtualClock
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.engines.kube.node import NodeOnCluster
from koordfw.testing import ClusterBuilder, schedule
from koordfw.testing.cgroups import FakeNode
from koordfw.testing.nvml import FakeGPU, FakeNVML

START = 1_780_000_000.0
NCPU = 8
SLO = "slo.koordinator.sh/v1alpha1"


def nodeslo(spec: dict) -> dict:
    return {"apiVersion": SLO, "kind": "NodeSLO", "metadata": {"name": "n1"}, "spec": spec}


def profile(**config) -> Registry:
    return Registry(profile_from_dict({"plugins": {"qosPlan": {"disabled": [{"name": "*"}], "enabled": ["be_suppress"]}},
                                       "pluginConfig": config})).load(only={"be_suppress", "llc_isolation"})


class Node:
    """The fake node with three workloads busy at fixed rates (cores): a burstable LS pod, a BE pod and
    the host application nginx; the node itself ``busy`` cores."""

    def __init__(self, tmp_path, api, busy=3.0):
        self.fake = FakeNode(tmp_path, ncpu=NCPU)
        self.api = api
        self.busy = busy
        api.create(node("n1", cpu=str(NCPU), memory="32Gi"))
        self.ls = api.create(pod("web", "2", node_name="n1", labels={"koordinator.sh/qosClass": "LS"}))
        self.be = api.create(pod("spark", "1", node_name="n1", labels={"koordinator.sh/qosClass": "BE"}))
        self.ls_dir = self.fake.add_pod(self.ls["metadata"]["uid"], "burstable")
        self.be_dir = self.fake.add_pod(self.be["metadata"]["uid"], "besteffort")
        self.app_dir = "host-latency-sensitive/nginx"
        self.fake.mkcg(self.app_dir)
        for rel, mem in ((self.ls_dir, 1 << 30), (self.be_dir, 2 << 30), (self.app_dir, 1 << 28)):
            self.fake.set_memory(rel, mem)

    def tick(self, t: float) -> None:
        """Cumulative counters at virtual time ``t`` (seconds since START)."""
        self.fake.set_proc_stat(int(self.busy * t * 1e9))
        self.fake.set_usage(self.ls_dir, int(1.0 * t * 1e9))
        self.fake.set_usage(self.be_dir, int(1.0 * t * 1e9))
        self.fake.set_usage(self.app_dir, int(0.5 * t * 1e9))

    def agent(self, registry: Registry, clock: VirtualClock) -> Agent:
        f = self.fake
        return Agent(registry, CgroupLayout(f.root, 1), Executor({"cgroup": f.root}), interval=1.0, node_name="n1",
                     proc_root=str(f.proc), sys_root=str(f.sys), clock=clock)


async def wait_until(pred, what: str, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not pred():
            await anyio.sleep(0.005)


async def step(n: Node, agent: Agent, clock: VirtualClock, seconds: int = 1) -> None:
    """Advance the virtual clock second by second, one agent round each."""
    for _ in range(seconds):
        target = agent.rounds + 1
        n.tick(clock.now() + 1 - START)
        clock.advance(1.0)
        await wait_until(lambda t=target: agent.rounds >= t, "a round")


def be_quota(n: Node) -> int:
    return int(n.fake.read("cpu", n.fake.qos("besteffort"), "cpu.cfs_quota_us"))


@pytest.fixture
def clock():
    return VirtualClock(START)


async def test_nodeslo_reconfigures_the_running_agent(api, client, tmp_path, clock):
    n = Node(tmp_path, api)
    reg = profile(be_suppress={"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 65})
    agent = n.agent(reg, clock)
    on = NodeOnCluster(agent, client, publish_interval=None, topology_interval=None, device_interval=None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(on.run, handle_signals=False))
        await wait_until(lambda: agent.rounds >= 1, "the first round")
        await step(n, agent, clock, 2)
        # --config: 8000*65% - LS 1000 - system (3000 - 2000) = 3200 milli → 320000 µs
        assert be_quota(n) == 320000
        ev = on.slo_event
        api.create(nodeslo({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 40},
                            "hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod",
                                                  "cgroupPath": {"base": "CgroupRoot", "relativePath": n.app_dir}}]}))
        with anyio.fail_after(10):
            await ev.wait()
        assert reg.args["be_suppress"].cpu_suppress_threshold_percent == 40
        assert reg.args["be_suppress"].cpu_suppress_policy == "cfsQuota"  # the NodeSLO left it out: --config's
        await step(n, agent, clock, 2)
        # the next plan: 8000*40% - LS 1000 - nginx 500 (a host app now) - system (3000 - 2500) = 1200 → 120000
        assert be_quota(n) == 120000
        assert [a.name for a in agent.node_state.host_apps] == ["nginx"]
        assert agent.node_state.host_apps[0].usage["cpu"] == 500
        # malformed: logged naming the field, the previous config kept
        ev = on.slo_event
        api.update("nodeslos", "n1", lambda o: o["spec"]["resourceUsedThresholdWithBE"].update(
            cpuSuppressThresholdPercent=150))
        with anyio.fail_after(10):
            await ev.wait()
        assert on.slo_errors and "field spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent" in on.slo_errors[-1]
        assert "between 0 and 100" in on.slo_errors[-1]
        await step(n, agent, clock, 1)
        assert reg.args["be_suppress"].cpu_suppress_threshold_percent == 40 and be_quota(n) == 120000
        # gone: back to --config (and no host applications)
        ev = on.slo_event
        api.delete("nodeslos", "n1")
        with anyio.fail_after(10):
            await ev.wait()
        await step(n, agent, clock, 3)  # scaling up is limited to 10% of the node per round: 200000, 280000, 320000
        assert reg.args["be_suppress"].cpu_suppress_threshold_percent == 65 and agent.host_apps == ()
        assert be_quota(n) == 320000
        tg.cancel_scope.cancel()


async def test_resctrl_fields_go_to_llc_isolation(api, client, tmp_path, clock):
    n = Node(tmp_path, api)
    reg = profile(llc_isolation={"BE": {"enable": True, "catRangeEndPercent": 50}})
    api.create(nodeslo({"resourceQOSStrategy": {"beClass": {"resctrlQOS": {"catRangeEndPercent": 20, "mbaPercent": 40}},
                                                "lsClass": {"resctrlQOS": {"enable": True}}}}))
    on = NodeOnCluster(n.agent(reg, clock), client, publish_interval=None, topology_interval=None, device_interval=None)
    assert on.apply_nodeslo(api.get("nodeslos", "n1"))
    be = reg.args["llc_isolation"].settings("BE")
    assert (be.enable, be.start, be.end, be.mba_percent) == (True, 0, 20, 40)
    assert reg.args["llc_isolation"].settings("LS").enable is True
    # start ≥ end only together: named as the fields that clash
    assert not on.apply_nodeslo(nodeslo({"resourceQOSStrategy": {"beClass": {"resctrlQOS": {"catRangeStartPercent": 60}}}}))
    assert "catRangeStartPercent" in on.slo_errors[-1] and reg.args["llc_isolation"].settings("BE").end == 20


async def test_node_metric_follows_its_spec(api, client, tmp_path, clock):
    n = Node(tmp_path, api)
    api.create({"apiVersion": SLO, "kind": "NodeMetric", "metadata": {"name": "n1"},
                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 30, "aggregateDurationSeconds": 60,
                                                 "nodeAggregatePolicy": {"durations": ["1m"]}}}})
    api.create(nodeslo({"hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod",
                                              "cgroupPath": {"base": "CgroupRoot", "relativePath": n.app_dir}}]}))
    agent = n.agent(profile(), clock)
    on = NodeOnCluster(agent, client, topology_interval=None, device_interval=None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(on.run, handle_signals=False))
        await wait_until(lambda: agent.rounds >= 1 and on.reporter.policy.report_interval_seconds == 30, "the spec")
        ev = on.metric_event
        await step(n, agent, clock, 29)
        assert on.publisher.published == 0
        await step(n, agent, clock, 1)
        with anyio.fail_after(10):
            await ev.wait()
        st = api.get("nodemetrics", "n1")["status"]
        assert st["updateTime"] == "2026-05-28T20:27:10Z"  # START (1,780,000,000 s) is 2026-05-28T20:26:40Z
        nm = st["nodeMetric"]
        assert nm["nodeUsage"]["resources"] == {"cpu": "3", "memory": "16Gi"}
        assert nm["systemUsage"]["resources"]["cpu"] == "500m"  # 3 - 1 - 1 - 0.5
        [agg] = nm["aggregatedNodeUsages"]
        assert agg["duration"] == "1m0s" and agg["usage"]["p99"] == {}  # 30 s of samples: below half of 1m
        assert [(m["name"], m["qos"], m["priority"], m["podUsage"]["resources"]["cpu"]) for m in st["podsMetric"]] == [
            ("spark", "BE", "koord-batch", "1"), ("web", "LS", "koord-prod", "1")]
        assert st["hostApplicationMetric"] == [{"name": "nginx", "usage": {"resources": {"cpu": "500m", "memory": "256Mi"}},
                                                "priority": "koord-prod", "qos": "LS"}]
        # a new spec: reported every 45 s (the wait under way ends first, as koordlet re-reads after a sync)
        api.update("nodemetrics", "n1", lambda o: o["spec"]["metricCollectPolicy"].update(reportIntervalSeconds=45))
        await wait_until(lambda: on.reporter.policy.report_interval_seconds == 45, "the new spec")
        ev = on.metric_event
        await step(n, agent, clock, 30)
        with anyio.fail_after(10):
            await ev.wait()
        assert on.publisher.published == 2
        ev = on.metric_event
        await step(n, agent, clock, 44)
        assert on.publisher.published == 2
        await step(n, agent, clock, 1)
        with anyio.fail_after(10):
            await ev.wait()
        st = api.get("nodemetrics", "n1")["status"]
        assert st["updateTime"] == "2026-05-28T20:28:25Z"  # START + 1 min 45 s
        # 60 s of samples now span the whole minute: the percentiles are reported, as load_aware reads them
        assert st["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["p99"]["resources"]["cpu"] == "3"
        tg.cancel_scope.cancel()


def write_sysfs_topology(fake: FakeNode) -> None:
    """2 sockets x 2 cores x 2 threads, one NUMA node per socket; siblings are ids i and i+4."""
    cpu = fake.sys / "devices/system/cpu"
    for i in range(NCPU):
        t = cpu / f"cpu{i}" / "topology"
        socket, core = (i % 4) // 2, i % 2
        (t / "physical_package_id").write_text(f"{socket}\n")
        (t / "core_id").write_text(f"{core}\n")
        (t / "thread_siblings_list").write_text(f"{i % 4},{i % 4 + 4}\n")
    for nid, cpus in ((0, "0-1,4-5"), (1, "2-3,6-7")):
        d = fake.sys / f"devices/system/node/node{nid}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {nid} MemTotal:       16777216 kB\nNode {nid} MemFree: 1 kB\n")
    (fake.proc / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon Fake\n")
    (cpu / "smt").mkdir()
    (cpu / "smt/active").write_text("1\n")


async def test_topology_is_what_cpu_topology_reads(api, client, tmp_path, clock):
    n = Node(tmp_path, api)
    write_sysfs_topology(n.fake)
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(yaml.safe_dump({"kind": "KubeletConfiguration", "cpuManagerPolicy": "static",
                                       "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
                                       "reservedSystemCPUs": "0,4"}))
    on = NodeOnCluster(n.agent(profile(), clock), client, publish_interval=None, device_interval=None,
                       kubelet_config=str(kubelet), kubelet_root=str(tmp_path / "kubelet"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(on.src.run)
        await on.src.wait_synced()
        assert await on.report_topology() == "created"
        assert await on.report_topology() == "unchanged"
        nrt = api.get("noderesourcetopologies", "n1")
        anns = nrt["metadata"]["annotations"]
        detail = json.loads(anns["node.koordinator.sh/cpu-topology"])["detail"]
        # lscpu's logical ids: cores 0..3 in order of first appearance, siblings share one
        assert [(d["id"], d["core"], d["socket"], d["node"]) for d in detail] == [
            (0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 1, 1), (3, 3, 1, 1), (4, 0, 0, 0), (5, 1, 0, 0), (6, 2, 1, 1),
            (7, 3, 1, 1)]
        assert json.loads(anns["kubelet.koordinator.sh/cpu-manager-policy"]) == {
            "policy": "static", "options": {"full-pcpus-only": "true"}, "reservedCPUs": "0,4"}
        assert json.loads(anns["node.koordinator.sh/cpu-shared-pools"]) == [
            {"socket": 0, "node": 0, "cpuset": "0-1,4-5"}, {"socket": 1, "node": 1, "cpuset": "2-3,6-7"}]
        assert json.loads(anns["node.koordinator.sh/cpu-basic-info"]) == {
            "cpuModel": "Xeon Fake", "hyperThreadEnabled": True, "vendorID": "GenuineIntel"}
        assert anns["node.koordinator.sh/pod-cpu-allocs"] == "null" and anns["node.koordinator.sh/reservation"] == "{}"
        assert nrt["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Koordinator"}
        assert nrt["metadata"]["ownerReferences"][0]["uid"] == api.get("nodes", "n1")["metadata"]["uid"]
        assert nrt["topologyPolicies"] == ["None"]
        assert [(z["name"], {r["name"]: r["capacity"] for r in z["resources"]}) for z in nrt["zones"]] == [
            ("node-0", {"cpu": "4", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "16Gi"}),
            ("node-1", {"cpu": "4", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "16Gi"})]
        # an LSE pod bound to 2-3 leaves both pools; the next report updates the object
        api.update("pods", "web", lambda o: o["metadata"].update(
            labels={"koordinator.sh/qosClass": "LSE"},
            annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"2-3"}'}), "default")
        await wait_until(lambda: any(p.annotations for p in on.src.source.pods()), "the pod update")
        assert await on.report_topology() == "updated"
        anns = api.get("noderesourcetopologies", "n1")["metadata"]["annotations"]
        assert json.loads(anns["node.koordinator.sh/be-cpu-shared-pools"])[1]["cpuset"] == "6-7"
        tg.cancel_scope.cancel()
    # the scheduler's cpu_topology reads exactly that: the reserved CPUs 0,4 are never given, and the
    # kubelet's full-pcpus-only makes the node FullPCPUsOnly (an odd request fails SMT alignment)
    nrt = api.get("noderesourcetopologies", "n1")
    b = ClusterBuilder().node("n1", cpu=str(NCPU), memory="32Gi")
    b.obj(nrt)
    lsr = {"koordinator.sh/qosClass": "LSR"}
    for name, cpu in (("a", "2"), ("b", "2"), ("c", "2"), ("odd", "1")):
        b.pod(name, requests={"cpu": cpu, "memory": "1Gi"}, limits={"cpu": cpu, "memory": "1Gi"}, labels=lsr,
              priority=9500)
    result = await anyio.to_thread.run_sync(lambda: schedule(b, only=["cpu_topology"]))  # runs its own loop
    pods = {p["name"]: p for p in result.to_dict()["pods"]}
    sets = [json.loads(pods[x]["annotations"]["scheduling.koordinator.sh/resource-status"])["cpuset"]
            for x in ("a", "b", "c")]
    assert sorted(sets) == ["1,5", "2,6", "3,7"]  # whole cores (siblings i, i+4), never core 0
    assert pods["odd"]["node"] is None and "not multiple cpus per core" in pods["odd"]["reason"]


async def test_device_from_nvml_is_what_gpu_share_reads(api, client, tmp_path, clock):
    n = Node(tmp_path, api)
    nv = FakeNVML([FakeGPU("GPU-aaaa", "0000:3b:00.0", minor=0, numa_node=0, pcie_root="pci0000:3a"),
                   FakeGPU("GPU-bbbb", "0000:86:00.0", minor=1, numa_node=1, pcie_root="pci0000:85")])
    nv.write_sysfs(n.fake.sys)
    on = NodeOnCluster(n.agent(profile(), clock), client, publish_interval=None, topology_interval=None, nvml=nv)
    async with anyio.create_task_group() as tg:
        tg.start_soon(on.src.run)
        await on.src.wait_synced()
        assert await on.report_device() == "created"
        assert await on.report_device() == "unchanged"
        dev = api.get("devices", "n1")
        assert dev["metadata"]["labels"] == {"node.koordinator.sh/gpu-vendor": "nvidia",
                                             "node.koordinator.sh/gpu-model": "A100-SXM4-80GB",
                                             "node.koordinator.sh/gpu-driver-version": "535.104.05"}
        assert dev["metadata"]["ownerReferences"][0]["kind"] == "Node"
        assert dev["spec"]["devices"] == [
            {"type": "gpu", "id": "GPU-aaaa", "minor": 0, "health": True,
             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": str(16 * 2**30),
                           "koordinator.sh/gpu-memory-ratio": "100"},
             "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"}},
            {"type": "gpu", "id": "GPU-bbbb", "minor": 1, "health": True,
             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": str(16 * 2**30),
                           "koordinator.sh/gpu-memory-ratio": "100"},
             "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:85", "busID": "0000:86:00.0"}}]
        assert nv.calls.count("nvmlInit") == nv.calls.count("nvmlShutdown")  # every init is paired
        on.device_reporter.mark_unhealthy("0000:3b:00.0", xid=79)
        clock.advance(5)
        assert await on.report_device() == "updated"
        clock.advance(5)
        assert await on.report_device() == "unchanged"
        bad = api.get("devices", "n1")["spec"]["devices"][0]
        assert bad["health"] is False and bad["conditions"] == [
            {"type": "Healthy", "status": "False", "lastTransitionTime": "2026-05-28T20:26:45Z", "reason": "Xid79",
             "message": "Xid error detected on device, error code: 79"}]
        tg.cancel_scope.cancel()
    # gpu_share reads that Device: the unhealthy GPU is never used
    b = ClusterBuilder().node("n1", cpu="8", **{"nvidia.com__gpu": "2", "koordinator.sh__gpu-core": "200",
                                               "koordinator.sh__gpu-memory-ratio": "200"})
    b.obj(api.get("devices", "n1"))
    b.pod("a", requests={"nvidia.com/gpu": "1"}).pod("b", requests={"nvidia.com/gpu": "1"})
    result = await anyio.to_thread.run_sync(lambda: schedule(b, only=["gpu_share"]))
    pods = {p["name"]: p for p in result.to_dict()["pods"]}
    alloc = json.loads(pods["a"]["annotations"]["scheduling.koordinator.sh/device-allocated"])
    assert alloc["gpu"][0]["minor"] == 1 and pods["b"]["node"] is None


async def test_no_nvml_means_no_device(api, client, tmp_path, clock):
    n = Node(tmp_path, api)
    nv = FakeNVML([FakeGPU("GPU-aaaa", "0000:3b:00.0", minor=0)], no_driver=True)
    nv.write_sysfs(n.fake.sys)
    on = NodeOnCluster(n.agent(profile(), clock), client, publish_interval=None, topology_interval=None, nvml=nv)
    assert await on.report_device() == "no-gpu"
    assert api.get("devices", "n1") is None


async def test_refused_reports_are_retried_and_the_qos_loop_goes_on(api, client, tmp_path, clock):
    """RBAC refusing the NodeResourceTopology and a 500 on the NodeMetric status: logged, the rounds go on,
    and the next interval's report gets through once the API accepts it."""
    n = Node(tmp_path, api)
    api.forbid("noderesourcetopologies", "system:serviceaccount:koordfw-system:koordfw-agent")
    fault = api.fail(500, count=1, method="PUT", path="/nodemetrics/n1/status")
    agent = n.agent(profile(), clock)
    on = NodeOnCluster(agent, client, topology_interval=10, device_interval=None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(on.run, handle_signals=False))
        await wait_until(lambda: agent.rounds >= 1, "the first round")
        await step(n, agent, clock, 60)  # the first NodeMetric report fails (500)
        await wait_until(lambda: fault.count == 0 and on.publisher.last_error, "the refused report")
        assert on.publisher.published == 0 and "500" in on.publisher.last_error
        assert api.get("noderesourcetopologies", "n1") is None
        api.allow("noderesourcetopologies")
        ev = on.metric_event
        await step(n, agent, clock, 60)
        with anyio.fail_after(10):
            await ev.wait()
        await wait_until(lambda: api.get("noderesourcetopologies", "n1") is not None, "the topology")
        assert on.publisher.published == 1 and agent.rounds >= 121
        tg.cancel_scope.cancel()


def test_what_the_agent_writes_survives_the_crds_pruning(api, tmp_path, clock):
    """deploy/00-crd-*.yaml keep every field of the agent's NodeResourceTopology and Device (a real API server drops
    what a CRD's schema does not know)."""
    from deploy_testkit import CRDS, pruned

    from koordfw.agent.nvml import DeviceReporter
    from koordfw.agent.topology import (
        KubeletCPUManager,
        cpu_basic_info,
        node_resource_topology,
        numa_memory,
        read_processors,
        topology_annotations,
        topology_policy,
        zones,
    )

    fake = FakeNode(tmp_path, ncpu=NCPU)
    write_sysfs_topology(fake)
    procs = read_processors(fake.sys)
    kubelet = KubeletCPUManager(policy="static", reserved_cpus="0,4")
    anns = topology_annotations(procs, None, [], kubelet=kubelet, basic_info=cpu_basic_info(fake.proc, fake.sys))
    nrt = node_resource_topology("n1", "uid-1", anns, zones(procs, numa_memory(fake.sys)), topology_policy(kubelet))
    schema = CRDS["noderesourcetopologies.topology.node.k8s.io"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for f in ("topologyPolicies", "zones"):
        assert pruned(nrt[f], schema["properties"][f], f) == []
    nv = FakeNVML([FakeGPU("GPU-aaaa", "0000:3b:00.0", minor=0)])
    nv.write_sysfs(fake.sys)
    rep = DeviceReporter(nv, sys_root=fake.sys)
    rep.mark_unhealthy("0000:3b:00.0", xid=48)
    dev = rep.device("n1", "uid-1", now=rfc3339(clock.now()))
    schema = CRDS["devices.scheduling.koordinator.sh"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert pruned(dev["spec"], schema["properties"]["spec"]) == []
