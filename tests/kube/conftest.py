"""Fixtures for the Kubernetes engine tests: a fake API server on loopback and object factories."""

from __future__ import annotations

import pytest

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.testing.fake_apiserver import FakeApiServer

SCHED = "koordfw-scheduler"


def node(name: str, cpu: str = "4", memory: str = "16Gi", pods: str = "110", labels: dict | None = None) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {}, "status": {"capacity": alloc, "allocatable": alloc}}


def pdb(name: str, labels: dict, disruptions_allowed: int, ns: str = "default") -> dict:
    """A PodDisruptionBudget over pods with ``labels``, its status already computed."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": labels}}, "status": {"disruptionsAllowed": disruptions_allowed}}


def pod(name: str, cpu: str = "100m", memory: str = "128Mi", *, ns: str = "default", scheduler: str = SCHED,
        node_name: str | None = None, labels: dict | None = None, annotations: dict | None = None,
        **spec) -> dict:
    s = {"schedulerName": scheduler,
         "containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node_name:
        s["nodeName"] = node_name
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {}},
            "spec": s}


@pytest.fixture
async def api():
    async with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
async def client(api):
    async with KubeClient(api.url, qps=0) as c:
        yield c


@pytest.fixture
def registry():
    return build_registry(None, autoload=False)
