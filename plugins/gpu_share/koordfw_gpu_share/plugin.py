"""gpu_share: Koordinator's fractional GPU scheduling with a choice of placement policies.

Hooks: ``pre_filter`` validates/normalises the pod's GPU request (Koordinator's rules); ``filter``
keeps nodes where enough devices can hold the per-GPU share; ``score`` ranks nodes by the policy;
``reserve`` picks the exact devices (per policy); ``pre_bind`` writes
``scheduling.koordinator.sh/device-allocated``. Pods without GPU requests are skipped unless a paper
policy (which scores every pod, as in the FGD paper's simulator) is chosen.

Policies (``pluginConfig: {gpu_share: {policy: NAME}}``):

* ``spread`` (default; Koordinator LeastAllocated) and ``binpack`` (Koordinator MostAllocated), over
  ``gpu-memory-ratio`` and ``gpu-memory``; devices sorted by the same score, then minor.
* The FGD paper's ``fgd``, ``bestfit``, ``dotprod``, ``packing``, ``clustering``, ``random``, with their
  GPU choice (FGD's own; best-fit GPU for the other packers; a random fitting GPU for ``random``).
* ``fgdx`` (ours, experimental): FGD's fragmentation gradient without the int truncation, ties broken
  by best fit.
* ``fgdpack`` (ours, experimental; ties FGD on the paper's trace): FGD with a coarser node score, ``int(100·sigmoid(Δ/2000))`` (≈80 GPU milli per
  point instead of ≈40), so more nodes tie and, with ``tieBreak: first``, ties pack onto the first node
  in cluster order; device choice as FGD.
* ``fgdcap`` (ours; fewer unallocated GPUs than FGD on the paper's trace): FGD's gradient over a
  capacity-aware fragmentation measure (:func:`koordfw_gpu_share.frag.node_frag_capacity`): a GPU is
  usable by a typical pod only as far as the node's CPU leaves room for the pods that would use it,
  and a shared GPU only in whole multiples of the pod's share. Same score form and device choice as FGD.
* ``fgdlp`` (ours): fgdcap, except that a shared-GPU pod whose size the share distribution covers is
  packed by configuration (:mod:`koordfw_gpu_share.lp`): into the oldest GPU opened for a combination of
  shares that still waits for one of its size, else onto a fresh GPU (the node chosen by fgdcap's score
  over fresh GPUs) opened for the combination furthest behind the LP's proportions. The distribution is
  ``shareSizes`` in the args or, when empty, learnt from the shared pods seen.
"""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from typing import Any

import attrs
import numpy as np

from koordfw import Status, format_quantity, hookimpl, normalize

from . import frag, lp
from .inventory import DEVICE_ALLOCATED, MAX_GPUS_PER_NODE, MILLI, Alloc, Inventory
from .requests import GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, InvalidGpuRequest, pod_gpu_request

KOORD_POLICIES = ("spread", "binpack")
PAPER_POLICIES = ("fgd", "bestfit", "dotprod", "packing", "clustering", "random")
OUR_POLICIES = ("fgdx", "fgdpack", "fgdcap", "fgdlp")
POLICIES = KOORD_POLICIES + PAPER_POLICIES + OUR_POLICIES
FGD_FAMILY = ("fgd", "fgdx", "fgdpack", "fgdcap", "fgdlp")
MAX_SPEC_CPU, MAX_SPEC_GPU = 128000, 8000  # the paper simulator's normalisation constants
#: fgdpack's sigmoid scale (GPU milli); FGD's is 1000. Measured on default: finer scales (exact Δ, 500)
#: leave more GPUs unallocated, 2000 the same as FGD within seed noise, 4000 and above more again.
FGDPACK_SCALE = 2000.0
_REQ, _ALLOC, _CHOICE = "gpu_share/request", "gpu_share/alloc", "gpu_share/choice"
_LP_UNDO = "gpu_share/lp"
#: fgdlp with a learnt share distribution: first LP after this many shared pods, then again every as many
LP_LEARN_EVERY = 300
LP_COUNTED_MAX = 100_000
INSUFFICIENT = "Insufficient gpu devices"
_INSUFFICIENT = Status.unschedulable(INSUFFICIENT)


