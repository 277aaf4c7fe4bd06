"""koordlet's peak predictor tables (``pkg/koordlet/prediction/peak_predictor_test.go``:
TestProdReclaimablePredictor_AddPod, TestPodReclaimablePredictor, TestPodReclaimablePredictor_GetPeak,
Test_priorityReclaimablePredictor), with the same mock predictions and pods. By hand, for the first table
("node allocatable == pods' requests", allocatable 3000m / 3Gi, safety margin 10 %): pod-1 is in cold start
(1 minute old, window 1 hour), pod-3 is being deleted, so only pod-2 (2000m / 2Gi, p95 cpu 500m, p98 memory
1Gi) is predicted: per pod, reclaimable = 2000 - 500*1.1 = 1450m and 2Gi - 1.1Gi; per priority,
unReclaimable = (sys p95 300m + prod p95 1000m) * 1.1 = 1430m, (sys p98 512Mi + prod p98 1Gi) * 1.1, and
reclaimRequest = pod-1 + pod-2 = 3000m / 3Gi, so reclaimable = 3000 - 1430 = 1570m.
"""

from __future__ import annotations

import attrs
import pytest
from koordfw_prediction import (
    PodReclaimablePredictor,
    PredictionError,
    PriorityReclaimablePredictor,
    node_item_uid,
    prod_reclaimable_predictor,
)

from koordfw.inputs import make_pod

NOW = 1_800_000_000.0
HOUR = 3600.0
Mi, Gi = 2**20, 2**30


class Mock:
    """``mockPredictServer``: the map, else the default (None: the default error)."""

    def __init__(self, results: dict | None = None, default: dict | None = None) -> None:
        self.results, self.default = results or {}, default

    def get_prediction(self, uid: str):
        return self.results.get(uid, self.default)


def result(p95: tuple[int, int], p98: tuple[int, int]) -> dict:
    return {"p95": {"cpu": p95[0], "memory": p95[1]}, "p98": {"cpu": p98[0], "memory": p98[1]}}


ZERO = result((0, 0), (0, 0))
EMPTY: dict = {}  # Go's zero Result (no Data): every quantity reads as 0
TEST_PREDICTION = result((500, 512 * Mi), (800, 768 * Mi))


def pod(uid: str, cpu_m: int, mem: int, *, age: float, priority: int | None = 9000, deleted: bool = False,
        batch: bool = False):
    req = {"kubernetes.io/batch-cpu": str(cpu_m), "kubernetes.io/batch-memory": str(mem)} if batch else \
          {"cpu": f"{cpu_m}m", "memory": str(mem)}
    p = make_pod(uid, requests=req, priority=priority or 0)
    return attrs.evolve(p, uid=uid, creation_timestamp=NOW - age, deletion_timestamp=NOW if deleted else None)


SYS = result((300, 512 * Mi), (500, 512 * Mi))
PROD = result((1000, Gi), (1200, Gi))
POD = result((500, 768 * Mi), (1000, Gi))
POD1 = pod("pod-1-uid", 1000, Gi, age=60)  # cold start
POD2 = pod("pod-2-uid", 2000, 2 * Gi, age=2 * HOUR)
POD3 = pod("pod-3-uid", 2000, 2 * Gi, age=2 * HOUR, priority=None, deleted=True)
N1 = int(1.1 * Gi)
N2 = int(1.1 * 1536 * Mi)


@pytest.mark.parametrize(("name", "alloc", "want_pod", "want_priority"), [
    ("node allocatable == pods' requests", (3000, 3 * Gi), (2000 - 550, 2 * Gi - N1), (3000 - 1430, 3 * Gi - N2)),
    ("node allocatable > pods' requests", (8000, 8 * Gi), (2000 - 550, 2 * Gi - N1), (3000 - 1430, 3 * Gi - N2)),
    ("node allocatable < pods' requests", (1000, Gi), (1000 - 550, 0), (0, 0)),
])
def test_prod_reclaimable_predictor_add_pod(name, alloc, want_pod, want_priority):
    src = Mock({node_item_uid("koord-prod"): PROD, node_item_uid("koord-batch"): ZERO, node_item_uid("sys"): SYS,
                "pod-1-uid": POD, "pod-2-uid": POD, "pod-3-uid": ZERO}, default=EMPTY)
    pred = prod_reclaimable_predictor(src, {"cpu": alloc[0], "memory": alloc[1]}, NOW, HOUR, 10)
    assert len(pred.predictors) == 2
    for p in (POD1, POD2, POD3):
        pred.add_pod(p)
    got_pod, got_pri = pred.predictors[0].result(), pred.predictors[1].result()
    assert (got_pod["cpu"], got_pod["memory"]) == want_pod
    assert (got_pri["cpu"], got_pri["memory"]) == want_priority
    assert pred.result() == {r: min(got_pod[r], got_pri[r]) for r in ("cpu", "memory")}
    # the node peak is the maximum of the sub-predictors' peaks
    p0, p1 = pred.predictors[0].peak(), pred.predictors[1].peak()
    assert pred.peak() == {r: max(p0[r], p1[r]) for r in ("cpu", "memory")}


