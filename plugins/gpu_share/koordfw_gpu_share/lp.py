"""Configuration packing of GPU shares (the ``fgdlp`` policy's GPU choice for shared-GPU pods).

Online bin packing with a known size distribution: solve the configuration LP once for the distribution
of shares (which multisets of shares fill one GPU, and in what proportion, so that every share size is
covered with the fewest GPUs), then pack online by matching rates. A share goes to a GPU that was
opened for a configuration still waiting for a share of that size (oldest first); if there is none, it
opens a fresh GPU for the configuration containing its size that is furthest behind its LP proportion.
With the trace's share distribution this leaves about 3.9 % of capacity in gaps on the shares that
arrive by 100 %, against about 4.3 % for best fit (``bench/gpu_share_holes.py`` for the replay).

The LP needs scipy (HiGHS).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping

import attrs
import numpy as np

CAPACITY = 1000  # milli per GPU
#: the LP is solved over at most this many configurations: with many small share sizes the count
#: explodes, so the least frequent sizes are left out (their pods are packed by fit) until it fits
MAX_CONFIGS = 20_000

Config = tuple[int, ...]  # share sizes in one GPU, largest first


class TooManyConfigs(Exception):
    pass


def maximal_configs(sizes: Iterable[int], capacity: int = CAPACITY, limit: int | None = None) -> list[Config]:
    """Every multiset of ``sizes`` with sum ≤ capacity to which no size can be added. Raises
    :class:`TooManyConfigs` past ``limit``."""
    ss = sorted({int(s) for s in sizes if 0 < int(s) <= capacity}, reverse=True)
    if not ss:
        return []
    smin = ss[-1]
    out: list[Config] = []

    def rec(i: int, room: int, cur: list[int]) -> None:
        if i == len(ss):
            if cur and room < smin:
                out.append(tuple(cur))
                if limit is not None and len(out) > limit:
                    raise TooManyConfigs
            return
        s = ss[i]
        for k in range(room // s, -1, -1):
            rec(i + 1, room - k * s, cur + [s] * k)

    rec(0, capacity, [])
    return out


def solve(dist: Mapping[int, float], capacity: int = CAPACITY) -> dict[Config, float]:
    """The configuration LP: weights (summing to 1) of the configurations that cover ``dist`` (share
    size → rate) with the fewest GPUs."""
    from scipy.optimize import linprog

    # the most frequent sizes first; keep the longest prefix whose configurations stay under MAX_CONFIGS
    ranked = sorted((s for s, w in dist.items() if w > 0 and 0 < s < capacity), key=lambda s: (-dist[s], -s))
    lo, hi, cfgs = 0, len(ranked), []
    while lo < hi:  # binary search on the prefix length
        mid = (lo + hi + 1) // 2
        try:
            found = maximal_configs(ranked[:mid], capacity, MAX_CONFIGS)
        except TooManyConfigs:
            hi = mid - 1
            continue
        lo, cfgs = mid, found
    sizes = sorted(ranked[:lo])
    if not cfgs:
        return {}
    row = {s: i for i, s in enumerate(sizes)}
    a = np.zeros((len(sizes), len(cfgs)))
    for j, c in enumerate(cfgs):
        for s in c:
            a[row[s], j] += 1
    d = np.array([float(dist[s]) for s in sizes])
    res = linprog(np.ones(len(cfgs)), A_ub=-a, b_ub=-d, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"configuration LP failed: {res.message}")
    tot = float(res.x.sum())
    return {cfgs[j]: float(x) / tot for j, x in enumerate(res.x) if x > 1e-9}


Slot = tuple[int, int]  # (node index, GPU slot)


@attrs.define
class Packer:
    """Rate-matching state: which GPUs wait for which shares, and how many GPUs each configuration
    opened. Soft state: a GPU it does not know is simply not waiting for anything."""

    weights: dict[Config, float] = attrs.field(factory=dict)
    need: dict[Slot, Counter] = attrs.field(factory=dict)
    waiting: dict[int, deque] = attrs.field(factory=dict)
    opened: Counter = attrs.field(factory=Counter)
    n_opened: int = 0

    def covers(self, size: int) -> bool:
        return any(size in c for c in self.weights)

    def awaits(self, slot: Slot, size: int, left: np.ndarray) -> bool:
        """``slot`` still waits for a share of ``size`` and has room for it (``left``: milli left,
        indexed by (node, slot))."""
        need = self.need.get(slot)
        return need is not None and need[size] > 0 and left[slot] >= size

    def waiting_slots(self, size: int, left: np.ndarray) -> list[Slot]:
        """GPUs still waiting for a share of ``size``, oldest first; stale entries are dropped."""
        q = self.waiting.get(size)
        if not q:
            return []
        live = [sl for sl in q if self.awaits(sl, size, left)]
        if len(live) != len(q):
            self.waiting[size] = deque(live)
        return live

    def next_config(self, size: int) -> Config | None:
        """The configuration with ``size`` furthest behind its LP proportion."""
        cands = [c for c in self.weights if size in c]
        if not cands:
            return None
        return max(cands, key=lambda c: (self.weights[c] * (self.n_opened + 1) - self.opened[c], c))

    def fill(self, slot: Slot, size: int) -> tuple:
        """A share of ``size`` went to ``slot``; returns what :meth:`undo` needs."""
        need = self.need.get(slot)
        if need is not None and need[size] > 0:
            need[size] -= 1
            return ("fill", slot, size)
        return ("none",)

    def open(self, slot: Slot, size: int, cfg: Config) -> tuple:
        """``slot`` was a fresh GPU and now holds the first share of ``cfg``."""
        old = self.need.get(slot)
        need = Counter(cfg)
        need[size] -= 1
        self.need[slot] = need
        for s, k in need.items():
            for _ in range(k):
                self.waiting.setdefault(s, deque()).append(slot)
        self.opened[cfg] += 1
        self.n_opened += 1
        return ("open", slot, cfg, old)

    def undo(self, rec: tuple) -> None:
        if rec[0] == "fill":
            _, slot, size = rec
            need = self.need.get(slot)
            if need is not None:
                need[size] += 1
                self.waiting.setdefault(size, deque()).appendleft(slot)
        elif rec[0] == "open":
            _, slot, cfg, old = rec
            self.need.pop(slot, None)
            if old is not None:
                self.need[slot] = old
            self.opened[cfg] -= 1
            self.n_opened -= 1
