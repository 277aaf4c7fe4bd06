"""LowNodeLoad: classification, thresholds, pod order, stop conditions, budgets, PDBs, gangs, nodeFit."""

from __future__ import annotations

import pytest
from defrag_testkit import metric, moves, node, pdb, plan, pod
from koordfw_defrag.args import AnomalyCondition, NodePool
from koordfw_defrag.low_node_load import AnomalyTracker, NodeUsage, classify, pod_sort_key, thresholds

from koordfw.inputs import make_pod

GI = 1024 ** 3


def nu(name, cpu_pct, mem_pct, prod_cpu_pct=0, schedulable=True):
    alloc = {"cpu": 10000, "memory": 100 * GI, "pods": 110}
    return NodeUsage(name, alloc, {"cpu": cpu_pct * 100, "memory": mem_pct * GI, "pods": 1},
                     {"cpu": prod_cpu_pct * 100, "memory": 0, "pods": 0}, {}, schedulable)


@pytest.mark.parametrize("usage, expect", [
    # (cpu %, mem %) → category
    ((10, 10), "low"),
    ((30, 30), "low"),            # ≤ low threshold counts as under
    ((31, 10), "none"),           # one resource above low: not under, not over
    ((71, 10), "source"),         # any resource over high
    ((10, 71), "source"),
    ((70, 70), "none"),           # = high is not over
])
def test_classification_absolute(usage, expect):
    pool = NodePool(name="p", low_thresholds={"cpu": 30, "memory": 30}, high_thresholds={"cpu": 70, "memory": 70})
    c, _, _ = classify(pool, [nu("n", *usage)])
    got = "low" if c.low else "source" if c.sources else "none"
    assert got == expect


def test_unschedulable_node_is_never_low():
    pool = NodePool(name="p", low_thresholds={"cpu": 30}, high_thresholds={"cpu": 70})
    c, _, _ = classify(pool, [nu("n", 5, 5, schedulable=False)])
    assert c.low == [] and c.both_low == []


def test_missing_resource_gets_100_percent_and_memory_is_always_added():
    pool = NodePool(name="p", low_thresholds={"cpu": 30}, high_thresholds={"cpu": 70})
    th = thresholds(pool, [nu("n", 0, 0)])
    low, high = th["n"]
    assert set(low) == {"cpu", "memory"}
    assert low["cpu"] == 3000 and high["cpu"] == 7000
    assert low["memory"] == high["memory"] == 100 * GI


@pytest.mark.parametrize("cpus, low, high, expect_low, expect_src", [
    # mean 50 %: low = 50-20 = 30 %, high = 50+20 = 70 %
    ((10, 50, 90), 20, 20, ["a"], ["c"]),
    ((40, 50, 60), 20, 20, [], []),
    # low 0 = "at capacity" in deviation mode: every node is under
    ((10, 50, 90), 0, 20, ["a", "b", "c"], ["c"]),
])
def test_deviation_thresholds(cpus, low, high, expect_low, expect_src):
    pool = NodePool(name="p", use_deviation_thresholds=True, low_thresholds={"cpu": low},
                    high_thresholds={"cpu": high})
    nodes = [nu(n, c, 5) for n, c in zip("abc", cpus)]
    c, th, _ = classify(pool, nodes)
    assert sorted(c.low) == expect_low
    assert c.sources == expect_src
    # memory is not in the maps: ignored (threshold = capacity) in deviation mode
    assert th["a"][1]["memory"] == 100 * GI


def test_prod_categories():
    pool = NodePool(name="p", low_thresholds={"cpu": 30}, high_thresholds={"cpu": 70},
                    prod_low_thresholds={"cpu": 20}, prod_high_thresholds={"cpu": 50})
    nodes = [nu("both", 10, 5, 5), nu("lowonly", 25, 5, 25), nu("prodhigh", 60, 5, 55), nu("prodlow", 50, 5, 10)]
    c, _, _ = classify(pool, nodes)
    assert c.both_low == ["both"]
    assert c.low == ["lowonly"]
    assert c.prod_high == ["prodhigh"]
    assert c.prod_low == ["prodlow"]
    assert c.sources == []


