"""Table-driven tests of the batch resource formula (Koordinator's batchresource plugin).

The fixture node: capacity 100 cores / 100Gi, allocatable 98 / 98Gi (kubelet reserves 2 / 2Gi),
system usage 3 cores / 4Gi. Its pods and their NodeMetric usage give (cpu milli, memory Gi):

    pod            class         request        usage        counted as
    ls-1           LS, prod      10000 / 20     4000 / 12    used = usage, maxUsedReq = 10000 / 20
    ls-2           LS, prod       8000 /  8     (none)       used = request, not in maxUsedReq
    lse-1          LSE, prod      4000 /  4     1000 /  3    used = 4000 / 3 (cpu = request), max = 4000 / 4
    be-1           BE, batch         -          2000 /  2    not high priority
    done-1         LS, Succeeded  1000 /  1     9000 /  9    inactive: ignored
    default/gone   dangling          -          1000 /  1    HP used and maxUsedReq
    default/gone-b dangling batch    -          5000 /  5    ignored (reported as koord-batch)

    HP request = 22000 / 32    HP used = 17000 / 24    HP maxUsedReq = 15000 / 25
    margin (60 % / 65 %) = 40000 / 35    systemUsed = max(3000 / 4, reserved 2000 / 2) = 3000 / 4
    byUsage = 40000 / 37    byRequest = 36000 / 31    byMaxUsageRequest = 42000 / 36
"""

import json

import attrs
import pytest
from koordfw_batch_resource import ColocationStrategy, calculate, needs_sync, parse_node_metric, strategy_for_node

from koordfw.inputs import load_objects, make_pod

G = 2**30
NOW = 1_800_000_000.0


def node(labels=None, annotations=None, capacity=("100", "100Gi"), allocatable=("98", "98Gi")):
    m = load_objects([{"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}},
                       "status": {"capacity": {"cpu": capacity[0], "memory": capacity[1]},
                                  "allocatable": {"cpu": allocatable[0], "memory": allocatable[1]}}}])
    return m.nodes[0]


def pods():
    ls = {"koordinator.sh/qosClass": "LS"}
    return [
        make_pod("ls-1", requests={"cpu": "10", "memory": "20Gi"}, labels=ls, priority=9500, node_name="n1"),
        make_pod("ls-2", requests={"cpu": "8", "memory": "8Gi"}, labels=ls, priority=9500, node_name="n1"),
        make_pod("lse-1", requests={"cpu": "4", "memory": "4Gi"}, limits={"cpu": "4", "memory": "4Gi"},
                 labels={"koordinator.sh/qosClass": "LSE"}, priority=9500, node_name="n1"),
        make_pod("be-1", requests={"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"},
                 labels={"koordinator.sh/qosClass": "BE"}, priority=5500, node_name="n1"),
        attrs.evolve(make_pod("done-1", requests={"cpu": "1", "memory": "1Gi"}, labels=ls, priority=9500,
                              node_name="n1"), phase="Succeeded"),
    ]


def pod_metric(name, cpu, mem, priority=None):
    m = {"namespace": "default", "name": name, "podUsage": {"resources": {"cpu": cpu, "memory": mem}}}
    if priority:
        m["priority"] = priority
    return m


def metric(update=NOW - 30, pods_metric=None, system=("3", "4Gi")):
    status = {"nodeMetric": {"nodeUsage": {"resources": {"cpu": "20", "memory": "50Gi"}},
                             "systemUsage": {"resources": {"cpu": system[0], "memory": system[1]}}},
              "podsMetric": pods_metric if pods_metric is not None else [
                  pod_metric("ls-1", "4", "12Gi"), pod_metric("lse-1", "1", "3Gi"),
                  pod_metric("be-1", "2", "2Gi"), pod_metric("done-1", "9", "9Gi"),
                  pod_metric("gone", "1", "1Gi"), pod_metric("gone-b", "5", "5Gi", "koord-batch")]}
    if update is not None:
        status["updateTime"] = update
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
            "status": status}


