"""Builders for the defrag tests: nodes, bound pods with reported usage, NodeMetrics, PDBs."""

from __future__ import annotations

import anyio

from koordfw.core.manifests import Manifests, load_objects
from koordfw.engines.embedded import build_registry

T0 = "2026-11-20T10:00:00Z"


def node(name: str, cpu: str = "10", memory: str = "100Gi", labels: dict | None = None, unschedulable=False,
         **extra: str) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    alloc.update(extra)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": unschedulable}, "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name: str, node: str | None, cpu: str = "1", memory: str = "1Gi", *, ns: str = "default", priority: int = 0,
        labels: dict | None = None, annotations: dict | None = None, created: str = "2026-11-20T09:00:00Z",
        limits: bool = False, owner: str = "ReplicaSet", requests: dict | None = None, **spec) -> dict:
    req = {"cpu": cpu, "memory": memory}
    req.update(requests or {})
    res = {"requests": req}
    if limits:
        res["limits"] = dict(req)
    body = {"priority": priority, "containers": [{"name": "c", "resources": res}]}
    if node:
        body["nodeName"] = node
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels or {},
                         "annotations": annotations or {}, "creationTimestamp": created,
                         "ownerReferences": [{"kind": owner, "name": "o", "controller": True}]},
            "spec": body, "status": {"phase": "Running" if node else "Pending"}}


def metric(node_name: str, pods: dict[str, tuple[str, str]], system: tuple[str, str] = ("0", "0"),
           updated: str = T0) -> dict:
    """A NodeMetric: pods maps "ns/name" → (cpu, memory) usage."""
    pm = []
    for key, (c, m) in pods.items():
        ns, name = key.split("/")
        pm.append({"namespace": ns, "name": name, "podUsage": {"resources": {"cpu": c, "memory": m}}})
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node_name},
            "status": {"updateTime": updated,
                       "nodeMetric": {"systemUsage": {"resources": {"cpu": system[0], "memory": system[1]}}},
                       "podsMetric": pm}}


def pdb(name: str, selector: dict, allowed: int, ns: str = "default") -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": selector}}, "status": {"disruptionsAllowed": allowed}}


def manifests(*objs: dict) -> Manifests:
    m = Manifests()
    load_objects(list(objs), file="<test>", into=m)
    return m


def plan(objs, defrag: dict, *, extra_plugins=(), rounds: int = 1) -> dict:
    """Plan on a snapshot with the defrag plugin (plus ``extra_plugins``), as ``koordfw deschedule``."""
    from koordfw_defrag.cli import plan_snapshot

    registry = build_registry({"pluginConfig": {"defrag": defrag}}, autoload=True,
                              only={"defrag", *extra_plugins})
    out = None
    for _ in range(rounds):
        out = anyio.run(lambda: plan_snapshot(manifests(*objs), registry))
    return out


def moves(out: dict) -> list[tuple[str, str, str]]:
    return [(m["pod"], m["from"], m["to"]) for m in out["migrations"]]
