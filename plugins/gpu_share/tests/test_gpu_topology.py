"""gpu_share's GPU topology (issue 35 point 4): the Device's per-GPU NUMA node and PCIe switch, the NUMA hints
offered to cpu_topology's topology policy, the GPU choice within the merged affinity and within one topology
scope, and ``requiredTopologyScope``.

The device layout of the ported tables is Koordinator's ``fakeDeviceCR`` (deviceshare's
``device_allocator_test.go``): 8 GPUs, minors 0-3 on NUMA node 0 (PCIe switches "0": 0,1 and "1": 2,3) and
4-7 on NUMA node 1 ("2": 4,5 and "3": 6,7).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from koordfw_cpu_topology.api import NUMATopologyHint
from koordfw_cpu_topology.topology import detail_for_test, topology_annotation
from koordfw_gpu_share import topology as topo
from koordfw_gpu_share.inventory import Inventory, InventoryError, _device_list
from koordfw_gpu_share.plugin import pod_tag
from koordfw_gpu_share.requests import normalize_request

from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.testing import ClusterBuilder, schedule

ALLOCATED = "scheduling.koordinator.sh/device-allocated"
HINT = "scheduling.koordinator.sh/device-allocate-hint"
PCIE = {0: "0", 1: "0", 2: "1", 3: "1", 4: "2", 5: "2", 6: "3", 7: "3"}


def fake_device(name: str = "test-node-1", numa: dict[int, int] | None = None, pcie: dict[int, str] | None = None,
                gpus: int = 8) -> dict:
    """Koordinator's fakeDeviceCR's GPUs (80 GiB each), with their topology."""
    numa = numa if numa is not None else {m: m // 4 for m in range(gpus)}
    pcie = pcie if pcie is not None else PCIE
    devs = [{"type": "gpu", "minor": m, "health": True,
             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "83201216Ki",
                           "koordinator.sh/gpu-memory-ratio": "100"},
             "topology": {"socketID": numa[m], "nodeID": numa[m], "pcieID": pcie[m]}} for m in range(gpus)]
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": devs}}


def inventory(assigned: list[int] = (), device: dict | None = None) -> Inventory:
    """One node with the fake Device; ``assigned``: minors held whole by a bound pod."""
    c = ClusterState()
    c.add_node(make_node("test-node-1", allocatable={"cpu": "96", "memory": "512Gi", "nvidia.com/gpu": "8"}))
    c.set_object("Device", device or fake_device())
    for k, m in enumerate(assigned):
        ann = {ALLOCATED: json.dumps({"gpu": [{"minor": m, "resources": {"koordinator.sh/gpu-core": "100",
                                                                        "koordinator.sh/gpu-memory-ratio": "100"}}]})}
        c.add_pod(make_pod(f"held-{k}", requests={"nvidia.com/gpu": "1"}, annotations=ann, node_name="test-node-1"))
    inv = Inventory(c)
    inv.reconcile(pod_tag)
    return inv


def fit_of(inv: Inventory, requests: dict) -> tuple[np.ndarray, int, bool]:
    req = normalize_request(requests)
    fit = inv.fit_devices(np.array([0]), req.core, req.memory_ratio, req.memory_bytes)[0]
    return fit, req.count, req.milli >= 1000


def minors(inv: Inventory, slots: list[int] | None) -> list[int] | None:
    return None if slots is None else sorted(int(inv.minor[0, s]) for s in slots)


# -- Koordinator's TestPlugin_GetPodTopologyHints (its GPU cases) ------------------------------------------
def test_gpu_hints_for_one_gpu():
    """"generate gpu&rdma hints": 1 GPU: NUMA 0 and NUMA 1 preferred, both preferred width 1; the node's
    own choice (minor 0, NUMA 0) is also {0}'s and {0,1}'s, so those score 500."""
    inv = inventory()
    fit, count, whole = fit_of(inv, {"koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory-ratio": 100})
    hints, ok = topo.numa_hints(inv, 0, fit, count, whole)
    assert ok
    assert hints == [NUMATopologyHint(0b01, preferred=True, score=500), NUMATopologyHint(0b10, preferred=True, score=0),
                     NUMATopologyHint(0b11, preferred=False, score=500)]


def test_gpu_hints_for_more_gpus_than_the_node_has_refuse_it():
    """"generate gpu&rdma hints but large gpu requests": 17 GPUs: no NUMA set holds them (an error)."""
    inv = inventory()
    fit, count, whole = fit_of(inv, {"koordinator.sh/gpu-core": 1700, "koordinator.sh/gpu-memory-ratio": 1700})
    assert topo.numa_hints(inv, 0, fit, count, whole) == ([], False)


def test_gpu_hints_with_assigned_devices():
    """"generate gpu hints with assigned devices": minor 0 is held, 4 GPUs wanted: NUMA 0 has only 3 free, so
    {1} (preferred) and {0,1} remain, both choosing NUMA 1's four GPUs as the whole node does (score 500)."""
    inv = inventory(assigned=[0])
    fit, count, whole = fit_of(inv, {"koordinator.sh/gpu-core": 400, "koordinator.sh/gpu-memory-ratio": 400})
    hints, ok = topo.numa_hints(inv, 0, fit, count, whole)
    assert ok
    assert hints == [NUMATopologyHint(0b10, preferred=True, score=500), NUMATopologyHint(0b11, preferred=False, score=500)]


