"""The NUMA topology policy decided for many nodes at once: per-node NUMA columns and the vectorised verdict.

The exact path (:meth:`NUMAPolicyMixin._numa_hint`) builds each resource's hints and runs the topology-manager
merge per node. For this plugin's own providers (cpu and memory) the merge's outcome has a closed form:
``resource_hints`` keeps a set of NUMA nodes only when it holds *every* requested resource (none of its NUMA
nodes lacks one, the free amounts add up), and gives that same list to each resource, preferring the sets
of the minimal width *w* found. So, with ``F`` those sets and *Z* the node's NUMA nodes:

* no requested resource is reported by the zones: the merge sees "no preference" and admits; the hint is
  every NUMA node (``None`` under SingleNUMANode);
* ``F`` empty: every requested resource is "Unsatisfied": Restricted and SingleNUMANode refuse, BestEffort
  admits with every NUMA node;
* otherwise the best merged hint is a preferred set of width *w*: Restricted and BestEffort admit it,
  SingleNUMANode admits only when *w* is 1 (the single-node filter keeps preferred one-node hints only).

Score is ``100 // width`` (100 for SingleNUMANode). The columns hold, per node, its own policy, its NUMA
nodes' free cpu and memory (and the cpu a bound pod could take: whole free CPUs), refreshed only for the
nodes that changed; :func:`decide` works out *w* for all candidate nodes with numpy, enumerating the NUMA
node sets as bitmasks. Refusals' messages come from the exact path, and nodes the columns cannot describe
(an unknown policy, a NUMA id over 63, more than :data:`MAX_ZONES` NUMA nodes, a broken
NodeResourceTopology, a node where the pod itself holds resources) are flagged for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import numpy as np

from koordfw import IdentityKey

from .numa_policy import POLICY_BEST_EFFORT, POLICY_NONE, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE

#: policy codes in the columns (-1: a value the exact path must judge, e.g. an unknown label)
CODE_NONE, CODE_BEST_EFFORT, CODE_RESTRICTED, CODE_SINGLE = 0, 1, 2, 3
POLICY_CODES = {POLICY_NONE: CODE_NONE, POLICY_BEST_EFFORT: CODE_BEST_EFFORT, POLICY_RESTRICTED: CODE_RESTRICTED,
                POLICY_SINGLE_NUMA_NODE: CODE_SINGLE}
#: NUMA nodes a node may have for the columns (the sets enumerated are 2**MAX_ZONES - 1)
MAX_ZONES = 8
RESOURCES = ("cpu", "memory")
#: a free amount the columns hold exactly in float64 sums of MAX_ZONES terms (larger: the exact path)
_EXACT_LIMIT = 1 << 49
#: the free amount standing for a resource no NUMA node of the node reports (any request of it is met)
_UNREPORTED = 1 << 52
#: the free amount of a slot past the node's NUMA nodes (it lacks every requested resource)
_PAD = -1
_NO_WIDTH = 1 << 30
#: the columns of NUMAColumns.table
_VER, _POLICY, _EXACT, _ZONES, _REPORTED = 0, 1, 2, 3, 4
_CPU = _REPORTED + len(RESOURCES)
_CPU_BIND = _CPU + MAX_ZONES
_MEM = _CPU_BIND + MAX_ZONES
_IDS = _MEM + MAX_ZONES
_WIDTH = _IDS + MAX_ZONES


def _subsets(z: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every non-empty set of ``z`` NUMA slots as a bitmask, by size (then value); each one's size; and its
    slots as a 0/1 float matrix (sets × slots)."""
    masks = np.arange(1, 1 << z, dtype=np.int64)
    sizes = np.array([int(m).bit_count() for m in masks.tolist()], dtype=np.int64)
    order = np.lexsort((masks, sizes))
    masks, sizes = masks[order], sizes[order]
    member = ((masks[:, None] >> np.arange(z, dtype=np.int64)[None, :]) & 1).astype(np.float64)
    return masks, sizes, member


_SUBSETS = [_subsets(z) for z in range(MAX_ZONES + 1)]
_SLOT_BITS = np.int64(1) << np.arange(MAX_ZONES, dtype=np.int64)


