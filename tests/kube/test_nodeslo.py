"""The NodeSLO rendering (slo-controller-config data + node labels -> NodeSLO spec), a table of cases whose
facts come from Koordinator's pkg/slo-controller/nodeslo tests (nodeslo_controller_test.go,
resource_strategy_test.go, nodeslo_cm_event_handler_test.go) and pkg/util/sloconfig's defaults, plus the
Go encoding/json behaviour the merge depends on."""

from __future__ import annotations

import json

import pytest
from deploy_testkit import CRDS, DEPLOY, docs, pruned

from koordfw.engines.kube.nodeslo import (
    DEFAULT_SLO_CONFIG,
    canonical_quantity,
    parse_slo_config,
    render_nodeslo_spec,
    render_spec,
    selector_matches_strict,
)

THRESHOLD = "resource-threshold-config"
QOS = "resource-qos-config"
BURST = "cpu-burst-config"
SYSTEM = "system-config"
HOST = "host-application-config"
BANDWIDTH = "node.koordinator.sh/network-bandwidth"

#: sloconfig.DefaultResourceThresholdStrategy
DEFAULT_THRESHOLD = {"enable": False, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
                     "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit"}
#: sloconfig.DefaultCPUBurstStrategy
DEFAULT_BURST = {"policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                 "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50}
DEFAULT_SYSTEM = {"totalNetworkBandwidth": "0"}
EXTENSIONS = {"Object": {}}


def j(obj) -> str:
    return json.dumps(obj)


def sel(**labels) -> dict:
    return {"matchLabels": labels}


def spec(threshold=None, qos=None, burst=None, system=None, host=None) -> dict:
    out = {"resourceUsedThresholdWithBE": {**DEFAULT_THRESHOLD, **(threshold or {})},
           "resourceQOSStrategy": qos if qos is not None else {},
           "cpuBurstStrategy": {**DEFAULT_BURST, **(burst or {})},
           "systemStrategy": {**DEFAULT_SYSTEM, **(system or {})}, "extensions": EXTENSIONS}
    if host:
        out["hostApplications"] = host
    return out


THRESHOLD_NODES = j({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60},
                     "nodeStrategies": [
                         {"nodeSelector": sel(xxx="yyy"), "cpuSuppressThresholdPercent": 40},
                         {"nodeSelector": sel(zzz="zzz"), "cpuSuppressThresholdPercent": 50}]})
QOS_NODES = j({"clusterStrategy": {"beClass": {"cpuQOS": {"groupIdentity": 0}}},
               "nodeStrategies": [
                   {"nodeSelector": sel(xxx="yyy"), "beClass": {"cpuQOS": {"groupIdentity": 1}}},
                   {"nodeSelector": sel(zzz="zzz"), "beClass": {"cpuQOS": {"groupIdentity": 2}}}]})
BURST_NODES = j({"clusterStrategy": {"cfsQuotaBurstPeriodSeconds": 120},
                 "nodeStrategies": [{"nodeSelector": sel(xxx="yyy"), "cpuBurstPercent": 100},
                                    {"nodeSelector": sel(zzz="zzz"), "cpuBurstPercent": 200}]})
SYSTEM_NODES = j({"clusterStrategy": {"watermarkScaleFactor": 151},
                  "nodeStrategies": [
                      {"nodeSelector": sel(xxx="yyy"), "minFreeKbytesFactor": 130, "memcgReapBackGround": 1},
                      {"nodeSelector": sel(zzz="zzz"), "minFreeKbytesFactor": 140, "memcgReapBackGround": 0}]})
SYSTEM_BANDWIDTH = j({"clusterStrategy": {"minFreeKbytesFactor": 150, "totalNetworkBandwidth": "100M"},
                      "nodeStrategies": [
                          {"nodeSelector": sel(xxx="yyy"), "minFreeKbytesFactor": 120, "totalNetworkBandwidth": "10M"},
                          {"nodeSelector": sel(zzz="zzz"), "minFreeKbytesFactor": 130,
                           "totalNetworkBandwidth": "1000M"}]})
HOST_NODES = j({"applications": [{"name": "test-app-default"}],
                "nodeConfigs": [
                    {"nodeSelector": sel(**{"test-node-key-A": "test-node-value-A"}),
                     "applications": [{"name": "test-app-ls", "qos": "LS"}]},
                    {"nodeSelector": sel(**{"test-node-key-B": "test-node-value-B"}),
                     "applications": [{"name": "test-app-lsr", "qos": "LSR"}]}]})

