"""What other plugins may ask of elastic quotas: whose quota a pod is in, and which pods a preemptor may
evict under the quota rules (the rules ``ElasticQuota.post_filter`` applies to its own victims).

Used by the gang plugin's job-level preemption. Everything here is computed from the cluster's
ElasticQuota objects; with none, :func:`victim_rule` returns ``None`` (no quota rule applies).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from koordfw import ClusterView, Pod

from .quotas import DEFAULT, LABEL_PREEMPTIBLE, QuotaTree, build_quotas

__all__ = ["is_quota_preemptible", "quota_names", "victim_rule"]


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
