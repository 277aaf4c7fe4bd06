"""GangGroup all-or-nothing (issue 34 point 1), through the embedded engine and its virtual clock:
Koordinator's ``NextPod`` feeds every pending member of a gang group in one round, wherever it waits,
and a member's failure rejects the group's waiting members at once (no permit timeout is needed)."""

from __future__ import annotations

import json

import anyio
from gang_testkit import cluster, gang_ann, gang_pods, pod

from koordfw.core.cluster import ClusterState
from koordfw.embed import build_registry
from koordfw.engines.embedded import EmbeddedEngine
from koordfw.testing import schedule

BIND_GROUP = "internal.scheduling.koordinator.sh/bind-gang-group-id"
BIND_COUNT = "internal.scheduling.koordinator.sh/bind-gang-member-count"
WAIT = "30s"
START = 1793491200.0  # T0 of gang_testkit.ts


def group_pods(gangs: dict[str, int], *, t: float, cpu: str = "1") -> list[dict]:
    groups = "[" + ",".join(f'"default/{g}"' for g in gangs) + "]"
    out: list[dict] = []
    for k, (g, n) in enumerate(gangs.items()):
        out += gang_pods(g, n, t=t + k, cpu=cpu, groups=groups, waiting_time=WAIT)
    return out


def test_two_gang_groups_competing_for_room_for_one():
    # 4 CPUs; group A (a1: 2 pods, a2: 2 pods, the older) and group B (b1, b2 alike) need 4 CPUs each
    objs = group_pods({"a1": 2, "a2": 2}, t=0) + group_pods({"b1": 2, "b2": 2}, t=10)
    r = schedule(cluster(1, "4", *objs), only=["gang"])
    pods = {p["name"]: p for p in r.to_dict()["pods"]}
    bound = sorted(n for n, p in pods.items() if p["phase"] == "Bound")
    assert bound == ["a1-0", "a1-1", "a2-0", "a2-1"]
    assert {pods[n]["annotations"][BIND_GROUP] for n in bound} == {"default/a1,default/a2"}
    assert {pods[n]["annotations"][BIND_COUNT] for n in bound} == {"4"}
    losers = [pods[n] for n in ("b1-0", "b1-1", "b2-0", "b2-1")]
    assert all(p["phase"] == "Pending" for p in losers)
    # one reason for the whole group, naming the member that failed
    reasons = {p["reason"] for p in losers[1:]}
    assert reasons == {'GangGroup "default/b1,default/b2" gets rejected due to member Pod "default/b1-0" is '
                       'unschedulable with reason "0/1 nodes are available: 1 Insufficient cpu.", '
                       'alreadyWaitForBound: 0'}
    assert "Insufficient cpu" in losers[0]["reason"]
    # each pod tried once: nobody of B parked at Permit and held its room for the 30 s waiting time
    assert all(r.engine.attempt_counts[p.uid] == 1 for p in r.cluster.all_pods())
    assert r.scheduler.clock.now() - START < 30
    assert not r.scheduler.waiting_pods


async def _reopened_for_one_gang() -> tuple[EmbeddedEngine, float]:
    # n0 full (f1 1 CPU + f2 3 CPU), n1 has 3 free; group B = b1 (one 2-CPU pod) + b2 (two 1-CPU pods)
    # needs 4: its round fails and all three pods go to the unschedulable pool
    groups = '["default/b1","default/b2"]'
    objs = [pod("f1", cpu="1", node="n0"), pod("f2", cpu="3", node="n0"), pod("f3", cpu="1", node="n1"),
            pod("b1-0", cpu="2", annotations=gang_ann("b1", 1, groups=groups, waiting_time=WAIT)),
            *[pod(f"b2-{i}", cpu="1", t=1, annotations=gang_ann("b2", 2, groups=groups, waiting_time=WAIT))
              for i in range(2)]]
    cl = ClusterState()
    engine = EmbeddedEngine(build_registry(only={"gang"}), cl, start_time=START + 100)
    cluster(2, "4", *objs).build().to_cluster(cl)
    await engine.run()
    assert not engine.bind_events
    t_fail = engine.clock.now()
    # f1 leaves: 1 CPU on n0 helps b2's pods (1 CPU) but not b1's (2 CPU), so only b2 is re-queued
    # by the event; the round opened for b2 must feed b1-0 too
    await engine.scheduler.remove_pod("uid-default-f1")
    await engine.drive()
    return engine, t_fail


def test_round_reopened_for_one_gang_feeds_the_whole_group():
    engine, t_fail = anyio.run(_reopened_for_one_gang)
    s = engine.scheduler
    names = {uid: s.cluster.pod(uid).name for uid, _ in engine.bind_events}
    assert sorted(names.values()) == ["b1-0", "b2-0", "b2-1"]
    for uid in names:
        ann = s.cluster.pod(uid).annotations
        assert ann[BIND_GROUP] == "default/b1,default/b2" and ann[BIND_COUNT] == "3"
    # bound within the round: no member waited out the 30 s permit timeout
    assert engine.clock.now() - t_fail < 30
    assert not s.waiting_pods


