"""The FGD paper's baselines (Weng et al., USENIX ATC'23) and ``fgdcap``, registered by name.

``bestfit``, ``dotprod``, ``packing``, ``clustering`` and ``random`` are the paper's comparison policies
with their GPU choice (best fit for the packers, a random fitting GPU for ``random``); they score every
pod, CPU-only ones too, as the paper's simulator does. ``fgdcap`` is FGD's score over the capacity-aware
measure (:func:`koordfw_gpu_share.frag.node_frag_capacity`), the step ``fgdlp`` builds on. The
reproduction benchmark (``bench/gpu_share_fgd.py``, ``koordfw replay openb``) selects them like any
policy: ``pluginConfig: {gpu_share: {policy: bestfit}}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from koordfw import ClusterView, CycleState, Pod

from . import frag
from .inventory import MILLI, Inventory
from .policies import Fgd, Policy, pod_tag, register, sub_select
from .requests import GpuRequest

if TYPE_CHECKING:
    from .plugin import Args, GpuShare

MAX_SPEC_CPU, MAX_SPEC_GPU = 128000, 8000  # the paper simulator's normalisation constants


def _left_and_request(g: GpuShare, cluster: ClusterView, idx: np.ndarray, pod: Pod,
                      req: GpuRequest | None) -> tuple[np.ndarray, np.ndarray, int, int]:
    cpu = int(pod.requests.get("cpu", 0))
    gpu = req.milli * req.count if req else 0
    return g.cpu_left(cluster, idx), cast(Inventory, g.inv).left[idx].sum(axis=1), cpu, gpu


@register
class BestFit(Policy):
    """``100·(1 − ½(cpu_left−cpu)/128000 − ½(gpu_left−gpu)/8000)``, min-max normalised; best-fit GPU."""

    name = "bestfit"

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        cpu_left, gpu_left, cpu, gpu = _left_and_request(self.g, cluster, idx, pod, req)
        raw = (100.0 * (1.0 - (0.5 * (cpu_left - cpu) / MAX_SPEC_CPU
                               + 0.5 * (gpu_left - gpu) / MAX_SPEC_GPU))).astype(np.int64)
        lo, hi = int(raw.min()), int(raw.max())
        return np.zeros_like(raw) if hi == lo else (raw - lo) * 100 // (hi - lo)


@register
class DotProd(Policy):
    """``100·(1 − dot/2)`` of the normalised [cpu, gpu] left and request; best-fit GPU."""

    name = "dotprod"

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        cpu_left, gpu_left, cpu, gpu = _left_and_request(self.g, cluster, idx, pod, req)
        dot = cpu_left / MAX_SPEC_CPU * cpu / MAX_SPEC_CPU + gpu_left / MAX_SPEC_GPU * gpu / MAX_SPEC_GPU
        return (100.0 * (1.0 - dot / 2.0)).astype(np.int64)


@register
class Packing(Policy):
    """GpuPacking: shared GPUs 50–100, free GPUs on a used node 33–50, a free node ≤ 33 (CPU-only pods
    0 everywhere); best-fit GPU."""

    name = "packing"

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        if req is None:
            return np.zeros(len(idx), dtype=np.int64)
        inv = self.inv
        left = inv.left[idx]
        fit = inv.fit_devices(idx, req.core, req.memory_ratio, req.memory_bytes)
        full = (left == MILLI) & (inv.total_core[idx] > 0)
        ff = full.sum(axis=1)
        sel = sub_select(left, fit, req.count)
        ffu = (sel & full).sum(axis=1)
        ratio = np.where(sel, left * 100 // MILLI, 0).sum(axis=1)
        case1 = np.maximum(100 - ratio // 10, 50)
        case2 = np.maximum(50 - ffu, 33)
        case3 = np.maximum(33 - ff, ff)
        return np.where(ff == inv.ngpu[idx], case3, np.where(ffu > 0, case2, case1)).astype(np.int64)


@register
class Clustering(Policy):
    """GpuClustering: a node holding only pods of the pod's tag 75–100, the tag among others 50–75, an
    empty node 25–50, others 0–25 (CPU-only pods 0 everywhere); best-fit GPU."""

    name = "clustering"

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        if req is None:
            return np.zeros(len(idx), dtype=np.int64)
        gpu_left = self.inv.left[idx].sum(axis=1)
        tag = pod_tag(req.count, req.milli)
        base = 25 * (MAX_SPEC_GPU - gpu_left) // MAX_SPEC_GPU
        tags = self.inv.tags
        tier = np.empty(len(idx), dtype=np.int64)
        for j, i in enumerate(idx.tolist()):
            t = tags[i]
            tier[j] = (75 if len(t) == 1 else 50) if t.get(tag, 0) > 0 else (25 if not t else 0)
        return base + tier


@register
class Random(Policy):
    """The paper's RandomScore: one feasible node, uniformly, gets the top score; a random fitting GPU
    (the plugin's generator, seeded by ``seed``)."""

    name = "random"

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        out = np.zeros(len(idx), dtype=np.int64)
        out[int(self.g.rng.integers(len(idx)))] = 100
        return out

    def choose_shared(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest, args: Args, fit: np.ndarray,
                      cand: np.ndarray, choice: tuple | None) -> list[int]:
        return [int(cand[self.g.rng.integers(len(cand))])]


@register
class FgdCap(Fgd):
    """FGD's score, ties and GPU choice with Δ from :func:`koordfw_gpu_share.frag.node_frag_capacity`: a
    GPU counts as usable by a typical pod only as far as the node's CPU leaves room for the pods that
    would use it, a shared GPU only in whole multiples of the pod's share."""

    name = "fgdcap"
    measure = staticmethod(frag.node_frag_capacity)
