"""Shared machinery of the topology-aware built-ins (inter_pod_affinity, pod_topology_spread, node_ports).

kube-scheduler walks every NodeInfo's pods in each PreFilter (in 16 goroutines). Here each plugin keeps
per-node counts of what it needs (pods matching a selector, host ports in use, existing pods' affinity
terms) in numpy columns and brings them up to date from the nodes whose ``node_version`` changed since
the last cycle (a bind, a delete, a preemption what-if): a cycle costs one vectorised comparison over
the nodes plus the pods of the few nodes that changed. Topology domains (the values of one label over
the nodes) are integer codes per node, rebuilt when node labels change, so per-domain sums are one
``np.bincount``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from koordfw import ClusterView, Pod
from koordfw.embed import cluster_view_of
from koordfw.inputs import selector_matches

#: the label kube-apiserver puts on every Namespace (NamespaceDefaultLabelName)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


class NodeTally:
    """Per-node counts of keys computed from each node's pods by ``count(pods)``, kept current by the
    nodes' versions. ``columns[key]`` is an int64 array over node indices (rows of removed nodes are 0)."""

    def __init__(self, count: Callable[[list[Pod]], Mapping[Hashable, int]]) -> None:
        self._count = count
        self._cluster: weakref.ReferenceType[ClusterView] | None = None
        self._versions = np.zeros(0, dtype=np.int64)
        self._per_node: list[Mapping[Hashable, int]] = []
        self.columns: dict[Hashable, np.ndarray] = {}
        self._totals: dict[Hashable, int] = {}
        self._cap = 0

    def _reset(self, key: ClusterView) -> None:
        self._cluster = weakref.ref(key)
        self._versions = np.zeros(0, dtype=np.int64)
        self._per_node = []
        self.columns = {}
        self._totals = {}
        self._cap = 0

    def _grow(self, n: int) -> None:
        cap = max(16, self._cap)
        while cap < n:
            cap *= 2
        if cap != self._cap:
            v = np.full(cap, -1, dtype=np.int64)
            v[: len(self._versions)] = self._versions
            self._versions = v
            for k, col in self.columns.items():
                c = np.zeros(cap, dtype=np.int64)
                c[: len(col)] = col
                self.columns[k] = c
            self._cap = cap
        self._per_node.extend({} for _ in range(n - len(self._per_node)))

    def refresh(self, cluster: ClusterView) -> dict[Hashable, np.ndarray]:
        """Bring the columns up to date with ``cluster``; returns them (arrays of the capacity length:
        slice ``[:cluster.num_nodes]`` or index by node indices)."""
        key = cluster_view_of(cluster)  # the plugins' read-only view and the state are one cluster
        if self._cluster is None or self._cluster() is not key:
            self._reset(key)
        n = cluster.num_nodes
        if n > len(self._per_node):
            self._grow(n)
        versions = cluster.node_version
        changed = np.flatnonzero(self._versions[:n] != versions)
        if len(changed):
            views = cluster.views
            cols, totals, count = self.columns, self._totals, self._count
            for i in changed.tolist():
                old = self._per_node[i]
                new = count(cluster.pods_on(views[i].node.name))
                for k, v in old.items():
                    cols[k][i] -= v
                    t = totals[k] = totals[k] - v
                    if t == 0:
                        del totals[k], cols[k]
                for k, v in new.items():
                    col = cols.get(k)
                    if col is None:
                        col = cols[k] = np.zeros(self._cap, dtype=np.int64)
                        totals[k] = 0
                    col[i] += v
                    totals[k] += v
                self._per_node[i] = new
            self._versions[changed] = versions[changed]
        return self.columns


class TallyCache:
    """At most ``size`` NodeTallies by key (least recently used dropped first)."""

    def __init__(self, size: int = 128) -> None:
        self.size = size
        self._items: dict[Hashable, NodeTally] = {}

    def get(self, key: Hashable, count: Callable[[list[Pod]], Mapping[Hashable, int]]) -> NodeTally:
        t = self._items.pop(key, None)
        if t is None:
            t = NodeTally(count)
            if len(self._items) >= self.size:
                del self._items[next(iter(self._items))]
        self._items[key] = t
        return t


class Domains:
    """The topology domains of one cluster, per topology key: ``codes(key)`` is an int64 array over node
    indices with the index of the node's value of label ``key`` (-1: no such label, or a removed node),
    rebuilt when node labels change."""

    def __init__(self) -> None:
        self._cluster: weakref.ReferenceType[ClusterView] | None = None
        self._gen = -1
        self._n = -1
        self._codes: dict[str, tuple[np.ndarray, list[str]]] = {}

    def _check(self, cluster: ClusterView) -> None:
        key = cluster_view_of(cluster)  # the plugins' read-only view and the state are one cluster
        if (self._cluster is None or self._cluster() is not key or self._gen != cluster.labels_generation
                or self._n != cluster.num_nodes):
            self._cluster = weakref.ref(key)
            self._gen, self._n = cluster.labels_generation, cluster.num_nodes
            self._codes = {}

    def get(self, cluster: ClusterView, key: str) -> tuple[np.ndarray, list[str]]:
        """(codes over node indices, the domain values by code)."""
        self._check(cluster)
        got = self._codes.get(key)
        if got is None:
            values: dict[str, int] = {}
            codes = np.full(cluster.num_nodes, -1, dtype=np.int64)
            live = cluster.live_mask if cluster.has_removed_nodes else None
            for i, v in enumerate(cluster.views):
                val = v.node.labels.get(key)
                if val is not None and (live is None or live[i]):
                    codes[i] = values.setdefault(val, len(values))
            got = self._codes[key] = (codes, list(values))
        return got

    def codes(self, cluster: ClusterView, key: str) -> np.ndarray:
        return self.get(cluster, key)[0]


