"""inter_pod_affinity: kube-scheduler's InterPodAffinity
(``pkg/scheduler/framework/plugins/interpodaffinity/{filtering,scoring,plugin}.go``).

Filter, in kube's order, per node:

1. the pod's required ``podAffinity`` terms: the node has every term's topologyKey and, for each term,
   the node's domain holds a pod that matches *all* the terms (kube's ``updateWithAffinityTerms``); a pod
   that matches its own terms may go anywhere with the keys when no pod matches them yet (the first of a
   group). Else UnschedulableAndUnresolvable, "node(s) didn't match pod affinity rules".
2. the pod's required ``podAntiAffinity`` terms: no pod matching a term in the node's domain of that
   term's key. Else Unschedulable, "node(s) didn't match pod anti-affinity rules".
3. the symmetry: no existing pod whose required anti-affinity term matches the incoming pod in the
   node's domain of that term's key. Else Unschedulable, "node(s) didn't satisfy existing pods
   anti-affinity rules".

Terms are kube's ``AffinityTerm``: ``namespaces`` plus ``namespaceSelector`` (the pod's own namespace
when neither is set; Namespace labels include ``kubernetes.io/metadata.name``), ``labelSelector`` with
``matchLabelKeys`` / ``mismatchLabelKeys`` merged in from the term owner's labels (as kube-apiserver
does on admission), ``topologyKey``.

Score (preferred terms, kube's ``processExistingPod``): + weight per pod matching the pod's preferred
affinity terms in the node's domain, − weight for its preferred anti-affinity terms, and, from existing
pods' terms that match the incoming pod, + ``hardPodAffinityWeight`` for their required affinity terms,
+ / − weight for their preferred affinity / anti-affinity terms; normalised min-max to 0..100.
``ignorePreferredTermsOfExistingPods`` drops the existing pods' part for pods without preferred terms.

Speed: per-node counts of matching pods live in numpy columns updated from the nodes whose pods changed
(:mod:`koordfw.builtin._topology`); pre_filter sums them over the topology domains (``np.bincount``),
so filter is a few array lookups per candidate node. A node whose pods changed after pre_filter (a
preemption what-if removing victims, as kube's ``RemovePod`` extension) is recounted in filter.
Not modelled: pods nominated to a node (kube's ``AddPod`` for nominated pods) do not count for affinity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import Any, cast

import attrs
import numpy as np

from koordfw import (
    ClusterEventWithHint,
    ClusterView,
    CycleState,
    Handle,
    NodeBatch,
    Pod,
    QueueingHint,
    StateKey,
    Status,
    hookimpl,
)
from koordfw.hints import ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE

from ._topology import AffinityTerm, Domains, Namespaces, NodeTally, TallyCache, domain_sums, pod_terms

AFFINITY_REASON = Status.unresolvable("node(s) didn't match pod affinity rules")
ANTI_AFFINITY_REASON = Status.unschedulable("node(s) didn't match pod anti-affinity rules")
EXISTING_REASON = Status.unschedulable("node(s) didn't satisfy existing pods anti-affinity rules")

_REASONS = (AFFINITY_REASON, ANTI_AFFINITY_REASON, EXISTING_REASON)

REQ_AFF, REQ_ANTI, PREF_AFF, PREF_ANTI = "required-affinity", "required-anti-affinity", "preferred-affinity", \
    "preferred-anti-affinity"


def _hard_weight(v: int) -> int:
    if not 0 <= v <= 100:
        raise ValueError(f"hardPodAffinityWeight must be in 0..100, got {v}")
    return v


@attrs.define
class Args:
    """kube's InterPodAffinityArgs."""

    hard_pod_affinity_weight: int = attrs.field(default=1, validator=lambda _i, _a, v: _hard_weight(v))
    ignore_preferred_terms_of_existing_pods: bool = False


@attrs.define
class _Part:
    """Per-node counts (over node indices) and their sums per domain of one topology key."""

    key: str
    per_node: np.ndarray
    sums: np.ndarray


