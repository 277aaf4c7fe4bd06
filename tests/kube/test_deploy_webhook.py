"""deploy/webhook.yaml: the webhook configurations pass the API server's admissionregistration v1 validation
(ported in admission_validation.py), and agree with deploy/manager.yaml and the webhook server: the Service
selects the manager's pods and targets its webhook port, the paths are the server's routes, the manager's
own namespace is excluded, failures are ignored, only AdmissionReview v1 is asked for."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from admission_validation import validate_webhook_configuration

from koordfw.engines.kube.webhook import DEFAULT_PORT, Webhook
from koordfw.inputs import selector_matches

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DOCS = [d for d in yaml.safe_load_all((DEPLOY / "webhook.yaml").read_text()) if d]
CONFIGS = [d for d in DOCS if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")]
SERVICE = next(d for d in DOCS if d["kind"] == "Service")
MANAGER = next(d for d in yaml.safe_load_all((DEPLOY / "manager.yaml").read_text()) if d and d["kind"] == "Deployment")


def test_both_configurations_are_there():
    assert sorted(d["kind"] for d in CONFIGS) == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


@pytest.mark.parametrize("doc", CONFIGS, ids=lambda d: d["kind"])
def test_the_api_server_accepts_the_configuration(doc):
    assert validate_webhook_configuration(doc) == []


@pytest.mark.parametrize("doc", CONFIGS, ids=lambda d: d["kind"])
def test_policy_defaults(doc):
    for w in doc["webhooks"]:
        assert w["failurePolicy"] == "Ignore" and w["sideEffects"] == "None"
        assert w["admissionReviewVersions"] == ["v1"]
        # Koordinator's pod mutating handler changes pods only on CREATE; its validating one checks updates too
        ops = ["CREATE"] if doc["kind"] == "MutatingWebhookConfiguration" else ["CREATE", "UPDATE"]
        assert w["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ops,
                               "resources": ["pods"], "scope": "Namespaced"}]


@pytest.mark.parametrize("doc", CONFIGS, ids=lambda d: d["kind"])
def test_the_managers_namespace_is_excluded(doc):
    ns = MANAGER["metadata"]["namespace"]
    for w in doc["webhooks"]:
        sel = w["namespaceSelector"]
        # every namespace carries kubernetes.io/metadata.name (the API server's defaulting)
        assert not selector_matches(sel, {"kubernetes.io/metadata.name": ns})
        assert not selector_matches(sel, {"kubernetes.io/metadata.name": "kube-system"})
        assert selector_matches(sel, {"kubernetes.io/metadata.name": "spark-jobs"})
        # before 1.21 no namespace has that label: deploy/00-namespace.yaml's labels (and the one the manager
        # puts on kube-system there) keep them out, other namespaces stay in
        own = next(d for d in yaml.safe_load_all((DEPLOY / "00-namespace.yaml").read_text())
                   if d and d["kind"] == "Namespace" and d["metadata"]["name"] == ns)
        assert not selector_matches(sel, own["metadata"]["labels"])
        assert not selector_matches(sel, {"koordfw.io/admission-webhook": "skip"})
        assert selector_matches(sel, {}) and selector_matches(sel, {"team": "spark"})


def test_the_service_reaches_the_managers_webhook_port_and_routes():
    pod = MANAGER["spec"]["template"]
    assert SERVICE["metadata"]["namespace"] == MANAGER["metadata"]["namespace"]
    assert selector_matches({"matchLabels": SERVICE["spec"]["selector"]}, pod["metadata"]["labels"])
    (port,) = SERVICE["spec"]["ports"]
    container_ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert container_ports[port["targetPort"]] == DEFAULT_PORT
    args = pod["spec"]["containers"][0]["args"]
    assert f"--webhook-listen=0.0.0.0:{DEFAULT_PORT}" in args
    routes = {r.resource.canonical for r in _app_routes()}
    paths = {doc["kind"]: w["clientConfig"]["service"]["path"] for doc in CONFIGS for w in doc["webhooks"]}
    assert paths == {"MutatingWebhookConfiguration": "/mutate-pod", "ValidatingWebhookConfiguration": "/validate-pod"}
    assert set(paths.values()) <= routes
    for doc in CONFIGS:
        svc = doc["webhooks"][0]["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["port"]) == (SERVICE["metadata"]["name"],
                                                                SERVICE["metadata"]["namespace"], port["port"])


def _app_routes() -> list:
    from koordfw.core.admission import Admission, StaticObjects
    from koordfw.engines.embedded import build_registry

    hook = Webhook(Admission(build_registry({}, autoload=False), StaticObjects()), synced=lambda: [])
    return list(hook.app.router.routes())


@pytest.mark.parametrize("change, error", [
    (lambda w: w.update(name="pods.koordfw"), "at least three segments"),
    (lambda w: w.update(timeoutSeconds=31), "between 1 and 30 seconds"),
    (lambda w: w.update(sideEffects="Some"), "sideEffects: Unsupported value"),
    (lambda w: w.update(admissionReviewVersions=["v2"]), "must include at least one of v1, v1beta1"),
    (lambda w: w["rules"][0].update(operations=["*", "CREATE"]), "must not specify other operations"),
    (lambda w: w["namespaceSelector"]["matchExpressions"][0].update(values=[]), "must be specified"),
    (lambda w: w["clientConfig"].update(url="https://x"), "exactly one of url or service"),
    (lambda w: w["clientConfig"]["service"].update(path="mutate-pod"), "service.path: Invalid value"),
    (lambda w: w.update(failurePolicy="Sometimes"), "failurePolicy: Unsupported value"),
])
def test_the_ported_rules_refuse_what_the_api_server_refuses(change, error):
    doc = copy.deepcopy(next(d for d in CONFIGS if d["kind"] == "MutatingWebhookConfiguration"))
    change(doc["webhooks"][0])
    assert any(error in e for e in validate_webhook_configuration(doc)), validate_webhook_configuration(doc)
