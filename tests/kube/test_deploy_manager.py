"""The manager's manifests, offline: deploy/manager.yaml (its RBAC covers every request a manager run makes),
deploy/00-crd-*.yaml (Koordinator's group, version, kind, plural and scope; structural schemas by the apiextensions
rules; the NodeSLO schema is the one koordfw writes), deploy/priorityclasses.yaml (Koordinator's values) and
deploy/slo-controller-config.yaml (Koordinator's format, every key decodes)."""

from __future__ import annotations

import datetime as dt
import json
import re

import anyio
import pytest
from deploy_testkit import CRDS, DEPLOY, docs
from kube_testkit import node, pod, wait_for

from koordfw.cli import build_parser
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.leader import LeaderElector
from koordfw.engines.kube.manager import KubeManager
from koordfw.engines.kube.noderesource import NodeResourceController
from koordfw.engines.kube.nodeslo import NodeSLOController, nodeslo_spec_schema, parse_slo_config, render_spec
from koordfw.extension import PRIORITY_VALUE_RANGES

MANAGER = docs(DEPLOY / "manager.yaml")


def one(kind: str, objs: list[dict] = MANAGER) -> dict:
    [o] = [d for d in objs if d["kind"] == kind]
    return o


# -- CRDs ---------------------------------------------------------------------------------------------
#: Koordinator's config/crd/bases: name -> (group, version, kind, plural, scope, status subresource)
KOORDINATOR_CRDS = {
    "nodemetrics.slo.koordinator.sh": ("slo.koordinator.sh", "v1alpha1", "NodeMetric", "nodemetrics", "Cluster", True),
    "nodeslos.slo.koordinator.sh": ("slo.koordinator.sh", "v1alpha1", "NodeSLO", "nodeslos", "Cluster", True),
    "devices.scheduling.koordinator.sh": ("scheduling.koordinator.sh", "v1alpha1", "Device", "devices", "Cluster",
                                          False),
    "reservations.scheduling.koordinator.sh": ("scheduling.koordinator.sh", "v1alpha1", "Reservation", "reservations",
                                               "Cluster", True),
    "podmigrationjobs.scheduling.koordinator.sh": ("scheduling.koordinator.sh", "v1alpha1", "PodMigrationJob",
                                                   "podmigrationjobs", "Cluster", True),
    "clustercolocationprofiles.config.koordinator.sh": ("config.koordinator.sh", "v1alpha1",
                                                        "ClusterColocationProfile", "clustercolocationprofiles",
                                                        "Cluster", True),
    "elasticquotas.scheduling.sigs.k8s.io": ("scheduling.sigs.k8s.io", "v1alpha1", "ElasticQuota", "elasticquotas",
                                             "Namespaced", False),
    "podgroups.scheduling.sigs.k8s.io": ("scheduling.sigs.k8s.io", "v1alpha1", "PodGroup", "podgroups", "Namespaced",
                                         False),
    # config/crd/bases/scheduling.koordinator.sh_clusternetworktopologies.yaml (the network_topology plugin reads it)
    "clusternetworktopologies.scheduling.koordinator.sh": ("scheduling.koordinator.sh", "v1alpha1",
                                                           "ClusterNetworkTopology", "clusternetworktopologies",
                                                           "Cluster", True),
    # config/crd/bases/topology.node.k8s.io_noderesourcetopologies.yaml (the node agent writes it)
    "noderesourcetopologies.topology.node.k8s.io": ("topology.node.k8s.io", "v1alpha1", "NodeResourceTopology",
                                                    "noderesourcetopologies", "Cluster", False),
}


def test_every_crd_koordfw_uses_is_there_with_koordinators_names():
    assert set(CRDS) == set(KOORDINATOR_CRDS)
    for name, (group, version, kind, plural, scope, status) in KOORDINATOR_CRDS.items():
        spec = CRDS[name]["spec"]
        assert name == f"{spec['names']['plural']}.{spec['group']}"  # the apiserver's rule
        assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"], spec["scope"]) == (group, kind, plural,
                                                                                                   scope)
        assert spec["names"]["singular"] == kind.lower() and spec["names"]["listKind"] == f"{kind}List"
        [v] = spec["versions"]
        assert (v["name"], v["served"], v["storage"]) == (version, True, True)
        assert ("status" in (v.get("subresources") or {})) is status
        if group.endswith(".k8s.io") or group == "k8s.io":
            # a protected group: the apiserver refuses the CRD without api-approved.kubernetes.io
            assert (CRDS[name]["metadata"].get("annotations") or {}).get("api-approved.kubernetes.io")


