"""Koordinator's MemoryEvict rules (``pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict.go``,
``getPodEvictInfoAndSortByPriority``; ``apis/extension/evict.go``, ``priority_utils.go``): which pods are
eligible (active, ``koordinator.sh/eviction-enabled: "true"``, priority up to
``evictEnabledPriorityThreshold``, a memory metric, the eviction policy) and their order; the facts of
``Test_getPodEvictInfoAndSortByPriority``, ``Test_memoryEvict`` (BEMemoryEvict + MemoryEvict) and
``Test_generateConfigCheck``."""

from __future__ import annotations

import json

import pytest
from koordfw_eviction import (
    MEMORY_EVICT,
    Args,
    plan,
    plan_memory,
    pod_eviction_priority,
    pod_priority_label,
    priority_value_with_default,
    sorted_priority_memory_pods,
)
from structlog.testing import capture_logs

from koordfw.core.nodestate import NodeState
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict


def kpod(name, qos, priority, mem=None, labels=None, phase="Running", annotations=None, kube="besteffort"):
    """createMemoryEvictTestPodWithLabels: the QoS label, spec.priority, the extra labels, the phase (names
    as Koordinator's test, as RFC 1123 names: ``test_lsr_pod`` is ``test-lsr-pod``)."""
    name = k(name)
    meta = {"name": name, "namespace": "ns", "uid": name, "labels": dict(labels or {}),
            "annotations": dict(annotations or {})}
    if qos:
        meta["labels"]["koordinator.sh/qosClass"] = qos
    res = {"requests": {"cpu": "1"}} if kube == "burstable" else {}
    spec = {"containers": [{"name": f"{name}_main", "resources": res}]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}, "uid": name,
            "usage": {"memory": mem} if mem is not None else {}}


def k(name):
    return name.replace("_", "-").lower()


def names(*ns):
    return [k(n) for n in ns]


def state(pods, mem_used="115G", mem_capacity="120G"):
    return NodeState.from_state_file({"node": {"name": "n1", "capacity": {"cpu": "80", "memory": mem_capacity},
                                               "usage": {"memory": mem_used}}, "pods": pods})


ON = {"koordinator.sh/eviction-enabled": "true"}


def _prio(n):
    return {"koordinator.sh/priority": n}


# Test_getPodEvictInfoAndSortByPriority, case test_memoryevict_MemoryEvictThresholdPercent_80
SORT_PODS = [
    kpod("test_failed_pod", "LSR", 1000, None, {**ON, **_prio("1000")}, phase="Failed"),
    kpod("test_evictDisabled_pod", "LSR", 1000, "40G", {"koordinator.sh/eviction-enabled": "false", **_prio("1000")}),
    kpod("test_higher_priority", "LS", 3400, "30G", {**ON, **_prio("1000")}),
    kpod("test_podPriority_120_2000", "", 120, "10G", {**ON, **_prio("2000")}),
    kpod("test_podPriority_120_3000", "BE", 120, "5G", {**ON, **_prio("3000")}),
    kpod("test_podPriority_120_4000", "BE", 120, "20G", {**ON, **_prio("4000")}),
    kpod("test_podPriority_100_9999", "BE", 100, "10G", ON),
    kpod("test_podPriority_100_9999_1", "BE", 100, "11G", ON),
]


def test_sort_by_priority_koordinator_table():
    got = sorted_priority_memory_pods(state(SORT_PODS), 3000)
    assert [i.pod.uid for i in got] == names("test_podPriority_100_9999_1", "test_podPriority_100_9999",
                                             "test_podPriority_120_2000", "test_podPriority_120_3000",
                                             "test_podPriority_120_4000")


def test_sort_by_eviction_priority_annotation_koordinator_table():
    # eviction-priority takes precedence over spec.priority and the priority label:
    # -1 < 0 (unset, spec.priority 100) < 0 (invalid, spec.priority 120) < 100
    pods = [
        kpod("test_evictPriority_100", "BE", 120, "40G", {**ON, **_prio("3000")},
             annotations={"koordinator.sh/eviction-priority": "100"}),
        kpod("test_evictPriority_negative", "BE", 120, "5G", {**ON, **_prio("4000")},
             annotations={"koordinator.sh/eviction-priority": "-1"}),
        kpod("test_evictPriority_unset", "BE", 100, "10G", ON),
        kpod("test_evictPriority_invalid", "BE", 120, "20G", ON,
             annotations={"koordinator.sh/eviction-priority": "invalid"}),
    ]
    got = sorted_priority_memory_pods(state(pods), 3000)
    assert [i.pod.uid for i in got] == names("test_evictPriority_negative", "test_evictPriority_unset",
                                             "test_evictPriority_invalid", "test_evictPriority_100")


