"""gpu_share: request validation, frag measure, device choice, annotation, rebuild, replay, NVML reporter."""

import json
import subprocess
import sys
import types

import numpy as np
import pytest
from gpu_share_testkit import gpu_cluster
from koordfw_gpu_share import frag
from koordfw_gpu_share.agent_devices import NoGpu, build_device
from koordfw_gpu_share.plugin import INSUFFICIENT as INSUFFICIENT_TEXT
from koordfw_gpu_share.requests import InvalidGpuRequest, normalize_request

from koordfw.testing import ClusterBuilder, schedule

GI = 2**30
ANN = "scheduling.koordinator.sh/device-allocated"


@pytest.mark.parametrize("req, want", [
    ({"nvidia.com/gpu": 1}, dict(count=1, core=1000, memory_ratio=1000, shared=False)),
    ({"nvidia.com/gpu": 2}, dict(count=2, core=1000, memory_ratio=1000, shared=False)),
    ({"koordinator.sh/gpu": 50}, dict(count=1, core=500, memory_ratio=500, shared=True)),
    ({"koordinator.sh/gpu": 200}, dict(count=2, core=1000, memory_ratio=1000, shared=False)),
    ({"koordinator.sh/gpu-core": 50, "koordinator.sh/gpu-memory-ratio": 50}, dict(count=1, core=500, memory_ratio=500, shared=True)),  # noqa: E501 (a table row)
    ({"koordinator.sh/gpu-core": 50, "koordinator.sh/gpu-memory": 8 * GI}, dict(count=1, core=500, memory_bytes=8 * GI, shared=True)),  # noqa: E501 (a table row)
    ({"koordinator.sh/gpu-memory-ratio": 300}, dict(count=3, core=0, memory_ratio=1000, shared=False)),
    ({"koordinator.sh/gpu.shared": 2, "koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory-ratio": 100},
     dict(count=2, core=500, memory_ratio=500, shared=True)),
    ({"cpu": 1000}, None),
])
def test_normalize_valid(req, want):
    got = normalize_request(req)
    if want is None:
        assert got is None
        return
    for k, v in want.items():
        assert getattr(got, k) == v, k


@pytest.mark.parametrize("req, msg", [
    ({"nvidia.com/gpu": 1, "koordinator.sh/gpu-core": 50}, "combination"),
    ({"koordinator.sh/gpu-core": 50}, "combination"),
    ({"koordinator.sh/gpu": 150}, "multiple of 100"),
    ({"koordinator.sh/gpu-core": 150, "koordinator.sh/gpu-memory-ratio": 150}, "multiple of 100"),
    ({"koordinator.sh/gpu.shared": 2, "koordinator.sh/gpu-core": 101, "koordinator.sh/gpu-memory-ratio": 100}, "multiple of"),
    ({"koordinator.sh/gpu.shared": 1, "koordinator.sh/gpu-core": 200, "koordinator.sh/gpu-memory-ratio": 200}, "exceeds 100"),
])
def test_normalize_invalid(req, msg):
    with pytest.raises(InvalidGpuRequest, match=msg):
        normalize_request(req)


def _w():
    # two typical pods: half a GPU with 4 CPUs (p=.5), a CPU-only pod (p=.5)
    return frag.make_workload([((4000, 500, 1, ""), 0.5), ((2000, 0, 0, ""), 0.5)], ["A"])


@pytest.mark.parametrize("cpu, left, want", [
    (8000, [1000, 1000], 0.5 * 0 + 0.5 * 2000),      # fits: no small GPU; CPU pod: all idle
    (8000, [300, 1000], 0.5 * 300 + 0.5 * 1300),     # the 300 GPU is a fragment for the 500 pod
    (2000, [1000, 1000], 0.5 * 2000 + 0.5 * 2000),   # lacks CPU: all idle is fragment
    (8000, [0, 0], 0.0),
])
def test_node_frag_hand_computed(cpu, left, want):
    assert frag.node_frag_one(cpu, left, 0, _w()) == pytest.approx(want)


def _w_cap():
    # one typical pod: a whole GPU with 8 CPUs (p=.5); a 300-milli share with 2 CPUs (p=.5)
    return frag.make_workload([((8000, 1000, 1, ""), 0.5), ((2000, 300, 1, ""), 0.5)], ["A"])


