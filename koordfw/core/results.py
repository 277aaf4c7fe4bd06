"""What the scheduling points return and hold, and how the runtime reads plugins' results: the
per-node rejections of a filter search (:class:`NodeStatuses`, summed up by :func:`fit_error` as kube's
FitError), :class:`PreFilterResult` / :class:`PostFilterResult`, a pod waiting at permit
(:class:`WaitingPod`), and the readers that turn a filter's or score's result into statuses and score
arrays, refusing a malformed one as an Error naming the plugin."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from typing import Any, TypeAlias

import anyio
import attrs
import numpy as np

from .caller import PluginFailure
from .clock import Clock, TimerHandle
from .cluster import ClusterState, NodeBatch
from .model import Pod
from .status import Code, Status, as_status


class NodeStatuses(Mapping[str, Status]):
    """Node name → rejecting Status, kept as (node indices, statuses) chunks and built on first use."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster
        self._chunks: list[tuple[np.ndarray, list[Status] | Status]] = []
        self._dict: dict[str, Status] | None = None

    def add(self, idx: np.ndarray, statuses: list[Status] | Status) -> None:
        """Rejections of the nodes ``idx``: one status each, or one status shared by all of them."""
        self._chunks.append((idx, statuses))
        self._dict = None

    def update(self, other: NodeStatuses) -> None:
        self._chunks.extend(other._chunks)
        self._dict = None

    def _build(self) -> dict[str, Status]:
        if self._dict is None:
            views = self._cluster.views
            d: dict[str, Status] = {}
            for idx, sts in self._chunks:
                if isinstance(sts, Status):
                    for i in idx.tolist():
                        d[views[i].node.name] = sts
                else:
                    for i, st in zip(idx.tolist(), sts):
                        d[views[i].node.name] = st
            self._dict = d
        return self._dict

    def __getitem__(self, name: str) -> Status:
        return self._build()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())

    # the Mapping mixins would call __getitem__ per key; go to the built dict directly
    def values(self) -> ValuesView[Status]:
        return self._build().values()

    def items(self) -> ItemsView[str, Status]:
        return self._build().items()

    def get(self, name: str, default: Any = None) -> Any:
        return self._build().get(name, default)


@attrs.frozen
class PreFilterResult:
    """Returned by ``pre_filter`` to restrict the candidate nodes (``None`` = all)."""

    node_names: frozenset[str] | None = None


@attrs.frozen
class PostFilterResult:
    """Returned by ``post_filter`` after making room: the node the pod should try next."""

    nominated_node: str


class WaitingPod:
    """A pod held at Permit: keeps its reservation until every waiting plugin allows it, one rejects
    it, or a plugin's timer fires."""

    def __init__(self, pod: Pod, node_name: str, timeouts: dict[str, float], clock: Clock) -> None:
        self.pod, self.node_name = pod, node_name
        self.status: Status | None = None
        self._event = anyio.Event()
        now = clock.now()
        self._pending: dict[str, TimerHandle] = {
            p: clock.call_at(now + t, functools.partial(self._timeout, p, t)) for p, t in timeouts.items()}

    @property
    def pending_plugins(self) -> list[str]:
        return sorted(self._pending)

    def allow(self, plugin: str) -> None:
        h = self._pending.pop(plugin, None)
        if h is not None:
            h.cancel()
        if not self._pending and self.status is None:
            self.status = Status.success()
            self._event.set()

    def reject(self, plugin: str, message: str) -> None:
        if self.status is not None:
            return
        for h in self._pending.values():
            h.cancel()
        self._pending.clear()
        self.status = Status.unschedulable(message, plugin=plugin)
        self._event.set()

    def _timeout(self, plugin: str, seconds: float) -> None:
        self.reject(plugin, f"rejected due to timeout after waiting {seconds:g}s at plugin {plugin}")

    async def wait(self) -> Status:
        await self._event.wait()
        assert self.status is not None
        return self.status


