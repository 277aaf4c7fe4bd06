"""Hostile input (issue 16): one malformed Device, pod annotation or affinity takes down no more than
itself. A bad Device leaves its node without GPUs and is reported naming the object and field; the
other pods still bind; bad args are refused at profile load naming the field."""

from __future__ import annotations

import json
import re

import attrs
import pytest
import yaml
from koordfw_gpu_share.inventory import MAX_GPUS_PER_NODE, Inventory, InventoryError, _device_list
from koordfw_gpu_share.requests import InvalidGpuRequest, pod_gpu_request

from koordfw.testing import ClusterBuilder, schedule
from koordfw.testing.hostile import check_cli_outcome, run_cli

DA = "scheduling.koordinator.sh/device-allocated"
GPU_ALLOC = {"nvidia.com/gpu": "2", "koordinator.sh/gpu": "200", "koordinator.sh/gpu-core": "200",
             "koordinator.sh/gpu-memory-ratio": "200", "koordinator.sh/gpu-memory": "32Gi"}
DEEP = "[" * 5000 + "]" * 5000


def node(name):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110", **GPU_ALLOC}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, annotations=None, node_name=None, gpu=True):
    req = {"cpu": "1", "memory": "1Gi", **({"koordinator.sh/gpu": "50"} if gpu else {})}
    spec = {"containers": [{"name": "c", "resources": {"requests": req}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}}}


def gpu(minor, **res):
    return {"type": "gpu", "minor": minor, "health": True,
            "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100",
                          "koordinator.sh/gpu-memory": "16Gi", **res}}


def device(name, devices, namespace=None):
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": meta,
            "spec": {"devices": devices}}


def simulate(tmp_path, objs, profile=None):
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "c.yaml").write_text(yaml.safe_dump_all(objs))
    argv = ["--log-format", "json", "simulate", str(tmp_path / "m"), "-o", "json"]
    if profile is not None:
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(profile))
        argv += ["--profile", str(tmp_path / "p.yaml")]
    return run_cli(argv, timeout=30)


BAD_DEVICES = [
    ("minor inf", [gpu(float("inf"))], "spec.devices[0].minor"),
    ("minor 10**30", [gpu(10**30)], "spec.devices[0].minor"),
    ("minor 1.5", [gpu(1.5)], "spec.devices[0].minor"),
    ("minor negative", [gpu(-3)], "spec.devices[0].minor"),
    ("minor twice", [gpu(0), gpu(0)], "spec.devices[1].minor"),
    ("gpu-core negative", [gpu(0, **{"koordinator.sh/gpu-core": "-100"})], "gpu-core"),
    ("gpu-core 1e20", [gpu(0, **{"koordinator.sh/gpu-core": "1e20"})], "gpu-core"),
    ("gpu-core nan", [gpu(0, **{"koordinator.sh/gpu-core": float("nan")})], "gpu-core"),
    ("gpu-memory 1e30", [gpu(0, **{"koordinator.sh/gpu-memory": "1e30"})], "gpu-memory"),
    ("resources not a mapping", [dict(gpu(0), resources="x")], "spec.devices[0].resources"),
    ("too many GPUs", [gpu(i) for i in range(MAX_GPUS_PER_NODE + 1)], "spec.devices"),
]


@pytest.mark.parametrize("devices, field", [c[1:] for c in BAD_DEVICES], ids=[c[0] for c in BAD_DEVICES])
def test_bad_device_is_reported_and_left_out(tmp_path, devices, field):
    out = simulate(tmp_path, [node("n1"), node("n2"), device("n1", devices), device("n2", [gpu(0), gpu(1)]),
                              pod("a"), pod("b"), pod("cpu", gpu=False)])
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    pods = {p["name"]: p for p in json.loads(out.stdout)["pods"]}
    assert pods["a"]["node"] == pods["b"]["node"] == "n2"
    assert pods["cpu"]["phase"] == "Bound"
    assert "Device n1" in out.stderr and field in out.stderr


def test_spec_not_a_mapping():
    with pytest.raises(InventoryError, match="Device n1: spec must be a mapping"):
        _device_list({"spec": "x"}, "n1")


def test_a_second_device_for_the_same_node_is_named_not_silently_used(tmp_path):
    """Device is cluster-scoped: a namespaced copy names the same node, and the loader refuses it as the API
    server would (one Device n2), naming the duplicate. The plugin's own check is for embedders that add
    objects to a cluster without the loader."""
    out = simulate(tmp_path, [node("n1"), node("n2"), device("n1", [gpu(0), gpu(1)]),
                              device("n2", [gpu(0), gpu(1)]), device("n2", [gpu(5)], namespace="other"),
                              pod("a"), pod("b")])
    assert check_cli_outcome(out, names=["duplicate Device n2"], max_seconds=20) == "error"


def test_a_huge_gpu_count_in_allocatable_is_refused():
    b = ClusterBuilder().node("n1", **{"nvidia.com__gpu": "1000000000"}).node("n2", **{"nvidia.com__gpu": "1"})
    inv = Inventory(b.build().to_cluster())
    assert "more than 256" in inv.errors["n1"]
    assert inv.total_core.shape[1] == 1


@pytest.mark.parametrize("value", [DEEP, '{"gpu":[{"minor":1e400}]}', '{"gpu":[{"minor":0,"resources":'
                                   '{"koordinator.sh/gpu-core":"1e25"}}]}', '{"gpu":"x"}', '[1]',
                                   '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":NaN}}]}'])
