"""Ports of Koordinator's ``pkg/slo-controller/noderesource/plugins/resourceamplification/plugin_test.go``
(``TestPluginCalculate``) and ``pkg/webhook/node/plugins/resourceamplification/resource_amplification_test.go``
(``TestNodeResourceAmplificationPlugin_handleNormalization``), batch-cpu scaled by the normalization ratio
(batchresource's ``plugin_test.go``: "update NUMA-level batch resources with cpu-normalization ratio"), and
the two plugins together in ``koordfw simulate`` and on ``koordfw manager`` against the fake API server."""

from __future__ import annotations

import json

import anyio
import pytest
from koordfw_batch_resource.plugin import scale_batch_cpu
from koordfw_cpu_normalization import CPUNormalization
from koordfw_resource_amplification import ResourceAmplification, amplified_allocatable, calculate_ratios, format_ratios
from koordfw_resource_amplification.amplification import Strategy

from koordfw import build_registry
from koordfw.embed import EmbeddedEngine
from koordfw.extension import (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
)
from koordfw.testing import ClusterBuilder

CALCULATE = [
    # (name, enable, configured ratios, cpu normalization annotation, want annotation ("" none, None error))
    ("get cpu normalization ratio failed", None, {}, "invalid", None),
    ("calculate ratio correctly with cpu normalization", None, {}, "1.22", '{"cpu":1.22}'),
    ("calculate ratio correctly without cpu normalization", None, {}, None, ""),
    ("calculate ratio with amplification ratio", True, {"cpu": 1.1, "memory": 2.1}, None, '{"cpu":1.10,"memory":2.10}'),
    ("calculate ratio with both cpu normalization ratio and amplification ratio", True, {"cpu": 1.5, "memory": 2.5},
     "1.20", '{"cpu":1.80,"memory":2.50}'),
    ("calculate ratio with cpu normalization ratio and amplification memory ratio", True, {"memory": 3.5}, "1.50",
     '{"cpu":1.50,"memory":3.50}'),
    ("calculate ratio with cpu normalization ratio and other resource type ratio", True,
     {"memory": 3.5, "storage": 1.8}, "1.50", '{"cpu":1.50,"memory":3.50,"storage":1.80}'),
    ("calculate ratio with final cpu normalization ratio > 1 correctly", True,
     {"cpu": 0.8, "memory": 3.5, "storage": 1.8}, "1.50", '{"cpu":1.20,"memory":3.50,"storage":1.80}'),
    ("calculate ratio with final cpu normalization ratio < 1 invalid", True,
     {"cpu": 0.5, "memory": 3.5, "storage": 1.8}, "1.50", None),
    ("calculate ratio with one resource amplification ratio invalid", True,
     {"cpu": 1.5, "memory": 0.5}, "1.50", None),
]


@pytest.mark.parametrize("name,enable,ratios,norm,want", CALCULATE, ids=[c[0] for c in CALCULATE])
def test_plugin_calculate(name: str, enable: bool | None, ratios: dict, norm: str | None, want: str | None) -> None:
    """TestPluginCalculate: cpu = configured × normalization, kept above 1; every ratio at least 1."""
    s = Strategy(enable=enable, ratios=ratios)
    if want is None:
        with pytest.raises(ValueError):
            calculate_ratios(s, norm)
        return
    got = calculate_ratios(s, norm)
    assert (format_ratios(got) if got else "") == want


GI = 1 << 30
WEBHOOK = [
    # (name, allocatable, raw annotation, old ratios, ratios, want raw, want allocatable)
    ("normal", {"cpu": 1000, "memory": 1000 * GI}, None, {}, {"cpu": 2.0, "memory": 3.0},
     {"cpu": 1000, "memory": 1000 * GI}, {"cpu": 2000, "memory": 3000 * GI}),
    ("unsupported ratio will be ignored", {"cpu": 1000, "memory": 1000}, None, {}, {"pods": 2.0},
     {"cpu": 1000, "memory": 1000}, {"cpu": 1000, "memory": 1000}),
    ("get original resource from annotation and amplify", {"cpu": 2000, "memory": 3000}, {"cpu": 1000, "memory": 1000},
     {"cpu": 2.0, "memory": 3.0}, {"cpu": 2.0, "memory": 3.0}, {"cpu": 1000, "memory": 1000}, {"cpu": 2000, "memory": 3000}),
    # never twice: the amplified allocatable is not taken as raw when the ratio changes
    ("ratio changes", {"cpu": 2000, "memory": 1000}, {"cpu": 1000, "memory": 1000}, {"cpu": 2.0},
     {"cpu": 1.5}, {"cpu": 1000, "memory": 1000}, {"cpu": 1500, "memory": 1000}),
    # the kubelet reports a new allocatable (isSupportedResourceChanged): it becomes the raw
    ("kubelet changed allocatable", {"cpu": 1800, "memory": 1000}, {"cpu": 1000, "memory": 1000}, {"cpu": 2.0},
     {"cpu": 2.0}, {"cpu": 1800, "memory": 1000}, {"cpu": 3600, "memory": 1000}),
]


