"""``koordfw simulate`` with the manifests a real cluster sends: a Deployment's ReplicaSet pods with
required pod anti-affinity, a Deployment spread over two zones, a DaemonSet-like pod with a hostPort."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from koordfw.cli import main

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def nodes(n: int, zones: int = 1) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"worker-{i}", "labels": {HOST: f"worker-{i}", ZONE: f"eu-west-1{'abc'[i % zones]}"}},
             "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                        "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110"}}} for i in range(n)]


def deployment(name: str, replicas: int, template_spec: dict) -> list[dict]:
    """A Deployment, its ReplicaSet and the pods the ReplicaSet controller created, as the API has them."""
    labels = {"app.kubernetes.io/name": name, "pod-template-hash": "5d8f7b9c4"}
    rs_name = f"{name}-5d8f7b9c4"
    docs: list[dict] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "shop"},
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                  "template": {"metadata": {"labels": {"app.kubernetes.io/name": name}}, "spec": template_spec}}},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": rs_name, "namespace": "shop", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": "d-1",
                                 "controller": True}]},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": template_spec}}},
    ]
    for i, suffix in enumerate(["x7k2p", "m4q9z", "t8w3n", "b5r6v", "c2d4f", "h9j1k"][:replicas]):
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{rs_name}-{suffix}", "namespace": "shop", "labels": labels,
            "creationTimestamp": f"2026-11-30T10:00:0{i}Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": "rs-1",
                                 "controller": True, "blockOwnerDeletion": True}]}, "spec": template_spec})
    return docs


def simulate(tmp_path: Path, docs: list[dict], capsys) -> dict:
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    assert main(["simulate", str(f), "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


CONTAINER = {"name": "app", "image": "registry.example/shop/api:1.4.2",
             "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}}


def test_three_replicas_with_required_anti_affinity_on_three_nodes_and_a_fourth_pending(tmp_path, capsys):
    spec = {"containers": [CONTAINER], "affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "api"}}, "topologyKey": HOST}]}}}
    out = simulate(tmp_path, [*nodes(3), *deployment("api", 4, spec)], capsys)
    pods = sorted(out["pods"], key=lambda p: p["name"])
    placed = [p["node"] for p in pods if p["node"]]
    assert sorted(placed) == ["worker-0", "worker-1", "worker-2"]
    pending = [p for p in pods if p["node"] is None]
    assert len(pending) == 1 and pending[0]["phase"] == "Pending"
    assert pending[0]["reason"] == "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."


def test_a_deployment_spread_over_two_zones_with_max_skew_one(tmp_path, capsys):
    spec = {"containers": [CONTAINER], "topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "web"}}, "matchLabelKeys": ["pod-template-hash"]}]}
    # four nodes, three in zone a: without the constraint most replicas would land in zone a
    docs = [*nodes(4, zones=2), *deployment("web", 5, spec)]
    for d in docs[:4]:
        d["metadata"]["labels"][ZONE] = "eu-west-1a" if d["metadata"]["name"] != "worker-1" else "eu-west-1b"
    out = simulate(tmp_path, docs, capsys)
    zone = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in docs[:4]}
    per_zone: dict[str, int] = {}
    for p in out["pods"]:
        assert p["node"], p
        per_zone[zone[p["node"]]] = per_zone.get(zone[p["node"]], 0) + 1
    assert sorted(per_zone.values()) == [2, 3]


def test_a_host_port_clash_leaves_the_second_pod_pending(tmp_path, capsys):
    def exporter(name: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "monitoring",
                                                               "labels": {"app": "node-exporter"}},
                "spec": {"containers": [{"name": "node-exporter", "image": "quay.io/prometheus/node-exporter:v1.8.1",
                                         "ports": [{"name": "metrics", "containerPort": 9100, "hostPort": 9100,
                                                    "protocol": "TCP"}],
                                         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                         "hostNetwork": True, "nodeSelector": {HOST: "worker-0"}}}

    out = simulate(tmp_path, [*nodes(2), exporter("node-exporter-a"), exporter("node-exporter-b")], capsys)
    pods = {p["name"]: p for p in out["pods"]}
    assert pods["node-exporter-a"]["node"] == "worker-0"
    assert pods["node-exporter-b"]["node"] is None
    assert pods["node-exporter-b"]["reason"] == (
        "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, "
        "1 node(s) didn't match Pod's node affinity/selector.")
