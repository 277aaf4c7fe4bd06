"""Ports of Koordinator's ``pkg/slo-controller/noderesource/plugins/cpunormalization/plugin_test.go`` tables
(``TestPluginCalculate``, ``Test_getCPUNormalizationRatioFromModel``, ``Test_getCPUNormalizationRatio``),
and the plugin in ``koordfw simulate`` with batch_resource and resource_amplification."""

from __future__ import annotations

import json

import pytest
from koordfw_cpu_normalization import CPUNormalization, parse_config
from koordfw_cpu_normalization.strategy import Strategy, cpu_ratio, ratio_from_model

from koordfw import NodeResourcesResult
from koordfw.embed import EmbeddedEngine
from koordfw.extension import ANNOTATION_CPU_BASIC_INFO, ANNOTATION_CPU_NORMALIZATION_RATIO
from koordfw.testing import ClusterBuilder

RATIO = ANNOTATION_CPU_NORMALIZATION_RATIO
XXX = {"baseRatio": 1.5, "turboEnabledRatio": 1.65, "hyperThreadEnabledRatio": 1.0, "hyperThreadTurboEnabledRatio": 1.1}
NRT_INFO = '{"cpuModel": "XXX", "hyperThreadEnabled": true, "turboEnabled": true}'


class _View:
    def __init__(self, objects: dict) -> None:
        self._o = objects

    def objects_of(self, kind: str) -> dict:
        return self._o.get(kind, {})


class _Handle:
    def __init__(self, nrts: dict) -> None:
        self.cluster = _View({"NodeResourceTopology": nrts})


def _nrt(name: str, info: str | None) -> dict:
    return {"metadata": {"name": name, "annotations": {} if info is None else {ANNOTATION_CPU_BASIC_INFO: info}}}


CALCULATE = [
    # (name, config, node labels, NRT (None: absent; str: its cpu-basic-info), want ratio or None for an error)
    ("failed to get node config", {}, {"node.koordinator.sh/cpu-normalization-enabled": "{]"}, NRT_INFO, None),
    ("node strategy is disabled", {"enable": False, "ratioModel": {}}, {}, NRT_INFO, "1.00"),
    ("failed to get NRT", {"enable": True, "ratioModel": {}}, {}, None, None),
    ("failed to get CPUBasicInfo", {"enable": True, "ratioModel": {}}, {}, "", None),
    ("failed to parse CPUBasicInfo", {"enable": True, "ratioModel": {}}, {}, "{]", None),
    ("failed to get ratio", {"enable": True, "ratioModel": {"XXX": {"baseRatio": 1.0}}}, {}, NRT_INFO, None),
    ("failed to validate ratio", {"enable": True, "ratioModel": {"XXX": {"hyperThreadTurboEnabledRatio": 10}}}, {},
     NRT_INFO, None),
    ("get ratio correctly", {"enable": True, "ratioModel": {"XXX": XXX}}, {}, NRT_INFO, "1.10"),
    ("get ratio correctly 1", {"enable": False, "ratioModel": {"XXX": dict.fromkeys(XXX, 1.0)}, "nodeConfigs": [
        {"nodeSelector": {"matchLabels": {"xxx": "yyy"}}, "enable": True, "ratioModel": {"XXX": XXX}}]},
     {"xxx": "yyy"}, NRT_INFO, "1.10"),
    ("get ratio when strategy disable but not enabled", {"enable": False, "ratioModel": {"XXX": XXX}},
     {"node.koordinator.sh/cpu-normalization-enabled": "true"}, NRT_INFO, "1.10"),
    ("strategy enabled but node disabled", {"enable": True, "ratioModel": {"XXX": XXX}},
     {"node.koordinator.sh/cpu-normalization-enabled": "false"}, NRT_INFO, "1.00"),
]


@pytest.mark.parametrize("name,cfg,labels,nrt,want", CALCULATE, ids=[c[0] for c in CALCULATE])
def test_plugin_calculate(name: str, cfg: dict, labels: dict, nrt: str | None, want: str | None) -> None:
    """TestPluginCalculate: the ratio annotation of one node, or an error (nothing written)."""
    nrts = {} if nrt is None else {"test-node": _nrt("test-node", nrt or None)}
    config = parse_config(json.dumps(cfg))
    if want is None:
        with pytest.raises(ValueError):
            CPUNormalization.calculate(config, labels, "test-node", _Handle(nrts))  # type: ignore[arg-type]
    else:
        assert CPUNormalization.calculate(config, labels, "test-node", _Handle(nrts)) == want  # type: ignore[arg-type]


FROM_MODEL = [
    ("nil model", {}, {"cpuModel": "XXX"}, None),
    ("no ratio for model", {"YYY": XXX}, {"cpuModel": "XXX"}, None),
    ("missing ratio for Turbo and HT on", {"XXX": {"baseRatio": 1.5}},
     {"cpuModel": "XXX", "hyperThreadEnabled": True, "turboEnabled": True}, None),
    ("got ratio for Turbo and HT on", {"XXX": XXX}, {"cpuModel": "XXX", "hyperThreadEnabled": True,
                                                    "turboEnabled": True}, 1.1),
    ("got ratio for HT on", {"XXX": XXX}, {"cpuModel": "XXX", "hyperThreadEnabled": True}, 1.0),
    ("got ratio for Turbo on", {"XXX": XXX}, {"cpuModel": "XXX", "turboEnabled": True}, 1.65),
    ("got ratio for basic setting", {"XXX": XXX}, {"cpuModel": "XXX"}, 1.5),
    ("missing ratio for basic setting", {"XXX": {"turboEnabledRatio": 1.65}}, {"cpuModel": "XXX"}, None),
]


