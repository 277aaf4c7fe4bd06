"""volume_restrictions and volume_zone: cases of kube-scheduler's ``volumerestrictions/volume_restrictions_test.go``
(TestGCEDiskConflicts, TestAWSDiskConflicts, TestRBDDiskConflicts, TestISCSIDiskConflicts,
TestAccessModeConflicts) and ``volumezone/volume_zone_test.go`` (TestSingleZone, TestMultiZone,
TestWithBinding), as facts, through the embedded cluster."""

from __future__ import annotations

import pytest

from koordfw import ManifestError, make_pod
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


def pvc(name, modes=("ReadWriteOnce",), volume="", sc=None, ns="default"):
    spec = {"accessModes": list(modes), "resources": {"requests": {"storage": "1Gi"}}}
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
    r = schedule(b)
    res = r.results[r.cluster.pod_by_key("default/p").uid]
    assert (res.node == "host1") is fits
    if reason:
        assert reason in res.reason


def test_switching_off():
    b = zone_cluster({"topology.kubernetes.io/zone": "us-west1-b"}, {"topology.kubernetes.io/zone": "us-west1-a"})
    b.pod("p", volumes=claim_vol("pvc-1"))
    assert schedule(b, profile={"disable": ["volume_zone"]}).placements()["default/p"] == "host1"
