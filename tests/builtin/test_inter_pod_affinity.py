"""inter_pod_affinity: cases of kube-scheduler's ``interpodaffinity/filtering_test.go``
(TestRequiredAffinitySingleNode, TestRequiredAffinityMultipleNodes) and ``scoring_test.go``
(TestPreferredAffinity), ported as facts, run through the plugin and the embedded cluster."""

from __future__ import annotations

import numpy as np
import pytest

from koordfw import CycleState, NodeBatch
from koordfw.builtin.inter_pod_affinity import Args, InterPodAffinity
from koordfw.core.cluster import ClusterState
from koordfw.inputs import make_node, make_pod
from koordfw.testing import ClusterBuilder, schedule

AFF = "node(s) didn't match pod affinity rules"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"


def term(key, op, values, topo, **extra):
    expr = {"key": key, "operator": op}
    if values:
        expr["values"] = list(values)
    return {"labelSelector": {"matchExpressions": [expr]}, "topologyKey": topo, **extra}


def In(key, topo, *values, **extra):
    return term(key, "In", values, topo, **extra)


def NotIn(key, topo, *values, **extra):
    return term(key, "NotIn", values, topo, **extra)


def Exists(key, topo, **extra):
    return term(key, "Exists", (), topo, **extra)


def affinity(aff=(), anti=(), pref_aff=(), pref_anti=()):
    out = {}
    if aff or pref_aff:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": list(aff),
                              "preferredDuringSchedulingIgnoredDuringExecution":
                                  [{"weight": w, "podAffinityTerm": t} for w, t in pref_aff]}
    if anti or pref_anti:
        out["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": list(anti),
                                  "preferredDuringSchedulingIgnoredDuringExecution":
                                      [{"weight": w, "podAffinityTerm": t} for w, t in pref_anti]}
    return out


def pod(name, labels=None, node=None, ns="default", **aff):
    a = affinity(**aff)
    return make_pod(name, ns, labels=labels or {}, node_name=node, **({"affinity": a} if a else {}))


def run_filter(incoming, existing, nodes, args=None):
    """(pre_filter skipped?, {node: reason or None})."""
    cluster = ClusterState()
    for n in nodes:
        cluster.add_node(n)
    for p in existing:
        cluster.add_pod(p)
    plugin = InterPodAffinity(args or Args())
    state = CycleState()

    class H:
        pass

    h = H()
    h.cluster = cluster
    st = plugin.pre_filter(incoming, state, h)
    if st is not None and st.code.name == "SKIP":
        return True, {n.name: None for n in nodes}
    batch = NodeBatch(cluster, np.arange(cluster.num_nodes, dtype=np.int64))
    res = plugin.filter(incoming, batch, state)
    if res is None:
        return False, {n.name: None for n in nodes}
    ok, reasons = res
    if not isinstance(reasons, list):
        reasons = [reasons] * len(nodes)
    return False, {n.name: (None if ok[j] else reasons[j].reasons[0]) for j, n in enumerate(nodes)}


SEC = {"service": "securityscan"}
S1 = {"security": "S1"}
NODE1 = make_node("node1", labels={"region": "r1", "zone": "z11"})