#: API groups the Kubernetes API server serves itself (no CRD needed)
BUILTIN_GROUPS = {"", "admissionregistration.k8s.io", "apiextensions.k8s.io", "apps", "authentication.k8s.io",
                  "authorization.k8s.io", "autoscaling", "batch", "certificates.k8s.io", "coordination.k8s.io",
                  "discovery.k8s.io", "events.k8s.io", "networking.k8s.io", "node.k8s.io", "policy",
                  "rbac.authorization.k8s.io", "resource.k8s.io", "scheduling.k8s.io", "storage.k8s.io"}
_API_PATH = re.compile(r"/apis/(?:\{(?P<const>[A-Z_]+)\}|(?P<gv>[a-z0-9.-]+/v[0-9a-z]+))/"
                       r"(?:namespaces/\{[^}]+\}/)?(?P<plural>[a-z]+)")


def api_paths_in_code() -> set[tuple[str, str, str]]:
    """(group, version, plural) of every /apis/ path written in koordfw's and the plugins' code (group/version
    constants resolved from koordfw.extension)."""
    import koordfw.extension as ext

    root = DEPLOY.parent
    files = [f for f in [*(root / "koordfw").rglob("*.py"), *(root / "plugins").glob("*/koordfw_*/**/*.py")]
             if "testing" not in f.parts]
    out = set()
    for f in files:
        for m in _API_PATH.finditer(f.read_text()):
            gv = getattr(ext, m.group("const")) if m.group("const") else m.group("gv")
            group, version = gv.split("/")
            out.add((group, version, m.group("plural")))
    return out


def test_every_custom_resource_the_code_uses_has_its_crd():
    used = {(g, v, p) for g, v, p in api_paths_in_code() if g not in BUILTIN_GROUPS}
    assert {("slo.koordinator.sh", "v1alpha1", "nodeslos"), ("scheduling.sigs.k8s.io", "v1alpha1", "podgroups")} <= used
    for group, version, plural in sorted(used):
        crd = CRDS.get(f"{plural}.{group}")
        assert crd is not None, f"the code uses /apis/{group}/{version}/{plural}: no CRD in deploy/00-crd-*.yaml"
        assert version in {v["name"] for v in crd["spec"]["versions"] if v["served"]}


def structural_problems(s: dict, path: str = "openAPIV3Schema", level: str = "root") -> list[str]:
    """apiextensions' structural-schema rules (apiserver/schema/validation.go's validateStructuralInvariants
    and the CRD validation): a type everywhere but on int-or-string and preserve-unknown-fields nodes, items
    for arrays, properties xor additionalProperties, no $ref, no type/description/... under the logic
    junctors except the int-or-string anyOf, metadata only at the root (and only name/generateName)."""
    out = []
    known = {"type", "format", "properties", "additionalProperties", "items", "required", "enum", "default",
             "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
             "minItems", "maxItems", "minProperties", "maxProperties", "anyOf", "allOf", "oneOf", "not", "nullable",
             "description", "title", "multipleOf", "uniqueItems", "x-kubernetes-preserve-unknown-fields",
             "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource", "x-kubernetes-list-type",
             "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations"}
    if set(s) - known:
        out.append(f"{path}: unknown keys {sorted(set(s) - known)} ($ref is not supported)")
    t = s.get("type", "")
    ios, puf = s.get("x-kubernetes-int-or-string", False), s.get("x-kubernetes-preserve-unknown-fields", False)
    if not t and not ios and not puf:
        out.append(f"{path}.type: must not be empty ({level})")
    if ios and t:
        out.append(f"{path}: x-kubernetes-int-or-string with a type")
    if ios and puf:
        out.append(f"{path}: x-kubernetes-preserve-unknown-fields must be false if x-kubernetes-int-or-string")
    if ios and s.get("anyOf") not in (None, [{"type": "integer"}, {"type": "string"}]):
        out.append(f"{path}: an int-or-string anyOf must be exactly [integer, string]")
    if level == "root" and t != "object":
        out.append(f"{path}.type: must be object at the root")
    if t == "array" and "items" not in s:
        out.append(f"{path}.items: must be specified")
    if "properties" in s and "additionalProperties" in s:
        out.append(f"{path}: additionalProperties and properties are mutual exclusive")
    if s.get("uniqueItems"):
        out.append(f"{path}: uniqueItems cannot be true")
    if level == "root" and "additionalProperties" in s:
        out.append(f"{path}.additionalProperties: must not be used at the root")
    for junctor in ("allOf", "oneOf", "not") + (() if ios else ("anyOf",)):
        for i, sub in enumerate(s.get(junctor) if isinstance(s.get(junctor), list) else
                                ([s[junctor]] if junctor in s else [])):
            bad = {"type", "description", "default", "additionalProperties", "nullable", "title"} & set(sub)
            if bad:
                out.append(f"{path}.{junctor}[{i}]: {sorted(bad)} must be empty to be structural")
    for k, v in (s.get("properties") or {}).items():
        if k == "metadata" and level != "root":
            out.append(f"{path}.properties[metadata]: metadata must not be specified in a nested context")
        if k == "metadata" and level == "root" and set(v.get("properties") or {}) - {"name", "generateName"}:
            out.append(f"{path}.properties[metadata]: only name and generateName may be restricted")
        out += structural_problems(v, f"{path}.properties[{k}]", "field")
    if isinstance(s.get("items"), dict):
        out += structural_problems(s["items"], f"{path}.items", "item")
    if isinstance(s.get("additionalProperties"), dict):
        out += structural_problems(s["additionalProperties"], f"{path}.additionalProperties", "field")
    return out