@pytest.mark.parametrize("cpu, left, paper, ours", [
    # plenty of CPU: FGD's measure; ours also drops the 100 left of a free GPU that 300s cannot use
    (64000, [1000, 1000], 0.0, 0.5 * 0 + 0.5 * 200),
    # CPU for one whole-GPU pod only: FGD sees no fragment, ours the GPU the CPU cannot feed (1000);
    # the 300 pod has CPU for both GPUs, each usable in whole multiples (900 of 1000)
    (8000, [1000, 1000], 0.0, 0.5 * 1000 + 0.5 * 200),
    # no CPU for the whole-GPU pod: all idle for both measures; CPU for two 300 pods, so both GPUs
    (4000, [1000, 1000], 0.5 * 2000, 0.5 * 2000 + 0.5 * 200),
    # CPU for one 300 pod: only the GPU it can use most of (900 of the 1000) counts
    (2000, [1000, 600], 0.5 * 1600 + 0.5 * 0, 0.5 * 1600 + 0.5 * (1600 - 900)),
    (64000, [500, 250], 0.5 * 750 + 0.5 * 250, 0.5 * 750 + 0.5 * (750 - 300)),   # 250 < 300; 500 → 300
    (-1000, [1000, 1000], 0.5 * 2000 + 0.5 * 2000, 0.5 * 2000 + 0.5 * 2000),      # a what-if past the CPU
])
def test_capacity_frag_hand_computed(cpu, left, paper, ours):
    w = _w_cap()
    assert frag.node_frag_one(cpu, left, 0, w) == pytest.approx(paper)
    got = frag.node_frag_capacity(np.array([cpu]), np.array([left]), np.array([0]), w)[0]
    assert got == pytest.approx(ours)


def test_capacity_frag_counts_memory_when_known():
    w = frag.make_workload([((8000, 1000, 1, ""), 1.0)], ["A"]).with_memory({(8000, 1000, 1, ""): 48 * GI})
    cpu, left = np.array([64000]), np.array([[1000, 1000, 1000]])
    assert frag.node_frag_capacity(cpu, left, np.array([0]), w)[0] == pytest.approx(0.0)  # memory not given
    got = frag.node_frag_capacity(cpu, left, np.array([0]), w, mem_left=np.array([100 * GI]))[0]
    assert got == pytest.approx(1000.0)  # memory for two of the three GPUs' pods
    got = frag.node_frag_capacity(cpu, left, np.array([0]), w, mem_left=np.array([40 * GI]))[0]
    assert got == pytest.approx(3000.0)  # not even one fits
    assert w.with_models(["A", "B"]).memory.tolist() == [48 * GI]


@pytest.mark.parametrize("policy, node", [("fgd", "a"), ("fgdcap", "b")])
def test_fgdcap_keeps_cpu_for_free_gpus(policy, node):
    """A CPU-only pod: FGD sees no change on either node (one GPU pod still fits on a) and takes the
    first; fgdcap sees that on a it would leave 3 of 4 free GPUs without CPU for their pods."""
    b = ClusterBuilder()
    for name, cpu in (("a", "16"), ("b", "64")):
        b.node(name, cpu=cpu, memory="256Gi", labels={"node.koordinator.sh/gpu-model": "T4"},
               **{"nvidia.com__gpu": "4", "koordinator.sh__gpu-core": "400", "koordinator.sh__gpu-memory-ratio": "400",
                  "koordinator.sh__gpu-memory": "64Gi"})
    b.pod("cpu-only", cpu="8", memory="1Gi")
    out = schedule(b, only=["gpu_share"], profile={
        "percentageOfNodesToScore": 100,
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "gpu_share"}]}},
        "pluginConfig": {"gpu_share": {"policy": policy, "tieBreak": "first", "typicalPods": [
            {"milliCpu": 8000, "milliGpu": 1000, "gpuNumber": 1, "weight": 1.0}]}}})
    assert {p["name"]: p["node"] for p in out.to_dict()["pods"]}["cpu-only"] == node


@pytest.mark.parametrize("delta, fgd, coarse", [
    # 100·sigmoid(Δ/1000) vs 100·sigmoid(Δ/2000), truncated: 40/80 milli apart tie under the coarser only
    (0.0, 50, 50),
    (80.0, 51, 50),
    (200.0, 54, 52),
    (-200.0, 45, 47),
    (1000.0, 73, 62),
])
def test_fgd_score_scale_hand_computed(delta, fgd, coarse):
    assert int(frag.fgd_score(np.array([delta]))[0]) == fgd
    assert int(frag.fgd_score(np.array([delta]), scale=2000.0)[0]) == coarse