def _policy(value: str) -> str:
    v = str(value).lower()
    if v not in POLICIES:
        raise ValueError(f"unknown policy {value!r}; use one of {', '.join(POLICIES)}")
    return v


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _number(lo: float | None = None, hi: float | None = None, *, integer: bool = False):
    """attrs validator: a finite number (an integer with ``integer``) within [lo, hi]; the message names
    the field in the profile's camelCase."""
    kind = "an integer" if integer else "a finite number"
    bounds = (f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else f" >= {lo:g}" if lo is not None
              else f" <= {hi:g}" if hi is not None else "")

    def check(inst: Any, attribute: Any, value: Any) -> None:
        ok = (not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
              and (integer or math.isfinite(value)) and (lo is None or value >= lo) and (hi is None or value <= hi))
        if not ok:
            raise ValueError(f"{_camel(attribute.name)}: expected {kind}{bounds}, got {value!r}")
    return check


#: largest CPU (milli) of a typical pod: far above any node, far below int64 in the numpy columns
MAX_MILLI_CPU = 2**40


@attrs.define
class TypicalPod:
    """One entry of the FGD target workload (the paper's ``TargetPod``)."""

    milli_cpu: int = attrs.field(validator=_number(0, MAX_MILLI_CPU, integer=True))
    milli_gpu: int = attrs.field(default=0, validator=_number(0, MILLI, integer=True))
    gpu_number: int = attrs.field(default=0, validator=_number(0, MAX_GPUS_PER_NODE, integer=True))
    gpu_spec: str = ""
    weight: float = attrs.field(default=1.0, validator=_number(0))


@attrs.define
class ShareSize:
    """One share size of fgdlp's distribution: per-GPU milli (1–999) and its relative frequency."""

    milli_gpu: int = attrs.field(validator=_number(1, MILLI - 1, integer=True))
    weight: float = attrs.field(default=1.0, validator=_number(0))


@attrs.define
class Args:
    policy: str = attrs.field(default="spread", converter=_policy)
    #: FGD target workload; empty = learnt from the pods the scheduler has seen
    typical_pods: list[TypicalPod] = attrs.field(factory=list)
    popularity_threshold: float = attrs.field(default=95.0, validator=_number(0, 100))
    #: with a learnt workload, rebuild it after this many new pods
    workload_refresh_pods: int = attrs.field(default=100, validator=_number(0, integer=True))
    #: seed of the ``random`` policy's GPU choice (numpy's generators take a non-negative seed)
    seed: int = attrs.field(default=0, validator=_number(0, integer=True))
    #: ``random`` (the kernel's uniform choice among equal scores) or ``first`` (the first node in
    #: cluster order among the best, which the replay's node permutation makes random per seed)
    tie_break: str = attrs.field(default="random", validator=attrs.validators.in_(("random", "first")))
    #: fgdlp's share distribution; empty = learnt from the shared pods seen
    share_sizes: list[ShareSize] = attrs.field(factory=list)
    #: fgdlp opens a GPU for a configuration only on a node whose CPU left after the pod is at least this
    #: many times the typical CPU of the configuration's other shares (1.5 measured best of 1, 1.5, 2)
    lp_cpu_margin: float = attrs.field(default=1.5, validator=_number(0))


def measure_of(args: Args):
    """The fragmentation measure an FGD-family policy scores with."""
    return frag.node_frag_capacity if args.policy in ("fgdcap", "fgdlp") else frag.node_frag


def pod_tag(count: int, milli: int) -> str:
    """GpuClustering's affinity tag: ``share-gpu``, ``<k>-gpu`` or '' (no GPU)."""
    if count == 0 or milli == 0:
        return ""
    if count == 1 and milli < MILLI:
        return "share-gpu"
    return f"{count}-gpu"


def share_cpu(w: frag.Workload, milli: int) -> float:
    """Expected CPU (milli) of a typical one-GPU pod sharing ``milli`` of a GPU (0 if M has none)."""
    m = (w.milli == milli) & (w.num == 1)
    tot = float(w.p[m].sum())
    return float((w.p[m] * w.cpu[m]).sum()) / tot if tot > 0 else 0.0


