"""volume_restrictions and volume_zone: cases of kube-scheduler's ``volumerestrictions/volume_restrictions_test.go``
(TestGCEDiskConflicts, TestAWSDiskConflicts, TestRBDDiskConflicts, TestISCSIDiskConflicts,
TestAccessModeConflicts) and ``volumezone/volume_zone_test.go`` (TestSingleZone, TestMultiZone,
TestWithBinding), as facts, through the embedded cluster."""

from __future__ import annotations

import pytest

from koordfw import ManifestError
from koordfw.inputs import make_pod
from koordfw.testing import ClusterBuilder, schedule

DISK = "0/1 nodes are available: 1 node(s) had no available disk."


def vol(**source):
    return [{"name": "v", **source}]


GCE_FOO, GCE_BAR = {"gcePersistentDisk": {"pdName": "foo"}}, {"gcePersistentDisk": {"pdName": "bar"}}
AWS_FOO, AWS_BAR = {"awsElasticBlockStore": {"volumeID": "foo"}}, {"awsElasticBlockStore": {"volumeID": "bar"}}
RBD_1 = {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar"}}
RBD_2 = {"rbd": {"monitors": ["c", "d"], "pool": "foo", "image": "bar"}}
ISCSI_1 = {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:storage.target01", "lun": 0}}
ISCSI_2 = {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2017-12.server:storage.target01", "lun": 0}}


def ro(source):
    (k, v), = source.items()
    return {k: {**v, "readOnly": True}}


DISK_CASES = [
    ("nothing", None, GCE_FOO, True),
    ("gce one state", GCE_FOO, GCE_FOO, False),
    ("gce different disk", GCE_BAR, GCE_FOO, True),
    ("gce both read-only", ro(GCE_FOO), ro(GCE_FOO), True),
    ("gce one read-only", ro(GCE_FOO), GCE_FOO, False),
    ("aws same volume", AWS_FOO, AWS_FOO, False),
    ("aws same volume read-only too", ro(AWS_FOO), ro(AWS_FOO), False),
    ("aws different volume", AWS_BAR, AWS_FOO, True),
    ("rbd same image and monitor", RBD_1, RBD_1, False),
    ("rbd other monitors", RBD_2, RBD_1, True),
    ("rbd both read-only", ro(RBD_1), ro(RBD_1), True),
    ("rbd default pool 'rbd' on both", {"rbd": {"monitors": ["a"], "image": "x"}},
     {"rbd": {"monitors": ["a", "z"], "pool": "rbd", "image": "x"}}, False),
    ("iscsi same iqn", ISCSI_1, ISCSI_1, False),
    ("iscsi other iqn", ISCSI_2, ISCSI_1, True),
    ("iscsi both read-only", ro(ISCSI_1), ro(ISCSI_1), True),
]


@pytest.mark.parametrize(("name", "existing", "incoming", "fits"), DISK_CASES, ids=[c[0] for c in DISK_CASES])
def test_disk_conflicts(name, existing, incoming, fits):
    b = ClusterBuilder().node("n1")
    if existing is not None:
        b.pod("existing", node="n1", volumes=vol(**existing))
    b.pod("incoming", volumes=vol(**incoming))
    r = schedule(b)
    assert r.placements()["default/incoming"] == ("n1" if fits else None)
    if not fits:
        assert r.results[r.cluster.pod_by_key("default/incoming").uid].reason == DISK


def pvc(name, modes=("ReadWriteOnce",), volume="", sc=None, ns="default", size="1Gi"):
    spec = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    if sc is not None:
        spec["storageClassName"] = sc
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def claim_vol(name):
    return vol(persistentVolumeClaim={"claimName": name})


def test_read_write_once_pod_claim_in_use_rejects_every_node():
    b = ClusterBuilder().node("n1").node("n2").obj(pvc("claim-rwop", ["ReadWriteOncePod"], volume="pv-a"),
                                                   pvc("claim-rwo", volume="pv-b"), pv("pv-a"), pv("pv-b"))
    b.pod("holder", node="n1", volumes=claim_vol("claim-rwop"))
    b.pod("holder2", node="n1", volumes=claim_vol("claim-rwo"))
    b.pod("second", volumes=claim_vol("claim-rwop"))
    b.pod("shares-rwo", volumes=claim_vol("claim-rwo"))
    r = schedule(b)
    got = r.placements()
    assert got["default/second"] is None and got["default/shares-rwo"] is not None
    assert r.results[r.cluster.pod_by_key("default/second").uid].reason == (
        "0/2 nodes are available: 2 node has pod using PersistentVolumeClaim with the same name and "
        "ReadWriteOncePod access mode.")


def test_a_missing_claim_is_unresolvable():
    b = ClusterBuilder().node("n1").obj(pvc("other"))
    b.pod("p", volumes=claim_vol("nope"))
    r = schedule(b)
    res = r.results[r.cluster.pod_by_key("default/p").uid]
    assert res.node is None and 'persistentvolumeclaim "nope" not found' in res.reason


def test_a_missing_claim_keeps_the_pod_pending_when_no_claim_exists_at_all():
    """kube-scheduler keeps such a pod pending whatever else the cluster holds (issue 32 point 12: with no
    PersistentVolumeClaim in the input, simulate used to bind it)."""
    b = ClusterBuilder().node("n1")
    b.pod("p", volumes=claim_vol("x"))
    b.pod("q", volumes=vol(ephemeral={"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}))
    b.pod("plain")
    r = schedule(b)
    res = r.results[r.cluster.pod_by_key("default/p").uid]
    assert res.node is None
    assert res.reason == 'persistentvolumeclaim "x" not found'
    res = r.results[r.cluster.pod_by_key("default/q").uid]
    assert res.node is None
    assert res.reason == 'waiting for ephemeral volume controller to create the persistentvolumeclaim "q-v"'
    assert r.placements()["default/plain"] == "n1"


def test_a_bad_volume_names_the_pod_and_field():
    with pytest.raises(ManifestError) as e:
        make_pod("db", volumes=[{"name": "d", "awsElasticBlockStore": {"volumeID": 7}}])
    assert e.value.obj == "Pod default/db" and e.value.field == "spec.volumes[0].awsElasticBlockStore.volumeID"


# -- volume_zone -------------------------------------------------------------------------------------------
ZONE_REASON = "node(s) had no available volume zone"


def pv(name, **labels):
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": labels},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}}


def zone_cluster(node_labels, pv_labels, sc=None):
    b = ClusterBuilder().node("host1", labels=node_labels)
    b.obj(pv("vol-1", **pv_labels), pvc("pvc-1", volume="vol-1"))
    if sc is not None:
        b.obj(sc, pvc("pvc-unbound", sc=sc["metadata"]["name"]))
    return b


ZONE_CASES = [
    ("node without zone labels", {}, {"topology.kubernetes.io/zone": "us-west1-a"}, True),
    ("label zone matches", {"topology.kubernetes.io/zone": "us-west1-a"}, {"topology.kubernetes.io/zone": "us-west1-a"},
     True),
    ("label zone mismatch", {"topology.kubernetes.io/zone": "us-west1-b"}, {"topology.kubernetes.io/zone": "us-west1-a"},
     False),
    ("beta PV label, GA node label", {"topology.kubernetes.io/zone": "us-west1-a"},
     {"failure-domain.beta.kubernetes.io/zone": "us-west1-a"}, True),
    ("region mismatch", {"topology.kubernetes.io/region": "us-east1", "topology.kubernetes.io/zone": "us-east1-a"},
     {"topology.kubernetes.io/region": "us-west1"}, False),
    ("multi-zone PV", {"topology.kubernetes.io/zone": "us-west1-c"},
     {"topology.kubernetes.io/zone": "us-west1-b__us-west1-c"}, True),
    ("a node with another topology label lacks the PV's key", {"topology.kubernetes.io/region": "us-west1"},
     {"topology.kubernetes.io/zone": "us-west1-a"}, False),
]


@pytest.mark.parametrize(("name", "node_labels", "pv_labels", "fits"), ZONE_CASES, ids=[c[0] for c in ZONE_CASES])
def test_volume_zone(name, node_labels, pv_labels, fits):
    b = zone_cluster(node_labels, pv_labels)
    b.pod("p", volumes=claim_vol("pvc-1"))
    r = schedule(b)
    assert r.placements()["default/p"] == ("host1" if fits else None)
    if not fits:
        assert r.results[r.cluster.pod_by_key("default/p").uid].reason == f"0/1 nodes are available: 1 {ZONE_REASON}."


def sc(name, mode):
    out = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
           "provisioner": "pd.csi.storage.gke.io"}
    if mode:
        out["volumeBindingMode"] = mode
    return out


@pytest.mark.parametrize(("mode", "fits", "reason"), [
    ("WaitForFirstConsumer", True, None),
    ("Immediate", False, "PersistentVolume had no name"),
    ("", False, 'VolumeBindingMode not set for StorageClass "standard"'),
])
def test_unbound_claims_by_binding_mode(mode, fits, reason):
    b = zone_cluster({"topology.kubernetes.io/zone": "us-west1-a"}, {"topology.kubernetes.io/zone": "us-west1-a"},
                     sc=sc("standard", mode))
    b.pod("p", volumes=claim_vol("pvc-unbound"))
    r = schedule(b, profile={"disable": ["volume_binding"]})  # its pre_filter runs first and says Unresolvable too
    res = r.results[r.cluster.pod_by_key("default/p").uid]
    assert (res.node == "host1") is fits
    if reason:
        assert reason in res.reason


def test_switching_off():
    b = zone_cluster({"topology.kubernetes.io/zone": "us-west1-b"}, {"topology.kubernetes.io/zone": "us-west1-a"})
    b.pod("p", volumes=claim_vol("pvc-1"))
    assert schedule(b, profile={"disable": ["volume_zone"]}).placements()["default/p"] == "host1"


# -- volume_binding ----------------------------------------------------------------------------------------
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"


def local_pv(name, node_name, size="10Gi", sc_name="local", claim_ref=None):
    out = pv(name)
    out["spec"].update({"capacity": {"storage": size}, "storageClassName": sc_name,
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}]}}})
    if claim_ref:
        out["spec"]["claimRef"] = {"namespace": "default", "name": claim_ref}
    return out


def two_nodes():
    b = ClusterBuilder()
    b.node("node-a", labels={"kubernetes.io/hostname": "node-a", "topology.kubernetes.io/zone": "z1"})
    b.node("node-b", labels={"kubernetes.io/hostname": "node-b", "topology.kubernetes.io/zone": "z2"})
    return b


def outcome(b, *claims):
    b.pod("p", volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)])
    r = schedule(b, profile={"disable": ["volume_zone"]})
    res = r.results[r.cluster.pod_by_key("default/p").uid]
    return res.node, res.reason


