"""The rules the API server applies to a created MutatingWebhookConfiguration / ValidatingWebhookConfiguration
(admissionregistration.k8s.io/v1), ported as facts from kube's pkg/apis/admissionregistration/validation
(validateWebhook, validateRuleWithOperations, ValidateWebhookClientConfig/ValidateWebhookService) and
apimachinery's ValidateLabelSelector. ``validate_webhook_configuration(doc)`` returns the errors as
``"<field path>: <what>"`` strings (empty when the API server would accept the object)."""

from __future__ import annotations

import re
from typing import Any

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT", "*")
SCOPES = ("Cluster", "Namespaced", "*")
#: the AdmissionReview versions this API server sends (admissionregistration's AcceptedAdmissionReviewVersions)
ACCEPTED_REVIEW_VERSIONS = ("v1", "v1beta1")
#: v1 allows only side-effect classes a dry run can honour (validateWebhook with noSideEffects)
SIDE_EFFECTS_V1 = ("None", "NoneOnDryRun")


def is_subdomain(s: Any) -> bool:
    return isinstance(s, str) and len(s) <= 253 and bool(_DNS1123_SUBDOMAIN.match(s))


def is_label(s: Any) -> bool:
    return isinstance(s, str) and len(s) <= 63 and bool(_DNS1123_LABEL.match(s))