def test_unreadable_device_allocated_only_loses_that_pod(tmp_path, value):
    out = simulate(tmp_path, [node("n1"), device("n1", [gpu(0), gpu(1)]),
                              pod("held", annotations={DA: value}, node_name="n1"), pod("a"), pod("b")])
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    pods = {p["name"]: p for p in json.loads(out.stdout)["pods"]}
    assert pods["a"]["phase"] == pods["b"]["phase"] == "Bound"
    warnings = [ln for ln in out.stderr.splitlines() if "ignoring bad device-allocated annotation" in ln]
    assert len(warnings) == 1 and "default/held" in warnings[0] and DA in warnings[0]


BAD_AFFINITIES = [
    ({"nodeAffinity": "x"}, "spec.affinity.nodeAffinity"),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}},
     "nodeSelectorTerms"),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.koordinator.sh/gpu-model", "operator": "In", "values": "A"}]}]}}},
     "matchExpressions[0].values"),
]


@pytest.mark.parametrize("affinity, field", BAD_AFFINITIES)
def test_malformed_affinity_fails_only_its_own_pod(affinity, field):
    """The loader refuses such manifests; a pod from an embedder or a live cluster may still carry one."""
    b = ClusterBuilder().node("n1", **{k.replace("/", "__"): v for k, v in GPU_ALLOC.items()})
    b.pod("good", requests={"koordinator.sh/gpu": "50"}).pod("bad", requests={"koordinator.sh/gpu": "50"})
    m = b.build()
    m.pods[1] = attrs.evolve(m.pods[1], affinity=affinity)
    with pytest.raises(InvalidGpuRequest, match=re.escape(field)):
        pod_gpu_request(m.pods[1])
    # the built-in node_selector reads the same affinity (and fails the cycle its own way): off here
    pods = {p["name"]: p for p in schedule(m, only=["gpu_share"], profile={"disable": ["node_selector"]})
            .to_dict()["pods"]}
    assert pods["good"]["phase"] == "Bound"
    assert pods["bad"]["phase"] == "Pending" and field in pods["bad"]["reason"]


BAD_ARGS = [
    ("seed", -1), ("popularityThreshold", float("nan")), ("popularityThreshold", 500),
    ("workloadRefreshPods", -5), ("lpCpuMargin", float("inf")),
    ("typicalPods", [{"milliCpu": 1000, "milliGpu": 500, "weight": float("nan")}]),
    ("typicalPods", [{"milliCpu": -1, "milliGpu": 500}]),
    ("typicalPods", [{"milliCpu": 1000, "milliGpu": 5000}]),
    ("shareSizes", [{"milliGpu": 500, "weight": float("inf")}]),
]


@pytest.mark.parametrize("field, value", BAD_ARGS, ids=[f"{f}={v!r}" for f, v in BAD_ARGS])
def test_out_of_range_args_are_refused_naming_the_field(tmp_path, field, value):
    out = simulate(tmp_path, [node("n1"), pod("a")], {"pluginConfig": {"gpu_share": {field: value}}})
    assert check_cli_outcome(out, names=["pluginConfig.gpu_share", field], max_seconds=20) == "error"


def test_nodes_without_gpus_are_unaffected():
    b = ClusterBuilder().node("n1").pod("p", cpu="1")
    assert schedule(b, only=["gpu_share"]).placements() == {"default/p": "n1"}


# -- the trace replay ---------------------------------------------------------------------------------

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},32000,131072,2,T4\n" for i in range(2))
PODS_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def replay(tmp_path, pods, nodes=NODES, *extra):
    (tmp_path / "nodes.csv").write_text(nodes)
    (tmp_path / "pods.csv").write_text(PODS_HEADER + pods)
    return run_cli(["replay", "openb", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                    "--policy", "bestfit", "-o", "json", *extra], timeout=60)


def test_a_trace_without_gpu_pods_does_not_hang(tmp_path):
    """Inflating the trace to the GPU capacity needs a pod that asks for GPUs; it used to loop forever."""
    out = replay(tmp_path, "".join(f"p{i},1000,1024,0,0,\n" for i in range(3)))
    assert check_cli_outcome(out, max_seconds=30) == "ok"


def test_an_empty_trace_does_not_crash(tmp_path):
    assert check_cli_outcome(replay(tmp_path, ""), max_seconds=30) == "ok"


@pytest.mark.parametrize("pods, nodes, names", [
    ("p0,-1000,1024,1,500,\n", NODES, ["pods.csv", "p0", "cpu_milli"]),
    ("p0,1000,1024,1,500,\n", "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,1000000000000000,T4\n",
     ["nodes.csv", "n0", "gpu"]),
])
def test_out_of_range_trace_values_are_refused(tmp_path, pods, nodes, names):
    out = replay(tmp_path, pods, nodes)
    assert check_cli_outcome(out, names=names, max_seconds=30) == "error"


@pytest.mark.parametrize("argv", [["--seeds", "0-100000000000"], ["--seed", "-1"], ["--seeds", "5-2"]])
def test_seeds_are_bounded(tmp_path, argv):
    out = replay(tmp_path, "p0,1000,1024,1,500,\n", NODES, *argv)
    assert check_cli_outcome(out, names=["--seed"], max_seconds=30) == "error"
