"""Elastic quota with reservations (issue 22): a reservation's reserve pod is charged to the quota its template
names (what it still holds), each owner its own requests, so what is reserved is charged once; an owner's
admission does not add its requests on top of the reservation it will allocate from."""

from __future__ import annotations

from reservation_testkit import pod, reason, reservation, rows

from koordfw.testing import ClusterBuilder, schedule

WEB = {"app": "web"}


def quota(cpu: str) -> dict:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": "team-a", "namespace": "team-a"}, "spec": {"min": {"cpu": cpu}, "max": {"cpu": cpu}}}


def team_reservation(cpu: str, **kw) -> dict:
    r = reservation("r", {"cpu": cpu}, **kw)
    r["spec"]["template"]["metadata"] = {"namespace": "team-a"}
    return r


def run(*objs: dict):
    b = ClusterBuilder().node("n1", cpu="8").node("n2", cpu="8").obj(*objs)
    return schedule(b, only=["reservation", "elastic_quota"])


def used(res) -> dict:
    return next(q["used"] for q in res.to_dict()["quotas"] if q["name"] == "team-a")


def test_reserved_amount_is_charged_once_to_the_owners_quota():
    res = run(quota("4"), team_reservation("3"), pod("web", {"cpu": "3"}, labels=WEB, ns="team-a", t=10))
    assert res.placements()["team-a/web"] == rows(res)["r"]["node"]
    assert rows(res)["r"]["phase"] == "Succeeded"
    assert used(res) == {"cpu": "3"}


def test_the_hold_still_counts_for_everybody_else():
    res = run(quota("4"), team_reservation("3"), pod("batch", {"cpu": "2"}, ns="team-a", t=10))
    assert res.placements()["team-a/batch"] is None
    assert reason(res, "team-a/batch") == "Insufficient quota team-a: cpu used 3 + request 2 > runtime 4"
    assert used(res) == {"cpu": "3"}


def test_a_shared_reservation_charges_its_remainder_and_its_owners():
    res = run(quota("4"), team_reservation("3", allocateOnce=False),
              pod("web-1", {"cpu": "2"}, labels=WEB, ns="team-a", t=10),
              pod("web-2", {"cpu": "2"}, labels=WEB, ns="team-a", t=11))
    # web-1 takes 2 of the 3 reserved; web-2 may take the last 1 from it and 1 more: 2 + 2 = 4 <= 4
    assert res.placements() == {"team-a/web-1": rows(res)["r"]["node"], "team-a/web-2": rows(res)["r"]["node"]}
    assert used(res) == {"cpu": "4"}
