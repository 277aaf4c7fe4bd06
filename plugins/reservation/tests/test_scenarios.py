"""Whole-cluster scenarios (issue 22): a reservation is scheduled like its template's pod and holds the node's
resources; owners allocate from it, others cannot; it ends Succeeded (allocateOnce) or Failed (expiry),
releasing what it held; an owner that goes away gives its share back."""

from __future__ import annotations

import anyio
import pytest
from reservation_testkit import IGNORED, affinity, pod, reason, reservation, rows, run, ts

from koordfw import ManifestError, build_registry
from koordfw.embed import EmbeddedEngine
from koordfw.testing import ClusterBuilder

WEB = {"app": "web"}
FOUR = {"cpu": "4", "memory": "16Gi"}


def test_reservation_held_while_others_fill_the_cluster_then_consumed_by_its_owner():
    # two 4-cpu nodes; a 3-cpu reservation; eight 1-cpu pods created before the owner
    objs = [reservation("r", {"cpu": "3"})]
    objs += [pod(f"filler-{i}", {"cpu": "1"}, t=10 + i) for i in range(8)]
    objs.append(pod("web", {"cpu": "3"}, labels=WEB, t=100))
    res = run(*objs, nodes={"n1": FOUR, "n2": FOUR})
    where = res.placements()
    r = rows(res)["r"]
    assert r["phase"] == "Succeeded" and r["owners"] == ["default/web"]
    assert where["default/web"] == r["node"]
    assert r["allocatable"] == {"cpu": "3"} and r["allocated"] == {"cpu": "3"}
    # the fillers never took what the reservation held: 5 of them fit (8 cpu - 3 reserved)
    bound = [k for k, v in where.items() if k.startswith("default/filler") and v]
    assert len(bound) == 5
    pending = [k for k, v in where.items() if v is None]
    assert len(pending) == 3
    annotations = {p["name"]: p["annotations"] for p in res.to_dict()["pods"]}
    assert annotations["web"]["scheduling.koordinator.sh/reservation-allocated"] == '{"name":"r","uid":"uid-r"}'
    nodes = {n["name"]: n for n in res.to_dict()["nodes"]}
    assert nodes[r["node"]]["requested"]["cpu"] == "4"  # web (3) + one filler; nothing held any more


def test_non_owner_refused_where_only_the_reservation_has_room():
    objs = [reservation("r", {"cpu": "3"}, node="n1"), pod("other", {"cpu": "2"}, labels={"app": "batch"})]
    res = run(*objs, nodes={"n1": FOUR})
    assert res.placements()["default/other"] is None
    assert reason(res, "default/other") == "0/1 nodes are available: 1 Insufficient cpu."
    assert rows(res)["r"]["phase"] == "Available" and rows(res)["r"]["owners"] == []
    # the owner fits there, in what is held for it
    res = run(*objs, pod("web", {"cpu": "3"}, labels=WEB), nodes={"n1": FOUR})
    assert res.placements()["default/web"] == "n1"
    assert res.placements()["default/other"] is None  # the remaining 1 cpu is too little


def test_reservation_ignored_pod_may_use_held_resources_without_becoming_an_owner():
    objs = [reservation("r", {"cpu": "3"}, node="n1"), pod("ign", {"cpu": "2"}, labels={IGNORED: "true"})]
    res = run(*objs, nodes={"n1": FOUR})
    assert res.placements()["default/ign"] == "n1"
    assert rows(res)["r"]["owners"] == [] and rows(res)["r"]["phase"] == "Available"
    assert "scheduling.koordinator.sh/reservation-allocated" not in res.to_dict()["pods"][0]["annotations"]


def test_expired_reservation_releases_its_node():
    # expired before the run's time (the newest input timestamp): Failed at once, the node is free
    objs = [reservation("old", {"cpu": "3"}, node="n1", t=0, ttl="10m"),
            pod("other", {"cpu": "3"}, t=3600)]
    res = run(*objs, nodes={"n1": FOUR})
    assert rows(res)["old"]["phase"] == "Failed"
    assert res.placements()["default/other"] == "n1"
    # ttl: 0 never expires
    objs[0]["spec"]["ttl"] = "0s"
    res = run(*objs, nodes={"n1": FOUR})
    assert rows(res)["old"]["phase"] == "Available" and res.placements()["default/other"] is None