@pytest.mark.parametrize(("name", "alloc", "want"), [
    ("node allocatable > pods' requests", (3000, 3 * Gi), (2000 - 550, 2 * Gi - int(1.1 * 768 * Mi))),
    ("node allocatable < pods' requests", (1000, Gi), (1000 - 550, Gi - int(1.1 * 768 * Mi))),
])
def test_pod_reclaimable_predictor(name, alloc, want):
    pods = [pod("pod-1-uid", 1000, Gi, age=60), pod("pod-2-uid", 2000, 2 * Gi, age=2 * HOUR),
            pod("pod-3-uid", 2000, 2 * Gi, age=2 * HOUR, deleted=True),
            pod("pod-4-uid", 2000, 2 * Gi, age=2 * HOUR, priority=5000, batch=True)]
    pred = PodReclaimablePredictor(Mock(default=TEST_PREDICTION), {"cpu": alloc[0], "memory": alloc[1]}, NOW, HOUR, 10)
    for p in pods:
        pred.add_pod(p)
    assert (pred.result()["cpu"], pred.result()["memory"]) == want


def test_pod_reclaimable_predictor_get_peak():
    cold = pod("pod-cold-start-uid", 1000, Gi, age=60)
    normal = pod("pod-normal-uid", 2000, 2 * Gi, age=2 * HOUR)
    failed = pod("pod-predict-failed-uid", 500, 512 * Mi, age=2 * HOUR)
    pred = PodReclaimablePredictor(Mock({"pod-normal-uid": TEST_PREDICTION}, default=None), None, NOW, HOUR, 10)
    pred.add_pod(cold)
    pred.add_pod(normal)
    # a prediction failure is an error but its request counts into the peak
    with pytest.raises(PredictionError):
        pred.add_pod(failed)
    assert pred.peak() == {"cpu": 550 + 1000 + 500, "memory": int(1.1 * 768 * Mi) + Gi + 512 * Mi}


@pytest.mark.parametrize(("name", "alloc", "want"), [
    ("node allocatable > pods' requests", (3000, 3 * Gi), (1000 - (300 + 500), (2048 - (512 + 1024)) * Mi)),
    ("node allocatable < pods' requests", (900, Gi), (900 - (300 + 500), 0)),
])
def test_priority_reclaimable_predictor(name, alloc, want):
    sys = result((300, 512 * Mi), (500, 512 * Mi))
    prod = result((500, 768 * Mi), (800, Gi))
    batch = result((1000, Gi), (1500, 2048 * Mi))
    src = Mock({node_item_uid("koord-prod"): prod, node_item_uid("koord-batch"): batch, node_item_uid("sys"): sys,
                "pod-1-uid": prod, "pod-2-uid": batch}, default=EMPTY)
    pred = PriorityReclaimablePredictor(src, {"cpu": alloc[0], "memory": alloc[1]}, 0)
    pred.add_pod(pod("pod-1-uid", 1000, 2048 * Mi, age=60))
    pred.add_pod(pod("pod-2-uid", 2000, 2 * Gi, age=2 * HOUR, priority=5999, batch=True))
    got = pred.result()
    assert (got["cpu"], got["memory"]) == want


def test_a_pod_added_twice_is_an_error_and_no_node_is_an_error():
    pred = PodReclaimablePredictor(Mock(default=TEST_PREDICTION), None, NOW, HOUR, 10)
    pred.add_pod(POD2)
    with pytest.raises(PredictionError, match="already exist"):
        pred.add_pod(POD2)
    with pytest.raises(PredictionError, match="node is nil"):
        pred.result()


def test_without_the_sys_model_the_priority_predictor_fails():
    # before the first training koordlet reports prodReclaimableMetric {resource: {}} and no peak
    pred = prod_reclaimable_predictor(Mock(default=None), {"cpu": 1000, "memory": Gi}, NOW, HOUR, 10)
    with pytest.raises(PredictionError):
        pred.result()
    with pytest.raises(PredictionError):
        pred.peak()