@attrs.define
class Verdict:
    """:func:`decide` for a batch of candidate nodes: ``slow``: positions (in the batch) of the nodes the
    exact path must judge (the columns cannot, or the policy refuses them: their message is the exact
    merge's); ``mismatch``: positions of nodes whose policy differs from the pod's; ``score``: per node the
    score of its hint (-1: none, or judged by the exact path); ``scored``: some node has a hint score."""

    slow: list[int]
    mismatch: list[int]
    score: np.ndarray
    scored: bool


@attrs.frozen
class Row:
    """What one node's row is made of: the node's own policy, its NUMA totals and free amounts (before
    trimming), the whole free CPUs per NUMA id (``None``: no CPU topology), its NUMA error, and the pods
    whose shares count in it."""

    index: int
    version: int
    policy: str
    total: Mapping[int, Mapping[str, int]]
    avail: Mapping[int, Mapping[str, int]]
    free_cpu: Mapping[int, int] | None
    error: str
    uids: tuple[str, ...]
    #: the exact path must judge the node (an amplified node: a bound pod's request is amplified there)
    exact: bool = False


class NUMAColumns:
    """Per-node NUMA columns of one cluster, indexed like its nodes. A row is rebuilt when its node's version
    moves or it is touched (reservations, the node's CPU state or NodeResourceTopology changed).

    ``cpu[i, z]`` and ``mem[i, z]`` are the free cpu and memory of the node's ``z``-th NUMA node (in NUMA id
    order), ``cpu_bind`` the cpu a bound pod could take there (whole free CPUs); slots past its NUMA nodes
    hold ``_PAD``, and a resource none of its NUMA nodes reports is ``_UNREPORTED`` on every one. A row of
    ``MAX_ZONES`` slots is 8 bytes of booleans, so "some NUMA node fits" is one integer test per node."""

    def __init__(self, key: IdentityKey | None = None) -> None:
        self.key = key  # the cluster's
        self.cluster: Any = None  # the cluster object last refreshed with (held: compared with 'is')
        #: every row's numbers in one table (a rebuilt row is one assignment); the columns are views of it
        self.table = np.zeros((0, _WIDTH), dtype=np.int64)
        #: per row, a number no earlier build of any row had (answers derived from a row keep it as their key)
        self.stamp = np.zeros(0, dtype=np.int64)
        self._stamps = 0
        self._views()
        #: pod uid -> the rows its resource-status or reservation counts in (the pod's own share must not count)
        self.uid_rows: dict[str, set[int]] = {}
        self._row_uids: dict[int, tuple[str, ...]] = {}
        self._touched: set[int] = set()
        self._touched_names: set[str] = set()
        #: per row, what its last build was made of (the caller's: see :meth:`keep`)
        self.sources: dict[int, tuple[Any, ...]] = {}

    def _views(self) -> None:
        t = self.table
        self.ver, self.policy, self.exact, self.zones = t[:, _VER], t[:, _POLICY], t[:, _EXACT], t[:, _ZONES]
        self.reported = t[:, _REPORTED:_REPORTED + len(RESOURCES)]
        self.cpu = t[:, _CPU:_CPU + MAX_ZONES]
        self.cpu_bind = t[:, _CPU_BIND:_CPU_BIND + MAX_ZONES]
        self.mem = t[:, _MEM:_MEM + MAX_ZONES]
        #: the NUMA id of each slot (-1 past the node's NUMA nodes)
        self.ids = t[:, _IDS:_IDS + MAX_ZONES]

    def touch(self, index: int) -> None:
        self._touched.add(index)

    def touch_name(self, name: str) -> None:
        self._touched_names.add(name)

    def grow(self, n: int) -> None:
        old = len(self.table)
        if n <= old:
            return
        extra = np.zeros((n - old, _WIDTH), dtype=np.int64)
        extra[:, _VER] = -1
        extra[:, _CPU:] = _PAD
        self.table = np.concatenate([self.table, extra])
        self.stamp = np.concatenate([self.stamp, np.full(n - old, -1, dtype=np.int64)])
        self._views()

    def stale(self, idx: np.ndarray, versions: np.ndarray, index_of: Callable[[str], int | None]) -> list[int]:
        """The rows among ``idx`` to rebuild (``versions``: the cluster's node versions; ``index_of``: a node
        name's index)."""
        for name in self._touched_names:
            i = index_of(name)
            if i is not None:
                self._touched.add(i)
        self._touched_names.clear()
        if self._touched:
            t = np.fromiter(self._touched, dtype=np.int64, count=len(self._touched))
            self.ver[t[t < len(self.ver)]] = -1
            self._touched.clear()
        return idx[self.ver[idx] != versions[idx]].tolist()

    def keep(self, index: int, version: int, source: tuple[Any, ...]) -> bool:
        """Whether the row of ``index`` was built from ``source`` (compared by value, its first item by
        identity): then it is marked fresh at ``version`` as it stands (and keeps its stamp); else
        ``source`` is remembered for the build the caller makes."""
        old = self.sources.get(index)
        if old is not None and old[0] is source[0] and old[1:] == source[1:]:
            self.ver[index] = version
            return True
        self.sources[index] = source
        return False

    def set_rows(self, rows: list[Row]) -> None:
        """Rebuild the rows."""
        if not rows:
            return
        table = []
        for row in rows:
            code = POLICY_CODES.get(row.policy, -1)
            ids = list(row.total)
            rep = [any(r in res for res in row.total.values()) for r in RESOURCES]
            c = [row.avail.get(n, {}).get("cpu", 0) if rep[0] else _UNREPORTED for n in ids]
            m = [row.avail.get(n, {}).get("memory", 0) if rep[1] else _UNREPORTED for n in ids]
            free = row.free_cpu
            cb = c if free is None or not rep[0] else [min(v, free.get(n, 0) * 1000) for v, n in zip(c, ids, strict=True)]
            # the columns describe an error-free node of at most MAX_ZONES NUMA nodes with ids a mask can hold
            # and amounts float64 sums hold exactly
            ex = (row.exact or bool(row.error) or code < 0 or len(ids) > MAX_ZONES or any(n > 63 for n in ids)
                  or any(abs(v) >= _EXACT_LIMIT for v in (*c, *cb, *m) if v != _UNREPORTED))
            pad = [_PAD] * (MAX_ZONES - len(ids))
            if ex:
                table.append([row.version, code, 1, 0, *rep, *[_PAD] * (4 * MAX_ZONES)])
            else:
                table.append([row.version, code, 0, len(ids), *rep, *c, *pad, *cb, *pad, *m, *pad, *ids, *pad])
            self._index_uids(row.index, row.uids)
        if len(rows) == 1:
            self.table[rows[0].index] = table[0]
        else:
            self.table[[row.index for row in rows]] = table
        built = np.fromiter((row.index for row in rows), dtype=np.int64, count=len(rows))
        self.stamp[built] = np.arange(self._stamps + 1, self._stamps + 1 + len(rows), dtype=np.int64)
        self._stamps += len(rows)

    def patch(self, i: int, avail: Mapping[int, Mapping[str, int]], changed: Iterable[int],
              free_cpu: Mapping[int, int] | None, uids: tuple[str, ...]) -> bool:
        """Rebuild row ``i`` in place where only the free amounts of the NUMA ids ``changed`` moved (the row
        as :meth:`set_rows` would make it from ``avail``, the same policy, totals and ``free_cpu``); False
        (nothing done) when the row goes to the exact path or a new amount is too large for the columns."""
        if self.exact[i]:
            return False
        ids = self.ids[i, : int(self.zones[i])].tolist()
        rep = self.reported[i].tolist()
        slots = []
        for n in changed:
            if n not in ids:
                continue
            res = avail.get(n, {})
            c = res.get("cpu", 0) if rep[0] else _UNREPORTED
            m = res.get("memory", 0) if rep[1] else _UNREPORTED
            cb = c if free_cpu is None or not rep[0] else min(c, free_cpu.get(n, 0) * 1000)
            if any(abs(v) >= _EXACT_LIMIT for v in (c, cb, m) if v != _UNREPORTED):
                return False
            slots.append((ids.index(n), c, cb, m))
        t = self.table[i]
        for z, c, cb, m in slots:
            t[_CPU + z], t[_CPU_BIND + z], t[_MEM + z] = c, cb, m
        self._index_uids(i, uids)
        self._stamps += 1
        self.stamp[i] = self._stamps
        return True

    def _index_uids(self, i: int, uids: tuple[str, ...]) -> None:
        for uid in self._row_uids.pop(i, ()):
            held = self.uid_rows.get(uid)
            if held is not None:
                held.discard(i)
                if not held:
                    del self.uid_rows[uid]
        if uids:
            self._row_uids[i] = uids
            for uid in uids:
                self.uid_rows.setdefault(uid, set()).add(i)


