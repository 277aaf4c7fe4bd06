"""Hostile inputs: a pod's status, annotation and the kernel's files are untrusted; the plan never names a
path outside the pod's cgroup, never raises, and reads garbage as unknown."""

from __future__ import annotations

import json

import pytest
from koordfw_memory_qos.config import MemoryQOSArgs
from koordfw_memory_qos.plan import container_dir_name, parse_value
from koordfw_memory_qos.plugin import MemoryQoS

from koordfw import NodeState, PodState
from koordfw.core.model import pod_from_manifest
from koordfw.core.profile import structure_args

UID = "cccccccc-0000-0000-0000-000000000003"


@pytest.mark.parametrize("cid, want", [
    ("containerd://abc", "abc"), ("docker://x", "x"), ("containerd://..", None), ("containerd://.", None),
    ("containerd://a/b", None), ("containerd://", None), ("abc", None), ("containerd://a\x00b", None),
    ("containerd://" + "a" * 300, None),
])
def test_container_ids_are_checked(cid, want):
    assert container_dir_name("cgroupfs", cid) == want


def test_systemd_needs_a_known_runtime():
    assert container_dir_name("systemd", "containerd://abc") == "cri-containerd-abc.scope"
    assert container_dir_name("systemd", "rkt://abc") is None


@pytest.mark.parametrize("text, want", [("max", 2**63 - 1), (" 4096\n", 4096), ("-25", -25), ("", None),
                                        ("1e9", None), ("9" * 40, None), ("٣", None), (None, None)])
def test_file_values(text, want):
    assert parse_value(text) == want


@pytest.mark.parametrize("annotation", ["[" * 10000, '{"policy": {"x": 1}}', '{"minLimitPercent": 1e400}', "null",
                                        json.dumps({"policy": "auto", "priority": -1})])
def test_bad_pods_never_break_the_round(annotation):
    pod = pod_from_manifest({
        "metadata": {"name": "p", "uid": UID, "annotations": {"koordinator.sh/memoryQOS": annotation}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "1Pi"}}}, {"name": "d"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "c", "containerID": "containerd://../../etc"}, {"name": "d", "containerID": 7}, "junk"]}})
    ps = PodState(uid=UID, pod=pod, qos=pod.qos_class, kube_qos=pod.kube_qos, cgroup_dir=f"kubepods/burstable/pod{UID}")
    cgroups = {"kubepods/memory.min": "garbage", "kubepods/burstable/memory.min": "0",
               f"kubepods/burstable/pod{UID}/memory.min": "-1"}
    ns = NodeState(cgroup_version=2, pods=(ps,), cgroups=cgroups, allocatable={"memory": 2**62})
    args = structure_args("memory_qos", MemoryQOSArgs, {"lsClass": {"enable": True, "minLimitPercent": 100}})
    plugin = MemoryQoS()
    writes = plugin.qos_plan(ns, args) or []
    writes += plugin.runtime_hook("pod_start", ps, None, ns, args) or []
    assert writes and all(p.startswith("kubepods/") and ".." not in p.split("/") for p in (w.path for w in writes))
    # the kubepods file held garbage: not raised top-down (unknown), set bottom-up
    assert [w.value for w in writes if w.path == "kubepods/memory.min"] == [str(2**50)]
