"""What other plugins may ask of elastic quotas: whose quota a pod is in, and which pods a preemptor may
evict under the quota rules (the rules ``ElasticQuota.post_filter`` applies to its own victims).

Used by the gang plugin's job-level preemption. Everything here is computed from the cluster's
ElasticQuota objects; with none, :func:`victim_rule` returns ``None`` (no quota rule applies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from koordfw import ClusterView, Pod, canonical

from .quotas import DEFAULT, LABEL_PREEMPTIBLE, ROOT, QuotaTree, build_quotas

__all__ = ["QuotaFigures", "QuotaFiguresCache", "is_quota_preemptible", "quota_figures", "quota_names", "victim_rule"]


def is_quota_preemptible(pod: Pod) -> bool:
    """Koordinator's ``!IsPodNonPreemptible``: the quota label ``preemptible`` is not ``"false"``."""
    return pod.labels.get(LABEL_PREEMPTIBLE) != "false"


def quota_names(cluster: ClusterView) -> Callable[[Pod], str] | None:
    """A function giving a pod's quota name (its quota label, else its namespace's quota, else the default
    quota), or ``None`` when the cluster has no ElasticQuota object."""
    objs = cluster.objects_of("ElasticQuota")
    if not objs:
        return None
    valid, invalid = build_quotas(o for _, o in sorted(objs.items()))
    tree = QuotaTree(valid, invalid)

    def name_of(pod: Pod) -> str:
        return tree.quota_name_of(pod.labels, pod.namespace)

    return name_of


def victim_rule(cluster: ClusterView, args: Any) -> Callable[[Pod, Pod], str | None] | None:
    """The quota rule for preemption victims, or ``None`` without quotas: ``rule(preemptor, victim)``
    returns why the victim may not be evicted (``None``: it may). A victim must be quota-preemptible and
    in the preemptor's own quota; a preemptor of the default quota evicts nobody when ``args`` (the
    elastic_quota plugin's) has ``disableDefaultQuotaPreemption`` (Koordinator's default)."""
    name_of = quota_names(cluster)
    if name_of is None:
        return None
    no_default = bool(getattr(args, "disable_default_quota_preemption", True))

    def rule(preemptor: Pod, victim: Pod) -> str | None:
        if not is_quota_preemptible(victim):
            return "non-preemptible in its quota"
        mine = name_of(preemptor)
        if mine == DEFAULT and no_default:
            return "preemption in the default quota is disabled"
        theirs = name_of(victim)
        if theirs != mine:
            return f"in quota {theirs}, not the preemptor's {mine}"
        return None

    return rule


@attrs.frozen
class QuotaFigures:
    """Each valid quota's figures as the elastic_quota plugin computes them for admission: ``min``, ``max``,
    ``runtime`` (what it may use now) and ``used`` (its own and its descendants' bound pods), canonical
    integers per resource; ``parent`` (``None`` under the root); ``name_of(pod)`` the pod's quota."""

    min: dict[str, dict[str, int]]
    max: dict[str, dict[str, int]]
    runtime: dict[str, dict[str, int]]
    used: dict[str, dict[str, int]]
    parent: dict[str, str | None]
    name_of: Callable[[Pod], str]

    def chain(self, name: str) -> list[str]:
        """``name`` and its ancestors, leaf first."""
        out: list[str] = []
        cur: str | None = name
        while cur is not None and cur in self.parent and cur not in out:
            out.append(cur)
            cur = self.parent[cur]
        return out


def _tree(objs: Mapping[str, Mapping[str, Any]], args: Any) -> QuotaTree:
    valid, invalid = build_quotas(o for _, o in sorted(objs.items()))
    dmax = getattr(args, "default_quota_group_max", {}) or {}
    smax = getattr(args, "system_quota_group_max", {}) or {}
    return QuotaTree(valid, invalid, default_max={k: canonical(k, v) for k, v in dmax.items()},
                     system_max={k: canonical(k, v) for k, v in smax.items()},
                     enable_min_scale=bool(getattr(args, "enable_min_quota_scale", True)),
                     guarantee_usage=bool(getattr(args, "guarantee_usage", False)))


def _args_key(args: Any) -> tuple[Any, ...]:
    """What of the plugin's args shapes the tree."""
    return (tuple(sorted((getattr(args, "default_quota_group_max", {}) or {}).items())),
            tuple(sorted((getattr(args, "system_quota_group_max", {}) or {}).items())),
            bool(getattr(args, "enable_min_quota_scale", True)), bool(getattr(args, "guarantee_usage", False)),
            bool(getattr(args, "enable_runtime_quota", True)))


