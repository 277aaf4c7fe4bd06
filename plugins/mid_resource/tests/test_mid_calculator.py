"""Koordinator's midresource unit-test tables (``pkg/slo-controller/noderesource/plugins/midresource/plugin_test.go``:
TestPluginCalculate, TestPlugin_isDegradeNeeded, TestPluginNeedSync), ported with the same inputs.

Go's fixture (``getTestNode``): capacity 100 cores / 210G, allocatable 100 / 200G (kubelet reserves 0 / 10G);
pods: podA koord-prod LS requesting 20 / 40G, podB koord-batch BE requesting 15 / 30G, both Running. By hand,
for "calculate correctly when node metric is valid" (nodeUsage 20 / 45G, prodReclaimable 10 / 15G):
unused = 100-20 = 80 cores, 210-45 = 165G; unallocated = 100-0-20 = 80 cores, 210-10-40 = 160G (podB is
Batch, not counted); mid = min(10, 80) + 80*0 = 10 cores, min(15G, 165G) = 15G; caps 100 % → unchanged.
"""

from __future__ import annotations

import pytest
from koordfw_mid_resource import MidStrategy, calculate, degrade_reason, needs_sync, parse_mid_metric

from koordfw.extension import MID_CPU, MID_MEMORY
from koordfw.inputs import load_objects, make_pod

NOW = 1_800_000_000.0
G = 10**9


def iso(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fixture_node():
    return load_objects([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "test-node"},
                          "status": {"allocatable": {"cpu": "100", "memory": "200G", MID_CPU: "20000",
                                                     MID_MEMORY: "40G"},
                                     "capacity": {"cpu": "100", "memory": "210G", MID_CPU: "20000",
                                                  MID_MEMORY: "40G"}}}]).nodes[0]


def fixture_pods():
    return [make_pod("pod-a", "test", requests={"cpu": "20", "memory": "40G"}, limits={"cpu": "20", "memory": "40G"},
                     labels={"koordinator.sh/qosClass": "LS"}, priority=9000, node_name="test-node",
                     priorityClassName="koord-prod"),
            make_pod("pod-b", "test", requests={"cpu": "15", "memory": "30G"}, limits={"cpu": "15", "memory": "30G"},
                     labels={"koordinator.sh/qosClass": "BE"}, priority=5999, node_name="test-node",
                     priorityClassName="koord-batch")]


def metric(node_usage=None, pods=(), prod=None, host_apps=(), update=NOW):
    status: dict = {"updateTime": iso(update), "nodeMetric": {}}
    if node_usage is not None:
        status["nodeMetric"]["nodeUsage"] = {"resources": {"cpu": node_usage[0], "memory": node_usage[1]}}
    status["podsMetric"] = [{"namespace": "test", "name": f"pod{i}", "podUsage": {"resources": {"cpu": c, "memory": m}}}
                            for i, (c, m) in enumerate(pods)]
    if prod is not None:
        status["prodReclaimableMetric"] = ({"resource": {"resources": {"cpu": prod[0], "memory": prod[1]}}}
                                           if prod else {})
    if host_apps:
        status["hostApplicationMetric"] = [{"name": f"app{i}", "usage": {"resources": {"cpu": c, "memory": m}},
                                            "priority": p} for i, (c, m, p) in enumerate(host_apps)]
    return parse_mid_metric({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                             "metadata": {"name": "test-node"}, "status": status})


def strat(**kw) -> MidStrategy:
    # the table's strategies set only these; the rest is Koordinator's defaults (thresholds 100 %, unallocated 0)
    base = {"degrade_time_minutes": 10, "mid_static_CPU_reserved_percent": 10, "mid_static_memory_reserved_percent": 10}
    return MidStrategy(**{**base, **kw})


POD_USAGE = (("5", "10G"), ("15", "30G"))

