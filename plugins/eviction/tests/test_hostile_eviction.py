"""The eviction plugin on hostile input: annotations, usages and manifests it must not trust."""

from __future__ import annotations

import pytest
from koordfw_eviction import BE_MEMORY_EVICT, Args, eviction_policy_allowed, plan, plan_cpu, plan_memory

from koordfw import ManifestError
from koordfw.core.nodestate import NodeState

from .test_eviction import BE_DIR_V1, pod, state


@pytest.mark.parametrize("value", ["[" * 10000, '{"BEMemoryEvict": 1}', '"BEMemoryEvict"', "1" * 5000, "NaN", "\x00",
                                   '["BEMemoryEvict"' + ", 1" * 10000 + "]"])
def test_a_hostile_eviction_policy_never_raises(value):
    allowed = eviction_policy_allowed(BE_MEMORY_EVICT, {"koordinator.sh/eviction-policy": value})
    assert allowed is value.startswith('["BEMemoryEvict"')


def test_huge_usages_and_capacities():
    big = str(2**62)
    pods = [pod("a", "BE", 2**31 - 1, big), pod("b", "BE", -(2**31), big)]
    ns = state(pods, mem_capacity=big, mem_used=big)
    assert [e.pod_uid for e in plan_memory(ns, Args())] == ["b"]  # the lowest priority first


def test_pods_without_metadata_or_ls_never_planned():
    ns = NodeState.from_state_file({"node": {"capacity": {"memory": "1Gi", "cpu": "4"}, "usage": {"memory": "1Gi"}},
                                    "pods": [{"uid": "anon", "usage": {"memory": "1Gi", "cpu": "4"}},
                                             pod("ls", "LS", 0, "1Gi", kube="burstable")],
                                    "cgroups": BE_DIR_V1})
    assert plan(ns, Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=30,
                         cpu_evict_BE_satisfaction_upper_percent=40)) == []


def test_missing_be_cgroup_values_skip_cpu_eviction_and_an_unreadable_quota_is_unlimited():
    """A BE tier with a real limit of 10 cpus (cpuset 0-9, no quota), 9.5 used (95 % >= 90 %) and 50
    requested (satisfaction 20 % <= 30 %) is evicted from; without the cgroup values there is no real
    limit and CPU eviction is skipped; a bad cpuset is refused by the state file; an unreadable quota
    counts as unlimited (the cpuset's 10 cpus are the limit), so it changes nothing."""
    pods = [pod("a", "BE", 1, cpu="9.5", batch_cpu=50000)]
    args = Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=30,
                cpu_evict_BE_satisfaction_upper_percent=40)
    assert [e.pod_uid for e in plan_cpu(state(pods, cgroups=BE_DIR_V1), args)] == ["a"]
    assert plan_cpu(state(pods, cgroups={}), args) == []
    with pytest.raises(ManifestError, match="invalid cpu list 'junk'"):
        state(pods, cgroups={"cpuset/kubepods/besteffort/cpuset.cpus": "junk"})
    unreadable_quota = {**BE_DIR_V1, "cpu/kubepods/besteffort/cpu.cfs_quota_us": "lots"}
    assert [e.pod_uid for e in plan_cpu(state(pods, cgroups=unreadable_quota), args)] == ["a"]


@pytest.mark.parametrize("value", ["9" * 100000, "-" + "1" * 30, "+", "-", "１２", "1e3", "0x10", "\x00", " 7", "7 "])
def test_hostile_eviction_priority_and_priority_label_read_as_koordlet_falls_back(value):
    """MemoryEvict's annotation koordinator.sh/eviction-priority (int32, else 0) and label koordinator.sh/priority
    (an integer, else the pod's priority) never raise and never take a value Go's strconv would refuse."""
    from koordfw_eviction import pod_eviction_priority, pod_priority_label, sorted_priority_memory_pods

    p = pod("a", "BE", 100, "1G", annotations={"koordinator.sh/eviction-priority": value})
    p["metadata"]["labels"].update({"koordinator.sh/eviction-enabled": "true", "koordinator.sh/priority": value})
    ns = state([p])
    ps = ns.pods[0]
    assert pod_eviction_priority(ps) == 0 and pod_priority_label(ps, 100) == 100
    assert [i.pod.uid for i in sorted_priority_memory_pods(ns, 3000)] == ["a"]
    args = Args(memory_evict_enable=False, memory_evict_by_priority_enable=True, evict_enabled_priority_threshold=3000)
    assert [e.pod_uid for e in plan_memory(ns, args)] == ["a"]
