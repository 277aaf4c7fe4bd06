"""Why is my job pending: one message per gang group naming its binding constraint (``jobs`` in simulate,
the PodGroup's ``Unschedulable`` condition and an Event)."""

from __future__ import annotations

import pytest
from gang_testkit import cluster, gang_pods, pod
from koordfw_gang.pending import (
    GANG_SIZE,
    PREEMPTION_NOT_ALLOWED,
    QUOTA,
    RESOURCES,
    classify,
)

from koordfw import Pod, Status
from koordfw.testing import schedule

QUOTA_NAME = "quota.scheduling.koordinator.sh/name"


def jobs(r) -> dict[str, dict]:
    return {row["job"]: row for row in r.extra.get("jobs", [])}


def test_gang_size_names_the_missing_members():
    r = schedule(cluster(2, "8").obj(*gang_pods("g", 2, min_available=3)), only=("gang",))
    row = jobs(r)["default/g"]
    assert row["constraint"] == GANG_SIZE and (row["bound"], row["minMember"]) == (0, 3)
    assert row["message"] == "GangGroup default/g: 0/3 members bound; gang default/g has 2 of the 3 pods of its minMember"


def test_resources_one_message_for_the_whole_job():
    r = schedule(cluster(2, "4").obj(*gang_pods("g", 3, cpu="3")), only=("gang",))
    assert list(jobs(r)) == ["default/g"]
    row = jobs(r)["default/g"]
    assert row["constraint"] == RESOURCES
    assert "Insufficient cpu" in row["message"] and row["message"].startswith("GangGroup default/g: 0/3 members bound")


def test_preemption_not_allowed_when_the_members_may_not_preempt():
    pods = gang_pods("g", 2, cpu="3")
    for p in pods:
        p["spec"]["preemptionPolicy"] = "Never"
        p["spec"]["priority"] = 100
    b = cluster(2, "4").obj(pod("low-0", cpu="2", node="n0"), pod("low-1", cpu="2", node="n1"), *pods)
    row = jobs(schedule(b, only=("gang",)))["default/g"]
    assert row["constraint"] == PREEMPTION_NOT_ALLOWED


def test_quota_is_the_binding_constraint():
    quota = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
             "metadata": {"name": "team", "namespace": "default"},
             "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}}}
    pods = gang_pods("g", 3, cpu="1")
    for p in pods:
        p["metadata"]["labels"][QUOTA_NAME] = "team"
    r = schedule(cluster(2, "8").obj(quota, *pods), only=("gang", "elastic_quota"))
    row = jobs(r)["default/g"]
    assert row["constraint"] == QUOTA and "quota team" in row["message"]


def test_a_bound_job_has_no_row():
    r = schedule(cluster(2, "8").obj(*gang_pods("g", 3, cpu="1")), only=("gang",))
    assert "jobs" not in r.extra


def test_the_pod_group_carries_the_message_and_an_event():
    pg = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 2}}
    members = [pod(f"train-{i}", cpu="6", labels={"pod-group.scheduling.sigs.k8s.io": "train"}) for i in range(2)]
    r = schedule(cluster(1, "8").obj(pg, *members), only=("gang",))
    status = r.cluster.view.get_object("PodGroup", "default/train")["status"]
    message = jobs(r)["default/train"]["message"]
    assert status["phase"] == "Pending" and status["scheduled"] == 0
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == \
        ("Unschedulable", "True", RESOURCES, message)
    events = [e for e in r.scheduler.recorder.events if e.regarding == "PodGroup default/train"]
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "Unschedulable", message)]


@pytest.mark.parametrize("message, plugin, want", [
    ('GangGroup "d/g" gets rejected due to member Pod "d/g-0" is unschedulable with reason "x"', "gang", None),
    ("gangGroup d/g is scheduling and this pod waits until its members have been attempted", "gang", None),
    ("gangGroup [d/g] basic check: memberGangs [d/g] child pod not collect enough, current gang: d/g", "gang",
     GANG_SIZE),
    ("Insufficient quota team: cpu used 2 + request 1 > max 2", "elastic_quota", QUOTA),
    ("0/3 nodes are available: 3 Insufficient cpu.", None, RESOURCES),
])
def test_classify(message, plugin, want):
    assert classify(Pod("p"), Status.unschedulable(message, plugin=plugin) if plugin else
                    Status.unschedulable(message)) == want



def test_a_stale_gang_size_cause_gives_way_once_the_gang_is_complete():
    """A member gated while its PodGroup was not yet seen (GangSize), then rejected only as an echo of another
    member's failure: once the gang is defined with all its members, the job names the real failure."""
    pg = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 2}}
    members = [pod(f"train-{i}", cpu="6", labels={"pod-group.scheduling.sigs.k8s.io": "train"}) for i in range(2)]
    r = schedule(cluster(1, "8").obj(pg, *members), only=("gang",))
    gang = r.scheduler.registry.plugin("gang")
    stale = r.cluster.pod_by_key("default/train-0")  # rejected only as train-1's echo
    gang._pending.record(stale, Status.unresolvable('Gang "default/train" not found: no PodGroup default/train',
                                                    plugin="gang"))
    (row,) = gang._pending.rows([[gang._gangs["default/train"]]], r.scheduler.handle_for("gang"))
    assert row["constraint"] == RESOURCES, row
