"""Table-driven allocation cases. Expected CPUs are Koordinator's for the same input
(``cpu_accumulator_test.go`` cases on ``buildCPUTopologyForTest`` topologies, plus our own)."""

import pytest
from koordfw_cpu_topology.accumulator import (
    FULL_PCPUS,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    NUMA_NODE_LEVEL,
    PCPU_LEVEL,
    SPREAD_BY_PCPUS,
    AllocatedCPU,
    CPUAllocationError,
    _Accumulator,
    filter_by_required_policy,
    satisfies_required_policy,
    take_cpus,
    take_preferred_cpus,
)
from koordfw_cpu_topology.cpuset import CPUSetError, format_cpuset, parse_cpuset
from koordfw_cpu_topology.state import NodeAllocation
from koordfw_cpu_topology.topology import build_cpu_topology_for_test as topo_for


def cs(text):
    return sorted(parse_cpuset(text))


def run(topology, allocated_text, need, bind, strategy, max_ref=1, excl="None", allocated_policy=""):
    allocated_cpus = parse_cpuset(allocated_text)
    available = topology.all_cpus - allocated_cpus
    allocated = {c: AllocatedCPU(1, allocated_policy) for c in allocated_cpus}
    return take_cpus(topology, max_ref, available, allocated, need, bind, excl, strategy)


FULL_MOST = [
    # name, topology, allocated, need, want
    ("non-NUMA node", (1, 1, 4, 2), "", 2, "0-1"),
    ("with allocated cpus", (1, 1, 4, 2), "0-1", 2, "2-3"),
    ("whole socket", (2, 1, 4, 2), "", 8, "0-7"),
    ("across sockets", (2, 1, 4, 2), "", 12, "0-11"),
    ("whole socket, other one partly used", (2, 1, 4, 2), "0-1", 8, "8-15"),
    ("smallest idle NUMA node", (2, 2, 4, 2), "0-5,16-23", 6, "24-29"),
    ("most CPUs on one socket", (2, 2, 4, 2), "0-5,16-23", 12, "6-15,24-25"),
    ("from the first socket", (2, 2, 4, 2), "0-3,8-11", 4, "4-7"),
    ("less spread cpus", (2, 2, 2, 2), "0,2,4,8,12", 4, "10-11,14-15"),
    ("most spread cpus", (2, 2, 2, 2), "0,2,4,8,10,12", 6, "5-7,13-15"),
    ("most spread cpus, smallest idle socket", (2, 2, 2, 2), "0,2,4,8-10,12", 6, "6-7,11,13-15"),
]

FULL_LEAST = [
    ("non-NUMA node", (1, 1, 4, 2), "", 2, "0-1"),
    ("with allocated cpus", (1, 1, 4, 2), "0-1", 2, "2-3"),
    ("whole socket", (2, 1, 4, 2), "", 8, "0-7"),
    ("across sockets", (2, 1, 4, 2), "", 12, "0-11"),
    ("whole socket, other one partly used", (2, 1, 4, 2), "0-1", 8, "8-15"),
    ("most idle NUMA node", (2, 2, 4, 2), "0-5,16-23", 6, "8-13"),
    ("most CPUs on one socket", (2, 2, 4, 2), "0-5,16-23", 12, "6-15,24-25"),
    ("from the second socket", (2, 2, 4, 2), "0-3,8-11", 4, "16-19"),
    ("less spread cpus", (2, 2, 2, 2), "0,2,4,8,12", 4, "10-11,14-15"),
    ("less spread cpus 2", (2, 2, 2, 2), "0,2,4,8,10,12", 6, "1,3,6-7,14-15"),
    ("most idle socket", (2, 2, 4, 2), "0,2,4,8-10,12", 6, "16-21"),
]

SPREAD_MOST = [
    ("non-NUMA node", (1, 1, 4, 2), "", 4, "0,2,4,6"),
    ("partly used socket suffices", (2, 1, 4, 2), "0,2", 4, "1,3-4,6"),
    ("full-free socket", (2, 1, 4, 2), "0-3", 4, "8,10,12,14"),
    ("same socket, overlapping cores", (2, 1, 4, 2), "0,2", 6, "1,3-7"),
]

