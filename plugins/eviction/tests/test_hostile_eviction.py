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


def test_unreadable_be_cgroup_values_skip_cpu_eviction():
    pods = [pod("a", "BE", 1, cpu="4", batch_cpu=50000)]
    args = Args(cpu_evict_enable=True, cpu_evict_BE_satisfaction_lower_percent=30,
                cpu_evict_BE_satisfaction_upper_percent=40)
    for cg in ({}, {"cpuset/kubepods/besteffort/cpuset.cpus": "junk"},
               {**BE_DIR_V1, "cpu/kubepods/besteffort/cpu.cfs_quota_us": "lots"}):
        try:
            ns = state(pods, cgroups=cg)
        except ManifestError:
            continue  # the state file refuses a bad cpu list itself
        plan_cpu(ns, args)  # never raises; an unreadable quota counts as unlimited