def _p(name, **kw):
    labels = kw.pop("labels", {})
    ann = kw.pop("annotations", {})
    created = kw.pop("created", None)
    p = make_pod(name, labels=labels, annotations=ann, requests={"cpu": "1"} if not kw.pop("be", False) else None,
                 **kw)
    if created is not None:
        import attrs
        p = attrs.evolve(p, creation_timestamp=created)
    return p


def test_pod_order_table():
    pods = [
        _p("prod", labels={"koordinator.sh/priority-class": "koord-prod"}),
        _p("none-class"),
        _p("free", labels={"koordinator.sh/priority-class": "koord-free"}),
        _p("batch-hi", labels={"koordinator.sh/priority-class": "koord-batch"}, priority=5900),
        _p("batch-lo", labels={"koordinator.sh/priority-class": "koord-batch"}, priority=5100),
        _p("mid", labels={"koordinator.sh/priority-class": "koord-mid"}),
    ]
    order = sorted(pods, key=lambda p: pod_sort_key(p, {}, [], {}, {}))
    assert [p.name for p in order] == ["free", "batch-lo", "batch-hi", "mid", "prod", "none-class"]


@pytest.mark.parametrize("a, b", [
    # (evicted first, evicted later), all else equal
    (dict(be=True), dict()),                                                     # BestEffort < Burstable
    (dict(labels={"koordinator.sh/qosClass": "BE"}), dict(labels={"koordinator.sh/qosClass": "LS"})),
    (dict(labels={"koordinator.sh/qosClass": "LSR"}), dict(labels={"koordinator.sh/qosClass": "LSE"})),
    (dict(labels={"koordinator.sh/qosClass": "LSE"}), dict()),                   # label absent = none, last
    (dict(annotations={"controller.kubernetes.io/pod-deletion-cost": "-5"}), dict()),
    (dict(annotations={"scheduling.koordinator.sh/eviction-cost": "1"}),
     dict(annotations={"scheduling.koordinator.sh/eviction-cost": "9"})),
    (dict(created=200.0), dict(created=100.0)),                                  # newer first
])
def test_pod_order_tie_breakers(a, b):
    pa, pb = _p("a", **a), _p("b", **b)
    ka, kb = pod_sort_key(pa, {}, [], {}, {}), pod_sort_key(pb, {}, [], {}, {})
    assert ka < kb


def test_higher_usage_of_over_resources_first():
    pa, pb = _p("a"), _p("b")
    alloc = {"cpu": 10000}
    ka = pod_sort_key(pa, {"cpu": 3000}, ["cpu"], alloc, {})
    kb = pod_sort_key(pb, {"cpu": 1000}, ["cpu"], alloc, {})
    assert ka < kb


def test_anomaly_tracker_consecutive_and_reset():
    t = AnomalyTracker()
    cond = AnomalyCondition(timeout="1m", consecutive_abnormalities=3, consecutive_normalities=2)
    k = ("p", False, "n")
    assert [t.mark(k, True, s, cond) for s in (0, 10, 20)] == [False, False, True]
    assert t.mark(k, False, 30, cond) is False
    assert t.mark(k, True, 40, cond) is True          # one normal round does not reset
    t.mark(k, False, 50, cond)
    t.mark(k, False, 60, cond)                        # two normal rounds do
    assert t.mark(k, True, 70, cond) is False
    assert t.mark(k, True, 500, cond) is False        # timed out: counting starts again


# -- planning through the plugin --------------------------------------------------------------------

def hot_cold(extra_pods=(), hot_pods=None, objs=()):
    """hot: 9 of 10 cores used; cold: 1 core; warm: 5 cores (neither low nor over)."""
    hot_pods = hot_pods if hot_pods is not None else {
        "default/batch": ("3", "10Gi"), "default/prod": ("3", "10Gi"), "default/mid": ("3", "10Gi")}
    pods = [pod("batch", "hot", labels={"koordinator.sh/priority-class": "koord-batch"}, priority=5500),
            pod("prod", "hot", labels={"koordinator.sh/priority-class": "koord-prod"}, priority=9500),
            pod("mid", "hot", labels={"koordinator.sh/priority-class": "koord-mid"}, priority=7500),
            pod("c1", "cold"), pod("w1", "warm")]
    return [node("hot"), node("cold"), node("warm"), *pods, *extra_pods,
            metric("hot", hot_pods), metric("cold", {"default/c1": ("1", "5Gi")}),
            metric("warm", {"default/w1": ("5", "5Gi")}), *objs]