CASES = [
    # name, strategy, metric kwargs, (mid-cpu milli, mid-memory bytes), Koordinator's two messages
    ("calculate correctly when node metric is valid", strat(),
     {"node_usage": ("20", "45G"), "pods": (("10", "20G"), ("15", "20G")), "prod": ("10", "15G")}, (10000, 15 * G),
     ("midAllocatable[CPU(milli-core)]:10000 = min(min(ProdReclaimable:10000, NodeUnused:80000) + Unallocated:80000 * "
      "midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)",
      "midAllocatable[Memory(GB)]:15 = min(min(ProdReclaimable:15, NodeUnused:165) + Unallocated:160 * "
      "midUnallocatedRatio:0, NodeCapacity:210 * thresholdRatio:1)")),
    ("calculate correctly where the prod reclaimable exceeds the mid threshold",
     strat(mid_CPU_threshold_percent=10, mid_memory_threshold_percent=20, mid_unallocated_percent=10),
     {"node_usage": ("30", "50G"), "pods": POD_USAGE, "prod": ("15", "30G")}, (10000, 42 * G),
     ("midAllocatable[CPU(milli-core)]:10000 = min(min(ProdReclaimable:15000, NodeUnused:70000) + Unallocated:80000 * "
      "midUnallocatedRatio:0.1, NodeCapacity:100000 * thresholdRatio:0.1)",
      "midAllocatable[Memory(GB)]:42 = min(min(ProdReclaimable:30, NodeUnused:160) + Unallocated:160 * "
      "midUnallocatedRatio:0.1, NodeCapacity:210 * thresholdRatio:0.2)")),
    ("calculate correctly when prod reclaimable is nil", strat(),
     {"node_usage": ("30", "50G"), "pods": POD_USAGE, "prod": ()}, (0, 0),
     ("midAllocatable[CPU(milli-core)]:0 = min(min(ProdReclaimable:0, NodeUnused:70000) + Unallocated:80000 * "
      "midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)",
      "midAllocatable[Memory(GB)]:0 = min(min(ProdReclaimable:0, NodeUnused:160) + Unallocated:160 * "
      "midUnallocatedRatio:0, NodeCapacity:210 * thresholdRatio:1)")),
    ("calculate correctly when set reserved resource in static mode: not exceed",
     strat(mid_reclaim_mode="static", mid_CPU_threshold_percent=10, mid_memory_threshold_percent=20,
           mid_unallocated_percent=10),
     {"node_usage": ("30", "50G"), "pods": POD_USAGE, "prod": ("15", "30G")}, (10000, 21 * G),
     ("midAllocatable[CPU(milli-core)]:10000 = min(nodeCapacity:100000 * staticReservedPercent:0.1, "
      "nodeCapacity:100000 * thresholdRatio:0.1)",
      "midAllocatable[Memory(GB)]:21 = min(nodeCapacity:210 * staticReservedPercent:0.1, nodeCapacity:210 * "
      "thresholdRatio:0.2)")),
    ("calculate correctly when set reserved resource in static mode: exceed",
     strat(mid_reclaim_mode="static", mid_static_CPU_reserved_percent=100, mid_static_memory_reserved_percent=100,
           mid_CPU_threshold_percent=10, mid_memory_threshold_percent=20, mid_unallocated_percent=10),
     {"node_usage": ("30", "50G"), "pods": POD_USAGE, "prod": ("15", "30G")}, (10000, 42 * G),
     ("midAllocatable[CPU(milli-core)]:10000 = min(nodeCapacity:100000 * staticReservedPercent:1, "
      "nodeCapacity:100000 * thresholdRatio:0.1)",
      "midAllocatable[Memory(GB)]:42 = min(nodeCapacity:210 * staticReservedPercent:1, nodeCapacity:210 * "
      "thresholdRatio:0.2)")),
    ("calculate correctly where node metrics is invalid", strat(),
     {"node_usage": None, "pods": (), "prod": ("20", "20G")}, (0, 0),
     ("midAllocatable[CPU(milli-core)]:0 = min(min(ProdReclaimable:20000, NodeUnused:0) + Unallocated:80000 * "
      "midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)",
      "midAllocatable[Memory(GB)]:0 = min(min(ProdReclaimable:20, NodeUnused:0) + Unallocated:160 * "
      "midUnallocatedRatio:0, NodeCapacity:210 * thresholdRatio:1)")),
    ("calculate correctly where the prod reclaimable exceeds the node free resource", strat(),
     {"node_usage": ("90", "200G"), "pods": (("10", "20G"), ("15", "20G")), "prod": ("20", "20G")}, (10000, 10 * G),
     ("midAllocatable[CPU(milli-core)]:10000 = min(min(ProdReclaimable:20000, NodeUnused:10000) + Unallocated:80000 * "
      "midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)",
      "midAllocatable[Memory(GB)]:10 = min(min(ProdReclaimable:20, NodeUnused:10) + Unallocated:160 * "
      "midUnallocatedRatio:0, NodeCapacity:210 * thresholdRatio:1)")),
    ("including product host application usage", strat(),
     {"node_usage": ("30", "50G"), "pods": POD_USAGE, "prod": (), "host_apps": (("5", "15G", "koord-prod"),)}, (0, 0),
     ("midAllocatable[CPU(milli-core)]:0 = min(min(ProdReclaimable:0, NodeUnused:70000) + Unallocated:75000 * "
      "midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)",
      "midAllocatable[Memory(GB)]:0 = min(min(ProdReclaimable:0, NodeUnused:160) + Unallocated:155 * "
      "midUnallocatedRatio:0, NodeCapacity:210 * thresholdRatio:1)")),
    ("including mid host application usage", strat(),
     {"node_usage": ("30", "50G"), "pods": POD_USAGE, "prod": (), "host_apps": (("5", "15G", "koord-mid"),)}, (0, 0),
     ("midAllocatable[CPU(milli-core)]:0 = min(min(ProdReclaimable:0, NodeUnused:70000) + Unallocated:80000 * "
      "midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)",
      "midAllocatable[Memory(GB)]:0 = min(min(ProdReclaimable:0, NodeUnused:160) + Unallocated:160 * "
      "midUnallocatedRatio:0, NodeCapacity:210 * thresholdRatio:1)")),
    ("including batch host application usage", strat(),
     {"node_usage": ("30", "50G"), "pods": POD_USAGE, "prod": (), "host_apps": (("2", "10G", "koord-batch"),)}, (0, 0),
     ("midAllocatable[CPU(milli-core)]:0 = min(min(ProdReclaimable:0, NodeUnused:70000) + Unallocated:80000 * "
      "midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)",
      "midAllocatable[Memory(GB)]:0 = min(min(ProdReclaimable:0, NodeUnused:160) + Unallocated:160 * "
      "midUnallocatedRatio:0, NodeCapacity:210 * thresholdRatio:1)")),
]


