"""Table-driven tests of load_aware's estimator, filter and score (Koordinator's LoadAware plugin).

Fixture: node n1 with 10 cores / 100Gi allocatable. The incoming pod requests 1 core / 10Gi (no limits),
so the default estimator (cpu 85 %, memory 70 %) adds 850m / 7Gi to the node's estimated usage.
"""

import json
import types

import numpy as np
import pytest
from koordfw_load_aware import DEFAULT_MEMORY, AggregatedArgs, LoadAware, LoadAwareArgs, estimate_resource, parse_duration

from koordfw import NodeBatch
from koordfw.inputs import load_objects, make_node, make_pod
from koordfw.testing import VirtualClock

G = 2**30
NOW = 1_800_000_000.0
PROD = {"koordinator.sh/qosClass": "LS"}


def node_metric(name="n1", cpu="2", memory="20Gi", update=NOW - 30, pods_metric=(), aggregated=None,
                node_usage=True):
    nm = {"systemUsage": {"resources": {"cpu": "500m", "memory": "2Gi"}}}
    if node_usage:
        nm["nodeUsage"] = {"resources": {"cpu": cpu, "memory": memory}}
    if aggregated:
        nm["aggregatedNodeUsages"] = aggregated
    status = {"nodeMetric": nm, "podsMetric": list(pods_metric)}
    if update is not None:
        status["updateTime"] = update
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "status": status}


def pm(name, cpu, memory="1Gi", priority=None):
    d = {"namespace": "default", "name": name, "podUsage": {"resources": {"cpu": cpu, "memory": memory}}}
    if priority:
        d["priority"] = priority
    return d


