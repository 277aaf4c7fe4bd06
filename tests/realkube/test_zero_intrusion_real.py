"""Zero intrusion, end to end, on a real control plane (kube-apiserver, etcd, kube-controller-manager v1.20.2):
Koordinator's documented ClusterColocationProfile (examples/kubernetes/colocation-profile.yaml) and an
unchanged Deployment and Job (no Koordinator label, the default scheduler name) in a namespace the profile
selects. kube-controller-manager creates their pods; kube-apiserver calls ``koordfw manager``'s mutating and
validating webhooks over TLS; the pods come out BE, koord-batch, scheduled by koordfw-scheduler and asking
``kubernetes.io/batch-cpu``/``batch-memory`` instead of cpu/memory; the manager has sold batch resources in
Node.status from the nodes' NodeMetrics (written as the agent writes them, stamped now); ``koordfw
scheduler`` binds every pod within them. And the webhook's namespace exclusion works on v1.20, where no
namespace carries the automatic ``kubernetes.io/metadata.name`` label: pods of kube-system and koordfw-system
are not sent to it, pods of other namespaces are.

deploy/ is applied with ``kubectl apply -f deploy/`` and the components run as deploy_kit.py says (the
manifests' args and ServiceAccounts, as local processes). One adaptation of deploy/webhook.yaml: no
kube-proxy or pods run here, so the Service ``koordfw-manager-webhook`` has no endpoints; after the apply,
both webhook configurations are replaced by the same ones whose ``clientConfig`` is ``url:
https://127.0.0.1:<the manager's --webhook-listen port>/mutate-pod`` (``/validate-pod``) instead of
``service``, with ``caBundle`` the self-signed certificate made with openssl for IP 127.0.0.1 that the
manager serves (``--tls-cert-file``). Rules, selectors and policies are deploy/'s.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from contextlib import suppress

from deploy_kit import (
    NS,
    ROOT,
    Component,
    delete_deploy_namespace,
    healthy,
    kubectl_apply_deploy,
    manager_argv,
    metric,
    point_webhooks_at,
    scheduler_argv,
    sleep_until_audited,
    started,
)
from realkube_testkit import bound, pods, wait_until

from koordfw.core.quantity import parse_quantity
from koordfw.extension import BATCH_CPU, BATCH_MEMORY, LABEL_POD_QOS
from koordfw.testing.control_plane import ControlPlaneError

BATCH_NS = "zi-batch"
NODES = ("zi-n1", "zi-n2")


def kubectl(plane, *args: str, stdin: str | None = None) -> str:
    r = subprocess.run(["kubectl", "--kubeconfig", str(plane.kubeconfig), *args], input=stdin, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, f"kubectl {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


WORKLOADS = f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web-crawler, namespace: {BATCH_NS}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web-crawler}}}}
  template:
    metadata: {{labels: {{app: web-crawler}}}}
    spec:
      containers:
      - name: crawler
        image: registry.k8s.io/pause:3.9
        resources:
          requests: {{cpu: 500m, memory: 512Mi}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: etl, namespace: {BATCH_NS}}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: etl
        image: registry.k8s.io/pause:3.9
        resources:
          requests: {{cpu: "1", memory: 1Gi}}
          limits: {{cpu: "1", memory: 1Gi}}
"""


