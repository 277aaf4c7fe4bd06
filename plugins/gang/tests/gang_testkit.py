"""Shared builders for the gang tests: pod manifests with gang annotations and creation times, clusters."""

from __future__ import annotations

import datetime as dt

from koordfw.testing import ClusterBuilder

GANG = "gang.scheduling.koordinator.sh"
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def ts(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, ns: str = "default", cpu: str = "1", t: float = 0, labels: dict | None = None,
        annotations: dict | None = None, node: str | None = None, priority: int = 0,
        node_selector: dict | None = None) -> dict:
    spec: dict = {"priority": priority, "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "creationTimestamp": ts(t),
                         "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def gang_ann(name: str, min_available: int | str | None, **extra: str) -> dict:
    ann = {f"{GANG}/name": name}
    if min_available is not None:
        ann[f"{GANG}/min-available"] = str(min_available)
    for k, v in extra.items():
        ann[f"{GANG}/{k.replace('_', '-')}"] = v
    return ann


def gang_pods(gang: str, n: int, min_available: int | str | None = None, *, ns: str = "default", cpu: str = "1",
              t: float = 0, step: float = 0, **extra) -> list[dict]:
    m = n if min_available is None else min_available
    return [pod(f"{gang}-{i}", ns=ns, cpu=cpu, t=t + i * step, annotations=gang_ann(gang, m, **extra))
            for i in range(n)]


def cluster(nodes: int, cpu: str = "4", *objects: dict) -> ClusterBuilder:
    b = ClusterBuilder()
    for i in range(nodes):
        b.node(f"n{i}", cpu=cpu)
    if objects:
        b.obj(*objects)
    return b