CASES = [
    # (id, ConfigMap data, node labels, node annotations, expected spec)
    ("no ConfigMap: Koordinator's defaults (the QoS strategy is empty)", None, {}, {}, spec()),
    ("an empty ConfigMap: the defaults", {}, {}, {}, spec()),
    ("a key that is not JSON keeps its default",
     {THRESHOLD: '{"clusterStrategy":{"invalidField","cpuSuppressThresholdPercent":60}}',
      QOS: '{"clusterStrategy":{"invalidField"}}'}, {}, {}, spec()),
    ("the cluster threshold strategy over the default",
     {THRESHOLD: j({"clusterStrategy": {"enable": False, "cpuSuppressThresholdPercent": 60}})}, {}, {},
     spec(threshold={"cpuSuppressThresholdPercent": 60})),
    ("the cluster QoS strategy as given (its default is empty)",
     {THRESHOLD: j({"clusterStrategy": {"enable": False, "cpuSuppressThresholdPercent": 60}}),
      QOS: j({"clusterStrategy": {"beClass": {"cpuQOS": {"groupIdentity": 0}}}})}, {}, {},
     spec(threshold={"cpuSuppressThresholdPercent": 60}, qos={"beClass": {"cpuQOS": {"groupIdentity": 0}}})),
    ("every key (the reconcile test's ConfigMap)",
     {THRESHOLD: j({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60}}),
      QOS: j({"clusterStrategy": {"beClass": {"cpuQOS": {"groupIdentity": 0}}}}),
      BURST: j({"clusterStrategy": {"cfsQuotaBurstPeriodSeconds": 60}}),
      SYSTEM: j({"clusterStrategy": {"minFreeKbytesFactor": 150, "watermarkScaleFactor": 150,
                                     "schedFeatures": {"ID_ABSOLUTE_EXPEL": True, "ID_EXPELLER_SHARE_CORE": False}}}),
      HOST: j({"applications": [{"name": "test-app"}]})}, {}, {},
     spec(threshold={"enable": True, "cpuSuppressThresholdPercent": 60},
          qos={"beClass": {"cpuQOS": {"groupIdentity": 0}}}, burst={"cfsQuotaBurstPeriodSeconds": 60},
          system={"minFreeKbytesFactor": 150, "watermarkScaleFactor": 150,
                  "schedFeatures": {"ID_ABSOLUTE_EXPEL": True, "ID_EXPELLER_SHARE_CORE": False}},
          host=[{"name": "test-app"}])),
    ("threshold: a node without matching labels gets the cluster strategy", {THRESHOLD: THRESHOLD_NODES},
     {"other": "x"}, {}, spec(threshold={"enable": True, "cpuSuppressThresholdPercent": 60})),
    ("threshold: a node strategy merged over the merged cluster strategy", {THRESHOLD: THRESHOLD_NODES},
     {"xxx": "yyy"}, {}, spec(threshold={"enable": True, "cpuSuppressThresholdPercent": 40})),
    ("threshold: the second node strategy", {THRESHOLD: THRESHOLD_NODES}, {"zzz": "zzz"}, {},
     spec(threshold={"enable": True, "cpuSuppressThresholdPercent": 50})),
    ("QoS: the matching node strategy", {QOS: QOS_NODES}, {"zzz": "zzz"}, {},
     spec(qos={"beClass": {"cpuQOS": {"groupIdentity": 2}}})),
    ("QoS: the first matching node strategy wins", {QOS: QOS_NODES}, {"xxx": "yyy", "zzz": "zzz"}, {},
     spec(qos={"beClass": {"cpuQOS": {"groupIdentity": 1}}})),
    ("CPU burst: cluster strategy over the default", {BURST: BURST_NODES}, {}, {},
     spec(burst={"cfsQuotaBurstPeriodSeconds": 120})),
    ("CPU burst: a node strategy over the merged cluster strategy", {BURST: BURST_NODES}, {"xxx": "yyy"}, {},
     spec(burst={"cfsQuotaBurstPeriodSeconds": 120, "cpuBurstPercent": 100})),
    ("system: a node strategy over the cluster one", {SYSTEM: SYSTEM_NODES}, {"xxx": "yyy"}, {},
     spec(system={"watermarkScaleFactor": 151, "minFreeKbytesFactor": 130, "memcgReapBackGround": 1})),
    ("system: a set 0 is kept (pointer fields)", {SYSTEM: SYSTEM_NODES}, {"zzz": "zzz"}, {},
     spec(system={"watermarkScaleFactor": 151, "minFreeKbytesFactor": 140, "memcgReapBackGround": 0})),
    ("system: a node strategy's bandwidth, in canonical form (1000M is 1G)", {SYSTEM: SYSTEM_BANDWIDTH},
     {"zzz": "zzz"}, {}, spec(system={"minFreeKbytesFactor": 130, "totalNetworkBandwidth": "1G"})),
    ("system: the node's bandwidth annotation overrides the cluster strategy", {SYSTEM: SYSTEM_BANDWIDTH},
     {}, {BANDWIDTH: "99M"}, spec(system={"minFreeKbytesFactor": 150, "totalNetworkBandwidth": "99M"})),
    ("system: the node's bandwidth annotation overrides a node strategy", {SYSTEM: SYSTEM_BANDWIDTH},
     {"zzz": "zzz"}, {BANDWIDTH: "99M"}, spec(system={"minFreeKbytesFactor": 130, "totalNetworkBandwidth": "99M"})),
    ("system: a node strategy without a bandwidth resets it to 0 (a non-pointer Quantity is always encoded)",
     {SYSTEM: j({"clusterStrategy": {"totalNetworkBandwidth": "10G"},
                 "nodeStrategies": [{"nodeSelector": sel(a="b"), "minFreeKbytesFactor": 5}]})}, {"a": "b"}, {},
     spec(system={"minFreeKbytesFactor": 5, "totalNetworkBandwidth": "0"})),
    ("system: a node strategy with only a selector is the cluster strategy (no embedded strategy allocated)",
     {SYSTEM: j({"clusterStrategy": {"totalNetworkBandwidth": "10G"}, "nodeStrategies": [{"nodeSelector": sel(a="b")}]})},
     {"a": "b"}, {}, spec(system={"totalNetworkBandwidth": "10G"})),
    ("host applications: the cluster list", {HOST: HOST_NODES}, {}, {}, spec(host=[{"name": "test-app-default"}])),
    ("host applications: the first matching node config replaces the list", {HOST: HOST_NODES},
     {"test-node-key-A": "test-node-value-A", "test-node-key-B": "test-node-value-B"}, {},
     spec(host=[{"name": "test-app-ls", "qos": "LS"}])),
    ("host applications: the cgroup path and an empty strategy are written",
     {HOST: j({"applications": [{"name": "nginx", "priority": "koord-prod", "qos": "LS",
                                 "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/",
                                                "relativePath": "nginx/"}, "strategy": {}}]})}, {}, {},
     spec(host=[{"name": "nginx", "priority": "koord-prod", "qos": "LS",
                 "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"},
                 "strategy": {}}])),
    ("QoS: nested objects merge field by field",
     {QOS: j({"clusterStrategy": {"beClass": {"cpuQOS": {"enable": False, "groupIdentity": -1},
                                              "memoryQOS": {"enable": False, "wmarkRatio": 95}}},
              "nodeStrategies": [{"nodeSelector": sel(pool="be"), "beClass": {"cpuQOS": {"enable": True}}}]})},
     {"pool": "be"}, {},
     spec(qos={"beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1},
                           "memoryQOS": {"enable": False, "wmarkRatio": 95}}})),
    ("QoS: lists merge element by element (encoding/json decodes into the elements there)",
     {QOS: j({"clusterStrategy": {"cgroupRoot": {"blkioQOS": {"blocks": [
         {"name": "vda", "type": "device", "ioCfg": {"readIOPS": 100}}]}}},
         "nodeStrategies": [{"nodeSelector": sel(a="b"), "cgroupRoot": {"blkioQOS": {"blocks": [
             {"ioCfg": {"writeIOPS": 7}}, {"name": "vdb"}]}}}]})},
     {"a": "b"}, {},
     spec(qos={"cgroupRoot": {"blkioQOS": {"blocks": [
         {"name": "vda", "type": "device", "ioCfg": {"readIOPS": 100, "writeIOPS": 7}}, {"name": "vdb", "ioCfg": {}}]}}})),
    ("keys match field names case-insensitively, unknown keys are ignored",
     {THRESHOLD: j({"ClusterStrategy": {"CPUSuppressThresholdPercent": 55, "unknown": [1]}})}, {}, {},
     spec(threshold={"cpuSuppressThresholdPercent": 55})),
    ("a key of JSON null is the default", {THRESHOLD: "null", SYSTEM: "null"}, {}, {}, spec()),
    ("maps merge key by key",
     {SYSTEM: j({"clusterStrategy": {"schedFeatures": {"A": True, "B": True}},
                 "nodeStrategies": [{"nodeSelector": {}, "schedFeatures": {"B": False}}]})}, {"any": "node"}, {},
     spec(system={"schedFeatures": {"A": True, "B": False}})),
    ("an empty nodeSelector matches every node, a missing one none",
     {BURST: j({"nodeStrategies": [{"cpuBurstPercent": 1}, {"nodeSelector": {}, "cpuBurstPercent": 2}]})}, {}, {},
     spec(burst={"cpuBurstPercent": 2})),
    ("a nodeSelector Kubernetes refuses is skipped",
     {BURST: j({"nodeStrategies": [
         {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]},
          "cpuBurstPercent": 1},
         {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]},
          "cpuBurstPercent": 2}]})}, {"a": "b"}, {}, spec(burst={"cpuBurstPercent": 2})),
    ("network QoS takes an int or a string",
     {QOS: j({"clusterStrategy": {"lsClass": {"networkQOS": {"enable": True, "ingressRequest": "50M",
                                                             "ingressLimit": 100}}}})}, {}, {},
     spec(qos={"lsClass": {"networkQOS": {"enable": True, "ingressRequest": "50M", "ingressLimit": 100}}})),
]


