"""gpu_share's node_resources: Koordinator's gpudeviceresource (device resources of a node from its Device)."""

from __future__ import annotations

import pytest
from koordfw_gpu_share.node_resources import device_resources, needs_sync, node_strategy

G = 2**30
GPU = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100", "koordinator.sh/gpu-memory": "16Gi"}
RESET = {r: None for r in ("koordinator.sh/gpu", "koordinator.sh/gpu-core", "huawei.com/npu-core", "huawei.com/npu-cpu",
                           "huawei.com/npu-dvpp", "koordinator.sh/gpu-memory", "koordinator.sh/gpu-memory-ratio",
                           "koordinator.sh/gpu.shared")}


def device(*devs: dict, vendor: str | None = None) -> dict:
    labels = {} if vendor is None else {"node.koordinator.sh/gpu-vendor": vendor}
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
            "metadata": {"name": "n1", "labels": labels}, "spec": {"devices": list(devs)}}


def gpu(minor: int, health: object = True, **extra: str) -> dict:
    d: dict = {"type": "gpu", "minor": minor, "resources": {**GPU, **extra}}
    if health is not None:
        d["health"] = health
    return d


@pytest.mark.parametrize("name, dev, want", [
    ("no device", None, RESET),
    ("two healthy", device(gpu(0), gpu(1)), {"koordinator.sh/gpu": 200, "koordinator.sh/gpu-core": 200,
                                              "koordinator.sh/gpu-memory": 32 * G,
                                              "koordinator.sh/gpu-memory-ratio": 200}),
    ("unhealthy and health absent (Go's false) are not counted", device(gpu(0), gpu(1, False), gpu(2, None)),
     {"koordinator.sh/gpu": 100, "koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory": 16 * G,
      "koordinator.sh/gpu-memory-ratio": 100}),
    ("no healthy GPU resets", device(gpu(0, False), {"type": "rdma", "health": True,
                                                      "resources": {"koordinator.sh/rdma": "100"}}), RESET),
    ("nvidia vendor", device(gpu(0), vendor="nvidia"), {"koordinator.sh/gpu": 100, "koordinator.sh/gpu-core": 100,
                                                        "koordinator.sh/gpu-memory": 16 * G,
                                                        "koordinator.sh/gpu-memory-ratio": 100}),
    ("other vendors get no koordinator.sh/gpu", device(gpu(0), vendor="huawei"),
     {"koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory": 16 * G, "koordinator.sh/gpu-memory-ratio": 100}),
    ("gpu.shared is not published (feature gate off)", device(gpu(0, **{"koordinator.sh/gpu.shared": "1"})),
     {"koordinator.sh/gpu": 100, "koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory": 16 * G,
      "koordinator.sh/gpu-memory-ratio": 100}),
    ("a bad quantity resets", device(gpu(0, **{"koordinator.sh/gpu-core": "lots"})), RESET),
])
def test_device_resources(name, dev, want):
    assert device_resources(dev) == want


def test_node_strategy_and_sync_rule():
    cfg = {"enable": True, "resourceDiffThreshold": 0.5,
           "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "a"}}, "enable": False},
                           {"nodeSelector": {"matchLabels": {"pool": "b"}}, "updateTimeThresholdSeconds": 60}]}
    assert node_strategy(cfg, {"pool": "a"}, {})["enable"] is False
    b = node_strategy(cfg, {"pool": "b"}, {})
    assert b == {"enable": True, "resourceDiffThreshold": 0.5, "updateTimeThresholdSeconds": 60}
    assert node_strategy({"enable": False, "nodeConfigs": [{"nodeSelector": {}, "enable": True}]}, {}, {})["enable"] \
        is False
    assert node_strategy({}, {}, {})["enable"] is False
    old = {"koordinator.sh/gpu-core": 200}
    assert not needs_sync(old, {"koordinator.sh/gpu-core": 100}, last_update=0.0, now=60.0, strategy=b)
    assert needs_sync(old, {"koordinator.sh/gpu-core": 100}, last_update=0.0, now=61.0, strategy=b)
    assert needs_sync(old, {"koordinator.sh/gpu-core": 99}, last_update=0.0, now=1.0, strategy=b)
    assert needs_sync(old, {"koordinator.sh/gpu-core": None}, last_update=0.0, now=1.0, strategy=b)
    assert not needs_sync({}, {"koordinator.sh/gpu": None}, last_update=0.0, now=1.0, strategy=b)