def run(strategy=None, n=None, m=None, now=NOW, pod_list=None):
    s = ColocationStrategy(**(strategy or {}))
    n = n or node()
    s = strategy_for_node(s, n.name, n.labels, n.annotations)
    return calculate(s, n, pods() if pod_list is None else pod_list, parse_node_metric(m or metric()), now)


CASES = [
    # id, strategy args, node kwargs, metric kwargs, expected (batch-cpu milli, batch-memory bytes)
    ("usage-default", {}, {}, {}, (40000, 37 * G)),
    ("cpu-request-policy-falls-back-to-usage", {"cpu_calculate_policy": "request"}, {}, {}, (40000, 37 * G)),
    ("cpu-maxUsageRequest", {"cpu_calculate_policy": "maxUsageRequest"}, {}, {}, (42000, 37 * G)),
    ("memory-request", {"memory_calculate_policy": "request"}, {}, {}, (40000, 31 * G)),
    ("memory-maxUsageRequest", {"memory_calculate_policy": "maxUsageRequest"}, {}, {}, (40000, 36 * G)),
    # no pod metrics at all: usage counts requests; maxUsageRequest counts nothing (node level)
    ("no-pod-metrics-usage", {}, {}, {"pods_metric": []}, (35000, 29 * G)),
    ("no-pod-metrics-maxUsageRequest", {"cpu_calculate_policy": "maxUsageRequest",
                                        "memory_calculate_policy": "maxUsageRequest"}, {},
     {"pods_metric": []}, (57000, 61 * G)),
    # reservation annotation: max(kubelet reserved, annotation) feeds systemUsed and byRequest
    ("reservation-resources", {"memory_calculate_policy": "request"},
     {"annotations": {"node.koordinator.sh/reservation": json.dumps({"resources": {"cpu": "5", "memory": "6Gi"}})}},
     {}, (38000, 27 * G)),
    ("reservation-reservedCPUs-win", {},
     {"annotations": {"node.koordinator.sh/reservation": json.dumps(
         {"resources": {"cpu": "5"}, "reservedCPUs": "0-5,8-9"})}}, {}, (35000, 37 * G)),
    ("reservation-smaller-than-kubelet", {},
     {"annotations": {"node.koordinator.sh/reservation": json.dumps({"resources": {"cpu": "1"}})}},
     {"system": ("0", "0")}, (41000, 39 * G)),
    ("reservation-invalid-ignored", {}, {"annotations": {"node.koordinator.sh/reservation": "{not json"}},
     {}, (40000, 37 * G)),
    # batch*ThresholdPercent caps
    ("cpu-threshold-caps", {"batch_CPU_threshold_percent": 30}, {}, {}, (30000, 37 * G)),
    ("memory-threshold-caps", {"batch_memory_threshold_percent": 20}, {}, {}, (40000, 20 * G)),
    ("thresholds-above-value", {"batch_CPU_threshold_percent": 90, "batch_memory_threshold_percent": 90},
     {}, {}, (40000, 37 * G)),
    # margins: negative when the reclaim threshold exceeds 100 %, whole capacity at 0 %
    ("negative-margin", {"cpu_reclaim_threshold_percent": 120, "memory_reclaim_threshold_percent": 100},
     {}, {}, (100000, 72 * G)),
    ("zero-reclaim-clamps-to-zero", {"cpu_reclaim_threshold_percent": 0, "memory_reclaim_threshold_percent": 0},
     {}, {}, (0, 0)),
    ("hot-system-clamps", {}, {}, {"system": ("90", "90Gi")}, (0, 0)),
    # per-node overrides
    ("label-reclaim-ratio", {}, {"labels": {"node.koordinator.sh/cpu-reclaim-ratio": "0.7",
                                            "node.koordinator.sh/memory-reclaim-ratio": "0.75"}}, {},
     (50000, 47 * G)),
    # int64(0.29*100) == 28 in Go as in Python
    ("label-ratio-truncates", {}, {"labels": {"node.koordinator.sh/cpu-reclaim-ratio": "0.29"}}, {},
     (8000, 37 * G)),
    ("label-invalid-ignored", {}, {"labels": {"node.koordinator.sh/cpu-reclaim-ratio": "lots"}}, {},
     (40000, 37 * G)),
    ("annotation-strategy", {}, {"annotations": {"node.koordinator.sh/colocation-strategy": json.dumps(
        {"cpuReclaimThresholdPercent": 80, "memoryCalculatePolicy": "request", "unknownField": 1})}}, {},
     (60000, 31 * G)),
    ("label-beats-annotation", {}, {"labels": {"node.koordinator.sh/cpu-reclaim-ratio": "0.7"},
                                    "annotations": {"node.koordinator.sh/colocation-strategy": json.dumps(
                                        {"cpuReclaimThresholdPercent": 80})}}, {}, (50000, 37 * G)),
    ("annotation-bad-value-ignored", {}, {"annotations": {"node.koordinator.sh/colocation-strategy": json.dumps(
        {"cpuCalculatePolicy": "sometimes"})}}, {}, (40000, 37 * G)),
    ("node-configs-selector", {"node_configs": [
        {"name": "other", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "cpuReclaimThresholdPercent": 10},
        {"name": "colo", "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["colo"]}]},
         "cpuReclaimThresholdPercent": 70}]}, {"labels": {"pool": "colo"}}, {}, (50000, 37 * G)),
    # degradation
    ("fresh-enough", {}, {}, {"update": NOW - 899}, (40000, 37 * G)),
    ("fresh-at-exactly-degrade-minutes", {}, {}, {"update": NOW - 900}, (40000, 37 * G)),
    ("degraded-stale", {}, {}, {"update": NOW - 901}, (0, 0)),
    ("degraded-custom-minutes", {"degrade_time_minutes": 1}, {}, {"update": NOW - 61}, (0, 0)),
    ("degraded-no-update-time", {}, {}, {"update": None}, (0, 0)),
    ("disabled", {"enable": False}, {}, {}, (0, 0)),
]


