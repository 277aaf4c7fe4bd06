"""koordlet's peak predict server (``pkg/koordlet/prediction/predict_server.go``): one model per UID, each a
pair of decaying histograms (CPU in cores, memory in bytes).

* **Training**, every ``trainingInterval``: each pod's model gets the p90 of its samples since the last
  training (koordlet's metric server queries the metric cache's p90 over the interval; the percentile is
  the metric cache's: sorted samples, index ``int(n * 0.9) - 1``); each priority class's node item
  (``__node-koord-prod__``, ...) the sum of its pods' p90s (0 when it has none); the node
  (``__node__``) its own p90; the system (``__node-sys__``) ``max(node - Σ pods, 0)``. A pod without
  samples in the interval is skipped.
* **Prediction**: ``p60``, ``p90``, ``p95``, ``p98`` and ``max`` of a model's histograms, CPU as
  ``int64(cores * 1000)`` milli, memory ``int64(bytes)``.
* **GC**: a model not updated for ``modelExpirationDuration`` is dropped, with its checkpoint.
* **Checkpoints**: every minute, at most ``modelCheckpointMaxPerStep`` models, the least recently
  checkpointed first, each at most every ``modelCheckpointInterval``; at start the checkpoints of the
  current pods, the node and its items are restored, the others (unknown or corrupt) removed.

The server keeps its own clock readings: every method takes ``now`` (seconds since the epoch).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable

import attrs
import structlog

from .checkpoint import FileCheckpointer, ModelCheckpoint, valid_uid
from .histogram import DecayingHistogram, ExponentialOptions
from .predictor import ALL_PODS_ITEM_ID, KNOWN_PRIORITY_CLASSES, NODE_UID, SYSTEM_ITEM_ID, Result, node_item_uid

log = structlog.get_logger("koordfw.prediction")

#: ``MinSampleWeight``, ``epsilon``, ``DefaultHistogramBucketSizeGrowth``
MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 0.001 * MIN_SAMPLE_WEIGHT
BUCKET_SIZE_GROWTH = 0.05
#: the histograms' ranges: CPU 0.025 .. 1024 cores, memory 5 MiB .. 2 TiB
CPU_OPTIONS = ExponentialOptions.new(1024, 0.025, 1.0 + BUCKET_SIZE_GROWTH, EPSILON)
MEMORY_OPTIONS = ExponentialOptions.new(float(1 << 41), float(5 << 20), 1.0 + BUCKET_SIZE_GROWTH, EPSILON)
#: the percentiles a prediction reports
PERCENTILES = (("p60", 0.6), ("p90", 0.9), ("p95", 0.95), ("p98", 0.98), ("max", 1.0))


@attrs.frozen
class ServerConfig:
    """``prediction.Config`` (seconds for the durations)."""

    cold_start_seconds: float = 24 * 3600.0
    safety_margin_percent: int = 10
    memory_half_life_seconds: float = 24 * 3600.0
    cpu_half_life_seconds: float = 12 * 3600.0
    training_interval_seconds: float = 60.0
    model_expiration_seconds: float = 30 * 60.0
    model_checkpoint_interval_seconds: float = 10 * 60.0
    model_checkpoint_max_per_step: int = 12


class Model:
    """``PredictModel``."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cpu = DecayingHistogram(CPU_OPTIONS, cfg.cpu_half_life_seconds)
        self.memory = DecayingHistogram(MEMORY_OPTIONS, cfg.memory_half_life_seconds)
        self.last_updated = 0.0
        self.last_checkpointed = 0.0


def p90(values: list[float]) -> float:
    """The metric cache's percentile (``fieldPercentileOfMetricList`` at 0.9)."""
    s = sorted(values)
    idx = max(int(float(len(s)) * 0.9) - 1, 0)
    return s[idx]