def test_typical_pods_threshold_and_order():
    keys = [(1, 500, 1, "")] * 6 + [(2, 0, 0, "")] * 3 + [(3, 1000, 1, "")]
    w = frag.typical_pods(keys, threshold=85)
    assert w.keys == ((1, 500, 1, ""), (2, 0, 0, "")) and w.p.tolist() == pytest.approx([6 / 9, 3 / 9])


def _half(b, name, pct=50, **kw):
    return b.pod(name, cpu="1", requests={"koordinator.sh/gpu-core": str(pct), "koordinator.sh/gpu-memory-ratio": str(pct)}, **kw)


def _placed(res):
    return {p["name"]: (p["node"], json.loads(p["annotations"][ANN]) if ANN in p["annotations"] else None)
            for p in res.to_dict()["pods"]}


def test_annotation_format_memory_from_ratio():
    b = _half(gpu_cluster(), "p")
    out = _placed(schedule(b, only=["gpu_share"], profile={"pluginConfig": {"gpu_share": {"policy": "binpack"}}}))
    _, ann = out["p"]
    assert ann == {"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "50",
                                                     "koordinator.sh/gpu-memory": "8Gi",
                                                     "koordinator.sh/gpu-memory-ratio": "50"}}]}


@pytest.mark.parametrize("policy, same_gpu", [("binpack", True), ("spread", False), ("bestfit", True), ("fgd", True),
                                              ("fgdcap", True)])
def test_device_choice_per_policy(policy, same_gpu):
    b = gpu_cluster()
    _half(b, "a", 30)
    _half(b, "b", 30)
    out = _placed(schedule(b, only=["gpu_share"], profile={
        "percentageOfNodesToScore": 100,
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "gpu_share"}]}},
        "pluginConfig": {"gpu_share": {"policy": policy, "tieBreak": "first"}}}))
    (na, aa), (nb, ab) = out["a"], out["b"]
    together = na == nb and aa["gpu"][0]["minor"] == ab["gpu"][0]["minor"]
    assert together == same_gpu


def test_rebuild_from_annotated_pods_and_no_double_allocation():
    b = gpu_cluster(gpus=1)
    held = json.dumps({"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "80",
                                                          "koordinator.sh/gpu-memory-ratio": "80"}}]})
    b.pod("old", cpu="1", node="n1", annotations={ANN: held},
          requests={"koordinator.sh/gpu-core": "80", "koordinator.sh/gpu-memory-ratio": "80"})
    _half(b, "new", 50)
    out = _placed(schedule(b, only=["gpu_share"]))
    assert out["new"][0] == "n2"


def test_invalid_request_is_rejected_with_reason():
    b = gpu_cluster().pod("bad", requests={"koordinator.sh/gpu": "150"})
    pods = {p["name"]: p for p in schedule(b, only=["gpu_share"]).to_dict()["pods"]}
    assert pods["bad"]["node"] is None and "multiple of 100" in pods["bad"]["reason"]


def test_non_gpu_pods_unchanged_by_default():
    b = gpu_cluster().pod("web", cpu="2").pod("web2", cpu="2")
    with_p = {p["name"]: p["node"] for p in schedule(b, only=["gpu_share"], seed=3).to_dict()["pods"]}
    without = {p["name"]: p["node"] for p in schedule(b, only=[], seed=3).to_dict()["pods"]}
    assert with_p == without


def test_unhealthy_device_is_never_used():
    b = ClusterBuilder().node("n1", cpu="8", **{"nvidia.com__gpu": "2", "koordinator.sh__gpu-core": "200",
                                               "koordinator.sh__gpu-memory-ratio": "200"})
    b.obj({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "n1"},
           "spec": {"devices": [{"type": "gpu", "minor": 0, "health": False},
                                {"type": "gpu", "minor": 1, "health": True}]}})
    b.pod("a", requests={"nvidia.com/gpu": "1"}).pod("b", requests={"nvidia.com/gpu": "1"})
    out = _placed(schedule(b, only=["gpu_share"]))
    assert out["a"][1]["gpu"][0]["minor"] == 1 and out["b"][0] is None