@pytest.mark.parametrize(("name", "strategy", "mkw", "want", "messages"), CASES, ids=[c[0] for c in CASES])
def test_plugin_calculate(name, strategy, mkw, want, messages):
    r = calculate(strategy, fixture_node(), fixture_pods(), metric(**mkw), NOW)
    assert not r.degraded
    assert (r.mid_cpu, r.mid_memory) == want
    assert r.resources == {MID_CPU: want[0], MID_MEMORY: want[1]}
    assert (r.cpu_message, r.memory_message) == messages


def test_degrade_when_node_metric_is_expired():
    # "degrade when node metric is expired": degradeTimeMinutes 5, updateTime 30 minutes ago → Reset both
    r = calculate(strat(degrade_time_minutes=5), fixture_node(), fixture_pods(),
                  metric(node_usage=("20", "45G"), prod=("10", "15G"), update=NOW - 30 * 60), NOW)
    assert r.degraded and r.resources == {MID_CPU: None, MID_MEMORY: None}


@pytest.mark.parametrize(("name", "update", "prod", "now", "want"), [
    ("empty NodeMetric should degrade", None, None, NOW, True),
    ("outdated NodeMetric status should degrade", NOW - 11 * 60, None, NOW, True),
    ("outdated NodeMetric status should degrade 1", NOW, None, NOW + 11 * 60, True),
    ("NodeMetric without prod reclaimable should degrade", NOW, None, NOW, False),  # Go's name, want false
    ("valid NodeMetric status should not degrade", NOW, ("10", "20Gi"), NOW, False),
])
def test_is_degrade_needed(name, update, prod, now, want):
    s = MidStrategy(degrade_time_minutes=10)
    m = None if update is None else metric(prod=prod, update=update)
    assert bool(degrade_reason(s, m, now)) is want


def test_empty_status_degrades():
    # "empty NodeMetric status should degrade": no updateTime
    m = parse_mid_metric({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                          "metadata": {"name": "n"}, "status": {}})
    assert degrade_reason(MidStrategy(), m, NOW) == "NodeMetric has no status.updateTime"


