"""pod_topology_spread: cases in the manner of kube-scheduler's ``podtopologyspread/filtering_test.go``
(TestSingleConstraint, TestMultipleConstraints, minDomains, node inclusion policies, matchLabelKeys) and
``scoring_test.go`` (TestPodTopologySpreadScore, system defaults), as facts, through the plugin and the
embedded cluster."""

from __future__ import annotations

import numpy as np
import pytest

from koordfw import ConfigError, CycleState, NodeBatch, build_registry
from koordfw.builtin.pod_topology_spread import Args, PodTopologySpread, default_selector
from koordfw.core.cluster import ClusterState
from koordfw.core.model import pod_from_manifest
from koordfw.inputs import make_node, make_pod
from koordfw.testing import ClusterBuilder, schedule

SKEW = "node(s) didn't match pod topology spread constraints"
LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"


def tsc(key=ZONE, skew=1, when="DoNotSchedule", selector=None, **extra):
    c = {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
         "labelSelector": selector if selector is not None else {"matchExpressions": [{"key": "foo",
                                                                                      "operator": "Exists"}]}}
    c.update(extra)
    return c


def node(name, zone=None, **kw):
    labels = {HOST: name}
    if zone:
        labels[ZONE] = zone
    return make_node(name, labels=labels, **kw)


FOUR = [node("node-a", "zone1"), node("node-b", "zone1"), node("node-x", "zone2"), node("node-y", "zone2")]


def on(name, node_name, labels=None, ns="default"):
    return make_pod(name, ns, labels={"foo": ""} if labels is None else labels, node_name=node_name)


def terminating(name, node_name):
    return pod_from_manifest({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name, "labels": {"foo": ""},
                                           "deletionTimestamp": "2026-01-01T00:00:00Z"},
                              "spec": {"nodeName": node_name, "containers": [{"name": "c"}]}})


def incoming(*constraints, labels=None, **spec):
    return make_pod("p", labels={"foo": ""} if labels is None else labels,
                    topologySpreadConstraints=list(constraints), **spec)


def run_filter(pod, existing, nodes=FOUR, args=None):
    cluster = ClusterState()
    for n in nodes:
        cluster.add_node(n)
    for p in existing:
        cluster.add_pod(p)
    plugin = PodTopologySpread(args or Args())
    state = CycleState()

    class H:
        pass

    h = H()
    h.cluster = cluster
    st = plugin.pre_filter(pod, state, h)
    if st is not None:
        return {n.name: None for n in nodes}
    res = plugin.filter(pod, NodeBatch(cluster, np.arange(cluster.num_nodes, dtype=np.int64)), state)
    if res is None:
        return {n.name: None for n in nodes}
    ok, reasons = res
    if not isinstance(reasons, list):
        reasons = [reasons] * len(nodes)
    return {n.name: None if ok[j] else reasons[j].reasons[0] for j, n in enumerate(nodes)}


ALL_OK = {"node-a": None, "node-b": None, "node-x": None, "node-y": None}
ZONE2_ONLY = {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None}

SINGLE = [
    ("no existing pods", incoming(tsc()), [], ALL_OK),
    ("no existing pods, the pod does not match itself", incoming(tsc(), labels={}), [], ALL_OK),
    ("pods of another namespace do not count", incoming(tsc()),
     [on("a1", "node-a", ns="ns1"), on("b1", "node-b", ns="ns2"), on("b2", "node-b", ns="ns2")], ALL_OK),
    ("zones 3/1: only zone2 fits", incoming(tsc()),
     [on("a1", "node-a"), on("b1", "node-b"), on("b2", "node-b"), on("x1", "node-x")], ZONE2_ONLY),
    ("zones 2/1, the pod does not match itself: all fit", incoming(tsc(), labels={}),
     [on("a1", "node-a"), on("b1", "node-b"), on("x1", "node-x")], ALL_OK),
    ("zones 2/1, the pod matches itself: zone1 is full", incoming(tsc()),
     [on("a1", "node-a"), on("b1", "node-b"), on("x1", "node-x")], ZONE2_ONLY),
    ("terminating pods do not count", incoming(tsc()),
     [on("a1", "node-a"), terminating("b1", "node-b"), on("x1", "node-x")], ALL_OK),
    ("maxSkew 3 tolerates 3/1 (3 + 1 - 1 = 3)", incoming(tsc(skew=3)),
     [on("a1", "node-a"), on("b1", "node-b"), on("b2", "node-b"), on("x1", "node-x")], ALL_OK),
    ("hostname spread: a node with a pod is skewed", incoming(tsc(HOST)), [on("a1", "node-a")],
     {"node-a": SKEW, "node-b": None, "node-x": None, "node-y": None}),
    ("a pod without a labelSelector counts no pods", incoming(tsc(selector={})),
     [on("a1", "node-a"), on("a2", "node-a")], ALL_OK),
]


