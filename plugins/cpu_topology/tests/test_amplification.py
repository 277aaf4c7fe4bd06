"""Resource amplification in cpu_topology: Koordinator's nodenumaresource accounting of cpuset-bound pods on
an amplified node (``filterAmplifiedCPUs``; the score's ``Amplify`` of bound CPUs)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from cpu_topology_helpers import STATUS, TOPO, cpuset_of, lsr, reason_of, topo_ann
from koordfw_cpu_topology.amplification import (
    ERR_INSUFFICIENT_AMPLIFIED_CPU,
    ERR_INVALID_CPU_AMPLIFICATION_RATIO,
    NO_RATIO,
    amplified_requested,
    amplify,
    fits_amplified,
    parse_cpu_ratio,
)
from koordfw_cpu_topology.plugin import Args, CPUTopologyPlugin, ScoringStrategy

from koordfw import CycleState, NodeBatch
from koordfw.extension import ANNOTATION_NODE_RAW_ALLOCATABLE, ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO
from koordfw.inputs import Manifests, make_node, make_pod
from koordfw.testing import ClusterBuilder, schedule

RATIO = ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO
ONLY = ["cpu_topology"]


def ratio_text(r: float) -> str:
    """As Koordinator's ``SetNodeResourceAmplificationRatio`` writes it (two decimals)."""
    return '{"cpu":' + f"{r:.2f}" + "}"


# -- the pure parts ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    (None, NO_RATIO),
    ('{"cpu":1.22}', 1.22),
    ('{"memory":1.22}', NO_RATIO),
    ('{"cpu":2}', 2.0),
    ("null", NO_RATIO),
])
def test_parse_cpu_ratio(text: str | None, want: float) -> None:
    """Koordinator's ``TestGetNodeResourceAmplificationRatio`` (apis/extension), for cpu."""
    assert parse_cpu_ratio(text) == want


@pytest.mark.parametrize("text", ["invalid", '["cpu"]', '{"cpu":"1.5"}', '{"cpu":true}'])
def test_parse_cpu_ratio_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="failed to unmarshal node resource amplification ratio"):
        parse_cpu_ratio(text)


def test_amplify_is_ceil_above_one() -> None:
    """``extension.Amplify``: ceil(v × r) for r > 1, v itself otherwise."""
    assert amplify(4000, 1.5) == 6000
    assert amplify(1000, 1.22) == 1220
    assert amplify(3, 1.5) == 5  # ceil(4.5)
    assert amplify(4000, 1.0) == 4000 and amplify(4000, 0.5) == 4000 and amplify(4000, -1) == 4000


def test_amplified_requested_replaces_bound_cpus() -> None:
    """requested - bound + Amplify(bound), only when requested >= bound > 0."""
    assert amplified_requested(4000, 4, 1.5) == 6000
    assert amplified_requested(5000, 4, 1.5) == 7000
    assert amplified_requested(4000, 0, 1.5) == 4000
    assert amplified_requested(3000, 4, 1.5) == 3000  # requested below bound (not all counted yet): unchanged
    assert amplified_requested(4000, 4, 1.0) == 4000


# -- TestFilterWithAmplifiedCPUs ---------------------------------------------------------------------------

def make_amplified_node(name: str, cpus: int, ratio: float, *, topology: bool) -> Any:
    """Koordinator's test ``makeNode``: raw allocatable kept, cpu allocatable amplified, the ratio annotated."""
    anns = {ANNOTATION_NODE_RAW_ALLOCATABLE: json.dumps({"cpu": str(cpus), "memory": "40Gi"}),
            RATIO: ratio_text(ratio)}
    if topology:
        anns.update(topo_ann(2, 1, 8, 2))
    alloc_milli = amplify(cpus * 1000, ratio)
    return make_node(name, allocatable={"cpu": f"{alloc_milli}m", "memory": "40Gi", "pods": "110"},
                     annotations=anns)


