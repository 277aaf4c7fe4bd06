"""Fair queuing between gangs (issue 34 point 4): Koordinator's coscheduling QueueSort ``Less``
(``coscheduling.go`` before #2417: priority, sub-priority, the gang group's last schedule time, gang group
id, gang id, then the pod), ported from its ``TestLess`` and ``TestFairness``; expectations hand-derived."""

from __future__ import annotations

import json

from gang_testkit import GANG, cluster, pod
from koordfw_gang.plugin import Coscheduling

from koordfw import hookimpl
from koordfw.core.clock import VirtualClock
from koordfw.core.model import Pod, pod_from_manifest
from koordfw.testing import schedule

START = 1793491200.0  # T0 of gang_testkit.ts
QUEUE_SORT = {"plugins": {"queueSort": {"enabled": ["gang"], "disabled": ["*"]}}}


class _Handle:
    """What ``queue_sort`` reads of the handle: the clock (for pods without a creation time)."""

    def __init__(self) -> None:
        self.clock = VirtualClock(START + 1000)


def mk(name: str, *, t: float, priority: int = 0, labels: dict | None = None, ann: dict | None = None) -> Pod:
    return pod_from_manifest(pod(name, t=t, priority=priority, labels=labels, annotations=ann))


def less(cs: Coscheduling, a: Pod, b: Pod) -> bool:
    h = _Handle()
    return cs.queue_sort(a, h) < cs.queue_sort(b, h)  # type: ignore[arg-type]


def gang(name: str, groups: list[str] | None = None) -> dict:
    ann = {f"{GANG}/name": name, f"{GANG}/min-available": "2"}
    if groups:
        ann[f"{GANG}/groups"] = json.dumps(groups)
    return ann


def test_less_pod_priority():
    cs = Coscheduling("gang")
    low, high = mk("pod1", t=0, priority=10), mk("pod1b", t=0, priority=100)
    assert not less(cs, low, high) and less(cs, high, low)


def test_less_sub_priority():
    # equal priority: the koordinator.sh/priority label (GetPodSubPriority) decides, higher first
    cs = Coscheduling("gang")
    p1 = mk("pod1", t=0, priority=10, labels={"koordinator.sh/priority": "111"})
    p2 = mk("pod2", t=0, priority=10, labels={"koordinator.sh/priority": "222"})
    assert not less(cs, p1, p2) and less(cs, p2, p1)


def test_less_two_gangs_last_schedule_time():
    # gangB's pod was created first, so gangB's group is older: it goes first
    cs = Coscheduling("gang")
    p2 = mk("pod2", t=0, ann=gang("gangB"))
    p1 = mk("pod1", t=1, ann=gang("gangA"))
    assert not less(cs, p1, p2) and less(cs, p2, p1)


def test_less_gang_and_normal_pod_last_schedule_time():
    # the normal pod's queue time (1000 s earlier) is older than the gang's creation time
    cs = Coscheduling("gang")
    p1 = mk("pod1", t=0, ann=gang("gangA"))
    p2 = mk("pod2", t=-1000)
    assert not less(cs, p1, p2) and less(cs, p2, p1)


def test_less_gang_group_then_gang_id():
    # one group [gangA, gangB], same group time: gang id decides (gangA first), not creation order
    cs = Coscheduling("gang")
    groups = ["default/gangA", "default/gangB"]
    p1 = mk("pod1", t=0, ann=gang("gangB", groups))
    p2 = mk("pod2", t=0, ann=gang("gangA", groups))
    assert not less(cs, p1, p2) and less(cs, p2, p1)


def test_less_same_gang_pod_order():
    # same gang and time: Koordinator's child schedule cycle (equal here), then the pod name
    cs = Coscheduling("gang")
    p1 = mk("pod1", t=0, ann=gang("gangB"))
    p2 = mk("pod2", t=0, ann=gang("gangB"))
    assert less(cs, p1, p2) and not less(cs, p2, p1)


def test_less_members_of_a_gang_stay_together():
    # gang a (older) and b interleave their creation times: every a pod sorts before every b pod
    cs = Coscheduling("gang")
    a = [mk(f"a-{i}", t=2 * i, ann=gang("a")) for i in range(3)]
    b = [mk(f"b-{i}", t=2 * i + 1, ann=gang("b")) for i in range(3)]
    h = _Handle()
    order = sorted(a + b, key=lambda p: cs.queue_sort(p, h))  # type: ignore[arg-type]
    assert [p.name for p in order] == ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]


