"""Koordinator's coscheduling ``TestPreBind`` (``coscheduling_test.go``) and ``GetGangBindingInfo``: the
``bind-gang-group-id`` / ``bind-gang-member-count`` annotations come from the member set AllowGangGroup allowed
together (the binding snapshot), kept through the binding cycle, through the embedded engine."""

from __future__ import annotations

from gang_testkit import cluster, pod

from koordfw import Status, hookimpl
from koordfw.testing import schedule

BIND_GROUP = "internal.scheduling.koordinator.sh/bind-gang-group-id"
BIND_COUNT = "internal.scheduling.koordinator.sh/bind-gang-member-count"
PG = "pod-group.scheduling.sigs.k8s.io"


def pod_group(name: str, ns: str, min_member: int) -> dict:
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 30}}


def annotations(r) -> dict[str, tuple[str | None, str | None]]:
    return {p["name"]: (p["annotations"].get(BIND_GROUP), p["annotations"].get(BIND_COUNT))
            for p in r.to_dict()["pods"] if p["phase"] == "Bound"}


def test_gang_satisfied_sets_the_annotations_and_a_pod_without_a_gang_gets_none():
    # "gang satisfied, should set labels on pod"; "pod not in gang, should not set labels"
    objs = [pod_group("gang-a", "gang-a-ns", 2), pod("pod-1", ns="gang-a-ns", labels={PG: "gang-a"}),
            pod("pod-2", ns="gang-a-ns", labels={PG: "gang-a"}, t=1), pod("pod-3", ns="ns1", t=2)]
    got = annotations(schedule(cluster(2, "4", *objs), only=["gang"]))
    assert got == {"pod-1": ("gang-a-ns/gang-a", "2"), "pod-2": ("gang-a-ns/gang-a", "2"), "pod-3": (None, None)}


def test_oversubscribed_gang_members_of_the_snapshot_agree_and_the_late_one_gets_none():
    # "gang oversub: min=2, total=3, all pods should get consistent memberCount=2": the two allowed together
    # carry count 2; the third, allowed alone once the gang passed, is in no snapshot (GetGangBindingInfo nil)
    objs = [pod_group("gang-o", "gang-o-ns", 2),
            *[pod(f"pod-oversub-{i}", ns="gang-o-ns", labels={PG: "gang-o"}, t=i) for i in range(1, 4)]]
    got = annotations(schedule(cluster(2, "4", *objs), only=["gang"]))
    assert got == {"pod-oversub-1": ("gang-o-ns/gang-o", "2"), "pod-oversub-2": ("gang-o-ns/gang-o", "2"),
                   "pod-oversub-3": (None, None)}


class FailFirstBind:
    """A pre_bind plugin that fails ``pod-retry``'s first binding cycle (a volume or device not ready yet)."""

    def __init__(self) -> None:
        self.failed = False

    @hookimpl
    def pre_bind(self, pod):
        if pod.name == "pod-retry" and not self.failed:
            self.failed = True
            return Status.error("device not ready")
        return None


def test_a_member_retried_after_its_binding_failed_keeps_the_snapshot():
    # "gang OnceSatisfied with retry pod": the retried member was in the snapshot: it is bound with the
    # group's id and count 2, as its partner was
    objs = [pod_group("gang-r", "gang-r-ns", 2), pod("pod-bound-1", ns="gang-r-ns", labels={PG: "gang-r"}),
            pod("pod-retry", ns="gang-r-ns", labels={PG: "gang-r"}, t=1)]
    objs[0]["metadata"]["annotations"] = {"gang.scheduling.koordinator.sh/mode": "NonStrict"}
    flaky = FailFirstBind()
    r = schedule(cluster(2, "4", *objs), only=["gang"], plugins={"flaky": flaky})
    assert flaky.failed
    got = annotations(r)
    assert got == {"pod-bound-1": ("gang-r-ns/gang-r", "2"), "pod-retry": ("gang-r-ns/gang-r", "2")}, got
