"""The topology-manager merge (koordfw_cpu_topology.numa_policy) against Koordinator's own tables.

TestPolicyBestEffortMerge / TestPolicyRestrictedMerge / TestPolicySingleNumaNodeMerge run
commonPolicyMergeTestCases plus the policy's mergeTestCases (``numa_policy_cases.py``, converted from
``pkg/scheduler/frameworkext/topologymanager/policy_test.go``, which copies kube's kubelet
``topologymanager/policy_test.go``); the smaller tables are written out here."""

from __future__ import annotations

from typing import Any

import pytest
from koordfw_cpu_topology.numa_policy import (
    EXCLUSIVE_PREFERRED,
    EXCLUSIVE_REQUIRED,
    NUMA_STATUS_IDLE,
    NUMA_STATUS_SHARED,
    NUMA_STATUS_SINGLE,
    POLICY_BEST_EFFORT,
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    NUMATopologyHint,
    check_exclusive_policy,
    filter_providers_hints,
    filter_single_numa_hints,
    iterate_masks,
    mask_of,
    mask_str,
    merge,
    merge_topology_policy,
)
from numa_policy_cases import CASES


def _hint(d: dict[str, Any], numa_nodes: list[int]) -> NUMATopologyHint:
    a = d["affinity"]
    mask = None if a is None else mask_of(*(numa_nodes if a == "ALL" else a))
    return NUMATopologyHint(mask, unsatisfied=d["unsatisfied"], preferred=d["preferred"], score=d["score"])


def _providers(case: dict[str, Any], numa_nodes: list[int]) -> list[Any]:
    return [None if p is None else {r: None if hs is None else [_hint(h, numa_nodes) for h in hs] for r, hs in p.items()}
            for p in case["hp"]]


def _run(policy: str, key: str, numa_nodes: list[int]) -> None:
    for case in CASES["common"] + CASES[key]:
        got, _, reasons = merge(policy, numa_nodes, _providers(case, numa_nodes), EXCLUSIVE_PREFERRED, [])
        assert got == _hint(case["expected"], numa_nodes), case["name"]
        if policy in (POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE):
            assert reasons == (case["expected_reason"] or []), case["name"]


def test_policy_best_effort_merge() -> None:
    """TestPolicyBestEffortMerge (NUMA nodes 0-3)."""
    _run(POLICY_BEST_EFFORT, "best_effort", [0, 1, 2, 3])


def test_policy_restricted_merge() -> None:
    """TestPolicyRestrictedMerge (NUMA nodes 0-3), reasons compared."""
    _run(POLICY_RESTRICTED, "restricted", [0, 1, 2, 3])


def test_policy_single_numa_node_merge() -> None:
    """TestPolicySingleNumaNodeMerge (NUMA nodes 0-1), reasons compared."""
    _run(POLICY_SINGLE_NUMA_NODE, "single_numa_node", [0, 1])


@pytest.mark.parametrize(("policy", "preferred", "admit"), [
    (POLICY_BEST_EFFORT, False, True), (POLICY_BEST_EFFORT, True, True),
    (POLICY_RESTRICTED, False, False), (POLICY_RESTRICTED, True, True),
    (POLICY_SINGLE_NUMA_NODE, False, False),
])
def test_policy_can_admit_pod_result(policy: str, preferred: bool, admit: bool) -> None:
    """TestPolicy{BestEffort,Restricted,SingleNumaNode}CanAdmitPodResult: admission follows Preferred
    (BestEffort always admits). Driven through merge with one provider giving that hint on node 0."""
    hint = NUMATopologyHint(mask_of(0), preferred=preferred)
    _, got, _ = merge(policy, [0, 1], [{"r": [hint]}])
    assert got is admit


def test_policy_none_admits_with_no_hint() -> None:
    """policy_none_test: Merge returns the empty hint and admits."""
    assert merge(POLICY_NONE, [0, 1], [{"r": []}]) == (NUMATopologyHint(), True, [])


