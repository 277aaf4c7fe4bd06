"""Koordinator's TestReserve / TestUnreserve / TestBind facts through whole cycles: what reserve allocates,
unreserve gives back, and the status bind writes."""

from __future__ import annotations

import json

from reservation_testkit import affinity, pod, reason, reservation, rows, run

from koordfw import Status, hookimpl
from koordfw.testing import ClusterBuilder, schedule

WEB = {"app": "web"}


class RejectWeb:
    """Rejects the pod named web at permit, after reserve allocated it from the reservation."""

    @hookimpl
    def permit(self, pod):
        return Status.unschedulable("no") if pod.name == "web" else None


def test_unreserve_gives_back_what_reserve_allocated():
    b = ClusterBuilder().node("n1", cpu="4").obj(reservation("r", {"cpu": "2"}, node="n1"),
                                                 pod("web", {"cpu": "2"}, labels=WEB))
    res = schedule(b, only=["reservation"], plugins={"reject_web": RejectWeb()})
    assert res.placements()["default/web"] is None
    r = rows(res)["r"]
    assert r["phase"] == "Available" and r["allocated"] == {} and r["owners"] == []
    nodes = {n["name"]: n for n in res.to_dict()["nodes"]}
    assert nodes["n1"]["requested"]["cpu"] == "2"  # the reservation holds all of it again


def test_bind_makes_the_reservation_available_with_koordinators_conditions():
    res = run(reservation("r", {"cpu": "2", "memory": "1Gi"}))
    r = rows(res)["r"]
    assert (r["phase"], r["node"], r["allocatable"]) == ("Available", "n1", {"cpu": "2", "memory": "1Gi"})
    plugin = res.scheduler.registry.plugins["reservation"].obj
    conds = {c["type"]: (c["status"], c["reason"]) for c in plugin.reservations["uid-r"].conditions}
    assert conds == {"Scheduled": ("True", "Scheduled"), "Ready": ("True", "Available")}
    # allocateOnce consumed: Succeeded, Ready False (Succeeded)
    res = run(reservation("r", {"cpu": "2"}), pod("web", {"cpu": "1"}, labels=WEB, t=5))
    plugin = res.scheduler.registry.plugins["reservation"].obj
    r = plugin.reservations["uid-r"]
    assert r.phase == "Succeeded" and r.conditions[-1]["reason"] == "Succeeded"
    assert rows(res)["r"]["allocated"] == {"cpu": "1"}


def test_restricted_options_confine_only_the_listed_resources():
    ann = {"scheduling.koordinator.sh/reservation-restricted-options": json.dumps({"resources": ["cpu"]})}
    r = reservation("r", {"cpu": "2", "memory": "2Gi"}, node="n1", allocatePolicy="Restricted", annotations=ann)
    # memory is not restricted: the owner may take more memory than reserved (from the node), not more cpu
    res = run(r, pod("web", {"cpu": "2", "memory": "4Gi"}, labels=WEB, annotations=affinity()))
    assert res.placements()["default/web"] == "n1"
    res = run(r, pod("web", {"cpu": "3", "memory": "1Gi"}, labels=WEB, annotations=affinity()))
    assert res.placements()["default/web"] is None
    assert reason(res, "default/web") == "0/1 nodes are available: 1 Reservation(s) Insufficient cpu."


def test_owner_of_two_reservations_allocates_from_one():
    """Aligned: node free + one reservation's remainder; a pod needing both reservations does not fit."""
    objs = [reservation("a", {"cpu": "2"}, node="n1"), reservation("b", {"cpu": "2"}, node="n1"),
            pod("web", {"cpu": "3"}, labels=WEB, annotations=affinity())]
    res = run(*objs, nodes={"n1": {"cpu": "4"}})
    assert res.placements()["default/web"] is None
    objs[-1] = pod("web", {"cpu": "2"}, labels=WEB, annotations=affinity())
    res = run(*objs, nodes={"n1": {"cpu": "4"}})
    assert res.placements()["default/web"] == "n1"
    owners = {name: r["owners"] for name, r in rows(res).items()}
    assert sorted(map(len, owners.values())) == [0, 1]


def _gang(name: str, n: int, min_available: int) -> list[dict]:
    ann = {"gang.scheduling.koordinator.sh/name": "g", "gang.scheduling.koordinator.sh/min-available": str(min_available)}
    return [pod(f"{name}-{i}", {"cpu": "2"}, labels=WEB, annotations=ann, t=10 + i) for i in range(n)]


def test_gang_of_owners_all_or_nothing_with_reservations():
    """A gang's members each allocate from a reservation; when the gang cannot complete, every member's
    allocation is given back (unreserve) and the reservations stay Available, holding their nodes."""
    rs = [reservation("a", {"cpu": "2"}, node="n1"), reservation("b", {"cpu": "2"}, node="n2")]
    nodes = {"n1": {"cpu": "2"}, "n2": {"cpu": "2"}}
    b = ClusterBuilder()
    for n, kw in nodes.items():
        b.node(n, **kw)
    b.obj(*rs, *_gang("w", 2, 2))
    res = schedule(b, only=["reservation", "gang"])
    assert sorted(v for v in res.placements().values()) == ["n1", "n2"]
    assert {r["phase"] for r in rows(res).values()} == {"Succeeded"}
    b = ClusterBuilder()
    for n, kw in nodes.items():
        b.node(n, **kw)
    b.obj(*rs, *_gang("w", 3, 3))
    res = schedule(b, only=["reservation", "gang"])
    assert set(res.placements().values()) == {None}
    assert {(r["phase"], tuple(r["owners"])) for r in rows(res).values()} == {("Available", ())}


def test_the_status_is_written_through_the_handle_into_the_clusters_object():
    """handle.update_object_status: the embedded cluster keeps the status in its copy of the object (the live
    scheduler PUTs it, tests/kube/test_reservation_live.py)."""
    res = run(reservation("r1", {"cpu": "2"}),
              pod("web-0", {"cpu": "1"}, labels={"app": "web"}, t=1))
    st = res.cluster.get_object("Reservation", "r1")["status"]
    assert st["phase"] == "Succeeded" and st["nodeName"] == "n1"
    assert st["allocatable"] == {"cpu": "2"} and st["allocated"] == {"cpu": "1"}
    assert st["currentOwners"] == [{"namespace": "default", "name": "web-0", "uid": "uid-default-web-0"}]
    assert {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]} == {
        "Scheduled": ("True", "Scheduled"), "Ready": ("False", "Succeeded")}


def test_an_unschedulable_reservation_stays_pending_with_koordinators_condition():
    res = run(reservation("big", {"cpu": "64"}))
    st = res.cluster.get_object("Reservation", "big")["status"]
    assert st["phase"] == "Pending"
    [c] = st["conditions"]
    assert (c["type"], c["status"], c["reason"]) == ("Scheduled", "False", "Unschedulable")
    assert "Insufficient cpu" in c["message"]
