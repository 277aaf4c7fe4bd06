"""Reservations in the live scheduler (issue 22): watched, scheduled as reserve pods, their status written
through the API (PUT .../reservations/<name>/status with conflict retry), honoured after a restart."""

from __future__ import annotations

import json

import pytest
from kube_testkit import SCHED, node, pod, running, wait_for

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.engines.kube.writer import Writer

pytest.importorskip("koordfw_reservation")

ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
GV = "scheduling.koordinator.sh/v1alpha1"


def reservation(name: str, cpu: str = "2", *, allocate_once: bool = True, owners: list | None = None, **spec) -> dict:
    return {"apiVersion": GV, "kind": "Reservation", "metadata": {"name": name},
            "spec": {"template": {"spec": {"schedulerName": SCHED, "containers": [
                         {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}},
                     "owners": owners or [{"labelSelector": {"matchLabels": {"app": "web"}}}],
                     "allocateOnce": allocate_once, "ttl": "0s", **spec}}


def engine(client: KubeClient) -> KubeSchedulerEngine:
    return KubeSchedulerEngine(build_registry(None, only=["reservation"]), client,
                               flush_interval=0.1)


def status(api, name: str) -> dict:
    return (api.get("reservations", name) or {}).get("status") or {}


def node_of(api, name: str) -> str | None:
    return ((api.get("pods", name, "default") or {}).get("spec") or {}).get("nodeName")


def unschedulable(api, name: str) -> bool:
    conds = ((api.get("pods", name, "default") or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conds)


async def test_a_reservation_is_scheduled_its_status_written_and_its_owner_allocates_from_it(api, client):
    api.create(node("n0", cpu="4"))
    api.create(reservation("r1", "3"))
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: status(api, "r1").get("phase") == "Available", what="r1 Available")
        st = status(api, "r1")
        assert st["nodeName"] == "n0"
        assert st["allocatable"] == {"cpu": "3", "memory": "1Gi"}
        conds = {c["type"]: c for c in st["conditions"]}
        assert (conds["Scheduled"]["status"], conds["Scheduled"]["reason"]) == ("True", "Scheduled")
        assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("True", "Available")
        # a non-owner finds the reserved 3 cpus taken
        api.create(pod("other", "2"))
        await wait_for(lambda: unschedulable(api, "other"), what="the non-owner refused")
        # the owner allocates from the reservation: allocateOnce, so it is Succeeded and releases the rest
        api.create(pod("web-0", "2", labels={"app": "web"}))
        await wait_for(lambda: node_of(api, "web-0") == "n0", what="the owner bound")
        ann = api.get("pods", "web-0", "default")["metadata"]["annotations"][ALLOCATED]
        assert json.loads(ann) == {"name": "r1", "uid": api.get("reservations", "r1")["metadata"]["uid"]}
        await wait_for(lambda: status(api, "r1").get("phase") == "Succeeded", what="r1 Succeeded")
        st = status(api, "r1")
        assert st["currentOwners"] == [{"namespace": "default", "name": "web-0",
                                        "uid": api.get("pods", "web-0", "default")["metadata"]["uid"]}]
        assert st["allocated"] == {"cpu": "2", "memory": "128Mi"}
        assert {c["type"]: c["reason"] for c in st["conditions"]}["Ready"] == "Succeeded"


async def test_after_a_restart_available_reservations_hold_and_owners_are_re_read(api, client):
    api.create(node("n0", cpu="4"))
    api.create(node("n1", cpu="1"))
    api.create(reservation("shared", "3", allocate_once=False))
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: status(api, "shared").get("nodeName") == "n0", what="placed")
        api.create(pod("web-0", "1", labels={"app": "web"}))
        await wait_for(lambda: len(status(api, "shared").get("currentOwners") or []) == 1, what="one owner")
    assert status(api, "shared")["allocated"] == {"cpu": "1", "memory": "128Mi"}
    # while no scheduler runs, the status in the API is made stale: the owners must come from the pods
    api.update("reservations", "shared", lambda o: o["status"].update(currentOwners=[], allocated={}))
    eng2 = engine(client)
    async with running(eng2):
        api.create(pod("other", "1"))  # 4 - 3 held = 1 free on n0, 1 on n1: fits, not inside the hold
        api.create(pod("big", "2"))  # would fit n0 only without the reservation
        await wait_for(lambda: node_of(api, "other") is not None and unschedulable(api, "big"), what="held")
        await wait_for(lambda: len(status(api, "shared").get("currentOwners") or []) == 1, what="owners re-read")
        # the owner's share is allocated: a second owner gets the remaining 2 cpus of the reservation
        api.create(pod("web-1", "2", labels={"app": "web"}))
        await wait_for(lambda: node_of(api, "web-1") == "n0", what="second owner in the reservation")
        await wait_for(lambda: len(status(api, "shared").get("currentOwners") or []) == 2, what="two owners")
        assert status(api, "shared")["allocated"] == {"cpu": "3", "memory": "256Mi"}
        assert status(api, "shared")["phase"] == "Available"


async def test_a_deleted_reservation_releases_its_node(api, client):
    api.create(node("n0", cpu="4"))
    api.create(reservation("r1", "3"))
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: status(api, "r1").get("phase") == "Available", what="r1 Available")
        api.create(pod("other", "2"))
        await wait_for(lambda: unschedulable(api, "other"), what="held")
        assert node_of(api, "other") is None  # 4 cpus - 3 held = 1 free: the 2-cpu pod waits
        api.delete("reservations", "r1")
        await wait_for(lambda: node_of(api, "other") == "n0", timeout=20, what="released")
        assert api.get("reservations", "r1") is None
        assert node_of(api, "other") == "n0"  # the 3 held cpus are free again: 2 of 4 now fit


