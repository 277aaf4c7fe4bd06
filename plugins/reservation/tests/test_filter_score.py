"""Table tests ported from Koordinator's reservation plugin tests (``plugin_test.go``
Test_filterWithReservations, TestFilter; ``scoring_test.go`` TestScore): the same nodes, reservations and
pods, and the statuses Koordinator expects, each run through a whole scheduling cycle.

Koordinator's table gives the node's requested with the reservation's reserve pod in it (``podRequested``);
here the same node carries a running pod of the rest. ``node_resources_fit``'s filter is switched off in
the filter table so that the reservation plugin's own reason is the one reported, as the Go test calls the
plugin's Filter alone.
"""

from __future__ import annotations

import pytest
from koordfw_reservation.api import reservation_from_manifest
from koordfw_reservation.plugin import score_reservation
from reservation_testkit import affinity, allocated_from, pod, reason, reservation, rows, run

NODE = {"cpu": "32", "memory": "32Gi", "pods": "100", "kubernetes.io/batch-cpu": "7500",
        "kubernetes.io/batch-memory": "10Gi"}
ONLY_RESERVATION_FILTER = {"plugins": {"filter": {"disabled": [{"name": "node_resources_fit"}]}}}
WEB = {"app": "web"}


def _node_extended() -> dict:
    """Koordinator's test node: 32 cpu, 32Gi, 100 pods, 7500 batch-cpu, 10Gi batch-memory."""
    return dict(NODE)


def _filler(cpu: str, memory: str = "24Gi", **extra: str) -> dict:
    return pod("filler", {"cpu": cpu, "memory": memory, **extra}, node="test-node")


