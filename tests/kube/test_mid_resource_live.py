"""``koordfw manager``'s node-resources controller with the mid_resource plugin, against the fake API server:
the NodeMetric's ``prodReclaimableMetric`` becomes ``kubernetes.io/mid-cpu`` / ``mid-memory`` in Node.status
(allocatable and capacity), capped by the ConfigMap's ``midCPUThresholdPercent``; a stale NodeMetric
removes them (Koordinator's degrade), a fresh one brings them back.

By hand (node 8 cores / 32Gi, nodeUsage 3 / 6Gi, prodReclaimable 2 cores / 4Gi): mid-cpu = min(2000, 8000-3000)
= 2000, mid-memory = 4Gi; with midCPUThresholdPercent 20: min(2000, 8000*0.2 = 1600) = 1600."""

from __future__ import annotations

import json

import anyio
from kube_testkit import node, pod, wait_for
from test_noderesource_live import NOW, NS, Clock, caught_up, iso, manager, resync

from koordfw.engines.embedded import build_registry
from koordfw.extension import MID_CPU, MID_MEMORY, SLO_CTRL_CONFIG_MAP

G = 2**30


def node_metric(name: str, update: float, prod_cpu: str = "2") -> dict:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "status": {"updateTime": iso(update),
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": "3", "memory": "6Gi"}},
                                      "systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
                       "podsMetric": [],
                       "prodReclaimableMetric": {"resource": {"resources": {"cpu": prod_cpu, "memory": "4Gi"}}}}}


def mid_of(api, name: str) -> tuple[str | None, str | None]:
    st = api.get("nodes", name)["status"]
    alloc, cap = st["allocatable"], st["capacity"]
    assert alloc.get(MID_CPU) == cap.get(MID_CPU) and alloc.get(MID_MEMORY) == cap.get(MID_MEMORY)
    return alloc.get(MID_CPU), alloc.get(MID_MEMORY)


async def test_prod_reclaimable_becomes_mid_resources_in_node_status(api, client):
    plugins = build_registry(None, only=["mid_resource"])
    clock = Clock()
    api.create(node("n1", cpu="8", memory="32Gi"))
    api.create(pod("web", cpu="1", memory="2Gi", node_name="n1", ns="default"))
    api.create(node_metric("n1", NOW - 30))
    api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SLO_CTRL_CONFIG_MAP, "namespace": NS},
                "data": {"colocation-config": json.dumps({"enable": True})}})
    async with manager(api, client, plugins, clock) as (m, ctl):
        await wait_for(lambda: mid_of(api, "n1")[0] is not None, what="mid resources written")
        assert mid_of(api, "n1") == ("2000", "4Gi")
        # the threshold from the ConfigMap caps mid-cpu at 20 % of 8 cores
        api.update("configmaps", SLO_CTRL_CONFIG_MAP, lambda o: o["data"].update(
            {"colocation-config": json.dumps({"enable": True, "midCPUThresholdPercent": 20})}), NS)
        await caught_up(api, m, "configmaps", "ConfigMap", SLO_CTRL_CONFIG_MAP, NS)
        await resync(ctl)
        await wait_for(lambda: mid_of(api, "n1")[0] == "1600", what="mid-cpu capped")
        # stale NodeMetric (older than degradeTimeMinutes 15): Reset removes both
        clock.t = NOW - 30 + 15 * 60 + 1
        await resync(ctl)
        await wait_for(lambda: mid_of(api, "n1") == (None, None), what="mid resources reset")
        meta = api.get("nodemetrics", "n1")["metadata"]
        api.replace("nodemetrics", node_metric("n1", clock.t - 10) | {"metadata": meta})
        await wait_for(lambda: mid_of(api, "n1")[0] == "1600", what="mid resources back")
        with anyio.fail_after(5):
            await resync(ctl)