@pytest.mark.parametrize("name,alloc,raw,old,ratios,want_raw,want_alloc", WEBHOOK, ids=[c[0] for c in WEBHOOK])
def test_handle_update(name: str, alloc: dict, raw: dict | None, old: dict, ratios: dict, want_raw: dict,
                       want_alloc: dict) -> None:
    """TestNodeResourceAmplificationPlugin_handleNormalization (the webhook's handleUpdate, as a reconciler)."""
    assert amplified_allocatable(alloc, raw, old, ratios) == (want_raw, want_alloc)


def test_batch_cpu_scaled_by_normalization_ratio() -> None:
    """batchresource plugin_test "update NUMA-level batch resources with cpu-normalization ratio": 25000 × 1.20."""
    assert scale_batch_cpu({"kubernetes.io/batch-cpu": 25000}, "1.20") == {"kubernetes.io/batch-cpu": 30000}
    assert scale_batch_cpu({"kubernetes.io/batch-cpu": 25000}, "0.80") == {"kubernetes.io/batch-cpu": 25000}
    assert scale_batch_cpu({"kubernetes.io/batch-cpu": 25000}, "bad") == {"kubernetes.io/batch-cpu": 25000}
    assert scale_batch_cpu({"kubernetes.io/batch-cpu": None}, "1.5") == {"kubernetes.io/batch-cpu": None}


def _cluster(amplification: dict) -> ClusterBuilder:
    cfg = {"enable": True, "ratioModel": {"Xeon Old": {"hyperThreadEnabledRatio": 1.0},
                                          "Xeon New": {"hyperThreadEnabledRatio": 1.3}}}
    data = {"cpu-normalization-config": json.dumps(cfg), "colocation-config": json.dumps({"enable": True}),
            "resource-amplification-config": json.dumps(amplification)}
    b = ClusterBuilder()
    for name, model in (("old-1", "Xeon Old"), ("new-1", "Xeon New")):
        b.node(name, cpu="32", memory="128Gi")
        b.obj({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
               "metadata": {"name": name, "annotations": {
                   ANNOTATION_CPU_BASIC_INFO: json.dumps({"cpuModel": model, "hyperThreadEnabled": True})}}})
    b.obj({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "slo-controller-config",
                                                                 "namespace": "koordinator-system"}, "data": data})
    return b


PLUGINS = {"cpu_normalization": CPUNormalization, "resource_amplification": ResourceAmplification}


def test_simulate_amplifies_allocatable_once() -> None:
    """Normalization 1.30 on the new model × a configured cpu ratio 1.5 = 1.95: the new node's 32 cores are
    62.4 amplified cores, its raw 32 kept; running the step again does not amplify twice."""
    from koordfw.embed import update_node_resources

    async def main() -> None:
        reg = build_registry(plugins=PLUGINS, autoload=False)
        eng = EmbeddedEngine.from_manifests(reg, _cluster({"enable": True, "resourceAmplificationRatio": {"cpu": 1.5}})
                                            .build(), start_time=0.0)
        await eng.run()
        new, old = eng.view.node("new-1"), eng.view.node("old-1")
        assert new is not None and old is not None
        assert new.annotations[ANNOTATION_CPU_NORMALIZATION_RATIO] == "1.30"
        assert new.annotations[ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO] == '{"cpu":1.95}'
        assert json.loads(new.annotations[ANNOTATION_NODE_RAW_ALLOCATABLE]) == {"cpu": "32", "memory": "128Gi"}
        assert new.allocatable["cpu"] == 62400 and new.capacity["cpu"] == 32000
        assert old.allocatable["cpu"] == 48000 and old.annotations[ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO] == \
            '{"cpu":1.50}'
        await update_node_resources(eng, {})
        await eng.refresh_node_resources()
        assert eng.view.node("new-1").allocatable["cpu"] == 62400  # type: ignore[union-attr]

    anyio.run(main)


def test_simulate_output_shows_node_annotations() -> None:
    import koordfw

    r = koordfw.simulate(_cluster({"enable": False}).build(), plugins=PLUGINS, autoload=False)
    rows = {n["name"]: n for n in r.to_dict()["nodes"]}
    assert rows["new-1"]["annotations"] == {ANNOTATION_CPU_NORMALIZATION_RATIO: "1.30",
                                            ANNOTATION_NODE_RAW_ALLOCATABLE: json.dumps(
                                                {"cpu": "32", "memory": "128Gi"}, separators=(",", ":")),
                                            ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: '{"cpu":1.30}'}
    assert rows["old-1"]["annotations"] == {ANNOTATION_CPU_NORMALIZATION_RATIO: "1.00"}
    assert rows["new-1"]["allocatable"]["cpu"] == "41600m"
