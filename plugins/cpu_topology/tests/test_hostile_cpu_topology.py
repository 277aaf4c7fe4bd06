"""Hostile input (issue 16): a node's unreadable CPU annotation (nested too deep, ids beyond the kernel's
8192, a cpuset of a hundred million CPUs) leaves that node out of CPU binding with a warning naming it;
a bound pod's unreadable resource-status/-spec loses only that pod's cpuset; the other nodes and pods
go on, in bounded time and memory. Scheduler (simulate) and node agent (agent plan) alike."""

from __future__ import annotations

import json

import pytest
from koordfw_cpu_topology.cpuset import CPUSetError, parse_cpuset
from koordfw_cpu_topology.topology import TopologyError, parse_cpu_topology

from koordfw.testing.hostile import check_cli_outcome, run_cli, simulate_objects

CT = "node.koordinator.sh/cpu-topology"
RS = "scheduling.koordinator.sh/resource-status"
RSPEC = "scheduling.koordinator.sh/resource-spec"
RESV = "node.koordinator.sh/reservation"
PCA = "node.koordinator.sh/pod-cpu-allocs"
DEEP = "[" * 5000 + "]" * 5000
HUGE = json.dumps({"cpuset": "0-100000000"})


def topo(n=8):
    return json.dumps({"detail": [{"id": i, "core": i // 2, "socket": 0, "node": 0} for i in range(n)]})


def node(name, annotations=None):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {CT: topo(), **(annotations or {})}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def lse(name, annotations=None, node_name=None):
    res = {"cpu": "2", "memory": "1Gi"}
    spec = {"priority": 9500, "containers": [{"name": "c", "resources": {"requests": res, "limits": res}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": "default", "labels": {"koordinator.sh/qosClass": "LSE"},
                         "annotations": annotations or {}}}


def simulate(tmp_path, objs, profile=None):
    return simulate_objects(tmp_path, objs, profile)


def bound_lse(out):
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert "plugin raised" not in out.stderr, out.stderr[-2000:]
    pods = {p["name"]: p for p in json.loads(out.stdout)["pods"]}
    return pods


BAD_NODE = [
    ("topology nested", {CT: DEEP}, CT),
    ("topology id 10**30", {CT: json.dumps({"detail": [{"id": 10**30, "core": 0}]})}, "detail[0].id"),
    ("topology id 1e400", {CT: '{"detail":[{"id":1e400}]}'}, CT),
    ("topology core 65536", {CT: json.dumps({"detail": [{"id": 0, "core": 0}, {"id": 1, "core": 65536}]})},
     "detail[1].core"),
    ("reservation 0-100000000", {RESV: json.dumps({"reservedCPUs": "0-100000000"})}, "cpu ids must be below 8192"),
    ("reservation nested", {RESV: DEEP}, RESV),
    ("pod-cpu-allocs nested", {PCA: DEEP}, PCA),
]


@pytest.mark.parametrize("anns, field", [b[1:] for b in BAD_NODE], ids=[b[0] for b in BAD_NODE])
def test_a_bad_node_annotation_leaves_only_that_node_out(tmp_path, anns, field):
    out = simulate(tmp_path, [node("n1", anns), node("n2"), lse("a"), lse("b")])
    pods = bound_lse(out)
    assert pods["a"]["node"] == pods["b"]["node"] == "n2"
    assert json.loads(pods["a"]["annotations"][RS])["cpuset"]
    warnings = [ln for ln in out.stderr.splitlines() if "node left out of CPU binding" in ln]
    assert len(warnings) == 1 and '"node": "n1"' in warnings[0] and field in warnings[0]


@pytest.mark.parametrize("anns", [{RS: HUGE}, {RS: DEEP}, {RS: '{"cpuset":"0-1"}', RSPEC: DEEP}],
                         ids=["status 0-100000000", "status nested", "spec nested"])
def test_a_bound_pod_with_an_unreadable_annotation_loses_only_its_cpuset(tmp_path, anns):
    out = simulate(tmp_path, [node("n1"), node("n2"), lse("held", anns, node_name="n1"), lse("a"), lse("b")])
    pods = bound_lse(out)
    assert pods["a"]["phase"] == pods["b"]["phase"] == "Bound"
    assert "default/held" in out.stderr and (RS in out.stderr or RSPEC in out.stderr)


def test_a_pending_pod_with_a_nested_resource_spec_fails_only_its_cycle(tmp_path):
    out = simulate(tmp_path, [node("n1"), lse("bad", {RSPEC: DEEP}), lse("a")])
    pods = bound_lse(out)
    assert pods["a"]["phase"] == "Bound"
    assert pods["bad"]["phase"] == "Pending" and RSPEC in pods["bad"]["reason"]


def test_two_topology_objects_for_one_node_are_named(tmp_path):
    nrt = {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
           "metadata": {"name": "n1", "annotations": {CT: topo(4)}}}
    other = {**nrt, "metadata": {"name": "n1", "namespace": "x", "annotations": {CT: topo(2)}}}
    out = simulate(tmp_path, [node("n1"), node("n2"), nrt, other, lse("a"), lse("b")])
    # cluster-scoped: the loader refuses the namespaced copy as a duplicate, as the API server would
    assert check_cli_outcome(out, names=["duplicate NodeResourceTopology n1"], max_seconds=20) == "error"


def test_cpusets_are_bounded_before_they_are_expanded():
    with pytest.raises(CPUSetError, match="below 8192"):
        parse_cpuset("0-" + "9" * 12)
    with pytest.raises(CPUSetError, match="bad element"):
        parse_cpuset("0-" + "9" * 5000)
    assert len(parse_cpuset("0-8191")) == 8192
    with pytest.raises(TopologyError, match="nested more than"):
        parse_cpu_topology(DEEP)


def test_max_ref_count_is_bounded(tmp_path):
    out = simulate(tmp_path, [node("n1"), lse("a")], {"pluginConfig": {"cpu_topology": {"maxRefCount": 10**30}}})
    assert check_cli_outcome(out, names=["pluginConfig.cpu_topology", "maxRefCount"]) == "error"


# -- the node agent ------------------------------------------------------------------------------------

def agent_pod(uid, qos, annotations=None, kube="burstable"):
    return {"uid": uid, "usage": {"cpu": "1"}, "cgroupDir": f"kubepods/{kube}/pod{uid}",
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": {"koordinator.sh/qosClass": qos},
                         "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


@pytest.mark.parametrize("value", [DEEP, HUGE, '{"cpuset": 5}'], ids=["nested", "0-100000000", "not a string"])
def test_agent_ignores_only_the_pod_with_an_unreadable_cpuset(tmp_path, value):
    state = {"cgroupVersion": 1, "node": {"name": "n1", "capacity": {"cpu": "8"},
                                          "cpuTopology": {"detail": [{"id": i, "core": i // 2} for i in range(8)]}},
             "pods": [agent_pod("lse", "LSE", {RS: '{"cpuset":"0-1"}'}), agent_pod("ls", "LS"),
                      agent_pod("bad", "LSR", {RS: value})], "cgroups": {}}
    (tmp_path / "s.json").write_text(json.dumps(state))
    out = run_cli(["--log-format", "json", "agent", "--disable", "be_suppress", "--disable", "llc_isolation",
                   "plan", "--state", str(tmp_path / "s.json")], timeout=30)
    assert check_cli_outcome(out, max_seconds=20) == "ok"
    assert "raised" not in out.stderr, out.stderr[-2000:]
    writes = {w["path"]: w["value"] for w in json.loads(out.stdout)["writes"] if w["plugin"] == "cpu_topology_agent"}
    assert any(p.endswith("podlse/cpuset.cpus") and v == "0-1" for p, v in writes.items())
    assert any(p.endswith("podls/cpuset.cpus") and v == "2-7" for p, v in writes.items())
    assert "default/bad" in out.stderr and RS in out.stderr
