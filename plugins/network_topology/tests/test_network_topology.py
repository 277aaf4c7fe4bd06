"""network_topology: the tree, Koordinator's solver ordering, and gangs placed in simulate."""

from __future__ import annotations

import json
import pathlib

import pytest
from koordfw_network_topology.solver import SpecError, less, parse_spec
from koordfw_network_topology.tree import Topology, TreeNode, parse_layers

from koordfw import ManifestError
from koordfw.extension import TOPOLOGY_LAYER_NODE
from koordfw.inputs import load_yaml_all
from koordfw.testing import ClusterBuilder, schedule

EXAMPLE = pathlib.Path(__file__).parents[3] / "examples" / "network_topology"
SPEC = "gang.scheduling.koordinator.sh/network-topology-spec"
ONLY = ("gang", "network_topology")

CNT = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "ClusterNetworkTopology",
       "metadata": {"name": "default"},
       "spec": {"networkTopologySpec": [
           {"topologyLayer": "spineLayer", "labelKey": ["network.topology.nvidia.com/spine"]},
           {"topologyLayer": "blockLayer", "parentTopologyLayer": "spineLayer",
            "labelKey": ["network.topology.nvidia.com/block"]},
           {"topologyLayer": TOPOLOGY_LAYER_NODE, "parentTopologyLayer": "blockLayer"}]}}


def topo_cluster(layout: dict[str, dict[str, int]], cpu: str = "16", cnt: dict | None = CNT) -> ClusterBuilder:
    b = ClusterBuilder()
    i = 0
    for spine, blocks in layout.items():
        for block, n in blocks.items():
            for _ in range(n):
                b.node(f"n{i}", cpu=cpu, labels={"network.topology.nvidia.com/spine": spine,
                                                  "network.topology.nvidia.com/block": block})
                i += 1
    if cnt is not None:
        b.obj(cnt)
    return b


def gang(b: ClusterBuilder, name: str, n: int, cpu: str, strategy: str | None = "MustGather",
         layer: str = "blockLayer", t: int = 0) -> ClusterBuilder:
    ann = {"gang.scheduling.koordinator.sh/name": name, "gang.scheduling.koordinator.sh/min-available": str(n)}
    if strategy:
        ann[SPEC] = json.dumps({"gatherStrategy": [{"layer": layer, "strategy": strategy}]})
    for k in range(n):
        b.obj({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{name}-{k}", "namespace": "default", "annotations": dict(ann),
                            "creationTimestamp": f"2026-11-01T00:00:{t:02d}Z"},
               "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": cpu}}}]}})
    return b


def blocks_of(r, prefix: str) -> set[str]:
    out = set()
    for key, node in r.placements().items():
        if key.startswith(f"default/{prefix}-"):
            assert node is not None, key
            out.add(r.cluster.view.node(node).labels["network.topology.nvidia.com/block"])
    return out


# -- the tree --------------------------------------------------------------------------------------------

def test_tree_from_labels_and_a_virtual_accelerator_domain():
    layers = parse_layers(CNT)
    assert [la.name for la in layers] == ["spineLayer", "blockLayer", TOPOLOGY_LAYER_NODE]
    t = Topology(layers, [("a", {"network.topology.nvidia.com/spine": "s1"}),  # no block: its own
                          ("b", {"network.topology.nvidia.com/block": "b1"})])  # no spine: left out
    assert t.leaf["a"].parent is not None and t.leaf["a"].parent.label == "blockLayer/a"
    assert t.unplaced == {"b": "spineLayer"}


@pytest.mark.parametrize("spec, field, message", [
    ({"networkTopologySpec": [{"topologyLayer": "blockLayer", "labelKey": ["x"]}]}, "spec.networkTopologySpec",
     "'NodeTopologyLayer' not found"),
    ({"networkTopologySpec": [{"topologyLayer": TOPOLOGY_LAYER_NODE, "parentTopologyLayer": "rack"}]},
     "spec.networkTopologySpec", "'rack' (the parent of 'NodeTopologyLayer') not found"),
    ({"networkTopologySpec": [{"topologyLayer": "blockLayer"},
                              {"topologyLayer": TOPOLOGY_LAYER_NODE, "parentTopologyLayer": "blockLayer"}]},
     "spec.networkTopologySpec[0].labelKey", "names no node label key"),
    ({"networkTopologySpec": "block"}, "spec.networkTopologySpec", "non-empty list"),
])
def test_a_bad_cluster_network_topology_names_the_field(spec, field, message):
    with pytest.raises(ManifestError) as e:
        parse_layers({"spec": spec})
    assert e.value.field == field and message in str(e.value)
    assert "ClusterNetworkTopology/default" in str(e.value)


def test_a_bad_gather_spec_names_the_annotation_and_field():
    with pytest.raises(SpecError, match=r"PodGroup ns/g: annotation .*network-topology-spec: "
                                        r"gatherStrategy\[0\]\.strategy: expected MustGather or PreferGather"):
        parse_spec('{"gatherStrategy": [{"layer": "blockLayer", "strategy": "Gather"}]}', "PodGroup ns/g")
    with pytest.raises(SpecError, match="not JSON"):
        parse_spec("{", "pod default/p")


# -- Koordinator's ordering --------------------------------------------------------------------------------

def _tree():
    root = TreeNode("ClusterTopologyLayer", "cluster", offer_slot=7)
    s1 = TreeNode("spineLayer", "s1", root, offer_slot=3)
    s2 = TreeNode("spineLayer", "s2", root, offer_slot=4)
    b = {name: TreeNode("blockLayer", name, parent, offer_slot=slots, score=100)
         for name, parent, slots in (("b1", s1, 2), ("b2", s1, 2), ("b3", s2, 2), ("b4", s2, 3))}
    return b