def is_qualified_name(s: Any) -> bool:
    """IsQualifiedName: an optional DNS subdomain prefix and "/", then a name of at most 63 characters."""
    if not isinstance(s, str):
        return False
    prefix, _, name = s.rpartition("/")
    if "/" in s and not (prefix and is_subdomain(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def validate_label_selector(sel: Any, path: str) -> list[str]:
    errs: list[str] = []
    if sel is None:
        return errs
    if not isinstance(sel, dict):
        return [f"{path}: must be a label selector"]
    for k, v in (sel.get("matchLabels") or {}).items():
        if not is_qualified_name(k):
            errs.append(f"{path}.matchLabels: Invalid value: {k!r}: not a qualified name")
        if not (isinstance(v, str) and len(v) <= 63 and _LABEL_VALUE.match(v)):
            errs.append(f"{path}.matchLabels: Invalid value: {v!r}: not a label value")
    for i, e in enumerate(sel.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        op, values = e.get("operator"), e.get("values") or []
        if not is_qualified_name(e.get("key")):
            errs.append(f"{where}.key: Invalid value: not a qualified name")
        if op in ("In", "NotIn"):
            if not values:
                errs.append(f"{where}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(f"{where}.values: Forbidden: may not be specified when `operator` is 'Exists' or "
                            "'DoesNotExist'")
        else:
            errs.append(f"{where}.operator: Invalid value: {op!r}: not a valid selector operator")
        for v in values:
            if not (isinstance(v, str) and len(v) <= 63 and _LABEL_VALUE.match(v)):
                errs.append(f"{where}.values: Invalid value: {v!r}: not a label value")
    return errs


def _star_alone(values: list[Any], path: str, what: str) -> list[str]:
    errs = []
    if not values:
        errs.append(f"{path}: Required value")
    if "*" in values and len(values) > 1:
        errs.append(f"{path}: Invalid value: if '*' is present, must not specify other {what}")
    return errs


def validate_rule(rule: dict, path: str) -> list[str]:
    errs = _star_alone(rule.get("operations") or [], f"{path}.operations", "operations")
    for op in rule.get("operations") or []:
        if op not in OPERATIONS:
            errs.append(f"{path}.operations: Unsupported value: {op!r}")
    errs += _star_alone(rule.get("apiGroups") or [], f"{path}.apiGroups", "groups")
    versions = rule.get("apiVersions") or []
    errs += _star_alone(versions, f"{path}.apiVersions", "versions")
    errs += [f"{path}.apiVersions: Required value: version must not be empty" for v in versions if v == ""]
    resources = rule.get("resources") or []
    errs += _star_alone(resources, f"{path}.resources", "resources")
    for r in resources:
        if not isinstance(r, str) or r == "" or r.startswith("/") or r.count("/") > 1:
            errs.append(f"{path}.resources: Invalid value: {r!r}")
    scope = rule.get("scope")
    if scope is not None and scope not in SCOPES:
        errs.append(f"{path}.scope: Unsupported value: {scope!r}")
    return errs


def validate_client_config(cc: Any, path: str) -> list[str]:
    if not isinstance(cc, dict):
        return [f"{path}: Required value"]
    if (cc.get("url") is None) == (cc.get("service") is None):
        return [f"{path}: Required value: exactly one of url or service is required"]
    if cc.get("url") is not None:
        ok = str(cc["url"]).startswith("https://")
        return [] if ok else [f"{path}.url: Invalid value: 'https' is the only allowed URL scheme"]
    svc, errs = cc["service"], []
    for field in ("name", "namespace"):
        if not is_label(svc.get(field)):
            errs.append(f"{path}.service.{field}: Invalid value: {svc.get(field)!r}: not a DNS-1123 label")
    p = svc.get("path")
    if p is not None and (not str(p).startswith("/") or "//" in p or any(s in (".", "..") for s in p.split("/"))):
        errs.append(f"{path}.service.path: Invalid value: {p!r}")
    port = svc.get("port", 443)
    if not (isinstance(port, int) and 1 <= port <= 65535):
        errs.append(f"{path}.service.port: Invalid value: {port!r}: port is not valid")
    return errs


def validate_webhook_configuration(doc: dict) -> list[str]:
    """All errors of a v1 (Mutating|Validating)WebhookConfiguration created now."""
    mutating = doc.get("kind") == "MutatingWebhookConfiguration"
    errs: list[str] = []
    if not is_subdomain((doc.get("metadata") or {}).get("name")):
        errs.append("metadata.name: Invalid value: not a DNS subdomain")
    seen: set[str] = set()
    for i, w in enumerate(doc.get("webhooks") or []):
        path = f"webhooks[{i}]"
        name = w.get("name")
        if not is_subdomain(name):
            errs.append(f"{path}.name: Invalid value: {name!r}: not a DNS subdomain")
        elif len(name.split(".")) < 3:
            errs.append(f"{path}.name: Invalid value: {name!r}: should be a domain with at least three segments "
                        "separated by dots")
        if name in seen:
            errs.append(f"{path}.name: Duplicate value: {name!r}")
        seen.add(name)
        for j, r in enumerate(w.get("rules") or []):
            errs += validate_rule(r, f"{path}.rules[{j}]")
        fp = w.get("failurePolicy")
        if fp is not None and fp not in ("Ignore", "Fail"):
            errs.append(f"{path}.failurePolicy: Unsupported value: {fp!r}")
        mp = w.get("matchPolicy")
        if mp is not None and mp not in ("Exact", "Equivalent"):
            errs.append(f"{path}.matchPolicy: Unsupported value: {mp!r}")
        se = w.get("sideEffects")
        if se not in SIDE_EFFECTS_V1:
            errs.append(f"{path}.sideEffects: {'Required value' if se is None else f'Unsupported value: {se!r}'}")
        versions = w.get("admissionReviewVersions")
        if not versions:
            errs.append(f"{path}.admissionReviewVersions: Required value")
        else:
            for v in versions:
                if not (isinstance(v, str) and _DNS1035_LABEL.match(v)):
                    errs.append(f"{path}.admissionReviewVersions: Invalid value: {v!r}")
            if len(set(versions)) != len(versions):
                errs.append(f"{path}.admissionReviewVersions: Duplicate value")
            if not set(versions) & set(ACCEPTED_REVIEW_VERSIONS):
                errs.append(f"{path}.admissionReviewVersions: Invalid value: must include at least one of "
                            f"{', '.join(ACCEPTED_REVIEW_VERSIONS)}")
        t = w.get("timeoutSeconds")
        if t is not None and not (isinstance(t, int) and 1 <= t <= 30):
            errs.append(f"{path}.timeoutSeconds: Invalid value: {t!r}: the timeout value must be between 1 and 30 seconds")
        if mutating:
            rp = w.get("reinvocationPolicy")
            if rp is not None and rp not in ("Never", "IfNeeded"):
                errs.append(f"{path}.reinvocationPolicy: Unsupported value: {rp!r}")
        elif "reinvocationPolicy" in w:
            errs.append(f"{path}.reinvocationPolicy: unknown field of a ValidatingWebhook")
        errs += validate_label_selector(w.get("namespaceSelector"), f"{path}.namespaceSelector")
        errs += validate_label_selector(w.get("objectSelector"), f"{path}.objectSelector")
        errs += validate_client_config(w.get("clientConfig"), f"{path}.clientConfig")
    return errs
