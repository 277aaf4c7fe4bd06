"""``koordfw simulate --deschedule`` with the reservation plugin: the plan runs as PodMigrationJobs through the
live descheduler's migration controller, in memory (issue 22)."""

from __future__ import annotations

from reservation_testkit import pod

from koordfw import Migration, hookimpl
from koordfw.testing import ClusterBuilder, schedule


class MoveOnce:
    """Moves web-0 from n1 to n2 while it is on n1; a second proposal has no target (evict directly)."""

    @hookimpl
    def deschedule(self, cluster):
        out = []
        p = cluster.pod_by_key("default/web-0")
        if p is not None and p.node_name == "n1":
            out.append(Migration(pod="default/web-0", from_node="n1", to="n2", reason="rebalance"))
        q = cluster.pod_by_key("default/batch-0")
        if q is not None and q.node_name == "n1":
            out.append(Migration(pod="default/batch-0", from_node="n1", to=None, reason="evict"))
        return out


def test_simulate_deschedule_runs_reservation_first_jobs_in_memory():
    b = ClusterBuilder()
    b.node("n1", cpu="4")
    b.node("n2", cpu="4")
    b.obj(pod("web-0", {"cpu": "1"}, labels={"app": "web"}, node="n1"),
          pod("batch-0", {"cpu": "1"}, node="n1"))
    res = schedule(b, only=["reservation"], plugins={"move": MoveOnce()}, deschedule=True)
    out = res.to_dict()
    jobs = {j["pod"]: j for j in out["migrationJobs"]}
    web = jobs["default/web-0"]
    assert (web["mode"], web["phase"], web["node"], web["replacement"]) == (
        "ReservationFirst", "Succeeded", "n2", "default/web-0")
    assert (jobs["default/batch-0"]["mode"], jobs["default/batch-0"]["phase"]) == ("EvictDirectly", "Succeeded")
    assert res.placements()["default/web-0"] == "n2"
    [row] = [r for r in out["reservations"] if r["name"] == web["reservation"]]
    assert (row["phase"], row["node"], row["owners"]) == ("Succeeded", "n2", ["default/web-0"])
    assert [m["pod"] for m in out["migrations"]] == ["default/web-0", "default/batch-0"]
