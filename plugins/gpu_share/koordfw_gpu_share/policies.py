"""gpu_share's placement policies: strategy objects registered by name.

A policy decides the node score (``score``) and the devices (``choose``) and says what it needs from the
plugin: ``measure`` (the fragmentation measure of the FGD family), ``needs_lp`` (the configuration
packer of :mod:`koordfw_gpu_share.lp`, fed by ``shareSizes`` or the shares seen), ``scores_cpu_pods``
(pods without GPU requests are scored too, as in the FGD paper's simulator). The plugin keeps the
state (inventory, target workload, caches, the packer) and calls the policy of ``args.policy``.

The product's policies are here: ``spread`` and ``binpack`` (Koordinator), ``fgd`` (the FGD paper's)
and ``fgdlp`` (ours). The paper's baselines and ``fgdcap`` are in :mod:`koordfw_gpu_share.baselines`.
Register a new one with :func:`register`; ``pluginConfig: {gpu_share: {policy: NAME}}`` selects it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from koordfw import ClusterView, CycleState, Pod, StateKey, normalize

from . import frag
from .inventory import MILLI, Inventory
from .requests import GpuRequest

if TYPE_CHECKING:
    from .plugin import Args, GpuShare

#: cycle state: fgdlp's decision at score time (``("fill", slot)`` or ``("open", config)``) for reserve
#: the slot choice score made for each node, which reserve follows
CHOICE: StateKey[tuple] = StateKey("gpu_share/choice")


def pod_tag(count: int, milli: int) -> str:
    """GpuClustering's affinity tag: ``share-gpu``, ``<k>-gpu`` or '' (no GPU)."""
    if count == 0 or milli == 0:
        return ""
    if count == 1 and milli < MILLI:
        return "share-gpu"
    return f"{count}-gpu"


def sub_select(left: np.ndarray, fit: np.ndarray, count: int) -> np.ndarray:
    """The paper's ``NodeResource.Sub``: the ``count`` least-sufficient fitting slots (stable by index)."""
    big = np.iinfo(np.int64).max
    order = np.argsort(np.where(fit, left, big), axis=1, kind="stable")
    sfit = np.take_along_axis(fit, order, axis=1)
    chosen = sfit & (np.cumsum(sfit, axis=1) <= count)
    sel = np.zeros_like(fit)
    np.put_along_axis(sel, order, chosen, axis=1)
    return sel


def sharing(req: GpuRequest) -> bool:
    """One GPU, part of it."""
    return req.count == 1 and req.milli < MILLI


class Policy:
    """A placement policy, bound to one :class:`~koordfw_gpu_share.plugin.GpuShare` (``self.g``)."""

    name: ClassVar[str] = ""
    #: the fragmentation measure the score takes its gradient of (FGD family), else None
    measure: ClassVar[Callable[..., np.ndarray] | None] = None
    #: the plugin keeps the configuration packer (solved from ``shareSizes`` or learnt from shared pods)
    needs_lp: ClassVar[bool] = False
    #: pods without GPU requests are scored too; False: the plugin skips them (Koordinator's policies)
    scores_cpu_pods: ClassVar[bool] = True

    def __init__(self, g: GpuShare) -> None:
        self.g = g

    @property
    def inv(self) -> Inventory:
        """The plugin's inventory: the hooks that call a policy run after ``GpuShare.sync`` built it."""
        inv = self.g.inv
        assert inv is not None
        return inv

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        """Scores (int, 0–100) of the feasible nodes ``idx``; ``req`` is None for a pod without GPUs."""
        raise NotImplementedError

    def choose(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest, args: Args, fit: np.ndarray, cand: np.ndarray,
               choice: tuple | None) -> list[int]:
        """The device slots on node ``i`` (``fit``: the slots that can hold the per-GPU share, ``cand``
        their indices, at least ``req.count``): a shared pod by :meth:`choose_shared`, others the
        least-sufficient fitting slots (the paper's ``NodeResource.Sub``)."""
        if sharing(req):
            return self.choose_shared(cluster, i, pod, req, args, fit, cand, choice)
        sel = sub_select(self.inv.left[i][None, :], fit[None, :], req.count)[0]
        return np.flatnonzero(sel).tolist()

    def choose_shared(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest, args: Args, fit: np.ndarray,
                      cand: np.ndarray, choice: tuple | None) -> list[int]:
        """Best fit: the fitting GPU with the least left, first by index."""
        left = self.inv.left[i]
        return [int(cand[np.argmin(left[cand])])]

    def reserved(self, i: int, slots: list[int], req: GpuRequest, choice: tuple | None) -> tuple | None:
        """Bookkeeping once the devices are chosen (before the allocation is added); returns what the
        packer's ``undo`` takes at unreserve, or None."""
        return None


