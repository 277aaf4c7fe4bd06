"""koordlet's Prod reclaimable predictor (``pkg/koordlet/prediction/peak_predictor.go``).

The ``ProdReclaimablePredictor`` is the minimum of two predictors (``minPredictor``), each given every pod
of the node (``AddPod``) then asked for a result (reclaimable) and a peak:

* **per pod** (``podReclaimablePredictor``), for Prod pods (priority class koord-prod or none): a pod
  younger than ``coldStartDuration`` counts its requests as *unpredicted*; a deleted or terminated pod
  counts nothing; a pod without a model counts its requests as unpredicted (an error, logged); otherwise
  its peak is ``p95`` cpu and ``p98`` memory of its model times ``(100 + safetyMarginPercent) / 100``:
  ``unReclaimable += peak``, ``reclaimable += request - peak`` when positive. Result:
  ``min(max(allocatable - unReclaimable, 0), reclaimable)``; peak: ``unReclaimable + unpredicted``.
* **per priority** (``priorityReclaimablePredictor``): ``reclaimRequest`` is the requests of the Prod pods
  that are not deleted or terminated; ``unReclaimable`` is ``(sys + Σ Prod priority classes)``'s model
  (``p95`` cpu, ``p98`` memory) times the safety ratio. Result: ``min(max(allocatable - unReclaimable, 0),
  max(reclaimRequest - unReclaimable, 0))``; peak: ``unReclaimable``.

The node's result is the per-resource minimum of the two results, its peak the maximum of the two peaks.
``allocatable`` is the node's raw allocatable (``node.koordinator.sh/raw-allocatable``) when present, else
its ``status.allocatable``. Amounts: cpu milli-cores, memory bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from koordfw.extension import PRIORITY_NONE, PRIORITY_PROD

log = structlog.get_logger("koordfw.prediction")

CPU, MEMORY = "cpu", "memory"
RESOURCES = (CPU, MEMORY)
Res = dict[str, int]
#: a model's prediction: ``{"p60" | "p90" | "p95" | "p98" | "max": {"cpu": milli, "memory": bytes}}``
Result = Mapping[str, Mapping[str, int]]

#: ``extension.KnownPriorityClasses``
KNOWN_PRIORITY_CLASSES = ("koord-prod", "koord-mid", "koord-batch", "koord-free", "")
#: ``DefaultNodeID`` / ``getNodeItemUID``: the models of the node and of its items
NODE_UID = "__node__"
SYSTEM_ITEM_ID = "sys"
ALL_PODS_ITEM_ID = "all-pods"


def node_item_uid(item: str) -> str:
    return f"__node-{item}__"


class PredictionSource(Protocol):
    """What the predictors read (``PredictServer.GetPrediction``): ``None`` when there is no model."""

    def get_prediction(self, uid: str) -> Result | None: ...


class PredictionError(Exception):
    """``GetPrediction`` failed (no model for a UID the predictor needs)."""


def is_prod(priority_class: str) -> bool:
    """``isPriorityClassReclaimableForProd``."""
    return priority_class in (PRIORITY_PROD, PRIORITY_NONE)


def _zero() -> Res:
    return {CPU: 0, MEMORY: 0}


def _scale(v: int, ratio: float) -> int:
    # MultiplyMilliQuant / MultiplyQuant: int64(float64(v) * ratio)
    return int(float(v) * ratio)


def _get(result: Result, key: str, resource: str) -> int:
    return int((result.get(key) or {}).get(resource, 0))


def _has(result: Result, key: str, resource: str) -> bool:
    return resource in (result.get(key) or {})


def _requests(pod: Any) -> Res:
    req = pod.requests
    return {CPU: int(req.get(CPU, 0)), MEMORY: int(req.get(MEMORY, 0))}


def _gone(pod: Any) -> bool:
    """``pod.DeletionTimestamp != nil || IsPodTerminated(pod)``."""
    return pod.deletion_timestamp is not None or pod.phase in ("Succeeded", "Failed")


class PodReclaimablePredictor:
    name = "podReclaimablePredictor"

    def __init__(self, source: PredictionSource, allocatable: Mapping[str, int] | None, now: float,
                 cold_start_seconds: float, safety_margin_percent: int,
                 pod_filter: Callable[[Any], bool] = lambda p: is_prod(p.priority_class_with_default)) -> None:
        self.source, self.allocatable, self.now = source, allocatable, now
        self.cold_start, self.safety = cold_start_seconds, safety_margin_percent
        self.pod_filter = pod_filter
        self.reclaimable, self.unreclaimable, self.unpredicted = _zero(), _zero(), _zero()
        self.pods: set[str] = set()

    def add_pod(self, pod: Any) -> None:
        if not self.pod_filter(pod):
            return
        if pod.uid in self.pods:
            raise PredictionError(f"pod {pod.namespace}/{pod.name} already exist in the pod reclaimable predictor")
        self.pods.add(pod.uid)
        created = pod.creation_timestamp
        # time.Since(creation) <= coldStartDuration (a pod without a creation time is as new as now)
        if created is None or self.now - created <= self.cold_start:
            self._add(self.unpredicted, _requests(pod))
            return
        if _gone(pod):
            return
        result = self.source.get_prediction(pod.uid)
        if result is None:
            self._add(self.unpredicted, _requests(pod))
            raise PredictionError(f"UID {pod.uid} not found in predict server")
        req = _requests(pod)
        ratio = float(100 + self.safety) / 100
        rec_cpu = rec_mem = unrec_cpu = unrec_mem = 0
        if _has(result, "p95", CPU):
            peak = _scale(_get(result, "p95", CPU), ratio)
            unrec_cpu, rec_cpu = peak, req[CPU] - peak
        if _has(result, "p98", MEMORY):
            peak = _scale(_get(result, "p98", MEMORY), ratio)
            unrec_mem, rec_mem = peak, req[MEMORY] - peak
        self.unreclaimable[CPU] += unrec_cpu
        self.unreclaimable[MEMORY] += unrec_mem
        if rec_cpu > 0:
            self.reclaimable[CPU] += rec_cpu
        if rec_mem > 0:
            self.reclaimable[MEMORY] += rec_mem

    @staticmethod
    def _add(a: Res, b: Mapping[str, int]) -> None:
        for r in RESOURCES:
            a[r] += b.get(r, 0)

    def result(self) -> Res:
        if self.allocatable is None:
            raise PredictionError("failed to get podReclaimablePredictor result for node is nil")
        return {r: min(max(self.allocatable.get(r, 0) - self.unreclaimable[r], 0), self.reclaimable[r])
                for r in RESOURCES}

    def peak(self) -> Res:
        return {r: self.unreclaimable[r] + self.unpredicted[r] for r in RESOURCES}


class PriorityReclaimablePredictor:
    name = "priorityReclaimablePredictor"

    def __init__(self, source: PredictionSource, allocatable: Mapping[str, int] | None, safety_margin_percent: int,
                 class_filter: Callable[[str], bool] = is_prod) -> None:
        self.source, self.allocatable, self.safety = source, allocatable, safety_margin_percent
        self.class_filter = class_filter
        self.reclaim_request = _zero()

    def add_pod(self, pod: Any) -> None:
        if not self.class_filter(pod.priority_class_with_default) or _gone(pod):
            return
        for r, v in _requests(pod).items():
            self.reclaim_request[r] += v

    def _unreclaimable(self) -> Res:
        sys = self.source.get_prediction(node_item_uid(SYSTEM_ITEM_ID))
        if sys is None:
            raise PredictionError("failed to get prediction of sys")
        out = {CPU: _get(sys, "p95", CPU), MEMORY: _get(sys, "p98", MEMORY)}
        for pc in KNOWN_PRIORITY_CLASSES:
            if not self.class_filter(pc):
                continue
            res = self.source.get_prediction(node_item_uid(pc))
            if res is None:
                raise PredictionError(f"failed to get prediction of priority {pc}")
            out[CPU] += _get(res, "p95", CPU)
            out[MEMORY] += _get(res, "p98", MEMORY)
        ratio = float(100 + self.safety) / 100
        return {CPU: _scale(out[CPU], ratio), MEMORY: _scale(out[MEMORY], ratio)}

    def result(self) -> Res:
        if self.allocatable is None:
            raise PredictionError("failed to get priorityReclaimablePredictor result for node is nil")
        unrec = self._unreclaimable()
        reclaimable = {r: max(self.reclaim_request[r] - unrec[r], 0) for r in RESOURCES}
        return {r: min(max(self.allocatable.get(r, 0) - unrec[r], 0), reclaimable[r]) for r in RESOURCES}

    def peak(self) -> Res:
        return self._unreclaimable()


class MinPredictor:
    """``minPredictor``: the minimum of the results, the maximum of the peaks."""

    name = "minPredictor"

    def __init__(self, *predictors: PodReclaimablePredictor | PriorityReclaimablePredictor) -> None:
        self.predictors = predictors

    def add_pod(self, pod: Any) -> None:
        for p in self.predictors:
            try:
                p.add_pod(pod)
            except PredictionError as e:
                raise PredictionError(f"failed to add pod ({pod.namespace}/{pod.name}) to {p.name}. error: {e}") from None

    def result(self) -> Res:
        out: Res | None = None
        for p in self.predictors:
            r = p.result()
            out = r if out is None else {k: min(out[k], r[k]) for k in RESOURCES}
        return out if out is not None else _zero()

    def peak(self) -> Res:
        out: Res | None = None
        for p in self.predictors:
            r = p.peak()
            out = r if out is None else {k: max(out[k], r[k]) for k in RESOURCES}
        return out if out is not None else _zero()


def prod_reclaimable_predictor(source: PredictionSource, allocatable: Mapping[str, int] | None, now: float,
                               cold_start_seconds: float, safety_margin_percent: int) -> MinPredictor:
    """``predictorFactory.New(ProdReclaimablePredictor, ...)``."""
    return MinPredictor(PodReclaimablePredictor(source, allocatable, now, cold_start_seconds, safety_margin_percent),
                        PriorityReclaimablePredictor(source, allocatable, safety_margin_percent))
