"""Table tests of the eviction plugin, with the facts of Koordinator's memoryevict/cpuevict tests."""

from __future__ import annotations

import json

import pytest
from koordfw_eviction import (
    BE_CPU_EVICT,
    BE_MEMORY_EVICT,
    Args,
    BESample,
    Live,
    be_cpu_sample,
    cpu_to_release,
    eviction_policy_allowed,
    memory_to_release,
    plan,
    plan_cpu,
    plan_memory,
    release_by_satisfaction,
    sorted_be_cpu_pods,
    usage_high_enough,
)

from koordfw.core.nodestate import NodeState


def pod(name, qos, priority=None, mem=None, cpu=None, batch_cpu=None, annotations=None, deleting=False,
        kube="besteffort"):
    meta = {"name": name, "namespace": "ns", "uid": name, "labels": {}, "annotations": annotations or {}}
    if qos:
        meta["labels"]["koordinator.sh/qosClass"] = qos
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    res = {}
    if batch_cpu is not None:
        res = {"requests": {"kubernetes.io/batch-cpu": str(batch_cpu)}, "limits": {"kubernetes.io/batch-cpu": str(batch_cpu)}}
    if kube == "burstable":
        res = {"requests": {"cpu": "1", **res.get("requests", {})}}
    spec = {"containers": [{"name": "main", "resources": res}]}
    if priority is not None:
        spec["priority"] = priority
    usage = {}
    if mem is not None:
        usage["memory"] = mem
    if cpu is not None:
        usage["cpu"] = cpu
    return {"metadata": meta, "spec": spec, "uid": name, "usage": usage}


def state(pods, mem_capacity="120G", mem_used="115G", cpu="80", config=None, cgroups=None, allocatable=None):
    node = {"name": "n1", "capacity": {"cpu": cpu, "memory": mem_capacity}, "usage": {"memory": mem_used}}
    if allocatable:
        node["allocatable"] = allocatable
    return NodeState.from_state_file({"node": node, "pods": pods, "cgroups": cgroups or {}, "config": config or {}})


# Test_memoryEvict: node 80 CPUs / 120G, used 115G (95 %), pods and their usage
KOORD_PODS = [
    pod("test-lsr-pod", "LSR", 1000, "40G", kube="burstable"),
    pod("test-ls-pod", "LS", 500, "30G", kube="burstable"),
    pod("test-noqos-pod", "", 100, "10G", kube="burstable"),
    pod("test-be-pod-priority100-1", "BE", 100, "5G"),
    pod("test-be-pod-priority100-2", "BE", 100, "20G"),
    pod("test-be-pod-priority120", "BE", 120, "10G"),
]


@pytest.mark.parametrize("name, used, threshold, lower, expect", [
    ("test_memory_under_evict_line", "80G", 80, None, []),
    ("MemoryEvictThresholdPercent_sort_by_priority_and_usage_82", "115G", 82, None, ["test-be-pod-priority100-2"]),
    ("MemoryEvictThresholdPercent_80", "115G", 80, None, ["test-be-pod-priority100-2", "test-be-pod-priority100-1"]),
    ("MemoryEvictThresholdPercent_50", "115G", 50, None,
     ["test-be-pod-priority100-2", "test-be-pod-priority100-1", "test-be-pod-priority120"]),
    ("MemoryEvictLowerPercent_80", "115G", 82, 80, ["test-be-pod-priority100-2"]),
    ("MemoryEvictLowerPercent_78", "115G", 82, 78, ["test-be-pod-priority100-2", "test-be-pod-priority100-1"]),
])
def test_be_memory_evict_koordinator_table(name, used, threshold, lower, expect):
    args = Args(memory_evict_threshold_percent=threshold, memory_evict_lower_percent=lower)
    got = plan_memory(state(KOORD_PODS, mem_used=used), args)
    assert [e.pod_uid for e in got] == expect
    assert all(e.pod == f"ns/{e.pod_uid}" for e in got)
    assert all(e.reason.startswith("trigger by koordlet feature BEMemoryEvict") for e in got)


