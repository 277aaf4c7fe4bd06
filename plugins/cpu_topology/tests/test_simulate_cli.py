"""Scenario tests through ``koordfw simulate DIR -o json`` with manifests on disk."""

import json
from pathlib import Path

import yaml
from cpu_topology_helpers import STATUS, TOPO
from koordfw_cpu_topology.cpuset import parse_cpuset
from koordfw_cpu_topology.topology import detail_for_test, topology_annotation

from koordfw.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "colocation"


def _pod(name, cpu, qos="LSR", spec=None, node=None, status=None):
    anns = {}
    if spec:
        anns["scheduling.koordinator.sh/resource-spec"] = json.dumps(spec)
    if status:
        anns[STATUS] = json.dumps({"cpuset": status})
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "labels": {"koordinator.sh/qosClass": qos},
                        "annotations": anns},
           "spec": {"priority": 9500, "containers": [{"name": "main", "resources": {
               "requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}}]}}
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
    return pod


def _write(tmp_path):
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": "numa-4", "annotations": {TOPO: topology_annotation(detail_for_test(2, 2, 4, 2))}},
              "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}]
    pods = [_pod("running", "6", node="numa-4", status="0-5"),
            _pod("db", "4"), _pod("cache", "2", spec={"preferredCPUBindPolicy": "SpreadByPCPUs"}),
            _pod("search", "8", spec={"requiredCPUBindPolicy": "FullPCPUs", "preferredCPUExclusivePolicy": "PCPULevel"}),
            _pod("odd", "3", spec={"requiredCPUBindPolicy": "FullPCPUs"}),
            _pod("web", "2", qos="LS")]
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump_all(nodes))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    return tmp_path


def _simulate(capsys, *paths):
    assert main(["simulate", *map(str, paths), "-o", "json"]) in (0, None, 1)
    return json.loads(capsys.readouterr().out)


def test_simulate_binds_cpusets(tmp_path, capsys):
    out = _simulate(capsys, _write(tmp_path))
    pods = {p["name"]: p for p in out["pods"]}
    got = {n: json.loads(p["annotations"][STATUS])["cpuset"] for n, p in pods.items() if STATUS in p["annotations"]}
    # NUMA 0 holds 0-5 already; LeastAllocated sends db to NUMA 2 (idle, on the emptier socket); cache ties
    # NUMA 1 and 3 at 8 free CPUs and goes to socket 1 (12 free vs 10), one CPU per core; search needs 8 CPUs
    # of whole free cores and only NUMA 1 still has them.
    assert got == {"db": "16-19", "cache": "24,26", "search": "8-15"}
    assert pods["web"]["phase"] == "Bound" and STATUS not in pods["web"]["annotations"]
    assert pods["odd"]["phase"] == "Pending"
    assert "not multiple cpus per core" in pods["odd"]["reason"]
    assert {r["pod"] for r in out["cpusets"]} == {"default/running", "default/db", "default/cache", "default/search"}


def test_simulate_is_deterministic(tmp_path, capsys):
    d = _write(tmp_path)
    first = _simulate(capsys, d)["pods"]
    second = _simulate(capsys, d)["pods"]
    assert first == second


def test_example_cluster_binds_lsr_pods(capsys):
    out = _simulate(capsys, EXAMPLES)
    bound = {(r["pod"]): r["cpuset"] for r in out["cpusets"]}
    assert {"cache/redis-0", "cache/redis-1", "shop/nginx-0", "shop/search-0"} <= set(bound)
    # CPU 0 is reserved on both nodes
    assert all(0 not in parse_cpuset(c) for c in bound.values())