@pytest.mark.parametrize("data,labels,annotations,want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_render(data, labels, annotations, want):
    assert render_nodeslo_spec(data, labels, annotations) == want


def test_a_malformed_key_keeps_its_previous_value_and_names_the_field():
    good = {THRESHOLD: j({"clusterStrategy": {"cpuSuppressThresholdPercent": 30}}),
            HOST: j({"applications": [{"name": "origin-host-app", "qos": "LS"}]})}
    previous, problems = parse_slo_config(good)
    assert problems == []
    bad = {THRESHOLD: j({"clusterStrategy": {"cpuSuppressThresholdPercent": "60"}}), HOST: "bad-string",
           BURST: j({"clusterStrategy": {"cpuBurstPercent": 1.5}})}
    config, problems = parse_slo_config(bad, previous)
    assert len(problems) == 3
    assert problems[0].startswith(f"{THRESHOLD}: clusterStrategy.cpuSuppressThresholdPercent: expected an integer")
    assert problems[1].startswith(f"{BURST}: clusterStrategy.cpuBurstPercent: expected an integer")
    assert problems[2].startswith(f"{HOST}: not valid JSON")
    got = render_spec(config, {})
    assert got["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 30  # previous
    assert got["hostApplications"] == [{"name": "origin-host-app", "qos": "LS"}]  # previous
    assert got["cpuBurstStrategy"] == DEFAULT_BURST  # previous was the default
    # a key that disappears is its default again
    config, problems = parse_slo_config({}, config)
    assert problems == [] and render_spec(config, {}) == spec()
    assert config == DEFAULT_SLO_CONFIG


@pytest.mark.parametrize("text,field", [
    ('{"clusterStrategy": []}', "clusterStrategy: expected an object"),
    ('{"clusterStrategy": {"enable": "true"}}', "clusterStrategy.enable: expected a boolean"),
    ('{"clusterStrategy": {"cpuSuppressPolicy": 1}}', "clusterStrategy.cpuSuppressPolicy: expected a string"),
    ('{"clusterStrategy": {"cpuSuppressThresholdPercent": 1e2}}', "clusterStrategy.cpuSuppressThresholdPercent"),
    ('{"clusterStrategy": {"evictEnabledPriorityThreshold": 2147483648}}', "overflows int32"),
    ('{"nodeStrategies": [{"nodeSelector": {"matchLabels": {"a": 1}}}]}', "nodeStrategies[0].nodeSelector.matchLabels.a"),
    ('{"nodeStrategies": {}}', "nodeStrategies: expected an array"),
    ('{"clusterStrategy": {"enable": NaN}}', "not valid JSON"),
    ('{"clusterStrategy": ' + "[" * 100_000, "not valid JSON"),
    ('{"nodeStrategies": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON"),
    ("", "not valid JSON"),
])
def test_decode_errors_name_the_field(text, field):
    _, problems = parse_slo_config({THRESHOLD: text})
    assert len(problems) == 1 and problems[0].startswith(f"{THRESHOLD}: ") and field in problems[0], problems


def test_bad_quantities_and_selectors():
    _, problems = parse_slo_config({SYSTEM: j({"clusterStrategy": {"totalNetworkBandwidth": "ten"}})})
    assert len(problems) == 1 and "clusterStrategy.totalNetworkBandwidth" in problems[0]
    # a quantity may be a JSON number (Quantity.UnmarshalJSON parses the literal)
    config, problems = parse_slo_config({SYSTEM: '{"clusterStrategy": {"totalNetworkBandwidth": 1e3}}'})
    assert problems == [] and render_spec(config, {})["systemStrategy"]["totalNetworkBandwidth"] == "1e3"
    # a selector that does not parse is reported once and matches no node; the key is still used
    config, problems = parse_slo_config({BURST: j({"clusterStrategy": {"cpuBurstPercent": 9}, "nodeStrategies": [
        {"name": "bad", "nodeSelector": {"matchLabels": {"bad key!": "x"}}, "cpuBurstPercent": 1}]})})
    assert len(problems) == 1 and "nodeStrategies[0].nodeSelector" in problems[0]
    assert render_spec(config, {"bad key!": "x"})["cpuBurstStrategy"]["cpuBurstPercent"] == 9
    # a node annotation that is not a quantity: no systemStrategy (getSystemConfigSpec's error)
    got = render_spec(DEFAULT_SLO_CONFIG, {}, {BANDWIDTH: "wrong-format"})
    assert "systemStrategy" not in got and got["resourceUsedThresholdWithBE"] == DEFAULT_THRESHOLD


def test_extensions_of_the_old_spec_are_kept():
    old = {"extensions": {"Object": {"thirdParty": {"enable": True}}}}
    assert render_spec(DEFAULT_SLO_CONFIG, {}, None, old)["extensions"] == {"Object": {"thirdParty": {"enable": True}}}
    assert render_spec(DEFAULT_SLO_CONFIG, {}, None, {"extensions": {"x": 1}})["extensions"] == EXTENSIONS


@pytest.mark.parametrize("text,want", [
    ("0", "0"), ("1000M", "1G"), ("100M", "100M"), ("99M", "99M"), ("10G", "10G"), ("0.5", "500m"),
    ("2048Mi", "2Gi"), ("1.5Gi", "1536Mi"), ("512Ki", "512Ki"), ("0.5Ki", "512"), ("1023", "1023"),
    ("1e3", "1e3"), ("12e6", "12e6"), ("1e-3", "1e-3"), ("-2Ki", "-2Ki"), ("1.0000000001", "1000000001n"),
    ("0.1Mi", "104857600m"), ("+5", "5"), (".5", "500m"),
])
def test_canonical_quantity(text, want):
    assert canonical_quantity(text) == want


@pytest.mark.parametrize("text", ["", " 1", "1 ", "ten", "1Kb", "--1", "1e", "."])
def test_canonical_quantity_refuses(text):
    with pytest.raises(ValueError):
        canonical_quantity(text)


@pytest.mark.parametrize("selector,labels,want", [
    (None, {"a": "b"}, False),
    ({}, {}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "b"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "c"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}, {"a": "b"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ({"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "In", "values": ["d", "e"]}]},
     {"a": "b", "c": "e"}, True),
])
def test_selector(selector, labels, want):
    assert selector_matches_strict(selector, labels) is want


@pytest.mark.parametrize("selector", [
    {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]},
    {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
    {"matchLabels": {"a/b/c": "d"}},
    {"matchLabels": {"a": "-bad"}},
    {"matchLabels": {"Example.com/a": "b"}},
])
def test_selector_refused(selector):
    with pytest.raises(ValueError):
        selector_matches_strict(selector, {})


def test_rendered_nodeslos_survive_the_crds_pruning():
    schema = CRDS["nodeslos.slo.koordinator.sh"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    data = docs(DEPLOY / "slo-controller-config.yaml")[0]["data"]
    config, _ = parse_slo_config(data)
    specs = [render_spec(config, {"node-pool": "offline"}, {"node.koordinator.sh/network-bandwidth": "10G"}),
             render_spec(config, {})]
    specs += [render_spec(parse_slo_config(d)[0], labels, ann) for _, d, labels, ann, _ in CASES]
    for s in specs:
        assert pruned(s, schema) == []
    assert pruned({"resourceQOSStrategy": {"beClass": {"bogus": 1}}}, schema) == [
        "spec.resourceQOSStrategy.beClass.bogus: unknown field, pruned"]
