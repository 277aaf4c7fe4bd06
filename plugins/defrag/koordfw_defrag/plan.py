"""One round's plan: migrations with reserved targets, budgets, PDBs and gangs.

Every migration names its target, checked with the scheduler's own pre_filter and filter plugins
while the pod is taken off its node (``handle.without_pods``) and while the requests of the moves
already planned in this round are counted on their targets. A node that loses a pod in the plan is
never a target of the same plan, so no move depends on another eviction having happened: each target
has the room now, and the plan can be executed in any order.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from koordfw import CycleState, Migration

from .args import Args
from .safety import PdbBudget, gang_id, unevictable_reason


@attrs.define
class PlanResult:
    """What :func:`koordfw_defrag.planner.plan` returns: the migrations and the metrics around them."""

    migrations: list[Migration] = attrs.field(factory=list)
    before: dict = attrs.field(factory=dict)
    after: dict = attrs.field(factory=dict)
    #: why a strategy did nothing or stopped early (human-readable)
    notes: list[str] = attrs.field(factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"migrations": [{"pod": m.pod, "from": m.from_node, "to": m.to, "reason": m.reason,
                                "plugin": m.plugin} for m in self.migrations],
                "before": self.before, "after": self.after, "notes": list(self.notes),
                "seconds": round(self.seconds, 6)}


class PlanBuilder:
    """Accumulates the migrations of one round and answers "may this pod go to that node now?"."""

    def __init__(self, cluster: Any, handle: Any, args: Args, plugin: str = "defrag") -> None:
        self.cluster, self.handle, self.args, self.plugin = cluster, handle, args, plugin
        self.migrations: list[Migration] = []
        self.moved: set[str] = set()
        self.sources: Counter[str] = Counter()
        self.targets: set[str] = set()
        self.namespaces: Counter[str] = Counter()
        self.pdb = PdbBudget(cluster.objects_of("PodDisruptionBudget"))
        self._in: dict[int, np.ndarray] = {}
        bound = sum(1 for e in cluster.pods.values() if e.node_index >= 0)
        limits = []
        if args.max_migrating_per_round:
            limits.append(args.max_migrating_per_round)
        if args.max_migrating_percent_per_round:
            limits.append(int(args.max_migrating_percent_per_round * bound / 100.0))
        self.round_limit: int | None = min(limits) if limits else None
        self._gangs: dict[str, list[Any]] | None = None

    # -- budgets ---------------------------------------------------------------------------------
    @property
    def round_left(self) -> int | None:
        return None if self.round_limit is None else self.round_limit - len(self.migrations)

    def budget_blocks(self, pods: Sequence[Any]) -> str | None:
        """Why moving all of ``pods`` together would break a budget (``None`` = it fits)."""
        left = self.round_left
        if left is not None and len(pods) > left:
            return "round budget exhausted"
        a = self.args
        if a.max_migrating_per_node:
            per = Counter(p.node_name for p in pods)
            if any(self.sources[n] + c > a.max_migrating_per_node for n, c in per.items()):
                return "per-node budget exhausted"
        if a.max_migrating_per_namespace:
            per = Counter(p.namespace for p in pods)
            if any(self.namespaces[n] + c > a.max_migrating_per_namespace for n, c in per.items()):
                return "per-namespace budget exhausted"
        return None

    def node_budget_left(self, node: str) -> bool:
        m = self.args.max_migrating_per_node
        return not m or self.sources[node] < m

    # -- gangs -------------------------------------------------------------------------------------
    def gang_members(self, pod: Any) -> list[Any]:
        """The pod alone, or every bound member of its Strict gang (they move together or not at all)."""
        gid = gang_id(pod)
        if not gid:
            return [pod]
        if self._gangs is None:
            self._gangs = {}
            for e in self.cluster.pods.values():
                if e.node_index >= 0:
                    g = gang_id(e.pod)
                    if g:
                        self._gangs.setdefault(g, []).append(e.pod)
            for ms in self._gangs.values():
                ms.sort(key=lambda p: p.key)
        return list(self._gangs.get(gid, [pod]))

    def blocked(self, pod: Any) -> str | None:
        """Why this pod cannot be planned at all: moved already, evictor filter, PDB, budgets."""
        if pod.uid in self.moved:
            return "already planned"
        r = unevictable_reason(pod)
        if r is not None:
            return r
        if not self.pdb.allows([pod]):
            return "PodDisruptionBudget allows no more disruptions"
        return self.budget_blocks([pod])

    # -- target checks -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _planned_applied(self) -> Iterator[None]:
        """Count the requests of planned moves on their targets (restored on exit: the handle's what-if)."""
        with contextlib.ExitStack() as stack:
            for i, vec in self._in.items():
                stack.enter_context(self.handle.with_requests_held(self.cluster.views[i].name, vec))
            yield

    async def _prefilter(self, pod: Any) -> tuple[CycleState, frozenset[str] | None] | None:
        """The scheduler's pre_filter plugins, as in a scheduling cycle (None = the pod fits nowhere)."""
        state = CycleState()
        st, allowed = await self.handle.run_pre_filters(pod, state)
        if not st.ok:
            return None
        return state, allowed

    async def fits(self, pod: Any, node: str) -> bool:
        """Would the scheduler accept ``pod`` on ``node`` now, with this plan's moves counted?"""
        if node == pod.node_name or node in self.sources or self.cluster.node(node) is None:
            return False
        return bool(await self.first_fit(pod, [node]))

    async def first_fit(self, pod: Any, nodes: Iterable[str], extra: Any = None) -> str | None:
        """The first of ``nodes`` that passes the scheduler's filters (and ``extra(node)``, if given)."""
        cands = [n for n in nodes if n != pod.node_name and n not in self.sources and self.cluster.node(n) is not None]
        if not cands:
            return None
        self.cluster.request_vector(pod)  # add any new resource column before the columns are patched
        ctx = self.handle.without_pods(pod.node_name, [pod]) if pod.node_name else contextlib.nullcontext()
        with ctx, self._planned_applied():
            pre = await self._prefilter(pod)
            if pre is None:
                return None
            state, allowed = pre
            for n in cands:
                if allowed is not None and n not in allowed:
                    continue
                if extra is not None and not extra(n):
                    continue
                st = await self.handle.run_filters(pod, n, state)
                if st.ok:
                    return n
        return None

    # -- committing ----------------------------------------------------------------------------------
    def _reserve(self, pod: Any, to: str) -> None:
        i = self.cluster.node_index(to)
        vec = self.cluster.request_vector(pod)
        cur = self._in.get(i)
        if cur is None:
            self._in[i] = vec.copy()
            return
        n = max(len(cur), len(vec))
        self._in[i] = np.pad(cur, (0, n - len(cur))) + np.pad(vec, (0, n - len(vec)))

    def add(self, moves: Sequence[tuple[Any, str]], reason: str, plugin: str | None = None) -> None:
        """Record moves ``[(pod, target)]`` (already checked) and reserve their targets."""
        for pod, to in moves:
            self._reserve(pod, to)
            self.moved.add(pod.uid)
            self.sources[pod.node_name] += 1
            self.targets.add(to)
            self.namespaces[pod.namespace] += 1
            self.migrations.append(Migration(pod=pod.key, from_node=pod.node_name, to=to, reason=reason,
                                             plugin=plugin or self.plugin))
        self.pdb.take([p for p, _ in moves])

    async def place_group(self, members: Sequence[Any], choose: Any) -> list[tuple[Any, str]] | None:
        """Find targets for every member (``await choose(pod)`` → node or None), each counting the
        members placed before it; ``None`` (nothing reserved) if one has no target or a check fails."""
        for p in members:
            if p.uid in self.moved or unevictable_reason(p) is not None:
                return None
        if not self.pdb.allows(members) or self.budget_blocks(members) is not None:
            return None
        placed: list[tuple[Any, str]] = []
        saved = {i: v.copy() for i, v in self._in.items()}
        try:
            for p in members:
                to = await choose(p)
                if to is None:
                    return None
                placed.append((p, to))
                self._reserve(p, to)
            return placed
        finally:
            self._in = saved
