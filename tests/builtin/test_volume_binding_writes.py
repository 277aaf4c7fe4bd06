"""volume_binding's Reserve/PreBind/Unreserve: cases of kube-scheduler's
``volumebinding/binder_test.go`` (TestAssumePodVolumes, TestRevertAssumedPodVolumes, TestBindAPIUpdate,
TestFindAssumeVolumes) and ``volume_binding_test.go`` (PreBind of an all-bound pod), as facts: the plugin's
hooks called directly over a cluster with a handle whose ``patch_object`` writes in memory; then the same
through ``koordfw simulate`` (the ``claims`` section)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
import yaml

from koordfw import CycleState, Status
from koordfw.builtin.volume_binding import BIND_CONFLICT, BOUND_BY_CONTROLLER, SELECTED_NODE, VolumeBinding
from koordfw.core.cluster import ClusterState
from koordfw.core.events import merge_patch
from koordfw.inputs import make_pod
from koordfw.testing import ClusterBuilder

LOCAL = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local"},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}
WAIT = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "wait"},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}


def pvc(name, sc="local", size="1Gi", volume="", uid=None):
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                            "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                            "resourceVersion": "1"}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def pv(name, node="node1", size="10Gi", sc="local", claim_ref=None):
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    if claim_ref:
        spec["claimRef"] = claim_ref
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "resourceVersion": "1"},
            "spec": spec}


class Handle:
    """The part of koordfw.Handle the plugin uses: the cluster and an in-memory patch_object."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.writes: list[tuple[str, str, dict]] = []

    async def patch_object(self, kind, key, patch, *, precondition=None):
        cur = self.cluster.get_object(kind, key)
        if cur is None or (precondition is not None and not precondition(cur)):
            return None
        new = merge_patch(cur, patch)
        self.cluster.set_object(kind, new)
        self.writes.append((kind, key, copy.deepcopy(dict(patch))))
        return new


def cluster_of(*objects) -> tuple[ClusterState, Handle]:
    b = ClusterBuilder()
    for n in ("node1", "node2"):
        b.node(n, labels={"kubernetes.io/hostname": n})
    b.obj(LOCAL, WAIT, *objects)
    m = b.build()
    cluster = ClusterState()
    for node in m.nodes:
        cluster.add_node(node)
    for kind, obj in m.objects:
        cluster.set_object(kind, obj)
    return cluster, Handle(cluster)


def pod_with(name, *claims):
    return make_pod(name, volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                                   for i, c in enumerate(claims)])


def run(coro_or_value):
    if asyncio.iscoroutine(coro_or_value):
        return asyncio.run(coro_or_value)
    return coro_or_value


def cycle(plugin, handle, pod, node="node1"):
    """pre_filter, filter on ``node``, reserve: the state (or the failure status)."""
    state = CycleState()
    st = plugin.pre_filter(pod, state, handle)
    assert st is None, st
    view = handle.cluster.node(node)
    res = plugin.filter(pod, [view], state)
    if res is not None:
        return res[1][0]
    assert plugin.reserve(pod, view, state) is None
    return state


def pv_of(handle, name):
    return handle.cluster.get_object("PersistentVolume", name)


def claim_of(handle, name):
    return handle.cluster.get_object("PersistentVolumeClaim", f"default/{name}")


REF_A = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "default", "name": "claim-a",
         "uid": "uid-claim-a", "resourceVersion": "1"}

# (name, objects, claims of the pod, the PV writes: PV name -> (claimRef name, bound-by-controller written),
#  the claims annotated with selected-node)
CASES = [
    ("all-bound", [pv("pv-a", claim_ref=REF_A), pvc("claim-a", volume="pv-a")], ["claim-a"], {}, []),
    ("one-binding", [pv("pv-a"), pvc("claim-a")], ["claim-a"], {"pv-a": ("claim-a", True)}, []),
    ("two-bindings, smallest fitting PV each", [pv("pv-big", size="10Gi"), pv("pv-small", size="2Gi"),
                                                 pvc("claim-a", size="1Gi"), pvc("claim-b", size="5Gi")],
     ["claim-a", "claim-b"], {"pv-small": ("claim-a", True), "pv-big": ("claim-b", True)}, []),
    ("pv-bound: claimRef with the claim's uid is not written", [pv("pv-a", claim_ref=REF_A), pvc("claim-a")],
     ["claim-a"], {}, []),
    ("pre-bound by name: the uid is added, not bound-by-controller",
     [pv("pv-a", claim_ref={"namespace": "default", "name": "claim-a"}), pvc("claim-a")], ["claim-a"],
     {"pv-a": ("claim-a", False)}, []),
    ("one-provisioned", [pvc("claim-a", sc="wait")], ["claim-a"], {}, ["claim-a"]),
    ("one-binding, one-provisioned", [pv("pv-a"), pvc("claim-a"), pvc("claim-b", sc="wait")],
     ["claim-a", "claim-b"], {"pv-a": ("claim-a", True)}, ["claim-b"]),
    ("PV on the other node: provisioned instead", [pv("pv-a", node="node2"), pvc("claim-a", sc="wait")],
     ["claim-a"], {}, ["claim-a"]),
]