def test_reservation_expiring_during_the_run_releases_its_node():
    """The run's clock is not fast-forwarded for an expiry; when it gets there (here the test advances
    it, as permit waits and backoffs do), the reservation is Failed and the pod waiting for room binds."""
    b = ClusterBuilder().node("n1", **FOUR)
    b.obj(reservation("r", {"cpu": "3"}, node="n1", t=0, expires=ts(600)), pod("other", {"cpu": "3"}, t=60))

    async def main() -> None:
        cluster = b.build().to_cluster()
        engine = EmbeddedEngine(build_registry(only={"reservation"}), cluster, start_time=b.build().newest_timestamp())
        await engine.run()
        assert cluster.pod_by_key("default/other").node_name is None
        engine.clock.advance_to(engine.clock.now() + 600)
        await engine.drive()
        assert cluster.pod_by_key("default/other").node_name == "n1"
        plugin = engine.scheduler.registry.plugins["reservation"].obj
        assert plugin.reservations["uid-r"].phase == "Failed"
        assert plugin.reservations["uid-r"].conditions[-1]["reason"] == "Expired"

    anyio.run(main)


def test_reservation_placed_in_the_input_is_honoured():
    objs = [reservation("r", {"cpu": "2"}, node="n2"), pod("a", {"cpu": "3"}), pod("b", {"cpu": "3"}),
            pod("c", {"cpu": "3"})]
    res = run(*objs, nodes={"n1": FOUR, "n2": FOUR})
    where = res.placements()
    assert sorted(v for v in where.values() if v) == ["n1"]  # n2 has 2 free: no 3-cpu pod fits there
    assert rows(res)["r"]["node"] == "n2"
    nodes = {n["name"]: n for n in res.to_dict()["nodes"]}
    assert nodes["n2"]["requested"]["cpu"] == "2"


def test_shared_reservation_owner_going_away_gives_its_share_back():
    b = ClusterBuilder().node("n1", **FOUR)
    b.obj(reservation("r", {"cpu": "4"}, node="n1", allocateOnce=False),
          pod("web-1", {"cpu": "2"}, labels=WEB, t=1), pod("web-2", {"cpu": "2"}, labels=WEB, t=2),
          pod("web-3", {"cpu": "2"}, labels=WEB, t=3), pod("other", {"cpu": "2"}, t=4))

    async def main() -> None:
        cluster = b.build().to_cluster()
        engine = EmbeddedEngine(build_registry(only={"reservation"}), cluster, start_time=b.build().newest_timestamp())
        await engine.run()
        assert [cluster.pod_by_key(f"default/web-{i}").node_name for i in (1, 2, 3)] == ["n1", "n1", None]
        assert cluster.pod_by_key("default/other").node_name is None
        plugin = engine.scheduler.registry.plugins["reservation"].obj
        r = plugin.reservations["uid-r"]
        assert r.phase == "Available" and r.allocated == {"cpu": 4000} and len(r.current_owners) == 2
        gone = cluster.pod_by_key("default/web-1")
        await engine.scheduler.remove_pod(gone.uid)
        await engine.drive()
        # its 2 cpu went back to the reservation: the next owner took them, the non-owner still cannot
        assert cluster.pod_by_key("default/web-3").node_name == "n1"
        assert cluster.pod_by_key("default/other").node_name is None
        assert sorted(o["name"] for o in r.current_owners.values()) == ["web-2", "web-3"]

    anyio.run(main)


def test_restricted_reservation_confines_owners_to_the_reserved_amounts():
    # Aligned: an owner may take more than reserved from the node; Restricted: not for reserved resources
    for policy, want in (("Aligned", "n1"), ("Restricted", None)):
        objs = [reservation("r", {"cpu": "2"}, node="n1", allocatePolicy=policy),
                pod("web", {"cpu": "3"}, labels=WEB, annotations=affinity())]
        res = run(*objs, nodes={"n1": {"cpu": "8"}})
        assert res.placements()["default/web"] == want, policy
    assert reason(res, "default/web") == "0/1 nodes are available: 1 Reservation(s) Insufficient cpu."


def test_owner_matching_object_controller_and_affinity():
    owners = [{"object": {"name": "exact", "namespace": "default"}},
              {"controller": {"kind": "Job", "name": "train", "controller": True}}]
    ref = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1", "controller": True}]
    objs = [reservation("r", {"cpu": "4"}, node="n1", owners=owners, allocateOnce=False),
            pod("exact", {"cpu": "1"}, t=1), pod("worker", {"cpu": "1"}, t=2),
            pod("stranger", {"cpu": "1"}, t=3)]
    objs[2]["metadata"]["ownerReferences"] = ref
    res = run(*objs, nodes={"n1": FOUR})
    assert rows(res)["r"]["owners"] == ["default/exact", "default/worker"]
    assert res.placements()["default/stranger"] is None
    # a reservation affinity by name only takes that reservation; selectors match its labels
    objs = [reservation("a", {"cpu": "2"}, node="n1", labels={"pool": "a"}),
            reservation("b", {"cpu": "2"}, node="n2", labels={"pool": "b"}),
            pod("w1", {"cpu": "2"}, labels=WEB, annotations=affinity(name="b")),
            pod("w2", {"cpu": "2"}, labels=WEB, annotations=affinity(reservationSelector={"pool": "a"}))]
    res = run(*objs, nodes={"n1": {"cpu": "2"}, "n2": {"cpu": "2"}})
    assert res.placements() == {"default/w1": "n2", "default/w2": "n1"}