def test_bad_device_object_rejects_only_its_node_with_the_reason():
    b = gpu_cluster()
    b.obj({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "n1"},
           "spec": {"devices": "not a list"}})
    _half(b, "a", 50)
    b.pod("big", requests={"nvidia.com/gpu": "2"})  # fits n1 for node_resources_fit, not for gpu_share
    pods = {p["name"]: p for p in schedule(b, only=["gpu_share"]).to_dict()["pods"]}
    assert pods["a"]["node"] == "n2"
    assert pods["big"]["node"] is None
    assert "Device n1: spec.devices must be a list" in pods["big"]["reason"]
    assert INSUFFICIENT_TEXT in pods["big"]["reason"]


def test_replay_small_slice_end_to_end(tmp_path):
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},32000,131072,{2 if i % 2 else 8},{'T4' if i % 2 else 'G2'}\n" for i in range(12)))
    rows = []
    for i in range(80):
        num, milli = [(1, 500), (1, 1000), (0, 0), (1, 250), (2, 1000)][i % 5]
        rows.append(f"p{i:03d},{2000 + 1000 * (i % 3)},4096,{num},{milli},,LS,Running,0,0,0\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                    "deletion_time,scheduled_time\n" + "".join(rows))
    out = subprocess.run([sys.executable, "-m", "koordfw", "replay", "openb", "--nodes", str(nodes), "--pods",
                          str(pods), "--policy", "fgd", "--seeds", "1-2", "-o", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["seed"] for r in data["runs"]] == [1, 2] and data["runs"][0]["total_gpus"] == 60
    r = data["runs"][0]
    assert 0 <= r["unallocated_gpu_pct_at_100"] <= 100 and r["curve"][0]["arrived_pct"] == 0
    assert "fgd" in data["medians"]


def test_replay_fgdlp_small_slice(tmp_path):
    from koordfw_gpu_share.replay import replay
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},32000,131072,{2 if i % 2 else 8},{'T4' if i % 2 else 'G2'}\n" for i in range(12)))
    shapes = [(1, 810), (1, 470), (1, 1000), (0, 0), (1, 160), (2, 1000)]
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                    "deletion_time,scheduled_time\n" + "".join(
                        f"p{i:03d},{2000 + 1000 * (i % 3)},4096,{shapes[i % 6][0]},{shapes[i % 6][1]},,LS,Running,0,0,0\n"
                        for i in range(90)))
    a = replay(str(nodes), str(pods), "fgdlp", 3)
    b = replay(str(nodes), str(pods), "fgdlp", 3)
    assert a["policy"] == "fgdlp" and a["total_gpus"] == 60
    assert a["unallocated_gpu_pct_at_100"] == b["unallocated_gpu_pct_at_100"]  # deterministic per seed
    assert 0 <= a["unallocated_gpu_pct_at_100"] <= 100


def test_prepare_trace_is_seeded_and_rejects_a_cluster_without_gpus(tmp_path):
    from koordfw_gpu_share.replay import prepare_trace

    from koordfw import ConfigError
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},32000,131072,{i % 3},{'T4' if i % 3 else ''}\n" for i in range(9)))
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
        f"p{i:02d},1000,1024,1,{(250, 500, 1000)[i % 3]}\n" for i in range(20)))
    a, b, c = (prepare_trace(nodes, pods, s) for s in (7, 7, 8))
    assert a.capacity_milli == 9000 and [r[3] for r in a.nodes].count(0) == 0  # GPU nodes only
    assert a.nodes == b.nodes and a.pods == b.pods
    assert (a.nodes, a.pods) != (c.nodes, c.pods)
    assert sum(r[3] * r[4] for r in a.pods) <= 1.3 * 9000 < sum(r[3] * r[4] for r in a.pods) + 1000
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,0,\n")
    with pytest.raises(ConfigError, match="nodes.csv: no GPU nodes"):
        prepare_trace(nodes, pods, 7)


def test_agent_devices_without_nvml():
    out = subprocess.run([sys.executable, "-m", "koordfw", "agent", "devices"], capture_output=True, text=True)
    assert out.returncode == 1 and ("NVML" in out.stderr)


def test_agent_devices_with_fake_nvml():
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda h: f"GPU-{h}".encode(),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=16 * GI),
        nvmlDeviceGetMinorNumber=lambda h: h)
    dev = build_device("gpu-node-1", fake)
    assert dev["metadata"]["name"] == "gpu-node-1"
    assert [d["minor"] for d in dev["spec"]["devices"]] == [0, 1]
    assert dev["spec"]["devices"][0]["resources"]["koordinator.sh/gpu-memory"] == str(16 * GI)
    fake.nvmlDeviceGetCount = lambda: 0
    with pytest.raises(NoGpu, match="no GPU"):
        build_device("n", fake)