def make_pod_on_node(name: str, cpu: str, node: str | None, cpuset: bool) -> Any:
    """Koordinator's test ``makePodOnNode``: prod priority, LSR when cpuset, and on a node the resource-status
    of CPUs 0..n-1."""
    labels = {"koordinator.sh/qosClass": "LSR"} if cpuset else {}
    anns = {STATUS: json.dumps({"cpuset": f"0-{int(cpu) - 1}"})} if cpuset and node else {}
    return make_pod(name, requests={"cpu": cpu} if cpu else None, labels=labels, annotations=anns, priority=9999,
                    node_name=node)


def run_filter(pod: Any, nodes: list, existing: list) -> dict[str, Any]:
    """pre_filter + filter of the plugin alone (as the Go test calls Filter directly): node → Status or None."""
    m = Manifests()
    m.nodes.extend(nodes)
    m.pods.extend(existing)
    cluster = m.to_cluster()
    plugin, args, state = CPUTopologyPlugin(), Args(), CycleState()
    handle = SimpleNamespace(cluster=cluster.view)
    pre = plugin.pre_filter(pod, state, args, handle)
    if pre is not None and pre.code.name == "SKIP":
        return {n.name: None for n in nodes}
    assert pre is None
    out = plugin.filter(pod, NodeBatch(cluster, np.arange(cluster.num_nodes, dtype=np.int64)), state) or {}
    assert isinstance(out, dict)
    return {n.name: out.get(n.name) for n in nodes}


# name, pod (cpu, cpuset), existing pod (cpu, cpuset), nodeHasNRT, ratio, want reason (None: fits)
FILTER_CASES = [
    ("no resources requested always fits", ("", False), ("4", False), False, 2.0, None),
    ("no filtering without node cpu amplification", ("32", False), ("32", False), False, 1.0, None),
    ("cpu fits on no NRT node", ("32", False), ("32", False), False, 2.0, None),
    ("insufficient cpu", ("32", False), ("64", False), False, 2.0, ERR_INSUFFICIENT_AMPLIFIED_CPU),
    ("insufficient cpu with cpuset pod on node", ("32", False), ("32", True), True, 2.0,
     ERR_INSUFFICIENT_AMPLIFIED_CPU),
    ("insufficient cpu when scheduling cpuset pod", ("32", True), ("32", False), True, 2.0,
     ERR_INSUFFICIENT_AMPLIFIED_CPU),
    ("insufficient cpu when scheduling cpuset pod with cpuset pod on node", ("32", True), ("32", True), True, 2.0,
     ERR_INSUFFICIENT_AMPLIFIED_CPU),
]