def _rfc3339(t: float) -> str:
    return _dt.datetime.fromtimestamp(int(t), _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(t: str) -> float:
    return _dt.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()


@attrs.define
class PodSample:
    """One pod of a training round: its UID, priority class (with default) and usage samples."""

    uid: str
    priority_class: str
    cpu: list[float] = attrs.field(factory=list)  # cores
    memory: list[float] = attrs.field(factory=list)  # bytes


class PeakPredictServer:
    def __init__(self, cfg: ServerConfig, checkpointer: FileCheckpointer | None = None) -> None:
        self.cfg = cfg
        self.models: dict[str, Model] = {}
        self.checkpointer = checkpointer
        self.synced = False
        self.last_training: float | None = None
        self.last_maintenance: float | None = None
        self.restored = False
        #: predictions by UID, computed once per model state (models change only in train, gc and restore)
        self._cache: dict[str, Result] = {}

    # -- training ---------------------------------------------------------------------------------
    def update_model(self, uid: str, cpu: float, memory: float, now: float) -> None:
        self._cache.pop(uid, None)
        model = self.models.get(uid)
        if model is None:
            model = self.models[uid] = Model(self.cfg)
        model.last_updated = now
        model.cpu.add_sample(cpu, 1.0, now)
        model.memory.add_sample(memory, 1.0, now)

    def train(self, pods: Iterable[PodSample], node_cpu: list[float], node_memory: list[float], now: float) -> None:
        """``training``: one round from the samples gathered since the last one."""
        items: dict[str, list[float]] = {}
        for p in pods:
            if not p.cpu or not p.memory:
                continue  # no metric in the interval: koordlet skips the pod
            c, m = p90(p.cpu), p90(p.memory)
            self.update_model(p.uid, c, m, now)
            for item in (p.priority_class, ALL_PODS_ITEM_ID):
                acc = items.setdefault(item, [0.0, 0.0])
                acc[0] += c
                acc[1] += m
        node_c = node_m = 0.0
        if node_cpu and node_memory:
            node_c, node_m = p90(node_cpu), p90(node_memory)
            self.update_model(NODE_UID, node_c, node_m, now)
        for pc in KNOWN_PRIORITY_CLASSES:
            c, m = items.get(pc, (0.0, 0.0))
            self.update_model(node_item_uid(pc), c, m, now)
        sys_c, sys_m = node_c, node_m
        if ALL_PODS_ITEM_ID in items:
            sys_c = max(sys_c - items[ALL_PODS_ITEM_ID][0], 0.0)
            sys_m = max(sys_m - items[ALL_PODS_ITEM_ID][1], 0.0)
        self.update_model(node_item_uid(SYSTEM_ITEM_ID), sys_c, sys_m, now)
        self.synced = True
        self.last_training = now

    # -- prediction -------------------------------------------------------------------------------
    def get_prediction(self, uid: str) -> Result | None:
        hit = self._cache.get(uid)
        if hit is not None:
            return hit
        model = self.models.get(uid)
        if model is None:
            return None
        out = {key: {"cpu": int(model.cpu.percentile(p) * 1000.0), "memory": int(model.memory.percentile(p))}
               for key, p in PERCENTILES}
        self._cache[uid] = out
        return out

    # -- maintenance ------------------------------------------------------------------------------
    def gc(self, now: float) -> list[str]:
        """``gcModels``: drop models not updated for ``modelExpirationDuration``; returns their UIDs."""
        if not self.synced:
            return []
        gone = [uid for uid, m in self.models.items() if now - m.last_updated > self.cfg.model_expiration_seconds]
        for uid in gone:
            del self.models[uid]
            self._cache.pop(uid, None)
            if self.checkpointer is not None:
                self.checkpointer.remove(uid)
        return gone

    def checkpoint(self, now: float) -> int:
        """``doCheckpoint``: returns how many models were saved."""
        if not self.synced or self.checkpointer is None:
            return 0
        order = sorted(self.models.items(), key=lambda kv: (kv[1].last_checkpointed, kv[0]))
        saved = 0
        for uid, model in order:
            if saved >= self.cfg.model_checkpoint_max_per_step:
                break
            if now - model.last_checkpointed < self.cfg.model_checkpoint_interval_seconds:
                break
            if valid_uid(uid):
                try:
                    self.checkpointer.save(ModelCheckpoint(uid, model.cpu.save(), model.memory.save(), _rfc3339(now)))
                except OSError as e:
                    log.error("save checkpoint failed", uid=uid, error=str(e))
            model.last_checkpointed = now
            saved += 1
        return saved

    def restore(self, known_pod_uids: Iterable[str]) -> list[str]:
        """``restoreModels`` + the removal of unknown ones: the checkpoints of ``known_pod_uids``, the node
        and its items are loaded; the others, and any that is corrupt (logged), are removed. Returns the
        UIDs restored."""
        self.restored = True
        if self.checkpointer is None:
            return []
        known = set(known_pod_uids) | {NODE_UID, node_item_uid(SYSTEM_ITEM_ID)}
        known |= {node_item_uid(pc) for pc in KNOWN_PRIORITY_CLASSES}
        try:
            cks = self.checkpointer.restore()
        except OSError as e:
            log.error("restore models failed", error=str(e))
            return []
        out = []
        for ck in cks:
            if ck.error or ck.uid not in known:
                if ck.error:
                    log.warning("ignoring a corrupt prediction checkpoint", uid=ck.uid, error=ck.error)
                self.checkpointer.remove(ck.uid)
                continue
            model = Model(self.cfg)
            try:
                model.last_updated = _parse(ck.last_updated)
                model.cpu.load(ck.cpu or {})
                model.memory.load(ck.memory or {})
            except (ValueError, TypeError) as e:
                log.warning("ignoring a corrupt prediction checkpoint", uid=ck.uid, error=str(e)[:200])
                self.checkpointer.remove(ck.uid)
                continue
            self.models[ck.uid] = model
            self._cache.pop(ck.uid, None)
            out.append(ck.uid)
        return out


