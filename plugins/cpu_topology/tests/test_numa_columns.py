"""The vectorised NUMA policy verdict (numa_columns.decide) and reserve's SingleNUMANode shortcut
(numa_columns.reserve_single_numa) against the exact merge (_numa_hint, split_over), on seeded random node states
and requests for every policy; and whole scheduling runs with the columns vs the exact path only."""

import json

import numpy as np
import pytest
from cpu_topology_helpers import STATUS, topo_ann
from koordfw_cpu_topology import numa_plugin
from koordfw_cpu_topology.numa import NUMATopologySpec, available, format_numa_node_resources, split_over
from koordfw_cpu_topology.numa_columns import MAX_ZONES, NUMAColumns, Row, Verdict, decide, reserve_single_numa
from koordfw_cpu_topology.numa_plugin import NodeNUMA, NUMAPolicyMixin, hint_score
from koordfw_cpu_topology.numa_policy import POLICIES, merge_topology_policy

from koordfw.testing import ClusterBuilder, schedule

POLICY_LABEL = "node.koordinator.sh/numa-topology-policy"
NUMA_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
GI = 1 << 30


def _random_node(rng):
    """(node policy, NUMA totals, free amounts, whole free CPUs per NUMA id or None, error)."""
    policy = str(rng.choice([*POLICIES, "Bogus"], p=[0.15, 0.25, 0.25, 0.3, 0.05]))
    if rng.random() < 0.05:
        return policy, {}, {}, None, "insufficient resources on NUMA Node"
    # up to 6 NUMA nodes: the exact merge tries every pair of hints (4,000 for 6, 65,000 for 8)
    z = int(rng.choice([1, 2, 2, 3, 4, 4, 4, 5, 6]))
    ids = sorted(rng.choice(70 if rng.random() < 0.05 else 16, size=z, replace=False).tolist())
    drop = rng.random()  # sometimes a resource is missing on some or all NUMA nodes
    total: dict[int, dict[str, int]] = {}
    for n in ids:
        res = {}
        if not (drop < 0.05 or (drop < 0.1 and rng.random() < 0.5)):
            res["cpu"] = int(rng.integers(0, 17)) * 1000
        if not (0.1 <= drop < 0.15 or (0.15 <= drop < 0.2 and rng.random() < 0.5)):
            res["memory"] = int(rng.integers(0, 65)) * GI
        total[n] = res
    used = []
    for _ in range(int(rng.integers(0, 5))):
        n = int(rng.choice(ids))
        used.append({n: {"cpu": int(rng.integers(0, 9)) * 500, "memory": int(rng.integers(0, 33)) * GI}})
    avail = available(total, used)
    free = None if rng.random() < 0.3 else {n: int(rng.integers(0, 17)) for n in ids if rng.random() < 0.9}
    return policy, total, avail, free, ""


def _random_request(rng):
    cpu = int(rng.choice([0, 1, 2, 4, 8, 12, 16, 24, 40])) * int(rng.choice([1000, 1000, 500]))
    memory = int(rng.choice([0, 1, 4, 16, 32, 64, 100])) * GI
    return {"cpu": cpu, "memory": memory}


def _exact(mixin, node, pod_policy, requests, bound):
    """The exact path's answer for one node: ("mismatch" | "none" | "refused" | "no hint" | "raises", None) or ("admit",
    score)."""
    policy, total, avail, free, error = node
    merged = merge_topology_policy(policy, pod_policy)
    if merged is None:
        return "mismatch", None
    if merged == "":
        return "none", None
    strict = merged in ("Restricted", "SingleNUMANode")
    if error:
        return ("refused" if strict else "no hint"), None
    av = {n: dict(r) for n, r in avail.items()}
    if bound and free is not None:
        for n, res in av.items():
            res["cpu"] = min(res.get("cpu", 0), free.get(n, 0) * 1000)
    spec = NUMATopologySpec(pod_policy, "")
    try:
        hint, admit, _ = mixin._numa_hint(NodeNUMA(policy=merged, total=total, avail=av), requests, spec)
    except ValueError:  # an unknown policy, a NUMA id a mask cannot hold: the pod's cycle fails
        return "raises", None
    if strict and not admit:
        return "refused", None
    return "admit", hint_score(hint)