def test_a_node_whose_gpus_report_no_numa_node_gives_no_preference():
    dev = fake_device()
    for d in dev["spec"]["devices"]:
        del d["topology"]
    inv = inventory(device=dev)
    fit, count, whole = fit_of(inv, {"nvidia.com/gpu": 1})
    assert topo.numa_hints(inv, 0, fit, count, whole) == (None, True)
    assert topo.scope_choose(inv, 0, fit, count) is None  # no tree: the policy chooses


# -- Koordinator's TestAllocateByTopology (its GPU side) ----------------------------------------------------
@pytest.mark.parametrize("assigned, wanted, scope, want", [
    # "allocate 1 GPU ... topology scope BinPack": minor 5 held, so switch "2" (4, 5) is not empty: minor 4
    ([5], 1, "", [4]),
    # "allocate 2 GPU ... topology scope BinPack": switch "3" (6, 7) under the non-empty NUMA node 1
    ([5], 2, "", [6, 7]),
    # "... requiredTopologyScope PCIE and BinPack"
    ([5], 2, "PCIe", [6, 7]),
    # "... requiredTopologyScope NUMANode": NUMA 1 has 3 free, NUMA 0 all four
    ([5], 4, "NUMANode", [0, 1, 2, 3]),
    # "... requiredTopologyScope NUMANode, insufficient devices": minors 5 and 0 held, 3 free on each node
    ([5, 0], 4, "NUMANode", None),
    # without a required scope the same request spans the node: the lowest free minors
    ([5, 0], 4, "", [1, 2, 3, 4]),
])
def test_allocate_by_topology(assigned, wanted, scope, want):
    inv = inventory(assigned=assigned)
    fit, count, _ = fit_of(inv, {"nvidia.com/gpu": wanted})
    level = {"": 0, "PCIe": topo.LEVEL_PCIE, "NUMANode": topo.LEVEL_NUMA}[scope]
    assert minors(inv, topo.scope_choose(inv, 0, fit, count, level)) == want


def test_in_affinity_keeps_the_chosen_numa_nodes_and_unplaced_gpus():
    """The allocator's numaNodes filter: NUMA 1 only; a GPU reporting ``nodeID: -1`` may go anywhere, one
    without a topology nowhere."""
    dev = fake_device()
    dev["spec"]["devices"][0]["topology"]["nodeID"] = -1
    del dev["spec"]["devices"][1]["topology"]
    inv = inventory(device=dev)
    allowed = topo.in_affinity(inv, 0, 0b10)
    assert sorted(int(inv.minor[0, s]) for s in np.flatnonzero(allowed)) == [0, 4, 5, 6, 7]


