"""The manager's node-resources controller end to end against the fake API server, on an injected clock:
batch resources from NodeMetrics (fresh, stale/degraded, back), Koordinator's write rule
(resourceDiffThreshold / updateTimeThresholdSeconds), nodeConfigs first match, the ConfigMap applied live
(and a malformed one ignored), device resources from Devices, and only the leader writing."""

from __future__ import annotations

import datetime as dt
import json
from contextlib import asynccontextmanager

import anyio
import pytest
from kube_testkit import node, pod, wait_for

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.leader import LeaderElector
from koordfw.engines.kube.manager import KubeManager
from koordfw.engines.kube.noderesource import NodeResourceController
from koordfw.extension import BATCH_CPU, BATCH_MEMORY, SLO_CTRL_CONFIG_MAP

G = 2**30
NOW = 1_800_000_000.0
NS = "koordinator-system"
GPU_NAMES = ("koordinator.sh/gpu", "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory",
             "koordinator.sh/gpu-memory-ratio")


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_metric(name: str, update: float, *, system_cpu: str = "500m", pod_cpu: str = "2", pod_mem: str = "4Gi",
                pod_name: str = "web") -> dict:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "status": {"updateTime": iso(update),
                       "nodeMetric": {"nodeUsage": {"resources": {"cpu": "3", "memory": "6Gi"}},
                                      "systemUsage": {"resources": {"cpu": system_cpu, "memory": "1Gi"}}},
                       "podsMetric": [{"namespace": "default", "name": pod_name,
                                       "podUsage": {"resources": {"cpu": pod_cpu, "memory": pod_mem}}}]}}


def expected_cpu(reclaim: int = 60, system: int = 500, pod: int = 2000, cap: int = 8000) -> int:
    """Koordinator's byUsage batch-cpu (milli-cores) for the node_metric above on an 8-core node."""
    return cap - int(float(cap) * ((100 - reclaim) / 100)) - system - pod


def expected_mem(reclaim: int = 65) -> int:
    cap = 32 * G
    return cap - int(float(cap) * ((100 - reclaim) / 100)) - 1 * G - 4 * G


def colocation(**fields) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SLO_CTRL_CONFIG_MAP, "namespace": NS},
            "data": {"colocation-config": json.dumps({"enable": True, **fields})}}


def set_colocation(api, **fields) -> None:
    api.update("configmaps", SLO_CTRL_CONFIG_MAP,
               lambda o: o["data"].update({"colocation-config": json.dumps({"enable": True, **fields})}), NS)


def status_of(api, name: str) -> tuple[dict, dict]:
    st = api.get("nodes", name)["status"]
    return st["allocatable"], st["capacity"]


def batch_of(api, name: str) -> tuple[str | None, str | None]:
    alloc, cap = status_of(api, name)
    assert alloc.get(BATCH_CPU) == cap.get(BATCH_CPU) and alloc.get(BATCH_MEMORY) == cap.get(BATCH_MEMORY)
    return alloc.get(BATCH_CPU), alloc.get(BATCH_MEMORY)


@pytest.fixture
def plugins():
    return build_registry(None, only=["batch_resource", "gpu_share"])


def seed(api, *names: str, labels: dict | None = None, update: float = NOW - 30) -> None:
    for n in names:
        api.create(node(n, cpu="8", memory="32Gi", labels=labels))
        api.create(pod("web", cpu="1", memory="2Gi", node_name=n, ns="default") if n == names[0] else
                   pod(f"web-{n}", cpu="1", memory="2Gi", node_name=n))
        api.create(node_metric(n, update, pod_name="web" if n == names[0] else f"web-{n}"))


@asynccontextmanager
async def manager(api, client, registry, clock, **kw):
    ctl = NodeResourceController(resync_period=3600)
    m = KubeManager(registry, client, controllers=[ctl], clock=clock, **kw)
    async with anyio.create_task_group() as tg:
        tg.start_soon(m.run)
        with anyio.fail_after(10):
            await m.started.wait()
        await wait_for(lambda: ctl.ctx is not None)
        yield m, ctl
        m.stop()


