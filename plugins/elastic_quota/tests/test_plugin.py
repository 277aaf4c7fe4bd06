"""The hooks in the embedded scheduler: admission, preemption of borrowers only, the revoker, the report."""

import pytest
from elastic_quota_testkit import NAME, PREEMPTIBLE, eq
from koordfw_elastic_quota import Args, ElasticQuota

from koordfw.core.clock import VirtualClock
from koordfw.testing import ClusterBuilder, schedule

ONLY = ["elastic_quota"]


def placements(res):
    return res.placements()


def reasons(res):
    return {p["name"]: p["reason"] for p in res.to_dict()["pods"] if p["phase"] != "Bound"}


# -- benign default -------------------------------------------------------------------------------
def test_no_quota_objects_changes_nothing():
    def build():
        b = ClusterBuilder().node("n1", cpu="4").node("n2", cpu="2")
        for i in range(8):
            b.pod(f"p{i}", "ns", cpu="1", priority=i % 3, labels={NAME: "ghost"} if i % 2 else None)
        return b
    with_plugin = schedule(build(), only=ONLY, seed=1)
    without = schedule(build(), only=[], seed=1)
    assert placements(with_plugin) == placements(without)
    assert "quotas" not in with_plugin.to_dict()


# -- admission --------------------------------------------------------------------------------------
@pytest.mark.parametrize("case, quotas, pods, bound, pending", [
    ("within max", [eq("a", min={"cpu": 1}, max={"cpu": 3})],
     [("p0", "a", "1", {}), ("p1", "a", "1", {})], {"p0", "p1"}, {}),
    ("over max", [eq("a", min={"cpu": 1}, max={"cpu": 2})],
     [("p0", "a", "1", {}), ("p1", "a", "1", {}), ("p2", "a", "1", {})], {"p0", "p1"},
     {"p2": "Insufficient quota a: cpu used 2 + request 1 > runtime 2"}),
    ("non-preemptible only within min", [eq("a", min={"cpu": 1}, max={"cpu": 4})],
     [("p0", "a", "1", {PREEMPTIBLE: "false"}), ("p1", "a", "1", {PREEMPTIBLE: "false"}), ("p2", "a", "1", {})],
     {"p0", "p2"}, {"p1": "Insufficient non-preemptible quota a: cpu non-preemptible used 1 + request 1 > min 1"}),
    ("unknown quota label → default quota", [eq("a", max={"cpu": 1})],
     [("p0", "nope", "2", {}), ("p1", None, "2", {})], {"p0", "p1"}, {}),
    ("invalid quota: pods held, others work",
     [eq("bad", min={"cpu": 3}, max={"cpu": 2}), eq("a", max={"cpu": 2})],
     [("p0", "bad", "1", {}), ("p1", "a", "1", {})], {"p1"},
     {"p0": "the pod's quota is invalid: ElasticQuota quotas/bad: min > max for cpu (min 3 > max 2)"}),
    ("memory masked out when max has no memory", [eq("a", max={"cpu": 4})],
     [("p0", "a", "1", {})], {"p0"}, {}),
])
def test_admission(case, quotas, pods, bound, pending):
    b = ClusterBuilder().node("n1", cpu="8").obj(*quotas)
    for name, quota, cpu, labels in pods:
        lab = dict(labels)
        if quota:
            lab[NAME] = quota
        b.pod(name, cpu=cpu, memory="1Gi", labels=lab)
    res = schedule(b, only=ONLY)
    got = placements(res)
    assert {k.split("/")[1] for k, v in got.items() if v} == bound
    rs = reasons(res)
    for name, reason in pending.items():
        assert reason in rs[name]


