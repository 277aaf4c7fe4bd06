"""prediction: koordlet's peak predictor (``pkg/koordlet/prediction``) for koordfw's node agent.

Decaying histograms of each pod's and the node's CPU and memory usage (:mod:`.histogram`), trained every
minute and checkpointed to files (:mod:`.server`, :mod:`.checkpoint`); the Prod reclaimable predictor
(:mod:`.predictor`: per pod with cold start, per priority class, their minimum) gives the NodeMetric's
``status.prodReclaimableMetric`` and ``prodPeakMetric`` that koord-manager's Mid resources
(``mid_resource``) are sized from. See ``docs/plugins/prediction.md``.
"""

from .checkpoint import FileCheckpointer, ModelCheckpoint
from .histogram import DecayingHistogram, ExponentialOptions, Histogram
from .plugin import Prediction, PredictionArgs, reclaimable_status
from .predictor import (
    MinPredictor,
    PodReclaimablePredictor,
    PredictionError,
    PriorityReclaimablePredictor,
    node_item_uid,
    prod_reclaimable_predictor,
)
from .server import CPU_OPTIONS, MEMORY_OPTIONS, PeakPredictServer, PodSample, ServerConfig

__all__ = [
    "CPU_OPTIONS", "MEMORY_OPTIONS", "DecayingHistogram", "ExponentialOptions", "FileCheckpointer", "Histogram",
    "MinPredictor", "ModelCheckpoint", "PeakPredictServer", "PodReclaimablePredictor", "PodSample", "Prediction",
    "PredictionArgs", "PredictionError", "PriorityReclaimablePredictor", "ServerConfig", "node_item_uid",
    "prod_reclaimable_predictor", "reclaimable_status",
]