def test_hot_node_drained_lowest_class_first_until_under_high(lnl):
    out = plan(hot_cold(), {"lowNodeLoad": lnl})
    # 9 cores > 7: evicting batch (3) brings hot to 6 ≤ 7, so only batch moves, to the cold node
    assert moves(out) == [("default/batch", "hot", "cold")]
    assert out["migrations"][0]["plugin"] == "low_node_load"
    assert out["before"]["lowNodeLoad"]["__default_node_pool__"]["over"] == 1
    assert out["after"]["lowNodeLoad"]["__default_node_pool__"]["over"] == 0


def test_memory_exhaustion_stop(lnl):
    # the cold node has 10 Gi: memory headroom = 70 % of 10 Gi − 2.5 Gi used = 4.5 Gi; the first eviction
    # (5 Gi) exhausts it, so the hot node, still over on cpu, keeps its other pods
    pods = {"default/batch": ("1", "5Gi"), "default/prod": ("1", "5Gi"), "default/mid": ("8", "5Gi")}
    objs = [o for o in hot_cold(hot_pods=pods)
            if not (o["kind"] == "NodeMetric" and o["metadata"]["name"] == "cold")
            and not (o["kind"] == "Node" and o["metadata"]["name"] == "cold")]
    objs += [node("cold", memory="10Gi"), metric("cold", {"default/c1": ("1", "2.5Gi")})]
    out = plan(objs, {"lowNodeLoad": dict(lnl, nodeFit=False)})
    assert moves(out) == [("default/batch", "hot", "cold")]
    assert any("headroom exhausted (memory)" in n for n in out["notes"])


def test_node_fit_usage_headroom(lnl):
    # cold uses 2 cores (high 7): batch (5.5 cores) does not fit there, mid (2) does and suffices
    pods = {"default/batch": ("5.5", "1Gi"), "default/prod": ("0.5", "1Gi"), "default/mid": ("2", "1Gi")}
    objs = [o for o in hot_cold(hot_pods=pods) if not (o["kind"] == "NodeMetric" and o["metadata"]["name"] == "cold")]
    objs.append(metric("cold", {"default/c1": ("2", "1Gi")}))
    out = plan(objs, {"lowNodeLoad": lnl})
    assert moves(out) == [("default/mid", "hot", "cold")]


def test_node_fit_scheduler_filters(lnl):
    # the batch pod only runs on nodes labelled disk=ssd: no target has it, so the next pod moves
    objs = hot_cold()
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"] == "batch":
            o["spec"]["nodeSelector"] = {"disk": "ssd"}
    out = plan(objs, {"lowNodeLoad": lnl})
    assert moves(out) == [("default/mid", "hot", "cold")]


@pytest.mark.parametrize("kind, patch", [
    ("daemonset", lambda o: o["metadata"]["ownerReferences"][0].update(kind="DaemonSet")),
    ("mirror", lambda o: o["metadata"]["annotations"].update({"kubernetes.io/config.mirror": "x"})),
    ("critical", lambda o: o["spec"].update(priorityClassName="system-node-critical")),
    ("critical-priority", lambda o: o["spec"].update(priority=2000000000)),
    ("emptydir", lambda o: o["spec"].update(volumes=[{"name": "v", "emptyDir": {}}])),
    ("hostpath", lambda o: o["spec"].update(volumes=[{"name": "v", "hostPath": {"path": "/x"}}])),
])
def test_never_evicted(lnl, kind, patch):
    objs = hot_cold()
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"] == "batch":
            patch(o)
    out = plan(objs, {"lowNodeLoad": lnl})
    assert "default/batch" not in [m[0] for m in moves(out)]
    assert moves(out) == [("default/mid", "hot", "cold")]


