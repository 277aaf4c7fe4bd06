"""gpu_share inside the stock kube-scheduler: the extender's bind verb writes Koordinator's
``scheduling.koordinator.sh/device-allocated`` before the Binding (fake API server)."""

import json

from koordfw.engines.embedded import build_registry
from koordfw.testing.fake_apiserver import FakeApiServer
from koordfw.testing.kube import extender_with_cache

ANN = "scheduling.koordinator.sh/device-allocated"


def gpu_node(name: str) -> dict:
    alloc = {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "2", "koordinator.sh/gpu": "200",
             "koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory-ratio": "200",
             "koordinator.sh/gpu-memory": "32Gi"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"capacity": alloc, "allocatable": alloc}}


def gpu_pod(name: str, percent: int) -> dict:
    req = {"cpu": "1", "memory": "1Gi", "koordinator.sh/gpu-core": str(percent),
           "koordinator.sh/gpu-memory-ratio": str(percent)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "default-scheduler",
                     "containers": [{"name": "app", "image": "x", "resources": {"requests": req, "limits": req}}]}}


async def test_extender_bind_writes_device_allocated():
    async with FakeApiServer(bookmark_interval=0.2) as api:
        api.create(gpu_node("g0"))
        async with extender_with_cache(api.url, build_registry(None, only=["gpu_share"])) as (_, http):
            async def bind(name: str, percent: int) -> str:
                uid = api.create(gpu_pod(name, percent))["metadata"]["uid"]
                body = {"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": "g0"}
                async with http.post("/bind", data=json.dumps(body)) as r:
                    assert r.status == 200
                    return (await r.json())["Error"]

            assert await bind("a", 50) == ""
            assert await bind("b", 60) == ""  # spread: the emptier GPU, minor 1
            got = {n: json.loads(api.get("pods", n, "default")["metadata"]["annotations"][ANN]) for n in ("a", "b")}
            assert got["a"] == {"gpu": [{"minor": 0, "resources": {
                "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "8Gi",
                "koordinator.sh/gpu-memory-ratio": "50"}}]}
            assert [d["minor"] for d in got["b"]["gpu"]] == [1]
            assert api.get("pods", "a", "default")["spec"]["nodeName"] == "g0"
            # 50 % and 40 % are left: nothing is given twice
            err = await bind("c", 60)
            assert err == "Insufficient gpu devices (plugin gpu_share)"
            assert "nodeName" not in api.get("pods", "c", "default")["spec"]
