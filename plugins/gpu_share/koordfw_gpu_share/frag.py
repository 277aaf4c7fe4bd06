"""GPU fragmentation as the FGD paper measures it (Weng et al., USENIX ATC'23), vectorised.

Public API (also used by the defrag plugin):

* :class:`Workload`: the target workload M ("typical pods") as columns: per-pod CPU (milli),
  per-GPU milli, GPU count, accepted-model mask and popularity ``p`` (sums to 1).
* :func:`typical_pods`: build M from pod keys ``(cpu_milli, gpu_milli, num_gpu, spec)`` the way the
  paper's simulator does (``GetTypicalPods``): count keys, sort by count (ties: larger key first), take
  the most popular until they cover ``threshold`` % of pods, renormalise.
* :func:`node_frag`: expected fragmented GPU milli of many nodes at once under M.
* :func:`node_frag_capacity` (ours, the ``fgdcap`` policy's measure): the same, counting a GPU usable by
  a typical pod only as far as the node's CPU leaves room for the pods that would use it, and a shared
  GPU only in whole multiples of the pod's share.

A node is ``cpu_left`` (milli) plus ``gpu_left`` (milli per GPU slot; absent or unhealthy slots are 0)
and a GPU model index into ``Workload.models``. For each typical pod m with probability p:
if m needs no GPU, cannot use the node's model, or does not fit (GPU count or CPU), every idle GPU milli
counts as fragment; otherwise only the GPUs with less left than m's per-GPU milli do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import attrs
import numpy as np

PodKey = tuple[int, int, int, str]  # (cpu_milli, gpu_milli per GPU, num_gpu, spec "A|B" or "")


@attrs.frozen(eq=False)
class Workload:
    """Typical pods as columns. ``access[k, j]`` says pod k may use GPU model ``models[j]``."""

    keys: tuple[PodKey, ...]
    cpu: np.ndarray
    milli: np.ndarray
    num: np.ndarray
    p: np.ndarray
    models: tuple[str, ...]
    access: np.ndarray
    #: memory (bytes) per typical pod, when known; only :func:`node_frag_capacity` reads it
    memory: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def with_models(self, models: Sequence[str]) -> Workload:
        """The same workload with its access mask computed for ``models`` (model index order)."""
        w = make_workload(list(zip(self.keys, self.p.tolist())), models)
        return w if self.memory is None else attrs.evolve(w, memory=self.memory)

    def with_memory(self, memory_by_key: dict[PodKey, int]) -> Workload:
        """The same workload with each typical pod's memory (bytes; 0 where unknown)."""
        return attrs.evolve(self, memory=np.array([int(memory_by_key.get(k, 0)) for k in self.keys], dtype=np.int64))


def make_workload(weighted: Sequence[tuple[PodKey, float]], models: Sequence[str]) -> Workload:
    """A Workload from ``[(key, p), ...]``; ``p`` is used as given (callers normalise)."""
    models = tuple(models)
    keys = tuple((int(k[0]), int(k[1]), int(k[2]), str(k[3] or "")) for k, _ in weighted)
    access = np.ones((len(keys), max(len(models), 1)), dtype=bool)
    for i, k in enumerate(keys):
        if k[3]:
            allowed = set(k[3].split("|"))
            access[i, : len(models)] = [m in allowed for m in models]
    return Workload(keys=keys, cpu=np.array([k[0] for k in keys], dtype=np.int64),
                    milli=np.array([k[1] for k in keys], dtype=np.int64),
                    num=np.array([k[2] for k in keys], dtype=np.int64),
                    p=np.array([w for _, w in weighted], dtype=np.float64), models=models, access=access)


def typical_pods(keys: Iterable[PodKey], models: Sequence[str] = (), threshold: float = 95.0,
                 step: int = 1) -> Workload:
    """The paper's target workload from a list of pod keys (one per pod)."""
    counts = Counter((int(c), int(m), int(n), str(s or "")) for c, m, n, s in keys)
    total = float(sum(counts.values()))
    if total == 0:
        return make_workload([], models)
    # Go: sort.Reverse(TargetPodList) with Less = (count, cpu, milli, num, spec) ascending
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    expected = threshold * total / 100.0
    cum, i, taken = 0.0, 0, 0
    while cum < expected and i < len(ordered):
        taken += step
        while i < taken and i < len(ordered):
            cum += ordered[i][1]
            i += 1
    chosen = ordered[:i]
    return make_workload([(k, c / cum) for k, c in chosen], models)