async def test_status_write_retries_on_a_stale_resource_version(api, client):
    api.create(reservation("r1"))
    cached = api.get("reservations", "r1")
    api.update("reservations", "r1", lambda o: o["metadata"].setdefault("labels", {}).update(edited="yes"))
    w = Writer(client, None, controller=SCHED, instance="t")
    w.object_status(f"/apis/{GV}/reservations/r1/status", {**cached, "status": {"phase": "Available"}})
    await w.drain()
    cur = api.get("reservations", "r1")
    assert cur["status"] == {"phase": "Available"} and cur["metadata"]["labels"] == {"edited": "yes"}
    assert w.object_status_conflicts == 1 and w.object_status_writes == 1
    # a PUT of /status changes nothing but the status; a stale one is a 409
    from koordfw.engines.kube.client import ApiError

    with pytest.raises(ApiError) as e:
        await client.request("PUT", f"/apis/{GV}/reservations/r1/status",
                             body={**cached, "status": {"phase": "Failed"}})
    assert e.value.status == 409


async def test_a_reservation_of_another_scheduler_is_left_to_it_but_held_once_placed(api, client):
    other = reservation("theirs", "3")
    other["spec"]["template"]["spec"]["schedulerName"] = "koord-scheduler"
    api.create(node("n0", cpu="4"))
    api.create(other)
    eng = engine(client)
    async with running(eng):
        api.create(pod("filler-probe", "100m"))
        await wait_for(lambda: node_of(api, "filler-probe") == "n0", what="the scheduler runs")
        assert status(api, "theirs") == {}  # not ours to schedule (isResponsibleForReservation)
        assert not eng.scheduler.placeholders
        # koord-scheduler places it: from then on it holds n0 here too
        api.update("reservations", "theirs", lambda o: o.update(status={
            "phase": "Available", "nodeName": "n0", "allocatable": {"cpu": "3", "memory": "1Gi"}}))
        await wait_for(lambda: bool(eng.scheduler.placeholders), what="held")
        api.create(pod("other", "2"))
        await wait_for(lambda: unschedulable(api, "other"), what="the non-owner refused")


async def test_an_expired_reservation_fails_and_releases_its_node(api, client):
    api.create(node("n0", cpu="4"))
    r = reservation("short", "3")
    r["spec"]["ttl"] = "2s"
    api.create(r)
    eng = engine(client)
    async with running(eng):
        await wait_for(lambda: status(api, "short").get("phase") == "Available", what="placed")
        await wait_for(lambda: status(api, "short").get("phase") == "Failed", timeout=10, what="expired")
        ready = {c["type"]: c for c in status(api, "short")["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "Expired")
        api.create(pod("other", "3"))
        await wait_for(lambda: node_of(api, "other") == "n0", what="its node released")