@pytest.mark.parametrize("name,model,info,want", FROM_MODEL, ids=[c[0] for c in FROM_MODEL])
def test_ratio_from_model(name: str, model: dict, info: dict, want: float | None) -> None:
    """Test_getCPUNormalizationRatioFromModel."""
    s = Strategy(enable=True, ratio_model=model)
    if want is None:
        with pytest.raises(ValueError):
            ratio_from_model(info, s)
    else:
        assert ratio_from_model(info, s) == want


@pytest.mark.parametrize("model,default,want", [
    ({}, None, None),  # nil model and nil default ratio
    ({}, 1.2, 1.2),  # nil model and valid default ratio
    ({"XXX": XXX}, 1.2, 1.5),  # model takes precedence over the default ratio
    ({"XXX": {"turboEnabledRatio": 1.65}}, 1.2, 1.2),  # use the default ratio with invalid model
])
def test_cpu_ratio(model: dict, default: float | None, want: float | None) -> None:
    """Test_getCPUNormalizationRatio."""
    s = Strategy(enable=True, default_ratio=default, ratio_model=model)
    if want is None:
        with pytest.raises(ValueError):
            cpu_ratio({"cpuModel": "XXX"}, s)
    else:
        assert cpu_ratio({"cpuModel": "XXX"}, s) == want


def test_config_errors_name_the_model_and_field() -> None:
    with pytest.raises(ValueError, match=r'ratioModel\."Xeon 8269CY"\.baseRatio: expected a number, got "fast"'):
        parse_config(json.dumps({"ratioModel": {"Xeon 8269CY": {"baseRatio": "fast"}}}))
    with pytest.raises(ValueError, match=r'nodeConfigs\[0\]\.ratioModel\."M"\.turboEnabledRatio'):
        parse_config(json.dumps({"nodeConfigs": [{"ratioModel": {"M": {"turboEnabledRatio": True}}}]}))


def test_bad_config_keeps_the_previous_one() -> None:
    p = CPUNormalization()
    good = p.config({"cpu-normalization-config": json.dumps({"enable": True, "ratioModel": {"XXX": XXX}})}, {})
    assert good is not None and good.cluster.enable
    assert p.config({"cpu-normalization-config": '{"enable": "yes"}'}, {}) is good
    assert p.config(None, {}) is not None and not p.config(None, {}).cluster.enable  # no ConfigMap: default, off


def _cluster(amplification: dict | None = None) -> ClusterBuilder:
    cfg = {"enable": True, "ratioModel": {"Xeon Old": {"hyperThreadEnabledRatio": 1.0},
                                          "Xeon New": {"hyperThreadEnabledRatio": 1.3}}}
    data = {"cpu-normalization-config": json.dumps(cfg), "colocation-config": json.dumps({"enable": True})}
    if amplification is not None:
        data["resource-amplification-config"] = json.dumps(amplification)
    b = ClusterBuilder()
    for name, model in (("old-1", "Xeon Old"), ("new-1", "Xeon New")):
        b.node(name, cpu="32", memory="128Gi")
        b.obj({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
                  "metadata": {"name": name, "annotations": {
                      ANNOTATION_CPU_BASIC_INFO: json.dumps({"cpuModel": model, "hyperThreadEnabled": True})}}})
    b.obj({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "slo-controller-config",
                                                                    "namespace": "koordinator-system"}, "data": data})
    return b


def test_simulate_writes_the_ratio_and_shows_it() -> None:
    """A mixed-generation cluster: the new CPU model's nodes get 1.30, the old ones 1.00; simulate's node
    rows show the annotation."""
    import anyio

    from koordfw import build_registry

    async def main() -> dict:
        reg = build_registry(plugins={"cpu_normalization": CPUNormalization}, autoload=False)

        eng = EmbeddedEngine.from_manifests(reg, _cluster().build(), start_time=0.0)
        await eng.run()
        return {v.name: dict(v.node.annotations) for v in eng.view.nodes}

    anns = anyio.run(main)
    assert anns["new-1"][RATIO] == "1.30" and anns["old-1"][RATIO] == "1.00"


def test_result_is_annotations_only() -> None:
    p = CPUNormalization()
    res = p.node_resources(_Node("test-node"), {}, {"cpu-normalization-config": json.dumps(  # type: ignore[arg-type]
        {"enable": True, "ratioModel": {"XXX": XXX}})}, _Handle({"test-node": _nrt("test-node", NRT_INFO)}))
    assert res == NodeResourcesResult(annotations={RATIO: "1.10"})


class _Node:
    def __init__(self, name: str, labels: dict | None = None) -> None:
        import koordfw

        self.name = name
        self.node = koordfw.Node(name=name, labels=labels or {})
