"""The NodeMetric status from the agent's local time series, as koordlet builds it: averages over
aggregateDurationSeconds, p50..p99 over each nodeAggregatePolicy duration with the cold-start filter,
system usage, pods with priority and QoS, host applications; and load_aware reads exactly that."""

from __future__ import annotations

import numpy as np
import pytest
from koordfw_load_aware.metric import parse_node_metric

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.agent.nodemetric import CollectPolicy, NodeMetricReporter, collect_policy, go_duration, rfc3339
from koordfw.agent.timeseries import MetricStore, percentile
from koordfw.core.clock import VirtualClock
from koordfw.core.errors import ManifestError
from koordfw.core.model import make_pod
from koordfw.core.nodestate import HostApp, NodeState, PodState
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.core.quantity import canonical

START = 1_780_000_000.0


@pytest.mark.parametrize("n, p, index", [
    (10, 0.9, 8),    # float32(10) * float32(0.9) = 9.0 → 8
    (10, 0.5, 4),
    (10, 0.99, 8),   # 9.9 → 9 - 1
    (1, 0.5, 0),     # int(0.5) - 1 = -1 → 0
    (100, 0.95, 94),
    (3, 0.99, 1),
])
def test_percentile_index_is_koordlets(n, p, index):
    values = np.arange(n, dtype=float)[::-1]  # unsorted input
    assert percentile(values, p) == float(index)


