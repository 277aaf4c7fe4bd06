"""Pods and node states for the cpu_burst tests, shaped like Koordinator's cpuburst test fixtures."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from koordfw.core.model import pod_from_manifest
from koordfw.core.nodestate import CPUInfo, NodeState, PodState

PERIOD = 100000  # system.CFSBasePeriodValue


def container_id(name: str) -> str:
    """genTestContainerIDByName"""
    return f"docker://{name}-id"


def manifest(name: str, containers: Mapping[str, int | None], *, qos: str | None = None, uid: str | None = None,
             phase: str = "Running", annotations: Mapping[str, str] | None = None, running: bool = True,
             requests: Mapping[str, int] | None = None) -> dict[str, Any]:
    """A Pod whose containers have these CPU limits (milli; ``None``: no limit), each with a running
    status and ID ``docker://<name>-id``."""
    spec, statuses = [], []
    for cname, limit in containers.items():
        res: dict[str, Any] = {"requests": {"cpu": f"{(requests or {}).get(cname, limit or 1000)}m"}}
        if limit is not None:
            res["limits"] = {"cpu": f"{limit}m"}
        spec.append({"name": cname, "resources": res})
        statuses.append({"name": cname, "containerID": container_id(cname),
                         "state": {"running": {}} if running else {"waiting": {}}})
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid or name}
    if qos is not None:
        meta["labels"] = {"koordinator.sh/qosClass": qos}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": spec},
            "status": {"phase": phase, "containerStatuses": statuses}}


def pod_state(m: Mapping[str, Any], *, version: int = 1, usage: int | None = None) -> PodState:
    pod = pod_from_manifest(dict(m))
    pod_dir = f"kubepods/burstable/pod{pod.uid}"
    return PodState(uid=pod.uid, pod=pod, qos=pod.qos_class, kube_qos=pod.kube_qos, cgroup_dir=pod_dir,
                    usage={"cpu": usage} if usage is not None else {})


def container_dir(ps: PodState, cname: str) -> str:
    return f"{ps.cgroup_dir}/{cname}-id"


def files(version: int, rel_dir: str) -> tuple[str, str]:
    """(quota file, burst file) of a dir."""
    if version == 1:
        return f"cpu/{rel_dir}/cpu.cfs_quota_us", f"cpu/{rel_dir}/cpu.cfs_burst_us"
    return f"{rel_dir}/cpu.max", f"{rel_dir}/cpu.max.burst"


def quota_text(version: int, quota: int) -> str:
    if version == 1:
        return str(quota)
    return f"max {PERIOD}" if quota < 0 else f"{quota} {PERIOD}"


def node(pods: list[PodState], *, version: int = 1, cgroups: Mapping[str, str] | None = None, cpus: int = 16,
         usage: int | None = None, metrics: Mapping[str, Any] | None = None) -> NodeState:
    """testNodeInfo: 16 CPUs on 2 NUMA nodes and 4 sockets."""
    topo = tuple(CPUInfo(i, i // 2, i // 4, i // 8) for i in range(cpus))
    return NodeState(name="test-node-1", cgroup_version=version, capacity={"cpu": cpus * 1000},
                     usage={"cpu": usage} if usage is not None else {}, cpu_topology=topo, pods=tuple(pods),
                     cgroups=dict(cgroups or {}), metrics=dict(metrics or {}))


def annotation(cfg: Mapping[str, Any]) -> str:
    """A CPUBurstConfig marshalled as Go does (``omitempty``: nil fields and an empty policy left out)."""
    return json.dumps({k: v for k, v in cfg.items() if v is not None and v != ""})


def apply(values: dict[str, str], writes) -> dict[str, str]:
    for w in writes:
        values[w.path] = w.value
    return values
