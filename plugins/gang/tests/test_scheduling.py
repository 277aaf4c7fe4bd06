"""Scenario tables through the embedded scheduler (virtual clock): pre_enqueue, permit per match policy
and gang group, Strict vs NonStrict, timeouts, once-satisfied, PodGroups, contiguity, PreBind annotations."""

from __future__ import annotations

import pytest
from gang_testkit import cluster, gang_ann, gang_pods, pod

from koordfw import hookimpl
from koordfw.testing import schedule

START = 1793491200.0  # T0 of gang_testkit.ts

BIND_GROUP = "internal.scheduling.koordinator.sh/bind-gang-group-id"
BIND_COUNT = "internal.scheduling.koordinator.sh/bind-gang-member-count"


def run(b, **kw):
    r = schedule(b, only=["gang"], **kw)
    d = r.to_dict()
    return r, {p["name"]: p for p in d["pods"]}, {g["gang"]: g for g in d.get("gangs", [])}


class Hold:
    """A test plugin keeping pods labelled ``hold=yes`` out of the queue."""

    @hookimpl
    def pre_enqueue(self, pod):
        return "held by the test" if pod.labels.get("hold") == "yes" else None


def bound(pods, prefix):
    return sorted(n for n, p in pods.items() if n.startswith(prefix) and p["phase"] == "Bound")


def test_gang_fits_and_binds_together_with_prebind_annotations():
    _, pods, gangs = run(cluster(2, "4", *gang_pods("job", 6)))
    assert bound(pods, "job") == [f"job-{i}" for i in range(6)]
    ann = pods["job-0"]["annotations"]
    assert ann[BIND_GROUP] == "default/job" and ann[BIND_COUNT] == "6"
    assert ann["scheduling.koordinator.sh/bind-gang-group-id"] == "default/job"
    assert ann["scheduling.koordinator.sh/bind-gang-member-count"] == "6"
    assert gangs["default/job"]["phase"] == "Satisfied"


def test_pre_enqueue_holds_gang_with_too_few_members():
    _, pods, gangs = run(cluster(2, "4", *gang_pods("job", 2, 3)))
    assert bound(pods, "job") == []
    assert pods["job-0"]["reason"] == ("gangGroup [default/job] basic check: memberGangs [default/job] child pod "
                                       "not collect enough, current gang: default/job, podName: default/job-0")
    assert gangs["default/job"]["phase"] == "Pending"


def test_gang_without_min_available_is_not_initialized():
    p = pod("lone", annotations={"gang.scheduling.koordinator.sh/name": "g"})
    _, pods, gangs = run(cluster(1, "4", p))
    assert pods["lone"]["phase"] == "Pending"
    assert "has not initialized" in pods["lone"]["reason"] and "min-available" in pods["lone"]["reason"]
    assert gangs["default/g"]["phase"] == "NotInitialized"


def test_pod_group_gang_and_missing_pod_group():
    pg = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "train", "namespace": "ml"}, "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60}}
    members = [pod(f"train-{i}", ns="ml", labels={"pod-group.scheduling.sigs.k8s.io": "train"}) for i in range(3)]
    orphan = pod("orphan", ns="ml", labels={"pod-group.scheduling.sigs.k8s.io": "nope"})
    _, pods, gangs = run(cluster(1, "4", pg, *members, orphan))
    assert bound(pods, "train") == ["train-0", "train-1", "train-2"]
    assert pods["orphan"]["phase"] == "Pending"
    assert pods["orphan"]["reason"].startswith('Gang "ml/nope" not found')


def test_strict_member_failure_releases_everything():
    # 3 CPUs for a gang of 4: three members reserve, the fourth fails, all three are rejected
    r, pods, gangs = run(cluster(1, "3", *gang_pods("job", 4)))
    assert bound(pods, "job") == []
    assert gangs["default/job"]["phase"] == "Pending" and gangs["default/job"]["waiting"] == 0
    assert r.cluster.summary_row(r.cluster.nodes[0])["requested"].get("cpu", 0) == 0
    assert "gets rejected due to member Pod" in pods["job-1"]["reason"]


def holder_and_subject(mode: str):
    """``holder`` (NonStrict, its third member fits nowhere) holds 2 of 4 CPUs for 30 s, so ``subject``
    (min 3) places two members and its third fails until the holder times out."""
    holder = [pod(f"holder-{i}", t=0, annotations=gang_ann("holder", 3, mode="NonStrict", waiting_time="30s"),
                  node_selector={"zone": "nowhere"} if i == 2 else None) for i in range(3)]
    subject = gang_pods("subject", 3, t=10, mode=mode, waiting_time="600s")
    return cluster(1, "4", *holder, *subject)


@pytest.mark.parametrize("mode,kept", [("NonStrict", True), ("Strict", False)])
def test_strict_vs_nonstrict_on_member_failure(mode, kept):
    r, pods, gangs = run(holder_and_subject(mode))
    assert bound(pods, "holder") == []
    assert pods["holder-0"]["reason"].startswith("rejected due to timeout after waiting 30s at plugin gang")
    assert bound(pods, "subject") == ["subject-0", "subject-1", "subject-2"]
    # NonStrict kept the two placed members waiting; Strict released and retried them
    attempts = {p.name: r.engine.attempt_counts[p.uid] for p in r.cluster.all_pods()}
    assert (attempts["subject-0"] == 1) is kept
    assert attempts["subject-2"] >= 2
    assert r.scheduler.clock.now() - START >= 30


