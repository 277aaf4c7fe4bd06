"""A malformed PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode in the input is an error
naming the file, the object and the field (``koordfw simulate`` exits 2), as the API server would refuse
it (kube's ValidatePersistentVolumeClaim / ValidatePersistentVolume / storage validation)."""

from __future__ import annotations

import copy

import pytest

from koordfw import ManifestError
from koordfw.inputs import load_objects

PVC = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "db"},
       "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                "resources": {"requests": {"storage": "10Gi"}}}}
PV = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
      "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"}, "storageClassName": "fast",
               "claimRef": {"namespace": "db", "name": "data"},
               "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
               "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                   {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}}},
      "status": {"phase": "Available"}}
SC = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
      "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer",
      "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["a"]}]}]}
CSINODE = {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n1"},
           "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}}]}}


def with_(obj: dict, path: str, value: object) -> dict:
    out = copy.deepcopy(obj)
    cur = out
    *parents, last = path.split(".")
    for p in parents:
        cur = cur.setdefault(p, {})
    cur[last] = value
    return out


def test_well_formed_storage_objects_load():
    m = load_objects([PVC, PV, SC, CSINODE], file="in.yaml")
    assert [k for k, _ in m.objects] == ["PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode"]


@pytest.mark.parametrize("obj, path, value, field, words", [
    (PVC, "spec.accessModes", "ReadWriteOnce", "spec.accessModes", "expected a list"),
    (PVC, "spec.accessModes", ["ReadWriteSometimes"], "spec.accessModes[0]", "unsupported value"),
    (PVC, "spec.accessModes", ["ReadWriteOncePod", "ReadOnlyMany"], "spec.accessModes", "ReadWriteOncePod"),
    (PVC, "spec.storageClassName", 12, "spec.storageClassName", "expected a string"),
    (PVC, "spec.resources.requests", {"storage": "ten gigs"}, "spec.resources.requests.storage", ""),
    (PVC, "spec.resources.requests", {"storage": "-1Gi"}, "spec.resources.requests.storage", "greater than or equal to 0"),
    (PVC, "spec.volumeMode", "Raw", "spec.volumeMode", "Filesystem or Block"),
    (PVC, "status", {"phase": "Done"}, "status.phase", "unsupported value"),
    (PV, "spec.capacity", {"storage": []}, "spec.capacity.storage", ""),
    (PV, "spec.claimRef", "db/data", "spec.claimRef", "expected a mapping"),
    (PV, "spec.nodeAffinity", {"required": {"nodeSelectorTerms": []}}, "spec.nodeAffinity.required.nodeSelectorTerms",
     "at least one"),
    (PV, "spec.nodeAffinity", {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "Near"}]}]}},
     "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator", "unsupported value"),
    (PV, "spec.csi", {"volumeHandle": "v"}, "spec.csi.driver", "required"),
    (PV, "status", {"phase": "Gone"}, "status.phase", "unsupported value"),
    (SC, "provisioner", None, "provisioner", "required"),
    (SC, "volumeBindingMode", "Later", "volumeBindingMode", "Immediate or WaitForFirstConsumer"),
    (SC, "allowedTopologies", [{"matchLabelExpressions": [{"key": "zone", "values": []}]}],
     "allowedTopologies[0].matchLabelExpressions[0].values", "at least one value"),
    (CSINODE, "spec.drivers", [{"name": "d", "allocatable": {"count": -3}}], "spec.drivers[0].allocatable.count",
     "non-negative integer"),
    (CSINODE, "spec.drivers", [{"allocatable": {"count": 3}}], "spec.drivers[0].name", "required"),
])
def test_malformed_storage_fields_are_named(obj, path, value, field, words):
    bad = with_(obj, path, value)
    with pytest.raises(ManifestError) as e:
        load_objects([bad], file="in.yaml")
    msg = str(e.value)
    assert "in.yaml" in msg and f"{obj['kind']} " in msg and f"field {field}:" in msg
    assert words in msg


def test_a_misspelt_storage_kind_is_an_error():
    with pytest.raises(ManifestError, match="did you mean 'PersistentVolumeClaim'"):
        load_objects([with_(PVC, "kind", "persistentvolumeclaim")], file="in.yaml")


def test_a_plugins_error_about_an_input_object_names_its_file(tmp_path):
    # a plugin reads its objects at startup (the reservation plugin its Reservations): its error names the
    # object and field; the kernel adds the file the object came from, and the command exits 2 on one line
    import yaml

    from koordfw.testing.hostile import check_cli_outcome, run_cli

    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"},
         "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": 110}}},
        {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation", "metadata": {"name": "hold"},
         "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1x"}}}]}},
                  "owners": [{"labelSelector": {"matchLabels": {"app": "a"}}}]}}]))
    for argv in (["simulate", str(f), "-o", "json"], ["deschedule", str(f), "-o", "json"]):
        out = run_cli(argv, timeout=60)
        assert check_cli_outcome(out, names=[str(f), "Reservation hold", "field spec.template.spec.containers[0]"]) \
            == "error"