def node_frag(cpu_left: np.ndarray, gpu_left: np.ndarray, model: np.ndarray, w: Workload) -> np.ndarray:
    """Fragmented GPU milli per node (float64, shape ``(S,)``) for S node states under ``w``.

    ``cpu_left``: (S,), ``gpu_left``: (S, G) milli per slot, ``model``: (S,) index into ``w.models``
    (-1 = no model: only pods without a model constraint can use it).
    """
    gpu_left = np.asarray(gpu_left)
    idle = gpu_left.sum(axis=1).astype(np.float64)
    if len(w) == 0 or gpu_left.shape[0] == 0:
        return np.zeros(gpu_left.shape[0], dtype=np.float64)
    ge = gpu_left[:, :, None] >= w.milli[None, None, :]                          # S,G,K
    cnt = ge.sum(axis=1)                                                          # S,K
    small = np.where(ge, 0, gpu_left[:, :, None]).sum(axis=1).astype(np.float64)  # S,K
    fits = (cnt >= w.num[None, :]) & (np.asarray(cpu_left)[:, None] >= w.cpu[None, :]) & (w.milli[None, :] > 0)
    model = np.asarray(model)
    acc = w.access[:, np.maximum(model, 0)].T                                     # S,K
    if (model < 0).any():
        unconstrained = np.array([not k[3] for k in w.keys], dtype=bool)
        acc = np.where((model < 0)[:, None], unconstrained[None, :], acc)
    contrib = np.where(fits & acc, small, idle[:, None])
    return contrib @ w.p


def node_frag_capacity(cpu_left: np.ndarray, gpu_left: np.ndarray, model: np.ndarray, w: Workload,
                       mem_left: np.ndarray | None = None) -> np.ndarray:
    """Ours: :func:`node_frag` counting only the GPU milli a typical pod can really use on the node.

    FGD's measure asks whether ONE instance of typical pod m fits; if so, every GPU with at least m's
    share left counts as usable. Here a GPU counts only as far as the node's CPU leaves room for the
    instances that would use it (``cpu_left // m.cpu`` instances, ``num`` GPUs each, the GPUs m can use
    most of first), and a shared GPU only in whole multiples of m's share (810 on a free GPU uses
    810, the other 190 is a fragment for m). So placing a CPU-only pod, or a CPU-heavy GPU pod, where it
    would leave GPUs without CPU for their pods shows up as fragmentation, which FGD cannot see while one
    instance still fits. With ``mem_left`` (S,) and the workload's ``memory``, memory limits the
    instances the same way. Same shapes and conditions as :func:`node_frag` otherwise."""
    gpu_left = np.asarray(gpu_left)
    cpu_left = np.asarray(cpu_left)
    idle = gpu_left.sum(axis=1).astype(np.float64)
    if len(w) == 0 or gpu_left.shape[0] == 0:
        return np.zeros(gpu_left.shape[0], dtype=np.float64)
    milli = np.maximum(w.milli, 1)
    ge = gpu_left[:, :, None] >= w.milli[None, None, :]                                      # S,G,K
    cnt = ge.sum(axis=1)                                                                      # S,K
    # per GPU, what m can use of it: whole multiples of its share; GPUs sorted by that, most first
    per = np.where(ge, gpu_left[:, :, None] // milli[None, None, :] * milli[None, None, :], 0)
    per = -np.sort(-per, axis=1)
    cs = np.concatenate([np.zeros((per.shape[0], 1, per.shape[2])), np.cumsum(per, axis=1)], axis=1)  # S,G+1,K
    # how many instances of m the node's CPU (and memory, when given) leaves room for
    room = np.where(w.cpu[None, :] > 0, cpu_left[:, None] // np.maximum(w.cpu[None, :], 1), per.shape[1])
    mem_ok: np.ndarray | bool = True
    if mem_left is not None and w.memory is not None:
        mem_left = np.asarray(mem_left)
        by_mem = np.where(w.memory[None, :] > 0, mem_left[:, None] // np.maximum(w.memory[None, :], 1), per.shape[1])
        room = np.minimum(room, by_mem)
        mem_ok = mem_left[:, None] >= w.memory[None, :]
    num = np.maximum(w.num, 1)[None, :]
    # usable GPUs; a negative cpu_left (a what-if past the node's CPU) leaves none
    gpus = np.clip(np.minimum(cnt // num, room) * num, 0, per.shape[1])                     # S,K
    usable = np.take_along_axis(cs, gpus[:, None, :], axis=1)[:, 0, :]
    fits = (cnt >= w.num[None, :]) & (cpu_left[:, None] >= w.cpu[None, :]) & (w.milli[None, :] > 0) & mem_ok
    model = np.asarray(model)
    acc = w.access[:, np.maximum(model, 0)].T
    if (model < 0).any():
        unconstrained = np.array([not k[3] for k in w.keys], dtype=bool)
        acc = np.where((model < 0)[:, None], unconstrained[None, :], acc)
    contrib = np.where(fits & acc, idle[:, None] - usable, idle[:, None])
    return contrib @ w.p


def node_frag_one(cpu_left: int, gpu_left: Sequence[int], model: int, w: Workload) -> float:
    """:func:`node_frag` for one node (plain values)."""
    return float(node_frag(np.array([cpu_left]), np.array([list(gpu_left)], dtype=np.int64), np.array([model]), w)[0])


def fgd_score(delta: np.ndarray, scale: float = 1000.0) -> np.ndarray:
    """FGD's node score: ``int64(100 · sigmoid(Δ/scale))``, Δ = F(n) − F(n') in GPU milli (Go truncation).

    ``scale`` 1000 is the paper's; a larger one makes the score coarser (more equal scores)."""
    return (100.0 / (1.0 + np.exp(-np.asarray(delta, dtype=np.float64) / scale))).astype(np.int64)