class Running:
    """deploy/ applied; the manager (its webhook on ``webhook_port``) and the scheduler running."""

    def __init__(self, plane, tmp_path) -> None:
        self.plane = plane
        kubectl_apply_deploy(plane)
        msa, margv, self.webhook_port, mhealth = manager_argv(plane, tmp_path)
        ssa, sargv, shealth = scheduler_argv(plane, tmp_path)
        self.manager = Component("koordfw-manager", margv, tmp_path / "manager.log", sa=msa)
        self.scheduler = Component("koordfw-scheduler", sargv, tmp_path / "scheduler.log", sa=ssa)
        self.components = [self.manager, self.scheduler]
        try:
            point_webhooks_at(plane, self.webhook_port)
            started(self.manager, lambda: healthy(mhealth, "/readyz") and healthy(self.webhook_port, "/readyz", tls=True),
                    "the manager leading and its webhook's caches synced")
            started(self.scheduler, lambda: healthy(shealth, "/readyz"), "the scheduler leading and synced")
        except BaseException:
            self.stop()
            raise

    def webhook_requests(self, **labels: str) -> float:
        return metric(self.webhook_port, "koordfw_webhook_requests_total", labels)

    def refused(self) -> dict[str, list[str]]:
        sleep_until_audited()
        return {c.user: self.plane.refused(c.user) for c in self.components}

    def stop(self) -> dict[str, int | None]:
        codes = {c.name: c.stop() for c in self.components}
        delete_deploy_namespace(self.plane)
        return codes


def test_an_unchanged_deployment_and_job_run_as_batch_pods_within_the_batch_resources(kube_plane, tmp_path):
    plane = kube_plane
    for n in NODES:
        plane.add_node(n, cpu="8", memory="16Gi")
    run = Running(plane, tmp_path)
    try:
        kubectl(plane, "apply", "-f", str(ROOT / "examples" / "kubernetes" / "colocation-profile.yaml"))
        # what the agents report: 1 core and 2 GiB in use on each node, all of it the system's
        for n in NODES:
            plane.report_node_metric(n, cpu="1", memory="2Gi", system_cpu="1", system_memory="2Gi")

        def batch() -> dict[str, dict[str, str]]:
            alloc = {n: plane.request("GET", f"/api/v1/nodes/{n}")["status"]["allocatable"] for n in NODES}
            return alloc if all(BATCH_CPU in a and BATCH_MEMORY in a for a in alloc.values()) else {}
        alloc = wait_until(batch, 30, "the manager's batch resources on both nodes")
        for n in NODES:
            # slo-controller-config: 60 % of 8 cores reclaimable, 1 in use -> 3.8 cores (milli-cores);
            # memory 65 % of 16 GiB (rounded to a byte) less 2 GiB in use
            assert parse_quantity(alloc[n][BATCH_CPU]) == 3800, alloc[n]
            assert parse_quantity(alloc[n][BATCH_MEMORY]) == round(16 * 2**30 * 0.65) - 2 * 2**30, alloc[n]

        # a namespace the profile selects, and workloads as anyone writes them
        kubectl(plane, "create", "namespace", BATCH_NS)
        kubectl(plane, "label", "namespace", BATCH_NS, "koordinator.sh/enable-colocation=true")
        wait_until(lambda: plane.request("GET", f"/api/v1/namespaces/{BATCH_NS}/serviceaccounts"
                                         )["items"], 30, "the namespace's default ServiceAccount")
        before = run.webhook_requests(webhook="mutate", result="patched")
        kubectl(plane, "apply", "-f", "-", stdin=WORKLOADS)

        placed = wait_until(lambda: len(b := bound(plane, BATCH_NS)) == 5 and b, 30, "all five pods bound")
        # the API server called the mutating webhook over TLS for each pod (and the pods show what it did)
        assert run.webhook_requests(webhook="mutate", result="patched") - before >= 5
        by_node: dict[str, list[dict]] = defaultdict(list)
        for p in pods(plane, BATCH_NS):
            meta, spec = p["metadata"], p["spec"]
            owner = meta["ownerReferences"][0]["kind"]
            assert owner in ("ReplicaSet", "Job"), meta
            assert meta["labels"][LABEL_POD_QOS] == "BE" and meta["labels"]["koordinator.sh/mutated"] == "true"
            assert spec["priorityClassName"] == "koord-batch" and spec["priority"] == 5000, spec
            assert spec["schedulerName"] == "koordfw-scheduler"
            (c,) = spec["containers"]
            for part in ("requests", "limits"):
                res = c["resources"].get(part) or {}
                assert "cpu" not in res and "memory" not in res, (meta["name"], c["resources"])
            req = c["resources"]["requests"]
            # milli-cores; the API server stores quantities in canonical form (the webhook's "1000" reads "1k")
            want_cpu, want_mem = (1000, 2**30) if owner == "Job" else (500, 512 * 2**20)
            assert parse_quantity(req[BATCH_CPU]) == want_cpu and parse_quantity(req[BATCH_MEMORY]) == want_mem, req
            if owner == "Job":
                assert parse_quantity(c["resources"]["limits"][BATCH_CPU]) == 1000
            by_node[placed[meta["name"]]].append(req)
        # every node's pods within its batch resources
        for n, reqs in by_node.items():
            assert sum(parse_quantity(r[BATCH_CPU]) for r in reqs) <= parse_quantity(alloc[n][BATCH_CPU]), (n, reqs)
            assert sum(parse_quantity(r[BATCH_MEMORY]) for r in reqs) <= parse_quantity(alloc[n][BATCH_MEMORY])
        # the controller-manager created them (its controllers' own ServiceAccounts, as the audit log says)
        creators = {e["user"]["username"] for e in plane.audit()
                    if e["verb"] == "create" and (ref := e.get("objectRef") or {}).get("resource") == "pods"
                    and not ref.get("subresource") and ref.get("namespace") == BATCH_NS}
        assert creators == {"system:serviceaccount:kube-system:replicaset-controller",
                            "system:serviceaccount:kube-system:job-controller"}, creators
        assert run.refused() == {c.user: [] for c in run.components}
    finally:
        codes = run.stop()
        plane.delete_pods(BATCH_NS)
    assert codes == {"koordfw-manager": 0, "koordfw-scheduler": 0}, (codes, run.manager.log()[-2000:])