def decide(cols: NUMAColumns, idx: np.ndarray, pod_policy: str, requests: Mapping[str, int], bound: bool,
           uid: str) -> Verdict:
    """The policy's verdict on the nodes ``idx`` (their rows fresh) for a pod with ``pod_policy`` (its
    ``numaTopologyPolicy``), ``requests`` (canonical units), a bound cpuset or not (``bound``), and ``uid``."""
    m = len(idx)
    eff = cols.policy[idx]  # int64
    pod_code = POLICY_CODES[pod_policy]
    mismatch: list[int] = []
    if pod_code:
        bad = (eff != CODE_NONE) & (eff != pod_code)
        if bad.any():
            mismatch = np.flatnonzero(bad).tolist()
            eff = np.where(bad, CODE_NONE, pod_code)
        else:
            eff = np.full(m, pod_code, dtype=np.int64)
    on = eff != CODE_NONE
    slow_mask = on & (cols.exact[idx] != 0)
    held = cols.uid_rows.get(uid)
    if held:
        slow_mask |= on & np.isin(idx, np.fromiter(held, dtype=np.int64, count=len(held)))
    fast = on & ~slow_mask
    if fast.all():
        pos, rows, code = None, idx, eff
    else:
        pos = np.flatnonzero(fast)
        if len(pos) == 0:
            return Verdict(np.flatnonzero(slow_mask).tolist(), mismatch, np.full(m, -1, dtype=np.int64), False)
        rows, code = idx[pos], eff[pos]
    rc, rm = int(requests.get("cpu", 0)), int(requests.get("memory", 0))
    cpu = (cols.cpu_bind if bound else cols.cpu)[rows] if rc > 0 else None
    mem = cols.mem[rows] if rm > 0 else None
    # a NUMA node holds the pod alone: room for every requested resource (requests are at least 1, so a
    # padding slot or a NUMA node without any of a requested resource never fits)
    fit = (cpu >= rc) & (mem >= rm) if cpu is not None and mem is not None else (
        cpu >= rc if cpu is not None else mem >= rm if mem is not None else None)
    one = fit.view(np.uint64).ravel() != 0 if fit is not None else None
    if (code == CODE_SINGLE).all():
        sc = np.full(len(rows), 100, dtype=np.int64) if one is None else np.where(one, 100, -1)
    else:
        sc = _widths_score(cols, rows, code, cpu, mem, rc, rm, one)
    refused = sc < 0
    if pos is None:
        score = sc
        slow = np.flatnonzero(slow_mask | refused).tolist() if refused.any() or slow_mask.any() else []
    else:
        score = np.full(m, -1, dtype=np.int64)
        score[pos] = sc
        slow_mask[pos[refused]] = True
        slow = np.flatnonzero(slow_mask).tolist()
    return Verdict(slow, mismatch, score, bool((sc >= 0).any()))


