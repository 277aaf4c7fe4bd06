"""A NUMA topology policy across cpu, memory and GPUs on the real kube-apiserver v1.20.2 (issue 35 points 3 and
4), with deploy/'s NodeResourceTopology and Device CRDs: a node labelled SingleNUMANode whose NUMA node 0 is
mostly taken; a pod asking for 8 CPUs and 2 GPUs gets NUMA node 1's CPUs, memory and GPUs, written by the live
scheduler in its resource-status and device-allocated annotations."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
from realkube_testkit import apply_pod, pod, wait_until

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine

NS = "numa-gpu"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALLOCATED = "scheduling.koordinator.sh/device-allocated"
STATUS = "scheduling.koordinator.sh/resource-status"


async def test_gpus_follow_the_numa_node_of_the_pods_cpus(kube_plane):
    for crd in ("00-crd-noderesourcetopology.yaml", "00-crd-device.yaml"):
        kube_plane.apply_file(DEPLOY / crd)
    gpu = {"nvidia.com/gpu": "8", "koordinator.sh/gpu-core": "800", "koordinator.sh/gpu-memory-ratio": "800"}
    kube_plane.add_node("ng-n1", cpu="32", memory="128Gi", extra=gpu,
                        labels={"node.koordinator.sh/numa-topology-policy": "SingleNUMANode"})
    wait_until(lambda: kube_plane.apply({
        "apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology", "metadata": {"name": "ng-n1"},
        "topologyPolicies": ["None"],
        "zones": [{"name": f"node-{z}", "type": "Node",
                   "resources": [{"name": "cpu", "capacity": "16", "allocatable": "16", "available": "16"},
                                 {"name": "memory", "capacity": "64Gi", "allocatable": "64Gi", "available": "64Gi"}]}
                  for z in range(2)]}) is not None, what="NodeResourceTopology created (its CRD served)")
    wait_until(lambda: kube_plane.apply({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "ng-n1"},
        "spec": {"devices": [{"type": "gpu", "id": f"GPU-{m}", "minor": m, "health": True,
                              "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"},
                              "topology": {"socketID": m // 4, "nodeID": m // 4, "pcieID": f"pci{m // 2}"}}
                             for m in range(8)]}}) is not None, what="Device created (its CRD served)")
    kube_plane.create_namespace(NS)
    train = pod("train", NS, cpu="8", memory="16Gi")
    train["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    train["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "2"}

    def got(name: str) -> dict:
        return kube_plane.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}")

    async with kube_plane.client() as c:
        eng = KubeSchedulerEngine(build_registry(None, only={"cpu_topology", "gpu_share"}), c, flush_interval=0.1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(eng.run)
            with anyio.fail_after(90):
                await eng.started.wait()
                apply_pod(kube_plane, pod("filler", NS, cpu="12", memory="8Gi"))
                while not (await anyio.to_thread.run_sync(got, "filler"))["spec"].get("nodeName"):
                    await anyio.sleep(0.2)
                apply_pod(kube_plane, train)
                while not (await anyio.to_thread.run_sync(got, "train"))["spec"].get("nodeName"):
                    await anyio.sleep(0.2)
            eng.stop()
    filler = got("filler")["metadata"]["annotations"]
    ann = got("train")["metadata"]["annotations"]
    assert [r["node"] for r in json.loads(filler[STATUS])["numaNodeResources"]] == [0]
    assert [r["node"] for r in json.loads(ann[STATUS])["numaNodeResources"]] == [1]
    assert [g["minor"] for g in json.loads(ann[ALLOCATED])["gpu"]] == [4, 5]