def test_the_webhook_is_not_called_for_kube_system_nor_its_own_namespace_on_v1_20(kube_plane, tmp_path):
    plane = kube_plane
    # v1.20: namespaces have no kubernetes.io/metadata.name label (1.21 added it); start from kube-system
    # as such a cluster has it (an earlier test's manager may have labelled it already)
    ks = plane.request("GET", "/api/v1/namespaces/kube-system")
    assert "kubernetes.io/metadata.name" not in (ks["metadata"].get("labels") or {})
    plane.request("PATCH", "/api/v1/namespaces/kube-system",
                  {"metadata": {"labels": {"koordfw.io/admission-webhook": None}}},
                  content_type="application/merge-patch+json")
    plane.create_namespace("zi-other")
    run = Running(plane, tmp_path)
    created = []
    try:
        # the manager labels kube-system as deploy/webhook.yaml's selector excludes it
        wait_until(lambda: (plane.request("GET", "/api/v1/namespaces/kube-system")["metadata"].get("labels") or {}
                            ).get("koordfw.io/admission-webhook") == "skip", 30, "kube-system labelled by the manager")
        total = run.webhook_requests()

        def create(ns: str, name: str) -> None:
            plane.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                         "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}})
            created.append((ns, name))

        create("kube-system", "zi-system-pod")
        create(NS, "zi-own-pod")
        # admission is part of the create: had the API server called the webhook, it would have counted it
        assert run.webhook_requests() == total
        create("zi-other", "zi-other-pod")
        assert run.webhook_requests() - total == 2  # the mutating and the validating webhook
        assert run.webhook_requests(result="skipped") == 0
        assert run.refused() == {c.user: [] for c in run.components}
    finally:
        for ns, name in created:
            with suppress(ControlPlaneError):
                plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", params={"gracePeriodSeconds": "0"})
        codes = run.stop()
    assert codes == {"koordfw-manager": 0, "koordfw-scheduler": 0}, (codes, json.dumps(run.manager.log()[-2000:]))