@pytest.mark.parametrize("name", sorted(KOORDINATOR_CRDS))
def test_crd_schema_is_structural(name):
    [v] = CRDS[name]["spec"]["versions"]
    root = v["schema"]["openAPIV3Schema"]
    assert structural_problems(root) == []
    props = root["properties"]
    assert props.get("apiVersion", {"type": "string"}) == props.get("kind", {"type": "string"}) == {"type": "string"}
    assert props.get("metadata", {"type": "object"}) == {"type": "object"}
    # the NodeResourceTopology has no spec: its topologyPolicies and zones are top-level fields
    top = ("topologyPolicies", "zones") if name.startswith("noderesourcetopologies.") else ("spec",)
    assert all(props[f]["type"] in ("object", "array") for f in top)


def test_structural_check_catches_what_the_apiserver_refuses():
    assert structural_problems({"type": "object", "properties": {"a": {}}}) == [
        "openAPIV3Schema.properties[a].type: must not be empty (field)"]
    assert structural_problems({"type": "object", "properties": {"a": {"type": "array"}}})
    assert structural_problems({"type": "object", "properties": {"a": {"$ref": "#/x"}}})
    assert structural_problems({"type": "object", "properties": {"a": {"type": "object", "properties": {},
                                                                       "additionalProperties": {"type": "string"}}}})
    assert structural_problems({"type": "object", "properties": {"a": {"type": "string",
                                                                       "x-kubernetes-int-or-string": True}}})
    assert structural_problems({"type": "object", "properties": {"a": {"type": "object", "properties": {
        "metadata": {"type": "object"}}}}})
    assert structural_problems({"type": "object", "properties": {
        "a": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}) == []
    assert structural_problems({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                                                                       "x-kubernetes-int-or-string": True}}}) == []


def test_the_nodeslo_crd_schema_is_what_koordfw_writes():
    [v] = CRDS["nodeslos.slo.koordinator.sh"]["spec"]["versions"]
    assert v["schema"]["openAPIV3Schema"]["properties"]["spec"] == nodeslo_spec_schema()






# -- priority classes and the example ConfigMap --------------------------------------------------------
def test_priority_classes_are_koordinators():
    pcs = {d["metadata"]["name"]: d for d in docs(DEPLOY / "priorityclasses.yaml")}
    # Koordinator's config/manager/koord-*.yaml: the lowest value of each class's range
    assert {n: d["value"] for n, d in pcs.items()} == {"koord-prod": 9000, "koord-mid": 7000, "koord-batch": 5000,
                                                        "koord-free": 3000}
    for lo, hi, name in PRIORITY_VALUE_RANGES:
        assert lo <= pcs[name]["value"] <= hi
        assert pcs[name]["apiVersion"] == "scheduling.k8s.io/v1" and not pcs[name].get("globalDefault")
        assert pcs[name]["preemptionPolicy"] == "PreemptLowerPriority"


