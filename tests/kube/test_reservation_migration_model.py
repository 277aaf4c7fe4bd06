"""The PodMigrationJob model: defaults, and errors that name the job and the field; the Reservation a
ReservationFirst job creates (Koordinator's CreateOrUpdateReservationOptions)."""

from __future__ import annotations

import pytest

from koordfw import ManifestError
from koordfw.core.model import pod_from_manifest
from koordfw.engines.migration import DEFAULT_JOB_TTL, job_from_manifest, reservation_for


def job(**spec):
    return {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "PodMigrationJob",
            "metadata": {"name": "j1", "uid": "job-uid"}, "spec": {"podRef": {"namespace": "ns", "name": "p"}, **spec}}


def test_defaults():
    j = job_from_manifest(job())
    assert (j.mode, j.ttl, j.paused, j.phase, j.pod_key) == ("ReservationFirst", DEFAULT_JOB_TTL, False, "Pending", "ns/p")


@pytest.mark.parametrize("spec,field", [
    ({"podRef": None}, "spec.podRef"),
    ({"podRef": {"namespace": "ns"}}, "spec.podRef.name"),
    ({"podRef": {"name": 3}}, "spec.podRef.name"),
    ({"mode": "Teleport"}, "spec.mode"),
    ({"ttl": "soon"}, "spec.ttl"),
    ({"ttl": "-5m"}, "spec.ttl"),
    ({"paused": "yes"}, "spec.paused"),
    ({"reservationOptions": {"reservationRef": {"namespace": "x"}}}, "spec.reservationOptions.reservationRef.name"),
    ({"reservationOptions": {"template": []}}, "spec.reservationOptions.template"),
    ({"deleteOptions": "now"}, "spec.deleteOptions"),
])
def test_errors_name_the_job_and_the_field(spec, field):
    with pytest.raises(ManifestError) as e:
        job_from_manifest(job(**spec))
    assert e.value.field == field and "PodMigrationJob j1" in str(e.value)


def test_status_phase_is_checked():
    with pytest.raises(ManifestError) as e:
        job_from_manifest({**job(), "status": {"phase": "Done"}})
    assert e.value.field == "status.phase"


OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True}


def running_pod(owner=True):
    meta = {"name": "p", "namespace": "ns", "uid": "pod-1", "labels": {"app": "web"},
            "annotations": {"scheduling.koordinator.sh/reservation-allocated": '{"name":"old","uid":"u"}'}}
    if owner:
        meta["ownerReferences"] = [OWNER]
    return pod_from_manifest({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                              "spec": {"nodeName": "n0", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                              "status": {"phase": "Running"}})


def test_the_reservation_of_a_job_with_a_target():
    j = job_from_manifest(job(ttl="10m", reservationOptions={"template": {"spec": {"template": {"spec": {"nodeName": "n1"}}}}}))
    r = reservation_for(j, running_pod(), now=1000.0)
    assert r["metadata"]["name"] == "job-uid"
    assert r["metadata"]["labels"] == {"app.kubernetes.io/created-by": "koordfw-descheduler",
                                       "scheduling.koordinator.sh/reservation-order": "1000000"}
    spec = r["spec"]
    assert spec["owners"] == [{"controller": {**OWNER, "namespace": "ns"}}]
    assert spec["allocateOnce"] is True and spec["ttl"] == "600s"
    assert spec["template"]["spec"]["nodeName"] == "n1"
    assert spec["template"]["metadata"] == {"labels": {"app": "web"}, "annotations": {}, "namespace": "ns"}


def test_without_a_target_anywhere_but_the_pods_node_and_a_bare_pod_owns_it_itself():
    r = reservation_for(job_from_manifest(job()), running_pod(owner=False), now=0.0)
    spec = r["spec"]["template"]["spec"]
    assert "nodeName" not in spec
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n0"]}]}]}
    assert r["spec"]["owners"] == [{"object": {"uid": "pod-1", "kind": "Pod", "name": "p", "namespace": "ns"}}]