@attrs.define
class _FilterState:
    versions: np.ndarray
    namespaces: Namespaces
    aff_terms: list[AffinityTerm]
    anti_terms: list[AffinityTerm]
    #: pods matching all affinity terms, one _Part per distinct topology key of those terms
    aff: dict[str, _Part]
    aff_empty: bool
    self_match: bool
    #: pods matching the pod's anti-affinity terms, per topology key
    anti: dict[str, _Part]
    #: existing pods' required anti-affinity terms that match the pod, per topology key
    existing: dict[str, _Part]
    existing_terms: list[AffinityTerm]
    #: pods nominated to a node (by node index) with at least the pod's priority, counted there
    nominated: dict[int, list[Pod]]


FILTER_STATE: StateKey[_FilterState] = StateKey("inter_pod_affinity/filter")
SCORE_STATE: StateKey[dict[str, np.ndarray]] = StateKey("inter_pod_affinity/score")


def _matches_all(terms: list[AffinityTerm], pod: Pod, ns: Namespaces) -> bool:
    return all(t.matches(pod, ns) for t in terms)


def nominated_on(pod: Pod, cluster: Any) -> dict[int, list[Pod]]:
    """Pods nominated to a node with a priority at least ``pod``'s, by node index: kube's
    RunFilterPluginsWithNominatedPods adds them to the node (and to the pre-filter state, AddPod)."""
    out: dict[int, list[Pod]] = {}
    for p in cluster.nominated_pending_pods:
        if p.uid == pod.uid or p.priority < pod.priority or not p.nominated_node_name:
            continue
        i = cluster.node_index(p.nominated_node_name)
        if i is not None:
            out.setdefault(i, []).append(p)
    return out


def _existing_count(pod: Pod, key: str, pods: list[Pod], ns: Namespaces) -> int:
    """Required anti-affinity terms (topology key ``key``) of ``pods`` that match ``pod``."""
    return sum(1 for p in pods if p.has_required_anti_affinity
               for t in pod_terms(p, "podAntiAffinity")[0] if t.topology_key == key and t.matches(pod, ns))


