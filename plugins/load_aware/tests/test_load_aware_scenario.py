"""load_aware through ``koordfw simulate``: new LS pods avoid the hot node, and pods placed during the
run are estimated so the cool node stops taking pods at the 65 % estimated-usage threshold."""

import json

from koordfw.cli import main

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: hot}
status: {allocatable: {cpu: "16", memory: 64Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: cool}
status: {allocatable: {cpu: "16", memory: 64Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: unreported}
status: {allocatable: {cpu: "4", memory: 16Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: busy, namespace: svc, labels: {koordinator.sh/qosClass: LS}}
spec:
  nodeName: hot
  priority: 9500
  containers: [{name: main, resources: {requests: {cpu: "2", memory: 4Gi}, limits: {cpu: "12", memory: 4Gi}}}]
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: calm, namespace: svc, labels: {koordinator.sh/qosClass: LS}}
spec:
  nodeName: cool
  priority: 9500
  containers: [{name: main, resources: {requests: {cpu: "6", memory: 8Gi}, limits: {cpu: "6", memory: 8Gi}}}]
status: {phase: Running}
---
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: hot}
status:
  updateTime: "2026-11-20T10:00:00Z"
  nodeMetric: {nodeUsage: {resources: {cpu: "11", memory: 8Gi}}}
  podsMetric: [{namespace: svc, name: busy, podUsage: {resources: {cpu: "10", memory: 4Gi}}}]
---
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: cool}
status:
  updateTime: "2026-11-20T10:00:00Z"
  nodeMetric: {nodeUsage: {resources: {cpu: "2", memory: 8Gi}}}
  podsMetric: [{namespace: svc, name: calm, podUsage: {resources: {cpu: "1", memory: 6Gi}}}]
"""

WEB = """---
apiVersion: v1
kind: Pod
metadata: {{name: web-{i}, namespace: svc, labels: {{koordinator.sh/qosClass: LS}}}}
spec:
  priority: 9500
  containers: [{{name: main, resources: {{requests: {{cpu: "2", memory: 2Gi}}, limits: {{cpu: "2", memory: 2Gi}}}}}}]
"""


def run(capsys, tmp_path, pods, *extra):
    (tmp_path / "c.yaml").write_text(CLUSTER + "".join(WEB.format(i=i) for i in range(pods)))
    assert main(["simulate", str(tmp_path), "-o", "json", *extra]) == 0
    return {p["name"]: p for p in json.loads(capsys.readouterr().out)["pods"]}


def test_ls_pods_avoid_the_hot_node(capsys, tmp_path):
    out = run(capsys, tmp_path, 2)
    assert out["web-0"]["node"] == out["web-1"]["node"] == "cool"
    # without load_aware the hot node wins on requests (2 of 16 cores requested)
    out = run(capsys, tmp_path, 2, "--disable", "load_aware")
    assert out["web-0"]["node"] == out["web-1"]["node"] == "hot"


def test_pods_placed_during_the_run_are_estimated(capsys, tmp_path):
    """cool: 2000m reported + 1700m per new web pod; the 5th would make 10500m of 16000m = 66 % > 65 %.
    hot is over the threshold from the start (11000 + 1700 → 79 %); the node without a NodeMetric takes
    what fits by requests (2 pods of 2 cores)."""
    out = run(capsys, tmp_path, 8)
    nodes = [out[f"web-{i}"]["node"] for i in range(8)]
    assert nodes.count("cool") == 4 and nodes.count("unreported") == 2 and nodes.count("hot") == 0
    pending = [p for p in out.values() if p["node"] is None]
    assert len(pending) == 2
    assert all("node(s) cpu usage exceed threshold" in p["reason"] for p in pending)