def test_namespace_quota_and_runtime_limits_the_borrower():
    # team-a's quota lives in namespace team-a: its pods need no label. b has pending demand, so a may
    # use only min + its share of what is left.
    b = (ClusterBuilder().node("n1", cpu="10")
         .obj(eq("qa", min={"cpu": 2}, max={"cpu": 10}, namespace="team-a"),
              eq("qb", min={"cpu": 4}, max={"cpu": 10}, namespace="team-b")))
    for i in range(10):
        b.pod(f"a{i}", "team-a", cpu="1", priority=10)  # higher priority: scheduled first
    for i in range(4):
        b.pod(f"b{i}", "team-b", cpu="1")
    res = schedule(b, only=ONLY)
    got = placements(res)
    assert sum(1 for k, v in got.items() if k.startswith("team-a/") and v) == 6
    assert sum(1 for k, v in got.items() if k.startswith("team-b/") and v) == 4
    q = {e["name"]: e for e in res.to_dict()["quotas"]}
    assert q["qa"]["runtime"] == {"cpu": "6"} and q["qa"]["used"]["cpu"] == "6"
    assert q["qb"]["runtime"] == {"cpu": "4"}
    assert q["qa"]["request"]["cpu"] == "10"


# -- preemption -------------------------------------------------------------------------------------
def test_preemption_takes_lower_priority_pods_of_the_same_quota_only():
    b = (ClusterBuilder().node("n1", cpu="4")
         .obj(eq("a", min={"cpu": 1}, max={"cpu": 2}), eq("b", min={"cpu": 1}, max={"cpu": 4})))
    b.pod("a-low", cpu="1", priority=1, node="n1", labels={NAME: "a"})
    b.pod("a-keep", cpu="1", priority=1, node="n1", labels={NAME: "a", PREEMPTIBLE: "false"})
    b.pod("b-low", cpu="1", priority=0, node="n1", labels={NAME: "b"})
    b.pod("def-low", cpu="1", priority=0, node="n1")
    b.pod("a-high", cpu="1", priority=100, labels={NAME: "a"})
    res = schedule(b, only=ONLY)
    got = placements(res)
    assert got["default/a-high"] == "n1"
    assert got["default/a-low"] is None  # the only preemptible lower-priority pod of quota a
    assert got["default/a-keep"] == "n1" and got["default/b-low"] == "n1" and got["default/def-low"] == "n1"
    assert "Insufficient quota a" in reasons(res)["a-low"]


def test_default_quota_pods_do_not_preempt_by_quota():
    b = ClusterBuilder().node("n1", cpu="4").obj(eq("a", max={"cpu": 4}), eq(
        "koordinator-default-quota", max={"cpu": 1}))
    b.pod("d-low", cpu="1", priority=1, node="n1")
    b.pod("d-high", cpu="1", priority=100)
    res = schedule(b, only=ONLY)
    assert placements(res) == {"default/d-low": "n1", "default/d-high": None}
    assert "Insufficient quota koordinator-default-quota" in reasons(res)["d-high"]


def test_preemption_never_below_what_the_preemptor_needs():
    # the victims must free enough quota: one 1-cpu victim cannot make room for a 2-cpu pod when
    # only one victim is of lower priority
    b = ClusterBuilder().node("n1", cpu="8").obj(eq("a", max={"cpu": 2}))
    b.pod("a-low", cpu="1", priority=1, node="n1", labels={NAME: "a"})
    b.pod("a-mid", cpu="1", priority=50, node="n1", labels={NAME: "a"})
    b.pod("a-high", cpu="2", priority=50, labels={NAME: "a"})
    res = schedule(b, only=ONLY)
    got = placements(res)
    assert got["default/a-low"] == "n1" and got["default/a-mid"] == "n1" and got["default/a-high"] is None


# -- the revoker -------------------------------------------------------------------------------------
class FakeHandle:
    def __init__(self, cluster, clock):
        self.cluster, self.clock = cluster, clock


def over_used_cluster():
    """a borrowed 6 cpu of b's share (12 bound, runtime 8 once b's 8 pending pods count)."""
    b = (ClusterBuilder().node("n1", cpu="8").node("n2", cpu="8")
         .obj(eq("a", min={"cpu": 6}, max={"cpu": 16}), eq("b", min={"cpu": 10}, max={"cpu": 16})))
    for i in range(12):
        lab = {NAME: "a"}
        if i == 0:
            lab[PREEMPTIBLE] = "false"
        b.pod(f"a{i:02d}", cpu="1", priority=i % 3, node="n1" if i < 6 else "n2", labels=lab)
    for i in range(8):
        b.pod(f"b{i}", cpu="1", priority=100, labels={NAME: "b"})
    return b.build().to_cluster()