class InterPodAffinity:
    def __init__(self, args: Args) -> None:
        self.args = args
        self._domains = Domains()
        self._match = TallyCache(256)
        self._terms: dict[Hashable, AffinityTerm] = {}
        self._existing = NodeTally(self._existing_terms)

    @staticmethod
    @hookimpl
    def plugin_args() -> type[Args]:
        return Args

    # -- counting -----------------------------------------------------------------------------------
    def _existing_terms(self, pods: list[Pod]) -> Counter[Hashable]:
        """The affinity terms of a node's pods, by (kind, weight, term): the symmetric half."""
        c: Counter[Hashable] = Counter()
        terms = self._terms
        for p in pods:
            if not p.has_pod_affinity:
                continue
            for kind, (req, pref) in (("aff", pod_terms(p, "podAffinity")), ("anti", pod_terms(p, "podAntiAffinity"))):
                for t in req:
                    k = (REQ_AFF if kind == "aff" else REQ_ANTI, 0, t.key)
                    terms.setdefault(k, t)
                    c[k] += 1
                for t in pref:
                    k = (PREF_AFF if kind == "aff" else PREF_ANTI, t.weight, t.key)
                    terms.setdefault(k, t)
                    c[k] += 1
        return c

    def _existing_columns(self, cluster: ClusterView) -> dict[Hashable, np.ndarray]:
        cols = self._existing.refresh(cluster)
        if len(self._terms) > 2 * len(cols) + 64:  # forget the terms of pods long gone
            self._terms = {k: t for k, t in self._terms.items() if k in cols}
        return cols

    def _matching(self, cluster: ClusterView, terms: list[AffinityTerm], ns: Namespaces) -> np.ndarray:
        """Per node index: pods matching every term of ``terms`` (one term: that term)."""
        sig: Hashable = tuple(t.key for t in terms)
        if any(t.ns_selector is not None for t in terms):
            sig = (sig, ns.signature())

        def count(pods: list[Pod]) -> dict[Hashable, int]:
            n = sum(1 for p in pods if _matches_all(terms, p, ns))
            return {0: n} if n else {}

        col = self._match.get(sig, count).refresh(cluster).get(0)
        n = cluster.num_nodes
        return col[:n] if col is not None else np.zeros(n, dtype=np.int64)

    def _part(self, cluster: ClusterView, key: str, per_node: np.ndarray) -> _Part:
        codes, values = self._domains.get(cluster, key)
        return _Part(key, per_node, domain_sums(codes, per_node, len(values)))

    # -- filter ---------------------------------------------------------------------------------------
    def _filter_state(self, pod: Pod, cluster: ClusterView) -> _FilterState | None:
        aff_terms = pod_terms(pod, "podAffinity")[0]
        anti_terms = pod_terms(pod, "podAntiAffinity")[0]
        if not aff_terms and not anti_terms and cluster.pods_with_required_anti_affinity == 0:
            return None
        ns = Namespaces(cluster)
        n = cluster.num_nodes
        nominated = nominated_on(pod, cluster)
        existing: dict[str, np.ndarray] = {}
        existing_terms: list[AffinityTerm] = []
        if cluster.pods_with_required_anti_affinity:
            for k, col in self._existing_columns(cluster).items():
                if cast(tuple[str, int, Hashable], k)[0] != REQ_ANTI:
                    continue
                t = self._terms[k]
                if t.matches(pod, ns):
                    existing_terms.append(t)
                    acc = existing.get(t.topology_key)
                    existing[t.topology_key] = col[:n].copy() if acc is None else acc + col[:n]
        for i, ps in nominated.items():
            for p in ps:
                if p.has_required_anti_affinity:
                    for t in pod_terms(p, "podAntiAffinity")[0]:
                        if t.matches(pod, ns):
                            acc = existing.setdefault(t.topology_key, np.zeros(n, dtype=np.int64))
                            acc[i] += 1
        if not aff_terms and not anti_terms and not existing:
            return None
        aff: dict[str, _Part] = {}
        if aff_terms:
            per_node = self._matching(cluster, aff_terms, ns)
            if nominated:
                per_node = per_node.copy()
                for i, ps in nominated.items():
                    per_node[i] += sum(1 for p in ps if _matches_all(aff_terms, p, ns))
            for t in aff_terms:
                if t.topology_key not in aff:
                    aff[t.topology_key] = self._part(cluster, t.topology_key, per_node)
        anti_nodes: dict[str, np.ndarray] = {}
        for t in anti_terms:
            col = self._matching(cluster, [t], ns)
            acc = anti_nodes.get(t.topology_key)
            anti_nodes[t.topology_key] = col.copy() if acc is None else acc + col
        for i, ps in nominated.items():
            for t in anti_terms:
                anti_nodes[t.topology_key][i] += sum(1 for p in ps if t.matches(p, ns))
        return _FilterState(
            versions=cluster.node_version.copy(), namespaces=ns, aff_terms=aff_terms, anti_terms=anti_terms, aff=aff,
            aff_empty=all(not p.sums.any() for p in aff.values()),
            self_match=bool(aff_terms) and _matches_all(aff_terms, pod, ns),
            anti={k: self._part(cluster, k, v) for k, v in anti_nodes.items()},
            existing={k: self._part(cluster, k, v) for k, v in existing.items()}, existing_terms=existing_terms,
            nominated=nominated)

    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> Status | None:
        cluster = handle.cluster
        if not pod.has_pod_affinity and cluster.pods_with_required_anti_affinity == 0:
            return Status.skip()
        st = self._filter_state(pod, cluster)
        if st is None:
            return Status.skip()
        state[FILTER_STATE] = st
        return None

    def _recount(self, pod: Pod, st: _FilterState, cluster: ClusterView) -> _FilterState:
        """``st`` with the nodes whose pods changed since pre_filter recounted (kube's PreFilterExtensions
        RemovePod/AddPod, which preemption runs for its victims)."""
        n = min(len(st.versions), cluster.num_nodes)
        changed = np.flatnonzero(cluster.node_version[:n] != st.versions[:n]).tolist()
        ns = st.namespaces

        def adjust(parts: dict[str, _Part], node_count: Any) -> dict[str, _Part]:
            out = {}
            for key, part in parts.items():
                codes = self._domains.codes(cluster, key)
                per_node, sums = part.per_node.copy(), part.sums.copy()
                for i in changed:
                    new = node_count(key, cluster.pods_on(cluster.views[i].node.name) + st.nominated.get(i, []))
                    if codes[i] >= 0:
                        sums[codes[i]] += new - per_node[i]
                    per_node[i] = new
                out[key] = _Part(key, per_node, sums)
            return out

        aff = adjust(st.aff, lambda key, pods: sum(1 for p in pods if _matches_all(st.aff_terms, p, ns)))
        anti = adjust(st.anti, lambda key, pods: sum(1 for t in st.anti_terms if t.topology_key == key
                                                     for p in pods if t.matches(p, ns)))
        # an existing pod's term that matched the incoming pod matches it still; count them on the node
        existing = adjust(st.existing, lambda key, pods: _existing_count(pod, key, pods, ns))
        return attrs.evolve(st, versions=cluster.node_version.copy(), aff=aff, anti=anti, existing=existing,
                            aff_empty=all(not p.sums.any() for p in aff.values()))

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> tuple[np.ndarray, Status | list] | None:
        cluster = nodes.cluster
        st = state.get(FILTER_STATE)
        if st is None:  # filters run without pre_filter (a what-if with a fresh state)
            st = self._filter_state(pod, cluster)
            if st is None:
                return None
            state[FILTER_STATE] = st
        elif len(st.versions) != cluster.num_nodes or (cluster.node_version != st.versions).any():
            if len(st.versions) != cluster.num_nodes:
                st = self._filter_state(pod, cluster)
                if st is None:
                    return None
            else:
                st = self._recount(pod, st, cluster)
            state[FILTER_STATE] = st
        idx = nodes.idx
        ok = np.ones(len(idx), dtype=bool)
        # the reason of each rejected node: 0 affinity, 1 anti-affinity, 2 existing pods' anti-affinity
        why = np.full(len(idx), -1, dtype=np.int8)
        if st.aff_terms:
            has_all = np.ones(len(idx), dtype=bool)
            exist = np.ones(len(idx), dtype=bool)
            for part in st.aff.values():
                codes = self._domains.codes(cluster, part.key)[idx]
                has = codes >= 0
                has_all &= has
                cnt = np.zeros(len(idx), dtype=np.int64)
                cnt[has] = part.sums[codes[has]]
                exist &= cnt > 0
            good = has_all & (exist | (st.aff_empty and st.self_match))
            why[~good] = 0
            ok &= good
        for code, parts in ((1, st.anti), (2, st.existing)):
            for part in parts.values():
                codes = self._domains.codes(cluster, part.key)[idx]
                has = codes >= 0
                bad = np.zeros(len(idx), dtype=bool)
                bad[has] = part.sums[codes[has]] > 0
                bad &= ok
                why[bad] = code
                ok &= ~bad
        if ok.all():
            return None
        kinds = np.unique(why[~ok])
        if len(kinds) == 1:
            return ok, _REASONS[int(kinds[0])]
        return ok, [_REASONS[w] if w >= 0 else None for w in why.tolist()]

    # -- score ----------------------------------------------------------------------------------------
    @hookimpl
    def pre_score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> Status | None:
        cluster = nodes.cluster
        if not pod.has_pod_affinity and (self.args.ignore_preferred_terms_of_existing_pods
                                         or cluster.pods_with_affinity == 0):
            return Status.skip()
        pref_aff = pod_terms(pod, "podAffinity")[1]
        pref_anti = pod_terms(pod, "podAntiAffinity")[1]
        has_constraints = bool(pref_aff or pref_anti)
        if not has_constraints and (self.args.ignore_preferred_terms_of_existing_pods or cluster.pods_with_affinity == 0):
            return Status.skip()
        ns = Namespaces(cluster)
        n = cluster.num_nodes
        scores: dict[str, np.ndarray] = {}
        contributed = False

        def add(key: str, per_node: np.ndarray, weight: int) -> None:
            nonlocal contributed
            codes, values = self._domains.get(cluster, key)
            sums = domain_sums(codes, per_node, len(values))
            if not sums.any():
                return
            contributed = True
            acc = scores.get(key)
            scores[key] = sums * weight if acc is None else acc + sums * weight

        for terms, sign in ((pref_aff, 1), (pref_anti, -1)):
            for t in terms:
                add(t.topology_key, self._matching(cluster, [t], ns), sign * t.weight)
        if cluster.pods_with_affinity:
            hard = self.args.hard_pod_affinity_weight
            for k, col in self._existing_columns(cluster).items():
                kind, weight, _ = cast(tuple[str, int, Hashable], k)
                if kind == REQ_ANTI or (kind == REQ_AFF and hard <= 0):
                    continue
                t = self._terms[k]
                if not t.matches(pod, ns):
                    continue
                w = hard if kind == REQ_AFF else weight if kind == PREF_AFF else -weight
                add(t.topology_key, col[:n], w)
        if not contributed:
            return Status.skip()
        state[SCORE_STATE] = scores
        return None

    @hookimpl
    def score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> np.ndarray | None:
        scores = state.get(SCORE_STATE)
        if not scores:
            return None
        out = np.zeros(len(nodes), dtype=np.int64)
        for key, sums in scores.items():
            codes = self._domains.codes(nodes.cluster, key)[nodes.idx]
            has = codes >= 0
            out[has] += sums[codes[has]]
        return out

    @hookimpl
    def normalize_score(self, scores: np.ndarray) -> np.ndarray:
        """kube's NormalizeScore: ``100 * (s - min) / (max - min)``, truncated; all 0 when max = min."""
        if len(scores) == 0:
            return scores
        lo, hi = int(scores.min()), int(scores.max())
        if hi == lo:
            return np.zeros(len(scores), dtype=np.int64)
        return (100.0 * (scores - lo) / (hi - lo)).astype(np.int64)

    # -- queueing hints -------------------------------------------------------------------------------
    @hookimpl
    def events_to_register(self, handle: Handle) -> list[ClusterEventWithHint]:
        """kube's InterPodAffinity hints: an assigned pod added helps a pod it can satisfy the affinity
        of; an assigned pod deleted helps if it matched the pod's anti-affinity or its own required
        anti-affinity rejected the pod; nodes added or relabelled may bring new domains."""
        Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP

        def after_pod_added(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
            if new is None:
                return Q
            ns = Namespaces(handle.cluster)
            terms = pod_terms(pod, "podAffinity")[0]
            return Q if terms and any(t.matches(new, ns) for t in terms) else SKIP

        def after_pod_deleted(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
            if old is None:
                return Q
            ns = Namespaces(handle.cluster)
            if any(t.matches(old, ns) for t in pod_terms(pod, "podAntiAffinity")[0]):
                return Q
            if old.has_required_anti_affinity and any(t.matches(pod, ns) for t in pod_terms(old, "podAntiAffinity")[0]):
                return Q
            return SKIP

        return [ClusterEventWithHint(ASSIGNED_POD_ADD, after_pod_added),
                ClusterEventWithHint(ASSIGNED_POD_DELETE, after_pod_deleted),
                ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE)]