def test_bound_claim_follows_its_local_pv():
    b = two_nodes().obj(local_pv("pv-a", "node-b"), pvc("pvc-a", volume="pv-a"))
    assert outcome(b, "pvc-a")[0] == "node-b"


def test_bound_claim_whose_pv_fits_no_node():
    b = two_nodes().obj(local_pv("pv-a", "node-c"), pvc("pvc-a", volume="pv-a"))
    assert outcome(b, "pvc-a") == (None, f"0/2 nodes are available: 2 {NODE_CONFLICT}.")


def test_missing_pvc_and_pv_and_immediate_claims_are_unresolvable():
    b = two_nodes().obj(pvc("other", volume="x"))
    assert 'persistentvolumeclaim "pvc-a" not found' in outcome(b, "pvc-a")[1]
    b = two_nodes().obj(pvc("pvc-a", volume="pv-gone"))
    assert 'persistentvolume "pv-gone" not found' in outcome(b, "pvc-a")[1]
    b = two_nodes().obj(sc("fast", "Immediate"), pvc("pvc-a", sc="fast"))
    assert "pod has unbound immediate PersistentVolumeClaims" in outcome(b, "pvc-a")[1]


LOCAL = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local"},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}


def test_wait_for_first_consumer_matches_a_static_pv_on_the_node():
    # 5Gi does not fit the 1Gi PV on node-a; the 10Gi PV on node-b does
    b = two_nodes().obj(LOCAL, local_pv("pv-small", "node-a", size="1Gi"), local_pv("pv-big", "node-b"),
                        pvc("pvc-a", sc="local", size="5Gi"))
    assert outcome(b, "pvc-a")[0] == "node-b"