def test_policy_single_numa_node_filter_hints() -> None:
    """TestPolicySingleNumaNodeFilterHints (a nil slice is None here)."""
    M, H = mask_of, NUMATopologyHint
    assert filter_single_numa_hints([]) == []
    assert filter_single_numa_hints([[H(None, preferred=False)], [H(None, preferred=True)]]) == [
        None, [H(None, preferred=True)]]
    assert filter_single_numa_hints([[H(M(0), preferred=True), H(None, preferred=False)],
                                     [H(M(1), preferred=True), H(None, preferred=True)]]) == [
        [H(M(0), preferred=True)], [H(M(1), preferred=True), H(None, preferred=True)]]
    assert filter_single_numa_hints([[H(M(1), preferred=True), H(M(0), preferred=True), H(None)], []]) == [
        [H(M(1), preferred=True), H(M(0), preferred=True)], None]
    wide = [[H(M(0), preferred=True), H(M(1), preferred=True), H(M(1, 2)), H(M(0, 1, 2)), H(None)],
            [H(M(1, 2)), H(M(0, 1, 2)), H(M(0, 2)), H(M(3))],
            [H(M(1, 2)), H(M(0, 1, 2)), H(M(0, 2))]]
    assert filter_single_numa_hints(wide) == [[H(M(0), preferred=True), H(M(1), preferred=True)], None, None]


@pytest.mark.parametrize(("mask", "exclusive", "status", "want"), [
    # Test_checkExclusivePolicy
    ((0,), EXCLUSIVE_PREFERRED, [NUMA_STATUS_IDLE, NUMA_STATUS_IDLE], True),
    ((0, 1), EXCLUSIVE_PREFERRED, [NUMA_STATUS_IDLE, NUMA_STATUS_IDLE], True),
    ((0,), EXCLUSIVE_REQUIRED, [NUMA_STATUS_IDLE, NUMA_STATUS_IDLE], True),
    ((0, 1), EXCLUSIVE_REQUIRED, [NUMA_STATUS_IDLE, NUMA_STATUS_IDLE], True),
    ((0,), EXCLUSIVE_REQUIRED, [NUMA_STATUS_SHARED, NUMA_STATUS_IDLE], False),
    ((0,), EXCLUSIVE_REQUIRED, [NUMA_STATUS_SINGLE, NUMA_STATUS_IDLE], True),
    ((0,), EXCLUSIVE_REQUIRED, [NUMA_STATUS_IDLE, NUMA_STATUS_SHARED], True),
    ((0,), EXCLUSIVE_REQUIRED, [NUMA_STATUS_IDLE, NUMA_STATUS_SINGLE], True),
    ((0, 1), EXCLUSIVE_REQUIRED, [NUMA_STATUS_SINGLE, NUMA_STATUS_IDLE], False),
    ((0, 1), EXCLUSIVE_REQUIRED, [NUMA_STATUS_IDLE, NUMA_STATUS_SINGLE], False),
    ((0, 1), EXCLUSIVE_REQUIRED, [NUMA_STATUS_SHARED, NUMA_STATUS_SHARED], True),
])
def test_check_exclusive_policy(mask: tuple[int, ...], exclusive: str, status: list[str], want: bool) -> None:
    """Test_checkExclusivePolicy (required policy 1-7 and the preferred ones)."""
    assert check_exclusive_policy(NUMATopologyHint(mask_of(*mask), preferred=True), exclusive, status) is want


def test_filter_providers_hints() -> None:
    """Test_filterProvidersHints: per-resource lists, the unsatisfied reason, sorted summaries."""
    H = NUMATopologyHint
    got = filter_providers_hints([{"resource1": [H(mask_of(0), preferred=True)]},
                                  {"resource2": [H(mask_of(1), preferred=True)]}])
    assert got == ([[H(mask_of(0), preferred=True)], [H(mask_of(1), preferred=True)]], [],
                   ["resource1 prefer [01] among [01]", "resource2 prefer [10] among [10]"])
    assert filter_providers_hints([{"resource": []}]) == (
        [[H(unsatisfied=True, preferred=False)]], ["Unsatisfied NUMA resource"], [])


def test_bitmask_string_and_iteration() -> None:
    """The Go bitmask's String() (two-digit groups) and IterateBitMasks' order (by size)."""
    assert [mask_str(m) for m in (1, 2, 3, 4, 5)] == ["01", "10", "11", "100", "0101"]
    assert mask_str(None) == "<nil>"
    assert list(iterate_masks([0, 1, 2])) == [1, 2, 4, 3, 5, 6, 7]


@pytest.mark.parametrize(("node", "pod", "want"), [
    ("", "", ""), ("Restricted", "", "Restricted"), ("", "SingleNUMANode", "SingleNUMANode"),
    ("Restricted", "Restricted", "Restricted"), ("Restricted", "SingleNUMANode", None),
])
def test_merge_topology_policy(node: str, pod: str, want: str | None) -> None:
    """nodenumaresource mergeTopologyPolicy: the pod's policy wins unless the node states another."""
    assert merge_topology_policy(node, pod) == want