SINGLE = [
    ("no affinity, no pods", pod("p"), [], None, True),
    ("affinity In matches the existing pod", pod("p", S1, aff=[In("service", "region", "securityscan", "value2")]),
     [pod("e", SEC, "node1")], None, False),
    ("affinity NotIn matches the existing pod", pod("p", S1, aff=[NotIn("service", "region", "securityscan3", "value3")]),
     [pod("e", SEC, "node1")], None, False),
    ("another namespace does not match", pod("p", S1, aff=[In("service", "region", "securityscan", "value2",
                                                               namespaces=["DiffNameSpace"])]),
     [pod("e", SEC, "node1", ns="ns")], AFF, False),
    ("unmatching labelSelector", pod("p", SEC, aff=[In("service", "region", "antivirusscan", "value2")]),
     [pod("e", SEC, "node1")], AFF, False),
    ("operators ANDed over several terms, all hold",
     pod("p", S1, aff=[{"labelSelector": {"matchExpressions": [{"key": "service", "operator": "Exists"},
                                                                {"key": "wrongkey", "operator": "DoesNotExist"}]},
                        "topologyKey": "region"},
                       {"labelSelector": {"matchExpressions": [
                           {"key": "service", "operator": "In", "values": ["securityscan"]},
                           {"key": "service", "operator": "NotIn", "values": ["WrongValue"]}]},
                        "topologyKey": "region"}]),
     [pod("e", SEC, "node1")], None, False),
    ("operators ANDed, one expression fails",
     pod("p", S1, aff=[Exists("service", "region"),
                       {"labelSelector": {"matchExpressions": [
                           {"key": "service", "operator": "In", "values": ["securityscan2"]}]}, "topologyKey": "region"}]),
     [pod("e", SEC, "node1")], AFF, False),
    ("affinity and anti-affinity both hold",
     pod("p", S1, aff=[In("service", "region", "securityscan", "value2")],
         anti=[In("service", "node", "antivirusscan", "value2")]), [pod("e", SEC, "node1")], None, False),
    ("affinity, anti-affinity and the existing pod's anti-affinity hold",
     pod("p", S1, aff=[In("service", "region", "securityscan", "value2")],
         anti=[In("service", "node", "antivirusscan", "value2")]),
     [pod("e", SEC, "node1", anti=[In("service", "node", "antivirusscan", "value2")])], None, False),
    ("affinity holds, anti-affinity fails",
     pod("p", S1, aff=[In("service", "region", "securityscan", "value2")],
         anti=[In("service", "zone", "securityscan", "value2")]), [pod("e", SEC, "node1")], ANTI, False),
    ("the existing pod's anti-affinity rejects (symmetry)",
     pod("p", SEC, aff=[In("service", "region", "securityscan", "value2")],
         anti=[In("service", "node", "antivirusscan", "value2")]),
     [pod("e", SEC, "node1", anti=[In("service", "zone", "securityscan", "value2")])], EXISTING, False),
    ("a pod not matching its own NotIn term, no match anywhere",
     pod("p", SEC, aff=[NotIn("service", "region", "securityscan", "value2")]),
     [pod("e", SEC, "node2")], AFF, False),
    ("existing anti-affinity respected for a pod without terms",
     pod("p", SEC), [pod("e", SEC, "node1", anti=[In("service", "zone", "securityscan", "value2")])], EXISTING, False),
    ("existing NotIn anti-affinity does not match: skipped",
     pod("p", SEC), [pod("e", SEC, "node1", anti=[NotIn("service", "zone", "securityscan", "value2")])], None, True),
    ("own anti-affinity matches the existing pod",
     pod("p", SEC, anti=[Exists("service", "region"), Exists("security", "region")]),
     [pod("e", S1, "node1", anti=[Exists("security", "zone")])], ANTI, False),
    ("symmetry a1: partial match both ways",
     pod("p", SEC, anti=[Exists("service", "zone"), Exists("security", "zone")]),
     [pod("e", S1, "node1", anti=[Exists("security", "zone")])], ANTI, False),
    ("symmetry a2: the existing pod's term matches the incoming pod",
     pod("p", S1, anti=[Exists("security", "zone")]),
     [pod("e", SEC, "node1", anti=[Exists("service", "zone"), Exists("security", "zone")])], EXISTING, False),
    ("symmetry b1", pod("p", {"abc": "", "xyz": ""}, anti=[Exists("abc", "zone"), Exists("def", "zone")]),
     [pod("e", {"def": "", "xyz": ""}, "node1", anti=[Exists("abc", "zone"), Exists("def", "zone")])], ANTI, False),
    ("symmetry b2", pod("p", {"def": "", "xyz": ""}, anti=[Exists("abc", "zone"), Exists("def", "zone")]),
     [pod("e", {"abc": "", "xyz": ""}, "node1", anti=[Exists("abc", "zone"), Exists("def", "zone")])], ANTI, False),
    ("the first pod of a group with affinity to itself",
     pod("p", SEC, aff=[In("service", "region", "securityscan")]), [], None, False),
    ("the first pod of a group, but the node lacks the topology key",
     pod("p", SEC, aff=[In("service", "rack", "securityscan")]), [], AFF, False),
    ("namespaceSelector {} matches every namespace",
     pod("p", S1, aff=[In("service", "region", "securityscan", namespaceSelector={})]),
     [pod("e", SEC, "node1", ns="other")], None, False),
    ("namespaceSelector on the namespace name label",
     pod("p", S1, aff=[In("service", "region", "securityscan",
                         namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "team-b"}})]),
     [pod("e", SEC, "node1", ns="team-a")], AFF, False),
]