class FilterError:
    """TestFairness's injected filter error: pods labelled ``filterError=true`` fit nowhere."""

    @hookimpl
    def filter(self, pod: Pod, node: object) -> str | None:
        return "injected filter error" if pod.labels.get("filterError") == "true" else None


def test_fairness_failing_groups_do_not_starve_a_group_that_fits():
    # TestFairness: ten PodGroup gangs in four groups; one member of gang-c, gang-f and gang-j cannot be
    # placed, so groups a-b-c, f-g and h-i-j fail as a whole, each round rejected at once; d-e binds.
    # (Go injects the error at a random member and bounds d-e by a waiting count; here the member is the
    # last and the cluster has room for everything.)
    letters = "abcdefghij"
    groups = {"a": "abc", "b": "abc", "c": "abc", "d": "de", "e": "de", "f": "fg", "g": "fg", "h": "hij",
              "i": "hij", "j": "hij"}
    mins = [20, 10, 32, 20, 20, 18, 43, 20, 30, 20]
    erroring = {"c", "f", "j"}
    objs: list[dict] = []
    for k, (c, n) in enumerate(zip(letters, mins, strict=True)):
        name = f"gang-{c}"
        group = [f"default/gang-{x}" for x in groups[c]]
        objs.append({"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
                     "metadata": {"name": name, "namespace": "default",
                                  "annotations": {f"{GANG}/groups": json.dumps(group)}},
                     "spec": {"minMember": n, "scheduleTimeoutSeconds": 3600}})
        for j in range(n):
            labels = {"pod-group.scheduling.sigs.k8s.io": name}
            if c in erroring and j == n - 1:
                labels["filterError"] = "true"
            objs.append(pod(f"{name}-{j}", cpu="100m", t=(7 * k + 3 * j) % 50, labels=labels))
    r = schedule(cluster(4, "64", *objs), only=["gang"], plugins={"filter-error": FilterError()},
                 profile=QUEUE_SORT)
    d = r.to_dict()
    phase = {p["name"]: p["phase"] for p in d["pods"]}
    bound = {n.rsplit("-", 1)[0] for n, ph in phase.items() if ph == "Bound"}
    assert bound == {"gang-d", "gang-e"}
    assert sum(ph == "Bound" for ph in phase.values()) == 40
    rows = {g["gang"]: g for g in d["gangs"]}
    assert rows["default/gang-d"]["onceSatisfied"] and rows["default/gang-e"]["onceSatisfied"]
    assert all(g["waiting"] == 0 for g in rows.values())
    assert not r.scheduler.waiting_pods
    # failed rounds were rejected at once: nothing waited for the 3600 s scheduleTimeoutSeconds
    assert r.scheduler.clock.now() - START < 3600


def test_a_failed_group_goes_behind_a_younger_group_of_equal_priority():
    # Koordinator resets a gang group's LastScheduleTime when it is scheduled again: an older group that
    # failed no longer sorts first, so it cannot hold the head of the queue against younger groups
    old = [pod(f"old-{i}", t=0, annotations={f"{GANG}/name": "old", f"{GANG}/min-available": "2"},
               labels={"filterError": "true"} if i == 1 else None) for i in range(2)]
    young = [pod(f"young-{i}", t=60, annotations={f"{GANG}/name": "young", f"{GANG}/min-available": "2"})
             for i in range(2)]
    r = schedule(cluster(1, "4", *old, *young), only=["gang"], plugins={"filter-error": FilterError()},
                 profile=QUEUE_SORT)
    phase = {p["name"]: p["phase"] for p in r.to_dict()["pods"]}
    assert phase == {"old-0": "Pending", "old-1": "Pending", "young-0": "Bound", "young-1": "Bound"}
    cs = r.scheduler.registry.plugin("gang")
    h = _Handle()
    keys = {p.name: cs.queue_sort(p, h) for p in r.cluster.all_pods()}
    assert keys["old-0"][2] >= START + 60  # its group time moved from its creation (START) to its failure
    assert keys["young-0"] < keys["old-0"] and keys["young-1"] < keys["old-1"]