# -- Koordinator's GangGroup cases (core/core_test.go TestPermit, coscheduling_test.go TestPermit /
# TestPostFilter, core_test.go TestGetGangBindingInfo), as scenarios -------------------------

def pg_member(name: str, ns: str, gang: str, *, node_selector: dict | None = None) -> dict:
    return pod(name, ns=ns, labels={"pod-group.scheduling.sigs.k8s.io": gang}, node_selector=node_selector)


def pod_group(name: str, ns: str, min_member: int, groups: list[str], mode: str = "Strict") -> dict:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"gang.scheduling.koordinator.sh/groups": json.dumps(groups),
                                         "gang.scheduling.koordinator.sh/mode": mode}},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 10}}


def test_permit_both_gangs_of_the_group_satisfied_allows_all():
    # TestPermit "pod6 belongs to gangE that gangE has resourceSatisfied, and gangF has satisfied too"
    # (and coscheduling_test's "gangD ... and gangC is waiting for gangD"): Success for the whole group,
    # bound with one bind-gang-group-id and the count of every member allowed together (TestGetGangBindingInfo
    # "pod belongs to gangB in gangGroup": the member count is the group's, not the gang's)
    groups = ["gang-e-ns/gang-e", "gang-f-ns/gang-f"]
    objs = [pod_group("gang-e", "gang-e-ns", 2, groups), pod_group("gang-f", "gang-f-ns", 3, groups),
            *[pg_member(f"pod6-{i}", "gang-e-ns", "gang-e") for i in range(2)],
            *[pg_member(f"pod6-{i}", "gang-f-ns", "gang-f") for i in range(2, 5)]]
    r = schedule(cluster(2, "4", *objs), only=["gang"])
    pods = r.to_dict()["pods"]
    assert all(p["phase"] == "Bound" for p in pods) and len(pods) == 5
    assert {p["annotations"][BIND_GROUP] for p in pods} == {"gang-e-ns/gang-e,gang-f-ns/gang-f"}
    assert {p["annotations"][BIND_COUNT] for p in pods} == {"5"}
    assert r.scheduler.clock.now() - START < 10


def test_permit_one_gang_satisfied_the_other_not_waits_nonstrict():
    # TestPermit "pod5 belongs to gangC that gangC has resourceSatisfied, but gangD has not satisfied":
    # Wait for the gang's waiting time (10 s). gangD's second member fits nowhere; NonStrict keeps the
    # placed members waiting until the timeout, then every waiting member of the group is released.
    groups = ["gang-c-ns/gang-c", "gang-d-ns/gang-d"]
    objs = [pod_group("gang-c", "gang-c-ns", 2, groups, "NonStrict"),
            pod_group("gang-d", "gang-d-ns", 2, groups, "NonStrict"),
            *[pg_member(f"pod5-{i}", "gang-c-ns", "gang-c") for i in range(2)],
            pg_member("pod5-2", "gang-d-ns", "gang-d"),
            pg_member("pod5-3", "gang-d-ns", "gang-d", node_selector={"zone": "nowhere"})]
    r = schedule(cluster(2, "4", *objs), only=["gang"])
    pods = {p["name"]: p for p in r.to_dict()["pods"]}
    assert not any(p["phase"] == "Bound" for p in pods.values())
    assert r.scheduler.clock.now() - START >= 10  # the members waited their 10 s at Permit
    assert not r.scheduler.waiting_pods
    assert all(r.cluster.summary_row(n)["requested"].get("cpu", 0) == 0 for n in r.cluster.nodes)


def test_post_filter_strict_member_rejects_the_whole_group_at_once():
    # TestPostFilter "resource not Satisfied, StrictMode, reject all pods belong to gangA", for a group:
    # the same group as above in Strict mode is rejected when gangD's member fails, without waiting 10 s
    groups = ["gang-c-ns/gang-c", "gang-d-ns/gang-d"]
    objs = [pod_group("gang-c", "gang-c-ns", 2, groups), pod_group("gang-d", "gang-d-ns", 2, groups),
            *[pg_member(f"pod5-{i}", "gang-c-ns", "gang-c") for i in range(2)],
            pg_member("pod5-2", "gang-d-ns", "gang-d"),
            pg_member("pod5-3", "gang-d-ns", "gang-d", node_selector={"zone": "nowhere"})]
    r = schedule(cluster(2, "4", *objs), only=["gang"])
    pods = {p["name"]: p for p in r.to_dict()["pods"]}
    assert not any(p["phase"] == "Bound" for p in pods.values())
    assert pods["pod5-0"]["reason"].startswith(
        'GangGroup "gang-c-ns/gang-c,gang-d-ns/gang-d" gets rejected due to member Pod "gang-d-ns/pod5-3" is '
        'unschedulable with reason "0/2 nodes are available: 2 node(s) didn\'t match Pod\'s node affinity/selector.')
    assert r.scheduler.clock.now() - START < 10
    assert not r.scheduler.waiting_pods