def test_memory_release_amount():
    # 115G of 120G is 95 % (integer); lower 80 → 120G × 15 // 100
    assert memory_to_release(state([], mem_used="115G"), Args(memory_evict_threshold_percent=82)) == (18 * 10**9, 95)
    assert memory_to_release(state([], mem_used="115G", mem_capacity="0"), Args()) == (0, 0)
    ns = NodeState.from_state_file({"node": {"capacity": {"memory": "1Gi"}}})
    assert memory_to_release(ns, Args()) == (0, 0)  # no usage: no release


def test_memory_sort_without_usage_and_priority():
    # usage 0 sorts after usage; two without usage by name descending; nil priority compares by usage
    pods = [pod("a", "BE", None, None), pod("b", "BE", None, None), pod("c", "BE", None, "1Gi"), pod("d", "BE", 5, "2Gi")]
    got = plan_memory(state(pods, mem_capacity="10Gi", mem_used="9Gi"), Args())
    assert [e.pod_uid for e in got] == ["d", "c"]  # 3 GiB reaches 10Gi × (90 − 68) // 100


def test_never_ls_and_lsr_even_when_be_is_not_enough():
    got = plan_memory(state(KOORD_PODS, mem_used="119G"), Args(memory_evict_threshold_percent=10))
    assert {e.pod_uid for e in got} == {"test-be-pod-priority100-1", "test-be-pod-priority100-2", "test-be-pod-priority120"}


def test_memory_eviction_is_on_by_default_and_can_be_switched_off():
    assert Args().memory_evict_enable and Args().memory_evict_threshold_percent == 70
    assert Args().memory_lower_percent == 68
    assert plan_memory(state(KOORD_PODS), Args(memory_evict_enable=False)) == []


@pytest.mark.parametrize("annotations, allowed", [
    ({}, True),
    ({"koordinator.sh/eviction-policy": json.dumps([BE_MEMORY_EVICT])}, True),
    ({"koordinator.sh/eviction-policy": json.dumps([BE_CPU_EVICT])}, False),
    ({"koordinator.sh/eviction-policy": "not json"}, False),
])
def test_eviction_policy_annotation(annotations, allowed):
    assert eviction_policy_allowed(BE_MEMORY_EVICT, annotations) is allowed
    pods = [pod("be", "BE", 1, "5G", annotations=annotations)]
    assert bool(plan_memory(state(pods), Args())) is allowed


def test_terminating_and_planned_pods_count_as_releasing():
    pods = [pod("p1", "BE", 100, "20G", deleting=True), pod("p2", "BE", 100, "5G"), pod("p3", "BE", 120, "10G")]
    # 20.4G to release at threshold 80: p1 (terminating) counts 20G, p2 is still needed, p3 is not
    assert [e.pod_uid for e in plan_memory(state(pods), Args(memory_evict_threshold_percent=80), {"p1"})] == ["p2"]
    assert [e.pod_uid for e in plan(state(pods), Args(memory_evict_threshold_percent=80))] == ["p2"]


@pytest.mark.parametrize("kw, message", [
    ({"memory_evict_threshold_percent": 80, "memory_evict_lower_percent": 90}, "memoryEvictLowerPercent"),
    ({"memory_evict_threshold_percent": 80, "memory_evict_lower_percent": 80}, "memoryEvictLowerPercent"),
    ({"memory_evict_threshold_percent": 101}, "memoryEvictThresholdPercent"),
    ({"memory_evict_threshold_percent": -1}, "memoryEvictThresholdPercent"),
    ({"cpu_evict_BE_satisfaction_lower_percent": 61}, "cpuEvictBESatisfactionLowerPercent"),
    ({"cpu_evict_BE_satisfaction_lower_percent": 0}, "cpuEvictBESatisfactionLowerPercent"),
    ({"cpu_evict_BE_satisfaction_upper_percent": 100}, "cpuEvictBESatisfactionUpperPercent"),
    ({"cpu_evict_BE_satisfaction_lower_percent": 40, "cpu_evict_BE_satisfaction_upper_percent": 30},
     "cpuEvictBESatisfactionUpperPercent"),
    ({"cpu_evict_policy": "evictByMagic"}, "cpuEvictPolicy"),
    ({"cpu_evict_time_window_seconds": 0}, "cpuEvictTimeWindowSeconds"),
])
def test_config_checks(kw, message):
    # Test_generateConfigCheck / Test_isSatisfactionConfigValid
    with pytest.raises(ValueError, match=message):
        Args(**kw)


