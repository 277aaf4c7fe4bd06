"""The pod admission webhook (koordfw.engines.kube.webhook) against the fake API server: AdmissionReview in
and out over HTTP (and HTTPS), the ClusterColocationProfile plugin's patch applied as the API server would,
errors until the caches have listed, malformed reviews answered 400 with the server living on."""

from __future__ import annotations

import base64
import copy
import json
import ssl
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import anyio
import jsonpatch
import pytest
from kube_testkit import sigterm_and_wait

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.webhook import WebhookServer
from koordfw.extension import BATCH_CPU, BATCH_MEMORY
from koordfw.metrics import REGISTRY

NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "spark", "labels": {"colocation": "on"}}}
PC = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"},
      "value": 5500}
PROFILE = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
           "metadata": {"name": "spark-batch"},
           "spec": {"namespaceSelector": {"matchLabels": {"colocation": "on"}},
                    "selector": {"matchLabels": {"spark-role": "executor"}},
                    "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
                    "schedulerName": "koord-scheduler", "labels": {"koordinator.sh/mutated": "true"}}}
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "exec-1", "namespace": "spark", "labels": {"spark-role": "executor"}},
       "spec": {"schedulerName": "default-scheduler", "priority": 0,
                "containers": [{"name": "executor", "image": "spark",
                                "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                              "limits": {"cpu": "2", "memory": "4Gi"}}}]}}


def review(obj: dict | None, op: str = "CREATE", uid: str = "u-1", old: dict | None = None, resource: str = "pods",
           namespace: str = "spark", sub: str = "") -> dict:
    req = {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": resource}, "namespace": namespace,
           "operation": op, "object": copy.deepcopy(obj), "oldObject": copy.deepcopy(old)}
    if sub:
        req["subResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def count(webhook: str, result: str) -> float:
    return REGISTRY.get_sample_value("koordfw_webhook_requests_total", {"webhook": webhook, "result": result}) or 0.0


@asynccontextmanager
async def serving(client, server: WebhookServer | None = None, *, wait_synced: bool = True):
    server = server or WebhookServer(host="127.0.0.1", port=0)
    registry = build_registry({}, only=["colocation_profile"])
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, client, registry)
        with anyio.fail_after(10):
            await server.listening.wait()
            if wait_synced:
                while server._unsynced():
                    await anyio.sleep(0.02)
        yield server
        tg.cancel_scope.cancel()


async def post(server: WebhookServer, path: str, body, *, raw: bytes | None = None, scheme: str = "http",
               ssl_ctx=None) -> tuple[int, dict]:
    url = f"{scheme}://127.0.0.1:{server.bound_port}{path}"
    data = raw if raw is not None else json.dumps(body).encode()
    async with aiohttp.ClientSession() as s, s.post(url, data=data, ssl=ssl_ctx,
                                                    headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


def patched(pod: dict, response: dict) -> dict:
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(pod, ops)


async def test_mutate_applies_the_profile_as_a_json_patch(api, client):
    for obj in (NS, PC, PROFILE):
        api.create(obj)
    before = count("mutate", "patched")
    async with serving(client) as server:
        status, body = await post(server, "/mutate-pod", review(POD))
    assert status == 200 and body["kind"] == "AdmissionReview" and body["apiVersion"] == "admission.k8s.io/v1"
    resp = body["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is True
    pod = patched(POD, resp)
    assert pod["metadata"]["labels"] == {"spark-role": "executor", "koordinator.sh/mutated": "true",
                                         "koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "1000"}
    assert pod["spec"]["priorityClassName"] == "koord-batch" and pod["spec"]["priority"] == 5500
    assert pod["spec"]["preemptionPolicy"] == "PreemptLowerPriority", "the fake defaults it, as the API server"
    assert pod["spec"]["schedulerName"] == "koord-scheduler"
    batch = {BATCH_CPU: "2k", BATCH_MEMORY: "4Gi"}
    assert pod["spec"]["containers"][0]["resources"] == {"requests": batch, "limits": batch}
    assert "node.koordinator.sh/extended-resource-spec" in pod["metadata"]["annotations"]
    assert count("mutate", "patched") == before + 1
    # the API server's defaulting, which namespaceSelectors on kubernetes.io/metadata.name rely on
    assert api.get("namespaces", "spark")["metadata"]["labels"] == {"colocation": "on",
                                                                    "kubernetes.io/metadata.name": "spark"}


async def test_pod_without_namespace_uses_the_request_namespace_and_is_not_patched_with_it(api, client):
    for obj in (NS, PC, PROFILE):
        api.create(obj)
    pod = copy.deepcopy(POD)
    del pod["metadata"]["namespace"]
    empty = copy.deepcopy(POD)
    empty["metadata"]["namespace"] = ""
    async with serving(client) as server:
        _, body = await post(server, "/mutate-pod", review(pod))
        _, body_empty = await post(server, "/mutate-pod", review(empty))
    out = patched(pod, body["response"])
    assert "namespace" not in out["metadata"] and out["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    ops = json.loads(base64.b64decode(body_empty["response"]["patch"]))
    assert not [op for op in ops if op["path"] == "/metadata/namespace"]


async def test_no_matching_profile_and_other_resources_are_allowed_unchanged(api, client):
    api.create(NS)
    async with serving(client) as server:
        _, body = await post(server, "/mutate-pod", review(POD))
        assert body["response"] == {"uid": "u-1", "allowed": True, "status": {"code": 200}}
        _, body = await post(server, "/mutate-pod", review(POD, resource="pods", sub="status"))
        assert body["response"]["allowed"] and "patch" not in body["response"]
        _, body = await post(server, "/mutate-pod", review({"kind": "ConfigMap"}, resource="configmaps"))
        assert body["response"]["allowed"]
        _, body = await post(server, "/mutate-pod", review(None, op="DELETE", old=POD))
        assert body["response"]["allowed"]


async def test_validate_rejects_with_koordinators_reason(api, client):
    api.create(NS)
    be_prod = copy.deepcopy(POD)
    be_prod["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
    be_prod["spec"]["priority"] = 9500
    before = count("validate", "rejected")
    async with serving(client) as server:
        _, body = await post(server, "/validate-pod", review(be_prod, uid="v-1"))
        resp = body["response"]
        assert resp["uid"] == "v-1" and resp["allowed"] is False
        assert resp["status"] == {"code": 403, "reason": "Forbidden", "message":
                                  "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be "
                                  "used in combination"}
        old = copy.deepcopy(POD)
        old["metadata"]["labels"]["koordinator.sh/qosClass"] = "LS"
        old["spec"]["priority"] = 9500
        new = copy.deepcopy(POD)
        new["metadata"]["labels"]["koordinator.sh/qosClass"] = "LSR"
        new["spec"]["priority"] = 9500
        _, body = await post(server, "/validate-pod", review(new, op="UPDATE", old=old))
        assert body["response"]["status"]["message"] == \
            'labels.koordinator.sh/qosClass: Invalid value: "LSR": field is immutable'
        _, body = await post(server, "/validate-pod", review(POD))
        assert body["response"]["allowed"] is True
    assert count("validate", "rejected") == before + 2


async def test_until_the_caches_have_listed_every_answer_is_an_error(api, client):
    api.create(NS)
    api.fail(500, path="/apis/scheduling.k8s.io/v1/priorityclasses")
    before = count("mutate", "not_synced")
    async with serving(client, wait_synced=False) as server:
        _, body = await post(server, "/mutate-pod", review(POD))
        resp = body["response"]
        assert resp["allowed"] is False and resp["status"]["code"] == 503
        assert "PriorityClass" in resp["status"]["message"]
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{server.bound_port}/readyz") as r:
            assert r.status == 503
        api.faults.clear()
        with anyio.fail_after(10):
            while server._unsynced():
                await anyio.sleep(0.05)
        _, body = await post(server, "/mutate-pod", review(POD))
        assert body["response"]["allowed"] is True
    assert count("mutate", "not_synced") == before + 1


async def test_a_plugin_error_is_an_error_response_naming_the_plugin(api, client):
    api.create(NS)
    api.create(PROFILE)  # its PriorityClass does not exist
    async with serving(client) as server:
        _, body = await post(server, "/mutate-pod", review(POD))
    resp = body["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 500
    assert "colocation_profile" in resp["status"]["message"] and "koord-batch" in resp["status"]["message"]


@pytest.mark.parametrize("raw, message", [
    (b"{not json", "malformed AdmissionReview"),
    (b"[]", "expected an AdmissionReview"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(), "apiVersion"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}).encode(),
     "request.uid: required"),
    (json.dumps(review(POD, op="PATCH")).encode(), "request.operation"),
    (json.dumps(review(None) | {"request": review(None)["request"] | {"object": "pod"}}).encode(), "request.object"),
    (json.dumps(review({"metadata": "x"})).encode(), "request.object.metadata"),
])
async def test_malformed_reviews_are_400_and_the_server_lives_on(api, client, raw, message):
    api.create(NS)
    async with serving(client) as server:
        status, body = await post(server, "/mutate-pod", None, raw=raw)
        assert status == 400 and message in body["response"]["status"]["message"]
        assert body["response"]["allowed"] is False
        status, body = await post(server, "/mutate-pod", review(POD))
        assert status == 200 and body["response"]["allowed"]


@pytest.mark.parametrize("path", ["/mutate-pod", "/validate-pod"])
@pytest.mark.parametrize("obj", [None, {}])
async def test_a_create_without_a_pod_is_koordinators_400(api, client, path, obj):
    """Koordinator's handlers decode the pod before anything else; controller-runtime refuses an empty
    object ("there is no content to decode") and the answer is admission.Errored(400): the review says
    400, not allowed (issue 32 point 12: it was allowed)."""
    api.create(NS)
    async with serving(client) as server:
        status, body = await post(server, path, review(obj))
        assert status == 200
        assert body["response"] == {"uid": "u-1", "allowed": False,
                                    "status": {"code": 400, "message": "there is no content to decode"}}
        _, body = await post(server, path, review(None, op="DELETE", old=POD))
        assert body["response"]["allowed"]  # a DELETE carries no object: nothing to decode


async def test_oversized_body_is_413(api, client):
    api.create(NS)
    async with serving(client, WebhookServer(host="127.0.0.1", port=0, max_body=4096)) as server:
        big = review(POD)
        big["request"]["object"]["metadata"]["annotations"] = {"x": "y" * 10000}
        status, body = await post(server, "/mutate-pod", big)
        assert status == 413 and "4096" in body["response"]["status"]["message"]
        status, _ = await post(server, "/mutate-pod", review(POD))
        assert status == 200


def _self_signed(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(key)


async def test_tls_from_the_certificate_files(api, client, tmp_path):
    for obj in (NS, PC, PROFILE):
        api.create(obj)
    cert, key = _self_signed(tmp_path)
    ctx = ssl.create_default_context(cafile=cert)
    async with serving(client, WebhookServer(host="127.0.0.1", port=0, cert_file=cert, key_file=key)) as server:
        status, body = await post(server, "/mutate-pod", review(POD), scheme="https", ssl_ctx=ctx)
        assert status == 200 and body["response"]["patchType"] == "JSONPatch"
        with pytest.raises(aiohttp.ClientError):
            await post(server, "/mutate-pod", review(POD))  # plain HTTP to a TLS port


def test_webhook_server_needs_both_files():
    with pytest.raises(ValueError, match="both a certificate and a private key"):
        WebhookServer(cert_file="c.pem")


async def test_the_manager_runs_the_webhook_as_a_component(api, client):
    from koordfw.engines.kube.manager import Controller, KubeManager

    for obj in (NS, PC, PROFILE):
        api.create(obj)
    hook = WebhookServer(host="127.0.0.1", port=0)
    assert isinstance(hook, Controller) and hook.leader_only is False
    manager = KubeManager(build_registry({}, only=["colocation_profile"]), client, controllers=[hook])
    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        with anyio.fail_after(10):
            await hook.listening.wait()
            while hook._unsynced():
                await anyio.sleep(0.02)
        _, body = await post(hook, "/mutate-pod", review(POD))
        assert patched(POD, body["response"])["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
        manager.stop()
    assert manager.ctx.status["webhook"]["running"] is False


@pytest.mark.parametrize("change, field", [
    (lambda p: p["spec"].update(containers="x"), "spec.containers"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"),
     "spec.containers[0].resources.requests.cpu"),
    (lambda p: p["spec"]["containers"][0]["resources"].update(limits=["2"]), "spec.containers[0].resources.limits"),
])
async def test_a_pod_the_plugin_cannot_read_is_an_error_naming_the_field(api, client, change, field):
    for obj in (NS, PC, PROFILE):
        api.create(obj)
    bad = copy.deepcopy(POD)
    change(bad)
    async with serving(client) as server:
        status, body = await post(server, "/mutate-pod", review(bad))
        assert status == 200 and body["response"]["allowed"] is False
        assert body["response"]["status"]["code"] == 500 and field in body["response"]["status"]["message"]
        _, ok = await post(server, "/mutate-pod", review(POD))
        assert ok["response"]["allowed"] is True


async def test_koordfw_manager_serves_the_webhook_over_https(api, tmp_path):
    """The command end to end: ``koordfw manager --webhook-listen`` with the certificate files, against
    the fake API server; SIGTERM stops it with exit 0."""
    import socket
    import sys

    for obj in (NS, PC, PROFILE):
        api.create(obj)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(api.kubeconfig()))
    cert, key = _self_signed(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "koordfw", "manager", "--kubeconfig", str(kubeconfig),
                             "--health-address", "", "--webhook-listen", f"127.0.0.1:{port}",
                             "--tls-cert-file", cert, "--tls-private-key-file", key],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ctx = ssl.create_default_context(cafile=cert)
    url = f"https://127.0.0.1:{port}"
    try:
        with anyio.fail_after(60):
            while True:
                try:
                    async with aiohttp.ClientSession() as s, s.get(f"{url}/readyz", ssl=ctx) as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                await anyio.sleep(0.1)
        async with aiohttp.ClientSession() as s, s.post(f"{url}/mutate-pod", json=review(POD), ssl=ctx) as r:
            body = await r.json()
        assert patched(POD, body["response"])["spec"]["priorityClassName"] == "koord-batch"
        await sigterm_and_wait(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def test_the_webhook_answers_while_the_managers_shared_caches_still_list(api, client):
    """A webhook port closed while the manager's node/pod caches list would let failurePolicy Ignore
    admit pods unmutated: the webhook starts at once and mutates as soon as its own caches have listed."""
    from koordfw.engines.kube.manager import KubeManager

    for obj in (NS, PC, PROFILE):
        api.create(obj)
    api.fail(500, method="GET", path="/api/v1/nodes")  # the shared node cache never syncs here
    hook = WebhookServer(host="127.0.0.1", port=0)
    manager = KubeManager(build_registry({}, only=["colocation_profile"]), client, controllers=[hook])
    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        with anyio.fail_after(10):
            await hook.listening.wait()
            while hook._unsynced():
                await anyio.sleep(0.02)
        assert not manager.started.is_set()  # the shared caches are still listing
        _, body = await post(hook, "/mutate-pod", review(POD))
        assert patched(POD, body["response"])["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
        manager.stop()


async def test_pods_of_skipped_namespaces_are_let_through_unchanged(api, client):
    """The backstop for clusters before 1.21 (deploy/webhook.yaml's selector cannot name kube-system there
    until the manager has labelled it): a skipped namespace's pod is allowed without a patch or a check."""
    for obj in (NS, PC, PROFILE):
        api.create(obj)
    before = count("mutate", "skipped"), count("validate", "skipped")
    async with serving(client, WebhookServer(host="127.0.0.1", port=0, skip_namespaces=["spark"])) as server:
        _, mutated = await post(server, "/mutate-pod", review(POD))
        _, validated = await post(server, "/validate-pod", review(POD))
    for body in (mutated, validated):
        assert body["response"]["allowed"] is True and "patch" not in body["response"]
    assert (count("mutate", "skipped"), count("validate", "skipped")) == (before[0] + 1, before[1] + 1)


async def test_skipped_namespaces_are_labelled_only_without_the_automatic_name_label(api, client):
    from koordfw.engines.kube.webhook import SKIP_LABEL, label_skipped_namespaces

    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    # the fake sets kubernetes.io/metadata.name as 1.21+ do: nothing to label (the selector names it)
    assert await label_skipped_namespaces(client, ["kube-system", "absent"]) == []
    assert SKIP_LABEL not in api.get("namespaces", "kube-system")["metadata"]["labels"]


async def test_validate_warns_of_batch_cpu_below_100_milli_cores(api, client):
    """Allowed (Koordinator accepts it), with an admission warning kubectl prints: batch-cpu is in milli-cores."""
    api.create(NS)
    small = copy.deepcopy(POD)
    small["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
    small["spec"]["priority"] = 5500
    small["spec"]["containers"][0]["resources"] = {"requests": {BATCH_CPU: "2", BATCH_MEMORY: "1Gi"},
                                                   "limits": {BATCH_CPU: "2", BATCH_MEMORY: "1Gi"}}
    async with serving(client) as server:
        _, body = await post(server, "/validate-pod", review(small))
        resp = body["response"]
        assert resp["allowed"] is True, resp
        [warning] = resp["warnings"]
        assert "pod spark/exec-1" in warning
        assert "batch-cpu is in milli-cores: 2 means 0.002 cores; did you mean 2k?" in warning
        _, body = await post(server, "/validate-pod", review(POD))
        assert "warnings" not in body["response"]
