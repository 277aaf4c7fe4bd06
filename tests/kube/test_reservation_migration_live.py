"""PodMigrationJobs in the live descheduler (issue 22): a planned migration becomes a ReservationFirst job; the
Reservation holds the target while the old pod terminates, across a scheduler restart; the replacement
consumes it."""

from __future__ import annotations

import time

import pytest
from kube_testkit import OWNER, MoveWeb, node, pod, running, wait_for
from kube_testkit import web as replica

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.engines.migration import job_from_manifest
from koordfw.testing.fake_apiserver import FakeApiServer

pytest.importorskip("koordfw_reservation")


def web(name, cpu="1", **kw):
    return replica(name, cpu, labels={"app": "web"}, **kw)


def engine(client):
    reg = build_registry(None, only=["reservation"], plugins={"move": MoveWeb()})
    return KubeSchedulerEngine(reg, client, deschedule_interval=0.2, deschedule_dry_run=False, flush_interval=0.1)


def jobs(api):
    return list(api.objects["podmigrationjobs"].values())


def conds(obj):
    return {c["type"]: (c["status"], c.get("reason", "")) for c in (obj.get("status") or {}).get("conditions") or []}


def node_of(api, name):
    return ((api.get("pods", name, "default") or {}).get("spec") or {}).get("nodeName")


