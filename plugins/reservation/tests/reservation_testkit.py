"""Builders for the reservation tests: Reservation objects, pods, and a run through the embedded cluster."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from koordfw.testing import ClusterBuilder, schedule

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
GV = "scheduling.koordinator.sh/v1alpha1"
AFFINITY = "scheduling.koordinator.sh/reservation-affinity"
ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"
IGNORED = "scheduling.koordinator.sh/reservation-ignored"


def ts(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def reservation(name: str, requests: dict[str, str] | None = None, *, owners: list | None = None,
                node: str | None = None, allocatable: dict[str, str] | None = None, t: float = 0,
                labels: dict | None = None, annotations: dict | None = None, status: dict | None = None,
                template_spec: dict | None = None, **spec: Any) -> dict:
    """A Reservation of ``requests`` for pods labelled ``app: web`` (default owners), created at ``t``;
    ``node`` places it there (status Available, allocatable = requests unless given)."""
    tspec = {"containers": [{"name": "main", "resources": {"requests": dict(requests or {"cpu": "1"})}}]}
    tspec.update(template_spec or {})
    obj: dict[str, Any] = {
        "apiVersion": GV, "kind": "Reservation",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": ts(t),
                     "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": {"template": {"spec": tspec},
                 "owners": owners if owners is not None else [{"labelSelector": {"matchLabels": {"app": "web"}}}],
                 **spec}}
    if node is not None:
        obj["status"] = {"phase": "Available", "nodeName": node,
                         "allocatable": dict(allocatable or requests or {"cpu": "1"})}
    if status is not None:
        obj["status"] = status
    return obj


def pod(name: str, requests: dict[str, str] | None = None, *, labels: dict | None = None,
        annotations: dict | None = None, node: str | None = None, t: float = 0, ns: str = "default",
        priority: int = 0, **spec: Any) -> dict:
    s: dict[str, Any] = {"priority": priority,
                         "containers": [{"name": "main", "resources": {"requests": dict(requests or {})}}], **spec}
    if node:
        s["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "creationTimestamp": ts(t),
                         "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": s, "status": {"phase": "Running" if node else "Pending"}}


def affinity(**a: Any) -> dict[str, str]:
    return {AFFINITY: json.dumps(a)}


def allocated_from(name: str) -> dict[str, str]:
    return {ALLOCATED: json.dumps({"name": name, "uid": f"uid-{name}"})}


def run(*objects: dict, nodes: dict[str, dict] | None = None, profile: Any = None, seed: int = 0) -> Any:
    """Schedule ``objects`` on ``nodes`` (name → ClusterBuilder.node keywords; default one 8-cpu node
    ``n1``) with the built-ins and the reservation plugin."""
    b = ClusterBuilder()
    for n, kw in (nodes or {"n1": {}}).items():
        b.node(n, **kw)
    b.obj(*objects)
    return schedule(b, only=["reservation"], profile=profile, seed=seed)


def rows(result: Any) -> dict[str, dict]:
    return {r["name"]: r for r in result.to_dict()["reservations"]}


def reason(result: Any, key: str) -> str:
    p = result.cluster.pod_by_key(key)
    return result.results[p.uid].reason