@pytest.mark.parametrize("a, b, lower, want", [
    ("b1", "b4", True, True), ("b4", "b1", True, False), ("b1", "b4", False, False), ("b4", "b1", False, True),
    ("b1", "b3", True, True), ("b1", "b3", False, False), ("b1", "b2", True, True),
])
def test_topology_node_less(a, b, lower, want):
    """Koordinator's ``TestTopologyNodeLessFunc`` (coscheduling/core/network_topology_solver_test.go): offer
    slots compared up the ancestors (fewest first when binpacking), then the name."""
    t = _tree()
    assert less(t[a], t[b], lower) is want


def test_topology_node_less_score_and_existing_members():
    """``TestTopologyNodeLessFunc_ScoreFallback``: equal slots up the chain, the higher score first; and the
    domain already holding members of the job first, before any slot count."""
    root = TreeNode("ClusterTopologyLayer", "cluster", offer_slot=4)
    s1 = TreeNode("spineLayer", "s1", root, offer_slot=2)
    b1 = TreeNode("blockLayer", "b1", s1, offer_slot=1, score=200)
    b2 = TreeNode("blockLayer", "b2", s1, offer_slot=1, score=100)
    assert less(b1, b2, True) and not less(b2, b1, True)
    b2.existing = 1
    assert less(b2, b1, True)


# -- gangs in simulate ---------------------------------------------------------------------------------------

def test_must_gather_places_the_gang_in_the_smallest_block_that_fits():
    # b1 holds 2 workers, b2 holds 3, b3 holds 4: a 3-worker gang fits b2 and b3, and b2 is the tighter
    b = gang(topo_cluster({"s1": {"b1": 2, "b2": 3}, "s2": {"b3": 4}}), "job", 3, "16")
    r = schedule(b, only=ONLY)
    assert blocks_of(r, "job") == {"b2"}


def test_must_gather_refuses_with_the_offer_slots_of_every_domain():
    b = gang(topo_cluster({"s1": {"b1": 2, "b2": 2}}), "job", 3, "16")
    r = schedule(b, only=ONLY)
    assert set(r.placements().values()) == {None}
    reason = r.results[r.cluster.pod_by_key("default/job-0").uid].reason
    assert ("no candidate topology nodes can accommodate job, desiredOfferSlot: 3, "
            "topology topologyNode blockLayer/b1: 2;topology topologyNode blockLayer/b2: 2") in reason
    # without the topology the same gang fits (4 nodes, 3 workers): the refusal is the topology's
    plain = gang(topo_cluster({"s1": {"b1": 2, "b2": 2}}), "job", 3, "16", strategy=None)
    assert None not in schedule(plain, only=ONLY).placements().values()


def test_must_gather_at_the_spine_uses_the_spine_that_fits_tightest():
    b = gang(topo_cluster({"s1": {"b1": 2, "b2": 2}, "s2": {"b3": 3}}), "job", 3, "16", layer="spineLayer")
    r = schedule(b, only=ONLY)
    assert blocks_of(r, "job") == {"b3"}


def test_prefer_gather_scores_the_tightest_block_and_spreads_without_it():
    # 4 small workers: LeastAllocated alone spreads them over the 8 empty nodes of 4 blocks
    layout = {"s1": {"b1": 2, "b2": 2}, "s2": {"b3": 2, "b4": 2}}
    spread = schedule(gang(topo_cluster(layout), "job", 4, "4", strategy=None), only=ONLY)
    assert len(blocks_of(spread, "job")) > 1
    gathered = schedule(gang(topo_cluster(layout), "job", 4, "4", strategy="PreferGather"), only=ONLY)
    assert len(blocks_of(gathered, "job")) == 1


def test_prefer_gather_that_fits_no_block_is_placed_anyway():
    b = gang(topo_cluster({"s1": {"b1": 2, "b2": 2}}), "job", 3, "16", strategy="PreferGather")
    r = schedule(b, only=ONLY)
    assert None not in r.placements().values()


def test_without_a_cluster_network_topology_the_gang_waits_and_says_why():
    b = gang(topo_cluster({"s1": {"b1": 2}}, cnt=None), "job", 2, "1")
    r = schedule(b, only=ONLY)
    reason = r.results[r.cluster.pod_by_key("default/job-0").uid].reason
    assert set(r.placements().values()) == {None}
    assert "gang default/job asks for network topology: no cluster network topology" in reason


def test_an_unknown_layer_is_refused_naming_the_annotation():
    b = gang(topo_cluster({"s1": {"b1": 2}}), "job", 2, "1", layer="rackLayer")
    r = schedule(b, only=ONLY)
    reason = r.results[r.cluster.pod_by_key("default/job-0").uid].reason
    assert "network-topology-spec: layer(s) rackLayer not in ClusterNetworkTopology default" in reason


def test_the_example_places_each_job_in_one_block():
    b = ClusterBuilder()
    for f in sorted(EXAMPLE.glob("*.yaml")):
        b.obj(*load_yaml_all(f.read_text()))
    r = schedule(b, only=ONLY)
    rows = {row["gang"]: row for row in r.extra["networkTopologyGangs"]}
    assert {g: rows[g]["domain"] for g in rows} == {"ai/llm-a": "blockLayer/b2", "ai/llm-b": "blockLayer/b3",
                                                   "ai/llm-c": "", "ai/sweep": "blockLayer/b1"}
    assert rows["ai/llm-c"]["bound"] == 0
    # the gang plugin's one message for the refused job names the topology as what holds it
    (job,) = r.extra["jobs"]
    assert (job["job"], job["constraint"]) == ("ai/llm-c", "NetworkTopology")
    assert "no candidate topology nodes can accommodate job, desiredOfferSlot: 3" in job["message"]