@pytest.mark.parametrize(("name", "incoming", "existing", "want", "skipped"), SINGLE, ids=[c[0] for c in SINGLE])
def test_required_affinity_single_node(name, incoming, existing, want, skipped):
    got_skip, got = run_filter(incoming, existing, [NODE1])
    assert got_skip is skipped
    assert got["node1"] == want


def test_required_affinity_multiple_nodes_by_zone():
    """TestRequiredAffinityMultipleNodes: a pod with affinity to a zone's pod goes to either node of that
    zone; anti-affinity on the zone keeps it out of both."""
    nodes = [make_node("node-a", labels={"region": "r1", "zone": "z1", "hostname": "h1"}),
             make_node("node-b", labels={"region": "r1", "zone": "z2", "hostname": "h2"}),
             make_node("node-c", labels={"region": "r1", "zone": "z1", "hostname": "h3"})]
    existing = [pod("e", {"foo": "bar"}, "node-a")]
    _, got = run_filter(pod("p", aff=[In("foo", "zone", "bar")]), existing, nodes)
    assert got == {"node-a": None, "node-b": AFF, "node-c": None}
    _, got = run_filter(pod("p", anti=[In("foo", "zone", "bar")]), existing, nodes)
    assert got == {"node-a": ANTI, "node-b": None, "node-c": ANTI}
    _, got = run_filter(pod("p", anti=[In("foo", "region", "bar")]), existing, nodes)
    assert got == {"node-a": ANTI, "node-b": ANTI, "node-c": ANTI}


def test_affinity_counts_pods_matching_all_terms():
    """kube's updateWithAffinityTerms: an existing pod counts for the affinity only if it matches every term."""
    nodes = [make_node("n1", labels={"zone": "z1"}), make_node("n2", labels={"zone": "z2"})]
    existing = [pod("a", {"app": "a"}, "n1"), pod("b", {"tier": "db"}, "n2")]
    _, got = run_filter(pod("p", aff=[In("app", "zone", "a"), In("tier", "zone", "db")]), existing, nodes)
    assert got == {"n1": AFF, "n2": AFF}


def test_match_label_keys_narrow_the_selector_to_the_pods_revision():
    nodes = [make_node("n1", labels={"kubernetes.io/hostname": "n1"})]
    t = In("app", "kubernetes.io/hostname", "web", matchLabelKeys=["pod-template-hash"])
    old = pod("old", {"app": "web", "pod-template-hash": "v1"}, "n1")
    _, got = run_filter(pod("p", {"app": "web", "pod-template-hash": "v2"}, anti=[t]), [old], nodes)
    assert got == {"n1": None}
    _, got = run_filter(pod("p", {"app": "web", "pod-template-hash": "v1"}, anti=[t]), [old], nodes)
    assert got == {"n1": ANTI}
    m = In("app", "kubernetes.io/hostname", "web", mismatchLabelKeys=["tenant"])
    other = pod("o", {"app": "web", "tenant": "b"}, "n1")
    _, got = run_filter(pod("p", {"app": "web", "tenant": "a"}, aff=[m]), [other], nodes)
    assert got == {"n1": None}
    _, got = run_filter(pod("p", {"app": "web", "tenant": "b"}, aff=[m]), [other], nodes)
    assert got == {"n1": AFF}


