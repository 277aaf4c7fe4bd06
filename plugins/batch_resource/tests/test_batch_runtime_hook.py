"""The node side of batch_resource: koordlet's BatchResource runtime hook and reconciler.

The tables port the facts of Koordinator's ``pkg/koordlet/runtimehooks/hooks/batchresource``
``batch_resource_test.go`` (Test_plugin_SetPodResources, Test_plugin_SetContainerResources,
Test_isPodQoSBEByAttr) and ``rule_test.go`` (Test_plugin_parseRuleForNodeSLO), and of
``pkg/koordlet/util/system`` (MilliCPUToShares, MilliCPUToQuota, ConvertCPUSharesToWeight).
"""

from __future__ import annotations

import json
import math

import pytest
from koordfw_batch_resource.runtimehook import (
    BatchSpec,
    Knobs,
    Rule,
    cfs_quota_enabled,
    container_knobs,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    parse_ratio,
    pod_batch,
    pod_knobs,
    shares_to_weight,
)

from koordfw import PodState
from koordfw.core.model import pod_from_manifest

CPU, MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
GI = 1 << 30
BOTH = BatchSpec({CPU: 500, MEM: 2 * GI}, {CPU: 500, MEM: 2 * GI})  # testContainerSpec
LIMITS_ONLY = BatchSpec({}, {CPU: 1000, MEM: 2 * GI})  # testContainerSpec1
REQUESTS_ONLY = BatchSpec({CPU: 500, MEM: 2 * GI}, {})
ON, OFF = Rule(True, -1.0), Rule(False, -1.0)


@pytest.mark.parametrize("name, containers, rule, want", [
    ("a Batch pod with cfs quota unset", {"container-0": BOTH}, OFF, (512, -1, 2 * GI)),
    ("a Batch pod with cpu memory requests", {"container-0": BOTH}, ON, (512, 50000, 2 * GI)),
    ("a Batch pod with cpu memory requests 1", {"container-0": BOTH, "container-1": LIMITS_ONLY}, ON,
     (512, 150000, 4 * GI)),
    ("a Batch pod with no limit", {"container-0": REQUESTS_ONLY}, ON, (512, -1, -1)),
    ("a Batch pod with partial limited", {"container-0": BOTH, "container-1": REQUESTS_ONLY}, ON,
     (1024, -1, -1)),
    ("a Batch pod scaled with ratio", {"container-0": BOTH}, Rule(True, 1.2),
     (512, int(math.ceil(50000 / 1.2)), 2 * GI)),
    # beyond Koordinator's table: a ratio at or below 1 does not scale; -1 is never scaled
    ("ratio below 1 does not scale", {"container-0": BOTH}, Rule(True, 0.8), (512, 50000, 2 * GI)),
    ("only the memory is limited", {"c": BatchSpec({CPU: 2000}, {MEM: GI})}, ON, (2048, -1, GI)),
])
def test_pod_knobs(name, containers, rule, want):
    k = pod_knobs(containers, rule)
    assert (k.cpu_shares, k.cfs_quota, k.memory_limit) == want, name


@pytest.mark.parametrize("name, spec, rule, want", [
    ("a Batch container with cfs quota unset", BOTH, OFF, (512, -1, 2 * GI)),
    ("a Batch container with requests", BOTH, ON, (512, 50000, 2 * GI)),
    ("a Batch container with requests 1", LIMITS_ONLY, ON, (2, 100000, 2 * GI)),
    ("a Batch container scaled by ratio", BOTH, Rule(True, 1.2), (512, int(math.ceil(50000 / 1.2)), 2 * GI)),
    ("requests only: unlimited", REQUESTS_ONLY, ON, (512, -1, -1)),
    ("a zero limit is no limit", BatchSpec({CPU: 0}, {CPU: 0, MEM: 0}), ON, (2, -1, -1)),
])
def test_container_knobs(name, spec, rule, want):
    k = container_knobs(spec, rule)
    assert (k.cpu_shares, k.cfs_quota, k.memory_limit) == want, name


@pytest.mark.parametrize("milli, shares, quota", [
    (-1, 2, -1), (0, 2, -1), (1, 2, 1000), (5, 5, 1000), (10, 10, 1000), (500, 512, 50000), (1000, 1024, 100000),
    (1500, 1536, 150000), (256000, 262144, 25600000), (10**9, 262144, 10**11),
])
def test_milli_cpu_conversions(milli, shares, quota):
    assert milli_cpu_to_shares(milli) == shares
    assert milli_cpu_to_quota(milli) == quota


@pytest.mark.parametrize("shares, weight", [(2, 1), (512, 20), (1024, 39), (1536, 59), (262144, 10000)])
def test_shares_to_weight_is_kubelets(shares, weight):
    assert shares_to_weight(shares) == weight