def bound_pod(name, cpu, memory="1Gi", scheduled_at=None, labels=PROD, priority=9500):
    p = make_pod(name, requests={"cpu": cpu, "memory": memory}, labels=labels, priority=priority, node_name="n1")
    if scheduled_at is not None:
        raw = dict(p.raw)
        raw["status"] = {"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at}]}
        p = load_objects([raw]).pods[0]
    return p


def incoming(**kw):
    kw.setdefault("requests", {"cpu": "1", "memory": "10Gi"})
    kw.setdefault("labels", PROD)
    kw.setdefault("priority", 9500)
    return make_pod("incoming", **kw)


def cluster_of(metric=None, pods=(), annotations=None, alloc=None):
    from koordfw.inputs import Manifests

    m = Manifests()
    m.nodes.append(make_node("n1", allocatable=alloc or {"cpu": "10", "memory": "100Gi", "pods": "110"},
                             annotations=annotations))
    m.pods.extend(pods)
    if metric is not None:
        load_objects([metric], into=m)
    return m.to_cluster()


def call(hook, cluster, pod, args=None, plugin=None):
    plugin = plugin or LoadAware()
    handle = types.SimpleNamespace(clock=VirtualClock(NOW), cluster=cluster)
    nodes = NodeBatch(cluster, np.arange(cluster.num_nodes))
    return getattr(plugin, hook)(pod=pod, nodes=nodes, args=args or LoadAwareArgs(), handle=handle)


# -- estimator ------------------------------------------------------------------------------------------
EST_CASES = [
    # id, pod kwargs, resource, factor, expected
    ("cpu-request", {"requests": {"cpu": "1"}}, "cpu", 85, 850),
    ("cpu-limit-above-request", {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}, "cpu", 85, 1700),
    ("cpu-go-round-half-up", {"requests": {"cpu": "10m"}}, "cpu", 85, 9),  # 8.5 → 9 (not banker's 8)
    ("cpu-zero-default", {}, "cpu", 85, 250),
    ("memory-zero-default", {}, "memory", 70, DEFAULT_MEMORY),
    ("memory-request", {"requests": {"memory": "10Gi"}}, "memory", 70, 7 * G),
    ("capped-at-limit", {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}, "cpu", 150, 1000),
    ("uncapped-without-limit", {"requests": {"cpu": "1"}}, "cpu", 150, 1500),
    ("batch-pod-reads-batch-cpu", {"requests": {"kubernetes.io/batch-cpu": "2000"}, "priority": 5500},
     "cpu", 85, 1700),
    ("batch-pod-reads-batch-memory", {"requests": {"kubernetes.io/batch-memory": "10Gi"}, "priority": 5500},
     "memory", 70, 7 * G),
    ("batch-pod-without-batch-request", {"requests": {"cpu": "4"}, "priority": 5500}, "cpu", 85, 250),
    ("other-resource-zero", {}, "nvidia.com/gpu", 100, 0),
]


@pytest.mark.parametrize("pod_kw,resource,factor,expected", [c[1:] for c in EST_CASES],
                         ids=[c[0] for c in EST_CASES])
def test_estimator(pod_kw, resource, factor, expected):
    assert estimate_resource(make_pod("p", **pod_kw), resource, factor) == expected


# -- filter -----------------------------------------------------------------------------------------------
def hot(cpu):
    return node_metric(cpu=cpu)


FILTER_CASES = [
    # id, metric, pods on the node, node annotations, args, incoming pod kwargs, expected reason (None = fits)
    ("no-metric-passes", None, [], None, {}, {}, None),
    ("fresh-cool", hot("5"), [], None, {}, {}, None),  # 5000 + 850 → 58.5 % → 59
    ("fresh-hot", hot("5700m"), [], None, {}, {}, "node(s) cpu usage exceed threshold"),  # 65.5 → 66
    ("go-round-half-away", hot("5600m"), [], None, {"usage_thresholds": {"cpu": 64, "memory": 95}}, {},
     "node(s) cpu usage exceed threshold"),  # 64.5 → 65 (banker's rounding would give 64)
    ("memory-hot", node_metric(memory="89Gi"), [], None, {}, {}, "node(s) memory usage exceed threshold"),
    ("both-hot-names-cpu-first", node_metric(cpu="9", memory="99Gi"), [], None, {}, {},
     "node(s) cpu usage exceed threshold"),
    ("threshold-zero-disables", hot("9"), [], None, {"usage_thresholds": {"cpu": 0, "memory": 95}}, {}, None),
    ("stale-rejected", node_metric(cpu="1", update=NOW - 180), [], None, {}, {}, "node(s) nodeMetric expired"),
    ("almost-stale-ok", node_metric(cpu="1", update=NOW - 179), [], None, {}, {}, None),
    ("no-update-time-expired", node_metric(cpu="1", update=None), [], None, {}, {}, "node(s) nodeMetric expired"),
    ("stale-allowed-when-enabled", node_metric(cpu="9", update=NOW - 600), [], None,
     {"enable_schedule_when_node_metrics_expired": True}, {}, None),
    ("stale-not-filtered-uses-old-usage", node_metric(cpu="9", update=NOW - 600), [], None,
     {"filter_expired_node_metrics": False}, {}, "node(s) cpu usage exceed threshold"),
    ("custom-expiration", node_metric(cpu="1", update=NOW - 100), [], None,
     {"node_metric_expiration_seconds": 60}, {}, "node(s) nodeMetric expired"),
    ("daemonset-skipped", hot("9"), [], None, {}, {"metadata_owner": "DaemonSet"}, None),
    ("node-annotation-raises-threshold", hot("7"), [],
     {"scheduling.koordinator.sh/usage-thresholds": json.dumps({"usageThresholds": {"cpu": 90}})}, {}, {}, None),
    ("node-annotation-lowers-threshold", hot("3"), [],
     {"scheduling.koordinator.sh/usage-thresholds": json.dumps({"usageThresholds": {"cpu": 30}})}, {}, {},
     "node(s) cpu usage exceed threshold"),
    ("node-annotation-invalid-ignored", hot("7"), [],
     {"scheduling.koordinator.sh/usage-thresholds": "{oops"}, {}, {}, "node(s) cpu usage exceed threshold"),
    ("raw-allocatable", hot("7"), [], {"node.koordinator.sh/raw-allocatable": json.dumps({"cpu": "20"})}, {}, {},
     None),
    # pods assigned after the metric was taken (updateTime NOW-30, report interval 60 s) are estimated
    ("assigned-after-metric", node_metric(cpu="4", pods_metric=[pm("fresh", "500m")]),
     [bound_pod("fresh", "4", scheduled_at=NOW - 10)], None, {}, {},
     "node(s) cpu usage exceed threshold"),  # 4000 + (3400 - 500) + 850 = 7750 → 78 %
    ("assigned-within-report-interval", node_metric(cpu="4", pods_metric=[pm("fresh", "500m")]),
     [bound_pod("fresh", "4", scheduled_at=NOW - 80)], None, {}, {}, "node(s) cpu usage exceed threshold"),
    ("assigned-long-before-metric", node_metric(cpu="4", pods_metric=[pm("old", "500m")]),
     [bound_pod("old", "4", scheduled_at=NOW - 3600)], None, {}, {}, None),  # usage already in nodeUsage
    ("assigned-without-condition-counts-as-old", node_metric(cpu="4", pods_metric=[pm("old", "500m")]),
     [bound_pod("old", "4")], None, {}, {}, None),
    ("assigned-without-usage-estimated", node_metric(cpu="4"), [bound_pod("nousage", "4")], None, {}, {},
     "node(s) cpu usage exceed threshold"),  # 4000 + 3400 + 850
    ("estimation-window-after-scheduled", node_metric(cpu="4", pods_metric=[pm("old", "500m")]),
     [bound_pod("old", "4", scheduled_at=NOW - 3600)], None, {"estimated_seconds_after_pod_scheduled": 7200}, {},
     "node(s) cpu usage exceed threshold"),
    ("no-node-usage-sums-estimates", node_metric(node_usage=False),
     [bound_pod("a", "3"), bound_pod("b", "3")], None, {}, {}, None),  # 2550 * 2 + 850 = 5950
    ("no-node-usage-sums-estimates-hot", node_metric(node_usage=False),
     [bound_pod("a", "3"), bound_pod("b", "3"), bound_pod("c", "2")], None, {}, {},
     "node(s) cpu usage exceed threshold"),  # 2550 * 2 + 1700 + 850 = 7650
    # prod usage: Σ usage of prod pods (+ prod estimates) against prodUsageThresholds, for prod pods only
    ("prod-threshold-rejects-prod-pod", node_metric(cpu="6", pods_metric=[pm("p1", "2500m"), pm("b1", "3", priority="koord-batch")]),  # noqa: E501 (a table row)
     [bound_pod("p1", "1", scheduled_at=NOW - 3600)], None, {"prod_usage_thresholds": {"cpu": 30}}, {},
     "node(s) cpu prod usage exceed threshold"),  # 2500 + 850 → 33.5 % → 34
    ("prod-threshold-ignores-batch-pod", node_metric(cpu="5", pods_metric=[pm("p1", "2500m")]),
     [bound_pod("p1", "1", scheduled_at=NOW - 3600)], None, {"prod_usage_thresholds": {"cpu": 30}},
     {"labels": {}, "priority": 5500, "requests": {"kubernetes.io/batch-cpu": "1000"}}, None),
    ("prod-threshold-passes-cool", node_metric(cpu="8", pods_metric=[pm("p1", "1")]),
     [bound_pod("p1", "1", scheduled_at=NOW - 3600)], None, {"prod_usage_thresholds": {"cpu": 30}}, {}, None),
    # aggregated (percentile) usage
    ("aggregated-p95-hot", node_metric(cpu="1", aggregated=[
        {"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "6"}}}},
        {"duration": "1m0s", "usage": {"p95": {"resources": {"cpu": "9"}}}}]), [], None,
     {"aggregated": AggregatedArgs(usage_thresholds={"cpu": 65}, usage_aggregation_type="p95")}, {},
     "node(s) cpu aggregated usage exceed threshold"),  # longest duration (5m): 6000 + 850 → 69 %
    ("aggregated-duration-picks-entry", node_metric(cpu="1", aggregated=[
        {"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "6"}}}},
        {"duration": "1m0s", "usage": {"p95": {"resources": {"cpu": "2"}}}}]), [], None,
     {"aggregated": AggregatedArgs(usage_thresholds={"cpu": 65}, usage_aggregation_type="p95",
                                   usage_aggregated_duration="60s")}, {}, None),
]


@pytest.mark.parametrize("metric,pods,annotations,args,pod_kw,expected", [c[1:] for c in FILTER_CASES],
                         ids=[c[0] for c in FILTER_CASES])
def test_filter(metric, pods, annotations, args, pod_kw, expected):
    cluster = cluster_of(metric, pods, annotations)
    owner = pod_kw.pop("metadata_owner", None)
    pod = incoming(**pod_kw)
    if owner:
        raw = dict(pod.raw)
        raw["metadata"] = {**raw["metadata"], "ownerReferences": [{"kind": owner, "name": "ds", "controller": True}]}
        pod = load_objects([raw]).pods[0]
    out = call("filter", cluster, pod, LoadAwareArgs(**args))
    assert (out or {}).get("n1") == expected


def test_pod_reserved_during_run_is_estimated():
    """A pod reserved now (after the metric) is estimated even though its usage is reported."""
    plugin = LoadAware()
    cluster = cluster_of(node_metric(cpu="4", pods_metric=[pm("new", "500m")]))
    pod = make_pod("new", requests={"cpu": "4"}, labels=PROD, priority=9500)
    cluster.add_pod(pod)
    assert call("filter", cluster, incoming(), plugin=plugin) is None  # 4000 + 850 before the pod lands
    cluster.assume(pod, "n1")
    plugin.reserve(pod=pod, handle=types.SimpleNamespace(clock=VirtualClock(NOW)))
    assert call("filter", cluster, incoming(), plugin=plugin) == {"n1": "node(s) cpu usage exceed threshold"}
    plugin.unreserve(pod=pod)
    cluster.forget(pod)
    assert call("filter", cluster, incoming(), plugin=plugin) is None


def test_metric_replacement_is_seen():
    plugin = LoadAware()
    cluster = cluster_of(node_metric(cpu="1"))
    assert call("filter", cluster, incoming(), plugin=plugin) is None
    cluster.set_object("NodeMetric", node_metric(cpu="9"))
    assert call("filter", cluster, incoming(), plugin=plugin) == {"n1": "node(s) cpu usage exceed threshold"}


def test_invalid_node_metric_is_treated_as_missing():
    bad = node_metric()
    bad["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = "lots"
    assert call("filter", cluster_of(bad), incoming()) is None
    assert call("score", cluster_of(bad), incoming()) is None


# -- score ------------------------------------------------------------------------------------------------
SCORE_CASES = [
    # id, metric, args, expected score of n1 (None = no opinion, i.e. 0 for every node)
    ("no-metric", None, {}, None),
    ("expired", node_metric(update=NOW - 180), {}, None),
    ("no-update-time", node_metric(update=None), {}, None),
    # cpu (10000 - 2850) * 100 // 10000 = 71; memory (100 - 27)Gi * 100 // 100Gi = 73 → (71 + 73) // 2
    ("least-used", node_metric(), {}, 72),
    ("weights", node_metric(), {"resource_weights": {"cpu": 3, "memory": 1}}, (71 * 3 + 73) // 4),
    ("dominant-only", node_metric(), {"dominant_resource_weight": 1}, 71),
    ("dominant-and-weights", node_metric(), {"dominant_resource_weight": 2, "resource_weights": {"cpu": 1, "memory": 1}},
     (71 + 73 + 2 * 71) // 4),
    ("over-allocatable-scores-zero", node_metric(cpu="10"), {}, (0 + 73) // 2),
    ("scaling-factors", node_metric(), {"estimated_scaling_factors": {"cpu": 100, "memory": 100}},
     ((10000 - 3000) * 100 // 10000 + 70) // 2),
    ("prod-usage", node_metric(pods_metric=[pm("p1", "1", "10Gi")]), {"score_according_prod_usage": True},
     ((10000 - 1850) * 100 // 10000 + 83) // 2),
]


@pytest.mark.parametrize("metric,args,expected", [c[1:] for c in SCORE_CASES], ids=[c[0] for c in SCORE_CASES])
def test_score(metric, args, expected):
    pods = [bound_pod("p1", "1", "10Gi", scheduled_at=NOW - 3600)] if "prod" in str(args) else []
    out = call("score", cluster_of(metric, pods), incoming(), LoadAwareArgs(**args))
    assert (None if out is None else int(out[0])) == expected


def test_score_prefers_the_cooler_node():
    from koordfw.inputs import Manifests

    m = Manifests()
    for n in ("hot", "cool", "bare"):
        m.nodes.append(make_node(n, allocatable={"cpu": "10", "memory": "100Gi", "pods": "110"}))
    load_objects([node_metric("hot", cpu="6"), node_metric("cool", cpu="1")], into=m)
    out = call("score", m.to_cluster(), incoming())
    assert list(out) == [((10000 - 6850) * 100 // 10000 + 73) // 2, ((10000 - 1850) * 100 // 10000 + 73) // 2, 0]


@pytest.mark.parametrize("args,message", [
    ({"usage_thresholds": {"cpu": -1}}, "usageThresholds.cpu"),
    ({"estimator": "magic"}, "unknown estimator"),
    ({"node_metric_expiration_seconds": -5}, "nodeMetricExpirationSeconds"),
])
def test_bad_args(args, message):
    with pytest.raises(ValueError, match=message):
        LoadAwareArgs(**args)


def test_bad_aggregated_args():
    with pytest.raises(ValueError, match="unknown aggregation type"):
        AggregatedArgs(usage_aggregation_type="p42")
    with pytest.raises(ValueError, match="invalid duration"):
        AggregatedArgs(usage_aggregated_duration="five minutes")


@pytest.mark.parametrize("text,seconds", [("5m0s", 300), ("300s", 300), ("1h30m", 5400), ("1.5s", 1.5), ("0", 0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text, where="d") == seconds