def sub_select(left: np.ndarray, fit: np.ndarray, count: int) -> np.ndarray:
    """The paper's ``NodeResource.Sub``: the ``count`` least-sufficient fitting slots (stable by index)."""
    big = np.iinfo(np.int64).max
    order = np.argsort(np.where(fit, left, big), axis=1, kind="stable")
    sfit = np.take_along_axis(fit, order, axis=1)
    chosen = sfit & (np.cumsum(sfit, axis=1) <= count)
    sel = np.zeros_like(fit)
    np.put_along_axis(sel, order, chosen, axis=1)
    return sel


class GpuShare:
    """Stateful per scheduler: the GPU inventory, allocations, FGD caches and the learnt workload."""

    def __init__(self) -> None:
        self.inv: Inventory | None = None
        self._inv_key: tuple | None = None
        self._sync_key: tuple | None = None
        self.rng = np.random.default_rng(0)
        self.workload: frag.Workload | None = None
        self._fixed_workload = False
        self._seen: dict[str, frag.PodKey] = {}
        self._seen_order: deque[str] = deque()
        self._since_refresh = 0
        self._cache: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._frag_cache: tuple[np.ndarray, np.ndarray] | None = None
        self.packer = lp.Packer()
        self._shares_seen: Counter = Counter()
        self._shares_since = 0
        self._lp_counted: dict[str, None] = {}  # insertion-ordered, bounded by LP_COUNTED_MAX
        self._warned: set[str] = set()  # inventory errors already logged

    # -- configuration ---------------------------------------------------------------------------
    @hookimpl
    def plugin_args(self):
        return Args

    @hookimpl
    def startup(self, args, handle):
        self.rng = np.random.default_rng(args.seed)
        if args.typical_pods:
            self._fixed_workload = True
            tot = sum(t.weight for t in args.typical_pods) or 1.0
            self._weighted = [((t.milli_cpu, t.milli_gpu, t.gpu_number, t.gpu_spec), t.weight / tot)
                              for t in args.typical_pods]
        self.sync(handle.cluster)
        for e in handle.cluster.pods.values():
            self._observe(e.pod)
        if args.policy == "fgdlp" and args.share_sizes:
            self.packer.weights = self._solve({s.milli_gpu: s.weight for s in args.share_sizes})

    @staticmethod
    def _solve(dist: dict[int, float]) -> dict:
        try:
            return lp.solve(dist)
        except ImportError:
            raise RuntimeError("policy fgdlp needs scipy for its configuration LP (pip install scipy)") from None

    def _learn_share(self, req, args) -> None:
        """fgdlp without ``shareSizes``: count shared pods; solve the LP after every LP_LEARN_EVERY."""
        if args.share_sizes or req is None or req.count != 1 or req.milli >= MILLI:
            return
        self._shares_seen[req.milli] += 1
        self._shares_since += 1
        if self._shares_since >= LP_LEARN_EVERY:
            self._shares_since = 0
            self.packer.weights = self._solve(dict(self._shares_seen))
            self.packer.opened.clear()  # match the new proportions from here on
            self.packer.n_opened = 0

    # -- state -----------------------------------------------------------------------------------
    def sync(self, cluster) -> Inventory:
        """Bring the inventory up to date with the cluster (nodes, Devices, departed or annotated pods)."""
        devs = cluster.objects_of("Device")
        key = (id(cluster), cluster.num_nodes, cluster._labels_gen, tuple(id(o) for o in devs.values()))
        if key != self._inv_key:
            old = self.inv
            self.inv = Inventory(cluster, self._warned)
            if old is not None:  # keep what we reserved on nodes that still exist
                for uid, a in old.allocs.items():
                    if a.node < cluster.num_nodes:
                        self.inv.add(uid, a)
            self._inv_key = key
            self._sync_key = None
            self._cache.clear()
            self._frag_cache = None
            if self.workload is not None and self.workload.models != self.inv.models:
                self.workload = self.workload.with_models(self.inv.models)
        sk = (cluster.free_generation, len(cluster.pods))
        if sk != self._sync_key:
            self.inv.reconcile(pod_tag)
            self._sync_key = sk
        return self.inv

    def node_version(self, cluster, idx) -> np.ndarray:
        return cluster.node_version[idx] + self.inv.version[idx]

    def cpu_left(self, cluster, idx) -> np.ndarray:
        c = cluster.resource_index("cpu")
        return cluster.allocatable[idx, c] - cluster.requested[idx, c]

    def _observe(self, pod) -> None:
        if self._fixed_workload or pod.uid in self._seen:
            return
        try:
            req = pod_gpu_request(pod)
        except InvalidGpuRequest:
            return
        key = (int(pod.requests.get("cpu", 0)), req.milli if req else 0, req.count if req else 0,
               req.spec if req else "")
        self._seen[pod.uid] = key
        self._since_refresh += 1

    def target_workload(self, args) -> frag.Workload:
        """M: the args' typical pods, or learnt from the pods seen (rebuilt every N new pods)."""
        models = self.inv.models if self.inv is not None else ()
        if self._fixed_workload:
            if self.workload is None or self.workload.models != models:
                self.workload = frag.make_workload(self._weighted, models)
            return self.workload
        if self.workload is None or self._since_refresh >= max(args.workload_refresh_pods, 1):
            self.workload = frag.typical_pods(self._seen.values(), models, args.popularity_threshold)
            self._since_refresh = 0
            self._cache.clear()
            self._frag_cache = None
        return self.workload

    def node_frag_milli(self, cluster, args) -> np.ndarray:
        """Fragmented GPU milli per node under M, recomputed only for nodes that changed."""
        inv = self.sync(cluster)
        w = self.target_workload(args)
        ver = self.node_version(cluster, slice(None))
        if self._frag_cache is None or len(self._frag_cache[0]) != len(ver):
            self._frag_cache = (np.full(len(ver), -1, dtype=np.int64), np.zeros(len(ver)))
        fv, fr = self._frag_cache
        stale = np.flatnonzero(fv != ver)
        if len(stale):
            fr[stale] = frag.node_frag(self.cpu_left(cluster, stale), inv.left[stale], inv.model[stale], w)
            fv[stale] = ver[stale]
        return fr

    # -- scheduling cycle ------------------------------------------------------------------------
    @hookimpl
    def pre_filter(self, pod, state, args, handle):
        self.sync(handle.cluster)
        self._observe(pod)
        try:
            req = pod_gpu_request(pod)
        except InvalidGpuRequest as e:
            return Status.unresolvable(str(e))
        state[_REQ] = req
        if args.policy == "fgdlp" and not args.share_sizes and pod.uid not in self._lp_counted:
            self._lp_counted[pod.uid] = None  # count each pod once, however often it is retried
            if len(self._lp_counted) > LP_COUNTED_MAX:
                del self._lp_counted[next(iter(self._lp_counted))]
            self._learn_share(req, args)
        if req is None:
            return Status.skip()
        if not self.inv.any_gpu:
            return Status.unresolvable(f"{INSUFFICIENT}: no node has GPU devices")
        return None

    @hookimpl
    def filter(self, pod, nodes, state):
        req = state.get(_REQ)
        if req is None:
            return None
        inv = self.inv
        idx = nodes.idx
        ok = inv.fit_devices(idx, req.core, req.memory_ratio, req.memory_bytes).sum(axis=1) >= req.count
        if req.spec:
            allowed = np.array([m in req.spec.split("|") for m in inv.models] + [False], dtype=bool)
            ok &= allowed[inv.model[idx]]
        if ok.all():
            return None
        # the kernel's mask form: one shared Status, no per-node Python work for the common case
        if not inv.errors:
            return ok, _INSUFFICIENT
        views = nodes.cluster.views
        reasons = [None if good else (inv.errors.get(views[i].name) or _INSUFFICIENT)
                   for i, good in zip(idx.tolist(), ok.tolist())]
        return ok, reasons

    @hookimpl
    def pre_score(self, pod, nodes, state, args):
        if state.get(_REQ) is None and args.policy in KOORD_POLICIES:
            return Status.skip()
        return None

    @hookimpl
    def score(self, pod, nodes, state, args, handle):
        s = self._score(pod, nodes, state, args, handle)
        if args.tie_break == "first" and len(s):
            s = np.minimum(s, 99)
            s[int(np.argmax(s))] = 100
        return s

    def _score(self, pod, nodes, state, args, handle):
        cluster = handle.cluster
        req = state.get(_REQ)
        idx = nodes.idx
        p = args.policy
        if p in KOORD_POLICIES:
            return normalize(self._koord_scores(idx, req, most=(p == "binpack")))
        if p == "random":  # the paper's RandomScore: one feasible node, uniformly, gets the top score
            out = np.zeros(len(idx), dtype=np.int64)
            out[int(self.rng.integers(len(idx)))] = 100
            return out
        cpu = int(pod.requests.get("cpu", 0))
        milli, count = (req.milli, req.count) if req else (0, 0)
        inv = self.inv
        if p in FGD_FAMILY:
            scores, _, delta = self._fgd(cluster, idx, pod, req, args)
            if p == "fgdlp":
                return self._lp_score(cluster, idx, pod, req, args, state, scores)
            if p in ("fgd", "fgdcap"):
                return scores
            if p == "fgdpack":
                return frag.fgd_score(delta, scale=FGDPACK_SCALE)
            return self._fgdx_rank(cluster, idx, cpu, milli * count, delta)
        cpu_left = self.cpu_left(cluster, idx)
        gpu_left = inv.left[idx].sum(axis=1)
        if p == "bestfit":
            raw = (100.0 * (1.0 - (0.5 * (cpu_left - cpu) / MAX_SPEC_CPU
                                   + 0.5 * (gpu_left - milli * count) / MAX_SPEC_GPU))).astype(np.int64)
            lo, hi = int(raw.min()), int(raw.max())
            return np.zeros_like(raw) if hi == lo else (raw - lo) * 100 // (hi - lo)
        if p == "dotprod":
            dot = cpu_left / MAX_SPEC_CPU * cpu / MAX_SPEC_CPU + gpu_left / MAX_SPEC_GPU * (milli * count) / MAX_SPEC_GPU
            return (100.0 * (1.0 - dot / 2.0)).astype(np.int64)
        if req is None:  # packing and clustering give CPU pods 0 everywhere
            return np.zeros(len(idx), dtype=np.int64)
        if p == "packing":
            return self._packing(idx, req)
        return self._clustering(idx, req, gpu_left)

    # -- policies ----------------------------------------------------------------------------------
    def _koord_scores(self, idx, req, most: bool) -> np.ndarray:
        inv = self.inv
        parts, weights = [], []
        ratio_req = (req.memory_ratio or 0) * req.count if req else 0
        bytes_req = (req.memory_bytes or 0) * req.count if req else 0
        tot_r = inv.total_mem[idx].sum(axis=1)
        free_r = np.maximum(inv.mem_free[idx], 0).sum(axis=1)
        tot_b = inv.mem_bytes[idx].sum(axis=1)
        free_b = (inv.mem_bytes[idx] * np.maximum(inv.mem_free[idx], 0) // MILLI).sum(axis=1)
        for tot, free, r in ((tot_r, free_r, ratio_req), (tot_b, free_b, bytes_req)):
            requested = np.where(tot >= free, tot - free + r, tot)
            safe = np.maximum(tot, 1)
            if most:
                s = np.minimum(requested, tot) * 100 // safe
            else:
                s = np.where(requested <= tot, (tot - requested) * 100 // safe, 0)
            parts.append(np.where(tot > 0, s, 0))
            weights.append(np.where(tot > 0, 1, 0))
        wsum = np.maximum(weights[0] + weights[1], 1)
        return (parts[0] * weights[0] + parts[1] * weights[1]) // wsum

    def _packing(self, idx, req) -> np.ndarray:
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

    def _clustering(self, idx, req, gpu_left) -> np.ndarray:
        tag = pod_tag(req.count, req.milli)
        base = 25 * (MAX_SPEC_GPU - gpu_left) // MAX_SPEC_GPU
        tags = self.inv.tags
        tier = np.empty(len(idx), dtype=np.int64)
        for j, i in enumerate(idx.tolist()):
            t = tags[i]
            tier[j] = (75 if len(t) == 1 else 50) if t.get(tag, 0) > 0 else (25 if not t else 0)
        return base + tier

    def _fgd(self, cluster, idx, pod, req, args, fresh_only: bool = False):
        """FGD per node: (score, best slot or -1, Δ float), cached per pod shape and node version."""
        w = self.target_workload(args)
        cpu = int(pod.requests.get("cpu", 0))
        key = (cpu, req.core, req.memory_ratio, req.memory_bytes, req.count, req.spec) if req else (cpu,)
        key += (fresh_only,)
        n = cluster.num_nodes
        c = self._cache.get(key)
        if c is None or len(c[0]) != n:
            c = (np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                 np.zeros(n))
            self._cache[key] = c
        ver, sc, slot, dl = c
        cur = self.node_version(cluster, idx)
        stale = idx[ver[idx] != cur]
        if len(stale):
            s, g, d = self._fgd_compute(cluster, stale, cpu, req, w, measure_of(args), fresh_only=fresh_only)
            sc[stale], slot[stale], dl[stale] = s, g, d
            ver[stale] = cur[ver[idx] != cur]
        return sc[idx], slot[idx], dl[idx]

    def _fgd_compute(self, cluster, idx, cpu, req, w, measure, cpu_bias: int = 0, fresh_only: bool = False):
        """Per node: the FGD score, the best slot (shared pods) and Δ = F(n) − F(n') under the policy's
        fragmentation measure (the paper's for fgd/fgdx/fgdpack, the capacity-aware one for fgdcap).
        ``fresh_only``: a shared pod is judged on unused GPUs only (a node without one scores 0, slot -1)."""
        inv = self.inv
        left = inv.left[idx]
        cpu_left = self.cpu_left(cluster, idx) + cpu_bias
        model = inv.model[idx]
        f0 = measure(cpu_left, left, model, w)
        if req is None:
            d = f0 - measure(cpu_left - cpu, left, model, w)
            return frag.fgd_score(d), np.full(len(idx), -1), d
        fit = inv.fit_devices(idx, req.core, req.memory_ratio, req.memory_bytes)
        if fresh_only:  # unused GPUs of a node are alike: judge the first one
            fit &= left == MILLI
            fit &= np.cumsum(fit, axis=1) == 1
        if req.count == 1 and req.milli < MILLI:
            si, g = np.nonzero(fit)
            hyp = left[si].copy()
            hyp[np.arange(len(si)), g] -= req.milli
            d_pairs = f0[si] - measure(cpu_left[si] - cpu, hyp, model[si], w)
            s_pairs = frag.fgd_score(d_pairs)
            m = np.full(fit.shape, -1, dtype=np.int64)
            m[si, g] = s_pairs
            best = np.argmax(m, axis=1)  # first slot with the best (truncated) score, as the Go loop
            dm = np.full(fit.shape, -np.inf)
            dm[si, g] = d_pairs
            top = m[np.arange(len(idx)), best]
            return np.maximum(top, 0), np.where(top >= 0, best, -1), dm[np.arange(len(idx)), best]
        sel = sub_select(left, fit, req.count)
        hyp = left - np.where(sel, req.milli, 0)
        d = f0 - measure(cpu_left - cpu, hyp, model, w)
        return frag.fgd_score(d), np.full(len(idx), -1), d

    def _lp_score(self, cluster, idx, pod, req, args, state, scores) -> np.ndarray:
        """fgdlp: a covered share goes to the oldest GPU waiting for its size on a feasible node (that node
        alone scores 100), else a fresh GPU is opened for the next configuration (fgdcap's score over
        fresh GPUs). Anything else keeps fgdcap's score."""
        packer = self.packer
        if req is None or req.count != 1 or req.milli >= MILLI or not packer.covers(req.milli):
            return scores
        inv = self.inv
        pos = {int(i): j for j, i in enumerate(idx.tolist())}
        for slot in packer.waiting_slots(req.milli, inv.left):
            j = pos.get(slot[0])
            if j is None:
                continue
            if not inv.fit_devices(np.array([slot[0]]), req.core, req.memory_ratio, req.memory_bytes)[0, slot[1]]:
                continue
            state[_CHOICE] = ("fill", slot)
            out = np.minimum(scores, 99)
            out[j] = 100
            return out
        cfg = packer.next_config(req.milli)
        cpu = int(pod.requests.get("cpu", 0))
        w = self.target_workload(args)
        fresh, fslot, _ = self._fgd(cluster, idx, pod, req, args, fresh_only=True)
        # open only where the node's CPU leaves room (with a margin) for the rest of the configuration
        rest = list(cfg or ())
        if req.milli in rest:
            rest.remove(req.milli)
        room = self.cpu_left(cluster, idx) - cpu >= args.lp_cpu_margin * sum(share_cpu(w, t) for t in rest)
        if (room & (fslot >= 0)).any():
            fslot = np.where(room, fslot, -1)
        if not (fslot >= 0).any():  # no fresh GPU on any feasible node: pack as fgdcap does
            return scores
        state[_CHOICE] = ("open", cfg)
        return np.where(fslot >= 0, np.maximum(fresh, 1), 0)

    def _fgdx_rank(self, cluster, idx, cpu, gpu_req, delta) -> np.ndarray:
        """Ours: the node with the largest exact Δ wins (no int truncation); ties go to the tightest
        node (best fit on GPU then CPU). Scores are ranks squeezed into [0, 100]."""
        gpu_after = self.inv.left[idx].sum(axis=1) - gpu_req
        cpu_after = self.cpu_left(cluster, idx) - cpu
        dq = np.round(np.asarray(delta), 6)
        order = np.lexsort((cpu_after, gpu_after, -dq))
        out = np.zeros(len(idx), dtype=np.int64)
        first = order[0]
        same = (dq == dq[first]) & (gpu_after == gpu_after[first]) & (cpu_after == cpu_after[first])
        out[same] = 100
        return out

    # -- device choice ---------------------------------------------------------------------------
    def choose_slots(self, cluster, i: int, pod, req, args, choice: tuple | None = None) -> list[int]:
        inv = self.inv
        idx = np.array([i])
        fit = inv.fit_devices(idx, req.core, req.memory_ratio, req.memory_bytes)[0]
        cand = np.flatnonzero(fit)
        if len(cand) < req.count:
            return []
        left = inv.left[i]
        p = args.policy
        sharing = req.count == 1 and req.milli < MILLI
        if p in KOORD_POLICIES:
            most = p == "binpack"
            tot, free = inv.total_mem[i], inv.mem_free[i]
            r = req.memory_ratio if req.memory_ratio is not None else req.core
            requested = tot - free + r
            safe = np.maximum(tot, 1)
            s = (np.minimum(requested, tot) * 100 // safe if most
                 else np.where(requested <= tot, (tot - requested) * 100 // safe, 0))
            order = sorted(cand.tolist(), key=lambda g: (-int(s[g]), int(inv.minor[i, g])))
            return order[: req.count]
        if sharing and p == "fgdlp" and choice is None and self.packer.covers(req.milli):
            # not scored (one feasible node, or another score won): the same rule on this node alone
            waiting = [sl for sl in self.packer.waiting_slots(req.milli, inv.left) if sl[0] == i and fit[sl[1]]]
            choice = ("fill", waiting[0]) if waiting else ("open", self.packer.next_config(req.milli))
        if sharing and p == "fgdlp" and choice is not None:
            if choice[0] == "fill" and choice[1][0] == i and fit[choice[1][1]]:
                return [int(choice[1][1])]
            if choice[0] == "open":
                cpu = int(pod.requests.get("cpu", 0))
                _, slot, _ = self._fgd_compute(cluster, idx, cpu, req, self.target_workload(args),
                                               measure_of(args), cpu_bias=cpu, fresh_only=True)
                if slot[0] >= 0 and fit[slot[0]]:
                    return [int(slot[0])]
        if sharing and p in FGD_FAMILY:
            # the pod is already assumed on the node: judge from the state before it, as at score time
            cpu = int(pod.requests.get("cpu", 0))
            _, slot, _ = self._fgd_compute(cluster, idx, cpu, req, self.target_workload(args), measure_of(args),
                                           cpu_bias=cpu)
            if slot[0] >= 0 and fit[slot[0]]:
                return [int(slot[0])]
        if sharing and p == "random":
            return [int(cand[self.rng.integers(len(cand))])]
        if sharing:  # best fit: the fitting GPU with the least left, first by index
            return [int(cand[np.argmin(left[cand])])]
        sel = sub_select(left[None, :], fit[None, :], req.count)[0]
        return np.flatnonzero(sel).tolist()

    @hookimpl
    def reserve(self, pod, node, state, args, handle):
        req = state.get(_REQ)
        if req is None:
            return None
        inv = self.sync(handle.cluster)
        slots = self.choose_slots(handle.cluster, node.index, pod, req, args, state.get(_CHOICE))
        if len(slots) < req.count:
            return Status.unschedulable(INSUFFICIENT)
        if args.policy == "fgdlp" and req.count == 1 and req.milli < MILLI:
            state[_LP_UNDO] = self._lp_record(node.index, slots[0], req.milli, state.get(_CHOICE))
        if req.memory_ratio is not None:
            mem, mem_b = req.memory_ratio, None
        else:
            mem_b = req.memory_bytes
            mem = int(inv.mem_slots_needed(np.array([node.index]), mem_b)[0, slots[0]])
        a = Alloc(node.index, tuple(slots), req.core, mem, mem_b, req.milli * req.count, pod_tag(req.count, req.milli))
        inv.add(pod.uid, a)
        state[_ALLOC] = a
        return None

    def _lp_record(self, i: int, g: int, size: int, choice: tuple | None) -> tuple:
        """fgdlp's bookkeeping for a share placed on GPU ``g`` of node ``i`` (before the allocation)."""
        slot = (i, g)
        if int(self.inv.left[slot]) == MILLI and self.packer.covers(size):
            cfg = choice[1] if choice is not None and choice[0] == "open" and choice[1] else None
            return self.packer.open(slot, size, cfg or self.packer.next_config(size))
        return self.packer.fill(slot, size)

    @hookimpl
    def unreserve(self, pod, node, state):
        rec = state.pop(_LP_UNDO, None)
        if rec is not None:
            self.packer.undo(rec)
        if self.inv is not None:
            self.inv.release(pod.uid)
        state.pop(_ALLOC, None)

    @hookimpl
    def pre_bind(self, pod, node, state):
        a = state.get(_ALLOC)
        if a is None:
            return None
        return {DEVICE_ALLOCATED: device_allocated_json(self.inv, a)}

    def allocated_milli(self, uid: str) -> int:
        a = self.inv.allocs.get(uid) if self.inv is not None else None
        return a.milli if a is not None else 0


def device_allocated_json(inv: Inventory, a: Alloc) -> str:
    """Koordinator's annotation: ``{"gpu":[{"minor":0,"resources":{...}}]}``, quantities as strings,
    keys sorted; gpu-memory filled from the ratio, or the ratio from the bytes (``fillGPUTotalMem``)."""
    out = []
    for s in a.slots:
        total_b = int(inv.mem_bytes[a.node, s])
        res = {GPU_CORE: str(a.core // 10)}
        if a.mem_bytes is not None:
            res[GPU_MEMORY] = format_quantity(GPU_MEMORY, a.mem_bytes)
            if total_b > 0:
                res[GPU_MEMORY_RATIO] = str(int(a.mem_bytes / total_b * 100))
        else:
            res[GPU_MEMORY_RATIO] = str(a.mem // 10)
            if total_b > 0:
                res[GPU_MEMORY] = format_quantity(GPU_MEMORY, a.mem // 10 * total_b // 100)
        out.append({"minor": int(inv.minor[a.node, s]), "resources": dict(sorted(res.items()))})
    return json.dumps({"gpu": out}, separators=(",", ":"))