async def caught_up(api, m: KubeManager, plural: str, kind: str, name: str, ns: str | None = None) -> None:
    """Wait until the manager's cache holds the server's current version of one object."""
    def same() -> bool:
        obj = api.get(plural, name, ns)
        rv = obj["metadata"]["resourceVersion"] if obj else None
        cached = [o for o in m.reflectors[kind].store.values() if o["metadata"]["name"] == name]
        return (cached[0]["metadata"]["resourceVersion"] if cached else None) == rv
    await wait_for(same, what=f"{kind} {name} cached")


async def resync(ctl: NodeResourceController) -> None:
    """One resync period's pass over every node, finished."""
    ctl.resync()
    with anyio.fail_after(10):
        await ctl.settled()


async def test_fresh_metric_writes_batch_resources_stale_degrades_fresh_restores(api, client, plugins):
    clock = Clock()
    seed(api, "n1")
    api.create(colocation())
    async with manager(api, client, plugins, clock) as (m, ctl):
        await wait_for(lambda: batch_of(api, "n1")[0] is not None)
        assert batch_of(api, "n1") == (str(expected_cpu()), str(expected_mem()))
        # the node's own resources are untouched
        alloc, _ = status_of(api, "n1")
        assert alloc["cpu"] == "8" and alloc["memory"] == "32Gi"
        # exactly degradeTimeMinutes old is not yet stale (Go's now.After(updateTime + 15m))
        clock.t = NOW - 30 + 15 * 60
        await resync(ctl)
        assert batch_of(api, "n1")[0] == str(expected_cpu())
        clock.t += 1
        await resync(ctl)
        await wait_for(lambda: batch_of(api, "n1") == (None, None), what="batch resources reset")
        # Koordinator's Reset removes them from allocatable and capacity (not "0")
        alloc, cap = status_of(api, "n1")
        assert BATCH_CPU not in alloc and BATCH_CPU not in cap and BATCH_MEMORY not in cap
        api.replace("nodemetrics", node_metric("n1", clock.t - 10) | {"metadata": api.get("nodemetrics", "n1")["metadata"]})
        await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu()), what="batch resources back")


async def test_small_changes_wait_for_update_time_threshold(api, client, plugins):
    clock = Clock()
    seed(api, "n1")
    api.create(colocation())
    async with manager(api, client, plugins, clock) as (m, ctl):
        await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu()))
        first = expected_cpu()
        # +100m of pod usage: batch-cpu moves by 100 of 2300 (< resourceDiffThreshold 0.1): not written
        meta = api.get("nodemetrics", "n1")["metadata"]
        api.replace("nodemetrics", node_metric("n1", NOW - 20, pod_cpu="2100m") | {"metadata": meta})
        await caught_up(api, m, "nodemetrics", "NodeMetric", "n1")
        writes = ctl.writes
        clock.t = NOW + 300  # exactly updateTimeThresholdSeconds after the first write: still not
        await resync(ctl)
        assert batch_of(api, "n1")[0] == str(first) and ctl.writes == writes
        clock.t = NOW + 301
        await resync(ctl)
        await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu(pod=2100)))
        # a change beyond the threshold is written at once
        meta = api.get("nodemetrics", "n1")["metadata"]
        api.replace("nodemetrics", node_metric("n1", NOW + 290, pod_cpu="3") | {"metadata": meta})
        await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu(pod=3000)))


async def test_node_configs_first_match_wins(api, client, plugins):
    clock = Clock()
    api.create(node("a", cpu="8", memory="32Gi", labels={"pool": "a"}))
    api.create(node("b", cpu="8", memory="32Gi", labels={"pool": "b"}))
    api.create(node("c", cpu="8", memory="32Gi", labels={"pool": "c"}))
    for n in "abc":
        api.create(pod(f"web-{n}", cpu="1", memory="2Gi", node_name=n))
        api.create(node_metric(n, NOW - 30, pod_name=f"web-{n}"))
    api.create(colocation(nodeConfigs=[
        {"name": "first", "nodeSelector": {"matchLabels": {"pool": "a"}}, "cpuReclaimThresholdPercent": 80},
        {"name": "second", "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In",
                                                                  "values": ["a", "b"]}]},
         "cpuReclaimThresholdPercent": 50}]))
    async with manager(api, client, plugins, clock):
        await wait_for(lambda: all(batch_of(api, n)[0] is not None for n in "abc"))
        assert batch_of(api, "a")[0] == str(expected_cpu(reclaim=80))
        assert batch_of(api, "b")[0] == str(expected_cpu(reclaim=50))
        assert batch_of(api, "c")[0] == str(expected_cpu())