@pytest.mark.parametrize("topology, message", [
    ("fast", "spec.devices[0].topology must be a mapping"),
    ({"nodeID": "zero"}, "spec.devices[0].topology.nodeID: expected an integer in [-1, 63], got 'zero'"),
    ({"nodeID": 64}, "spec.devices[0].topology.nodeID: expected an integer in [-1, 63], got 64"),
    ({"nodeID": 0, "pcieID": 3}, "spec.devices[0].topology.pcieID: expected a string"),
])
def test_a_bad_topology_names_the_field(topology, message):
    dev = fake_device(gpus=1)
    dev["spec"]["devices"][0]["topology"] = topology
    with pytest.raises(InventoryError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _device_list(dev, "n1")


# -- end to end: cpu_topology's NUMA policy with gpu_share's hints -------------------------------------------
def numa_cluster(policy: str = "SingleNUMANode", gpu_numa: dict[int, int] | None = None) -> ClusterBuilder:
    """One node, 2 NUMA nodes of 16 CPUs and 64 GiB each, 8 GPUs (4 per NUMA node unless ``gpu_numa``)."""
    b = ClusterBuilder()
    ann = {"node.koordinator.sh/cpu-topology": topology_annotation(detail_for_test(2, 1, 8, 2))}
    b.node("n1", cpu="32", memory="128Gi", labels={"node.koordinator.sh/numa-topology-policy": policy},
           annotations=ann, **{"nvidia.com__gpu": "8", "koordinator.sh__gpu-core": "800",
                               "koordinator.sh__gpu-memory-ratio": "800"})
    zones = [{"name": f"node-{z}", "type": "Node",
              "resources": [{"name": "cpu", "capacity": "16", "allocatable": "16"},
                            {"name": "memory", "capacity": "64Gi", "allocatable": "64Gi"}]} for z in range(2)]
    b.obj({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
           "metadata": {"name": "n1"}, "zones": zones})
    dev = fake_device("n1", numa=gpu_numa)
    b.obj(dev)
    return b


def _placed(res) -> dict[str, tuple[str | None, list[int], set[int], str]]:
    """name -> (node, GPU minors, NUMA nodes of its resource-status, reason)."""
    out = {}
    for p in res.to_dict()["pods"]:
        ann = p["annotations"]
        gpus = [g["minor"] for g in json.loads(ann[ALLOCATED])["gpu"]] if ALLOCATED in ann else []
        status = json.loads(ann.get("scheduling.koordinator.sh/resource-status", "{}"))
        numa = {int(n["node"]) for n in status.get("numaNodeResources") or []}
        out[p["name"]] = (p["node"], gpus, numa, p.get("reason") or "")
    return out


def test_single_numa_node_puts_gpus_on_the_numa_node_of_the_pods_cpu_and_memory():
    """NUMA 0's CPUs are mostly taken, so a pod with 8 CPUs and 2 GPUs goes to NUMA 1: its GPUs are NUMA 1's
    (minors 4-7, one PCIe switch), not the lowest minors the spread policy would pick."""
    b = numa_cluster()
    b.pod("filler", requests={"cpu": "12", "memory": "8Gi"})
    b.pod("train", requests={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"})
    out = _placed(schedule(b, only=["cpu_topology", "gpu_share"]))
    assert out["filler"][2] == {0}
    node, gpus, numa, _ = out["train"]
    assert node == "n1" and numa == {1}
    assert gpus == [4, 5]  # NUMA 1, switch "2": the first scope in order that holds both


def test_single_numa_node_refuses_a_pod_whose_gpus_and_cpus_cannot_share_a_numa_node():
    """GPUs all on NUMA 0 (minors 0-7), NUMA 0's CPUs taken: cpu/memory prefer NUMA 1, the GPUs NUMA 0, and
    SingleNUMANode refuses with Koordinator's message naming both resources' hints."""
    b = numa_cluster(gpu_numa={m: 0 for m in range(8)})
    b.pod("filler", requests={"cpu": "12", "memory": "8Gi"})
    b.pod("train", requests={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"})
    out = _placed(schedule(b, only=["cpu_topology", "gpu_share"]))
    node, _, _, reason = out["train"]
    assert node is None
    assert "Unaligned NUMA Hint cause" in reason and "gpu prefer [01]" in reason and "cpu prefer [10]" in reason


def test_best_effort_still_places_the_pod_across_numa_nodes():
    b = numa_cluster(policy="BestEffort", gpu_numa={m: 0 for m in range(8)})
    b.pod("filler", requests={"cpu": "12", "memory": "8Gi"})
    b.pod("train", requests={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"})
    out = _placed(schedule(b, only=["cpu_topology", "gpu_share"]))
    assert out["train"][0] == "n1" and len(out["train"][1]) == 2


def test_alignment_can_be_switched_off_with_koordinators_args_field():
    """``disableDeviceNUMATopologyAlignment`` (DeviceShareArgs): no GPU hints, so cpu/memory alone decide and
    the GPUs are chosen as without a policy."""
    b = numa_cluster(gpu_numa={m: 0 for m in range(8)})
    b.pod("filler", requests={"cpu": "12", "memory": "8Gi"})
    b.pod("train", requests={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"})
    prof = {"pluginConfig": {"gpu_share": {"disableDeviceNUMATopologyAlignment": True}}}
    out = _placed(schedule(b, only=["cpu_topology", "gpu_share"], profile=prof))
    assert out["train"][0] == "n1" and out["train"][2] == {1}


def test_required_topology_scope_filters_nodes_and_names_the_reason():
    """Two nodes; n1's NUMA nodes each have 3 free GPUs, n2's GPUs report no topology: a 4-GPU pod requiring
    one NUMA node fits neither, with Koordinator's reasons; a bad hint is refused naming the annotation."""
    b = ClusterBuilder()
    for n in ("n1", "n2"):
        b.node(n, cpu="32", **{"nvidia.com__gpu": "8", "koordinator.sh__gpu-core": "800",
                               "koordinator.sh__gpu-memory-ratio": "800"})
    b.obj(fake_device("n1"))
    b.pod("h0", requests={"nvidia.com/gpu": "1"}, node="n1", annotations={ALLOCATED: json.dumps(
        {"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}}]})})
    b.pod("h5", requests={"nvidia.com/gpu": "1"}, node="n1", annotations={ALLOCATED: json.dumps(
        {"gpu": [{"minor": 5, "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}}]})})
    b.pod("want", requests={"nvidia.com/gpu": "4"},
          annotations={HINT: json.dumps({"gpu": {"requiredTopologyScope": "NUMANode"}})})
    b.pod("typo", requests={"nvidia.com/gpu": "1"}, annotations={HINT: '{"gpu": {"requiredTopologyScope": "Rack"}}'})
    out = _placed(schedule(b, only=["gpu_share"]))
    assert out["want"][0] is None
    assert "Insufficient Topology Scoped GPU Devices" in out["want"][3]
    assert "missing GPU Device Topology Tree" in out["want"][3]
    assert out["typo"][0] is None and HINT in out["typo"][3] and "'Rack' is not one of" in out["typo"][3]


# -- the node side: koordlet's topology from the PCI bus id ----------------------------------------------------
def test_agent_reports_each_gpus_numa_node_and_root_complex(tmp_path):
    """koordfw.testing's fake NVML and its sysfs tree: each GPU's NUMA node and PCIe root complex, as the
    scheduler then reads them; numa_node -1 reads as 0; a GPU sysfs does not know gets no topology."""
    from koordfw_gpu_share.agent_devices import build_device, pci_topology

    from koordfw.testing.nvml import FakeGPU, FakeNVML

    gpus = [FakeGPU("GPU-0", "0000:3b:00.0", 0, numa_node=0, pcie_root="pci0000:3a"),
            FakeGPU("GPU-1", "0000:86:00.0", 1, numa_node=1, pcie_root="pci0000:85"),
            FakeGPU("GPU-2", "0000:af:00.0", 2, numa_node=-1, pcie_root="pci0000:ae")]
    FakeNVML(gpus).write_sysfs(tmp_path)
    gpus.append(FakeGPU("GPU-3", "0000:d8:00.0", 3))  # not in sysfs
    pci = tmp_path / "bus" / "pci" / "devices"
    devs = build_device("g1", FakeNVML(gpus), pci_dir=pci)["spec"]["devices"]
    assert devs[0]["topology"] == {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"}
    assert devs[1]["topology"]["nodeID"] == 1 and devs[1]["topology"]["pcieID"] == "pci0000:85"
    assert devs[2]["topology"]["nodeID"] == 0
    assert "topology" not in devs[3]
    assert pci_topology("not a bus id", pci) is None
    inv = inventory(device={"kind": "Device", "metadata": {"name": "test-node-1"}, "spec": {"devices": devs}})
    assert inv.numa[0, :4].tolist() == [0, 1, 0, -2]


def test_single_numa_batch_answers_as_the_hints_do():
    """GpuNUMAHints.single_numa (numpy, for many nodes) against numa_hints' single-node hints, node by node, on
    seeded random GPU layouts, holdings and requests: the same nodes have a preference, the same NUMA nodes
    alone hold the GPUs."""
    from koordfw_gpu_share.plugin import GpuNUMAHints, GpuShare

    rng = np.random.default_rng(7)
    c = ClusterState()
    for k in range(40):
        gpus = int(rng.integers(1, 9))
        name = f"n{k}"
        c.add_node(make_node(name, allocatable={"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(gpus)}))
        numa = {m: int(rng.integers(-1, 3)) for m in range(gpus)}
        dev = fake_device(name, numa=numa, pcie={m: str(m // 2) for m in range(gpus)}, gpus=gpus)
        if k % 7 == 0:  # a node without topology
            for d in dev["spec"]["devices"]:
                del d["topology"]
        c.set_object("Device", dev)
        for m in range(gpus):
            used = int(rng.choice([0, 0, 30, 60, 100]))
            if used:
                ann = {ALLOCATED: json.dumps({"gpu": [{"minor": m, "resources": {
                    "koordinator.sh/gpu-core": str(used), "koordinator.sh/gpu-memory-ratio": str(used)}}]})}
                c.add_pod(make_pod(f"h-{k}-{m}", requests={"koordinator.sh/gpu-core": str(used)}, annotations=ann,
                                   node_name=name))
    plugin = GpuShare()
    plugin.sync(c)
    idx = np.arange(c.num_nodes)
    zones = [0, 1, 2]
    for requests in ({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 3},
                     {"koordinator.sh/gpu-core": 50, "koordinator.sh/gpu-memory-ratio": 50}):
        provider = GpuNUMAHints(plugin, normalize_request(requests))
        has, fits = provider.single_numa(idx, zones)
        for i in idx.tolist():
            hints, refusal = provider(c.views[i])
            assert bool(has[i]) == (hints is not None or refusal is not None), (requests, i)
            singles = {h.affinity for h in (hints or {}).get("gpu", []) if h.affinity.bit_count() == 1}
            assert {1 << z for z, ok in zip(zones, fits[i].tolist()) if ok} == singles, (requests, i)


def _gpu_fleet(seed: int) -> ClusterBuilder:
    """Seeded random nodes (policies SingleNUMANode / Restricted / none; 2 or 4 NUMA nodes; GPUs on random NUMA
    nodes, some without topology) and pods (cpu, memory, whole or shared GPUs, some with a pod policy)."""
    rng = np.random.default_rng(seed)
    b = ClusterBuilder()
    for k in range(24):
        zones = int(rng.choice([2, 4]))
        gpus = int(rng.integers(1, 9))
        policy = str(rng.choice(["SingleNUMANode", "SingleNUMANode", "Restricted", ""]))
        labels = {"node.koordinator.sh/numa-topology-policy": policy} if policy else {}
        b.node(f"n{k}", cpu=str(8 * zones), memory=f"{32 * zones}Gi", labels=labels,
               **{"nvidia.com__gpu": str(gpus), "koordinator.sh__gpu-core": str(100 * gpus),
                  "koordinator.sh__gpu-memory-ratio": str(100 * gpus)})
        b.obj({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
               "metadata": {"name": f"n{k}"},
               "zones": [{"name": f"node-{z}", "type": "Node",
                          "resources": [{"name": "cpu", "capacity": "8", "allocatable": "8"},
                                        {"name": "memory", "capacity": "32Gi", "allocatable": "32Gi"}]}
                         for z in range(zones)]})
        dev = fake_device(f"n{k}", numa={m: int(rng.integers(-1, zones)) for m in range(gpus)},
                          pcie={m: str(m // 2) for m in range(gpus)}, gpus=gpus)
        if k % 5 == 0:
            for d in dev["spec"]["devices"]:
                del d["topology"]
        b.obj(dev)
    for j in range(90):
        req = {"cpu": str(int(rng.integers(1, 9))), "memory": f"{int(rng.integers(1, 24))}Gi"}
        g = int(rng.choice([0, 1, 1, 2, 4, 50]))
        if g == 50:
            req.update({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
        elif g:
            req["nvidia.com/gpu"] = str(g)
        ann = {}
        if rng.random() < 0.15:
            ann["scheduling.koordinator.sh/numa-topology-spec"] = json.dumps({"numaTopologyPolicy": "SingleNUMANode"})
        b.pod(f"p{j:02d}", requests=req, annotations=ann)
    return b


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gpu_single_numa_fast_path_schedules_as_the_exact_merge(seed, monkeypatch):
    """Whole scheduling runs on random GPU fleets: SingleNUMANode decided with numpy for many nodes
    (numa_columns.single_numa_with_providers with gpu_share's single_numa) gives the same pods, nodes,
    annotations and refusal messages as the exact merge on every node."""
    from koordfw_cpu_topology import numa_plugin

    fast = schedule(_gpu_fleet(seed), only=["cpu_topology", "gpu_share"], seed=seed).to_dict()

    class Nothing:  # no provider is a SingleNUMAProvider: every node takes the exact merge
        pass

    monkeypatch.setattr(numa_plugin, "SingleNUMAProvider", Nothing)
    exact = schedule(_gpu_fleet(seed), only=["cpu_topology", "gpu_share"], seed=seed).to_dict()
    assert fast["pods"] == exact["pods"]
    placed = [p for p in fast["pods"] if p["node"]]
    assert 20 < len(placed) < 90  # the fleet is neither empty nor everything fits