def test_revoker_waits_for_the_delay_then_evicts_least_important():
    cluster = over_used_cluster()
    clock = VirtualClock(1000.0)
    h = FakeHandle(cluster, clock)
    plugin, args = ElasticQuota(), Args()
    assert plugin.tree(cluster, args).states["a"].runtime == {"cpu": 8_000, **{
        k: v for k, v in plugin.tree(cluster, args).states["a"].runtime.items() if k != "cpu"}}
    assert plugin.deschedule(cluster, args, h) is None  # over-use observed, clock starts
    clock.advance(120)
    assert plugin.deschedule(cluster, args, h) is None  # not *longer* than the delay yet
    clock.advance(1)
    plan = plugin.deschedule(cluster, args, h)
    # 4 cpu over: the four least important preemptible pods (priority 0, then 1; equal start times
    # by name); a00 (priority 0) is non-preemptible and stays
    assert [m.pod for m in plan] == ["default/a03", "default/a06", "default/a09", "default/a01"]
    assert {m.from_node for m in plan} == {"n1", "n2"}
    assert all(m.to is None and m.plugin == "elastic_quota" and "elastic quota a over its runtime" in m.reason
               for m in plan)


def test_revoker_timer_resets_when_use_falls_back():
    cluster = over_used_cluster()
    clock = VirtualClock(0.0)
    h = FakeHandle(cluster, clock)
    plugin, args = ElasticQuota(), Args(delay_evict_time=30)
    plugin.deschedule(cluster, args, h)
    clock.advance(20)
    # b's pending pods go away: a is within its runtime again
    for i in range(8):
        cluster.remove_pod(cluster.pod_by_key(f"default/b{i}").uid)
    assert plugin.deschedule(cluster, args, h) is None
    clock.advance(25)
    assert plugin.deschedule(cluster, args, h) is None


def test_revoker_off_without_monitor_all_quotas():
    cluster = over_used_cluster()
    clock = VirtualClock(0.0)
    plugin = ElasticQuota()
    args = Args(monitor_all_quotas=False)
    plugin.deschedule(cluster, args, FakeHandle(cluster, clock))
    clock.advance(1000)
    assert plugin.deschedule(cluster, args, FakeHandle(cluster, clock)) is None


@pytest.mark.parametrize("used, runtime, pods, evicted", [
    # remove from the least important until it fits, then give back the most important that fit
    ({"cpu": 5}, {"cpu": 3}, [("p1", 1, 2), ("p2", 2, 1), ("p3", 3, 2)], ["p1"]),
    ({"cpu": 5}, {"cpu": 2}, [("p1", 1, 2), ("p2", 2, 1), ("p3", 3, 2)], ["p1", "p2"]),
    # p1 (2) and p2 (1) are taken off to reach 2; p2 fits back (2+1 <= 3)... only the 2-cpu one goes
    ({"cpu": 5}, {"cpu": 3}, [("p1", 1, 1), ("p2", 2, 2), ("p3", 3, 2)], ["p2"]),
    ({"cpu": 3}, {"cpu": 3}, [("p1", 1, 3)], []),
])
def test_revoke_list(used, runtime, pods, evicted):
    from koordfw.inputs import make_pod

    objs = [make_pod(n, requests={"cpu": str(c)}, priority=prio) for n, prio, c in pods]
    used = {k: v * 1000 for k, v in used.items()}
    runtime = {k: v * 1000 for k, v in runtime.items()}
    got = ElasticQuota.revoke_list(objs, used, runtime, ["cpu"])
    assert sorted(p.name for p in got) == sorted(evicted)


# -- args -------------------------------------------------------------------------------------------
def test_args_reject_bad_default_max():
    from koordfw import ConfigError, build_registry

    with pytest.raises(ConfigError, match="defaultQuotaGroupMax"):
        build_registry({"pluginConfig": {"elastic_quota": {"defaultQuotaGroupMax": {"cpu": "x"}}}},
                       autoload=True, only={"elastic_quota"})
