"""kube-scheduler's own validation of a KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``),
ported as facts for the tests of deploy/: ``ValidateKubeSchedulerConfiguration`` and ``validateExtenders``
(pkg/scheduler/apis/config/validation/validation.go), the extended-resource-name rule
(``IsExtendedResourceName``, pkg/apis/core/v1/helper) and apimachinery's ``IsQualifiedName`` /
``IsDNS1123Subdomain``. Defaults are applied first, as kube-scheduler does before validating.

:func:`validate_scheduler_config` returns the errors as ``"<field path>: <message>"`` strings (empty when
kube-scheduler would accept the file)."""

from __future__ import annotations

import re
from typing import Any

# apimachinery/pkg/util/validation
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUALIFIED_NAME_MAX = 63
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_SUBDOMAIN_MAX = 253
# k8s.io/api/core/v1
RESOURCE_DEFAULT_NAMESPACE_PREFIX = "kubernetes.io/"
DEFAULT_RESOURCE_REQUESTS_PREFIX = "requests."

#: the fields of one ``extenders`` entry (config/v1 Extender); kube-scheduler decodes its file strictly
EXTENDER_FIELDS = frozenset({"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
                             "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
                             "ignorable"})
TOP_FIELDS = frozenset({"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
                        "healthzBindAddress", "metricsBindAddress", "enableProfiling", "enableContentionProfiling",
                        "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles",
                        "extenders", "delayCacheUntilActive"})


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                    "and must start and end with an alphanumeric character")
    return errs


def is_qualified_name(value: str) -> list[str]:
    """apimachinery's IsQualifiedName: ``[prefix/]name``, prefix a DNS-1123 subdomain, name at most 63."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in is_dns1123_subdomain(prefix)]
    else:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional DNS "
                "subdomain prefix and '/'"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append(f"name part must be no more than {QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED_NAME.match(name):
        errs.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                    "with an alphanumeric character")
    return errs


def is_native_resource(name: str) -> bool:
    """Unprefixed names, and any name containing ``kubernetes.io/`` (a substring test, as kube's)."""
    return "/" not in name or RESOURCE_DEFAULT_NAMESPACE_PREFIX in name


def is_extended_resource_name(name: str) -> bool:
    """kube's IsExtendedResourceName: not native, no ``requests.`` prefix, and ``requests.<name>`` (its
    quota name) a qualified name."""
    if is_native_resource(name) or name.startswith(DEFAULT_RESOURCE_REQUESTS_PREFIX):
        return False
    return not is_qualified_name(DEFAULT_RESOURCE_REQUESTS_PREFIX + name)


def validate_extended_resource_name(path: str, name: str) -> list[str]:
    errs = [f"{path}: Invalid value: {name!r}: {m}" for m in is_qualified_name(name)]
    if errs:
        return errs
    if not is_extended_resource_name(name):
        return [f"{path}: Invalid value: {name!r}: is an invalid extended resource name"]
    return []


def validate_extenders(extenders: list[dict[str, Any]], path: str = "extenders") -> list[str]:
    """validateExtenders: a positive weight with a prioritizeVerb, at most one binder, managed resource
    names valid extended resource names and unique across all extenders."""
    errs: list[str] = []
    binders = 0
    managed: set[str] = set()
    for i, ext in enumerate(extenders):
        at = f"{path}[{i}]"
        unknown = sorted(set(ext) - EXTENDER_FIELDS)
        if unknown:
            errs.append(f"{at}: unknown field(s) {', '.join(unknown)} (strict decoding)")
        if ext.get("prioritizeVerb") and int(ext.get("weight") or 0) <= 0:
            errs.append(f"{at}.weight: Invalid value: {ext.get('weight')!r}: must have a positive weight applied to it")
        if ext.get("bindVerb"):
            binders += 1
        for j, res in enumerate(ext.get("managedResources") or []):
            rpath = f"{at}.managedResources[{j}].name"
            name = str(res.get("name", ""))
            errs += validate_extended_resource_name(rpath, name)
            if name in managed:
                errs.append(f"{rpath}: Invalid value: {name!r}: duplicate extender managed resource name")
            managed.add(name)
    if binders > 1:
        errs.append(f"{path}: Invalid value: 'found {binders} extenders implementing bind': only one extender can "
                    "implement bind")
    return errs


def validate_scheduler_config(cfg: dict[str, Any]) -> list[str]:
    """The checks of ValidateKubeSchedulerConfiguration a deploy file can fail, after v1's defaults
    (parallelism 16, resourceLock leases, one default-scheduler profile, backoffs 1 s / 10 s)."""
    errs: list[str] = []
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1" or cfg.get("kind") != "KubeSchedulerConfiguration":
        return [f"apiVersion/kind: expected kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration, got "
                f"{cfg.get('apiVersion')!r} {cfg.get('kind')!r}"]
    unknown = sorted(set(cfg) - TOP_FIELDS)
    if unknown:
        errs.append(f"unknown field(s) {', '.join(unknown)} (strict decoding)")
    le = cfg.get("leaderElection") or {}
    if le.get("leaderElect", True) and le.get("resourceLock", "leases") != "leases":
        errs.append(f"leaderElection.resourceLock: Invalid value: {le.get('resourceLock')!r}: resourceLock value "
                    "must be \"leases\"")
    if int(cfg.get("parallelism", 16)) <= 0:
        errs.append("parallelism: should be an integer value greater than zero")
    profiles = cfg.get("profiles") or [{"schedulerName": "default-scheduler"}]
    seen: dict[str, int] = {}
    for i, p in enumerate(profiles):
        name = p.get("schedulerName", "default-scheduler")
        if not name:
            errs.append(f"profiles[{i}].schedulerName: Required value")
        if name in seen:
            errs.append(f"profiles[{i}].schedulerName: Duplicate value: profiles[{seen[name]}].schedulerName")
        seen[name] = i
        pct = p.get("percentageOfNodesToScore")
        if pct is not None and not 0 <= int(pct) <= 100:
            errs.append(f"profiles[{i}].percentageOfNodesToScore: Invalid value: {pct}: not in valid range [0-100]")
    pct = cfg.get("percentageOfNodesToScore")
    if pct is not None and not 0 <= int(pct) <= 100:
        errs.append(f"percentageOfNodesToScore: Invalid value: {pct}: not in valid range [0-100]")
    initial, most = int(cfg.get("podInitialBackoffSeconds", 1)), int(cfg.get("podMaxBackoffSeconds", 10))
    if initial <= 0:
        errs.append("podInitialBackoffSeconds: must be greater than 0")
    if most < initial:
        errs.append("podMaxBackoffSeconds: must be greater than or equal to PodInitialBackoffSeconds")
    errs += validate_extenders(cfg.get("extenders") or [])
    return errs
