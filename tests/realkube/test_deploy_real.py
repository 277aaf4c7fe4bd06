"""deploy/ on a real API server (kube-apiserver v1.20.2 with RBAC): ``kubectl apply -f deploy/`` as a user
runs it; every CRD structural and Established; ``koordfw manager``, ``koordfw scheduler`` and ``koordfw
agent`` run with the container args of deploy/manager.yaml, scheduler.yaml and agent.yaml, each with the
token of the ServiceAccount its manifest names, and the API server (its audit log) refuses none of their
requests while they do their work: the manager sells batch resources and writes NodeSLOs, the scheduler
binds pods (one through a pod affinity term naming another namespace) and writes events, the agent
publishes its node's reports from this machine's cgroups.

What a local process cannot take verbatim from a pod's manifest is listed in deploy_kit.py: ``--in-cluster``
becomes ``--kubeconfig`` with the same ServiceAccount's token; listen addresses move to free loopback ports;
mounted paths (webhook certificate, scheduler profile, the agent's ``/host/sys/fs``) are local files; the
agent runs ``--once --dry-run`` (it reads the real cgroups and writes none of them).
"""

from __future__ import annotations

import json

from deploy_kit import (
    DEPLOY,
    NS,
    Component,
    agent_argv,
    delete_deploy_namespace,
    documents,
    healthy,
    kubectl_apply_deploy,
    manager_argv,
    point_webhooks_at,
    scheduler_argv,
    sleep_until_audited,
    started,
)
from realkube_testkit import bound, pod, wait_until

CRD_FILES = sorted(p.name for p in DEPLOY.glob("00-crd-*.yaml"))


def crd_conditions(plane, name: str) -> dict[str, dict]:
    obj = plane.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_deploy_applies_and_every_component_runs_unrefused_under_its_rbac(kube_plane, tmp_path):
    plane = kube_plane
    out = kubectl_apply_deploy(plane)
    objects = [d for f in sorted(DEPLOY.glob("*.yaml")) for d in documents(f.name)]
    assert len([ln for ln in out.splitlines() if ln.strip()]) == len(objects), out

    # every CRD: structural (no NonStructuralSchema condition), names accepted, Established
    crds = [d["metadata"]["name"] for f in CRD_FILES for d in documents(f) if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == len(CRD_FILES)
    for name in crds:
        conds = wait_until(lambda n=name: (c := crd_conditions(plane, n)).get("Established", {}).get("status")
                           == "True" and c, 30, f"CRD {name} Established")
        assert "NonStructuralSchema" not in conds, (name, conds["NonStructuralSchema"])
        assert conds["NamesAccepted"]["status"] == "True", (name, conds["NamesAccepted"])

    plane.add_node("dep-n1", cpu="8", memory="16Gi")
    plane.add_node("dep-n2", cpu="8", memory="16Gi")

    # the manager (controllers + webhook) and the scheduler, as their Deployments run them
    msa, margv, webhook_port, mhealth = manager_argv(plane, tmp_path)
    ssa, sargv, shealth = scheduler_argv(plane, tmp_path)
    manager = Component("koordfw-manager", margv, tmp_path / "manager.log", sa=msa)
    scheduler = Component("koordfw-scheduler", sargv, tmp_path / "scheduler.log", sa=ssa)
    components = [manager, scheduler]
    try:
        point_webhooks_at(plane, webhook_port)
        started(manager, lambda: healthy(mhealth, "/readyz") and healthy(webhook_port, "/readyz", tls=True),
                "the manager leading and its webhook's caches synced")
        started(scheduler, lambda: healthy(shealth, "/readyz"), "the scheduler leading and synced")

        # the agent's reports for dep-n1 from this machine's cgroups (DaemonSet args, --once --dry-run)
        asa, aargv = agent_argv(plane, "dep-n1")
        agent = Component("koordfw-agent", aargv, tmp_path / "agent.log", sa=asa)
        components.append(agent)
        assert agent.proc.wait(60) == 0, agent.log()[-3000:]
        metric = plane.request("GET", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/dep-n1")
        assert metric["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"]
        # dep-n2's as an agent would write it
        plane.report_node_metric("dep-n2", cpu="1", memory="2Gi", system_cpu="1", system_memory="2Gi")

        # the manager: batch resources into Node.status (nodes/status), a NodeSLO per node
        def batch() -> dict:
            nodes = {n: plane.request("GET", f"/api/v1/nodes/{n}")["status"]["allocatable"] for n in ("dep-n1", "dep-n2")}
            return nodes if all("kubernetes.io/batch-cpu" in a for a in nodes.values()) else {}
        wait_until(batch, 30, "batch resources on both nodes")
        wait_until(lambda: {"dep-n1", "dep-n2"} <= {o["metadata"]["name"] for o in plane.request(
            "GET", "/apis/slo.koordinator.sh/v1alpha1/nodeslos")["items"]}, 30, "a NodeSLO per node")

        # the scheduler: pods bound, one of them by a pod affinity term on another namespace's pod. (A
        # ``namespaceSelector`` term would need the scheduler's Namespace cache, which deploy/'s RBAC must let
        # it list: v1.20 drops that field from pods (it came in 1.21), so here the audit log below shows it:
        # under kube's v1.20 system:kube-scheduler role `list namespaces` was refused.)
        plane.create_namespace("dep-web", labels={"team": "web"})
        plane.create_namespace("dep-apps")
        plane.apply(pod("web", "dep-web", labels={"app": "web"}, nodeSelector={"kubernetes.io/hostname": "dep-n2"}))
        wait_until(lambda: bound(plane, "dep-web").get("web") == "dep-n2", 30, "web bound to dep-n2")
        near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "web"}}, "namespaces": ["dep-web"],
            "topologyKey": "kubernetes.io/hostname"}]}}
        plane.apply(pod("near-web", "dep-apps", affinity=near))
        for i in range(3):
            plane.apply(pod(f"p{i}", "dep-apps"))
        placed = wait_until(lambda: len(b := bound(plane, "dep-apps")) == 4 and b, 30, "every dep-apps pod bound")
        assert placed["near-web"] == "dep-n2"
        wait_until(lambda: any(e.get("reason") == "Scheduled" for e in plane.request(
            "GET", "/apis/events.k8s.io/v1/namespaces/dep-apps/events")["items"]), 30, "Scheduled events")
        # both elected leaders on their Leases in koordfw-system
        leases = {o["metadata"]["name"] for o in plane.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")["items"]}
        assert {"koordfw-manager", "koordfw-scheduler"} <= leases, leases
        sleep_until_audited()
        for c in components:
            assert c.alive() or c is agent, f"{c.name} exited:\n{c.log()[-3000:]}"
        refused = {c.user: plane.refused(c.user) for c in components}
        assert refused == {c.user: [] for c in components}, json.dumps(refused, indent=1)
        # and they did talk to the API server under those names
        for c in components:
            assert plane.audit(user=c.user), f"no request of {c.user} audited"
    finally:
        codes = {c.name: c.stop() for c in components}
        delete_deploy_namespace(plane)
        plane.delete_pods("dep-apps")
        plane.delete_pods("dep-web")
    assert codes["koordfw-manager"] == 0 and codes["koordfw-scheduler"] == 0, (
        codes, manager.log()[-2000:], scheduler.log()[-2000:])