@pytest.mark.parametrize("labels, annotations, expect_ok", [
    ({"koordinator.sh/eviction-enabled": "true"}, {}, True),
    ({"koordinator.sh/eviction-enabled": "True"}, {}, False),  # exactly "true" (PodEvictEnabled)
    ({"koordinator.sh/eviction-enabled": "false"}, {}, False),
    ({"koordinator.sh/eviction-enabled": "xxx"}, {}, False),
    ({}, {}, False),
    (ON, {"koordinator.sh/eviction-policy": json.dumps([MEMORY_EVICT])}, True),
    (ON, {"koordinator.sh/eviction-policy": json.dumps(["BEMemoryEvict"])}, False),
    (ON, {"koordinator.sh/eviction-policy": "not json"}, False),
])
def test_eligibility_label_and_policy(labels, annotations, expect_ok):
    pods = [kpod("p", "BE", 100, "1G", labels, annotations=annotations)]
    assert bool(sorted_priority_memory_pods(state(pods), 3000)) is expect_ok


def test_eligibility_phase_priority_and_metric():
    pods = [kpod("pending", "BE", 100, "1G", ON, phase="Pending"), kpod("succeeded", "BE", 100, "1G", ON, phase="Succeeded"),
            kpod("at", "BE", 3000, "1G", ON), kpod("above", "BE", 3001, "1G", ON), kpod("no-metric", "BE", 100, None, ON)]
    assert [i.pod.uid for i in sorted_priority_memory_pods(state(pods), 3000)] == ["pending", "at"]


@pytest.mark.parametrize("priority, labels, qos, kube, expect", [
    (120, {}, "BE", "besteffort", 120),
    (None, {}, "BE", "besteffort", 5500),                     # no priority: batch's default (from the BE QoS)
    (0, {}, "LS", "burstable", 9500),                         # 0 counts as unset: prod's default
    (0, {"koordinator.sh/priority-class": "koord-free"}, "BE", "besteffort", 3500),
    (0, {"koordinator.sh/priority-class": "koord-mid"}, "LS", "burstable", 7500),
    (None, {}, "", "burstable", 9500),                        # no label: LS from kube QoS, prod
])
def test_priority_value_with_default(priority, labels, qos, kube, expect):
    ps = state([kpod("p", qos, priority, "1G", labels, kube=kube)]).pods[0]
    assert priority_value_with_default(ps) == expect


@pytest.mark.parametrize("value, expect", [("100", 100), ("-1", -1), ("+7", 7), ("invalid", 0), ("", 0), ("1.5", 0),
                                           ("2147483647", 2**31 - 1), ("2147483648", 0), (" 1", 0)])
def test_eviction_priority_is_an_int32(value, expect):
    ps = state([kpod("p", "BE", 1, "1G", annotations={"koordinator.sh/eviction-priority": value})]).pods[0]
    assert pod_eviction_priority(ps) == expect


@pytest.mark.parametrize("value, expect", [("2000", 2000), ("-3", -3), ("x", 42), ("9223372036854775808", 42)])
def test_priority_label_or_the_priority(value, expect):
    ps = state([kpod("p", "BE", 1, "1G", _prio(value))]).pods[0]
    assert pod_priority_label(ps, 42) == expect


# Test_memoryEvict, BEMemoryEvict + MemoryEvict: node 120G, used 115G (95 %), threshold 82, lower 74: 25.2G
BOTH_PODS = [
    kpod("test_lsr_pod", "LSR", 1000, "40G", kube="burstable"),
    kpod("test_ls_pod", "LS", 500, "30G", kube="burstable"),
    kpod("test_noqos_pod", "", 100, "10G", kube="burstable"),
    kpod("test_be_pod_priority100_1", "BE", 100, "5G"),
    kpod("test_be_pod_priority100_2", "BE", 100, "20G"),
    kpod("test_be_pod_priority120", "BE", 120, "10G"),
]
BE_THREE = names("test_be_pod_priority100_2", "test_be_pod_priority100_1", "test_be_pod_priority120")


