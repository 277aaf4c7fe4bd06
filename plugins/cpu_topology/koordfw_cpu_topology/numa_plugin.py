"""The NUMA topology policy hooks of the cpu_topology scheduler plugin (mixed into CPUTopologyPlugin).

For a pod on a node whose effective policy (see :mod:`.numa`) is not None, the cpu and memory hints of
the node's NUMA nodes are merged with the topology-manager merge (:mod:`.numa_policy`); Restricted and
SingleNUMANode refuse a node whose merged hint is not preferred, with Koordinator's reasons. Score prefers
nodes whose best hint is narrow (``100 // NUMA nodes in the hint``). At reserve the pod's cpu and memory
are split over the hint's NUMA nodes (a bound pod's cpuset is taken from those NUMA nodes only), and
pre_bind records the split as ``numaNodeResources`` in ``scheduling.koordinator.sh/resource-status``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from koordfw import BoundedCache, IdentityKey, Status, canonical, format_quantity, memo
from koordfw.extension import ANNOTATION_RESOURCE_STATUS, LABEL_NUMA_TOPOLOGY_POLICY
from koordfw.inputs import loads_json

from .amplification import NUMAAmplification, amplify_numa, numa_available_amplified
from .api import SingleNUMAProvider
from .numa import (
    ERR_NO_NUMA_RESOURCES,
    ERR_NOT_MATCH_NUMA_TOPOLOGY,
    NUMATopologySpec,
    available,
    node_policy,
    numa_zones,
    parse_numa_node_resources,
    resource_hints,
    split_over,
)
from .numa_columns import (
    CODE_NONE,
    CODE_SINGLE,
    POLICY_CODES,
    NUMAColumns,
    Row,
    decide,
    reserve_single_numa,
    single_numa_with_providers,
)
from .numa_ledger import NodeNUMA, UsedLedger
from .numa_policy import (
    EXCLUSIVE_REQUIRED,
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    NUMATopologyHint,
    ProviderHints,
    mask_bits,
    merge,
    merge_topology_policy,
)

NUMA_RESOURCES = ("cpu", "memory")


def _frozen_hints(hints: ProviderHints) -> tuple[Any, ...] | None:
    if hints is None:
        return None
    return tuple(sorted((k, None if v is None else tuple(v)) for k, v in hints.items()))


def _frozen(per_numa: dict[int, dict[str, int]]) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...]:
    return tuple((n, tuple(sorted(res.items()))) for n, res in sorted(per_numa.items()))


class NUMAPolicyMixin(NUMAAmplification):
    """State and helpers; the host class provides ``_nrt``, ``_node_state`` and ``_nodes`` (CPU states by
    node index)."""

    def _numa_init(self) -> None:
        self._numa_amp_init()
        #: resource-status text -> its numaNodeResources ({} when none or unreadable)
        self._numa_status: BoundedCache[str, dict[int, dict[str, int]]] = BoundedCache(65536)
        #: NUMA resources held by reserved, not yet bound pods: node name -> pod uid -> split
        self._numa_reserved: dict[str, dict[str, dict[int, dict[str, int]]]] = {}
        #: the nodes' NUMA views (see _node_numa) and, per node, a counter bumped when its reservations change
        self._numa_nodes_memo: BoundedCache[tuple[Any, ...], NodeNUMA] = BoundedCache(65536)
        self._numa_res_gen: dict[str, int] = {}
        #: (policy, exclusive, request, totals, free amounts) -> (merged hint, admit, reasons)
        self._numa_hints_memo: BoundedCache[tuple[Any, ...], tuple[NUMATopologyHint, bool, tuple[str, ...]]] = \
            BoundedCache(65536)
        #: per cluster, node name -> its UsedLedger (see _numa_amounts)
        self._numa_ledgers: BoundedCache[IdentityKey, dict[str, UsedLedger]] = BoundedCache(8)
        self._numa_last: tuple[Any, dict[str, UsedLedger]] = (None, {})
        #: (NodeResourceTopology object, node name) -> its NUMA nodes' allocatable, or the error
        self._numa_zones: BoundedCache[tuple[IdentityKey, str], dict[int, dict[str, int]] | str] = BoundedCache(65536)
        #: a GPU pod's shape -> the exact merge's answers per node (see _numa_filter_providers)
        self._numa_exact_memo: BoundedCache[tuple[Any, ...], _ExactAnswers] = BoundedCache(256)
        #: the nodes' NUMA columns (see numa_columns), for deciding many nodes at once
        self._numa_cols = NUMAColumns()
        #: (cluster, label generation, NodeResourceTopology generation) -> whether any node states a policy
        self._numa_any: tuple[Any, bool] = (None, False)

    def _used_numa(self, text: str) -> dict[int, dict[str, int]]:
        hit = self._numa_status.get(text)
        if hit is None:
            try:
                obj = loads_json(text)
                hit = parse_numa_node_resources(obj) if isinstance(obj, dict) else {}
            except ValueError:
                hit = {}  # cpu_topology's own parse of the cpuset logs the unreadable annotation
            self._numa_status[text] = hit
        return hit

    def numa_status_written(self, text: str, split: dict[int, dict[str, int]]) -> None:
        """pre_bind wrote ``text``, a resource-status with ``split`` as its numaNodeResources: remember what it
        reads back as (every amount's quantity reads back as itself: checked per value), sparing the parse."""
        if text not in self._numa_status and all(_round_trips(k, v) for res in split.values()
                                                 for k, v in res.items() if v):
            self._numa_status[text] = {n: {k: v for k, v in res.items() if v} for n, res in split.items()}

    def _any_numa_node(self, cluster: Any) -> bool:
        """Whether some node states a policy (label or NRT ``topologyPolicies``); kept while node labels and
        NodeResourceTopology objects stay the same, so that a fleet without policies pays nothing per pod."""
        nrts = cluster.objects_of("NodeResourceTopology")
        gen = getattr(cluster, "objects_generation", None)
        key = (IdentityKey(cluster), cluster.labels_generation,
               gen("NodeResourceTopology") if gen is not None else IdentityKey(*nrts.values()))
        if self._numa_any[0] != key:
            found = bool(cluster.label_mask(LABEL_NUMA_TOPOLOGY_POLICY).any()) or any(
                (o or {}).get("topologyPolicies") for o in nrts.values())
            self._numa_any = (key, found)
        return self._numa_any[1]

    def _node_numa(self, cluster: Any, view: Any, spec: NUMATopologySpec, st: Any) -> NodeNUMA:
        """The node's NUMA view for the pod: memoised by the node's version (its pods), the reservations held
        on it, its NodeResourceTopology and the pod's policy and bind request (not for a pod holding a
        reservation on the node itself: its own share is left out)."""
        nrt, _ = self._nrt(cluster, view.name)  # type: ignore[attr-defined]
        held = self._numa_reserved.get(view.name, {})
        if st.uid in held:
            return self._node_numa_now(cluster, view, spec, st, nrt)
        key = (view.name, view.version, self._numa_res_gen.get(view.name, 0), IdentityKey(nrt), spec.policy,
               bool(st.request_bind), IdentityKey(cluster))
        hit = self._numa_nodes_memo.get(key)
        if hit is None:
            hit = self._numa_nodes_memo[key] = self._node_numa_now(cluster, view, spec, st, nrt)
        return hit

    def _node_numa_now(self, cluster: Any, view: Any, spec: NUMATopologySpec, st: Any, nrt: Any) -> NodeNUMA:
        merged = merge_topology_policy(node_policy(view.node.labels.get(LABEL_NUMA_TOPOLOGY_POLICY, ""), nrt),
                                       spec.policy)
        if merged is None:
            return NodeNUMA(error=ERR_NOT_MATCH_NUMA_TOPOLOGY)
        if merged == POLICY_NONE:
            return NodeNUMA(policy=merged)
        base, uids = self._numa_amounts(cluster, view, nrt)
        if st.uid in uids:  # the pod's own share (its reservation here) is left out
            base = self._numa_amounts_now(cluster, view, nrt, st.uid)[0]
        out = NodeNUMA(policy=merged, total=base.total, avail=base.avail, error=base.error)
        if st.request_bind and not out.error:  # trimNUMANodeResources: a bound pod's cpu is whole free CPUs
            free = self._numa_free_cpus(self._node_state(view))  # type: ignore[attr-defined]
            if free is not None:
                out.avail = {n: {**res, "cpu": min(res.get("cpu", 0), free.get(n, 0) * 1000)}
                             for n, res in out.avail.items()}
        return out

    def _numa_amounts(self, cluster: Any, view: Any, nrt: Any) -> tuple[NodeNUMA, tuple[str, ...]]:
        """:meth:`_numa_amounts_now` for no pod in particular (shared: never changed). Kept per node in a
        :class:`UsedLedger`: while the node's version, its NodeResourceTopology and its reservations stay
        the same the answer stands; otherwise only the pods whose resource-status came, went or changed are
        taken out of / added to the node's running sums."""
        if self._numa_ratios(view):  # an amplified node (rare): no ledger, computed afresh
            return self._numa_amounts_now(cluster, view, nrt, "")
        ledgers = self._ledgers_of(cluster)
        led = ledgers.get(view.name)
        gen = self._numa_res_gen.get(view.name, 0)
        version = view.version
        if led is not None and led.nrt is nrt:
            if led.version == version and led.res_gen == gen:
                return led.out
        else:
            led = ledgers[view.name] = UsedLedger(nrt, self._zones(view, nrt))
        led.version, led.res_gen = version, gen
        if isinstance(led.zones, str):
            led.out = NodeNUMA(error=led.zones), ()
            return led.out
        if not led.zones:
            led.out = NodeNUMA(total=led.zones, error=ERR_NO_NUMA_RESOURCES), ()
            return led.out
        texts = {p.uid: t for p in cluster.pods_on(view.name)
                 if (t := p.annotations.get(ANNOTATION_RESOURCE_STATUS)) is not None}
        old = led.texts
        if texts == old and gen == led.made_gen:  # a pod without a share came or went: the same answer
            return led.out
        for uid, t in old.items():
            if texts.get(uid) != t:
                led.add(self._used_numa(t), -1)
        for uid, t in texts.items():
            if old.get(uid) != t:
                led.add(self._used_numa(t), 1)
        led.texts, led.made_gen = texts, gen
        held = self._numa_reserved.get(view.name, {})
        avail = available(led.zones, [led.sums, *held.values()])
        uids = (*texts, *held)
        if avail != led.out[0].avail or uids != led.out[1] or led.out[0].total is not led.zones:
            # kept otherwise (the same object): e.g. a bound pod's resource-status standing for its reservation
            led.out = (NodeNUMA(total=led.zones, avail=avail), uids)
        return led.out

    def _ledgers_of(self, cluster: Any) -> dict[str, UsedLedger]:
        """The cluster's ledgers; the cluster object last asked about (held: its identity is not reused) is
        answered without building its key."""
        if cluster is not self._numa_last[0]:
            ck = IdentityKey(cluster)
            ledgers = self._numa_ledgers.get(ck)
            if ledgers is None:
                ledgers = self._numa_ledgers[ck] = {}
            self._numa_last = (cluster, ledgers)
        return self._numa_last[1]

    def _zones(self, view: Any, nrt: Any) -> dict[int, dict[str, int]] | str:
        """The node's NUMA nodes' allocatable (shared: never changed), or the error."""
        key = (IdentityKey(nrt), view.name)
        zones = self._numa_zones.get(key)
        if zones is None:
            try:
                zones = numa_zones(nrt, f"NodeResourceTopology {view.name}")
            except ValueError as e:
                zones = str(e)
            self._numa_zones[key] = zones
        return zones

    def _numa_amounts_now(self, cluster: Any, view: Any, nrt: Any, uid: str) -> tuple[NodeNUMA, tuple[str, ...]]:
        """The node's NUMA totals and what is free on each NUMA node leaving out pod ``uid``'s share, or the
        error (policy left None); and the pods whose shares count (resource-status or reservation)."""
        out = NodeNUMA()
        zones = self._zones(view, nrt)
        if isinstance(zones, str):
            out.error = zones
            return out, ()
        out.total = zones  # shared by the node's views: never changed
        if not out.total:
            out.error = ERR_NO_NUMA_RESOURCES
            return out, ()
        pods = [p for p in cluster.pods_on(view.name) if ANNOTATION_RESOURCE_STATUS in p.annotations and p.uid != uid]
        held = self._numa_reserved.get(view.name, {})
        used = [self._used_numa(p.annotations[ANNOTATION_RESOURCE_STATUS]) for p in pods]
        used += [u for h, u in held.items() if h != uid]
        ratios = self._numa_ratios(view)
        if ratios:  # amplifyNUMANodeResources, and the bound CPUs counted amplified
            out.total = amplify_numa(zones, ratios)
            allocated: dict[int, dict[str, int]] = {}
            for u in used:
                for n, res in u.items():
                    if n in zones:
                        a = allocated.setdefault(n, {})
                        for k, v in res.items():
                            a[k] = a.get(k, 0) + v
            out.avail = numa_available_amplified(out.total, allocated, self._numa_bound_cpus(view),
                                                 ratios.get("cpu", 1.0))[0]
        else:
            out.avail = available(out.total, used)
        return out, (*(p.uid for p in pods), *held)

    @staticmethod
    def _numa_free_cpus(ns: Any) -> dict[int, int] | None:
        """NUMA id -> whole CPUs no pod holds and not reserved on a node of CPU state ``ns`` (``None``: the node
        has no CPU topology)."""
        if ns is None or ns.topology is None:
            return None
        details = ns.topology.details
        # CPUInfo.node is socket << 16 | NUMA id (topology.py keeps node ids per socket unique)
        free: dict[int, int] = {}
        for node, cpus in ns.topology.cpus_in_node.items():
            free[node & 0xFFFF] = free.get(node & 0xFFFF, 0) + len(cpus)
        for c in set(ns.allocation.cpus) | ns.reserved:
            info = details.get(c)
            if info is not None:
                free[info.node & 0xFFFF] -= 1
        return free

    def _numa_hint(self, nn: NodeNUMA, requests: dict[str, int], spec: NUMATopologySpec,
                   extra: tuple[ProviderHints, ...] = ()) -> tuple[NUMATopologyHint, bool, list[str]]:
        """The merged hint on the node: cpu and memory from this plugin's hints, ``extra`` from the other
        providers (:data:`.api.NUMA_HINT_PROVIDERS`: gpu_share's GPUs). A function of the policy, the NUMA
        totals and free amounts, the request and the providers' hints only: memoised, since the nodes of a
        fleet share a few shapes and most of them the same free amounts."""
        req = tuple(requests.get(k, 0) for k in NUMA_RESOURCES)
        exclusive = spec.exclusive or (EXCLUSIVE_REQUIRED if spec.policy else "")
        key = (nn.policy, exclusive, req, _frozen(nn.total), _frozen(nn.avail), tuple(_frozen_hints(e) for e in extra))
        hit = self._numa_hints_memo.get(key)
        if hit is None:
            hints = resource_hints(dict(zip(NUMA_RESOURCES, req, strict=True)), nn.total, nn.avail, nn.policy)
            hint, admit, reasons = merge(nn.policy, list(nn.total), [hints, *extra], exclusive if nn.policy in (
                POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE) else "", ())
            hit = self._numa_hints_memo[key] = (hint, admit, tuple(reasons))
        return hit[0], hit[1], list(hit[2])

    @staticmethod
    def _provider_hints(view: Any, st: Any) -> tuple[tuple[ProviderHints, ...], str | None]:
        """The other providers' hints for the pod on ``view`` (in provider-name order), or a refusal."""
        out: list[ProviderHints] = []
        for name in sorted(st.numa_providers):
            hints, refusal = st.numa_providers[name](view)
            if refusal:
                return (), refusal
            out.append(hints)
        return tuple(out), None

    def _numa_refresh(self, cluster: Any, idx: np.ndarray) -> NUMAColumns:
        """The NUMA columns of ``cluster`` with the rows of ``idx`` fresh."""
        cols = self._numa_cols
        if cols.cluster is not cluster:
            key = IdentityKey(cluster)
            if cols.key != key:
                cols = self._numa_cols = NUMAColumns(key)
            cols.cluster = cluster
        cols.grow(cluster.num_nodes)
        views = cluster.views
        rows = []
        states = self._nodes  # type: ignore[attr-defined]  # the host's CPU states, fresh: filter refreshed them
        for i in cols.stale(idx, cluster.node_version, cluster.node_index):
            view = views[i]
            nrt, _ = self._nrt(cluster, view.name)  # type: ignore[attr-defined]
            nn, uids = self._numa_amounts(cluster, view, nrt)
            policy = node_policy(view.node.labels.get(LABEL_NUMA_TOPOLOGY_POLICY, ""), nrt)
            free = self._numa_free_cpus(states[i]) if not nn.error else None
            # the amounts (the same object while they hold), the policy and the free CPUs make the row
            if cols.keep(i, view.version, (nn, policy, free)):
                continue
            rows.append(Row(i, view.version, policy, nn.total, nn.avail, free, nn.error, uids,
                            exact=bool(self._numa_ratios(view))))
        cols.set_rows(rows)
        return cols

    def numa_filter(self, cluster: Any, idx: np.ndarray, st: Any) -> dict[str, Status]:
        """Refusals of the nodes ``idx`` by the NUMA topology policy; each admitted node's hint score goes to
        ``st.numa_scores`` (by node index)."""
        if st.numa_scores is None or len(st.numa_scores) < cluster.num_nodes:
            scores = np.full(cluster.num_nodes, -1, dtype=np.int64)
            if st.numa_scores is not None:
                scores[: len(st.numa_scores)] = st.numa_scores
            st.numa_scores = scores
        views = cluster.views
        out: dict[str, Status] = {}
        # the columns know this plugin's cpu and memory hints only: a pod with hints from other providers
        # takes the exact merge on every node
        if st.numa_extra_hints:
            self._numa_filter_providers(cluster, idx, st, out)
            return out
        cols = self._numa_refresh(cluster, idx)
        v = decide(cols, idx, st.numa_spec.policy, st.requests, bool(st.request_bind), st.uid)
        st.numa_scores[idx] = v.score
        st.numa_scored = st.numa_scored or v.scored
        for j in v.mismatch:
            out[views[int(idx[j])].name] = Status.unresolvable(ERR_NOT_MATCH_NUMA_TOPOLOGY)
        for j in v.slow:  # refusals carry the exact merge's reasons
            self._numa_filter_exact(cluster, views[int(idx[j])], st, out)
        return out

    def _numa_filter_providers(self, cluster: Any, idx: np.ndarray, st: Any, out: dict[str, Status]) -> None:
        """The nodes ``idx`` for a pod with hints from other providers (GPUs): nodes under SingleNUMANode by
        :func:`.numa_columns.single_numa_with_providers` when every provider answers for many nodes
        (:class:`.api.SingleNUMAProvider`), the others and every refusal (its message) by the exact merge."""
        views = cluster.views
        providers = list(st.numa_providers.values())
        if not all(isinstance(p, SingleNUMAProvider) for p in providers):
            for i in idx.tolist():
                self._numa_filter_exact(cluster, views[i], st, out)
            return
        cols = self._numa_refresh(cluster, idx)
        pod_code = POLICY_CODES[st.numa_spec.policy]
        node_code = cols.policy[idx]
        eff = node_code if not pod_code else np.where(node_code == CODE_NONE, pod_code, node_code)
        fast = (eff == CODE_SINGLE) & (cols.exact[idx] == 0)
        if pod_code:
            fast &= (node_code == CODE_NONE) | (node_code == pod_code)
        held = cols.uid_rows.get(st.uid)
        if held:
            fast &= ~np.isin(idx, np.fromiter(held, dtype=np.int64, count=len(held)))
        rows = idx[fast]
        if len(rows):
            ok = single_numa_with_providers(cols, rows, st.requests, bool(st.request_bind), providers)
            st.numa_scores[rows[ok]] = 100
            st.numa_scored = st.numa_scored or bool(ok.any())
            fast[np.flatnonzero(fast)[~ok]] = False  # refused: the exact merge gives the message
        slow = np.flatnonzero(~fast & (eff != CODE_NONE))
        if not len(slow):
            return
        # the exact merge, memoised per pod shape by everything else it reads: the node's NUMA row (its
        # stamp) and the providers' versions of the node (not for a node where the pod holds a share)
        rows = idx[slow]
        tokens, versions = [], []
        for p in providers:
            token, ver = p.versions(rows)
            tokens.append(token)
            versions.append(ver)
        shape = (tuple(sorted(st.requests.items())), st.numa_spec.policy, st.numa_spec.exclusive,
                 bool(st.request_bind), tuple(tokens), IdentityKey(cluster),
                 cluster.objects_generation("NodeResourceTopology"), cluster.labels_generation)
        memo = self._numa_exact_memo.get(shape)
        n = cluster.num_nodes
        if memo is None or len(memo.stamp) < n:
            memo = self._numa_exact_memo[shape] = _ExactAnswers(n, len(providers))
        hit = memo.stamp[rows] == cols.stamp[rows]
        for k, ver in enumerate(versions):
            hit &= memo.versions[k, rows] == ver
        if held:
            hit &= ~np.isin(rows, np.fromiter(held, dtype=np.int64, count=len(held)))
        for j, i in enumerate(rows.tolist()):
            view = views[i]
            if not hit[j]:
                one: dict[str, Status] = {}
                st.numa_scores[i] = -1
                self._numa_filter_exact(cluster, view, st, one)
                refusal = one.get(view.name)
                memo.answer[i] = memo.code(refusal) if refusal is not None else -2 - max(int(st.numa_scores[i]), -1)
                memo.stamp[i] = cols.stamp[i]
                for k, ver in enumerate(versions):
                    memo.versions[k, i] = ver[j]
            got = int(memo.answer[i])
            if got >= 0:
                out[view.name] = memo.statuses[got]
            elif got <= -2:
                st.numa_scores[i] = -2 - got
                st.numa_scored = True

    def _numa_merged(self, cluster: Any, view: Any, st: Any) -> tuple[NodeNUMA, NUMATopologyHint | None, Status | None]:
        """The exact merge for the pod on ``view`` (filter, reserve and :data:`.api.NUMA_AFFINITY` alike): the node's
        NUMA view, the merged hint (None: no policy applies, or the node is refused) and the refusal."""
        nn = self._node_numa(cluster, view, st.numa_spec, st)
        if nn.error == ERR_NOT_MATCH_NUMA_TOPOLOGY:
            return nn, None, Status.unresolvable(nn.error)
        if nn.policy == POLICY_NONE:
            return nn, None, None
        strict = nn.policy in (POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)
        if nn.error:
            return nn, None, Status.unresolvable(nn.error) if strict else None
        extra, refusal = self._provider_hints(view, st) if st.numa_providers else ((), None)
        if refusal:
            return nn, None, Status.unschedulable(refusal)
        hint, admit, reasons = self._numa_hint(nn, self._numa_requests(view, st), st.numa_spec, extra)
        if strict and not admit:  # (BestEffort always admits)
            return nn, None, Status.unschedulable(*(reasons or [ERR_NO_NUMA_RESOURCES]))
        return nn, hint, None

    def _numa_filter_exact(self, cluster: Any, view: Any, st: Any, out: dict[str, Status]) -> None:
        """One node by the exact merge: its refusal into ``out``, else its hint's score into ``st``."""
        _, hint, refusal = self._numa_merged(cluster, view, st)
        if refusal is not None:
            out[view.name] = refusal
        elif hint is not None:
            st.numa_scores[view.index] = hint_score(hint)
            st.numa_scored = True

    def numa_affinity(self, cluster: Any, st: Any, view: Any) -> int | None:
        """:data:`.api.NUMA_AFFINITY` for the pod: the NUMA mask the policy takes on ``view`` (what reserve
        chose there, else the merged hint reserve will choose; None: the node is under no policy, or any NUMA
        node will do)."""
        if view.name in st.numa_chosen:
            return int(st.numa_chosen[view.name])
        _, hint, _ = self._numa_merged(cluster, view, st)
        return hint.affinity if hint is not None else None

    def numa_reserve(self, cluster: Any, view: Any, st: Any) -> Status | None:
        """Choose the NUMA nodes on the chosen node and hold the pod's cpu and memory on them."""
        st.numa_split = None
        st.numa_mask = None
        got = None if st.numa_providers else reserve_single_numa(
            self._numa_refresh(cluster, np.array([view.index], dtype=np.int64)), view.index, st.numa_spec.policy,
            st.requests, bool(st.request_bind), st.uid)
        if got is not None:
            self._numa_hold(cluster, view, st, *got)
            return None
        nn, hint, refusal = self._numa_merged(cluster, view, st)
        if refusal is not None or hint is None:
            return refusal
        nodes = hint.bits() if hint.affinity else list(nn.total)
        split = split_over({k: st.requests.get(k, 0) for k in NUMA_RESOURCES}, nn.avail, nodes)
        if split is None:
            if nn.policy in (POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE):
                return Status.unschedulable(ERR_NO_NUMA_RESOURCES)
            return None
        self._numa_hold(cluster, view, st, nodes, split)
        return None

    def _numa_hold(self, cluster: Any, view: Any, st: Any, nodes: list[int], split: dict[int, dict[str, int]]) -> None:
        """Hold the pod's ``split`` on the node; its NUMA row is patched (the split's NUMA nodes only) when it
        and the node's ledger are fresh, else rebuilt at the next refresh."""
        name = view.name
        st.numa_mask = frozenset(nodes)
        st.numa_split = split
        held = self._numa_reserved.setdefault(name, {})
        held[st.uid] = split
        gen = self._numa_res_gen[name] = self._numa_res_gen.get(name, 0) + 1
        cols, i = self._numa_cols, view.index
        led = self._ledgers_of(cluster).get(name) if cols.cluster is cluster else None
        src = cols.sources.get(i)
        if (self._numa_ratios(view) or led is None or src is None or src[0] is not led.out[0]
                or isinstance(led.zones, str) or not led.zones
                or led.version != view.version or int(cols.ver[i]) != view.version):
            cols.touch_name(name)
            return
        # what _numa_amounts gives from now on (the node's version and pods are the ones the ledger is of)
        led.res_gen = led.made_gen = gen
        nn = NodeNUMA(total=led.zones, avail=available(led.zones, [led.sums, *held.values()]))
        led.out = (nn, (*led.texts, *held))
        if not cols.patch(i, nn.avail, split, src[2], led.out[1]):
            cols.touch_name(name)
            return
        cols.sources[i] = (nn, *src[1:])

    def numa_held_changed(self, node: str) -> None:
        """A split held on ``node`` was changed in place (a bound pod's cpu moved to its CPUs' NUMA nodes)."""
        self._numa_res_gen[node] = self._numa_res_gen.get(node, 0) + 1
        self._numa_cols.touch_name(node)

    def numa_unreserve(self, node: str, uid: str) -> None:
        held = self._numa_reserved.get(node)
        if held is not None:
            held.pop(uid, None)
            self._numa_res_gen[node] = self._numa_res_gen.get(node, 0) + 1
            self._numa_cols.touch_name(node)
            if not held:
                del self._numa_reserved[node]

    def numa_forget_bound(self, cluster: Any) -> None:
        """Drop reservations of pods that now carry their resource-status (or left their node)."""
        for name in list(self._numa_reserved):
            on = {p.uid: p for p in cluster.pods_on(name)} if cluster.node(name) is not None else {}
            for uid in list(self._numa_reserved[name]):
                p = on.get(uid)
                if p is None or ANNOTATION_RESOURCE_STATUS in p.annotations:
                    self.numa_unreserve(name, uid)


class _ExactAnswers:
    """The exact merge's answers for one pod shape, per node index: ``answer`` is a refusal (an index into
    ``statuses``), -1 (no hint: nothing to say) or ``-2 - score``; valid while the node's row ``stamp`` and
    the providers' ``versions`` of it are the ones stored."""

    def __init__(self, n: int, providers: int) -> None:
        self.stamp = np.full(n, -1, dtype=np.int64)
        self.versions = np.full((providers, n), -1, dtype=np.int64)
        self.answer = np.full(n, -1, dtype=np.int64)
        self.statuses: list[Status] = []
        self._codes: dict[Status, int] = {}

    def code(self, status: Status) -> int:
        got = self._codes.get(status)
        if got is None:
            got = self._codes[status] = len(self.statuses)
            self.statuses.append(status)
        return got


@memo(4096)
def _round_trips(resource: str, value: int) -> bool:
    """Whether ``value`` written as a quantity (numaNodeResources) reads back as ``value``."""
    try:
        return canonical(resource, format_quantity(resource, value)) == value
    except ValueError:
        return False


def hint_score(hint: NUMATopologyHint) -> int:
    """Score prefers narrow hints: ``100 // NUMA nodes in the hint`` (100 for "any")."""
    width = len(mask_bits(hint.affinity)) if hint.affinity else 0
    return 100 // width if width else 100