async def test_config_map_changes_apply_live_and_a_malformed_one_is_ignored(api, client, plugins):
    clock = Clock()
    seed(api, "n1")
    api.create(colocation())
    async with manager(api, client, plugins, clock) as (m, ctl):
        await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu()))
        set_colocation(api, cpuReclaimThresholdPercent=70)
        await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu(reclaim=70)), what="new config applied")
        # not JSON: logged, the previous configuration stays
        api.update("configmaps", SLO_CTRL_CONFIG_MAP, lambda o: o["data"].update({"colocation-config": "{oops"}), NS)
        await caught_up(api, m, "configmaps", "ConfigMap", SLO_CTRL_CONFIG_MAP, NS)
        await resync(ctl)
        assert ctl.config_errors == 1 and ctl.colocation == {"enable": True, "cpuReclaimThresholdPercent": 70}
        assert batch_of(api, "n1")[0] == str(expected_cpu(reclaim=70))
        # a bad field: the plugin keeps the previous strategy
        set_colocation(api, cpuReclaimThresholdPercent="lots")
        await caught_up(api, m, "configmaps", "ConfigMap", SLO_CTRL_CONFIG_MAP, NS)
        clock.t = NOW + 400  # past updateTimeThresholdSeconds (the metric still fresh): a rewrite, old strategy
        await resync(ctl)
        assert batch_of(api, "n1")[0] == str(expected_cpu(reclaim=70))
        # colocation switched off: the batch resources are reset
        api.update("configmaps", SLO_CTRL_CONFIG_MAP,
                   lambda o: o["data"].update({"colocation-config": json.dumps({"enable": False})}), NS)
        await wait_for(lambda: batch_of(api, "n1") == (None, None), what="reset on disable")
        # no ConfigMap at all is Koordinator's default configuration: colocation off
        set_colocation(api)
        await wait_for(lambda: batch_of(api, "n1")[0] is not None)
        api.delete("configmaps", SLO_CTRL_CONFIG_MAP, NS)
        await wait_for(lambda: batch_of(api, "n1") == (None, None), what="reset without a ConfigMap")


async def test_device_resources_come_from_the_device(api, client, plugins):
    clock = Clock()
    seed(api, "n1")
    api.create(colocation())
    gpu = {"gpu-core": "100", "gpu-memory-ratio": "100", "gpu-memory": "16Gi"}
    api.create({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "n1"},
                "spec": {"devices": [
                    {"type": "gpu", "minor": 0, "health": True, "resources": {f"koordinator.sh/{k}": v
                                                                             for k, v in gpu.items()}},
                    {"type": "gpu", "minor": 1, "health": True, "resources": {f"koordinator.sh/{k}": v
                                                                             for k, v in gpu.items()}},
                    {"type": "gpu", "minor": 2, "health": False, "resources": {f"koordinator.sh/{k}": v
                                                                              for k, v in gpu.items()}},
                    {"type": "rdma", "minor": 0, "health": True, "resources": {"koordinator.sh/rdma": "100"}}]}})
    async with manager(api, client, plugins, clock):
        await wait_for(lambda: "koordinator.sh/gpu" in status_of(api, "n1")[0])
        alloc, cap = status_of(api, "n1")
        want = {"koordinator.sh/gpu": "200", "koordinator.sh/gpu-core": "200",
                "koordinator.sh/gpu-memory-ratio": "200", "koordinator.sh/gpu-memory": "32Gi"}
        assert {k: alloc[k] for k in GPU_NAMES} == want and {k: cap[k] for k in GPU_NAMES} == want
        assert "koordinator.sh/rdma" not in alloc
        assert batch_of(api, "n1")[0] == str(expected_cpu())
        api.delete("devices", "n1")
        await wait_for(lambda: not any(k in status_of(api, "n1")[0] for k in GPU_NAMES), what="GPU reset")