def test_pdb_respected(lnl):
    objs = hot_cold()
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"] == "batch":
            o["metadata"]["labels"]["app"] = "guarded"
    out = plan(objs + [pdb("guard", {"app": "guarded"}, 0)], {"lowNodeLoad": lnl})
    assert moves(out) == [("default/mid", "hot", "cold")]
    out = plan(objs + [pdb("guard", {"app": "guarded"}, 1)], {"lowNodeLoad": lnl})
    assert moves(out) == [("default/batch", "hot", "cold")]


def test_round_budget_and_namespace_filter(lnl):
    # hot at 9.9 cores with high 7: needs two moves (batch 3 → 6.9), the budget allows one
    pods = {"default/batch": ("2", "1Gi"), "default/prod": ("4.9", "1Gi"), "default/mid": ("3", "1Gi")}
    out = plan(hot_cold(hot_pods=pods), {"lowNodeLoad": lnl, "maxMigratingPerRound": 1})
    assert moves(out) == [("default/batch", "hot", "cold")]
    out = plan(hot_cold(hot_pods=pods), {"lowNodeLoad": lnl})
    assert moves(out) == [("default/batch", "hot", "cold"), ("default/mid", "hot", "cold")]
    out = plan(hot_cold(hot_pods=pods), {"lowNodeLoad": dict(lnl, evictableNamespaces={"exclude": ["default"]})})
    assert moves(out) == []


def test_per_namespace_budget(lnl):
    pods = {"default/batch": ("2", "1Gi"), "default/prod": ("4.9", "1Gi"), "default/mid": ("3", "1Gi")}
    out = plan(hot_cold(hot_pods=pods), {"lowNodeLoad": lnl, "maxMigratingPerNamespace": 1})
    assert moves(out) == [("default/batch", "hot", "cold")]


def test_strict_gang_moves_whole_or_not_at_all(lnl):
    gang = {"gang.scheduling.koordinator.sh/name": "g", "gang.scheduling.koordinator.sh/min-available": "2"}
    objs = hot_cold()
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"] == "batch":
            o["metadata"]["annotations"].update(gang)
    # the other member sits on the warm node; both fit on cold (1 + 3 + 2 cores, 10 cpu)
    member = pod("batch-2", "warm", cpu="2", annotations=dict(gang))
    out = plan(objs + [member], {"lowNodeLoad": lnl})
    assert sorted(moves(out)) == [("default/batch", "hot", "cold"), ("default/batch-2", "warm", "cold")]
    # a budget of one cannot move the gang: the next pod moves instead
    out = plan(objs + [member], {"lowNodeLoad": lnl, "maxMigratingPerRound": 1})
    assert moves(out) == [("default/mid", "hot", "cold")]
    # NonStrict gangs move member by member
    ns_gang = dict(gang, **{"gang.scheduling.koordinator.sh/mode": "NonStrict"})
    for o in objs:
        if o["kind"] == "Pod" and o["metadata"]["name"] == "batch":
            o["metadata"]["annotations"] = dict(ns_gang)
    member = pod("batch-2", "warm", cpu="2", annotations=dict(ns_gang))
    out = plan(objs + [member], {"lowNodeLoad": lnl, "maxMigratingPerRound": 1})
    assert moves(out) == [("default/batch", "hot", "cold")]


def test_targets_reserved_within_one_plan(lnl):
    # two hot nodes, one cold node with room (by request) for one 6-core pod only
    objs = [node("h1"), node("h2"), node("cold"), node("warm"),
            pod("a", "h1", cpu="6"), pod("b", "h2", cpu="6"), pod("h1x", "h1", cpu="2"), pod("h2x", "h2", cpu="2"),
            pod("w", "warm", cpu="5"),
            metric("h1", {"default/a": ("6", "1Gi"), "default/h1x": ("2", "1Gi")}),
            metric("h2", {"default/b": ("6", "1Gi"), "default/h2x": ("2", "1Gi")}),
            metric("cold", {}), metric("warm", {"default/w": ("5", "1Gi")})]
    out = plan(objs, {"lowNodeLoad": dict(lnl, highThresholds={"cpu": 75, "memory": 70})})
    targets = [m["to"] for m in out["migrations"]]
    # whatever moves, the cold node never gets more than its 10 cores of requests
    assert sum(6 if m["pod"].endswith(("/a", "/b")) else 2 for m in out["migrations"] if m["to"] == "cold") <= 10
    assert targets and all(t == "cold" for t in targets)