@pytest.mark.parametrize("threshold", [None, 3000], ids=["MemoryEvict invalid configuration", "both ok"])
def test_be_memory_evict_then_memory_evict_koordinator_table(threshold):
    args = Args(memory_evict_threshold_percent=82, memory_evict_lower_percent=74,
                memory_evict_by_priority_enable=True, evict_enabled_priority_threshold=threshold)
    with capture_logs() as logs:
        got = plan_memory(state(BOTH_PODS), args)
    assert [e.pod_uid for e in got] == BE_THREE
    assert all(e.reason.startswith("trigger by koordlet feature BEMemoryEvict") for e in got)
    assert any("evictEnabledPriorityThreshold" in e["event"] for e in logs) is (threshold is None)


def test_memory_evict_alone_takes_opted_in_pods_by_eviction_priority():
    """Only MemoryEvict on: only opted-in pods, in its order; koordlet counts each one's usage × 1000
    towards the release (``int64(result * 1000)``), so one victim is enough per round."""
    pods = BOTH_PODS + [
        kpod("opted-big", "BE", 100, "30G", ON),
        kpod("opted-first", "BE", 120, "1G", ON, annotations={"koordinator.sh/eviction-priority": "-5"}),
    ]
    args = Args(memory_evict_enable=False, memory_evict_threshold_percent=82, memory_evict_lower_percent=74,
                memory_evict_by_priority_enable=True, evict_enabled_priority_threshold=3000)
    got = plan_memory(state(pods), args)
    assert [e.pod_uid for e in got] == ["opted-first"]
    assert got[0].reason.startswith("trigger by koordlet feature MemoryEvict")


def test_memory_evict_adds_to_what_be_memory_evict_released():
    """The BE task cannot release enough (its pods allow only MemoryEvict or are too small); the MemoryEvict
    task goes on from what the BE task freed, skipping the pods the BE task took."""
    only_memory_evict = {"koordinator.sh/eviction-policy": json.dumps([MEMORY_EVICT])}
    pods = [kpod("be-small", "BE", 100, "2G", ON), kpod("be-opted", "BE", 100, "1G", ON, annotations=only_memory_evict)]
    args = Args(memory_evict_threshold_percent=82, memory_evict_lower_percent=74,
                memory_evict_by_priority_enable=True, evict_enabled_priority_threshold=3000)
    got = plan_memory(state(pods), args)
    assert [(e.pod_uid, e.reason.split(":")[0]) for e in got] == [
        ("be-small", "trigger by koordlet feature BEMemoryEvict"), ("be-opted", "trigger by koordlet feature MemoryEvict")]


def test_memory_evict_never_plans_ls_pods_the_agent_would_refuse():
    """Koordinator's MemoryEvict takes any QoS up to the threshold; the agent's evictor refuses every pod
    but BE (KillAndEvictPods then skips it), so the plan leaves them out."""
    pods = [kpod("ls-opted", "LS", 100, "40G", ON, kube="burstable"), kpod("be-opted", "BE", 120, "1G", ON)]
    args = Args(memory_evict_enable=False, memory_evict_by_priority_enable=True, evict_enabled_priority_threshold=3000)
    assert [i.pod.uid for i in sorted_priority_memory_pods(state(pods), 3000)] == ["ls-opted", "be-opted"]
    assert [e.pod_uid for e in plan_memory(state(pods), args)] == ["be-opted"]


def test_off_by_default_and_cool_down_shared_with_be_memory_evict():
    args = Args()
    assert args.memory_evict_by_priority_enable is False and args.evict_enabled_priority_threshold is None
    pods = [kpod("be-opted", "BE", 120, "1G", ON, annotations={"koordinator.sh/eviction-policy": json.dumps([MEMORY_EVICT])})]
    assert plan(state(pods), Args(memory_evict_threshold_percent=82)) == []


@pytest.mark.parametrize("value", [True, 1.5, "3000", 2**31, -(2**31) - 1])
def test_threshold_is_an_int32(value):
    with pytest.raises(ValueError, match="evictEnabledPriorityThreshold"):
        Args(evict_enabled_priority_threshold=value)


def test_wire_names_in_plugin_config():
    reg = Registry(profile_from_dict({"pluginConfig": {"eviction": {
        "memoryEvictByPriorityEnable": True, "evictEnabledPriorityThreshold": 5999}}})).load(only={"eviction"})
    args = reg.args["eviction"]
    assert args.memory_evict_by_priority_enable is True and args.evict_enabled_priority_threshold == 5999