async def test_only_the_leader_writes(api, plugins):
    clock = Clock()
    seed(api, "n1")
    api.create(colocation())
    kw = dict(namespace="kube-system", name="koordfw-manager", lease_duration=2.0, renew_deadline=1.0,
              retry_period=0.25)
    async with KubeClient(api.url, qps=0) as ca, KubeClient(api.url, qps=0) as cb:
        async with manager(api, ca, plugins, clock, leader_elector=LeaderElector(ca, identity="A", **kw)) as (a, a_ctl):
            await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu()))
            b_ctl = NodeResourceController(resync_period=3600)
            b = KubeManager(plugins, cb, controllers=[b_ctl], clock=clock,
                            leader_elector=LeaderElector(cb, identity="B", **kw))
            async with anyio.create_task_group() as tg:
                tg.start_soon(b.run)
                await b.wait_synced()
                meta = api.get("nodemetrics", "n1")["metadata"]
                api.replace("nodemetrics", node_metric("n1", NOW - 10, pod_cpu="3") | {"metadata": meta})
                await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu(pod=3000)))
                assert a_ctl.writes == 2 and b_ctl.reconciles == 0 and b_ctl.writes == 0 and not b.started.is_set()
                a.stop()
                await wait_for(lambda: b.started.is_set(), what="B leads")
                meta = api.get("nodemetrics", "n1")["metadata"]
                api.replace("nodemetrics", node_metric("n1", NOW - 5, pod_cpu="1") | {"metadata": meta})
                await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu(pod=1000)))
                assert b_ctl.writes >= 1
                b.stop()


async def test_fake_nodes_status_takes_every_patch_type_and_changes_only_status(api, client):
    from koordfw.engines.kube.client import ApiError

    api.create(node("n1", labels={"a": "1"}))
    path = "/api/v1/nodes/n1/status"
    ops = [{"op": "add", "path": "/status/allocatable/kubernetes.io~1batch-cpu", "value": "1000"},
           {"op": "replace", "path": "/metadata/labels/a", "value": "2"}]
    await client.request("PATCH", path, body=ops, content_type="application/json-patch+json")
    n = api.get("nodes", "n1")
    assert n["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "1000" and n["metadata"]["labels"] == {"a": "1"}
    await client.request("PATCH", path, body={"status": {"capacity": {"kubernetes.io/batch-cpu": "1000"}},
                                              "spec": {"unschedulable": True}},
                         content_type="application/strategic-merge-patch+json")
    n = api.get("nodes", "n1")
    assert n["status"]["capacity"]["kubernetes.io/batch-cpu"] == "1000" and "unschedulable" not in n["spec"]
    await client.request("PATCH", path, body={"status": {"capacity": {"kubernetes.io/batch-cpu": None}}},
                         content_type="application/merge-patch+json")
    assert "kubernetes.io/batch-cpu" not in api.get("nodes", "n1")["status"]["capacity"]
    # through the main resource a JSON patch changes everything but the status
    await client.request("PATCH", "/api/v1/nodes/n1", body=[
        {"op": "add", "path": "/metadata/labels/b", "value": "x"},
        {"op": "remove", "path": "/status/allocatable/kubernetes.io~1batch-cpu"}],
        content_type="application/json-patch+json")
    n = api.get("nodes", "n1")
    assert n["metadata"]["labels"] == {"a": "1", "b": "x"} and n["status"]["allocatable"]["kubernetes.io/batch-cpu"]
    # a test that fails, or a missing path, is the apiserver's 422; a body that is not a patch its 400
    for body, code in [([{"op": "test", "path": "/metadata/labels/a", "value": "9"}], 422),
                       ([{"op": "remove", "path": "/status/nope/x"}], 422),
                       ({"op": "add"}, 400)]:
        with pytest.raises(ApiError) as e:
            await client.request("PATCH", path, body=body, content_type="application/json-patch+json")
        assert e.value.status == code


async def test_a_deleted_node_metric_resets_at_once(api, client, plugins):
    """Koordinator forgets the node's last write when its NodeMetric is deleted: the reset is written at
    once, without waiting for updateTimeThresholdSeconds."""
    clock = Clock()
    seed(api, "n1")
    api.create(colocation())
    async with manager(api, client, plugins, clock) as (m, ctl):
        await wait_for(lambda: batch_of(api, "n1")[0] == str(expected_cpu()))
        api.delete("nodemetrics", "n1")
        await wait_for(lambda: batch_of(api, "n1") == (None, None), what="reset after the NodeMetric is gone")