def test_unschedulable_and_tainted_reservations_need_tolerations():
    for extra, ann, want in (({"unschedulable": True}, affinity(), None),
                             ({"unschedulable": True},
                              affinity(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]),
                              "n1"),
                             ({"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}, affinity(), None),
                             ({"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]},
                              affinity(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x"}]), "n1")):
        objs = [reservation("r", {"cpu": "2"}, node="n1", **extra), pod("web", {"cpu": "2"}, labels=WEB, annotations=ann)]
        res = run(*objs, nodes={"n1": {"cpu": "2"}})
        assert res.placements()["default/web"] == want, (extra, ann)


def test_reserve_pod_passes_every_filter():
    # the template's node selector applies, and a reservation that fits nowhere stays Pending
    objs = [reservation("r", {"cpu": "1"}, template_spec={"nodeSelector": {"zone": "b"}}),
            reservation("big", {"cpu": "64"})]
    res = run(*objs, nodes={"n1": {"labels": {"zone": "a"}}, "n2": {"labels": {"zone": "b"}}})
    assert rows(res)["r"]["node"] == "n2" and rows(res)["r"]["phase"] == "Available"
    assert rows(res)["big"]["phase"] == "Pending" and rows(res)["big"]["node"] is None


@pytest.mark.parametrize("field,value,message", [
    ("spec.owners", [], "spec.owners: required"),
    ("spec.allocatePolicy", "Loose", "spec.allocatePolicy: expected Aligned or Restricted"),
    ("spec.ttl", "soon", "spec.ttl:"),
    ("spec.allocateOnce", "yes", "spec.allocateOnce: expected true or false"),
    ("spec.taints", [{"key": "k", "effect": "Sometimes"}], "spec.taints[0].effect:"),
    ("spec.owners", [{}], "spec.owners[0]: needs at least one of object, controller, labelSelector"),
    ("status.phase", "Running", "status.phase: expected one of"),
])
def test_malformed_reservation_names_the_field(field, value, message):
    obj = reservation("bad", {"cpu": "1"})
    section, key = field.split(".")
    obj.setdefault(section, {})[key] = value
    with pytest.raises(Exception) as e:
        run(obj)
    assert "Reservation bad" in str(e.value) and f"field {message.split(':')[0]}" in str(e.value)
    from koordfw_reservation.api import reservation_from_manifest

    with pytest.raises(ManifestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        reservation_from_manifest(obj)


def test_template_quantity_error_names_the_template_field():
    obj = reservation("bad", {"cpu": "lots"})
    from koordfw_reservation.api import reservation_from_manifest

    with pytest.raises(ManifestError) as e:
        reservation_from_manifest(obj)
    assert str(e.value).startswith("Reservation bad: field spec.template.")


def test_no_reservations_changes_nothing():
    objs = [pod(f"p{i}", {"cpu": "1"}) for i in range(6)]
    a = run(*objs, nodes={"n1": FOUR, "n2": FOUR}).placements()
    b = ClusterBuilder().node("n1", **FOUR).node("n2", **FOUR).obj(*objs)
    from koordfw.testing import schedule

    assert schedule(b).placements() == a
    assert "reservations" not in run(*objs).to_dict()


def test_placeholder_events_reach_the_queue():
    """An owner waiting for its reservation (affinity) is retried when the reserve pod is placed."""
    objs = [pod("web", {"cpu": "1"}, labels=WEB, annotations=affinity(), t=0, priority=100),
            reservation("r", {"cpu": "1"}, t=5, template_spec={"priority": 0})]
    res = run(*objs)
    assert res.placements()["default/web"] == "n1"
    assert res.results[res.cluster.pod_by_key("default/web").uid].attempts == 2
    assert rows(res)["r"]["phase"] == "Succeeded"


def test_input_status_owners_are_re_read_from_the_pods():
    """The controller's syncStatus: currentOwners and allocated come from the pods on the node that carry
    reservation-allocated with its uid, whatever the status said."""
    r = reservation("r", {"cpu": "4"}, node="n1", allocateOnce=False)
    r["status"].update(allocated={"cpu": "3"}, currentOwners=[{"namespace": "default", "name": "gone", "uid": "x"}])
    owner = pod("web-0", {"cpu": "1"}, labels=WEB, node="n1",
                annotations={"scheduling.koordinator.sh/reservation-allocated": '{"name":"r","uid":"uid-r"}'})
    res = run(r, owner, pod("web-1", {"cpu": "3"}, labels=WEB), nodes={"n1": FOUR})
    assert res.placements()["default/web-1"] == "n1"
    assert rows(res)["r"]["owners"] == ["default/web-0", "default/web-1"]
    assert rows(res)["r"]["allocated"] == {"cpu": "4"}
