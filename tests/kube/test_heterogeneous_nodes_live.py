"""cpu_normalization and resource_amplification on ``koordfw manager`` against the fake API server: the
manager reads the NodeResourceTopology's cpu-basic-info and the slo-controller-config keys, and writes the
ratio annotations, the raw allocatable and the amplified allocatable in one patch of ``nodes/status``;
a second pass does not amplify twice."""

from __future__ import annotations

import json

from kube_testkit import node, wait_for
from test_noderesource_live import NS, Clock, manager, resync

from koordfw.engines.embedded import build_registry
from koordfw.extension import (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    SLO_CTRL_CONFIG_MAP,
)


def nrt(name: str, model: str) -> dict:
    return {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
            "metadata": {"name": name, "annotations": {
                ANNOTATION_CPU_BASIC_INFO: json.dumps({"cpuModel": model, "hyperThreadEnabled": True})}}}


async def test_manager_writes_ratio_and_amplified_allocatable(api, client):
    registry = build_registry(None, only=["cpu_normalization", "resource_amplification"])
    api.create(node("n1", cpu="8", memory="32Gi"))
    api.create(nrt("n1", "Xeon New"))
    api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SLO_CTRL_CONFIG_MAP, "namespace": NS},
                "data": {"cpu-normalization-config": json.dumps(
                    {"enable": True, "ratioModel": {"Xeon New": {"hyperThreadEnabledRatio": 1.25}}}),
                    "resource-amplification-config": json.dumps({"enable": True})}})
    async with manager(api, client, registry, Clock()) as (m, ctl):
        def annotations() -> dict:
            return api.get("nodes", "n1")["metadata"].get("annotations") or {}

        await wait_for(lambda: ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO in annotations())
        anns = annotations()
        assert anns[ANNOTATION_CPU_NORMALIZATION_RATIO] == "1.25"
        assert anns[ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO] == '{"cpu":1.25}'
        assert json.loads(anns[ANNOTATION_NODE_RAW_ALLOCATABLE]) == {"cpu": "8", "memory": "32Gi"}
        status = api.get("nodes", "n1")["status"]
        assert status["allocatable"]["cpu"] == "10" and status["capacity"]["cpu"] == "8"
        await wait_for(lambda: (m.cluster.node("n1") is not None
                                and m.cluster.node("n1").node.allocatable.get("cpu") == 10000))
        await resync(ctl)
        await resync(ctl)
        assert api.get("nodes", "n1")["status"]["allocatable"]["cpu"] == "10"  # never twice