def _widths_score(cols: NUMAColumns, rows: np.ndarray, code: np.ndarray, cpu: np.ndarray | None,
                  mem: np.ndarray | None, rc: int, rm: int, one: np.ndarray | None) -> np.ndarray:
    """Scores (-1: refused) of nodes under mixed policies: the narrowest set of NUMA nodes holding the pod."""
    zones = cols.zones[rows]
    every = 100 // np.maximum(zones, 1)
    rep = cols.reported[rows] != 0
    wanted = (rep[:, 0] & (rc > 0)) | (rep[:, 1] & (rm > 0))  # some requested resource the node reports
    width = np.full(len(rows), _NO_WIDTH, dtype=np.int64)
    if one is not None:
        width[one] = 1
        wide = np.flatnonzero(~one & wanted & (code != CODE_SINGLE))
        if len(wide):
            zb = int(zones[wide].max())
            width[wide] = _min_width(None if cpu is None else cpu[wide, :zb], None if mem is None else mem[wide, :zb],
                                     rc, rm, zb)
    found = width < _NO_WIDTH
    sc = np.where(wanted & found, 100 // np.where(found, width, 1), every)
    sc = np.where(code == CODE_SINGLE, 100, sc)
    refused = wanted & (((code == CODE_SINGLE) & (width != 1)) | ((code == CODE_RESTRICTED) & ~found))
    return np.where(refused, -1, sc)


def _min_width(cpu: np.ndarray | None, mem: np.ndarray | None, rc: int, rm: int, zb: int) -> np.ndarray:
    """The fewest NUMA nodes holding every requested resource together (``_NO_WIDTH``: none do): a set
    qualifies when each of its NUMA nodes has some of each requested resource free and the sums reach the
    requests (``resource_hints``). ``cpu``/``mem``: the free amounts of the first ``zb`` slots (``None``:
    not requested)."""
    masks, sizes, member = _SUBSETS[zb]
    lack_bits = np.zeros(len(cpu if cpu is not None else mem), dtype=np.int64)  # type: ignore[arg-type]
    fits = np.ones((len(lack_bits), len(masks)), dtype=bool)
    for amounts, want in ((cpu, rc), (mem, rm)):
        if amounts is not None:
            lack_bits |= (amounts < 1).astype(np.int64) @ _SLOT_BITS[:zb]
            fits &= (amounts.astype(np.float64) @ member.T) >= want
    fits &= (lack_bits[:, None] & masks[None, :]) == 0
    return np.where(fits.any(axis=1), sizes[fits.argmax(axis=1)], _NO_WIDTH)


def single_numa_with_providers(cols: NUMAColumns, rows: np.ndarray, requests: Mapping[str, int], bound: bool,
                               providers: list[Any]) -> np.ndarray:
    """SingleNUMANode's verdict on ``rows`` (error-free rows under that policy, fresh) for a pod whose other
    hints come from ``providers`` (:class:`~.api.SingleNUMAProvider`): some NUMA node holds the pod's cpu and
    memory alone and, for every provider that has a preference on the node, its resources too. The merge's
    closed form: under SingleNUMANode each resource keeps its preferred one-node hints, which are its
    one-node sets that hold it whenever there are any, and the merged hint is one NUMA node every resource
    keeps (a provider without a preference keeps any)."""
    rc, rm = int(requests.get("cpu", 0)), int(requests.get("memory", 0))
    ids = cols.ids[rows]
    fit = np.arange(MAX_ZONES)[None, :] < cols.zones[rows][:, None]
    if rc > 0:
        fit &= (cols.cpu_bind if bound else cols.cpu)[rows] >= rc
    if rm > 0:
        fit &= cols.mem[rows] >= rm
    zone_ids = sorted({int(z) for z in np.unique(ids).tolist() if z >= 0})
    for provider in providers:
        has, got = provider.single_numa(rows, zone_ids)
        per_slot = np.zeros_like(fit)
        for k, z in enumerate(zone_ids):
            per_slot |= (ids == z) & got[:, k:k + 1]
        fit &= np.where(has[:, None], per_slot, True)
    return fit.any(axis=1)


def reserve_single_numa(cols: NUMAColumns, i: int, pod_policy: str, requests: Mapping[str, int], bound: bool,
                        uid: str) -> tuple[list[int], dict[int, dict[str, int]]] | None:
    """What reserve takes on node ``i`` (its row fresh) under SingleNUMANode for a pod with only this plugin's
    hints: (the NUMA nodes, the split), or ``None`` when the exact path must say (another policy, a row the
    columns cannot describe, the pod's own share on the node, a requested resource the node does not
    report, or nothing fits: the refusal's reasons are the exact merge's).

    The merge's answer in closed form: under SingleNUMANode the hints kept are the one-NUMA-node sets
    holding every requested resource (the same list for cpu and memory), a pair of hints merges only when
    it is the same NUMA node, and of the merged hints (all preferred, score 0) the lowest-numbered wins.
    ``split_over`` on one NUMA node that holds the request takes all of each requested resource there."""
    pod_code = POLICY_CODES.get(pod_policy, -1)
    node_code = int(cols.policy[i])
    if cols.exact[i] or not ((node_code == CODE_SINGLE and pod_code in (CODE_NONE, CODE_SINGLE))
                             or (node_code == CODE_NONE and pod_code == CODE_SINGLE)):
        return None
    held = cols.uid_rows.get(uid)
    if held and i in held:
        return None
    want = [(k, int(requests.get(k, 0))) for k in RESOURCES]
    want = [(k, v) for k, v in want if v > 0]
    reported = cols.reported[i]
    if not want or not all(reported[RESOURCES.index(k)] for k, _ in want):
        return None
    free = {"cpu": (cols.cpu_bind if bound else cols.cpu)[i].tolist(), "memory": cols.mem[i].tolist()}
    for z in range(int(cols.zones[i])):
        if all(free[k][z] >= v for k, v in want):
            n = int(cols.ids[i, z])
            return [n], {n: dict(want)}
    return None