SPREAD_LEAST = [
    ("non-NUMA node", (1, 1, 4, 2), "", 4, "0,2,4,6"),
    ("most idle socket", (2, 1, 4, 2), "0,2", 4, "8,10,12,14"),
    ("full-free socket", (2, 1, 4, 2), "0-3", 4, "8,10,12,14"),
    ("same socket, overlapping cores", (2, 1, 4, 2), "0,2", 6, "8-12,14"),
]


@pytest.mark.parametrize("name,shape,allocated,need,want", FULL_MOST, ids=[c[0] for c in FULL_MOST])
def test_full_pcpus_most_allocated(name, shape, allocated, need, want):
    assert run(topo_for(*shape), allocated, need, FULL_PCPUS, MOST_ALLOCATED) == cs(want)


@pytest.mark.parametrize("name,shape,allocated,need,want", FULL_LEAST, ids=[c[0] for c in FULL_LEAST])
def test_full_pcpus_least_allocated(name, shape, allocated, need, want):
    assert run(topo_for(*shape), allocated, need, FULL_PCPUS, LEAST_ALLOCATED) == cs(want)


@pytest.mark.parametrize("name,shape,allocated,need,want", SPREAD_MOST, ids=[c[0] for c in SPREAD_MOST])
def test_spread_by_pcpus_most_allocated(name, shape, allocated, need, want):
    assert run(topo_for(*shape), allocated, need, SPREAD_BY_PCPUS, MOST_ALLOCATED) == cs(want)


@pytest.mark.parametrize("name,shape,allocated,need,want", SPREAD_LEAST, ids=[c[0] for c in SPREAD_LEAST])
def test_spread_by_pcpus_least_allocated(name, shape, allocated, need, want):
    assert run(topo_for(*shape), allocated, need, SPREAD_BY_PCPUS, LEAST_ALLOCATED) == cs(want)


@pytest.mark.parametrize("strategy", [MOST_ALLOCATED, LEAST_ALLOCATED])
def test_spread_order_of_free_cpus(strategy):
    t = topo_for(2, 2, 4, 2)
    acc = _Accumulator(t, 1, t.all_cpus, {}, 8, "None", strategy)
    assert acc.spread(acc.free_cpus(False)) == list(range(0, 32, 2)) + list(range(1, 32, 2))


EXCLUSIVE = [
    # name, shape, allocated exclusive cpus, their policy, bind, request policy, need, want
    ("PCPULevel on the full-free socket", (2, 1, 4, 2), "0,2", PCPU_LEVEL, SPREAD_BY_PCPUS, PCPU_LEVEL, 4,
     "8,10,12,14"),
    ("PCPULevel overlapping", (2, 1, 4, 2), "", PCPU_LEVEL, SPREAD_BY_PCPUS, PCPU_LEVEL, 10,
     "0-4,6,8,10,12,14"),
    ("PCPULevel on a large partly used socket", (2, 1, 8, 2), "0,2", PCPU_LEVEL, SPREAD_BY_PCPUS, PCPU_LEVEL, 4,
     "4,6,8,10"),
    ("request without exclusive policy", (2, 1, 8, 2), "0,2", PCPU_LEVEL, SPREAD_BY_PCPUS, "None", 4, "1,3-4,6"),
    ("NUMANodeLevel on the full-free socket", (2, 1, 4, 2), "0,2", NUMA_NODE_LEVEL, SPREAD_BY_PCPUS,
     NUMA_NODE_LEVEL, 4, "8,10,12,14"),
    ("NUMANodeLevel holder, request None", (2, 1, 4, 2), "0,2", NUMA_NODE_LEVEL, SPREAD_BY_PCPUS, "None", 4,
     "1,3-4,6"),
    ("NUMANodeLevel with FullPCPUs", (2, 1, 4, 2), "0,2", NUMA_NODE_LEVEL, FULL_PCPUS, NUMA_NODE_LEVEL, 4, "8-11"),
    ("NUMANodeLevel holder, FullPCPUs request None", (2, 1, 4, 2), "0,2", NUMA_NODE_LEVEL, FULL_PCPUS, "None", 4,
     "4-7"),
]