def unschedulable(api, name):
    cs = ((api.get("pods", name, "default") or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in cs)


async def test_reservation_first_holds_the_target_while_the_old_pod_terminates_across_a_restart():
    async with FakeApiServer(bookmark_interval=0.2, graceful_deletes=True) as api, \
            KubeClient(api.url, qps=0) as client:
        api.create(node("n0", cpu="4"))
        api.create(node("n1", cpu="4"))
        api.create(web("web-0", node_name="n0"))
        eng = engine(client)
        async with running(eng):
            await wait_for(lambda: api.evictions == [("default", "web-0")], what="web-0 evicted")
            await wait_for(lambda: conds(jobs(api)[0]).get("Eviction", ("",))[0] == "True", what="eviction recorded")
        [job] = jobs(api)
        j = job_from_manifest(job)
        assert (j.mode, j.pod_key, j.phase) == ("ReservationFirst", "default/web-0", "Running")
        assert job["status"]["nodeName"] == "n1"
        assert conds(job)["ReservationCreated"][0] == conds(job)["ReservationScheduled"][0] == "True"
        rname = job["spec"]["reservationOptions"]["reservationRef"]["name"]
        res = api.get("reservations", rname)
        assert res["status"]["phase"] == "Available" and res["status"]["nodeName"] == "n1"
        assert res["spec"]["owners"] == [{"controller": {**OWNER, "namespace": "default"}}]
        assert res["spec"]["allocateOnce"] is True
        assert res["metadata"]["labels"]["app.kubernetes.io/created-by"] == "koordfw-descheduler"
        # the old pod is still terminating on n0
        assert api.get("pods", "web-0", "default")["metadata"].get("deletionTimestamp")

        # while no scheduler runs, a pod arrives that fits n1 only without the reservation's hold
        api.create(pod("filler", "3500m"))
        eng2 = engine(client)
        async with running(eng2):
            await wait_for(lambda: unschedulable(api, "filler"), what="the target held after the restart")
            assert len(jobs(api)) == 1  # the plan is not made again: the job survived the restart
            api.finish_deletions()  # the kubelet confirms: web-0 is gone
            await wait_for(lambda: api.get("pods", "web-0", "default") is None, what="web-0 gone")
            api.create(web("web-1"))  # the ReplicaSet's replacement
            await wait_for(lambda: node_of(api, "web-1") is not None, what="replacement bound")
            assert node_of(api, "web-1") == "n1"
            await wait_for(lambda: (jobs(api)[0].get("status") or {}).get("phase") == "Succeeded", what="job done")
            await wait_for(lambda: node_of(api, "filler") == "n0", what="filler placed where web-0 was")
        job = jobs(api)[0]
        assert job["status"]["podRef"]["name"] == "web-1"
        assert conds(job)["PodBoundReservation"][0] == "True"
        assert api.get("reservations", rname)["status"]["phase"] == "Succeeded"
        assert len(api.evictions) == 1


async def test_evict_directly_and_arbitration_per_workload(api, client):
    """A job without a target evicts directly; a second pod of the same workload waits while the first runs."""
    from koordfw.engines.kube.deschedule import KubeMigrationIO
    from koordfw.engines.migration import MigrationController, job_manifest

    api.create(node("n0", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    api.create(web("web-1", node_name="n0"))
    eng = KubeSchedulerEngine(build_registry(None, only=["reservation"]), client)  # no descheduler of its own
    async with running(eng):
        await wait_for(lambda: eng.cluster.pod_by_key("default/web-1") is not None, what="cached")
        p0, p1 = eng.cluster.pod_by_key("default/web-0"), eng.cluster.pod_by_key("default/web-1")
        c = MigrationController(KubeMigrationIO(eng.scheduler, client))
        a = api.create(job_manifest("a", p0, target="n9"), "podmigrationjobs")  # ReservationFirst, nowhere to go
        b = api.create(job_manifest("b", p1, mode="EvictDirectly"), "podmigrationjobs")
        await c.run_once({"a": a, "b": b})
        assert api.get("podmigrationjobs", "a")["status"]["phase"] == "Running"
        # its reservation cannot be placed (no n9): Scheduled False, Unschedulable, copied onto the job, which waits
        ra = api.get("podmigrationjobs", "a")["spec"]["reservationOptions"]["reservationRef"]["name"]

        def unsched(o):
            return {c["type"]: (c["status"], c.get("reason")) for c in ((o or {}).get("status") or {}).get("conditions") or []
                    }.get("Scheduled") == ("False", "Unschedulable")
        await wait_for(lambda: unsched(eng.cluster.get_object("Reservation", ra)), what="reservation unschedulable")
        assert api.get("reservations", ra)["status"]["phase"] == "Pending"
        await c.run_once({"a": api.get("podmigrationjobs", "a")})
        ja = api.get("podmigrationjobs", "a")
        assert conds(ja)["ReservationScheduled"] == ("False", "Unschedulable") and ja["status"]["phase"] == "Running"
        assert "node" in next(x for x in ja["status"]["conditions"] if x["type"] == "ReservationScheduled")["message"]
        assert (api.get("podmigrationjobs", "b").get("status") or {}).get("phase") in (None, "Pending")  # waits
        assert api.evictions == []
        api.update("podmigrationjobs", "a", lambda o: o["status"].update(phase="Aborted"))  # as a user would
        paused = job_manifest("c", p0, mode="EvictDirectly")
        paused["spec"]["paused"] = True
        cobj = api.create(paused, "podmigrationjobs")
        await c.run_once({"a": api.get("podmigrationjobs", "a"), "b": api.get("podmigrationjobs", "b"), "c": cobj})
        assert api.get("podmigrationjobs", "b")["status"]["phase"] == "Succeeded"
        assert not api.get("podmigrationjobs", "c").get("status")  # paused: left alone
        assert api.evictions == [("default", "web-1")]
        # past its ttl (default 5 minutes) a job fails with Timeout and deletes the reservation nobody consumed
        a2 = api.create(job_manifest("a2", p0, target="n9", ttl=60), "podmigrationjobs")
        await c.run_once({"a2": a2})
        rname = api.get("podmigrationjobs", "a2")["spec"]["reservationOptions"]["reservationRef"]["name"]
        assert api.get("reservations", rname) is not None
        await wait_for(lambda: eng.cluster.get_object("Reservation", rname) is not None, what="reservation cached")
        later = KubeMigrationIO(eng.scheduler, client)
        later.now = lambda: time.time() + 61  # type: ignore[method-assign]
        await MigrationController(later).run_once({"a2": api.get("podmigrationjobs", "a2")})
        st = api.get("podmigrationjobs", "a2")["status"]
        assert (st["phase"], st["reason"]) == ("Failed", "Timeout")
        assert api.get("reservations", rname) is None
        assert api.evictions == [("default", "web-1")]


async def test_a_users_job_is_reconciled_between_planning_rounds(api, client):
    """Jobs are reconciled every job_interval (at most 2 s), not only every planning interval; a job made with
    kubectl runs like the descheduler's own."""
    from koordfw.engines.migration import job_manifest

    api.create(node("n0", cpu="4"))
    api.create(web("web-0", node_name="n0"))
    reg = build_registry(None, only=["reservation"])
    eng = KubeSchedulerEngine(reg, client, deschedule_interval=3600, deschedule_dry_run=False)
    assert eng.descheduler is not None and eng.descheduler.job_interval == 2.0
    eng.descheduler.job_interval = 0.1
    async with running(eng):
        await wait_for(lambda: eng.cluster.pod_by_key("default/web-0") is not None, what="cached")
        api.create(job_manifest("by-hand", eng.cluster.pod_by_key("default/web-0"), mode="EvictDirectly"),
                   "podmigrationjobs")
        await wait_for(lambda: (api.get("podmigrationjobs", "by-hand").get("status") or {}).get("phase") == "Succeeded",
                       what="the job ran")
    assert api.evictions == [("default", "web-0")]
