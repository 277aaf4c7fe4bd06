"""End to end in ``koordfw simulate``: a NodeMetric carrying the node agent's ``prodReclaimableMetric`` gives
the node ``kubernetes.io/mid-cpu`` / ``mid-memory``; a koord-mid pod asking for cpu/memory, matched by a
ClusterColocationProfile, is converted by the colocation_profile webhook to mid-* requests (Koordinator's
ResourceNameMap for Mid) and lands on that node, not on a
node without Mid resources. Hand-derived: node big (16 cores / 64Gi, nodeUsage 4 cores / 16Gi,
prodReclaimable 6 cores / 20Gi, no Prod pod): mid-cpu = min(6000, 16000-4000) = 6000,
mid-memory = min(20Gi, 48Gi) = 20Gi."""

from __future__ import annotations

import json

from koordfw.cli import main

G = 2**30

NODES = """
apiVersion: v1
kind: Node
metadata: {name: big}
status:
  allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
  capacity: {cpu: "16", memory: 64Gi, pods: "110"}
---
apiVersion: v1
kind: Node
metadata: {name: small}
status:
  allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
  capacity: {cpu: "16", memory: 64Gi, pods: "110"}
"""


def metric(name: str, prod: dict | None) -> str:
    status: dict = {"updateTime": "2027-01-15T08:00:00Z",
                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": "4", "memory": "16Gi"}},
                                   "systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
                    "podsMetric": []}
    if prod is not None:
        status["prodReclaimableMetric"] = {"resource": {"resources": prod}}
    return json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                       "status": status})


MID_PROFILE = """
apiVersion: config.koordinator.sh/v1alpha1
kind: ClusterColocationProfile
metadata: {name: colocation-mid}
spec:
  selector: {matchLabels: {koordinator.sh/enable-colocation-mid: "true"}}
  qosClass: LS
  schedulerName: koordfw-scheduler
"""

MID_POD = """
apiVersion: v1
kind: Pod
metadata: {name: stream, namespace: default, labels: {koordinator.sh/enable-colocation-mid: "true"}}
spec:
  schedulerName: koordfw-scheduler
  priorityClassName: koord-mid
  priority: 7500
  containers:
  - name: c
    resources:
      requests: {cpu: "4", memory: 8Gi}
      limits: {cpu: "4", memory: 8Gi}
"""


def run(capsys, tmp_path, *docs: str) -> dict:
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(docs))
    assert main(["simulate", str(f), "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_prod_reclaimable_gives_mid_resources_and_places_a_mid_pod(capsys, tmp_path):
    out = run(capsys, tmp_path, NODES, metric("big", {"cpu": "6", "memory": "20Gi"}), metric("small", None), MID_PROFILE, MID_POD)
    alloc = {n["name"]: n["allocatable"] for n in out["nodes"]}
    assert alloc["big"]["kubernetes.io/mid-cpu"] == "6000"
    assert alloc["big"]["kubernetes.io/mid-memory"] == "20Gi"
    # no prodReclaimableMetric: Koordinator sizes Mid from zero reclaimable (not degraded)
    # (0 is written as no resource at all in the embedded engine)
    assert "kubernetes.io/mid-cpu" not in alloc["small"]
    [pod] = out["pods"]
    assert (pod["name"], pod["node"]) == ("stream", "big")
    rows = {r["node"]: r for r in out["midResources"]}
    assert rows["big"]["message"]["cpu"].startswith("midAllocatable[CPU(milli-core)]:6000 = min(min(ProdReclaimable:6000")


def test_a_mid_pod_larger_than_the_mid_resources_stays_pending(capsys, tmp_path):
    out = run(capsys, tmp_path, NODES, metric("big", {"cpu": "2", "memory": "20Gi"}), metric("small", None), MID_PROFILE, MID_POD)
    assert [p["node"] for p in out["pods"]] == [None]