@pytest.mark.parametrize(("name", "objects", "claims", "pv_writes", "provisioned"), CASES, ids=[c[0] for c in CASES])
def test_reserve_and_pre_bind(name, objects, claims, pv_writes, provisioned):
    cluster, handle = cluster_of(*objects)
    plugin = VolumeBinding()
    pod = pod_with("p", *claims)
    state = cycle(plugin, handle, pod)
    # reserve assumed, wrote nothing
    assert handle.writes == []
    assert set(plugin._pvs) == set(pv_writes) and {k.split("/")[1] for k in plugin._pvcs} == set(provisioned)
    out = plugin.pre_bind(pod, state, handle)
    if not pv_writes and not provisioned:
        assert out is None  # sync and nothing to do (kube's allBound)
    assert run(out) is None
    assert [(k, key) for k, key, _ in handle.writes] == \
        [("PersistentVolume", n) for n in pv_writes] + [("PersistentVolumeClaim", f"default/{c}") for c in provisioned]
    for n, (claim_name, by_controller) in pv_writes.items():
        got = pv_of(handle, n)
        assert got["spec"]["claimRef"] == {**REF_A, "name": claim_name, "uid": f"uid-{claim_name}"}
        assert ((got["metadata"].get("annotations") or {}).get(BOUND_BY_CONTROLLER) == "yes") is by_controller
    for c in provisioned:
        assert claim_of(handle, c)["metadata"]["annotations"][SELECTED_NODE] == "node1"
    assert plugin._pvs == {} and plugin._pvcs == {}  # written: the cluster's objects carry it now


def test_an_assumed_pv_is_not_offered_to_a_second_pod_until_unreserved():
    cluster, handle = cluster_of(pv("pv-a"), pvc("claim-a"), pvc("claim-b"))
    plugin = VolumeBinding()
    first, second = pod_with("first", "claim-a"), pod_with("second", "claim-b")
    state = cycle(plugin, handle, first)
    assert plugin._pvs["pv-a"][1]["spec"]["claimRef"]["name"] == "claim-a"
    assert pv_of(handle, "pv-a")["spec"].get("claimRef") is None  # the cluster's PV is not changed by reserve
    blocked = cycle(plugin, handle, second)
    assert isinstance(blocked, Status) and blocked.reasons == (BIND_CONFLICT,)
    # kube's RevertAssumedPodVolumes: the first pod's binding failed; twice is fine (idempotent)
    plugin.unreserve(first, state)
    plugin.unreserve(first, state)
    assert plugin._pvs == {}
    state2 = cycle(plugin, handle, second)
    assert run(plugin.pre_bind(second, state2, handle)) is None
    assert pv_of(handle, "pv-a")["spec"]["claimRef"]["name"] == "claim-b"


def test_an_assumed_claim_selection_is_seen_by_the_next_pod_of_the_claim():
    cluster, handle = cluster_of(pvc("shared", sc="wait"))
    plugin = VolumeBinding()
    cycle(plugin, handle, pod_with("a", "shared"), node="node1")
    other = cycle(plugin, handle, pod_with("b", "shared"), node="node2")
    assert isinstance(other, Status) and other.reasons == (BIND_CONFLICT,)


