"""Builders shared by the elastic_quota tests."""

from __future__ import annotations

import json

PARENT = "quota.scheduling.koordinator.sh/parent"
IS_PARENT = "quota.scheduling.koordinator.sh/is-parent"
LENT = "quota.scheduling.koordinator.sh/allow-lent-resource"
WEIGHT = "quota.scheduling.koordinator.sh/shared-weight"
NAME = "quota.scheduling.koordinator.sh/name"
PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"


def eq(name, *, min=None, max=None, parent=None, is_parent=False, lent=None, weight=None, namespace="quotas"):
    """An ElasticQuota object (scheduling.sigs.k8s.io/v1alpha1) with Koordinator's labels."""
    labels, anns = {}, {}
    if parent:
        labels[PARENT] = parent
    if is_parent:
        labels[IS_PARENT] = "true"
    if lent is not None:
        labels[LENT] = "true" if lent else "false"
    if weight is not None:
        anns[WEIGHT] = json.dumps(weight)
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": anns},
            "spec": {"min": dict(min or {}), "max": dict(max or {})}}
