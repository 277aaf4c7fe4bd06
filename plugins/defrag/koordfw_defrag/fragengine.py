"""Greedy fragmentation descent by migration, shared by ``gpu_defrag`` and ``cpu_defrag``.

The model is the FGD paper's: each node has device slots (GPUs; for CPU, one slot holding the free
milli-cores) with a free amount per slot, a secondary resource (CPU for GPUs, memory for CPU) and a
device model. ``F(node)`` is the expected free slot amount the target workload M cannot use
(:func:`koordfw_gpu_share.api.node_frag`, or for GPUs its capacity-aware variant). A move of pod p
from s to t changes the total by
``gain = [F(s) − F(s − p)] − [F(t + p) − F(t)]``; each step takes the move with the largest gain
(insertion costs are kept per pod shape for every node, so a step costs O(shapes × nodes)), places
the pod on the slots the scheduler's packing choice would give it (best-fit GPU for a shared GPU, the
least sufficient GPUs otherwise), and asks the :class:`PlanBuilder` (the scheduler's filters, the
plan's reservations, PDBs, budgets) before committing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
from koordfw_gpu_share import api

from .plan import PlanBuilder

INF = np.inf


@attrs.define
class MovablePod:
    pod: Any
    node: int
    slots: tuple[int, ...]
    core: int
    mem: int
    count: int
    side: int
    spec: str
    #: other resources checked per pod on the target: resource column → amount
    extra: dict[str, int] = attrs.field(factory=dict)


@attrs.define
class SlotModel:
    """Node columns: ``total``/``core_free``/``mem_free`` (N, G) per slot, ``side_left`` (N,), ``model``
    (N,) index into ``workload.models`` (-1 none), ``extra_free`` per extra resource (N,)."""

    names: list[str]
    total: np.ndarray
    core_free: np.ndarray
    mem_free: np.ndarray
    side_left: np.ndarray
    model: np.ndarray
    workload: api.Workload
    extra_free: dict[str, np.ndarray] = attrs.field(factory=dict)
    #: F per node, ``measure(side_left, left, model, workload)``: the paper's (default) or gpu_share's
    #: capacity-aware :func:`koordfw_gpu_share.api.node_frag_capacity`, which also gets each node's
    #: free memory (``extra_free["memory"]``) as ``mem_left``
    measure: Callable[..., np.ndarray] = api.node_frag

    def fragment(self, side_left: np.ndarray, left: np.ndarray, idx: np.ndarray | slice,
                 mem_left: np.ndarray | None) -> np.ndarray:
        """F of node states (``idx`` selects the nodes' models; ``mem_left`` their free memory)."""
        if self.measure is api.node_frag_capacity:
            return api.node_frag_capacity(side_left, left, self.model[idx], self.workload, mem_left=mem_left)
        return self.measure(side_left, left, self.model[idx], self.workload)

    def mem_left(self, idx: np.ndarray | slice) -> np.ndarray | None:
        mem = self.extra_free.get("memory")
        return None if mem is None else mem[idx]

    @property
    def left(self) -> np.ndarray:
        return np.where(self.total > 0, np.minimum(self.core_free, self.mem_free), 0)

    def frag_of(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        return self.fragment(self.side_left[idx], self.left[idx], idx, self.mem_left(idx))


def place_slots(core_free: np.ndarray, mem_free: np.ndarray, total: np.ndarray, core: int, mem: int,
                count: int) -> tuple[np.ndarray, np.ndarray]:
    """(fits (N,), chosen slots (N, G) bool) on many nodes: best-fit slot for one shared device, the
    least sufficient fitting slots otherwise (stable by index)."""
    fit = (total > 0) & (core_free >= core) & (mem_free >= mem)
    ok = fit.sum(axis=1) >= count
    left = np.where(total > 0, np.minimum(core_free, mem_free), 0)
    if count == 1 and max(core, mem) < 1000:
        big = np.iinfo(np.int64).max
        j = np.argmin(np.where(fit, left, big), axis=1)
        sel = np.zeros_like(fit)
        sel[np.arange(len(j)), j] = True
        sel &= fit
        return ok, sel
    return ok, api.sub_select(left, fit, count)


class Descent:
    """Plans moves with the largest fragmentation gain into a :class:`PlanBuilder`."""

    def __init__(self, model: SlotModel, pods: Sequence[MovablePod], builder: PlanBuilder, *, plugin: str,
                 min_gain: float, max_tries: int, describe: Callable[[float], str]) -> None:
        self.m, self.pods, self.b = model, list(pods), builder
        self.plugin, self.min_gain, self.max_tries, self.describe = plugin, min_gain, max_tries, describe
        n = len(model.names)
        self.F = model.frag_of()
        # a pod's memory is part of its shape: the target must hold it, and the capacity measure counts it
        keys = sorted({(p.core, p.mem, p.count, p.side, p.spec, p.extra.get("memory", 0)) for p in self.pods})
        self.shape_keys = keys
        kidx = {k: i for i, k in enumerate(keys)}
        self.shape = np.array([kidx[(p.core, p.mem, p.count, p.side, p.spec, p.extra.get("memory", 0))]
                               for p in self.pods], dtype=np.int64)
        self.pnode = np.array([p.node for p in self.pods], dtype=np.int64)
        models = model.workload.models
        self.access = np.ones((len(keys), n), dtype=bool)
        for i, k in enumerate(keys):
            if k[4]:
                allowed = np.array([mm in k[4].split("|") for mm in models] + [False], dtype=bool)
                self.access[i] = allowed[model.model]
        self.is_source = np.zeros(n, dtype=bool)
        self.ins = np.full((len(keys), n), INF)
        for i in range(len(keys)):
            self._shape_row(i, np.arange(n))
        self.rem = np.zeros(len(self.pods))
        self._removal(np.arange(len(self.pods)))
        self.active = np.ones(len(self.pods), dtype=bool)
        self.by_node: dict[int, list[int]] = {}
        for j, p in enumerate(self.pods):
            self.by_node.setdefault(p.node, []).append(j)
        self.steps = 0
        self.seconds = 0.0
        #: why candidate moves were dropped (for logs and benchmarks)
        self.dropped: Counter[str] = Counter()

    # -- incremental evaluation --------------------------------------------------------------------
    def _shape_row(self, i: int, idx: np.ndarray) -> None:
        core, mem, count, side, _, pod_mem = self.shape_keys[i]
        m = self.m
        cf, mf, tot = m.core_free[idx], m.mem_free[idx], m.total[idx]
        if count > 0:
            ok, sel = place_slots(cf, mf, tot, core, mem, count)
            cf = cf - np.where(sel, core, 0)
            mf = mf - np.where(sel, mem, 0)
        else:
            ok = np.ones(len(idx), dtype=bool)
        sl = m.side_left[idx] - side
        ok &= (sl >= 0) & self.access[i, idx] & ~self.is_source[idx]
        ml = m.mem_left(idx)
        if ml is not None:
            ml = ml - pod_mem
            ok &= ml >= 0
        left = np.where(tot > 0, np.minimum(cf, mf), 0)
        after = m.fragment(sl, left, idx, ml)
        self.ins[i, idx] = np.where(ok, after - self.F[idx], INF)

    def _removal(self, js: np.ndarray) -> None:
        if len(js) == 0:
            return
        m = self.m
        nodes = self.pnode[js]
        cf, mf = m.core_free[nodes].copy(), m.mem_free[nodes].copy()
        sl = m.side_left[nodes].copy()
        ml = m.mem_left(nodes)
        ml = None if ml is None else ml.copy()
        for k, j in enumerate(js.tolist()):
            p = self.pods[j]
            for s in p.slots:
                cf[k, s] += p.core
                mf[k, s] += p.mem
            sl[k] += p.side
            if ml is not None:
                ml[k] += p.extra.get("memory", 0)
        left = np.where(m.total[nodes] > 0, np.minimum(cf, mf), 0)
        after = m.fragment(sl, left, nodes, ml)
        self.rem[js] = self.F[nodes] - after

    def _apply(self, j: int, t: int) -> None:
        """Move pod j to node t in the model (slots as :func:`place_slots` chooses)."""
        m, p = self.m, self.pods[j]
        s = p.node
        for sl in p.slots:
            m.core_free[s, sl] += p.core
            m.mem_free[s, sl] += p.mem
        m.side_left[s] += p.side
        if p.count > 0:
            _, sel = place_slots(m.core_free[t:t + 1], m.mem_free[t:t + 1], m.total[t:t + 1], p.core, p.mem, p.count)
            m.core_free[t] -= np.where(sel[0], p.core, 0)
            m.mem_free[t] -= np.where(sel[0], p.mem, 0)
        m.side_left[t] -= p.side
        for r, amount in p.extra.items():
            m.extra_free[r][s] += amount
            m.extra_free[r][t] -= amount
        self.is_source[s] = True
        idx = np.array([s, t])
        self.F[idx] = m.frag_of(idx)
        for i in range(len(self.shape_keys)):
            self._shape_row(i, idx)
        affected = [k for k in self.by_node.get(s, []) + self.by_node.get(t, []) if self.active[k]]
        self._removal(np.array(affected, dtype=np.int64))

    # -- the descent ---------------------------------------------------------------------------------
    def _extra_ok(self, p: MovablePod, t: int) -> bool:
        return all(self.m.extra_free[r][t] >= a for r, a in p.extra.items())

    async def run(self) -> int:
        t0 = time.perf_counter()
        b, names = self.b, self.m.names
        moved = 0
        n = len(names)
        while len(self.pods):
            left = b.round_left
            if left is not None and left <= 0:
                break
            k = min(2, n)
            part = np.argpartition(self.ins, k - 1, axis=1)[:, :k] if n > 1 else np.zeros((len(self.shape_keys), 1), int)
            best1 = part[:, 0]
            v1 = np.take_along_axis(self.ins, part[:, :1], axis=1)[:, 0]
            if k > 1:
                v2 = np.take_along_axis(self.ins, part[:, 1:2], axis=1)[:, 0]
                swap = v2 < v1
                best1 = np.where(swap, part[:, 1], best1)
                alt = np.where(swap, v1, v2)
                v1 = np.minimum(v1, v2)
            else:
                alt = np.full(len(v1), INF)
            own = best1[self.shape] == self.pnode
            cost = np.where(own, alt[self.shape], v1[self.shape])
            net = np.where(self.active, self.rem - cost, -INF)
            j = int(np.argmax(net))
            if not np.isfinite(net[j]) or net[j] < self.min_gain:
                break
            self.steps += 1
            p = self.pods[j]
            why = b.blocked(p.pod)
            if why is None and not b.node_budget_left(p.pod.node_name):
                why = "per-node budget exhausted"
            if why is not None:
                self.dropped[why] += 1
                self.active[j] = False
                continue
            row = self.ins[self.shape[j]]
            order = np.argsort(row, kind="stable")
            tried = 0
            done = False
            for t in order.tolist():
                if tried >= self.max_tries or not np.isfinite(row[t]) or self.rem[j] - row[t] < self.min_gain:
                    break
                if t == p.node:
                    continue
                if not self._extra_ok(p, t):
                    self.dropped["target short of memory/pods"] += 1
                    continue
                tried += 1
                if await b.fits(p.pod, names[t]):
                    gain = float(self.rem[j] - row[t])
                    b.add([(p.pod, names[t])], self.describe(gain), self.plugin)
                    self.active[j] = False
                    self._apply(j, t)
                    moved += 1
                    done = True
                    break
            if not done:
                self.dropped["no target passed the filters" if tried else "no target with enough gain"] += 1
                self.active[j] = False
        self.seconds = time.perf_counter() - t0
        return moved