# (name, other pods' requests on the node, reservation kwargs, allocated owner pods (cpu each),
#  the pod's requests, its annotations, expected node, expected reason)
FILTER_CASES = [
    ("filter aligned reservation with nodeInfo", {"cpu": "24"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Aligned"}, [], {"cpu": "8", "memory": "8Gi"}, affinity(),
     "test-node", ""),
    ("failed to filter aligned reservation with nodeInfo", {"cpu": "26"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Aligned"}, [], {"cpu": "8", "memory": "8Gi"}, affinity(),
     None, "Insufficient cpu by node"),
    ("filter restricted reservation with nodeInfo", {"cpu": "24"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Restricted"}, [], {"cpu": "6", "memory": "8Gi"}, {},
     "test-node", ""),
    ("filter restricted reservation with affinity", {"cpu": "24"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Restricted"}, [], {"cpu": "6", "memory": "8Gi"}, affinity(),
     "test-node", ""),
    ("filter restricted reservation with nodeInfo and matched requests are zero",
     {"cpu": "24", "kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "2Gi"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Restricted"}, [],
     {"kubernetes.io/batch-cpu": "6000", "kubernetes.io/batch-memory": "8Gi"}, affinity(), "test-node", ""),
    ("failed to filter restricted reservation with nodeInfo", {"cpu": "24"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Restricted"}, [], {"cpu": "8", "memory": "8Gi"}, affinity(),
     None, "Reservation(s) Insufficient cpu"),
    ("failed to filter restricted reservation since exceeding max pods", {"cpu": "23"},
     {"requests": {"cpu": "7", "pods": "2"}, "allocatePolicy": "Restricted", "allocateOnce": False}, ["1", "1"], {"cpu": "3"},
     affinity(), None, "Reservation(s) Too many pods"),
    ("failed to filter restricted reservation since unmatched resources are insufficient",
     {"cpu": "24", "kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "2Gi"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Restricted"}, [],
     {"kubernetes.io/batch-cpu": "8000", "kubernetes.io/batch-memory": "8Gi"}, affinity(), None,
     "Insufficient kubernetes.io/batch-cpu by node"),
    ("filter restricted reservation and ignore matched requests are zero without affinity",
     {"cpu": "24", "kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "2Gi"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Restricted"}, [],
     {"kubernetes.io/batch-cpu": "8000", "kubernetes.io/batch-memory": "8Gi"}, {}, None,
     "Insufficient kubernetes.io/batch-cpu by node"),
    ("failed to filter restricted reservation with reservation name since exceeding max pods", {"cpu": "23"},
     {"requests": {"cpu": "7", "pods": "2"}, "allocatePolicy": "Restricted", "allocateOnce": False}, ["1", "1"], {"cpu": "3"},
     affinity(name="test-r"), None, "Reservation(s) Too many pods, requested: 1, used: 2, capacity: 2"),
    ("failed to filter restricted reservation with name since insufficient resource", {"cpu": "23"},
     {"requests": {"cpu": "6"}, "allocatePolicy": "Restricted", "allocateOnce": False}, ["1"], {"cpu": "6"},
     affinity(name="test-r"), None, "Reservation(s) Insufficient cpu, requested: 6000, used: 1000, capacity: 6000"),
]


@pytest.mark.parametrize("case", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filter_with_reservations(case):
    _, others, rkw, owners, requests, annotations, want_node, want_reason = case
    rkw = dict(rkw)
    r = reservation("test-r", rkw.pop("requests"), node="test-node", **rkw)
    objs = [r, _filler(others.pop("cpu"), **others)]
    objs += [pod(f"owner-{i}", {"cpu": c}, labels=WEB, node="test-node", annotations=allocated_from("test-r"))
             for i, c in enumerate(owners)]
    objs.append(pod("p", requests, labels=WEB, annotations=annotations))
    res = run(*objs, nodes={"test-node": _node_extended()}, profile=ONLY_RESERVATION_FILTER)
    assert res.placements()["default/p"] == want_node
    if want_node is None:
        assert reason(res, "default/p") == f"0/1 nodes are available: 1 {want_reason}."
    elif rkw.get("allocatePolicy") or annotations:
        assert "default/p" in rows(res)["test-r"]["owners"]


def test_filter_reserve_pod_on_the_node_its_template_names():
    """TestFilter "failed with not matched reservation node": a reserve pod only fits the template's nodeName."""
    r = reservation("r", {"cpu": "1"}, template_spec={"nodeName": "n2"})
    res = run(r, nodes={"n1": {}, "n2": {}})
    assert rows(res)["r"]["node"] == "n2"
    r = reservation("r", {"cpu": "1"}, template_spec={"nodeName": "n3"})
    res = run(r, nodes={"n1": {}, "n2": {}})
    assert rows(res)["r"]["phase"] == "Pending"


def test_filter_allocate_policy_conflict():
    """TestFilter: the default allocate policy cannot share a node with an Aligned or Restricted reservation."""
    placed = reservation("placed", {"cpu": "1"}, node="n1", allocatePolicy="Aligned")
    new = reservation("new", {"cpu": "1"})
    res = run(placed, new)
    assert rows(res)["new"]["phase"] == "Pending"
    res = run(placed, reservation("new", {"cpu": "1"}, allocatePolicy="Restricted"))
    assert rows(res)["new"]["node"] == "n1"


def test_pre_filter_affinity_without_matching_reservation_is_unresolvable():
    """TestPreFilter: a pod with a reservation affinity and no matching reservation fails pre_filter."""
    res = run(pod("p", {"cpu": "1"}, labels=WEB, annotations=affinity(name="nope")),
              reservation("r", {"cpu": "2"}, node="n1"))
    assert res.placements()["default/p"] is None
    assert reason(res, "default/p") == "node(s) no reservations match reservation affinity"


def _r(name: str, cpu: str, mem: str, allocated: dict | None = None):
    obj = reservation(name, {"cpu": cpu, "memory": mem}, node="test-node")
    if allocated:
        obj["status"]["allocated"] = allocated
    return reservation_from_manifest(obj)


# TestScore: (name, pod requests, reservations on the node, expected score)
SCORE_CASES = [
    ("reservation matched but zero-request pod", {}, [_r("r2c4g", "2", "4Gi")], 0),
    ("reservation matched and pod has part empty resource requests", {"cpu": 2000, "memory": 4 << 30},
     [_r("r4c8g", "4", "8Gi")], 50),
    ("allocated reservation matched and pod has part empty resource requests", {"cpu": 2000, "memory": 4 << 30},
     [_r("r2c4g", "2", "4Gi", {"cpu": "2", "memory": "3Gi"})], 0),
    ("multi reservations matched and pod has part empty resource requests", {"cpu": 2000, "memory": 4 << 30},
     [_r("r4c8g", "4", "8Gi"), _r("r2c4g", "2", "4Gi")], 100),
]


@pytest.mark.parametrize("case", SCORE_CASES, ids=[c[0] for c in SCORE_CASES])
def test_score_reservation(case):
    _, requests, rs, want = case
    # the nominated reservation is the best scoring one on the node (NominateReservation)
    assert max(score_reservation(requests, r) for r in rs) == want


def test_score_prefers_the_node_with_a_matching_reservation():
    """TestScore / TestScoreWithOrder: among nodes with room, the owner goes where its reservation is;
    with several, the lowest reservation-order wins."""
    objs = [reservation("r1", {"cpu": "2"}, node="n2"), reservation("r2", {"cpu": "2"}, node="n3"),
            pod("web", {"cpu": "2"}, labels=WEB)]
    res = run(*objs, nodes={"n1": {}, "n2": {}, "n3": {}})
    assert res.placements()["default/web"] in ("n2", "n3")
    objs[1]["metadata"]["labels"] = {"scheduling.koordinator.sh/reservation-order": "1"}
    objs[0]["metadata"]["labels"] = {"scheduling.koordinator.sh/reservation-order": "2"}
    for seed in range(4):
        res = run(*objs, nodes={"n1": {}, "n2": {}, "n3": {}}, seed=seed)
        assert res.placements()["default/web"] == "n3"
        assert rows(res)["r2"]["owners"] == ["default/web"]