def test_a_pv_pre_bound_to_another_claim_is_not_a_candidate():
    b = two_nodes().obj(LOCAL, local_pv("pv-a", "node-a", claim_ref="someone-else"), pvc("pvc-a", sc="local"))
    assert outcome(b, "pvc-a") == (None, f"0/2 nodes are available: 2 {BIND_CONFLICT}.")


def test_wait_for_first_consumer_without_pv_or_provisioner():
    b = two_nodes().obj(LOCAL, pvc("pvc-a", sc="local"))
    assert outcome(b, "pvc-a") == (None, f"0/2 nodes are available: 2 {BIND_CONFLICT}.")


def test_bound_and_unbound_unsatisfied_give_both_reasons():
    b = two_nodes().obj(LOCAL, local_pv("pv-a", "node-c"), pvc("pvc-a", volume="pv-a"), pvc("pvc-b", sc="local"))
    node, reason = outcome(b, "pvc-a", "pvc-b")
    assert node is None
    assert reason == f"0/2 nodes are available: 2 {BIND_CONFLICT}, 2 {NODE_CONFLICT}."


def test_provisioning_follows_allowed_topologies_and_selected_node():
    zonal = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zonal"},
             "provisioner": "pd.csi.storage.gke.io", "volumeBindingMode": "WaitForFirstConsumer",
             "allowedTopologies": [{"matchLabelExpressions": [
                 {"key": "topology.kubernetes.io/zone", "values": ["z2"]}]}]}
    b = two_nodes().obj(zonal, pvc("pvc-a", sc="zonal"))
    assert outcome(b, "pvc-a")[0] == "node-b"
    claim = pvc("pvc-a", sc="standard")
    claim["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": "node-a"}
    b = two_nodes().obj(sc("standard", "WaitForFirstConsumer"), claim)
    assert outcome(b, "pvc-a")[0] == "node-a"