# -- scoring ---------------------------------------------------------------------------------------
def scores(incoming, existing, nodes, args=None):
    b = ClusterBuilder()
    for n in nodes:
        b.manifests.nodes.append(n)
    for p in existing:
        b.manifests.pods.append(p)
    plugin = InterPodAffinity(args or Args())
    cluster = b.build().to_cluster()
    batch = NodeBatch(cluster, np.arange(cluster.num_nodes, dtype=np.int64))
    state = CycleState()
    st = plugin.pre_score(incoming, batch, state)
    if st is not None:
        return {n.name: 0 for n in nodes}
    raw = plugin.score(incoming, batch, state)
    return dict(zip(batch.names, plugin.normalize_score(raw).tolist()))


CHINA, INDIA = {"region": "China"}, {"region": "India"}
AZ1 = {"az": "az1"}


def test_score_no_existing_pods():
    nodes = [make_node("node1", labels=CHINA), make_node("node2", labels=INDIA), make_node("node3", labels=AZ1)]
    assert scores(pod("p", pref_aff=[(5, In("security", "region", "S1"))]), [], nodes) == {
        "node1": 0, "node2": 0, "node3": 0}


def test_score_affinity_topology_and_pods_match():
    nodes = [make_node("node1", labels=CHINA), make_node("node2", labels=INDIA), make_node("node3", labels=AZ1)]
    existing = [pod("e1", S1, "node1"), pod("e2", {"security": "S2"}, "node2")]
    assert scores(pod("p", pref_aff=[(5, In("security", "region", "S1"))]), existing, nodes) == {
        "node1": 100, "node2": 0, "node3": 0}


def test_score_same_domain_same_score():
    nodes = [make_node("node1", labels=CHINA), make_node("node2", labels={"region": "China", "az": "az1"}),
             make_node("node3", labels=INDIA)]
    assert scores(pod("p", pref_aff=[(5, In("security", "region", "S1"))]), [pod("e", S1, "node1")], nodes) == {
        "node1": 100, "node2": 100, "node3": 0}


def test_score_anti_affinity():
    nodes = [make_node("node1", labels=CHINA), make_node("node2", labels=INDIA)]
    existing = [pod("e1", S1, "node1"), pod("e2", {"security": "S2"}, "node2")]
    assert scores(pod("p", pref_anti=[(5, In("security", "region", "S1"))]), existing, nodes) == {
        "node1": 0, "node2": 100}


def test_score_existing_pods_required_affinity_with_hard_weight():
    nodes = [make_node("node1", labels=CHINA), make_node("node2", labels=INDIA), make_node("node3", labels=AZ1)]
    existing = [pod("e", S1, "node1", aff=[In("security", "region", "S1")])]
    assert scores(pod("p", S1), existing, nodes) == {"node1": 100, "node2": 0, "node3": 0}
    assert scores(pod("p", S1), existing, nodes, Args(hard_pod_affinity_weight=0)) == {
        "node1": 0, "node2": 0, "node3": 0}


def test_score_existing_pods_preferred_terms_and_the_ignore_option():
    nodes = [make_node("node1", labels=CHINA), make_node("node2", labels=INDIA)]
    existing = [pod("e", {}, "node2", pref_anti=[(10, In("security", "region", "S1"))]),
                pod("f", {}, "node1", pref_aff=[(3, In("security", "region", "S1"))])]
    assert scores(pod("p", S1), existing, nodes) == {"node1": 100, "node2": 0}
    assert scores(pod("p", S1), existing, nodes, Args(ignore_preferred_terms_of_existing_pods=True)) == {
        "node1": 0, "node2": 0}


