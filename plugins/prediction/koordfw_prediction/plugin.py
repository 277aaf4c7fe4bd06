"""The ``prediction`` plugin: koordlet's peak predictor on the node (``koordfw agent``).

Every round ``collect`` records each pod's and the node's usage; every ``trainingInterval`` the predict
server trains its decaying histograms from them (:mod:`.server`); every minute it drops expired models and
checkpoints some (``checkpointFilepath``, off when empty); at the first round it restores the checkpoints
of the pods on the node. Each round it also runs the Prod reclaimable predictor (:mod:`.predictor`) over
the node's pods and returns, under :attr:`koordfw.NodeState.NODE_METRIC_STATUS`, the two NodeMetric status
fields koordlet's states_nodemetric writes from it::

    prodReclaimableMetric: {resource: {resources: {cpu: <milli quantity>, memory: <bytes quantity>}}}
                           ({resource: {}} while the predictor has no result, e.g. before the first training)
    prodPeakMetric:        {resource: {resources: {...}}}     (absent while the predictor has no peak)

which the agent's NodeMetric reporter publishes with the rest of the status. As koordlet, the pods given
to the predictor are those with a usage sample this round (koordlet: with a valid pod metric).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import ManifestError, NodeState, format_quantity, hookimpl, parse_duration
from koordfw.extension import NODE_METRIC_PROD_USAGE_DISTRIBUTION, PRIORITY_NONE, PRIORITY_PROD
from koordfw.inputs import camel, raw_allocatable

from .api import distribution_status
from .checkpoint import FileCheckpointer
from .histogram import Histogram
from .predictor import (
    NODE_UID,
    SYSTEM_ITEM_ID,
    PodReclaimablePredictor,
    PredictionError,
    node_item_uid,
    prod_reclaimable_predictor,
)
from .server import PeakPredictServer, PodSample, ServerConfig

log = structlog.get_logger("koordfw.prediction")

#: how often models are garbage-collected and checkpointed (koordlet's ``wait.Until(..., time.Minute)``)
MAINTENANCE_INTERVAL_SECONDS = 60.0


def _duration(name: str, value: Any) -> float:
    try:
        s = parse_duration(value)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"{name}: expected a non-negative duration, got {value!r}")
    return s


def _positive_duration(name: str, value: Any) -> float:
    s = _duration(name, value)
    if s <= 0:
        raise ValueError(f"{name}: must be above 0, got {value!r}")
    return s


# the converters: named functions (mypy's attrs plugin types those)
def _cold_start(v: Any) -> float:
    return _duration("coldStartDuration", v)


def _mem_half_life(v: Any) -> float:
    return _positive_duration("memoryHistogramDecayHalfLife", v)


def _cpu_half_life(v: Any) -> float:
    return _positive_duration("cpuHistogramDecayHalfLife", v)


def _training(v: Any) -> float:
    return _positive_duration("trainingInterval", v)


def _expiration(v: Any) -> float:
    return _positive_duration("modelExpirationDuration", v)


def _ck_interval(v: Any) -> float:
    return _duration("modelCheckpointInterval", v)


def _int_range(lo: int, hi: int) -> Any:
    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"{camel(attribute.name)}: expected an integer in [{lo}, {hi}], got {str(value)[:40]}")
    return check


def _path(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{camel(attribute.name)}: expected a directory path (a string), got {value!r}")


@attrs.define
class PredictionArgs:
    """koordlet's ``prediction.Config`` flags (``--prediction-*``), camelCase; durations are Go durations
    ("24h", "1m") or seconds, held as seconds (typed ``Any`` so the profile's strings reach the
    converters). ``checkpointFilepath`` is the directory of the checkpoints ("": none, the
    history is lost on restart; koordlet's default is ``/prediction-checkpoints``)."""

    checkpoint_filepath: str = attrs.field(default="", validator=_path)
    cold_start_duration: Any = attrs.field(default=24 * 3600.0, converter=_cold_start)
    safety_margin_percent: int = attrs.field(default=10, validator=_int_range(0, 1000))
    memory_histogram_decay_half_life: Any = attrs.field(default=24 * 3600.0, converter=_mem_half_life)
    cpu_histogram_decay_half_life: Any = attrs.field(default=12 * 3600.0, converter=_cpu_half_life)
    training_interval: Any = attrs.field(default=60.0, converter=_training)
    model_expiration_duration: Any = attrs.field(default=30 * 60.0, converter=_expiration)
    model_checkpoint_interval: Any = attrs.field(default=10 * 60.0, converter=_ck_interval)
    model_checkpoint_max_per_step: int = attrs.field(default=12, validator=_int_range(1, 10000))

    def server_config(self) -> ServerConfig:
        return ServerConfig(cold_start_seconds=self.cold_start_duration, safety_margin_percent=self.safety_margin_percent,
                            memory_half_life_seconds=self.memory_histogram_decay_half_life,
                            cpu_half_life_seconds=self.cpu_histogram_decay_half_life,
                            training_interval_seconds=self.training_interval,
                            model_expiration_seconds=self.model_expiration_duration,
                            model_checkpoint_interval_seconds=self.model_checkpoint_interval,
                            model_checkpoint_max_per_step=self.model_checkpoint_max_per_step)


def reclaimable_status(result: Mapping[str, int] | None) -> dict[str, Any]:
    """``ReclaimableMetric`` as it marshals: ``{"resource": {"resources": {...}}}``, ``{"resource": {}}`` without
    a result."""
    if result is None:
        return {"resource": {}}
    return {"resource": {"resources": {"cpu": format_quantity("cpu", int(result["cpu"])),
                                       "memory": format_quantity("memory", int(result["memory"]))}}}


#: the models whose sum the per-priority predictor takes as the node's non-reclaimable usage
DISTRIBUTION_MODELS = (SYSTEM_ITEM_ID, PRIORITY_PROD, PRIORITY_NONE)


def histogram_pairs(h: Histogram, scale: float) -> list[tuple[int, float]]:
    """A histogram's non-empty buckets as ``(bucket end × scale, weight)``: the end, as ``percentile`` reads
    a bucket, so a value is at most one bucket (5 %) above the samples it holds."""
    opts, last = h.options, h.options.num_buckets - 1
    out = []
    for b in range(h.min_bucket, h.max_bucket + 1):
        w = h.bucket_weight[b]
        if w > 0:
            out.append((int(opts.bucket_start(b + 1 if b < last else b) * scale), w))
    return out


def usage_distribution(server: PeakPredictServer, unpredicted: Mapping[str, int]) -> dict[str, Any] | None:
    """``status.koordfwProdUsageDistribution`` (the risk-budget mode's input, :mod:`.api`): the system's and
    the Prod classes' histograms and the unpredicted Prod requests; None while a model is missing or empty
    (before the first training)."""
    comps = []
    for item in DISTRIBUTION_MODELS:
        m = server.models.get(node_item_uid(item))
        if m is None or m.cpu.is_empty() or m.memory.is_empty():
            return None
        comps.append((item, histogram_pairs(m.cpu, 1000.0), histogram_pairs(m.memory, 1.0)))
    return distribution_status(comps, unpredicted)


class Prediction:
    def __init__(self) -> None:
        self.server: PeakPredictServer | None = None
        self._config: PredictionArgs | None = None
        #: samples since the last training: uid → PodSample; the node's cpu (cores) and memory (bytes)
        self._pods: dict[str, PodSample] = {}
        self._node: tuple[list[float], list[float]] = ([], [])
        #: the last round's result and peak (for ``koordfw agent`` reports and tests)
        self.last_result: dict[str, int] | None = None
        self.last_peak: dict[str, int] | None = None

    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return PredictionArgs

    def _server(self, args: PredictionArgs) -> PeakPredictServer:
        if self.server is None or self._config != args:
            # new args (a NodeSLO or --config change): a new server, restored from the checkpoints again
            ck = FileCheckpointer(args.checkpoint_filepath) if args.checkpoint_filepath else None
            self.server = PeakPredictServer(args.server_config(), ck)
            self._config = args
        return self.server

    @hookimpl
    def collect(self, node_state: NodeState, args: PredictionArgs, handle: Any) -> dict | None:
        now_fn = getattr(handle, "now", None)
        if not callable(now_fn):
            return None
        now = float(now_fn())
        srv = self._server(args)
        pods = [ps for ps in node_state.pods if ps.pod is not None]
        if not srv.restored:
            restored = srv.restore(ps.uid for ps in pods)
            if restored:
                log.info("prediction models restored from checkpoints", node=node_state.name, models=len(restored))
        self._record(node_state, pods)
        if srv.last_training is None or now - srv.last_training >= args.training_interval:
            srv.train(list(self._pods.values()), *self._node, now)
            self._pods.clear()
            self._node = ([], [])
        if srv.last_maintenance is None or now - srv.last_maintenance >= MAINTENANCE_INTERVAL_SECONDS:
            srv.last_maintenance = now
            srv.gc(now)
            srv.checkpoint(now)
        return {NodeState.NODE_METRIC_STATUS: self._status(node_state, pods, now, args)}

    def _record(self, ns: NodeState, pods: list[Any]) -> None:
        for ps in pods:
            cpu, mem = ps.usage.get("cpu"), ps.usage.get("memory")
            if cpu is None or mem is None:
                continue
            s = self._pods.get(ps.uid)
            if s is None:
                s = self._pods[ps.uid] = PodSample(ps.uid, ps.pod.priority_class_with_default)
            s.cpu.append(cpu / 1000.0)
            s.memory.append(float(mem))
        cpu, mem = ns.usage.get("cpu"), ns.usage.get("memory")
        if cpu is not None and mem is not None:
            self._node[0].append(cpu / 1000.0)
            self._node[1].append(float(mem))

    def _allocatable(self, ns: NodeState) -> dict[str, int] | None:
        """``getNodeAllocatable``: the raw allocatable annotation, else ``status.allocatable``."""
        try:
            raw = raw_allocatable(ns)
        except ManifestError:
            raw = None
        if raw:
            return raw
        return dict(ns.allocatable) if ns.allocatable else None

    def _status(self, ns: NodeState, pods: list[Any], now: float, args: PredictionArgs) -> dict[str, Any]:
        assert self.server is not None
        predictor = prod_reclaimable_predictor(self.server, self._allocatable(ns), now, args.cold_start_duration,
                                               args.safety_margin_percent)
        for ps in pods:
            if ps.usage.get("cpu") is None and ps.usage.get("memory") is None:
                continue  # no metric this round: koordlet leaves the pod out
            try:
                predictor.add_pod(ps.pod)
            except PredictionError as e:
                log.debug("predictor add pod aborted", pod=ps.pod.key, error=str(e))
        try:
            self.last_result = predictor.result()
        except PredictionError as e:
            log.debug("failed to get prediction", node=ns.name, error=str(e))
            self.last_result = None
        try:
            self.last_peak = predictor.peak()
        except PredictionError as e:
            log.debug("failed to get prediction peak", node=ns.name, error=str(e))
            self.last_peak = None
        out: dict[str, Any] = {"prodReclaimableMetric": reclaimable_status(self.last_result)}
        out["prodPeakMetric"] = None if self.last_peak is None else reclaimable_status(self.last_peak)
        unpredicted = next((p.unpredicted for p in predictor.predictors if isinstance(p, PodReclaimablePredictor)), {})
        out[NODE_METRIC_PROD_USAGE_DISTRIBUTION] = usage_distribution(self.server, unpredicted)
        return out

    @hookimpl
    def report(self) -> dict | None:
        srv = self.server
        if srv is None:
            return None
        return {"prediction": {"models": len(srv.models), "synced": srv.synced,
                               "nodeModel": NODE_UID in srv.models,
                               "prodReclaimable": self.last_result, "prodPeak": self.last_peak}}


__all__ = ["Prediction", "PredictionArgs", "reclaimable_status"]