@pytest.mark.parametrize("name, config, want", [
    ("initialize true (no NodeSLO strategy)", {}, True),
    ("initialize false (enable, cfsQuota)", {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}, False),
    ("cfsQuota policy but suppress off", {"be_suppress": {"enable": False, "cpuSuppressPolicy": "cfsQuota"}}, True),
    ("cpuset policy", {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cpuset"}}, True),
    ("policy unset: the default cpuset", {"be_suppress": {"enable": True}}, True),
])
def test_rule_for_node_slo(name, config, want):
    assert cfs_quota_enabled(config) is want, name


@pytest.mark.parametrize("raw, want", [(None, -1.0), ("1.2", 1.2), (" 2 ", 2.0), ("0.5", 0.5)])
def test_cpu_normalization_ratio(raw, want):
    assert parse_ratio(raw) == want


@pytest.mark.parametrize("raw", ["", "abc", "0", "-1", "nan", "inf", "1" * 100])
def test_cpu_normalization_ratio_invalid(raw):
    with pytest.raises(ValueError):
        parse_ratio(raw)


def _ps(labels=None, containers=None, annotations=None) -> PodState:
    manifest = {"metadata": {"name": "p", "uid": "u1", "labels": labels or {}, "annotations": annotations or {}},
                "spec": {"containers": containers or [{"name": "c"}]}}
    pod = pod_from_manifest(manifest)
    return PodState(uid="u1", pod=pod, qos=pod.qos_class, kube_qos=pod.kube_qos, cgroup_dir="kubepods/besteffort/podu1")


BATCH_C = [{"name": "c", "resources": {"requests": {CPU: "500"}, "limits": {CPU: "500"}}}]


@pytest.mark.parametrize("name, labels, want", [
    ("qos is BE", {"koordinator.sh/qosClass": "BE"}, True),
    ("qos is not BE", {"koordinator.sh/qosClass": "LS"}, False),
    # Test_isPodQoSBEByAttr "qos is not BE 1": no label, so not BE, even though the pod is kube BestEffort
    ("qos is not BE 1", {}, False),
])
def test_only_pods_labelled_be(name, labels, want):
    ps = _ps(labels, BATCH_C)
    assert ps.pod is not None and ps.pod.kube_qos == "BestEffort"
    assert (pod_batch(ps) is not None) is want, name


def test_batch_spec_from_the_pod_spec_then_the_annotation():
    be = {"koordinator.sh/qosClass": "BE"}
    # a Batch pod without requests: nothing to do at pod level
    assert pod_batch(_ps(be)).pod is None
    anno = {"node.koordinator.sh/extended-resource-spec": json.dumps(
        {"containers": {"c": {"requests": {CPU: "1k"}, "limits": {CPU: "1500", MEM: "1Gi"}}}})}
    got = pod_batch(_ps(be, annotations=anno))
    assert got.pod == {"c": BatchSpec({CPU: 1000}, {CPU: 1500, MEM: GI})}
    # the pod spec wins over the annotation
    got = pod_batch(_ps(be, BATCH_C, annotations=anno))
    assert got.pod == {"c": BatchSpec({CPU: 500}, {CPU: 500})} and got.containers["c"] == BatchSpec({CPU: 500}, {CPU: 500})
    # an empty containers map is none (Koordinator would write a pod memory limit of 0)
    empty = {"node.koordinator.sh/extended-resource-spec": '{"containers": {}}'}
    assert pod_batch(_ps(be, annotations=empty)).pod is None
    # a malformed annotation is ignored (logged)
    for bad in ("{", '{"containers": []}', json.dumps({"containers": {"c": {"limits": {CPU: "lots"}}}})):
        got = pod_batch(_ps(be, annotations={"node.koordinator.sh/extended-resource-spec": bad}), set())
        assert got.pod is None and got.containers == {}


def test_a_mid_be_pod_is_held_to_its_mid_resources():
    """A Mid+BE pod (koord-mid, QoS BE, on mid-cpu / mid-memory) gets its cgroups from its mid resources as a
    batch pod from its batch ones (koordinator#1442); a container with both kinds counts their sum; a Mid+LS
    pod is not touched. By hand: 2000m requested → cpu.shares 2048; 4000m limit → quota 400,000 µs."""
    mid_cpu, mid_mem = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"
    c = [{"name": "c", "resources": {"requests": {mid_cpu: "2000", mid_mem: "1Gi"},
                                     "limits": {mid_cpu: "4000", mid_mem: "2Gi"}}},
         {"name": "d", "resources": {"requests": {mid_cpu: "500", CPU: "500"}, "limits": {mid_cpu: "1000"}}}]
    got = pod_batch(_ps({"koordinator.sh/qosClass": "BE"}, c))
    assert got.containers["c"] == BatchSpec({CPU: 2000, MEM: GI}, {CPU: 4000, MEM: 2 * GI})
    assert got.containers["d"] == BatchSpec({CPU: 1000}, {CPU: 1000})
    rule = Rule(cfs_quota_enabled=True)
    assert container_knobs(got.containers["c"], rule) == Knobs(2048, 400000, 2 * GI)
    assert pod_batch(_ps({"koordinator.sh/qosClass": "LS"}, c)) is None
    anno = {"node.koordinator.sh/extended-resource-spec": json.dumps(
        {"containers": {"c": {"requests": {mid_cpu: "1000"}, "limits": {mid_cpu: "2000", mid_mem: "1Gi"}}}})}
    assert pod_batch(_ps({"koordinator.sh/qosClass": "BE"}, annotations=anno)).pod == {
        "c": BatchSpec({CPU: 1000}, {CPU: 2000, MEM: GI})}


def test_pods_without_a_manifest_are_not_touched():
    """A pod the agent found only as a cgroup (no labels known) is not BE by label: nothing."""
    ps = PodState(uid="u9", pod=None, qos="BE", kube_qos="BestEffort", cgroup_dir="kubepods/besteffort/podu9")
    assert pod_batch(ps) is None