def test_config_checks_accept_koordinator_valid_configs():
    a = Args(memory_evict_threshold_percent=80, memory_evict_lower_percent=70)
    assert (a.memory_evict_threshold_percent, a.memory_evict_lower_percent) == (80, 70)
    b = Args(cpu_evict_BE_satisfaction_lower_percent=30, cpu_evict_BE_satisfaction_upper_percent=40)
    assert (b.cpu_evict_BE_satisfaction_lower_percent, b.cpu_evict_BE_satisfaction_upper_percent) == (30, 40)
    c = Args(cpu_evict_BE_satisfaction_lower_percent=60, cpu_evict_BE_satisfaction_upper_percent=60)
    assert (c.cpu_evict_BE_satisfaction_lower_percent, c.cpu_evict_BE_satisfaction_upper_percent) == (60, 60)


# -- CPU ---------------------------------------------------------------------------------------------

CPU_ARGS = Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=30,
                cpu_evict_BE_satisfaction_upper_percent=40)
CPU_ARGS_50 = Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=30,
                   cpu_evict_BE_satisfaction_upper_percent=40, cpu_evict_BE_usage_threshold_percent=50)
CPU_ARGS_ALLOC = Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=30,
                      cpu_evict_BE_satisfaction_upper_percent=40, cpu_evict_BE_usage_threshold_percent=50,
                      cpu_evict_policy="evictByAllocatable")


def s(limit, used, request):
    return BESample(usage=float(used), request=float(request), real_limit=float(limit))


# Test_CPUEvict_calculateMilliReleaseByBESatisfaction: (name, args, avg, current, allocatable, release)
@pytest.mark.parametrize("name, args, avg, current, alloc, expect", [
    ("CPURealLimit_zero", CPU_ARGS, s(0, 20000, 0), s(0, 20000, 0), 30000, 0),
    ("cpuUsage_not_enough", CPU_ARGS, s(20000, 10000, 0), s(20000, 10000, 0), 30000, 0),
    ("cpuRequest_zero", CPU_ARGS, s(20000, 19000, 0), s(20000, 19000, 0), 30000, 0),
    ("ResourceSatisfaction_enough", CPU_ARGS, s(20000, 19000, 40000), s(20000, 19000, 40000), 30000, 0),
    ("need_release_but_current_invalid", CPU_ARGS, s(10000, 9500, 50000), s(0, 0, 0), 30000, 0),
    ("need_release_but_current_cpuUsage_not_enough", CPU_ARGS, s(10000, 9500, 50000), s(10000, 5000, 50000), 30000, 0),
    ("avgRelease>currentRelease", CPU_ARGS, s(10000, 9500, 50000), s(14000, 13000, 50000), 30000, 6000),
    ("avgRelease<currentRelease", CPU_ARGS, s(13000, 12000, 50000), s(11000, 10000, 50000), 30000, 7000),
    ("50_avg_cpuUsage_not_enough", CPU_ARGS_50, s(20000, 9000, 0), s(20000, 9000, 0), 30000, 0),
    ("50_need_release_but_current_cpuUsage_not_enough", CPU_ARGS_50, s(10000, 6000, 50000), s(10000, 4000, 50000),
     30000, 0),
    ("50_avgRelease>currentRelease", CPU_ARGS_50, s(10000, 6000, 50000), s(14000, 8000, 50000), 30000, 6000),
    ("50_skip_when_allocatable_small_but_policy_by_reallimit", CPU_ARGS_50, s(10000, 6000, 50000),
     s(10000, 4000, 50000), 8000, 0),
    ("50_need_release_since_allocatable_is_small", CPU_ARGS_ALLOC, s(10000, 6000, 50000), s(10000, 4000, 50000),
     8000, 12000),
    ("50_need_release_since_allocatable_is_zero", CPU_ARGS_ALLOC, s(10000, 6000, 50000), s(10000, 4000, 50000),
     1, 20000 - 1),
])
def test_be_cpu_release_koordinator_table(name, args, avg, current, alloc, expect):
    assert cpu_to_release(avg, current, args, float(alloc)) == expect