@pytest.mark.parametrize("strategy,node_kw,metric_kw,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_batch_resources(strategy, node_kw, metric_kw, expected):
    r = run(strategy, node(**node_kw), metric(**metric_kw))
    assert (r.batch_cpu, r.batch_memory) == expected


def test_terms_are_reported():
    r = run()
    assert r.hp_request == {"cpu": 22000, "memory": 32 * G}
    assert r.hp_used == {"cpu": 17000, "memory": 24 * G}
    assert r.hp_max_used_req == {"cpu": 15000, "memory": 25 * G}
    assert r.margin == {"cpu": 40000, "memory": 35 * G}
    assert r.reserved == {"cpu": 2000, "memory": 2 * G}
    assert r.system_used == {"cpu": 3000, "memory": 4 * G}
    assert (r.by_usage, r.by_request, r.by_max_usage_request) == (
        {"cpu": 40000, "memory": 37 * G}, {"cpu": 36000, "memory": 31 * G}, {"cpu": 42000, "memory": 36 * G})
    assert r.degraded == ""


def test_margin_truncates_like_go():
    # 128Gi * 0.35 = 48103633715.2 → int64 truncation
    r = run(n=node(capacity=("32", "128Gi"), allocatable=("32", "128Gi")), pod_list=[], m=metric(pods_metric=[]))
    assert r.margin == {"cpu": 12800, "memory": 48103633715}


def test_host_applications_count_as_system_usage():
    m = metric()
    m["status"]["hostApplicationMetric"] = [
        {"name": "nginx", "priority": "koord-prod", "usage": {"resources": {"cpu": "2", "memory": "1Gi"}}},
        {"name": "batch-agent", "priority": "koord-batch", "usage": {"resources": {"cpu": "7", "memory": "7Gi"}}}]
    r = run(m=m)
    assert r.system_used == {"cpu": 5000, "memory": 5 * G}
    assert (r.batch_cpu, r.batch_memory) == (38000, 36 * G)


@pytest.mark.parametrize("bad,field", [
    ({"status": {"updateTime": "yesterday"}}, "status.updateTime"),
    ({"status": {"podsMetric": [{"name": "x", "podUsage": {"resources": {"cpu": "lots"}}}]}},
     "status.podsMetric[0].podUsage.resources.cpu"),
    ({"status": {"podsMetric": {"name": "x"}}}, "status.podsMetric"),
])
def test_bad_node_metric_names_the_field(bad, field):
    from koordfw import ManifestError

    with pytest.raises(ManifestError) as e:
        parse_node_metric({"metadata": {"name": "n1"}, **bad})
    assert e.value.field == field and "NodeMetric n1" in str(e.value)


@pytest.mark.parametrize("args,message", [
    ({"cpu_calculate_policy": "sometimes"}, "unknown calculate policy"),
    ({"degrade_time_minutes": -1}, "must be >= 0"),
    ({"node_configs": [{"cpuReclaimThresholdPercent": 1}]}, "nodeConfigs[0].nodeSelector"),
    ({"node_configs": [{"nodeSelector": {}, "cpuReclaimPercent": 1}]}, "unknown field"),
])
def test_bad_args_are_rejected(args, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ColocationStrategy(**args)


def test_needs_sync():
    s = ColocationStrategy()
    old = {"kubernetes.io/batch-cpu": 10000}
    assert not needs_sync(old, {"kubernetes.io/batch-cpu": 10500}, last_update=NOW - 10, now=NOW, strategy=s)
    assert needs_sync(old, {"kubernetes.io/batch-cpu": 11500}, last_update=NOW - 10, now=NOW, strategy=s)
    # Koordinator: Since(lastUpdate) > updateTimeThresholdSeconds, strictly
    assert not needs_sync(old, {"kubernetes.io/batch-cpu": 10000}, last_update=NOW - 300, now=NOW, strategy=s)
    assert needs_sync(old, {"kubernetes.io/batch-cpu": 10000}, last_update=NOW - 301, now=NOW, strategy=s)
    assert needs_sync(old, {"kubernetes.io/batch-cpu": 10000}, last_update=None, now=NOW, strategy=s)
    # IsResourceDiff: |new - old| > old * threshold (10 % of 10000 = 1000 is not more than 1000)
    assert not needs_sync(old, {"kubernetes.io/batch-cpu": 11000}, last_update=NOW - 10, now=NOW, strategy=s)
    assert not needs_sync(old, {"kubernetes.io/batch-cpu": 9000}, last_update=NOW - 10, now=NOW, strategy=s)
    assert needs_sync(old, {"kubernetes.io/batch-cpu": 0}, last_update=NOW - 10, now=NOW, strategy=s)
    # a reset (None) or a new resource is a change; a reset of an absent one is not
    assert needs_sync(old, {"kubernetes.io/batch-cpu": None}, last_update=NOW - 10, now=NOW, strategy=s)
    assert needs_sync({}, {"kubernetes.io/batch-cpu": 0}, last_update=NOW - 10, now=NOW, strategy=s)
    assert not needs_sync({}, {"kubernetes.io/batch-cpu": None}, last_update=NOW - 10, now=NOW, strategy=s)


def test_profile_keys_are_koordinators():
    from koordfw import ConfigError, build_registry

    reg = build_registry({"pluginConfig": {"batch_resource": {
        "batchCPUThresholdPercent": 30, "cpuReclaimThresholdPercent": 70, "memoryCalculatePolicy": "request",
        "nodeConfigs": [{"name": "big", "nodeSelector": {"matchLabels": {"size": "big"}},
                         "batchMemoryThresholdPercent": 50}]}}}, only=["batch_resource"])
    args = reg.plugins["batch_resource"].args_cls and reg.args["batch_resource"]
    assert (args.batch_CPU_threshold_percent, args.cpu_reclaim_threshold_percent) == (30, 70)
    assert args.memory_calculate_policy == "request"
    with pytest.raises(ConfigError, match="batch_resource"):
        build_registry({"pluginConfig": {"batch_resource": {"cpuCalculatePolicy": "often"}}}, only=["batch_resource"])
