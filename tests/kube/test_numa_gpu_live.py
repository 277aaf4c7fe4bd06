"""A NUMA topology policy across cpu, memory and GPUs on the live scheduler against the fake API server
(issue 35 points 3 and 4): the node's SingleNUMANode label, its NodeResourceTopology and its Device (GPUs with
their NUMA node and PCIe switch) come from the API server; a pod asking for CPUs and GPUs gets the NUMA node
that holds both, written in its resource-status and device-allocated annotations."""

from __future__ import annotations

import json

from kube_testkit import node, pod, running, wait_for

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine

ALLOCATED = "scheduling.koordinator.sh/device-allocated"
STATUS = "scheduling.koordinator.sh/resource-status"


def gpu_pod(name: str, cpu: str, memory: str, gpus: int) -> dict:
    p = pod(name, cpu=cpu, memory=memory)
    if gpus:
        p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
        p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    return p


async def test_gpus_follow_the_numa_node_of_the_pods_cpus(api, client):
    n = node("n1", cpu="32", memory="128Gi", labels={"node.koordinator.sh/numa-topology-policy": "SingleNUMANode"})
    for k in ("capacity", "allocatable"):
        n["status"][k].update({"nvidia.com/gpu": "8", "koordinator.sh/gpu-core": "800",
                               "koordinator.sh/gpu-memory-ratio": "800"})
    api.create(n)
    api.create({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology", "metadata": {"name": "n1"},
                "zones": [{"name": f"node-{z}", "type": "Node",
                           "resources": [{"name": "cpu", "capacity": "16", "allocatable": "16"},
                                         {"name": "memory", "capacity": "64Gi", "allocatable": "64Gi"}]}
                          for z in range(2)]})
    api.create({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "n1"},
                "spec": {"devices": [{"type": "gpu", "minor": m, "health": True,
                                      "resources": {"koordinator.sh/gpu-core": "100",
                                                    "koordinator.sh/gpu-memory-ratio": "100"},
                                      "topology": {"socketID": m // 4, "nodeID": m // 4, "pcieID": f"pci{m // 2}"}}
                                     for m in range(8)]}})
    eng = KubeSchedulerEngine(build_registry(None, only={"cpu_topology", "gpu_share"}), client, flush_interval=0.1)
    async with running(eng):
        api.create(gpu_pod("filler", "12", "8Gi", 0))
        await wait_for(lambda: api.get("pods", "filler", "default")["spec"].get("nodeName"))
        api.create(gpu_pod("train", "8", "16Gi", 2))
        await wait_for(lambda: api.get("pods", "train", "default")["spec"].get("nodeName"))
    filler = api.get("pods", "filler", "default")["metadata"]["annotations"]
    train = api.get("pods", "train", "default")["metadata"]["annotations"]
    assert [r["node"] for r in json.loads(filler[STATUS])["numaNodeResources"]] == [0]
    assert [r["node"] for r in json.loads(train[STATUS])["numaNodeResources"]] == [1]
    assert [g["minor"] for g in json.loads(train[ALLOCATED])["gpu"]] == [4, 5]