def test_satisfaction_helpers():
    assert release_by_satisfaction(50000, 10000, 30, 40) == 10000  # (0.4 − 0.2) × 50000
    assert release_by_satisfaction(50000, 20000, 30, 40) == 0  # 40 % > 30 %
    assert usage_high_enough(500, 800, 90)  # below one core
    assert not usage_high_enough(100, 0, 90)
    assert usage_high_enough(9000, 10000, None) and not usage_high_enough(8900, 10000, None)


BE_DIR_V1 = {"cpuset/kubepods/besteffort/cpuset.cpus": "0-9", "cpu/kubepods/besteffort/cpu.cfs_quota_us": "-1",
             "cpu/kubepods/besteffort/cpu.cfs_period_us": "100000"}


def test_be_cpu_sample_from_state():
    pods = [pod("b1", "BE", 10, cpu="4", batch_cpu=25000), pod("b2", "BE", 10, cpu="5.5", batch_cpu=25000),
            pod("ls", "LS", 10, cpu="20", kube="burstable")]
    ns = state(pods, cgroups=BE_DIR_V1)
    assert be_cpu_sample(ns) == BESample(9500.0, 50000.0, 10000.0)
    quota = {**BE_DIR_V1, "cpu/kubepods/besteffort/cpu.cfs_quota_us": "800000"}
    assert be_cpu_sample(state(pods, cgroups=quota)) == BESample(9500.0, 50000.0, 8000.0)
    assert be_cpu_sample(state([pod("b1", "BE", 10, batch_cpu=1000)], cgroups=BE_DIR_V1)) is None  # no cpu usage yet


def test_be_cpu_evict_from_one_state_picks_by_priority_then_usage_ratio():
    # 10 CPUs for 50 cores of batch-cpu requests: satisfaction 20 % ≤ 30 %, usage 95 % → release 10000m
    pods = [pod("low-busy", "BE", 5000, cpu="3", batch_cpu=10000), pod("low-idle", "BE", 5000, cpu="0.5", batch_cpu=10000),
            pod("high", "BE", 5500, cpu="6", batch_cpu=30000), pod("ls", "LS", 1, cpu="30", kube="burstable")]
    ns = state(pods, cgroups=BE_DIR_V1)
    assert [p.uid for p in sorted_be_cpu_pods(ns)] == ["low-busy", "low-idle", "high"]
    got = plan_cpu(ns, CPU_ARGS)
    assert [e.pod_uid for e in got] == ["low-busy"]
    assert got[0].reason.startswith("trigger by koordlet feature BECPUEvict")
    assert plan_cpu(ns, Args(cpu_evict_BE_satisfaction_lower_percent=30, cpu_evict_BE_satisfaction_upper_percent=40)) == []
    assert plan_cpu(ns, Args(cpu_evict_enable=True)) == []  # satisfaction percents not configured


def test_be_cpu_sort_without_priority_by_usage_ratio():
    # Test_getBEPodEvictInfoAndSort: a pod without priority compares by usage / request only
    pods = [pod("p1", "BE", None, cpu="1", batch_cpu=4000), pod("p2", "BE", None, cpu="3", batch_cpu=4000),
            pod("p3", "BE", None, cpu="2", batch_cpu=4000)]
    assert [p.uid for p in sorted_be_cpu_pods(state(pods, cgroups=BE_DIR_V1))] == ["p2", "p3", "p1"]