# -- through the scheduler -----------------------------------------------------------------------------
def test_replicas_with_anti_affinity_spread_one_per_node_and_the_extra_one_pends():
    anti = affinity(anti=[In("app", "kubernetes.io/hostname", "web")])
    b = ClusterBuilder()
    for i in range(3):
        b.node(f"n{i}", labels={"kubernetes.io/hostname": f"n{i}"})
    for i in range(4):
        b.pod(f"web-{i}", labels={"app": "web"}, affinity=anti)
    r = schedule(b)
    placed = [r.placements()[f"default/web-{i}"] for i in range(4)]
    assert sorted(p for p in placed if p) == ["n0", "n1", "n2"] and placed.count(None) == 1
    pending = next(f"default/web-{i}" for i in range(4) if placed[i] is None)
    assert r.results[r.cluster.pod_by_key(pending).uid].reason == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.")


def test_a_pod_follows_its_affinity_and_the_plugin_can_be_switched_off():
    b = ClusterBuilder()
    for i in range(4):
        b.node(f"n{i}", labels={"topology.kubernetes.io/zone": f"z{i % 2}"})
    b.pod("cache", labels={"app": "cache"}, node="n3")
    b.pod("web", affinity=affinity(aff=[In("app", "topology.kubernetes.io/zone", "cache")]))
    r = schedule(b)
    assert r.placements()["default/web"] in ("n1", "n3")
    b2 = ClusterBuilder().node("n0", labels={"topology.kubernetes.io/zone": "z0"})
    b2.pod("web", affinity=affinity(aff=[In("app", "topology.kubernetes.io/zone", "cache")]))
    r2 = schedule(b2)
    assert r2.results[r2.cluster.pod_by_key("default/web").uid].reason == (
        "0/1 nodes are available: 1 node(s) didn't match pod affinity rules.")
    assert schedule(b2, profile={"disable": ["inter_pod_affinity"]}).placements()["default/web"] == "n0"


def test_bad_args_are_refused():
    from koordfw import ConfigError, build_registry

    with pytest.raises(ConfigError, match="hardPodAffinityWeight"):
        build_registry({"pluginConfig": {"inter_pod_affinity": {"hardPodAffinityWeight": 101}}}, autoload=False)


# -- preemption ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("whose", ["incoming", "existing"])
def test_preemption_evicts_the_pod_that_breaks_anti_affinity_and_reprieves_the_rest(whose):
    """default_preemption re-runs the filters with victims removed (kube's SelectVictimsOnNode): the
    lower-priority pod whose presence breaks the anti-affinity (the incoming pod's, or its own towards
    the incoming pod) is evicted; the bystander is reprieved."""
    b = ClusterBuilder().node("n1", labels={"kubernetes.io/hostname": "n1"})
    anti_db = affinity(anti=[In("app", "kubernetes.io/hostname", "db")])
    anti_web = affinity(anti=[In("app", "kubernetes.io/hostname", "web")])
    b.pod("db", labels={"app": "db"}, node="n1", priority=10, **({"affinity": anti_web} if whose == "existing" else {}))
    b.pod("bystander", labels={"app": "cache"}, node="n1", priority=10)
    b.pod("web", labels={"app": "web"}, priority=1000, **({"affinity": anti_db} if whose == "incoming" else {}))
    r = schedule(b)
    got = r.placements()
    assert got["default/web"] == "n1"
    assert got["default/bystander"] == "n1"
    assert got["default/db"] is None


def test_preemption_does_not_help_an_unmet_affinity():
    """A node rejected for pod affinity is UnschedulableAndUnresolvable: no victims are chosen there."""
    b = ClusterBuilder().node("n1", labels={"kubernetes.io/hostname": "n1"})
    b.pod("low", labels={"app": "x"}, node="n1", priority=10)
    b.pod("web", priority=1000, affinity=affinity(aff=[In("app", "kubernetes.io/hostname", "cache")]))
    r = schedule(b)
    assert r.placements() == {"default/low": "n1", "default/web": None}