@pytest.mark.parametrize("name,shape,allocated,held,bind,excl,need,want", EXCLUSIVE, ids=[c[0] for c in EXCLUSIVE])
def test_exclusive_policies(name, shape, allocated, held, bind, excl, need, want):
    got = run(topo_for(*shape), allocated, need, bind, MOST_ALLOCATED, excl=excl, allocated_policy=held)
    assert got == cs(want)


def test_max_ref_count_two():
    """Three pods on 1×4×2 with maxRefCount 2 (Koordinator's TestTakeCPUsWithMaxRefCount)."""
    t = topo_for(1, 1, 4, 2)
    state = NodeAllocation()
    want = ["0-3", "0,4-7", "2-5"]
    for i, (need, expect) in enumerate(zip((4, 5, 4), want)):
        available, allocated = state.available_cpus(t, 2, frozenset())
        got = take_cpus(t, 2, available, allocated, need, FULL_PCPUS, "None", MOST_ALLOCATED)
        assert got == cs(expect)
        state.add(f"pod-{i}", frozenset(got), PCPU_LEVEL)


def test_not_enough_cpus():
    t = topo_for(1, 1, 4, 2)
    with pytest.raises(CPUAllocationError, match="not enough cpus"):
        run(t, "0-3", 5, FULL_PCPUS, MOST_ALLOCATED)


def test_zero_need_is_empty():
    t = topo_for(1, 1, 4, 2)
    assert run(t, "", 0, FULL_PCPUS, MOST_ALLOCATED) == []


def test_threads_per_core_one_uses_both_passes():
    t = topo_for(2, 1, 4, 1)
    assert run(t, "0", 3, SPREAD_BY_PCPUS, MOST_ALLOCATED) == [1, 2, 3]


def test_take_preferred_cpus_first():
    """The 4 preferred CPUs first; the other 2 from a second pass over the rest, where MostAllocated
    picks the NUMA node with fewer free CPUs (the preferred node, 12-15 left) over the idle one."""
    t = topo_for(2, 1, 4, 2)
    got = take_preferred_cpus(t, 1, t.all_cpus, {8, 9, 10, 11}, {}, 6, FULL_PCPUS, "None", MOST_ALLOCATED)
    assert got == cs("8-13")
    got = take_preferred_cpus(t, 1, t.all_cpus, {8, 9, 10, 11}, {}, 6, FULL_PCPUS, "None", LEAST_ALLOCATED)
    assert got == cs("0-1,8-11")


def test_required_policy_filters():
    t = topo_for(1, 1, 4, 2)
    avail = t.all_cpus - {0, 3}
    assert filter_by_required_policy(FULL_PCPUS, avail, t) == {4, 5, 6, 7}
    assert filter_by_required_policy(SPREAD_BY_PCPUS, avail, t) == {1, 2, 4, 6}
    assert satisfies_required_policy(FULL_PCPUS, [0, 1, 2, 3], t)
    assert not satisfies_required_policy(FULL_PCPUS, [0, 2], t)
    assert satisfies_required_policy(SPREAD_BY_PCPUS, [0, 2], t)
    assert not satisfies_required_policy(SPREAD_BY_PCPUS, [0, 1], t)


@pytest.mark.parametrize("text,ids,canon", [("", [], ""), ("0-3", [0, 1, 2, 3], "0-3"),
                                            ("5,0-1, 3", [0, 1, 3, 5], "0-1,3,5"), ("7", [7], "7")])
def test_cpuset_round_trip(text, ids, canon):
    assert sorted(parse_cpuset(text)) == ids
    assert format_cpuset(ids) == canon


@pytest.mark.parametrize("bad", ["a", "3-1", "1-", "-1", "1,,2"])
def test_cpuset_rejects(bad):
    with pytest.raises(CPUSetError):
        parse_cpuset(bad)