@pytest.mark.parametrize("seed", range(4))
def test_decide_matches_the_exact_merge_on_random_nodes(seed):
    rng = np.random.default_rng(seed)
    mixin = NUMAPolicyMixin()
    mixin._numa_init()
    nodes = [_random_node(rng) for _ in range(300)]
    cols = NUMAColumns()
    cols.grow(len(nodes))
    cols.set_rows([Row(i, 0, policy, total, avail, free, error, (f"pod-{i}",) if i % 97 == 0 else ())
                   for i, (policy, total, avail, free, error) in enumerate(nodes)])
    idx = np.arange(len(nodes), dtype=np.int64)
    seen = set()
    for _ in range(50):
        pod_policy = str(rng.choice(POLICIES))
        requests, bound = _random_request(rng), bool(rng.random() < 0.3)
        uid = "pod-97" if rng.random() < 0.2 else "other"
        v = decide(cols, idx, pod_policy, requests, bound, uid)
        slow, mismatch = set(v.slow), set(v.mismatch)
        for j, node in enumerate(nodes):
            kind, score = _exact(mixin, node, pod_policy, requests, bound)
            seen.add((merge_topology_policy(node[0], pod_policy), kind))
            if kind == "mismatch":
                assert j in mismatch and v.score[j] == -1, (j, node)
                continue
            assert j not in mismatch
            if kind == "none":
                assert j not in slow and v.score[j] == -1, (j, node, requests)
            elif kind in ("raises", "no hint"):  # rows the columns cannot describe
                assert j in slow and cols.exact[j]
            elif j in slow:  # the exact path decides it: the columns could not, or the policy refuses it
                assert kind == "refused" or cols.exact[j] or (uid == "pod-97" and j == 97), (j, node, requests)
            else:
                assert kind == "admit" and v.score[j] == score, (j, node, pod_policy, requests, bound)
        assert v.scored == bool((v.score >= 0).any())
    # the draws reached every policy's admissions and refusals
    for policy in ("BestEffort", "Restricted", "SingleNUMANode"):
        assert (policy, "admit") in seen
    assert ("Restricted", "refused") in seen and ("SingleNUMANode", "refused") in seen
    assert (None, "mismatch") in seen


def test_rows_the_columns_cannot_describe_go_to_the_exact_path():
    cols = NUMAColumns()
    cols.grow(5)
    zones = {n: {"cpu": 4000, "memory": GI} for n in range(2)}
    many = {n: {"cpu": 1000} for n in range(MAX_ZONES + 1)}
    cols.set_rows([Row(0, 0, "Bogus", zones, zones, None, "", ()),
                   Row(1, 0, "Restricted", {70: {"cpu": 1000}}, {70: {"cpu": 1000}}, None, "", ()),
                   Row(2, 0, "Restricted", many, many, None, "", ()),
                   Row(3, 0, "Restricted", {}, {}, None, "insufficient resources on NUMA Node", ()),
                   Row(4, 0, "Restricted", {0: {"memory": 1 << 50}}, {0: {"memory": 1 << 50}}, None, "", ())])
    assert cols.exact.tolist() == [True, True, True, True, True]
    v = decide(cols, np.arange(5, dtype=np.int64), "", {"cpu": 1000}, False, "u")
    assert v.slow == [0, 1, 2, 3, 4] and v.mismatch == []


@pytest.mark.parametrize("seed", range(4))
def test_reserve_single_numa_matches_the_exact_merge_and_split(seed):
    """Where reserve_single_numa answers, the exact path (merged hint, then split_over on its NUMA nodes) admits
    and takes the same NUMA nodes and the same split; where it does not, the exact path decides."""
    rng = np.random.default_rng(seed)
    mixin = NUMAPolicyMixin()
    mixin._numa_init()
    nodes = [_random_node(rng) for _ in range(300)]
    cols = NUMAColumns()
    cols.grow(len(nodes))
    cols.set_rows([Row(i, 0, policy, total, avail, free, error, (f"pod-{i}",) if i % 97 == 0 else ())
                   for i, (policy, total, avail, free, error) in enumerate(nodes)])
    answered = refused = 0
    for _ in range(40):
        pod_policy = str(rng.choice(POLICIES))
        requests, bound = _random_request(rng), bool(rng.random() < 0.3)
        uid = "pod-97" if rng.random() < 0.2 else "other"
        for i, (policy, total, avail, free, error) in enumerate(nodes):
            got = reserve_single_numa(cols, i, pod_policy, requests, bound, uid)
            merged = merge_topology_policy(policy, pod_policy)
            if merged != "SingleNUMANode" or error or (uid == "pod-97" and i == 97):
                assert got is None, (i, policy, pod_policy)
                continue
            av = {n: dict(r) for n, r in avail.items()}
            if bound and free is not None:
                for n, res in av.items():
                    res["cpu"] = min(res.get("cpu", 0), free.get(n, 0) * 1000)
            try:
                hint, admit, _ = mixin._numa_hint(NodeNUMA(policy=merged, total=total, avail=av), requests,
                                                  NUMATopologySpec(pod_policy, ""))
            except ValueError:  # a NUMA id a mask cannot hold
                assert got is None
                continue
            if got is None:
                refused += not admit
                continue
            answered += 1
            assert admit, (i, requests)
            numa_nodes = hint.bits() if hint.affinity else list(total)
            split = split_over({k: requests.get(k, 0) for k in ("cpu", "memory")}, av, numa_nodes)
            assert got == (numa_nodes, split), (i, total, av, requests, bound)
    assert answered > 200 and refused > 100  # the draws reached both