def test_be_cpu_sort_with_keys_computed_once_is_the_comparators_order():
    # sorted_be_cpu_pods computes each pod's priority and ratio once; the order is _cpu_less's, ties and
    # missing priorities (the comparator's non-transitive cases) included
    import random

    from koordfw_eviction import BE_CPU_EVICT, _cpu_less, _sorted, be_candidates

    rng = random.Random(19)
    for _ in range(200):
        pods = [pod(f"p{i}", "BE", rng.choice([None, 1, 2, 3]), cpu=rng.choice(["0", "0.5", "1", "2"]),
                    batch_cpu=rng.choice([None, 0, 1000, 2000])) for i in range(rng.randint(0, 12))]
        ns = state(pods, cgroups=BE_DIR_V1)
        want = [p.uid for p in _sorted(be_candidates(ns, BE_CPU_EVICT), _cpu_less)]
        assert [p.uid for p in sorted_be_cpu_pods(ns)] == want


def test_be_cpu_evict_sums_requests_only_when_usage_is_high_and_decides_as_the_sample_does(monkeypatch):
    # plan_cpu checks the state's usage against the limit before it sums the BE requests: on random states
    # (both policies, with and without a quota) it evicts exactly when cpu_to_release of the state's whole
    # sample asks for a release, and sums the requests only then
    import random

    import koordfw_eviction as ev

    summed = [0]
    real_sum = ev.be_requested

    def counting(*a, **k):
        summed[0] += 1
        return real_sum(*a, **k)
    monkeypatch.setattr(ev, "be_requested", counting)
    rng = random.Random(23)
    for _ in range(400):
        pods = [pod(f"p{i}", "BE", rng.choice([None, 1, 2]), cpu=rng.choice(["0", "0.5", "2", "4", "6"]),
                    batch_cpu=rng.choice([None, 1000, 4000, 12000])) for i in range(rng.randint(0, 6))]
        cgroups = {**BE_DIR_V1, "cpu/kubepods/besteffort/cpu.cfs_quota_us": rng.choice(["-1", "300000", "800000"])}
        ns = state(pods, cgroups=cgroups, allocatable={"kubernetes.io/batch-cpu": rng.choice(["0", "4", "10"])})
        args = Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=rng.choice([30, 60]),
                    cpu_evict_BE_satisfaction_upper_percent=80,
                    cpu_evict_BE_usage_threshold_percent=rng.choice([None, 50, 90]),
                    cpu_evict_policy=rng.choice([ev.POLICY_REAL_LIMIT, ev.POLICY_ALLOCATABLE]))
        sample = be_cpu_sample(ns)
        release = cpu_to_release(sample, sample, args, ev.be_milli_allocatable(ns)) if sample else 0
        before = summed[0]
        got = plan_cpu(ns, args)
        assert bool(got) == (release > 0 and any(p.pod is not None and p.qos == "BE" for p in ns.pods))
        if sample is not None and summed[0] == before:
            limit = ev.be_milli_allocatable(ns) if args.cpu_evict_policy == ev.POLICY_ALLOCATABLE else sample.real_limit
            assert not usage_high_enough(sample.usage, limit, args.cpu_evict_BE_usage_threshold_percent)


def test_live_window_and_cool_down():
    pods = [pod("a", "BE", 1, cpu="4.75", batch_cpu=25000), pod("b", "BE", 2, cpu="4.75", batch_cpu=25000)]
    ns = state(pods, cgroups=BE_DIR_V1, mem_used="1G")
    args = Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=30,
                cpu_evict_BE_satisfaction_upper_percent=40, cpu_evict_time_window_seconds=30)
    live = Live()
    sample = be_cpu_sample(ns)
    assert sample is not None
    live.samples = [(100.0 + i, sample) for i in range(5)]  # 5 s of a 30 s window: fewer than a third
    assert plan(ns, args, live, 104.0) == []
    live.samples = [(100.0 + i, sample) for i in range(12)]
    assert [e.pod_uid for e in plan(ns, args, live, 111.0)] == ["a"]
    live.samples.append((112.0, sample))
    assert plan(ns, args, live, 112.0) == []  # cooling down for 20 s
    live.samples = [(131.0 + i, sample) for i in range(12)]
    # "a" was planned within 5 minutes and is still there: its 25000m count as released, none is added
    assert plan(ns, args, live, 142.0) == []
    live.evicted.clear()  # once its entry expired, "a" (still there, not terminating) is picked again
    assert [e.pod_uid for e in plan(ns, args, live, 142.0)] == ["a"]