def _figures(tree: QuotaTree, cluster: ClusterView, args: Any) -> QuotaFigures:
    """The figures of a tree whose pods were added: usage up the tree, the runtimes from the live nodes."""
    tree.aggregate_used()
    n = cluster.num_nodes
    alloc = cluster.allocatable[:n]
    if n and cluster.has_removed_nodes:
        alloc = alloc[cluster.live_mask]
    sums = alloc.sum(axis=0) if len(alloc) else [0] * len(cluster.resources)
    tree.compute({r: int(sums[i]) for i, r in enumerate(cluster.resources) if sums[i]})
    st = tree.states
    runtime_on = bool(getattr(args, "enable_runtime_quota", True))

    def name_of(pod: Pod) -> str:
        return tree.quota_name_of(pod.labels, pod.namespace)

    return QuotaFigures(
        min={n: dict(s.quota.min) for n, s in st.items()},
        max={n: dict(s.quota.max) for n, s in st.items()},
        runtime={n: dict(s.runtime if runtime_on else s.quota.max) for n, s in st.items()},
        used={n: dict(s.used) for n, s in st.items()},
        parent={n: (None if s.quota.parent == ROOT or s.quota.parent not in st else s.quota.parent)
                for n, s in st.items()},
        name_of=name_of)


def quota_figures(cluster: ClusterView, args: Any = None) -> QuotaFigures | None:
    """The quota tree of the cluster as it is now (every non-terminal pod counted, as the plugin's runtime
    computation does), or ``None`` without ElasticQuota objects. ``args`` are the elastic_quota plugin's
    (its defaults when ``None``). :class:`QuotaFiguresCache` gives the same figures without recounting
    every pod at every call."""
    objs = cluster.objects_of("ElasticQuota")
    if not objs:
        return None
    tree = _tree(objs, args)
    for p in cluster.all_pods():
        if p.is_terminal:
            continue
        tree.add_pod(tree.quota_name_of(p.labels, p.namespace), p.requests, bool(p.node_name),
                     is_quota_preemptible(p))
    return _figures(tree, cluster, args)


#: per resource: [the sum of the requests, how many pods requested it] (a resource no pod requests has no key,
#: as when the requests are summed afresh)
_Sums = dict[str, list[int]]


def _count(into: _Sums, request: Mapping[str, int], sign: int) -> None:
    for r, v in request.items():
        cell = into.get(r)
        if cell is None:
            cell = into[r] = [0, 0]
        cell[0] += sign * v
        cell[1] += sign
        if not cell[1]:
            del into[r]


class QuotaFiguresCache:
    """:func:`quota_figures` kept from one call to the next, for a caller that asks at every cluster change
    (the job queue's admission pass): each pod's share of its quota's usage is added or taken back when the
    pod object changes (added, bound, deleted, relabelled), instead of recounting every pod; the tree is
    rebuilt when the ElasticQuota objects or the plugin's args change. The figures are those of
    :func:`quota_figures` on the same cluster."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._tree: QuotaTree | None = None
        #: uid → the pod object counted, and its share: (quota, requests, assigned, preemptible)
        self._pods: dict[str, Pod] = {}
        self._share: dict[str, tuple[str, Mapping[str, int], bool, bool]] = {}
        #: quota → its own pods' sums: requests (pending and bound), used (bound), non-preemptible used
        self._own: dict[str, tuple[_Sums, _Sums, _Sums]] = {}

    def _put(self, uid: str, sign: int) -> None:
        quota, req, assigned, preemptible = self._share[uid]
        own = self._own.get(quota)
        if own is None:
            own = self._own[quota] = ({}, {}, {})
        _count(own[0], req, sign)
        if assigned:
            _count(own[1], req, sign)
            if not preemptible:
                _count(own[2], req, sign)

    def figures(self, cluster: ClusterView, args: Any = None) -> QuotaFigures | None:
        objs = cluster.objects_of("ElasticQuota")
        if not objs:
            self._key, self._tree = None, None
            return None
        key = (cluster.objects_generation("ElasticQuota"), _args_key(args))
        if key != self._key or self._tree is None:
            self._key, self._tree = key, _tree(objs, args)
            self._pods, self._share, self._own = {}, {}, {}
        tree = self._tree
        seen = self._pods
        entries = cluster.pods
        for uid in [u for u in seen if u not in entries]:
            self._put(uid, -1)
            del seen[uid], self._share[uid]
        for uid, e in entries.items():
            p = e.pod
            if seen.get(uid) is p:
                continue
            if uid in self._share:
                self._put(uid, -1)
                del self._share[uid]
            seen[uid] = p
            if p.is_terminal:
                continue
            self._share[uid] = (tree.quota_name_of(p.labels, p.namespace), p.requests, bool(p.node_name),
                                is_quota_preemptible(p))
            self._put(uid, 1)
        for name, st in tree.states.items():
            own = self._own.get(name)
            if own is None:
                st.pod_request, st.used, st.non_preemptible_used = {}, {}, {}
            else:
                st.pod_request, st.used, st.non_preemptible_used = (
                    {r: c[0] for r, c in sums.items()} for sums in own)
        return _figures(tree, cluster, args)