def test_timeout_releases_strict_reservation():
    # the second member never reaches the queue: the first waits 45 s at permit, then lets go
    members = [pod("job-0", annotations=gang_ann("job", 2, waiting_time="45s")),
               pod("job-1", annotations=gang_ann("job", 2, waiting_time="45s"), labels={"hold": "yes"})]
    r, pods, gangs = run(cluster(1, "4", *members), plugins={"hold": Hold})
    assert pods["job-0"]["phase"] == "Pending"
    assert pods["job-0"]["reason"] == "rejected due to timeout after waiting 45s at plugin gang"
    assert r.scheduler.clock.now() - START == pytest.approx(45)
    assert r.cluster.summary_row(r.cluster.nodes[0])["requested"].get("cpu", 0) == 0
    assert not r.scheduler.waiting_pods


@pytest.mark.parametrize("policy,late_binds", [("once-satisfied", True), ("only-waiting", False),
                                               ("waiting-and-running", False)])
def test_late_member_of_satisfied_gang(policy, late_binds):
    # two members already run; min-available 4; one late member arrives (3 children < 4)
    ann = gang_ann("job", 4, match_policy=policy)
    running = [pod(f"job-{i}", annotations=ann, node="n0") for i in range(2)]
    late = pod("job-late", annotations=ann, t=100)
    _, pods, gangs = run(cluster(1, "8", *running, late))
    assert (pods["job-late"]["phase"] == "Bound") is late_binds
    if not late_binds:
        assert "child pod not collect enough" in pods["job-late"]["reason"]
    assert pods["job-late"]["annotations"].get(BIND_GROUP) is None


def test_waiting_and_running_counts_bound_members():
    ann = gang_ann("job", 3, match_policy="waiting-and-running")
    running = [pod(f"job-{i}", annotations=ann, node="n0") for i in range(2)]
    late = [pod(f"job-{i}", annotations=ann, t=100) for i in (2, 3)]
    _, pods, _ = run(cluster(1, "8", *running, *late))
    assert bound(pods, "job") == ["job-0", "job-1", "job-2", "job-3"]


def test_gang_group_across_namespaces_binds_together():
    groups = '["team-a/trainer","team-b/ps"]'
    a = gang_pods("trainer", 3, ns="team-a", groups=groups)
    b = gang_pods("ps", 2, ns="team-b", t=50, groups=groups)
    _, pods, gangs = run(cluster(2, "4", *a, *b))
    assert len(bound(pods, "")) == 5
    assert {pods[n]["annotations"][BIND_GROUP] for n in pods} == {"team-a/trainer,team-b/ps"}
    assert {pods[n]["annotations"][BIND_COUNT] for n in pods} == {"5"}
    assert gangs["team-a/trainer"]["group"] == "team-a/trainer,team-b/ps"


def test_gang_group_fails_as_a_whole():
    # capacity 4 for a group of 5: the trainer gang fits alone but the group does not
    groups = '["team-a/trainer","team-b/ps"]'
    a = gang_pods("trainer", 3, ns="team-a", groups=groups)
    b = gang_pods("ps", 2, ns="team-b", t=50, groups=groups)
    r, pods, gangs = run(cluster(1, "4", *a, *b))
    assert bound(pods, "") == []
    assert r.cluster.summary_row(r.cluster.nodes[0])["requested"].get("cpu", 0) == 0


def test_gang_group_waits_for_every_member_gang():
    groups = '["team-a/trainer","team-b/ps"]'
    a = gang_pods("trainer", 3, ns="team-a", groups=groups)
    b = gang_pods("ps", 1, 2, ns="team-b", groups=groups)  # one of two ps pods exists
    _, pods, _ = run(cluster(2, "4", *a, *b))
    assert bound(pods, "") == []
    assert pods["trainer-0"]["reason"].startswith(
        "gangGroup [team-a/trainer,team-b/ps] basic check: memberGangs [team-b/ps] child pod not collect enough")


@pytest.mark.parametrize("profile", [None, {"plugins": {"queueSort": {"enabled": ["gang"], "disabled": ["*"]}}}])
def test_interleaved_arrivals_do_not_deadlock(profile):
    # a's and b's pods arrive alternately; the cluster fits one gang of 8
    a = gang_pods("a", 8, t=0, step=2)
    b = gang_pods("b", 8, t=1, step=2)
    r, pods, gangs = run(cluster(2, "4", *a, *b), profile=profile)
    assert bound(pods, "a-") == [f"a-{i}" for i in range(8)]
    assert bound(pods, "b-") == []
    assert gangs["default/b"]["waiting"] == 0
    if profile is not None:  # with gang's queue order, nothing had to be set aside
        assert all(r.engine.attempt_counts[p.uid] == 1 for p in r.cluster.all_pods() if p.name.startswith("a-"))


def test_unsatisfiable_gang_does_not_block_an_interleaved_one():
    a = [pod(f"a-{i}", t=2 * i, annotations=gang_ann("a", 8), node_selector={"zone": "nowhere"}) for i in range(8)]
    b = gang_pods("b", 8, t=1, step=2)
    r, pods, _ = run(cluster(2, "4", *a, *b))
    assert bound(pods, "b-") == [f"b-{i}" for i in range(8)]
    assert r.scheduler.clock.now() - START < 600  # no permit timeout was needed


def test_pods_without_gangs_are_unaffected():
    plain = [pod(f"p{i}", cpu="700m", t=i % 3, priority=i % 2) for i in range(12)]
    with_gang = schedule(cluster(3, "2", *plain), only=["gang"]).placements()
    without = schedule(cluster(3, "2", *plain), only=[]).placements()
    assert with_gang == without