def test_example_slo_controller_config_decodes():
    [cm] = docs(DEPLOY / "slo-controller-config.yaml")
    assert cm["metadata"]["name"] == "slo-controller-config"
    data = cm["data"]
    assert set(data) == {"colocation-config", "resource-threshold-config", "resource-qos-config", "cpu-burst-config",
                         "system-config", "host-application-config"}
    config, problems = parse_slo_config(data)
    assert problems == []
    offline = render_spec(config, {"node-pool": "offline"})
    assert offline["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 80
    assert render_spec(config, {})["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 65
    strategy = pytest.importorskip("koordfw_batch_resource.strategy")
    assert strategy.from_colocation_config(json.loads(data["colocation-config"]), "colocation-config").enable
    # the manager reads it from its --config-namespace
    args = manager_args()
    assert cm["metadata"]["namespace"] == args.config_namespace


# -- the Deployment ---------------------------------------------------------------------------------------
def manager_args():
    dep = one("Deployment")
    [c] = dep["spec"]["template"]["spec"]["containers"]
    return build_parser().parse_args(c["args"])


def test_deployment_runs_the_manager_with_its_webhook():
    dep = one("Deployment")
    spec = dep["spec"]["template"]["spec"]
    [c] = spec["containers"]
    args = manager_args()
    assert args.command == "manager" and args.in_cluster and args.leader_elect
    assert spec["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    webhook = pytest.importorskip("koordfw.engines.kube.webhook")
    assert args.webhook_listen == f"0.0.0.0:{webhook.DEFAULT_PORT}" and ports["webhook"] == webhook.DEFAULT_PORT
    assert args.health_address.endswith(f":{ports['health']}")
    # the serving certificate comes from the mounted Secret
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    secret = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert set(secret) <= set(mounts)
    for f in (args.tls_cert_file, args.tls_private_key_file):
        assert any(f.startswith(mounts[v] + "/") for v in secret), f
    # the webhook registration (a colleague's deploy/webhook.yaml, when there) targets these pods and port
    if (DEPLOY / "webhook.yaml").exists():
        services = [d for d in docs(DEPLOY / "webhook.yaml") if d["kind"] == "Service"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        for svc in services:
            assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
            assert svc["metadata"]["namespace"] == dep["metadata"]["namespace"]
            assert any(p.get("targetPort") in (ports["webhook"], "webhook") for p in svc["spec"]["ports"])
        secrets = {d["metadata"]["name"] for d in docs(DEPLOY / "webhook.yaml") if d["kind"] in ("Secret", "Certificate")}
        certs = {(d.get("spec") or {}).get("secretName") for d in docs(DEPLOY / "webhook.yaml") if d["kind"] == "Certificate"}
        if secrets or certs:
            assert set(secret.values()) & (secrets | certs), (secret, secrets, certs)


# -- RBAC ---------------------------------------------------------------------------------------------
_PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))(?P<rest>/.*)?$")


def attributes(method: str, path: str) -> list[tuple[str, str, str, str, str | None, str | None]]:
    """The RBAC request attributes of one API request: (verb, group, resource, subresource, namespace, name).
    A GET of a collection is a list and, for the reflectors, a watch."""
    m = _PATH.match(path)
    assert m, path
    group = "" if m.group("core") else m.group("group")
    rest = [p for p in (m.group("rest") or "").split("/") if p]
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    verbs = {"POST": ["create"], "PUT": ["update"], "PATCH": ["patch"], "DELETE": ["delete"]}.get(method)
    if verbs is None:
        verbs = ["get"] if name else ["list", "watch"]
    return [(v, group, resource, sub, ns, name) for v in verbs]


def rbac_rules(sa: str, sa_ns: str) -> list[tuple[str | None, dict]]:
    """(namespace or None for cluster-wide, rule) granted to the service account by deploy/manager.yaml."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in MANAGER
             if d["kind"] in ("Role", "ClusterRole")}
    out = []
    for b in MANAGER:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == sa_ns for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        ref = b["roleRef"]
        role = roles[(ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"])]
        out += [(ns, r) for r in role["rules"]]
    return out


def allowed(rules, verb, group, resource, sub, ns, name) -> bool:
    res = f"{resource}/{sub}" if sub else resource
    for scope, r in rules:
        if scope is not None and scope != ns:
            continue
        if (group in r["apiGroups"] or "*" in r["apiGroups"]) and (res in r["resources"] or "*" in r["resources"]) \
                and (verb in r["verbs"] or "*" in r["verbs"]) \
                and (not r.get("resourceNames") or name in r["resourceNames"]):
            return True
    return False


def test_rbac_model():
    rules = [(None, {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}),
             ("ns1", {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]})]
    assert allowed(rules, *attributes("PATCH", "/api/v1/nodes/n1/status")[0])
    assert not allowed(rules, *attributes("PATCH", "/api/v1/nodes/n1")[0])
    assert all(allowed(rules, *a) for a in attributes("GET", "/api/v1/namespaces/ns1/configmaps"))
    assert not any(allowed(rules, *a) for a in attributes("GET", "/api/v1/namespaces/ns2/configmaps"))
    assert attributes("GET", "/api/v1/namespaces") == [("list", "", "namespaces", "", None, None),
                                                       ("watch", "", "namespaces", "", None, None)]


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_rbac_covers_every_request_of_a_manager_run(api, client):
    """Run the manager as deploy/manager.yaml does (leader election, its config namespace, every
    controller and the webhook) through NodeSLO creates, updates and deletes and a node-status write;
    every request it made must be allowed by the manifest's RBAC."""
    args = manager_args()
    dep = one("Deployment")
    sa, sa_ns = dep["spec"]["template"]["spec"]["serviceAccountName"], dep["metadata"]["namespace"]
    now = 1_800_000_000.0
    [cm] = docs(DEPLOY / "slo-controller-config.yaml")
    api.create(cm)
    for name in ("n1", "n2"):
        api.create(node(name, cpu="8", memory="32Gi"))
        api.create(pod(f"web-{name}", cpu="1", memory="2Gi", node_name=name))
        api.create({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                    "status": {"updateTime": iso(now - 30),
                               "nodeMetric": {"nodeUsage": {"resources": {"cpu": "3", "memory": "6Gi"}},
                                              "systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
                               "podsMetric": [{"namespace": "default", "name": f"web-{name}",
                                               "podUsage": {"resources": {"cpu": "2", "memory": "4Gi"}}}]}})
    registry = build_registry(None, only=["batch_resource", "gpu_share"])
    controllers: list = [NodeResourceController(resync_period=3600), NodeSLOController()]
    webhook = None
    try:
        from koordfw.engines.kube.webhook import WebhookServer
        webhook = WebhookServer(host="127.0.0.1", port=0)
        controllers.append(webhook)
    except ImportError:  # pragma: no cover - the webhook is another module of the manager
        pass
    elector = LeaderElector(client, namespace=args.leader_elect_namespace, name=args.leader_elect_name,
                            identity="replica-0", lease_duration=2.0, renew_deadline=1.0, retry_period=0.25)
    m = KubeManager(registry, client, controllers=controllers, config_namespace=args.config_namespace,
                    leader_elector=elector, clock=lambda: now)
    async with anyio.create_task_group() as tg:
        tg.start_soon(m.run)
        await wait_for(lambda: api.get("nodeslos", "n1") and api.get("nodeslos", "n2"))
        await wait_for(lambda: "kubernetes.io/batch-cpu" in api.get("nodes", "n1")["status"]["allocatable"])
        api.update("nodes", "n1", lambda o: o["metadata"]["labels"].update({"node-pool": "offline"}))
        await wait_for(lambda: api.get("nodeslos", "n1")["spec"]["resourceUsedThresholdWithBE"]
                       ["cpuSuppressThresholdPercent"] == 80)
        api.delete("nodes", "n2")
        await wait_for(lambda: api.get("nodeslos", "n2") is None)
        if webhook is not None:
            await wait_for(lambda: webhook.reflectors and all(r.synced.is_set() for r in webhook.reflectors.values()))
        m.stop()
    rules = rbac_rules(sa, sa_ns)
    made = sorted({a for method, path in api.requests for a in attributes(method, path)},
                  key=lambda a: tuple(str(x) for x in a))
    kinds = {(verb, resource, sub) for verb, _, resource, sub, _, _ in made}
    assert {("create", "nodeslos", ""), ("update", "nodeslos", ""), ("delete", "nodeslos", ""),
            ("patch", "nodes", "status"), ("list", "configmaps", ""), ("update", "leases", "")} <= kinds
    refused = [a for a in made if not allowed(rules, *a)]
    assert refused == [], refused