@pytest.mark.parametrize("args, note", [
    ({"numberOfNodes": 1}, "numberOfNodes"),
    ({"lowThresholds": {"cpu": 95, "memory": 95}, "highThresholds": {"cpu": 96, "memory": 96}},
     "no node over"),
])
def test_stop_conditions(lnl, args, note):
    out = plan(hot_cold(), {"lowNodeLoad": dict(lnl, **args)})
    assert moves(out) == []
    assert any(note in n for n in out["notes"])


def test_no_low_nodes():
    out = plan(hot_cold(), {"lowNodeLoad": {"lowThresholds": {"cpu": 5}, "highThresholds": {"cpu": 70},
                                            "anomalyCondition": {"consecutiveAbnormalities": 1}}})
    assert moves(out) == [] and any("no node under" in n for n in out["notes"])


def test_expired_metric_skips_node(lnl):
    objs = [o for o in hot_cold() if not (o["kind"] == "NodeMetric" and o["metadata"]["name"] == "hot")]
    objs.append(metric("hot", {"default/batch": ("3", "1Gi"), "default/prod": ("3", "1Gi"),
                               "default/mid": ("3", "1Gi")}, updated="2026-11-20T09:00:00Z"))
    out = plan(objs, {"lowNodeLoad": lnl})
    assert moves(out) == []


def test_consecutive_abnormalities_across_rounds(lnl):
    args = {"lowNodeLoad": dict(lnl, anomalyCondition={"consecutiveAbnormalities": 2})}
    assert moves(plan(hot_cold(), args, rounds=1)) == []
    assert moves(plan(hot_cold(), args, rounds=2)) == [("default/batch", "hot", "cold")]


def test_node_pools(lnl):
    # only the pool "gpu" (its nodes labelled) is balanced, with its own thresholds
    objs = hot_cold()
    for o in objs:
        if o["kind"] == "Node":
            o["metadata"]["labels"]["pool"] = "a"
    pools = [{"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}}, "lowThresholds": {"cpu": 30},
              "highThresholds": {"cpu": 95}, "anomalyCondition": {"consecutiveAbnormalities": 1}}]
    assert moves(plan(objs, {"lowNodeLoad": {"nodePools": pools}})) == []
    pools[0]["highThresholds"] = {"cpu": 70}
    assert moves(plan(objs, {"lowNodeLoad": {"nodePools": pools}})) == [("default/batch", "hot", "cold")]


def test_dry_run_plans_but_returns_nothing_to_the_engine(lnl):
    from koordfw.testing import ClusterBuilder, schedule

    b = ClusterBuilder()
    b.obj(*hot_cold())
    res = schedule(b, profile={"pluginConfig": {"defrag": {"lowNodeLoad": dict(lnl, dryRun=True)}}},
                   only=["defrag"], deschedule=True)
    assert res.migrations == []
    assert res.placements()["default/batch"] == "hot"
    res = schedule(b, profile={"pluginConfig": {"defrag": {"lowNodeLoad": lnl}}}, only=["defrag"], deschedule=True)
    assert [(m.pod, m.to) for m in res.migrations] == [("default/batch", "cold")]
    assert res.placements()["default/batch"] == "cold"


def test_bad_config_names_the_field():
    from koordfw import ConfigError
    from koordfw.engines.embedded import build_registry

    with pytest.raises(ConfigError) as e:
        build_registry({"pluginConfig": {"defrag": {"lowNodeLoad": {"lowThresholds": {"cpu": 130}}}}},
                       autoload=True, only={"defrag"})
    assert "pluginConfig.defrag" in str(e.value) and "percent 130 outside 0..100" in str(e.value)