@pytest.mark.parametrize(("name", "pod", "existing", "want"), SINGLE, ids=[c[0] for c in SINGLE])
def test_single_constraint(name, pod, existing, want):
    assert run_filter(pod, existing) == want


def test_a_node_without_the_key_is_unresolvable():
    nodes = [*FOUR, make_node("node-z", labels={HOST: "node-z"})]
    got = run_filter(incoming(tsc()), [], nodes)
    assert got["node-z"] == LABEL and got["node-a"] is None


def test_multiple_constraints_zone_and_hostname():
    """TestMultipleConstraints: zone maxSkew 1 and hostname maxSkew 1 both apply."""
    existing = [on("a1", "node-a"), on("x1", "node-x"), on("y1", "node-y")]
    got = run_filter(incoming(tsc(), tsc(HOST)), existing)
    # zones 1/2: zone1 (min) fits the zone constraint; node-a already has one, so only node-b fits both
    assert got == {"node-a": SKEW, "node-b": None, "node-x": SKEW, "node-y": SKEW}


def test_min_domains_treats_the_minimum_as_zero_when_too_few_domains():
    existing = [on("a1", "node-a"), on("x1", "node-x")]
    assert run_filter(incoming(tsc()), existing) == ALL_OK
    got = run_filter(incoming(tsc(minDomains=3)), existing)
    assert got == {"node-a": SKEW, "node-b": SKEW, "node-x": SKEW, "node-y": SKEW}
    assert run_filter(incoming(tsc(minDomains=2)), existing) == ALL_OK


def test_node_affinity_policy():
    """Honor (default): nodes the pod's node affinity excludes are not domains' members; Ignore: they are."""
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["node-a", "node-b", "node-x"]}]}]}}}
    existing = [on("a1", "node-a"), on("y1", "node-y")]
    got = run_filter(incoming(tsc(), affinity=aff), existing)
    assert got == {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None}
    got = run_filter(incoming(tsc(nodeAffinityPolicy="Ignore"), affinity=aff), existing)
    assert got == ALL_OK


def test_node_taints_policy():
    """Ignore (default): a tainted node's pods count; Honor: a node with an untolerated taint is left out."""
    nodes = [node("node-a", "zone1"), node("node-b", "zone1"), node("node-x", "zone2"),
             node("node-y", "zone2", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])]
    existing = [on("a1", "node-a"), on("y1", "node-y")]
    assert run_filter(incoming(tsc()), existing, nodes) == ALL_OK
    got = run_filter(incoming(tsc(nodeTaintsPolicy="Honor")), existing, nodes)
    assert got == {"node-a": SKEW, "node-b": SKEW, "node-x": None, "node-y": None}
    tolerating = incoming(tsc(nodeTaintsPolicy="Honor"), tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert run_filter(tolerating, existing, nodes) == ALL_OK


def test_match_label_keys_count_only_the_pods_revision():
    c = tsc(selector={"matchLabels": {"app": "web"}}, matchLabelKeys=["pod-template-hash"])
    old = [on(f"old-{i}", "node-a", {"app": "web", "pod-template-hash": "v1"}) for i in range(3)]
    assert run_filter(incoming(c, labels={"app": "web", "pod-template-hash": "v2"}), old) == ALL_OK
    got = run_filter(incoming(c, labels={"app": "web", "pod-template-hash": "v1"}), old)
    assert got == ZONE2_ONLY


# -- score ---------------------------------------------------------------------------------------------
def run_score(pod, existing, nodes, args=None):
    cluster = ClusterState()
    for n in nodes:
        cluster.add_node(n)
    for p in existing:
        cluster.add_pod(p)
    plugin = PodTopologySpread(args or Args())
    batch = NodeBatch(cluster, np.arange(cluster.num_nodes, dtype=np.int64))
    state = CycleState()
    if plugin.pre_score(pod, batch, state) is not None:
        return None
    raw = plugin.score(pod, batch, state)
    return dict(zip(batch.names, plugin.normalize_score(raw, state).tolist()))


SCORE_NODES = [node("node-a", "zone1"), node("node-b", "zone1"), node("node-c", "zone2"), node("node-d", "zone2")]


def test_score_no_existing_pods():
    got = run_score(incoming(tsc(HOST, when="ScheduleAnyway")), [], SCORE_NODES)
    assert got == {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100}


def test_score_one_constraint_on_hostname_four_candidates():
    """scoring_test.go "one constraint on node, all 4 nodes are candidates": 2/1/0/3 pods."""
    existing = [on("a1", "node-a"), on("a2", "node-a"), on("b1", "node-b"),
                on("d1", "node-d"), on("d2", "node-d"), on("d3", "node-d")]
    got = run_score(incoming(tsc(HOST, when="ScheduleAnyway")), existing, SCORE_NODES)
    assert got == {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0}


def test_score_zone_constraint():
    existing = [on("a1", "node-a"), on("a2", "node-a"), on("c1", "node-c")]
    got = run_score(incoming(tsc(ZONE, when="ScheduleAnyway")), existing, SCORE_NODES)
    # zone1 2 pods, zone2 1: raw round(2·log 4) = 3 and round(log 4) = 1; 100·(3+1−s)/3
    assert got == {"node-a": 33, "node-b": 33, "node-c": 100, "node-d": 100}


def test_score_nodes_without_the_key_are_ignored_for_the_pods_own_constraints():
    nodes = [*SCORE_NODES[:3], make_node("node-e", labels={HOST: "node-e"})]
    got = run_score(incoming(tsc(ZONE, when="ScheduleAnyway")), [on("a1", "node-a")], nodes)
    assert got["node-e"] == 0 and got["node-c"] == 100


# -- system defaults -----------------------------------------------------------------------------------
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-7c9", "namespace": "default"},
      "spec": {"selector": {"matchLabels": {"app": "web"}}, "replicas": 3,
               "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}}}


def test_default_selector_comes_from_the_pods_replicaset_and_services():
    cluster = ClusterState()
    p = make_pod("web-1", labels={"app": "web", "tier": "fe"})
    assert default_selector(p, cluster) is None
    m = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "web-1", "labels": {"app": "web", "tier": "fe"},
                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9",
                                           "uid": "u1", "controller": True}]},
         "spec": {"containers": [{"name": "c"}]}}
    owned_pod = pod_from_manifest(m)
    assert default_selector(owned_pod, cluster) is None  # the ReplicaSet is unknown
    cluster.set_object("ReplicaSet", RS)
    assert default_selector(owned_pod, cluster) == {"matchLabels": {}, "matchExpressions": [
        {"key": "app", "operator": "In", "values": ["web"]}]}
    cluster.set_object("Service", {"apiVersion": "v1", "kind": "Service",
                                   "metadata": {"name": "fe", "namespace": "default"},
                                   "spec": {"selector": {"tier": "fe"}}})
    assert default_selector(p, cluster) == {"matchLabels": {"tier": "fe"}, "matchExpressions": []}