@pytest.mark.parametrize(("old", "new", "want"), [
    # TestPluginNeedSync: 20000/40G → the same: no; → 15000/30G (25 % off, threshold 10 %): yes
    ({MID_CPU: 20000, MID_MEMORY: 40 * G}, {MID_CPU: 20000, MID_MEMORY: 40 * G}, False),
    ({MID_CPU: 20000, MID_MEMORY: 40 * G}, {MID_CPU: 15000, MID_MEMORY: 30 * G}, True),
    ({MID_CPU: 20000, MID_MEMORY: 40 * G}, {MID_CPU: 22000, MID_MEMORY: 40 * G}, False),  # exactly 10 %: no
    ({MID_CPU: None, MID_MEMORY: None}, {MID_CPU: 0, MID_MEMORY: 0}, True),  # appears
])
def test_need_sync(old, new, want):
    assert needs_sync(old, new, last_update=NOW - 10, now=NOW, strategy=MidStrategy()) is want


def test_update_time_threshold_forces_sync():
    same = {MID_CPU: 1, MID_MEMORY: 1}
    assert needs_sync(same, same, last_update=None, now=NOW, strategy=MidStrategy())
    assert needs_sync(same, same, last_update=NOW - 301, now=NOW, strategy=MidStrategy())
    assert not needs_sync(same, same, last_update=NOW - 300, now=NOW, strategy=MidStrategy())


def test_the_documented_worked_example():
    """docs/plugins/mid_resource.md's worked example, as written there."""
    gi = 2**30
    n = load_objects([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "big"},
                       "status": {"allocatable": {"cpu": "16", "memory": "64Gi"},
                                  "capacity": {"cpu": "16", "memory": "64Gi"}}}]).nodes[0]
    prod = make_pod("web", requests={"cpu": "4", "memory": "8Gi"}, labels={"koordinator.sh/qosClass": "LS"},
                    priority=9500, node_name="big")
    m = parse_mid_metric({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "big"},
                          "status": {"updateTime": iso(NOW),
                                     "nodeMetric": {"nodeUsage": {"resources": {"cpu": "4", "memory": "16Gi"}},
                                                    "systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
                                     "prodReclaimableMetric": {"resource": {"resources": {"cpu": "6", "memory": "20Gi"}}}}})
    r = calculate(MidStrategy(mid_unallocated_percent=10, mid_CPU_threshold_percent=40), n, [prod], m, NOW)
    assert (r.mid_cpu, r.mid_memory) == (6400, 27380416512) == (6400, int(25.5 * gi))
    assert r.unallocated == {"cpu": 11500, "memory": 55 * gi}
    assert r.cpu_message == ("midAllocatable[CPU(milli-core)]:6400 = min(min(ProdReclaimable:6000, NodeUnused:12000) + "
                             "Unallocated:11500 * midUnallocatedRatio:0.1, NodeCapacity:16000 * thresholdRatio:0.4)")


def test_node_overrides_annotation_and_static_labels():
    from koordfw_mid_resource import strategy_for_node
    base = MidStrategy(node_configs=[{"nodeSelector": {"matchLabels": {"pool": "a"}}, "midCPUThresholdPercent": 50}])
    s = strategy_for_node(base, "n", {"pool": "a", "node.koordinator.sh/mid-static-cpu-reserved-ratio": "0.25"},
                          {"node.koordinator.sh/colocation-strategy":
                           '{"midUnallocatedPercent": 30, "cpuReclaimThresholdPercent": 1}'})
    assert (s.mid_CPU_threshold_percent, s.mid_unallocated_percent, s.mid_static_CPU_reserved_percent) == (50, 30, 25)
    warned: set = set()
    bad = strategy_for_node(base, "n", {"node.koordinator.sh/mid-static-memory-reserved-ratio": "x"},
                            {"node.koordinator.sh/colocation-strategy": '{"midCPUThresholdPercent": 101}'}, warned)
    assert bad == base and len(warned) == 2


def test_cluster_config_rejects_a_threshold_above_100():
    from koordfw_mid_resource import from_colocation_config
    with pytest.raises(ValueError, match="midCPUThresholdPercent"):
        from_colocation_config({"enable": True, "midCPUThresholdPercent": 150}, "colocation-config")
    s = from_colocation_config({"midMemoryThresholdPercent": 70}, "colocation-config")
    assert s.enable is False and s.mid_memory_threshold_percent == 70