def test_pre_bind_fails_when_the_pv_was_taken_meanwhile():
    """TestBindAPIUpdate "api-update-failed": the PV changed (another claim) between reserve and pre_bind."""
    cluster, handle = cluster_of(pv("pv-a"), pvc("claim-a"), pvc("claim-b", sc="wait"))
    plugin = VolumeBinding()
    pod = pod_with("p", "claim-a", "claim-b")
    state = cycle(plugin, handle, pod)
    taken = copy.deepcopy(pv_of(handle, "pv-a"))
    taken["spec"]["claimRef"] = {"namespace": "default", "name": "someone", "uid": "u"}
    cluster.set_object("PersistentVolume", taken)
    st = run(plugin.pre_bind(pod, state, handle))
    assert isinstance(st, Status) and not st.ok and "pv-a" in st.message
    assert handle.writes == []  # the claim is not annotated after a failed PV write
    plugin.unreserve(pod, state)
    assert plugin._pvs == {} and plugin._pvcs == {}


def test_pre_bind_fails_when_the_claim_was_selected_for_another_node():
    cluster, handle = cluster_of(pvc("claim-a", sc="wait"))
    plugin = VolumeBinding()
    pod = pod_with("p", "claim-a")
    state = cycle(plugin, handle, pod)
    c = copy.deepcopy(claim_of(handle, "claim-a"))
    c["metadata"]["annotations"] = {SELECTED_NODE: "node2"}
    cluster.set_object("PersistentVolumeClaim", c)
    st = run(plugin.pre_bind(pod, state, handle))
    assert isinstance(st, Status) and not st.ok and "default/claim-a" in st.message


def test_pods_without_claims_do_nothing():
    cluster, handle = cluster_of(pvc("claim-a"))
    plugin = VolumeBinding()
    pod = make_pod("plain")
    state = CycleState()
    assert plugin.pre_filter(pod, state, handle) == Status.skip()
    view = cluster.node("node1")
    assert plugin.reserve(pod, view, state) is None
    assert plugin.pre_bind(pod, state, handle) is None
    plugin.unreserve(pod, state)


# -- koordfw simulate: the claims section ------------------------------------------------------------------
def _nodes(n):
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"worker-{i}", "labels": {
        "kubernetes.io/hostname": f"worker-{i}", "topology.kubernetes.io/zone": f"eu-west-1{'abc'[i]}"}},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}} for i in range(n)]


def _claim(name, sc, size="20Gi"):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                     "resources": {"requests": {"storage": size}}}}


def _pod(name, claim_name, owner=None):
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"app": name.rsplit("-", 1)[0]}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner, "uid": "s1",
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "postgres:16",
                                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]}}


def simulate_json(tmp_path, capsys, objects):
    from koordfw.cli import main

    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(objects))
    assert main(["simulate", str(f), "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_a_statefulset_claim_is_provisioned_on_the_chosen_node(tmp_path, capsys):
    ssd = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "ssd"},
           "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "default"},
           "spec": {"serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "main"}]}}}}
    out = simulate_json(tmp_path, capsys, [*_nodes(3), ssd, sts, _claim("data-db-0", "ssd"), _pod("db-0", "data-db-0", "db")])
    node = {p["name"]: p["node"] for p in out["pods"]}["db-0"]
    assert node is not None
    assert out["claims"] == [{"namespace": "default", "name": "data-db-0", "phase": "Pending", "volumeName": None,
                              "selectedNode": node}]


def test_simulate_two_pods_one_static_pv(tmp_path, capsys):
    local = {**LOCAL, "metadata": {"name": "local"}}
    the_pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "local-pv-1"},
              "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                       "local": {"path": "/mnt/disks/ssd1"},
                       "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                           {"key": "kubernetes.io/hostname", "operator": "In", "values": ["worker-1"]}]}]}}}}
    objs = [*_nodes(2), local, the_pv, _claim("data-a", "local"), _claim("data-b", "local"),
            _pod("a-0", "data-a"), _pod("b-0", "data-b")]
    out = simulate_json(tmp_path, capsys, objs)
    pods = {p["name"]: p for p in out["pods"]}
    assert pods["a-0"]["node"] == "worker-1"  # pods are tried in input order
    assert pods["b-0"]["node"] is None
    assert pods["b-0"]["reason"] == f"0/2 nodes are available: 2 {BIND_CONFLICT}."
    assert out["claims"] == [
        {"namespace": "default", "name": "data-a", "phase": "Bound", "volumeName": "local-pv-1", "selectedNode": None},
        {"namespace": "default", "name": "data-b", "phase": "Pending", "volumeName": None, "selectedNode": None}]
