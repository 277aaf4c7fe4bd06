"""The control plane fixture itself: what a real v1.20 API server does that the fake must agree with."""

from __future__ import annotations

import anyio
from realkube_testkit import bound, pod, wait_until

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine


def test_simulated_nodes_are_ready_and_untainted(kube_plane):
    kube_plane.add_node("cp-n1", cpu="4", memory="8Gi")
    node = kube_plane.request("GET", "/api/v1/nodes/cp-n1")
    assert not node["spec"].get("taints")
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["status"]["allocatable"]["cpu"] == "4"


def test_pods_get_what_admission_adds(kube_plane):
    """A real API server's pod: the ServiceAccount's token Secret volume, defaulted fields and the
    not-ready/unreachable tolerations (DefaultTolerationSeconds), none of which a test writes."""
    kube_plane.create_namespace("cp-admit")
    kube_plane.apply(pod("p", "cp-admit"))
    p = kube_plane.request("GET", "/api/v1/namespaces/cp-admit/pods/p")
    assert any(v["name"].startswith("default-token-") for v in p["spec"]["volumes"])
    assert p["spec"]["restartPolicy"] == "Always" and p["spec"]["dnsPolicy"] == "ClusterFirst"
    assert p["spec"]["serviceAccountName"] == "default"
    keys = {t["key"] for t in p["spec"]["tolerations"]}
    assert {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} <= keys
    assert p["metadata"]["managedFields"]


async def test_koordfw_scheduler_binds_on_the_real_api_server(kube_plane):
    kube_plane.add_node("cp-b1", cpu="2", memory="4Gi")
    kube_plane.add_node("cp-b2", cpu="2", memory="4Gi")
    kube_plane.create_namespace("cp-bind")
    for i in range(6):
        kube_plane.apply(pod(f"p{i}", "cp-bind", cpu="500m"))
    async with kube_plane.client() as client:
        engine = KubeSchedulerEngine(build_registry(None, autoload=False), client)
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.run)
            with anyio.fail_after(30):
                while len(bound(kube_plane, "cp-bind")) < 6:
                    await anyio.sleep(0.1)
            engine.stop()
    placed = bound(kube_plane, "cp-bind")
    assert sorted(placed.values()).count("cp-b1") == 3 and sorted(placed.values()).count("cp-b2") == 3
    ev = kube_plane.request("GET", "/apis/events.k8s.io/v1/namespaces/cp-bind/events")["items"]
    wait_until(lambda: True)
    assert any(e["reason"] == "Scheduled" for e in ev) or ev == []


def test_the_audit_log_names_what_rbac_refused(kube_plane):
    kube_plane.create_namespace("cp-audit")
    token = kube_plane.service_account_token("cp-audit", "default")
    try:
        kube_plane.request("GET", "/api/v1/nodes", token=token)
    except Exception as e:  # noqa: BLE001 - the refusal is the point
        assert "403" in str(e)
    refused = wait_until(lambda: kube_plane.refused("system:serviceaccount:cp-audit:default"), what="audit event")
    assert refused == ["list /api/v1/nodes -> 403"]