#: policy name → class, in registration order (the product's first, then the baselines')
POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make ``cls`` selectable as ``policy: cls.name``."""
    if not cls.name or cls.name in POLICIES:
        raise ValueError(f"policy name {cls.name!r} is empty or already registered")
    POLICIES[cls.name] = cls
    return cls


# -- Koordinator -----------------------------------------------------------------------------------
@register
class Spread(Policy):
    """Koordinator's LeastAllocated over gpu-memory-ratio and gpu-memory (``DefaultNormalizeScore``);
    devices by the same score, then minor."""

    name = "spread"
    scores_cpu_pods = False
    most = False

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
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
            if self.most:
                s = np.minimum(requested, tot) * 100 // safe
            else:
                s = np.where(requested <= tot, (tot - requested) * 100 // safe, 0)
            parts.append(np.where(tot > 0, s, 0))
            weights.append(np.where(tot > 0, 1, 0))
        wsum = np.maximum(weights[0] + weights[1], 1)
        return normalize((parts[0] * weights[0] + parts[1] * weights[1]) // wsum)

    def choose(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest, args: Args, fit: np.ndarray,
               cand: np.ndarray, choice: tuple | None) -> list[int]:
        inv = self.inv
        tot, free = inv.total_mem[i], inv.mem_free[i]
        r = req.memory_ratio if req.memory_ratio is not None else req.core
        requested = tot - free + r
        safe = np.maximum(tot, 1)
        s = (np.minimum(requested, tot) * 100 // safe if self.most
             else np.where(requested <= tot, (tot - requested) * 100 // safe, 0))
        order = sorted(cand.tolist(), key=lambda g: (-int(s[g]), int(inv.minor[i, g])))
        return order[: req.count]


@register
class Binpack(Spread):
    """Koordinator's MostAllocated; devices likewise."""

    name = "binpack"
    most = True


