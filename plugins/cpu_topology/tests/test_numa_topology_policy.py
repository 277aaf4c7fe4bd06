"""NUMA topology policies through the embedded kernel: node label and pod spec, the refusal, the chosen
NUMA nodes in resource-status (``numaNodeResources``), and a bound pod's cpuset inside them."""

import json

import pytest
from cpu_topology_helpers import STATUS, lsr, reason_of, topo_ann

from koordfw.testing import ClusterBuilder, schedule

ONLY = ["cpu_topology"]
POLICY = "node.koordinator.sh/numa-topology-policy"
NUMA_SPEC = "scheduling.koordinator.sh/numa-topology-spec"


def nrt(builder, name, cpu_per_numa="8", mem_per_numa="32Gi", numas=2, policies=None):
    zones = [{"name": f"node-{i}", "type": "Node",
              "resources": [{"name": "cpu", "capacity": cpu_per_numa, "allocatable": cpu_per_numa},
                            {"name": "memory", "capacity": mem_per_numa, "allocatable": mem_per_numa}]}
             for i in range(numas)]
    obj = {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
           "metadata": {"name": name}, "zones": zones}
    if policies:
        obj["topologyPolicies"] = policies
    builder.obj(obj)


def status_of(result, name):
    for p in result.to_dict()["pods"]:
        if p["name"] == name:
            raw = p["annotations"].get(STATUS)
            return json.loads(raw) if raw else None
    raise KeyError(name)


def ls(builder, name, cpu, memory, spec=None):
    anns = {NUMA_SPEC: json.dumps(spec)} if spec else {}
    return builder.pod(name, requests={"cpu": cpu, "memory": memory}, labels={"koordinator.sh/qosClass": "LS"},
                       annotations=anns)


@pytest.fixture
def builder():
    return ClusterBuilder()


def test_single_numa_node_places_on_one_numa_node_and_records_it(builder):
    builder.node("n1", cpu="16", memory="64Gi", labels={POLICY: "SingleNUMANode"}, annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "n1")
    ls(builder, "a", "6", "8Gi")
    ls(builder, "b", "6", "8Gi")
    r = schedule(builder, only=ONLY)
    sa, sb = status_of(r, "a"), status_of(r, "b")
    assert sa == {"numaNodeResources": [{"node": 0, "resources": {"cpu": "6", "memory": "8Gi"}}]}
    # 2 cpu left on NUMA 0: b goes to NUMA 1
    assert sb == {"numaNodeResources": [{"node": 1, "resources": {"cpu": "6", "memory": "8Gi"}}]}


def test_single_numa_node_refuses_with_koordinator_reason(builder):
    builder.node("n1", cpu="16", memory="64Gi", labels={POLICY: "SingleNUMANode"}, annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "n1")
    ls(builder, "big", "10", "8Gi")
    r = schedule(builder, only=ONLY)
    reason = reason_of(r, "big")
    assert "Unaligned NUMA Hint cause cpu prefer [11] among [11],memory prefer [11] among [11]" in reason
    assert reason.startswith("0/1 nodes are available")


def test_restricted_spans_two_numa_nodes_and_best_effort_never_refuses(builder):
    builder.node("r", cpu="16", memory="64Gi", labels={POLICY: "Restricted"}, annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "r")
    ls(builder, "big", "10", "8Gi")
    r = schedule(builder, only=ONLY)
    st = status_of(r, "big")
    assert [e["node"] for e in st["numaNodeResources"]] == [0, 1]
    assert sum(int(e["resources"]["cpu"]) for e in st["numaNodeResources"]) == 10


def test_pod_policy_conflicting_with_node_policy_is_refused(builder):
    builder.node("n1", cpu="16", memory="64Gi", labels={POLICY: "Restricted"}, annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "n1")
    ls(builder, "p", "2", "1Gi", spec={"numaTopologyPolicy": "SingleNUMANode"})
    r = schedule(builder, only=ONLY)
    assert "node(s) NUMA Topology policy not match" in reason_of(r, "p")


def test_pod_level_policy_on_a_node_without_one(builder):
    builder.node("n1", cpu="16", memory="64Gi", annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "n1")
    ls(builder, "p", "4", "1Gi", spec={"numaTopologyPolicy": "SingleNUMANode"})
    ls(builder, "q", "12", "1Gi", spec={"numaTopologyPolicy": "SingleNUMANode"})
    r = schedule(builder, only=ONLY)
    assert [e["node"] for e in status_of(r, "p")["numaNodeResources"]] == [0]
    assert "Unaligned NUMA Hint" in reason_of(r, "q")


def test_nrt_topology_policies_give_the_node_policy(builder):
    builder.node("n1", cpu="16", memory="64Gi", annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "n1", policies=["SingleNUMANodePodLevel"])
    ls(builder, "big", "10", "1Gi")
    r = schedule(builder, only=ONLY)
    assert "Unaligned NUMA Hint" in reason_of(r, "big")


def test_bound_pod_cpuset_inside_the_chosen_numa_node(builder):
    builder.node("n1", cpu="16", memory="64Gi", labels={POLICY: "SingleNUMANode"}, annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "n1")
    ls(builder, "first", "6", "1Gi")
    lsr(builder, "bound", "4")
    r = schedule(builder, only=ONLY)
    # the LSR pod (koord-prod priority) goes first: NUMA 0 (CPUs 0-7), whole cores 0-3; the 6-cpu pod no
    # longer fits NUMA 0's 4 free cpus and SingleNUMANode puts it on NUMA 1
    assert status_of(r, "bound") == {"cpuset": "0-3",
                                     "numaNodeResources": [{"node": 0, "resources": {"cpu": "4", "memory": "1Gi"}}]}
    assert [e["node"] for e in status_of(r, "first")["numaNodeResources"]] == [1]


def test_bound_pod_cpuset_follows_the_numa_choice(builder):
    """A pod already bound on NUMA 0 holds 6 cpu there (its resource-status), so the LSR pod's NUMA node is
    1 and its cpuset is drawn from NUMA 1's CPUs (8-15)."""
    builder.node("n1", cpu="16", memory="64Gi", labels={POLICY: "SingleNUMANode"}, annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "n1")
    builder.pod("old", requests={"cpu": "6", "memory": "1Gi"}, node="n1", annotations={STATUS: json.dumps(
        {"numaNodeResources": [{"node": 0, "resources": {"cpu": "6", "memory": "1Gi"}}]})})
    lsr(builder, "bound", "4")
    r = schedule(builder, only=ONLY)
    assert status_of(r, "bound") == {"cpuset": "8-11",
                                     "numaNodeResources": [{"node": 1, "resources": {"cpu": "4", "memory": "1Gi"}}]}


def test_score_prefers_the_node_with_a_single_numa_hint(builder):
    for name in ("wide", "narrow"):
        builder.node(name, cpu="16", memory="64Gi", labels={POLICY: "BestEffort"}, annotations=topo_ann(2, 1, 4, 2))
    nrt(builder, "wide", cpu_per_numa="4")   # 6 cpu needs both NUMA nodes
    nrt(builder, "narrow", cpu_per_numa="8")
    ls(builder, "p", "6", "1Gi")
    r = schedule(builder, only=ONLY)
    assert {p["name"]: p["node"] for p in r.to_dict()["pods"]}["p"] == "narrow"