def fit_error(n_all: int, statuses: Mapping[str, Status]) -> Status:
    """kube's ``FitError``: "0/N nodes are available: <count> <reason>, ..." from the per-node
    rejections; Unresolvable only when every node's rejection is."""
    counts: Counter[str] = Counter()
    unresolvable = True
    for st in statuses.values():
        for r in st.reasons or (f"rejected by {st.plugin}",):
            counts[r] += 1
        if st.code != Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            unresolvable = False
    detail = ", ".join(f"{c} {r}" for r, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    msg = f"0/{n_all} nodes are available" + (f": {detail}." if detail else ".")
    plugins = sorted({st.plugin for st in statuses.values() if st.plugin})
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable and statuses else Code.UNSCHEDULABLE
    return Status(code, (msg,), ",".join(plugins) or None)


def filter_rejections(plugin: str, res: Any, cur: np.ndarray, cluster: ClusterState,
                      pos: np.ndarray) -> tuple[np.ndarray, Any]:
    """Normalise a batch filter result to (positions rejected in ``cur``, their reasons): a list
    aligned with the positions, or one reason shared by all of them. ``pos``: the runtime's scratch array
    of -1, at least ``cluster.num_nodes`` long (left as it was found); a malformed result raises
    :class:`PluginFailure` naming ``plugin``."""
    n = len(cur)
    if type(res) is tuple and len(res) == 2 and isinstance(res[0], np.ndarray):
        ok, reason = res
        if ok.shape != (n,):
            raise PluginFailure(Status.error(
                f"plugin {plugin} returned a mask of {ok.size} for {n} nodes", plugin))
        bad = (ok == 0).nonzero()[0]
        if isinstance(reason, (str, Status)) or reason is None:
            return bad, reason or f"node(s) rejected by {plugin}"
        reasons = list(reason)
        return bad, [reasons[j] for j in bad.tolist()]
    if isinstance(res, dict):
        if not res:
            return np.zeros(0, dtype=np.int64), []
        pos[cur] = np.arange(n)
        js, rs = [], []
        for name, reason in res.items():
            gi = cluster.node_index(name)
            j = int(pos[gi]) if gi is not None else -1
            if j < 0 or reason is None or reason is True:
                continue
            if isinstance(reason, Status) and reason.ok:
                continue
            js.append(j)
            rs.append(reason)
        pos[cur] = -1
        return np.asarray(js, dtype=np.int64), rs
    if isinstance(res, np.ndarray) and res.dtype == bool:
        if res.shape != (n,):
            raise PluginFailure(Status.error(
                f"plugin {plugin} returned {res.size} filter results for {n} nodes", plugin))
        return (~res).nonzero()[0], f"node(s) rejected by {plugin}"
    try:
        items = list(res)
    except TypeError:
        raise PluginFailure(Status.error(
            f"plugin {plugin} returned an unexpected {type(res).__name__} from filter", plugin)) from None
    if len(items) != n:
        raise PluginFailure(Status.error(
            f"plugin {plugin} returned {len(items)} filter results for {n} nodes", plugin))
    js, rs = [], []
    for j, r in enumerate(items):
        if r is None or r is True or (isinstance(r, np.bool_) and bool(r)):
            continue
        if isinstance(r, Status) and r.ok:
            continue
        js.append(j)
        rs.append(bool(r) if isinstance(r, np.bool_) else r)
    return np.asarray(js, dtype=np.int64), rs


def shared_status(plugin: str, reason: Any) -> Status:
    """The rejection status of one reason shared by every node a filter call rejected."""
    st = as_status(reason or f"node(s) rejected by {plugin}", plugin)
    if st.code == Code.ERROR:
        raise PluginFailure(st)
    return st


def node_statuses(plugin: str, reasons: list[Any]) -> list[Status]:
    """Per-node rejection statuses (each distinct reason object is converted once)."""
    conv: dict[int, Status] = {}
    for r in reasons:
        if id(r) not in conv:
            st = conv[id(r)] = as_status(r, plugin)
            if st.code == Code.ERROR:
                raise PluginFailure(st)
    return [conv[id(r)] for r in reasons]


def score_array(plugin: str, res: Any, batch: NodeBatch) -> np.ndarray:
    """A score result as int64 scores aligned with ``batch``."""
    n = len(batch.idx)
    if type(res) is np.ndarray and res.dtype == np.int64:
        arr = res
    elif isinstance(res, dict):
        return np.fromiter((int(res.get(name, 0)) for name in batch.names), dtype=np.int64, count=n)
    else:
        try:
            arr = np.asarray(res).astype(np.int64, copy=False)
        except (TypeError, ValueError):
            raise PluginFailure(Status.error(
                f"plugin {plugin} returned an unexpected {type(res).__name__} from score",
                plugin)) from None
    if arr.shape != (n,):
        raise PluginFailure(Status.error(
            f"plugin {plugin} returned {arr.size} scores for {n} nodes", plugin))
    return arr


def normalize(scores: Any, reverse: bool = False, max_priority: int = 100) -> np.ndarray:
    """kube's DefaultNormalizeScore: ``max_priority * s / max(s)`` (integer), optionally reversed."""
    arr = np.asarray(scores, dtype=np.int64)
    top = int(arr.max()) if arr.size else 0
    if top == 0:
        return np.full_like(arr, max_priority if reverse else 0)
    out = max_priority * arr // top
    return max_priority - out if reverse else out


# What hooks return (the types of docs/hooks.md and koordfw.hookspecs); every shape the runtime accepts.
#: A rejection reason as plugins give it: a string (``Unschedulable`` with that message), a
#: :class:`Status`, or ``False`` (a bare rejection).
Reason: TypeAlias = str | Status | bool
#: What a per-node ``filter`` (one taking ``node``) returns: ``None`` / ``True`` to accept, a
#: :data:`Reason` to reject.
FilterNodeResult: TypeAlias = Reason | None
#: What a batch ``filter`` (one taking ``nodes``) returns, every shape the runtime accepts: ``None`` or
#: ``{}`` (no objection); a dict ``{node name: reason}`` of rejected nodes (a dict, not any mapping; the
#: usual value types are spelt out, a dict being invariant in them); a sequence aligned with ``nodes``
#: of ``True``/``None`` (feasible) or a reason; a numpy bool array aligned with ``nodes``; or the
#: recommended fast form ``(feasible_mask, reason)``: a bool array aligned with ``nodes`` plus one
#: reason for every rejected node or a sequence of reasons aligned with ``nodes``.
FilterBatchResult: TypeAlias = (
    dict[str, Status] | dict[str, str] | dict[str, Reason | None] | Sequence[Reason | None] | np.ndarray
    | tuple[np.ndarray, Reason | Sequence[Reason | None] | None] | None
)
#: What a ``filter`` hook returns (either form).
FilterResult: TypeAlias = FilterBatchResult | FilterNodeResult
#: What a ``score`` hook returns: batch form ``None`` (no opinion), a dict ``{node name: int}`` or a
#: sequence / int64 array aligned with ``nodes``; per-node form an int.
ScoreResult: TypeAlias = dict[str, int] | Sequence[int] | np.ndarray | int | None
#: What ``normalize_score`` returns: the new scores, or ``None`` when it changed ``scores`` in place.
NormalizeScoreResult: TypeAlias = np.ndarray | Sequence[int] | None
#: What ``pre_enqueue``, ``reserve``, ``permit`` and ``pre_score`` return: ``None`` (or ``True``: success),
#: a :class:`Status`, or a :data:`Reason` (a string or ``False``: a rejection).
StatusResult: TypeAlias = Status | str | bool | None
#: What ``pre_filter`` returns: ``None``, a :class:`Status` or a :class:`PreFilterResult`.
PreFilterReturn: TypeAlias = PreFilterResult | Status | str | bool | None
#: What ``post_filter`` returns: ``None``, a :class:`PostFilterResult` or a :class:`Status`.
PostFilterReturn: TypeAlias = PostFilterResult | Status | str | bool | None
#: What ``pre_bind`` returns: ``None``, annotations to set on the pod (a dict), or a failure :class:`Status`.
PreBindResult: TypeAlias = dict[str, str] | Status | str | None
#: What ``bind`` returns: ``None`` / ``Status.skip()`` (not mine), ``True`` / a success status (bound),
#: or a failure :class:`Status`.
BindResult: TypeAlias = Status | bool | str | None
#: A ``queue_sort`` key: compared across pods (``(-priority,)`` by default); ``None`` for the default.
QueueSortKey: TypeAlias = tuple[Any, ...] | None


@attrs.frozen
class NodeResourcesResult:
    """What a ``node_resources`` hook may return when it writes more than extended resources (the plain
    dict form is ``amounts`` alone). Every engine applies all three parts together:

    * ``amounts``: ``{resource: canonical int or None}`` merged over the node's allocatable *and* capacity
      (``None`` removes the resource: Koordinator's reset), as the dict form;
    * ``annotations``: ``{key: value or None}`` set on the node's ``metadata.annotations`` (``None``
      removes the key), e.g. Koordinator's ``node.koordinator.sh/cpu-normalization-ratio``;
    * ``allocatable``: ``{resource: canonical int}`` written over ``status.allocatable`` only (capacity
      untouched), e.g. cpu and memory amplified from the node's raw allocatable.

    A plugin later in profile order is given the node with the earlier plugins' annotations and
    allocatable applied (the node as this round will leave it), as Koordinator's node-resource plugins
    read the annotations the ones before them prepared."""

    amounts: Mapping[str, int | None] = attrs.field(factory=dict)
    annotations: Mapping[str, str | None] = attrs.field(factory=dict)
    allocatable: Mapping[str, int] = attrs.field(factory=dict)


#: What ``node_resources`` returns: ``None`` (no write needed), ``{resource: amount or None}``, or a
#: :class:`NodeResourcesResult` (amounts, node annotations and an allocatable override).
NodeResourcesReturn: TypeAlias = dict[str, int | None] | NodeResourcesResult | None