def test_collect_policy_defaults_minimums_and_merge():
    assert collect_policy(None) == CollectPolicy()
    pol = collect_policy({"metadata": {"name": "n1"}, "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 10}}})
    assert pol.report_seconds == 30 and pol.aggregate_seconds == 300  # at least 30 s; the rest stays default
    assert pol.durations == (300.0, 600.0, 1800.0)
    pol = collect_policy({"metadata": {"name": "n1"}, "spec": {"metricCollectPolicy": {
        "aggregateDurationSeconds": 5, "nodeAggregatePolicy": {"durations": ["1m", "90s"]}}}})
    assert pol.aggregate_seconds == 60 and pol.durations == (60.0, 90.0) and pol.duration_texts == ("1m0s", "1m30s")
    assert collect_policy({"metadata": {"name": "n1"}, "spec": {"metricCollectPolicy": {
        "nodeAggregatePolicy": None}}}).durations is None
    assert [go_duration(s) for s in (300, 3600, 45, 1.5)] == ["5m0s", "1h0m0s", "45s", "1.5s"]


@pytest.mark.parametrize("policy, field", [
    ({"reportIntervalSeconds": "60"}, "spec.metricCollectPolicy.reportIntervalSeconds"),
    ({"aggregateDurationSeconds": -1}, "spec.metricCollectPolicy.aggregateDurationSeconds"),
    ({"nodeAggregatePolicy": {"durations": ["5 minutes"]}}, "spec.metricCollectPolicy.nodeAggregatePolicy.durations[0]"),
    ({"nodeAggregatePolicy": {"durations": ["48h"]}}, "spec.metricCollectPolicy.nodeAggregatePolicy.durations[0]"),
    ({"nodeMemoryCollectPolicy": "all"}, "spec.metricCollectPolicy.nodeMemoryCollectPolicy"),
    ("x", "spec.metricCollectPolicy"),
])
def test_bad_collect_policy_names_the_field(policy, field):
    with pytest.raises(ManifestError) as e:
        collect_policy({"metadata": {"name": "n1"}, "spec": {"metricCollectPolicy": policy}})
    assert e.value.field == field and "NodeMetric n1" in str(e.value)


def test_ring_buffer_keeps_the_newest_samples_and_resizes():
    store = MetricStore(retention=10, interval=1)  # 12 slots
    for i in range(30):
        store.record("node", float(i), float(i), 1.0)
    t, v = store.series["node"].ordered()
    assert list(t) == [float(i) for i in range(18, 30)]
    store.configure(retention=3, interval=1)
    t, _ = store.series["node"].ordered()
    assert list(t) == [25.0, 26.0, 27.0, 28.0, 29.0]
    assert store.query("node", 27, 29, "avg") == ({"cpu": 28.0, "memory": 1.0}, 2.0)
    assert store.query("node", 100, 200, "avg") is None


def _ns(cpu, mem, pods=(), apps=()):
    return NodeState(name="n1", usage={"cpu": cpu, "memory": mem}, pods=tuple(pods), host_apps=tuple(apps))


def test_status_aggregates_like_koordlet():
    web = make_pod("web", labels={"koordinator.sh/qosClass": "LS"}, priority=9500)
    batch = make_pod("batch", namespace="a", labels={"koordinator.sh/qosClass": "BE"}, priority=5500)
    pol = CollectPolicy(aggregate_duration_seconds=60, durations=(60.0, 600.0))
    rep = NodeMetricReporter(pol, sample_interval=1.0)
    # 120 rounds, one a second: node cpu 1000 + i, pods 100 and 200 + i milli
    for i in range(120):
        pods = [PodState(uid=web.uid, pod=web, qos="LS", usage={"cpu": 100, "memory": 1 << 30}),
                PodState(uid=batch.uid, pod=batch, qos="BE", usage={"cpu": 200 + i, "memory": 2 << 30})]
        apps = [HostApp(name="nginx", qos="LS", usage={"cpu": 50, "memory": 1 << 20})]
        rep.observe(_ns(1000 + i, 8 << 30, pods, apps), START + i)
    now = START + 119
    st = rep.status(now, [web, batch], [HostApp(name="nginx")], {"nginx": {"name": "nginx", "priority": "koord-prod",
                                                                          "qos": "LS"}})
    assert st["updateTime"] == "2026-05-28T20:28:39Z"  # START (1,780,000,000 s) = 20:26:40Z, + 119 s
    nm = st["nodeMetric"]
    # avg over [now-60, now]: samples i = 59..119 → cpu 1000 + 89
    assert nm["nodeUsage"] == {"resources": {"cpu": "1089m", "memory": "8Gi"}}
    # system = node - pods - apps = 1000 + i - 100 - (200 + i) - 50 = 650 at every sample
    sys_res = nm["systemUsage"]["resources"]
    assert sys_res["cpu"] == "650m" and canonical("memory", sys_res["memory"]) == (5 << 30) - (1 << 20)
    short, long_ = nm["aggregatedNodeUsages"]
    assert short["duration"] == "1m0s" and long_["duration"] == "10m0s"
    # 61 samples 1059..1119: p90 index int(61*0.9)-1 = 53 → 1059 + 53
    assert short["usage"]["p90"]["resources"]["cpu"] == "1112m"
    assert short["usage"]["p50"]["resources"]["cpu"] == f"{1059 + int(np.float32(61) * np.float32(0.5)) - 1}m"
    assert set(short["usage"]) == {"avg", "p50", "p90", "p95", "p99"}
    # the 10-minute window has 119 s of samples: less than half of it, so koordlet reports nothing yet
    assert long_["usage"] == {k: {} for k in ("avg", "p50", "p90", "p95", "p99")}
    assert len(nm["aggregatedSystemUsages"]) == 2
    assert st["podsMetric"] == [
        {"name": "batch", "namespace": "a", "podUsage": {"resources": {"cpu": "289m", "memory": "2Gi"}},
         "priority": "koord-batch", "qos": "BE"},
        {"name": "web", "namespace": "default", "podUsage": {"resources": {"cpu": "100m", "memory": "1Gi"}},
         "priority": "koord-prod", "qos": "LS"}]
    assert st["hostApplicationMetric"] == [{"name": "nginx", "usage": {"resources": {"cpu": "50m", "memory": "1Mi"}},
                                            "priority": "koord-prod", "qos": "LS"}]
    # load_aware's reader takes exactly what was written, aggregated usages included
    info = parse_node_metric({"metadata": {"name": "n1"}, "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
                              "status": st})
    assert info.node_usage == {"cpu": 1089, "memory": 8 << 30}
    assert info.aggregated_usage(60.0, "p90") == {"cpu": 1112, "memory": 8 << 30}
    assert info.aggregated_usage(600.0, "p90") is None  # cold start
    assert info.aggregated_usage(None, "p99") == {"cpu": 1059 + int(np.float32(61) * np.float32(0.99)) - 1,
                                                  "memory": 8 << 30}
    assert info.pod_usage["a/batch"] == {"cpu": 289, "memory": 2 << 30}
    assert info.pod_priority == {"a/batch": "koord-batch", "default/web": "koord-prod"}
    assert info.update_time == float(int(now))


def test_a_pod_gone_leaves_the_series_and_no_usage_means_empty_maps():
    rep = NodeMetricReporter(CollectPolicy(), sample_interval=1.0)
    p = make_pod("web")
    rep.observe(NodeState(name="n1", pods=(PodState(uid=p.uid, pod=p, usage={"cpu": 5, "memory": 5}),)), START)
    assert f"pod/{p.uid}" in rep.store.series
    rep.observe(NodeState(name="n1"), START + 1)
    assert f"pod/{p.uid}" not in rep.store.series
    st = rep.status(START + 1, [p])
    assert st["nodeMetric"]["nodeUsage"] == {} and st["nodeMetric"]["systemUsage"] == {}
    assert "podsMetric" not in st and "hostApplicationMetric" not in st


async def test_the_agent_samples_every_round_on_its_clock(fake_node):
    """The reporter behind the agent's on_collect: one sample per round at the clock's time."""
    clock = VirtualClock(START)
    reg = Registry(profile_from_dict({})).load(only=set())
    agent = Agent(reg, CgroupLayout(fake_node.root, 1), Executor({"cgroup": fake_node.root}), interval=1.0,
                  node_name="n1", proc_root=str(fake_node.proc), sys_root=str(fake_node.sys), clock=clock)
    rep = NodeMetricReporter(CollectPolicy(aggregate_duration_seconds=60), sample_interval=agent.interval)
    agent.on_collect.append(lambda ns: rep.observe(ns, clock.now()))
    for k in range(5):
        fake_node.set_proc_stat(int(k * 2e9))  # two cores busy
        await agent.run_once()
        clock.advance(1.0)
    t, v = rep.store.series["node"].ordered()
    assert list(t) == [START + k for k in range(5)]
    assert np.isnan(v[0, 0]) and all(abs(c - 2000) <= 10 for c in v[1:, 0])
    st = rep.status(clock.now(), [])
    assert st["nodeMetric"]["nodeUsage"]["resources"]["memory"] == "16Gi"  # MemTotal - MemAvailable of the fake


@pytest.mark.parametrize("version, stat", [
    (1, "total_cache 400\ntotal_rss 100\ntotal_inactive_file 300\ntotal_active_file 100\ntotal_inactive_anon 30\n"
        "total_active_anon 60\ntotal_unevictable 10\ncache 1\n"),
    (2, "anon 100\nfile 400\ninactive_file 300\nactive_file 100\ninactive_anon 30\nactive_anon 60\nunevictable 10\n"),
])
def test_pod_memory_is_without_page_cache_as_koordlet_measures_it(tmp_path, version, stat):
    """koordlet's MemoryStatRaw.Usage: inactive_anon + active_anon + unevictable of memory.stat; the raw usage
    file where memory.stat lacks a field it needs."""
    from koordfw.agent.loop import memory_without_cache
    from koordfw.testing.cgroups import FakeNode

    node = FakeNode(tmp_path, version=version)
    rel = node.add_pod("u1", "burstable")
    node.set_memory(rel, 5000)
    lay = CgroupLayout(node.root, version)
    assert memory_without_cache(lay, rel) == 5000
    (node.ctl("memory", rel) / "memory.stat").write_text(stat)
    assert memory_without_cache(lay, rel) == 100
    (node.ctl("memory", rel) / "memory.stat").write_text(stat.replace("unevictable", "evictable"))
    assert memory_without_cache(lay, rel) == 5000


def test_pod_series_keep_only_the_aggregate_duration():
    """Pods are only averaged over aggregateDurationSeconds: their buffers are that long, the node's and
    the system's as long as the longest aggregation duration."""
    rep = NodeMetricReporter(CollectPolicy(), sample_interval=1.0)  # 300 s aggregate, durations up to 30 min
    p = make_pod("web")
    rep.observe(NodeState(name="n1", usage={"cpu": 1, "memory": 1},
                          pods=(PodState(uid=p.uid, pod=p, usage={"cpu": 5, "memory": 5}),)), START)
    assert rep.store.series["node"].capacity == 1802 and rep.store.series["system"].capacity == 1802
    assert rep.store.series[f"pod/{p.uid}"].capacity == 302
    rep.set_policy(CollectPolicy(aggregate_duration_seconds=60, durations=(120.0,)))
    assert rep.store.series["node"].capacity == 122 and rep.store.series[f"pod/{p.uid}"].capacity == 62
    assert rep.store.query("node", START, START, "avg") == ({"cpu": 1.0, "memory": 1.0}, 0.0)  # samples kept


def test_load_aware_filters_on_the_aggregated_usage_written():
    """load_aware's aggregated mode against the status the reporter writes: p90 over 1m of a node whose CPU
    ramps from 2 to 6 of 8 cores rejects at 60 %, the average (50 %) would not."""
    from koordfw.testing import ClusterBuilder, schedule

    pol = CollectPolicy(aggregate_duration_seconds=60, durations=(60.0,), duration_texts=("1m0s",))
    rep = NodeMetricReporter(pol, sample_interval=1.0)
    for i in range(61):
        rep.observe(_ns(2000 + i * 4000 // 60, 8 << 30), START + i)
    status = rep.status(START + 60, [])
    mean = sum(2000 + i * 4000 // 60 for i in range(61)) / 61
    assert status["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == f"{int(mean)}m"

    def run(args):
        b = ClusterBuilder().node("n1", cpu="8", memory="32Gi")
        b.obj({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
               "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}}, "status": status})
        b.pod("p", requests={"cpu": "100m", "memory": "1Gi"})
        profile = {"pluginConfig": {"load_aware": args}}
        return {p["name"]: p for p in schedule(b, only=["load_aware"], profile=profile).to_dict()["pods"]}["p"]

    assert run({"usageThresholds": {"cpu": 60}})["node"] == "n1"
    p = run({"aggregated": {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p90",
                            "usageAggregatedDuration": "1m"}})
    assert p["node"] is None and "cpu aggregated usage exceed threshold" in p["reason"]


def test_series_query_without_gaps_gives_the_per_column_figures():
    # a window with no missing value takes a one-pass route; it must match the per-column one exactly
    # (koordlet's avg and percentiles, and the CPU samples' time span)
    from koordfw.agent.timeseries import AGGREGATIONS, COLUMNS, Series, aggregate

    rng = np.random.default_rng(7)
    for _ in range(300):
        cap = int(rng.integers(1, 120))
        s = Series(cap)
        for k in range(int(rng.integers(1, 2 * cap + 2))):
            s.add(float(k), float(rng.random() * 1e6), float(rng.random() * 1e10))
        start, end = float(rng.integers(0, 2 * cap)), float(rng.integers(0, 3 * cap))
        t, v = s.window(start, end)
        for kind in AGGREGATIONS:
            want = None
            if len(t):
                want = ({name: aggregate(v[~np.isnan(v[:, c]), c], kind) for c, name in enumerate(COLUMNS)},
                        float(t.max() - t.min()))
            assert s.query(start, end, kind) == want


def test_rfc3339_is_utc_in_whole_seconds():
    # 1,780,000,000 s = 20,601 days (2026-05-28) + 73,600 s (20:26:40); metav1.Time drops the fraction
    assert rfc3339(1_780_000_000.0) == "2026-05-28T20:26:40Z"
    assert rfc3339(1_780_000_000.999) == "2026-05-28T20:26:40Z"
    assert rfc3339(0.0) == "1970-01-01T00:00:00Z"
