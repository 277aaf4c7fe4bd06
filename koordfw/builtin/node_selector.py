"""node_selector: ``spec.nodeSelector`` plus node affinity (kube's NodeAffinity).

Filter: the node selector and the required terms (``requiredDuringSchedulingIgnoredDuringExecution``;
terms are ORed, expressions inside a term ANDed). Score: the sum of the weights of matching preferred
terms, normalised to 0..100. Pods with nothing to check are skipped at pre_filter/pre_score.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from koordfw import ClusterEventWithHint, Node, NodeBatch, NodeView, Pod, QueueingHint, Status, hookimpl, normalize
from koordfw.contract import FilterBatchResult
from koordfw.hints import NODE_ADD, NODE_UPDATE

REASON = Status.unresolvable("node(s) didn't match Pod's node affinity/selector")


def _expr_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = expr.get("key", ""), expr.get("operator", "In")
    values = [str(v) for v in (expr.get("values") or [])]
    present = key in labels
    val = labels.get(key)
    if op == "In":
        return present and val in values
    if op == "NotIn":
        return not present or val not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def term_matches(term: Mapping[str, Any], node: Node | NodeView) -> bool:
    """One NodeSelectorTerm: all matchExpressions (labels) and matchFields (metadata.name) must hold."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing (kube semantics)
    labels = node.labels
    if not all(_expr_matches(e, labels) for e in exprs):
        return False
    return all(_expr_matches(f, {"metadata.name": node.name}) for f in fields)


def required_terms(pod: Pod) -> list[dict[str, Any]]:
    na = (pod.affinity or {}).get("nodeAffinity") or {}
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return req.get("nodeSelectorTerms") or []


def preferred_terms(pod: Pod) -> list[dict[str, Any]]:
    na = (pod.affinity or {}).get("nodeAffinity") or {}
    return na.get("preferredDuringSchedulingIgnoredDuringExecution") or []


def node_matches(pod: Pod, node: Node | NodeView) -> bool:
    """Does ``node`` (a Node or NodeView) satisfy the pod's node selector and required terms?"""
    labels = node.labels
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    terms = required_terms(pod)
    return not terms or any(term_matches(t, node) for t in terms)


def _after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
    """kube's isSchedulableAfterNodeChange: only a node the pod's selector and affinity accept helps."""
    if new is None or node_matches(pod, new):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@hookimpl
def events_to_register() -> list[ClusterEventWithHint]:
    return [ClusterEventWithHint(NODE_ADD, _after_node_change), ClusterEventWithHint(NODE_UPDATE, _after_node_change)]


@hookimpl
def pre_filter(pod: Pod) -> Status | None:
    if not pod.node_selector and not required_terms(pod):
        return Status.skip()
    return None


@hookimpl
def filter(pod: Pod, nodes: NodeBatch) -> FilterBatchResult:
    cluster = nodes.cluster
    ok = np.ones(len(nodes), dtype=bool)
    for k, v in pod.node_selector.items():
        ok &= cluster.label_mask(k, v)[nodes.idx]
    terms = required_terms(pod)
    if terms:
        views = cluster.views
        for j, i in enumerate(nodes.idx.tolist()):
            if ok[j] and not any(term_matches(t, views[i]) for t in terms):
                ok[j] = False
    return None if ok.all() else (ok, REASON)


@hookimpl
def pre_score(pod: Pod) -> Status | None:
    return None if preferred_terms(pod) else Status.skip()


@hookimpl
def score(pod: Pod, nodes: NodeBatch) -> np.ndarray:
    prefs = preferred_terms(pod)
    out = np.zeros(len(nodes), dtype=np.int64)
    for j, v in enumerate(nodes):
        out[j] = sum(int(p.get("weight", 0)) for p in prefs if term_matches(p.get("preference") or {}, v))
    return out


@hookimpl
def normalize_score(scores: np.ndarray) -> np.ndarray:
    return normalize(scores)
