"""Builders for the Kubernetes engine tests: object factories (nodes, pods, PDBs) and the helpers that run a
live engine and wait for a condition. The fixtures (fake API server, client, registry) are in conftest.py."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager, contextmanager

import anyio
import structlog
from structlog.testing import capture_logs

from koordfw import Migration, hookimpl
from koordfw.engines.kube.engine import KubeSchedulerEngine

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


#: the controller of the ``web`` pods (a ReplicaSet, as a Deployment's)
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "rs-uid-1", "controller": True}


def web(name: str, cpu: str = "1", **kw) -> dict:
    """A pod of the ``web-rs`` ReplicaSet (``pod``'s keywords)."""
    p = pod(name, cpu, **kw)
    p["metadata"]["ownerReferences"] = [OWNER]
    return p


class MoveWeb:
    """A deschedule plugin proposing to move web-0 from n0 to n1 while it sits on n0."""

    @hookimpl
    def deschedule(self, cluster):
        p = cluster.pod_by_key("default/web-0")
        if p is None or p.node_name != "n0":
            return None
        return [Migration(pod="default/web-0", from_node="n0", to="n1", reason="rebalance")]


@asynccontextmanager
async def running(engine: KubeSchedulerEngine):
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(10):
            await engine.started.wait()
        yield engine
        engine.stop()


async def wait_for(pred, timeout: float = 15.0, what: str = "condition") -> None:
    with anyio.fail_after(timeout):
        while not pred():
            await anyio.sleep(0.02)


@contextmanager
def captured_logs():
    """structlog's ``capture_logs`` with every level let through (a CLI test run in the same process may
    have configured the warning-level filter), restoring the configuration afterwards."""
    old = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**old)


async def sigterm_and_wait(proc, timeout: float = 30.0) -> None:
    """Stop a ``koordfw`` subprocess as the kubelet does (SIGTERM) and assert a graceful exit 0."""
    import signal

    proc.send_signal(signal.SIGTERM)
    with anyio.fail_after(timeout):
        while proc.poll() is None:
            await anyio.sleep(0.05)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
