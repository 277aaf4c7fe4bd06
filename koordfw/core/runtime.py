"""The plugin runtime (kube's ``framework/runtime/framework.go``): one ``run_<point>`` per extension
point, each returning a :class:`Status` (a plugin that raised or timed out is an Error status naming
it; nothing else escapes).

The scheduling and binding cycles that call these live in :mod:`koordfw.core.schedule_one`; the
extender, ``reserve_placed``, preemption and what-if planners call them too, through the
:class:`~koordfw.core.handle.PluginsRunner` half of the handle, so there is one implementation of
each point's semantics:

* pre_filter: Skip disables that plugin's filter; a :class:`PreFilterResult` narrows the candidate
  nodes (intersected); Unresolvable or Error stops at once, Unschedulable lets the rest run.
* filter: batch or per-node, over node indices, with nominated pods of higher or equal priority
  counted on their nodes; rejections collected per node in :class:`NodeStatuses`.
* score: pre_score (Skip disables that plugin's score), score, normalize_score, [0, 100] validation,
  profile weights.
* reserve / unreserve (reverse order, all run) / permit (allow, reject, wait with a timeout per
  plugin) / pre_bind (annotation dicts collected into the state) / bind (first non-Skip) / post_bind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import structlog

from .caller import HookCaller, Pending, PluginFailure, Prepared
from .cluster import ClusterState, NodeBatch, NodeView
from .hints import ClusterEventWithHint
from .model import Pod
from .nominator import Nominator
from .plugins import Impl, Registry
from .results import (
    NodeStatuses,
    PostFilterResult,
    PreFilterResult,
    filter_rejections,
    node_statuses,
    score_array,
    shared_status,
)
from .state import CycleState, StateKey
from .status import Code, Status, as_status

log = structlog.get_logger("koordfw")

MAX_NODE_SCORE = 100
MAX_PERMIT_TIMEOUT = 15 * 60.0

#: the arguments each point's call site passes (by position, to :meth:`HookCaller.call_sync`)
_PASSED: dict[str, tuple[str, ...]] = {
    "pre_enqueue": ("pod",), "pre_filter": ("pod", "state"), "filter": ("pod", "nodes", "state"),
    "pre_score": ("pod", "nodes", "state"), "score": ("pod", "nodes", "state"),
    "normalize_score": ("pod", "nodes", "scores", "state")}
#: per-node filters and scores, and the points after a node is chosen
_ON_NODE: tuple[str, ...] = ("pod", "node", "state")

__all__ = ["Framework", "MAX_NODE_SCORE", "MAX_PERMIT_TIMEOUT", "RESTORED_REQUESTS"]

#: requests that count as free on some nodes while one pod's filters and scores run: node index → a
#: request vector (aligned with the cluster's resources) taken off that node's ``requested`` meanwhile.
#: Written by :meth:`koordfw.Handle.restore_requests` (a pre_filter restoring what a reservation holds
#: for its owner: Koordinator's restore-reservation transformer); honoured by every ``run_filters`` and
#: ``run_score`` of the cycle, what-ifs included, and undone after each.
RESTORED_REQUESTS: StateKey[dict[int, np.ndarray]] = StateKey("koordfw/restored_requests")


class Framework:
    """The profile's plugins for one engine, run point by point over a ClusterState."""

    def __init__(self, registry: Registry, cluster: ClusterState, nominator: Nominator,
                 handle_for: Callable[[str], Any]) -> None:
        self.registry, self.cluster, self.nominator = registry, cluster, nominator
        self.profile = registry.profile
        self.caller = HookCaller(registry, handle_for)
        self._pos = np.full(0, -1, dtype=np.int64)
        #: point → (the implementation list they were made from, prepared calls)
        self._calls: dict[str, tuple[list[Impl], list[Prepared]]] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the ordered implementations (after the registry changed)."""
        reg = self.registry
        qs = reg.impls("queue_sort")
        self.queue_sort_impl = qs[0] if qs else None
        self._queue_sort: Prepared | None = None  # prepared on first use (the handles may not exist yet)
        self.has_scoring = bool(reg.impls("score"))
        self._filter_impls = reg.impls("filter")
        self._normalizers = {i.plugin: i for i in reg.impls("normalize_score")}
        self._calls = {}
        self._normalize_calls: dict[str, Prepared] = {}

    def _prepared(self, point: str, impls: list[Impl] | None = None) -> list[Prepared]:
        """The point's implementations prepared for :meth:`HookCaller.call_sync` (made again when the
        registry's list changes; ``impls``: a list other than the registry's, the filters read at refresh)."""
        if impls is None:
            impls = self.registry.impls(point)
        c = self._calls.get(point)
        if c is not None and c[0] is impls:
            return c[1]
        passed = _PASSED.get(point, _ON_NODE)
        prepared = [self.caller.prepared(i, _ON_NODE if i.per_node else passed) for i in impls]
        self._calls[point] = (impls, prepared)
        return prepared

    def _normalizer(self, plugin: str) -> Prepared | None:
        p = self._normalize_calls.get(plugin)
        if p is None:
            impl = self._normalizers.get(plugin)
            if impl is None:
                return None
            p = self._normalize_calls[plugin] = self.caller.prepared(impl, _PASSED["normalize_score"])
        return p

    # -- queue ----------------------------------------------------------------------------------
    def queue_sort_key(self, pod: Pod) -> Any:
        """The queue_sort plugin's key for ``pod`` (None: the plugin has no opinion, or it failed, and the
        queue's default order applies). Called through the caller as every hook is (timing, the
        current-plugin marker, a failure logged naming the plugin); a key must be computed synchronously,
        so an awaitable result is refused (logged) as a failure."""
        p = self._queue_sort
        if p is None:
            impl = self.queue_sort_impl
            if impl is None:
                return None
            p = self._queue_sort = self.caller.prepared(impl, ("pod",))
        try:
            res = self.caller.call_sync(p, pod)
        except PluginFailure:  # logged by the caller; a broken sort key must not stop the queue
            return None
        if type(res) is Pending:
            res.discard()
            log.error("queue_sort returned an awaitable; a sort key must be computed synchronously",
                      plugin=p.plugin, hook="queue_sort")
            return None
        return res

    async def run_pre_enqueue(self, pod: Pod) -> Status:
        caller = self.caller
        for p in self._prepared("pre_enqueue"):
            try:
                res = caller.call_sync(p, pod)
                if type(res) is Pending:
                    res = await res
                st = as_status(res, p.plugin)
            except PluginFailure as f:
                return f.status
            if not st.ok:
                return st
        return Status.success()

    async def events_to_register(self) -> dict[str, list[ClusterEventWithHint]]:
        """Every plugin's queueing-hint registrations (kube's EnqueueExtensions), by plugin; plugins
        that do not implement ``events_to_register`` are absent (they get the default events)."""
        out: dict[str, list[ClusterEventWithHint]] = {}
        for impl in self.caller.impls("events_to_register"):
            try:
                res = await self.caller.call(impl)
            except PluginFailure as f:
                log.error("events_to_register failed; the plugin gets the default events", plugin=impl.plugin,
                          error=f.status.message)
                continue
            if res is None:
                continue
            regs = list(res)
            bad = [r for r in regs if not isinstance(r, ClusterEventWithHint)]
            if bad:
                log.error("events_to_register returned something other than ClusterEventWithHint; the plugin "
                          "gets the default events", plugin=impl.plugin, got=type(bad[0]).__name__)
                continue
            out[impl.plugin] = regs
        return out

    # -- filtering --------------------------------------------------------------------------------
    async def run_pre_filter(self, pod: Pod, state: CycleState) -> tuple[Status, frozenset[str] | None]:
        """(status, candidate node names or None for all). Skip results are recorded in ``state``; an
        Unresolvable or Error status stops at once, Unschedulable lets the rest run."""
        candidates: frozenset[str] | None = None
        unsched: Status | None = None
        caller = self.caller
        for p in self._prepared("pre_filter"):
            try:
                res = caller.call_sync(p, pod, state)
                if type(res) is Pending:
                    res = await res
            except PluginFailure as f:
                return f.status, None
            if res is None:
                continue
            if type(res) is Status and res.code == Code.SKIP:  # the common answer: no tagged copy needed
                state.skip_filter.add(p.plugin)
                continue
            impl = p.impl
            if isinstance(res, PreFilterResult):
                if res.node_names is not None:
                    names = frozenset(res.node_names)
                    candidates = names if candidates is None else candidates & names
                continue
            st = as_status(res, impl.plugin)
            if st.code == Code.SKIP:
                state.skip_filter.add(impl.plugin)
            elif st.code in (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR):
                return st, None
            elif st.code == Code.UNSCHEDULABLE:
                unsched = unsched or st
        return (unsched or Status.success()), candidates

    async def run_pre_filter_extension(self, point: str, pod: Pod, state: CycleState, other: Pod,
                                       node: NodeView) -> Status:
        """kube's ``RunPreFilterExtensionAddPod`` / ``RemovePod`` (``point``: ``pre_filter_add_pod`` or
        ``pre_filter_remove_pod``; ``other`` the pod added or removed): in profile order, not the plugins whose
        pre_filter returned Skip for ``state``; the first non-success (or a plugin that raised) stops."""
        kw = {"pod": pod, "state": state, "node": node,
              ("pod_to_add" if point == "pre_filter_add_pod" else "pod_to_remove"): other}
        for impl in self.caller.impls(point):
            if impl.plugin in state.skip_filter:
                continue
            try:
                st = as_status(await self.caller.call(impl, **kw), impl.plugin)
            except PluginFailure as f:
                return f.status
            if not st.ok:
                return st
        return Status.success()

    async def run_filters(self, pod: Pod, state: CycleState, idx: np.ndarray
                          ) -> tuple[Status, np.ndarray, NodeStatuses]:
        """The filters over node indices ``idx`` (all of them), nominated pods counted:
        (Error status if a plugin failed, else success; feasible indices; node name → rejection)."""
        try:
            restored = state.get(RESTORED_REQUESTS)
            if restored or self.nominator:
                ok, statuses = await self._filter_nodes(pod, state, idx)
            else:  # nothing to count or restore: the filters alone (two coroutines fewer)
                ok, statuses = await self._run_filter_plugins(pod, state, idx)
        except PluginFailure as f:
            return f.status, np.zeros(0, dtype=np.int64), NodeStatuses(self.cluster)
        return Status.success(), ok, statuses

    async def run_filters_on_node(self, pod: Pod, node_name: str, state: CycleState) -> Status:
        i = self.cluster.node_index(node_name)
        if i is None:
            return Status.unresolvable(f"node {node_name} not found")
        st, ok, statuses = await self.run_filters(pod, state, np.array([i], dtype=np.int64))
        if not st.ok or len(ok):
            return st
        return statuses.get(node_name, Status.unschedulable("rejected"))

    async def _filter_nodes(self, pod: Pod, state: CycleState, sub: np.ndarray) -> tuple[np.ndarray, NodeStatuses]:
        """The filters over ``sub`` with nominated pods counted; raises :class:`PluginFailure`, which
        :meth:`run_filters` turns into its status."""
        restored = state.get(RESTORED_REQUESTS)
        if restored:
            with self._restored(restored):
                return await self._filter_nodes_nominated(pod, state, sub)
        return await self._filter_nodes_nominated(pod, state, sub)

    @contextlib.contextmanager
    def _restored(self, restored: dict[int, np.ndarray]) -> Iterator[None]:
        """While inside, the ``restored`` requests are taken off their nodes' ``requested``."""
        cluster = self.cluster
        for i, vec in restored.items():
            cluster.add_requested(i, -vec)
        try:
            yield
        finally:
            for i, vec in restored.items():
                cluster.add_requested(i, vec)

    async def _filter_nodes_nominated(self, pod: Pod, state: CycleState,
                                      sub: np.ndarray) -> tuple[np.ndarray, NodeStatuses]:
        if self.nominator:
            with self.nominator.counted(pod, sub):
                return await self._run_filter_plugins(pod, state, sub)
        return await self._run_filter_plugins(pod, state, sub)

    async def _run_filter_plugins(self, pod: Pod, state: CycleState,
                                  sub: np.ndarray) -> tuple[np.ndarray, NodeStatuses]:
        cluster = self.cluster
        statuses = NodeStatuses(cluster)
        cur = sub
        skip = state.skip_filter
        caller = self.caller
        call_sync = caller.call_sync
        for p in self._prepared("filter", self._filter_impls):
            if skip and p.plugin in skip:
                continue
            n = len(cur)
            if n == 0:
                break
            impl = p.impl
            if impl.per_node:
                cur = await self._filter_per_node(p, pod, state, cur, statuses)
                continue
            res = call_sync(p, pod, NodeBatch(cluster, cur), state)
            if type(res) is Pending:
                res = await res
            if res is None:
                continue
            if type(res) is tuple and len(res) == 2 and type(res[0]) is np.ndarray:
                # the common (mask, reason or reasons) form, without building position lists
                ok, reason = res
                if ok.shape != (n,):
                    raise PluginFailure(Status.error(
                        f"plugin {impl.plugin} returned a mask of {ok.size} for {n} nodes", impl.plugin))
                if ok.dtype != np.bool_:
                    ok = ok != 0
                if np.count_nonzero(ok) == n:
                    continue
                if reason is None or type(reason) is str or isinstance(reason, Status):
                    statuses.add(cur[~ok], shared_status(impl.plugin, reason))
                else:
                    bad = (~ok).nonzero()[0]
                    reasons = reason if type(reason) is list else list(reason)
                    picked = [reasons[j] for j in bad.tolist()]
                    first = picked[0]
                    if all(r is first for r in picked):  # one reason object (one taint, one shortage): shared
                        st = as_status(first, impl.plugin)
                        if st.code == Code.ERROR:
                            raise PluginFailure(st)
                        statuses.add(cur[bad], st)
                    else:
                        statuses.add(cur[bad], node_statuses(impl.plugin, picked))
                cur = cur[ok]
                continue
            rejected, reasons = self._filter_rejections(impl, res, cur)
            if len(rejected) == 0:
                continue
            if isinstance(reasons, list):
                statuses.add(cur[rejected], node_statuses(impl.plugin, reasons))
            else:
                statuses.add(cur[rejected], shared_status(impl.plugin, reasons))
            keep = np.ones(n, dtype=bool)
            keep[rejected] = False
            cur = cur[keep]
        return cur, statuses

    async def _filter_per_node(self, p: Prepared, pod: Pod, state: CycleState, cur: np.ndarray,
                               statuses: NodeStatuses) -> np.ndarray:
        views = self.cluster.views
        keep = np.ones(len(cur), dtype=bool)
        caller, impl = self.caller, p.impl
        for j, gi in enumerate(cur.tolist()):
            res = caller.call_sync(p, pod, views[gi], state)
            if type(res) is Pending:
                res = await res
            if res is None or res is True:
                continue
            st = as_status(res, impl.plugin)
            if st.ok:
                continue
            if st.code == Code.ERROR:
                raise PluginFailure(st)
            keep[j] = False
            statuses.add(np.array([gi]), st)
        return cur[keep]

    def _filter_rejections(self, impl: Impl, res: Any, cur: np.ndarray) -> tuple[np.ndarray, Any]:
        if len(self._pos) < self.cluster.num_nodes:
            self._pos = np.full(max(self.cluster.num_nodes, 2 * len(self._pos)), -1, dtype=np.int64)
        return filter_rejections(impl.plugin, res, cur, self.cluster, self._pos)

    async def run_post_filter(self, pod: Pod, state: CycleState,
                              statuses: Mapping[str, Status]) -> tuple[Status, PostFilterResult | None]:
        """post_filter in profile order until one makes room (a PostFilterResult) or says Unresolvable /
        Error; a plugin that raised stops the point."""
        for impl in self.caller.impls("post_filter"):
            try:
                res = await self.caller.call(impl, pod=pod, state=state, statuses=statuses)
            except PluginFailure as f:
                log.warning("post_filter failed", plugin=impl.plugin, status=str(f.status))
                return f.status, None
            if res is None:
                continue
            if isinstance(res, PostFilterResult):
                return Status.success(), res
            pst = as_status(res, impl.plugin)
            if pst.ok or pst.code in (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR):
                return pst, None
        return Status.unschedulable("no post_filter plugin made room"), None

    # -- scoring ------------------------------------------------------------------------------------
    async def run_score(self, pod: Pod, state: CycleState, feasible: np.ndarray
                        ) -> tuple[Status, np.ndarray, int]:
        """pre_score, score, normalize_score (validated to [0, 100]) and weights over ``feasible`` node
        indices: (status, weighted totals aligned with ``feasible``, the highest total possible)."""
        try:
            if state.get(RESTORED_REQUESTS):
                total, top = await self._score_nodes(pod, state, feasible)
            else:
                total, top = await self._score_nodes_now(pod, state, feasible)
        except PluginFailure as f:
            return f.status, np.zeros(len(feasible), dtype=np.int64), 0
        return Status.success(), total, top

    async def _score_nodes(self, pod: Pod, state: CycleState, feasible: np.ndarray) -> tuple[np.ndarray, int]:
        """:meth:`run_score` raising :class:`PluginFailure` instead of returning it."""
        restored = state.get(RESTORED_REQUESTS)
        if restored:
            with self._restored(restored):
                return await self._score_nodes_now(pod, state, feasible)
        return await self._score_nodes_now(pod, state, feasible)

    async def _score_nodes_now(self, pod: Pod, state: CycleState, feasible: np.ndarray) -> tuple[np.ndarray, int]:
        cluster = self.cluster
        caller = self.caller
        call_sync = caller.call_sync
        batch = NodeBatch(cluster, feasible)
        for p in self._prepared("pre_score"):
            res = call_sync(p, pod, batch, state)
            if type(res) is Pending:
                res = await res
            if res is None:
                continue
            if type(res) is Status and res.code == Code.SKIP:  # the common answer: no tagged copy needed
                state.skip_score.add(p.plugin)
                continue
            impl = p.impl
            st = as_status(res, impl.plugin)
            if st.code == Code.SKIP:
                state.skip_score.add(impl.plugin)
            elif not st.ok:
                raise PluginFailure(st if st.code == Code.ERROR else Status.error(st.message, impl.plugin))
        total: np.ndarray | None = None
        max_total = 0
        skip = state.skip_score
        for p in self._prepared("score"):
            if skip and p.plugin in skip:
                continue
            impl = p.impl
            if impl.per_node:
                vals = []
                for v in batch:
                    r = call_sync(p, pod, v, state)
                    if type(r) is Pending:
                        r = await r
                    vals.append(r or 0)
                arr = np.asarray(vals, dtype=np.int64)
            else:
                res = call_sync(p, pod, batch, state)
                if type(res) is Pending:
                    res = await res
                if res is None:
                    continue
                arr = score_array(impl.plugin, res, batch)
            norm = self._normalizer(impl.plugin)
            if norm is not None:
                out = call_sync(norm, pod, batch, arr, state)
                if type(out) is Pending:
                    out = await out
                if out is not None:
                    arr = score_array(norm.impl.plugin, out, batch)
            # one reduction checks both bounds: a negative int64 viewed as uint64 is above 100
            if len(arr) and arr.view(np.uint64).max() > MAX_NODE_SCORE:
                bad = int(arr.max() if arr.max() > MAX_NODE_SCORE else arr.min())
                raise PluginFailure(Status.error(
                    f"plugin {impl.plugin} returned a score of {bad}, outside [0, {MAX_NODE_SCORE}]", impl.plugin))
            w = impl.weight
            if total is None:
                total = arr * w if w != 1 else arr.copy()
            else:
                total += arr * w if w != 1 else arr
            max_total += MAX_NODE_SCORE * w
        return (total if total is not None else np.zeros(len(feasible), dtype=np.int64)), max_total

    # -- reserve / permit -------------------------------------------------------------------------
    async def run_reserve(self, pod: Pod, node: NodeView, state: CycleState) -> Status:
        for p in self._prepared("reserve"):
            try:
                st = as_status(await self.caller.call_prepared(p, pod, node, state), p.plugin)
            except PluginFailure as f:
                return f.status
            if not st.ok:
                return st
        return Status.success()

    async def run_unreserve(self, pod: Pod, node: NodeView, state: CycleState) -> None:
        """unreserve of every reserve plugin, in reverse order; a failing one does not stop the rest."""
        for p in reversed(self._prepared("unreserve")):
            try:
                await self.caller.call_prepared(p, pod, node, state)
            except PluginFailure:
                pass  # logged by the caller; unreserve of the others must still run

    async def run_permit(self, pod: Pod, node: NodeView, state: CycleState) -> tuple[Status, dict[str, float]]:
        """(status, plugin → seconds to wait) — a Wait from any plugin holds the pod at Permit."""
        waits: dict[str, float] = {}
        for p in self._prepared("permit"):
            impl = p.impl
            try:
                res = await self.caller.call_prepared(p, pod, node, state)
            except PluginFailure as f:
                return f.status, {}
            st = as_status(res, impl.plugin)
            if st.code == Code.WAIT:
                waits[impl.plugin] = min(st.timeout or MAX_PERMIT_TIMEOUT, MAX_PERMIT_TIMEOUT)
            elif not st.ok:
                if st.is_rejection or st.code == Code.ERROR:
                    return st, {}
                return Status.error(f"plugin {impl.plugin} returned {st.code.name} from permit", impl.plugin), {}
        return Status.success(), waits

    # -- binding ------------------------------------------------------------------------------------
    async def run_pre_bind(self, pod: Pod, node: NodeView, state: CycleState) -> Status:
        """pre_bind in profile order; annotation dicts are collected into ``state.annotations``."""
        for p in self._prepared("pre_bind"):
            impl = p.impl
            try:
                res = await self.caller.call_prepared(p, pod, node, state)
            except PluginFailure as f:
                return f.status
            if res is None:
                continue
            if isinstance(res, dict):
                state.annotations.update({str(k): str(v) for k, v in res.items()})
                continue
            st = as_status(res, impl.plugin, default_code=Code.ERROR)
            if not st.ok:
                return st
        return Status.success()

    async def run_bind(self, pod: Pod, node: NodeView, state: CycleState, only: str | None = None) -> Status:
        """The first bind plugin that returns something other than None or Skip binds the pod (or fails).
        ``only``: call that plugin's bind alone (a placeholder pod's own plugin), None or Skip from it
        meaning bound (there is nothing else to bind)."""
        for p in self._prepared("bind"):
            impl = p.impl
            if only is not None and impl.plugin != only:
                continue
            try:
                res = await self.caller.call_prepared(p, pod, node, state)
            except PluginFailure as f:
                return f.status
            if res is None:
                continue
            st = as_status(res, impl.plugin, default_code=Code.ERROR)
            if st.code == Code.SKIP:
                continue
            return st
        if only is not None:
            return Status.success()
        return Status.error("no bind plugin bound the pod")

    async def run_error_handler(self, pod: Pod, status: Status) -> None:
        """error_handler of every plugin, after a failed attempt; a plugin that raised is logged by the
        caller and the others still run."""
        for impl in self.caller.impls("error_handler"):
            try:
                await self.caller.call(impl, pod=pod, status=status)
            except PluginFailure:
                pass

    async def run_post_bind(self, pod: Pod, node: NodeView, state: CycleState) -> None:
        for p in self._prepared("post_bind"):
            try:
                await self.caller.call_prepared(p, pod, node, state)
            except PluginFailure:
                pass  # logged by the caller; the pod is bound, and the other post_bind plugins still run