# -- FGD -------------------------------------------------------------------------------------------
@register
class Fgd(Policy):
    """The FGD paper's: ``int(100·sigmoid(Δ/1000))``, Δ = F(n) − F(n') the drop of the node's expected
    fragmented GPU milli under the target workload M; a shared pod takes the GPU with the best score
    (first by index), judged on the node state before the pod."""

    name = "fgd"
    measure = staticmethod(frag.node_frag)

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        return self.fgd(cluster, idx, pod, req, args)[0]

    def fgd(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
            fresh_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Per node: (score, best slot or -1), cached per pod shape and node version."""
        g = self.g
        w = g.target_workload(args)
        cpu = int(pod.requests.get("cpu", 0))
        key: tuple[Any, ...] = (cpu, req.core, req.memory_ratio, req.memory_bytes, req.count, req.spec) if req else (cpu,)
        key += (fresh_only, self.name)
        n = cluster.num_nodes
        c = g._cache.get(key)
        if c is None or len(c[0]) != n:
            c = (np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64))
            g._cache[key] = c
        ver, sc, slot = c
        cur = g.node_version(cluster, idx)
        stale = idx[ver[idx] != cur]
        if len(stale):
            s, gs = self.compute(cluster, stale, cpu, req, w, fresh_only=fresh_only)
            sc[stale], slot[stale] = s, gs
            ver[stale] = cur[ver[idx] != cur]
        return sc[idx], slot[idx]

    def compute(self, cluster: ClusterView, idx: np.ndarray, cpu: int, req: GpuRequest | None, w: frag.Workload,
                cpu_bias: int = 0, fresh_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Per node: the FGD score and the best slot (shared pods; else -1) under the policy's measure.
        ``fresh_only``: a shared pod is judged on unused GPUs only (a node without one scores 0, slot -1)."""
        inv = self.inv
        measure = self.measure
        left = inv.left[idx]
        cpu_left = self.g.cpu_left(cluster, idx) + cpu_bias
        model = inv.model[idx]
        f0 = measure(cpu_left, left, model, w)
        if req is None:
            d = f0 - measure(cpu_left - cpu, left, model, w)
            return frag.fgd_score(d), np.full(len(idx), -1)
        fit = inv.fit_devices(idx, req.core, req.memory_ratio, req.memory_bytes)
        if fresh_only:  # unused GPUs of a node are alike: judge the first one
            fit &= left == MILLI
            fit &= np.cumsum(fit, axis=1) == 1
        if sharing(req):
            si, gi = np.nonzero(fit)
            hyp = left[si].copy()
            hyp[np.arange(len(si)), gi] -= req.milli
            s_pairs = frag.fgd_score(f0[si] - measure(cpu_left[si] - cpu, hyp, model[si], w))
            m = np.full(fit.shape, -1, dtype=np.int64)
            m[si, gi] = s_pairs
            best = np.argmax(m, axis=1)  # first slot with the best (truncated) score, as the Go loop
            top = m[np.arange(len(idx)), best]
            return np.maximum(top, 0), np.where(top >= 0, best, -1)
        sel = sub_select(left, fit, req.count)
        hyp = left - np.where(sel, req.milli, 0)
        d = f0 - measure(cpu_left - cpu, hyp, model, w)
        return frag.fgd_score(d), np.full(len(idx), -1)

    def node_slot(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest | None, args: Args,
                  fresh_only: bool = False) -> int:
        """The best slot on node ``i`` at reserve time: the pod is already assumed on the node, so its
        CPU is given back and the node judged as at score time (-1: none)."""
        cpu = int(pod.requests.get("cpu", 0))
        _, slot = self.compute(cluster, np.array([i]), cpu, req, self.g.target_workload(args), cpu_bias=cpu,
                               fresh_only=fresh_only)
        return int(slot[0])

    def choose_shared(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest, args: Args, fit: np.ndarray,
                      cand: np.ndarray, choice: tuple | None) -> list[int]:
        s = self.node_slot(cluster, i, pod, req, args)
        if s >= 0 and fit[s]:
            return [s]
        return super().choose_shared(cluster, i, pod, req, args, fit, cand, choice)


def share_cpu(w: frag.Workload, milli: int) -> float:
    """Expected CPU (milli) of a typical one-GPU pod sharing ``milli`` of a GPU (0 if M has none)."""
    m = (w.milli == milli) & (w.num == 1)
    tot = float(w.p[m].sum())
    return float((w.p[m] * w.cpu[m]).sum()) / tot if tot > 0 else 0.0


@register
class FgdLp(Fgd):
    """Ours: FGD's score over the capacity-aware measure (:func:`koordfw_gpu_share.frag.node_frag_capacity`,
    the ``fgdcap`` baseline), except that a shared-GPU pod whose size the share distribution covers is
    packed by configuration (:mod:`koordfw_gpu_share.lp`): into the oldest GPU opened for a combination
    of shares that still waits for one of its size, else onto a fresh GPU (the node chosen by the same
    score over fresh GPUs, on a node with CPU for the rest of the combination) opened for the
    combination furthest behind the LP's proportions."""

    name = "fgdlp"
    measure = staticmethod(frag.node_frag_capacity)
    needs_lp = True

    def score(self, cluster: ClusterView, idx: np.ndarray, pod: Pod, req: GpuRequest | None, args: Args,
              state: CycleState) -> np.ndarray:
        """A covered share goes to the oldest GPU waiting for its size on a feasible node (that node
        alone scores 100), else a fresh GPU is opened for the next configuration (the score over fresh
        GPUs). Anything else keeps the FGD score."""
        scores = super().score(cluster, idx, pod, req, args, state)
        g = self.g
        packer = g.packer
        if req is None or not sharing(req) or not packer.covers(req.milli):
            return scores
        inv = self.inv
        pos = {int(i): j for j, i in enumerate(idx.tolist())}
        for slot in packer.waiting_slots(req.milli, inv.left):
            j = pos.get(slot[0])
            if j is None:
                continue
            if not inv.fit_devices(np.array([slot[0]]), req.core, req.memory_ratio, req.memory_bytes)[0, slot[1]]:
                continue
            state[CHOICE] = ("fill", slot)
            out = np.minimum(scores, 99)
            out[j] = 100
            return out
        cfg = packer.next_config(req.milli)
        cpu = int(pod.requests.get("cpu", 0))
        w = g.target_workload(args)
        fresh, fslot = self.fgd(cluster, idx, pod, req, args, fresh_only=True)
        # open only where the node's CPU leaves room (with a margin) for the rest of the configuration
        rest = list(cfg or ())
        if req.milli in rest:
            rest.remove(req.milli)
        room = g.cpu_left(cluster, idx) - cpu >= args.lp_cpu_margin * sum(share_cpu(w, t) for t in rest)
        if (room & (fslot >= 0)).any():
            fslot = np.where(room, fslot, -1)
        if not (fslot >= 0).any():  # no fresh GPU on any feasible node: pack by the FGD score
            return scores
        state[CHOICE] = ("open", cfg)
        return np.where(fslot >= 0, np.maximum(fresh, 1), 0)

    def choose_shared(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest, args: Args, fit: np.ndarray,
                      cand: np.ndarray, choice: tuple | None) -> list[int]:
        packer = self.g.packer
        if choice is None and packer.covers(req.milli):
            # not scored (one feasible node, or another score won): the same rule on this node alone
            waiting = [sl for sl in packer.waiting_slots(req.milli, self.inv.left) if sl[0] == i and fit[sl[1]]]
            choice = ("fill", waiting[0]) if waiting else ("open", packer.next_config(req.milli))
        if choice is not None:
            if choice[0] == "fill" and choice[1][0] == i and fit[choice[1][1]]:
                return [int(choice[1][1])]
            if choice[0] == "open":
                s = self.node_slot(cluster, i, pod, req, args, fresh_only=True)
                if s >= 0 and fit[s]:
                    return [s]
        return super().choose_shared(cluster, i, pod, req, args, fit, cand, choice)

    def reserved(self, i: int, slots: list[int], req: GpuRequest, choice: tuple | None) -> tuple | None:
        """The packer's bookkeeping for a share placed on GPU ``slots[0]`` of node ``i``."""
        if not sharing(req):
            return None
        packer = self.g.packer
        slot = (i, slots[0])
        if int(self.inv.left[slot]) == MILLI and packer.covers(req.milli):
            cfg = choice[1] if choice is not None and choice[0] == "open" and choice[1] else None
            return packer.open(slot, req.milli, cfg or packer.next_config(req.milli))  # type: ignore[arg-type]  # covers()
        return packer.fill(slot, req.milli)