def domain_sums(codes: np.ndarray, per_node: np.ndarray, ndomains: int) -> np.ndarray:
    """Σ ``per_node`` per domain (nodes without the key ignored), int64 of length ``ndomains``."""
    has = codes >= 0
    if ndomains == 0:
        return np.zeros(0, dtype=np.int64)
    return np.bincount(codes[has], weights=per_node[has], minlength=ndomains).astype(np.int64)


def freeze(obj: Any) -> Hashable:
    """A hashable canonical form of a manifest fragment (a selector, a term), for cache keys."""
    if isinstance(obj, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(freeze(v) for v in obj)
    return obj


class Namespaces:
    """Namespace labels as kube's namespace lister gives them: the Namespace objects' labels plus
    ``kubernetes.io/metadata.name``. A namespace without an object (the embedded cluster often has
    none) still has that label, as the API server would give it."""

    def __init__(self, cluster: Any) -> None:
        self._objs = cluster.objects_of("Namespace")
        self._cache: dict[str, Mapping[str, str]] = {}

    def labels(self, ns: str) -> Mapping[str, str]:
        got = self._cache.get(ns)
        if got is None:
            obj = self._objs.get(ns) or {}
            labels = dict((obj.get("metadata") or {}).get("labels") or {})
            labels[NAMESPACE_NAME_LABEL] = ns
            got = self._cache[ns] = labels
        return got

    def signature(self) -> Hashable:
        """Changes when any Namespace object's labels change (cache keys of namespaceSelector terms)."""
        return tuple(sorted((k, freeze((o.get("metadata") or {}).get("labels") or {})) for k, o in self._objs.items()))


def merge_label_keys(selector: Mapping[str, Any] | None, labels: Mapping[str, str], match_keys: Iterable[str],
                     mismatch_keys: Iterable[str] = ()) -> Mapping[str, Any] | None:
    """kube-apiserver's merge of ``matchLabelKeys`` (``key In [value]``) and ``mismatchLabelKeys``
    (``key NotIn [value]``) into a term's labelSelector, for the keys the pod has; a requirement already
    there is not added twice (a live pod's selector was merged on admission)."""
    match_keys, mismatch_keys = list(match_keys), list(mismatch_keys)
    if not match_keys and not mismatch_keys:
        return selector
    if selector is None:
        # kube merges only into a non-nil selector
        return None
    exprs = list(selector.get("matchExpressions") or [])
    for keys, op in ((match_keys, "In"), (mismatch_keys, "NotIn")):
        for k in keys:
            if k in labels:
                req = {"key": k, "operator": op, "values": [labels[k]]}
                if req not in exprs:
                    exprs.append(req)
    out = dict(selector)
    out["matchExpressions"] = exprs
    return out


class AffinityTerm:
    """kube's ``framework.AffinityTerm``: namespaces (the pod's own when neither ``namespaces`` nor a
    ``namespaceSelector`` is given), a namespace selector (None matches nothing, ``{}`` everything), a
    label selector (the same) and the topology key."""

    __slots__ = ("key", "namespaces", "ns_selector", "selector", "topology_key", "weight")

    def __init__(self, owner: Pod, term: Mapping[str, Any], weight: int = 0) -> None:
        names = term.get("namespaces") or []
        ns_sel = term.get("namespaceSelector")
        self.namespaces = frozenset(names) if (names or ns_sel is not None) else frozenset((owner.namespace,))
        self.ns_selector = ns_sel
        self.selector = merge_label_keys(term.get("labelSelector"), owner.labels, term.get("matchLabelKeys") or (),
                                         term.get("mismatchLabelKeys") or ())
        self.topology_key: str = term["topologyKey"]
        self.weight = weight
        self.key = (self.namespaces, freeze(ns_sel), freeze(self.selector), self.topology_key)

    def matches(self, pod: Pod, namespaces: Namespaces) -> bool:
        """kube's ``AffinityTerm.Matches``: the namespace, then the labels."""
        if pod.namespace not in self.namespaces and not (
                self.ns_selector is not None and selector_matches(self.ns_selector, namespaces.labels(pod.namespace))):
            return False
        return selector_matches(self.selector, pod.labels)


def pod_terms(pod: Pod, kind: str) -> tuple[list[AffinityTerm], list[AffinityTerm]]:
    """(required, preferred) terms of ``podAffinity`` or ``podAntiAffinity`` (``kind``) of a pod."""
    spec = (pod.affinity or {}).get(kind) or {}
    req = [AffinityTerm(pod, t) for t in spec.get("requiredDuringSchedulingIgnoredDuringExecution") or []]
    pref = [AffinityTerm(pod, w.get("podAffinityTerm") or {}, int(w.get("weight", 0)))
            for w in spec.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    return req, pref