def test_a_statefulset_pod_with_a_zonal_claim_in_simulate(tmp_path, capsys):
    import json

    import yaml

    from koordfw.cli import main

    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"worker-{i}", "labels": {
        "kubernetes.io/hostname": f"worker-{i}", "topology.kubernetes.io/zone": f"eu-west-1{'abc'[i]}"}},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}} for i in range(3)]
    zonal = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "ssd"},
             "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer",
             "allowedTopologies": [{"matchLabelExpressions": [
                 {"key": "topology.kubernetes.io/zone", "values": ["eu-west-1c"]}]}]}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "default"},
           "spec": {"serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "postgres"}]}}}}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "data-db-0", "namespace": "default", "labels": {"app": "db"}},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "ssd",
                      "resources": {"requests": {"storage": "20Gi"}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "db-0", "namespace": "default", "labels": {"app": "db"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s1",
                             "controller": True}]},
        "spec": {"containers": [{"name": "postgres", "image": "postgres:16",
                                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                                 "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql"}]}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}}
    f = tmp_path / "db.yaml"
    f.write_text(yaml.safe_dump_all([*nodes, zonal, sts, claim, pod]))
    assert main(["simulate", str(f), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {p["name"]: p["node"] for p in out["pods"]} == {"db-0": "worker-2"}


# -- node_volume_limits ------------------------------------------------------------------------------------
EXCEED = "node(s) exceed max volume count"


def csi_pv(name, handle, driver="ebs.csi.aws.com"):
    out = pv(name)
    out["spec"]["csi"] = {"driver": driver, "volumeHandle": handle}
    return out


def csinode(name, count, driver="ebs.csi.aws.com"):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
            "spec": {"drivers": [{"name": driver, "nodeID": name, "allocatable": {"count": count}}]}}


def limits_cluster(count):
    b = ClusterBuilder().node("n1").obj(csinode("n1", count))
    for i in range(3):
        b.obj(csi_pv(f"pv-{i}", f"vol-{i}"), pvc(f"pvc-{i}", volume=f"pv-{i}"))
    b.pod("existing", node="n1", volumes=[{"name": "a", "persistentVolumeClaim": {"claimName": "pvc-0"}},
                                          {"name": "b", "persistentVolumeClaim": {"claimName": "pvc-1"}}])
    return b


@pytest.mark.parametrize(("count", "claims", "fits"), [
    (3, ["pvc-2"], True),            # 2 attached + 1 new = 3
    (2, ["pvc-2"], False),           # 2 attached + 1 new > 2
    (2, ["pvc-0"], True),            # the same volume counts once
    (2, ["pvc-0", "pvc-2"], False),
])
def test_csi_volume_limits(count, claims, fits):
    b = limits_cluster(count)
    b.pod("p", volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)])
    r = schedule(b)
    res = r.results[r.cluster.pod_by_key("default/p").uid]
    assert (res.node == "n1") is fits
    if not fits:
        assert res.reason == f"0/1 nodes are available: 1 {EXCEED}."


def test_an_unbound_claim_counts_for_its_provisioner_and_other_drivers_do_not():
    b = limits_cluster(2)
    b.obj(sc("gp3", "WaitForFirstConsumer") | {"provisioner": "ebs.csi.aws.com"}, pvc("pvc-new", sc="gp3"))
    b.obj(sc("nfs", "WaitForFirstConsumer") | {"provisioner": "nfs.csi.k8s.io"}, pvc("pvc-nfs", sc="nfs"))
    b.pod("p", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "pvc-new"}}])
    b.pod("q", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "pvc-nfs"}}])
    got = schedule(b, profile={"disable": ["volume_zone"]}).placements()
    assert got["default/p"] is None and got["default/q"] == "n1"