def _fleet(seed):
    """A small random fleet: 1-4 NUMA nodes of varying size per node (some without memory), policies by
    node label, pods (some bound LSR, some with a pod-level policy, some already on nodes)."""
    rng = np.random.default_rng(seed)
    b = ClusterBuilder()
    for i in range(24):
        numas = int(rng.choice([1, 2, 2, 4]))
        labels = {}
        policy = str(rng.choice(["", "BestEffort", "Restricted", "SingleNUMANode"]))
        if policy:
            labels[POLICY_LABEL] = policy
        b.node(f"n{i}", cpu=str(8 * numas), memory=f"{32 * numas}Gi", labels=labels,
               annotations=topo_ann(1, numas, 4, 2) if numas < 4 else topo_ann(2, 2, 4, 2))
        cpu = str(int(rng.choice([4, 8, 8])))
        zones = [{"name": f"node-{z}", "type": "Node", "resources": [{"name": "cpu", "allocatable": cpu}] + (
            [] if rng.random() < 0.15 else [{"name": "memory", "allocatable": f"{int(rng.choice([8, 32]))}Gi"}])}
            for z in range(numas)]
        b.obj({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
               "metadata": {"name": f"n{i}"}, "zones": zones})
        if rng.random() < 0.3:
            b.pod(f"old{i}", requests={"cpu": "2", "memory": "1Gi"}, node=f"n{i}", annotations={STATUS: json.dumps(
                {"numaNodeResources": [{"node": 0, "resources": {"cpu": "2", "memory": "1Gi"}}]})})
    for j in range(90):
        cpu = str(int(rng.choice([1, 2, 3, 4, 6, 8, 12])))
        memory = f"{int(rng.choice([1, 4, 16, 40]))}Gi"
        anns = {}
        if rng.random() < 0.2:
            anns[NUMA_SPEC] = json.dumps({"numaTopologyPolicy": str(rng.choice(["Restricted", "SingleNUMANode",
                                                                                "BestEffort"]))})
        if rng.random() < 0.3:
            b.pod(f"lsr{j}", requests={"cpu": cpu, "memory": memory}, limits={"cpu": cpu, "memory": memory},
                  labels={"koordinator.sh/qosClass": "LSR"}, annotations=anns, priority=9500)
        else:
            b.pod(f"ls{j}", requests={"cpu": cpu, "memory": memory}, labels={"koordinator.sh/qosClass": "LS"},
                  annotations=anns)
    return b


def _exact_only(cols, idx, pod_policy, requests, bound, uid):
    return Verdict(list(range(len(idx))), [], np.full(len(idx), -1, dtype=np.int64), False)


@pytest.mark.parametrize("seed", range(4))
def test_scheduling_with_the_columns_equals_the_exact_path(seed, monkeypatch):
    """Placements, resource-status (cpusets, NUMA splits) and failure reasons are the same whether the columns
    decide or every node goes through the exact merge."""
    fast = schedule(_fleet(seed), only=["cpu_topology"], seed=seed).to_dict()
    monkeypatch.setattr(numa_plugin, "decide", _exact_only)
    monkeypatch.setattr(numa_plugin, "reserve_single_numa", lambda *a: None)
    exact = schedule(_fleet(seed), only=["cpu_topology"], seed=seed).to_dict()
    assert fast["pods"] == exact["pods"]
    placed = [p for p in fast["pods"] if p.get("node")]
    assert 20 < len(placed) < len(fast["pods"])  # some pods are refused: the reasons were compared too


@pytest.mark.parametrize("seed", range(2))
def test_a_written_resource_status_is_remembered_as_it_reads_back(seed):
    """numa_status_written (pre_bind) stores for the text what _used_numa's parse of it gives."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        split = {int(n): {k: int(rng.choice([0, 1, 7, 500, 1000, 1500, 3 << 20, 5 << 30, 12345]))
                          for k in ("cpu", "memory") if rng.random() < 0.8}
                 for n in rng.choice(8, size=int(rng.integers(1, 4)), replace=False).tolist()}
        text = json.dumps({"cpuset": "0-1", "numaNodeResources": format_numa_node_resources(split)})
        seeded, parsed = NUMAPolicyMixin(), NUMAPolicyMixin()
        seeded._numa_init()
        parsed._numa_init()
        seeded.numa_status_written(text, split)
        assert seeded._numa_status.get(text) is not None
        assert seeded._used_numa(text) == parsed._used_numa(text), split


def test_pre_bind_remembers_what_its_resource_status_reads_back_as():
    """The resource-status pre_bind writes is remembered as the parse of it gives (cpuset and numaNodeResources)."""
    from koordfw_cpu_topology.plugin import STATE_KEY, CPUTopologyPlugin, PodCPUState

    from koordfw import CycleState
    from koordfw.core.model import make_pod

    pod = make_pod("p", "ns", requests={"cpu": "2"})
    for cpus, split in (((0, 1, 5, 9), {1: {"cpu": 4000, "memory": 3 << 30}}), (None, {0: {"cpu": 1500}}),
                        ((2, 3), None)):
        plugin, fresh, state = CPUTopologyPlugin(), CPUTopologyPlugin(), CycleState()
        state[STATE_KEY] = PodCPUState(uid="u", cpus=cpus, numa_split=split)
        text = plugin.pre_bind(pod, None, state)["scheduling.koordinator.sh/resource-status"]
        assert plugin._status_cache.get(text, "missing") == fresh._pod_cpus(text, pod)
        if split:
            assert plugin._numa_status.get(text) == fresh._used_numa(text) != {}
