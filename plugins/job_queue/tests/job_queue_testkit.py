"""Builders for the job queue's tests: quotas, gangs, batch workloads and an embedded engine running them."""

from __future__ import annotations

import attrs

from koordfw.core.model import make_node, make_pod, pod_from_manifest
from koordfw.engines.embedded import EmbeddedEngine, build_registry

PLUGINS = {"elastic_quota", "gang", "job_queue"}
T0 = 1_700_000_000.0


def quota(name, mn, mx):
    return {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": name},
            "spec": {"min": {"cpu": str(mn), "memory": "1000Gi"}, "max": {"cpu": str(mx), "memory": "1000Gi"}}}


def gang(ns, name, size, cpu=1, t=0.0, priority=0):
    pods = []
    for i in range(size):
        p = make_pod(f"{name}-{i}", ns, requests={"cpu": str(cpu), "memory": "1Gi"}, priority=priority,
                     annotations={"gang.scheduling.koordinator.sh/name": name,
                                  "gang.scheduling.koordinator.sh/min-available": str(size)})
        pods.append(p)
    return [attrs.evolve(p, creation_timestamp=T0 + t) for p in pods]


def engine(pods, quotas, nodes=2, cpu=8, args=None, disable=("default_preemption",)):
    cfg = {"disable": list(disable), "pluginConfig": {"elastic_quota": {"monitorAllQuotas": False},
                                                      "job_queue": args or {}}}
    registry = build_registry(cfg, autoload=True, only=PLUGINS)
    return EmbeddedEngine(registry, nodes=[make_node(f"n{i}", allocatable={"cpu": str(cpu), "memory": "64Gi",
                                                                               "pods": "110"}) for i in range(nodes)],
                          pods=pods, objects=quotas, start_time=T0 + 100)


def bound_by_job(e):
    out = {}
    for p in e.view.all_pods():
        job = p.annotations.get("gang.scheduling.koordinator.sh/name", p.name)
        out.setdefault(job, []).append(bool(p.node_name))
    return {j: sum(v) for j, v in out.items()}


def job_pods(ns, name, size, cpu=1, t=0.0, kind="Job"):
    """The pods of a batch workload without a gang: their controller is the ``kind`` named ``name``."""
    meta_owner = {"apiVersion": "batch/v1", "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}
    out = []
    for i in range(size):
        manifest = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{i}", "namespace": ns, "uid": f"uid-{name}-{i}",
                                 "creationTimestamp": "2023-11-14T22:13:20Z", "ownerReferences": [meta_owner]},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu),
                                                                                      "memory": "1Gi"}}}]}}
        out.append(attrs.evolve(pod_from_manifest(manifest), creation_timestamp=T0 + t))
    return out


async def report(e):
    return await e.scheduler.node_runtime.run_report()