@pytest.mark.parametrize("name, pod, existing, has_nrt, ratio, want", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filter_with_amplified_cpus(name: str, pod: tuple, existing: tuple, has_nrt: bool, ratio: float,
                                    want: str | None) -> None:
    """Koordinator's ``TestFilterWithAmplifiedCPUs`` (nodenumaresource/plugin_test.go): a node of 32 CPUs
    (2 sockets × 8 cores × 2 threads) amplified ×2 to 64 cores. E.g. an existing cpuset pod of 32 CPUs
    counts 64 of the 64, so a plain 32-core pod no longer fits; a cpuset pod of 32 asks 64 of the 32 left."""
    node = make_amplified_node("node-1", 32, ratio, topology=has_nrt)
    got = run_filter(make_pod_on_node("p", pod[0], None, pod[1]), [node],
                     [make_pod_on_node("e", existing[0], "node-1", existing[1])])["node-1"]
    if want is None:
        assert got is None
    else:
        assert got is not None and got.code.name == "UNSCHEDULABLE" and got.reasons == (want,)


def test_fits_amplified_agrees_with_the_table() -> None:
    """The one-node form used in the docs gives the table's answers (32 CPUs, ×2 → 64)."""
    assert fits_amplified(32000, False, 2.0, 64000, 32000, 0)
    assert not fits_amplified(32000, False, 2.0, 64000, 32000, 32)
    assert not fits_amplified(32000, True, 2.0, 64000, 32000, 0)
    assert fits_amplified(32000, False, 1.0, 32000, 32000, 0)


def test_unreadable_ratio_refuses_the_node_for_cpu_pods_only() -> None:
    """``GetNodeResourceAmplificationRatio`` failing: UnschedulableAndUnresolvable for a pod with a cpu
    request; a pod without one is not checked."""
    node = make_node("n1", allocatable={"cpu": "8", "memory": "8Gi", "pods": "110"}, annotations={RATIO: "invalid"})
    got = run_filter(make_pod("p", requests={"cpu": "1"}), [node], [])["n1"]
    assert got is not None and got.code.name == "UNSCHEDULABLE_AND_UNRESOLVABLE"
    assert got.reasons == (ERR_INVALID_CPU_AMPLIFICATION_RATIO,)
    assert run_filter(make_pod("m", requests={"memory": "1Gi"}), [node], [])["n1"] is None


def test_broken_topology_on_an_amplified_node_refuses_cpu_pods() -> None:
    """A topology annotation that is there but unreadable: Koordinator's ``GetAvailableCPUs`` fails, so
    the amplified check refuses the node (unresolvable, naming the problem)."""
    anns = {RATIO: ratio_text(1.5), TOPO: '{"detail": "nope"}'}
    node = make_node("n1", allocatable={"cpu": "12", "memory": "8Gi", "pods": "110"}, annotations=anns)
    got = run_filter(make_pod("p", requests={"cpu": "1"}), [node], [])["n1"]
    assert got is not None and got.code.name == "UNSCHEDULABLE_AND_UNRESOLVABLE"
    assert "invalid CPU Topology" in got.reasons[0]


# -- scheduling whole clusters -------------------------------------------------------------------------

def amplified_8cpu_node(b: ClusterBuilder, name: str = "n1", ratio: float = 1.5) -> None:
    """8 physical CPUs (1 socket × 4 cores × 2 threads) amplified to ``8 × ratio`` cores, as the
    resource_amplification manager leaves a node."""
    b.node(name, cpu=f"{amplify(8000, ratio)}m", memory="64Gi",
           annotations={**topo_ann(1, 1, 4, 2), RATIO: ratio_text(ratio),
                        ANNOTATION_NODE_RAW_ALLOCATABLE: json.dumps({"cpu": "8", "memory": "64Gi"})})


def test_simulate_lsr_pods_count_their_amplified_cpus() -> None:
    """8 physical CPUs × 1.5 = 12 allocatable cores (12000m).

    * ``lsr-a`` (LSR, 4 CPUs): binds 4 CPUs and asks Amplify(4000, 1.5) = 6000 ≤ 12000 − 0: fits.
    * ``lsr-b`` (LSR, 4 CPUs): the node's requested cpu is 4000 with 4 CPUs bound, counted
      4000 − 4000 + 6000 = 6000; it asks 6000 ≤ 12000 − 6000: fits (12 ≥ 12), taking the other 4 CPUs.
    * ``ls-c`` (LS, 1 core, no cpuset): requested 8000 with 8 CPUs bound counts 12000; 1000 > 12000 − 12000
      = 0: ``Insufficient amplified cpu``, although the plain resource fit sees 8000 of 12000 used.
    """
    b = ClusterBuilder()
    amplified_8cpu_node(b)
    lsr(b, "lsr-a", "4")
    lsr(b, "lsr-b", "4")
    b.pod("ls-c", cpu="1", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9000)
    r = schedule(b, only=ONLY)
    placed = r.placements()
    assert placed["default/lsr-a"] == "n1" and placed["default/lsr-b"] == "n1"
    assert {cpuset_of(r, "lsr-a"), cpuset_of(r, "lsr-b")} == {"0-3", "4-7"}
    assert placed.get("default/ls-c") is None
    assert ERR_INSUFFICIENT_AMPLIFIED_CPU in reason_of(r, "ls-c")


def test_simulate_plain_pods_first_leave_less_for_a_cpuset_pod() -> None:
    """The same node with 3 plain cores requested first (no CPUs bound: counted as is, 3000 of 12000): an LSR
    pod of 4 CPUs asks 6000 ≤ 12000 − 3000 and fits; a second one asks 6000 > 12000 − (7000 − 4000 + 6000)
    = 3000 and is refused, though 4 physical CPUs are free and the plain fit sees 7000 + 4000 ≤ 12000."""
    b = ClusterBuilder()
    amplified_8cpu_node(b)
    # higher priority than the LSR pods (9500): scheduled first
    b.pod("ls", cpu="3", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9900)
    lsr(b, "lsr-a", "4")
    lsr(b, "lsr-b", "4")
    r = schedule(b, only=ONLY)
    placed = r.placements()
    assert placed["default/ls"] == "n1" and placed["default/lsr-a"] == "n1"
    assert placed.get("default/lsr-b") is None
    assert ERR_INSUFFICIENT_AMPLIFIED_CPU in reason_of(r, "lsr-b")


def test_without_the_ratio_the_same_pods_all_fit() -> None:
    """The control: 12 plain cores of allocatable and no ratio annotation: 4 + 4 + 1 ≤ 12, all placed."""
    b = ClusterBuilder()
    b.node("n1", cpu="12", memory="64Gi", annotations=topo_ann(1, 1, 4, 2))
    lsr(b, "lsr-a", "4")
    lsr(b, "lsr-b", "4")
    b.pod("ls-c", cpu="1", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9000)
    assert all(v == "n1" for v in schedule(b, only=ONLY).placements().values())


def test_simulate_with_the_manager_step_amplifying_the_node() -> None:
    """End to end in ``koordfw simulate``: resource_amplification (ratio 1.5 from its args) amplifies the
    8-CPU node to 12 cores, then cpu_topology accounts the LSR pods at 6 cores each, as above."""
    b = ClusterBuilder()
    b.node("n1", cpu="8", memory="64Gi", annotations=topo_ann(1, 1, 4, 2))
    lsr(b, "lsr-a", "4")
    lsr(b, "lsr-b", "4")
    b.pod("ls-c", cpu="1", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9000)
    profile = {"pluginConfig": {"resource_amplification": {"enable": True, "resourceAmplificationRatio": {"cpu": 1.5}}}}
    r = schedule(b, only=["cpu_topology", "resource_amplification"], profile=profile)
    node = {n["name"]: n for n in r.to_dict()["nodes"]}["n1"]
    assert node["annotations"][RATIO] == '{"cpu":1.50}' and node["allocatable"]["cpu"] == "12"
    placed = r.placements()
    assert placed["default/lsr-a"] == "n1" and placed["default/lsr-b"] == "n1"
    assert placed.get("default/ls-c") is None
    assert ERR_INSUFFICIENT_AMPLIFIED_CPU in reason_of(r, "ls-c")


def test_score_counts_bound_cpus_amplified() -> None:
    """Two 8-CPU nodes with the same CPUs bound, one amplified ×1.5 (12 cores), one not (8 cores): the bound
    pod's score is the same on both, since every bound CPU counts 1.5 cores of the 12.

    * 2 bound + a 2-CPU pod, LeastAllocated: plain (8000 − 4000) × 100 // 8000 = 50; amplified
      (12000 − (Amplify(2000) + Amplify(2000)) = 12000 − 6000) × 100 // 12000 = 50. Counting the bound
      CPUs physically there would give (12000 − 4000) × 100 // 12000 = 66: the node would look emptier.
    * 3 bound + a 1-CPU pod, MostAllocated: plain 4000 × 100 // 8000 = 50; amplified (4500 + 1500) × 100 //
      12000 = 50.
    * 6 bound + a 2-CPU pod, MostAllocated: 100 on both (12000 of 12000)."""
    def scores(ratio: float, bound: int, need: str, strategy: str) -> dict[str, int]:
        nodes = [make_node("plain", allocatable={"cpu": "8", "memory": "64Gi", "pods": "110"},
                           annotations=topo_ann(1, 1, 4, 2)),
                 make_amplified_node("amp", 8, ratio, topology=False)]
        nodes[1].annotations.update(topo_ann(1, 1, 4, 2))
        existing = [make_pod(f"e-{n.name}", requests={"cpu": str(bound)}, labels={"koordinator.sh/qosClass": "LSR"},
                             annotations={STATUS: json.dumps({"cpuset": f"0-{bound - 1}"})}, priority=9999,
                             node_name=n.name) for n in nodes]
        m = Manifests()
        m.nodes.extend(nodes)
        m.pods.extend(existing)
        cluster = m.to_cluster()
        plugin, state = CPUTopologyPlugin(), CycleState()
        args = Args(scoring_strategy=ScoringStrategy(strategy))
        pod = make_pod("p", requests={"cpu": need}, labels={"koordinator.sh/qosClass": "LSR"}, priority=9999)
        assert plugin.pre_filter(pod, state, args, SimpleNamespace(cluster=cluster.view)) is None
        batch = NodeBatch(cluster, np.arange(cluster.num_nodes, dtype=np.int64))
        got = plugin.score(pod, batch, state, args)
        return dict(zip([v.name for v in cluster.views], got.tolist(), strict=True))

    assert scores(1.5, 2, "2", "LeastAllocated") == {"plain": 50, "amp": 50}
    assert scores(1.5, 3, "1", "MostAllocated") == {"plain": 50, "amp": 50}
    assert scores(1.5, 6, "2", "MostAllocated") == {"plain": 100, "amp": 100}


# -- TestScoreWithAmplifiedCPUs: the accounting ------------------------------------------------------------

def _koord_score(strategy: str, requested: dict[str, int], allocatable: dict[str, int]) -> int:
    """Koordinator's nodenumaresource least/most allocated scorer over cpu and memory, weight 1 each."""
    total = 0
    for r in ("cpu", "memory"):
        req, cap = requested[r], allocatable[r]
        if strategy == "MostAllocated":
            total += min(req, cap) * 100 // cap
        else:
            total += (cap - req) * 100 // cap if req <= cap else 0
    return total // 2


GI = 1 << 30
# name, strategy, pod (cpu cores, memory Gi, cpuset), existing pod on each node (cpu, memory Gi, cpuset) or None,
# want {node: score}; nodes: node1 32 cpus/40Gi ×1.0, node2 64 cpus/60Gi ×2.0, node3 32 cpus/40Gi ×2.0
SCORE_CASES = [
    ("MostAllocated, non-cpuset pod", "MostAllocated", (8, 16, False), None, {"node1": 32, "node2": 16, "node3": 26}),
    ("MostAllocated, cpuset pod", "MostAllocated", (8, 16, True), None, {"node1": 32, "node2": 19, "node3": 32}),
    ("MostAllocated, non-cpuset pods, and existing cpuset pod on node", "MostAllocated", (8, 16, False),
     (20, 4, True), {"node1": 68, "node2": 35}),
    ("MostAllocated, scheduling cpuset pod with existing non-cpuset pods", "MostAllocated", (8, 16, True),
     (20, 4, False), {"node1": 68, "node2": 30}),
    ("MostAllocated, cpuset pods on node, scheduling cpuset pod", "MostAllocated", (8, 16, True), (20, 4, True),
     {"node1": 68, "node2": 38}),
    ("LeastAllocated, no cpuset pod", "LeastAllocated", (8, 16, False), (20, 4, False), {"node1": 31, "node2": 72}),
    ("LeastAllocated, non-cpuset pod with existing cpuset pods", "LeastAllocated", (8, 16, False), (20, 4, True),
     {"node1": 31, "node2": 64}),
    ("LeastAllocated, scheduling cpuset pod with existing non-cpuset pods", "LeastAllocated", (8, 16, True),
     (20, 4, False), {"node1": 31, "node2": 68}),
    ("LeastAllocated, cpuset pods on node,scheduling cpuset pod", "LeastAllocated", (8, 16, True), (20, 4, True),
     {"node1": 31, "node2": 61}),
]
SCORE_NODES = {"node1": (32, 40, 1.0), "node2": (64, 60, 2.0), "node3": (32, 40, 2.0)}


@pytest.mark.parametrize("name, strategy, pod, existing, want", SCORE_CASES, ids=[c[0] for c in SCORE_CASES])
def test_score_with_amplified_cpus_accounting(name: str, strategy: str, pod: tuple, existing: tuple | None,
                                              want: dict[str, int]) -> None:
    """Koordinator's ``TestScoreWithAmplifiedCPUs`` (nodenumaresource/scoring_test.go), for the accounting
    this module shares with it: the node's requested cpu with its bound CPUs amplified
    (:func:`amplified_requested`) and a cpuset pod's cpu amplified (:func:`amplify`), fed to Koordinator's
    cpu + memory scorer (``scoreWithAmplifiedCPUs``). E.g. node2 (64 CPUs ×2 = 128 cores, 60Gi) with a
    20-CPU cpuset pod, scheduling a plain 8-core 16Gi pod, MostAllocated: cpu (40000 + 8000) × 100 // 128000
    = 37, memory 20 × 100 // 60 = 33, (37 + 33) // 2 = 35. cpu_topology's own score is cpu-only for bound
    pods (docs/plugins/cpu_topology.md); it uses the same two functions on amplified nodes."""
    cpu, mem, cpuset = pod
    got = {}
    for node in want:
        cpus, mem_gi, ratio = SCORE_NODES[node]
        alloc = {"cpu": amplify(cpus * 1000, ratio), "memory": mem_gi * GI}
        req_cpu, req_mem, bound = 0, 0, 0
        if existing is not None:
            req_cpu, req_mem = existing[0] * 1000, existing[1] * GI
            bound = existing[0] if existing[2] else 0
        pod_cpu = amplify(cpu * 1000, ratio) if cpuset else cpu * 1000
        requested = {"cpu": amplified_requested(req_cpu, bound, ratio) + pod_cpu, "memory": req_mem + mem * GI}
        got[node] = _koord_score(strategy, requested, alloc)
    assert got == want


# -- per NUMA node (Koordinator's amplifyNUMANodeResources / NodeAllocation.getAvailableNUMANodeResources) --------
GI = 2**30


@pytest.mark.parametrize("case, ratio, allocated, bound, want_avail, want_alloc", [
    ("normal node", None, {}, 0, {0: 16000, 1: 16000}, {}),
    ("normal node with amplification ratios", 1.5, {}, 0, {0: 24000, 1: 24000}, {}),
    ("normal node with amplification ratios and allocated CPUSets", 1.5, {0: 4000}, 4, {0: 18000, 1: 24000},
     {0: 6000}),
    ("normal node with amplification ratios and allocated CPUSets and CPU Shares", 1.5, {0: 8000}, 4,
     {0: 14000, 1: 24000}, {0: 10000}),
])
def test_available_numa_resources_on_an_amplified_node(case, ratio, allocated, bound, want_avail, want_alloc):
    """Koordinator's Test_getAvailableNUMANodeResources: 2 NUMA nodes of 16 cpus and 32 GiB, amplified ×1.5 to
    24 cpus; the first ``bound`` CPUs (all on NUMA node 0) are cpuset-bound and count 1.5× there."""
    from koordfw_cpu_topology.amplification import amplify_numa, numa_available_amplified

    total = {n: {"cpu": 16000, "memory": 32 * GI} for n in (0, 1)}
    if ratio:
        total = amplify_numa(total, {"cpu": ratio})
    avail, held = numa_available_amplified(total, {n: {"cpu": c} for n, c in allocated.items()}, {0: bound},
                                           ratio or -1.0)
    assert {n: r["cpu"] for n, r in avail.items()} == want_avail, case
    assert all(r["memory"] == 32 * GI for r in avail.values())
    assert {n: r["cpu"] for n, r in held.items()} == want_alloc, case


def amplified_numa_node(b: ClusterBuilder, ratio: float | None = 1.5) -> None:
    """2 NUMA nodes of 8 CPUs (2 sockets × 4 cores × 2 threads) and 32 GiB, labelled SingleNUMANode, amplified
    ``ratio`` (16 physical CPUs -> 24 allocatable cores at 1.5), with its NodeResourceTopology."""
    anns = dict(topo_ann(2, 1, 4, 2))
    cpu = "16"
    if ratio:
        anns[RATIO] = ratio_text(ratio)
        cpu = f"{amplify(16000, ratio)}m"
    b.node("n1", cpu=cpu, memory="64Gi", annotations=anns,
           labels={"node.koordinator.sh/numa-topology-policy": "SingleNUMANode"})
    b.obj({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology", "metadata": {"name": "n1"},
           "zones": [{"name": f"node-{z}", "type": "Node",
                      "resources": [{"name": "cpu", "capacity": "8", "allocatable": "8"},
                                    {"name": "memory", "capacity": "32Gi", "allocatable": "32Gi"}]} for z in (0, 1)]})


def _numa_of(r: Any, name: str) -> list[int]:
    for p in r.to_dict()["pods"]:
        if p["name"] == name:
            raw = p["annotations"].get(STATUS)
            return [int(x["node"]) for x in (json.loads(raw).get("numaNodeResources") or [])] if raw else []
    raise KeyError(name)


def test_simulate_numa_nodes_amplified_under_a_numa_policy() -> None:
    """amplifyNUMANodeResources and the amplified per-NUMA accounting, hand-derived. Each NUMA node: 8 CPUs
    × 1.5 = 12000m.

    * ``ls-a`` (LS, 10 cores): 10000 ≤ 12000 on NUMA node 0 (it would not fit 8 physical CPUs): NUMA 0.
    * ``lsr-b`` (LSR, 4 CPUs): asks Amplify(4000, 1.5) = 6000; NUMA 0 has 2000 left, NUMA 1 12000 (and 8 whole
      free CPUs, 8000 ≥ 6000): NUMA 1, its cpuset there; its resource-status records the physical 4 cores.
    * ``ls-c`` (LS, 7 cores): NUMA 1 holds 4000 with 4 CPUs bound, counted 4000 − 4000 + 6000 = 6000, so 6000
      left: refused (counting the bound CPUs physically would leave 8000).
    * ``ls-e`` (LS, 6 cores): 6000 ≤ 6000 on NUMA 1 (the whole-node amplified check: 14000 − 4000 + 6000 =
      16000 requested of 24000).
    """
    b = ClusterBuilder()
    amplified_numa_node(b)
    b.pod("ls-a", cpu="10", memory="4Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9400)
    lsr(b, "lsr-b", "4", priority=9300)
    b.pod("ls-c", cpu="7", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9200)
    b.pod("ls-e", cpu="6", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9100)
    r = schedule(b, only=ONLY)
    placed = r.placements()
    assert placed["default/ls-a"] == "n1" and _numa_of(r, "ls-a") == [0]
    assert placed["default/lsr-b"] == "n1" and _numa_of(r, "lsr-b") == [1]
    status = json.loads(next(p for p in r.to_dict()["pods"] if p["name"] == "lsr-b")["annotations"][STATUS])
    assert status["numaNodeResources"][0]["resources"]["cpu"] == "4"
    assert placed.get("default/ls-c") is None  # (retried after ls-e: its last reason is then the plain fit's)
    assert placed["default/ls-e"] == "n1" and _numa_of(r, "ls-e") == [1]


def test_simulate_numa_without_amplification_keeps_physical_numa_nodes() -> None:
    """The control: the same node not amplified (16 cores, NUMA nodes of 8): the 10-core pod fits no NUMA node."""
    b = ClusterBuilder()
    amplified_numa_node(b, ratio=None)
    b.pod("ls-a", cpu="10", memory="4Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9400)
    r = schedule(b, only=ONLY)
    assert r.placements().get("default/ls-a") is None and "NUMA" in reason_of(r, "ls-a")


def test_simulate_bound_cpus_count_amplified_on_their_numa_node() -> None:
    """``ls-c`` alone after ``ls-a`` and ``lsr-b`` (see above): NUMA 1 has 12000 − 6000 = 6000 left for its 7000
    (4000 − 4000 + Amplify(4000) held), NUMA 0 2000: SingleNUMANode refuses it with the merge's message."""
    b = ClusterBuilder()
    amplified_numa_node(b)
    b.pod("ls-a", cpu="10", memory="4Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9400)
    lsr(b, "lsr-b", "4", priority=9300)
    b.pod("ls-c", cpu="7", memory="1Gi", labels={"koordinator.sh/qosClass": "LS"}, priority=9200)
    r = schedule(b, only=ONLY)
    assert r.placements().get("default/ls-c") is None
    assert "Unaligned NUMA Hint cause cpu prefer [11] among [11]" in reason_of(r, "ls-c")