def test_system_defaults_spread_a_replicasets_pods_over_hosts():
    b = ClusterBuilder()
    for i in range(3):
        b.node(f"n{i}", labels={HOST: f"n{i}", ZONE: "z1"})
    b.obj(RS)
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9", "uid": "u1", "controller": True}]
    for i in range(3):
        b.obj({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"web-{i}", "labels": {"app": "web"}, "ownerReferences": owner},
               "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}})
    got = schedule(b, profile={"pluginConfig": {"node_resources_fit": {"scoringStrategy": "MostAllocated"}}}).placements()
    # MostAllocated alone would stack them; the default hostname constraint (maxSkew 3, weight 1) spreads
    assert len(set(got.values())) == 3, got
    off = schedule(b, profile={"pluginConfig": {"node_resources_fit": {"scoringStrategy": "MostAllocated"}},
                               "disable": ["pod_topology_spread"]}).placements()
    assert len(set(off.values())) == 1, off


def test_list_defaulting_and_bad_args():
    reg = build_registry({"pluginConfig": {"pod_topology_spread": {"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]}}}, autoload=False)
    assert reg is not None
    with pytest.raises(ConfigError, match="defaultingType"):
        build_registry({"pluginConfig": {"pod_topology_spread": {"defaultingType": "Sometimes"}}}, autoload=False)
    with pytest.raises(ConfigError, match="labelSelector"):
        build_registry({"pluginConfig": {"pod_topology_spread": {"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"a": "b"}}}]}}}, autoload=False)


# -- through the scheduler -----------------------------------------------------------------------------
def test_spread_over_two_zones_with_max_skew_one():
    b = ClusterBuilder()
    for i in range(4):
        b.node(f"n{i}", labels={HOST: f"n{i}", ZONE: f"z{i % 2}"})
    c = tsc(selector={"matchLabels": {"app": "web"}})
    for i in range(6):
        b.pod(f"web-{i}", labels={"app": "web"}, topologySpreadConstraints=[c])
    got = schedule(b, profile={"pluginConfig": {"node_resources_fit": {"scoringStrategy": "MostAllocated"}}}).placements()
    zones = [int(n[1]) % 2 for n in got.values()]
    assert zones.count(0) == 3 and zones.count(1) == 3


@pytest.mark.parametrize(("constraint", "field"), [
    ({"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}, "spec.topologySpreadConstraints[0].maxSkew"),
    ({"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}, "spec.topologySpreadConstraints[0].topologyKey"),
    ({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "Never"},
     "spec.topologySpreadConstraints[0].whenUnsatisfiable"),
    ({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2},
     "spec.topologySpreadConstraints[0].minDomains"),
    ({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "honor"},
     "spec.topologySpreadConstraints[0].nodeTaintsPolicy"),
])
def test_a_bad_constraint_names_the_pod_and_field(constraint, field):
    from koordfw import ManifestError

    with pytest.raises(ManifestError) as e:
        make_pod("web", topologySpreadConstraints=[constraint])
    assert e.value.obj == "Pod default/web" and e.value.field == field
