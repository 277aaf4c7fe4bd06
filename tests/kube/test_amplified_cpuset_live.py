"""cpu_topology on ``koordfw scheduler`` against the fake API server, on a node the manager amplified (see
test_heterogeneous_nodes_live.py for the manager writing it): LSR pods count their bound CPUs at the cpu
amplification ratio (Koordinator's ``filterAmplifiedCPUs``), and the refusal reaches the pod's condition."""

from __future__ import annotations

import json

from koordfw_cpu_topology.topology import detail_for_test, topology_annotation
from kube_testkit import node, pod, running, wait_for

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.extension import (
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    ANNOTATION_RESOURCE_STATUS,
)


def amplified_node() -> dict:
    """8 physical CPUs (1 socket × 4 cores × 2 threads), allocatable amplified ×1.5 to 12 cores."""
    n = node("n1", cpu="8", memory="32Gi")
    n["status"]["allocatable"] = {**n["status"]["allocatable"], "cpu": "12"}
    n["metadata"]["annotations"] = {
        "node.koordinator.sh/cpu-topology": topology_annotation(detail_for_test(1, 1, 4, 2)),
        ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: '{"cpu":1.50}',
        ANNOTATION_NODE_RAW_ALLOCATABLE: json.dumps({"cpu": "8", "memory": "32Gi"}),
    }
    return n


def lsr(name: str, cpu: str) -> dict:
    return pod(name, cpu=cpu, memory="1Gi", labels={"koordinator.sh/qosClass": "LSR"}, priority=9500)


async def test_lsr_pods_count_amplified_cpus_on_the_live_scheduler(api, client):
    """lsr-a and lsr-b (4 CPUs each) count 6 of the 12 cores each and both bind, with disjoint cpusets;
    ls-c (1 core, no cpuset) then finds 12000 − 12000 = 0 left: Unschedulable, ``Insufficient amplified cpu``
    (the plain resource fit alone would see 8 of 12 cores used)."""
    reg = build_registry(None, only=["cpu_topology"])
    api.create(amplified_node())
    eng = KubeSchedulerEngine(reg, client)

    def bound(name: str) -> str | None:
        return api.get("pods", name, "default")["spec"].get("nodeName")

    async with running(eng):
        for name in ("lsr-a", "lsr-b"):  # one after the other: the order decides who is refused
            api.create(lsr(name, "4"))
            await wait_for(lambda name=name: bound(name) == "n1", what=f"{name} bound")
        api.create(pod("ls-c", cpu="1", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9500))

        def refused() -> str:
            p = api.get("pods", "ls-c", "default")
            cond = [c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"]
            return cond[0].get("message", "") if cond and cond[0]["status"] == "False" else ""

        await wait_for(lambda: "Insufficient amplified cpu" in refused(), what="ls-c refused")
    assert bound("ls-c") is None
    cpusets = {json.loads(api.get("pods", n, "default")["metadata"]["annotations"][ANNOTATION_RESOURCE_STATUS])["cpuset"]
               for n in ("lsr-a", "lsr-b")}
    assert cpusets == {"0-3", "4-7"}
