"""The deploy/ manifests as the deploy tests read them (shared by test_deploy_args.py, test_deploy_manager.py,
test_nodeslo.py and the live tests that check what they write against the CRDs and the RBAC)."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_docs(root: Path) -> list[tuple[str, dict]]:
    out = []
    for f in sorted([*root.rglob("*.yaml"), *root.rglob("*.yml")]):
        for i, d in enumerate(yaml.safe_load_all(f.read_text())):
            if isinstance(d, dict):
                meta = d.get("metadata") or {}
                out.append((f"{f.relative_to(DEPLOY).as_posix()}#{i} {d.get('kind')}/{meta.get('name')}", d))
    return out


DOCS = all_docs(DEPLOY)

CRDS = {d["metadata"]["name"]: d for f in sorted(DEPLOY.glob("00-crd-*.yaml")) for d in docs(f)}


def objects(kind: str, docs=DOCS) -> dict[tuple[str, str], dict]:
    """(namespace, name) → object of ``kind``; embedded List items included."""
    out = {}
    for _, d in docs:
        for o in d.get("items", []) if d.get("kind") == "List" else [d]:
            if o.get("kind") == kind:
                meta = o.get("metadata") or {}
                out[(meta.get("namespace", ""), meta["name"])] = o
    return out


#: rules of the bootstrap ClusterRoles the manifests bind (a subset of
#: plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go: what the caches and binders here need)
BUILTIN_RULES: dict[str, list[dict]] = {
    "system:kube-scheduler": [
        {"apiGroups": [""], "resources": ["nodes", "namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["replicationcontrollers", "services"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps", "extensions"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes"], "verbs": ["get", "list", "watch"]},
    ],
    "system:volume-scheduler": [
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "patch", "update", "watch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "patch", "update", "watch"]},
    ],
}


def cluster_rules(docs, namespace: str, sa: str) -> list[dict]:
    """The rules bound cluster-wide (ClusterRoleBindings) to a service account."""
    roles = {name: o.get("rules") or [] for (_, name), o in objects("ClusterRole", docs).items()}
    rules: list[dict] = []
    for b in objects("ClusterRoleBinding", docs).values():
        if any(s.get("kind") == "ServiceAccount" and s["name"] == sa and s.get("namespace") == namespace
               for s in b.get("subjects") or []):
            rules += roles.get(b["roleRef"]["name"]) or BUILTIN_RULES.get(b["roleRef"]["name"], [])
    return rules


def may(rules: list[dict], verb: str, group: str, resource: str) -> bool:
    return any((group in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
               and (resource in r.get("resources", []) or "*" in r.get("resources", []))
               and (verb in r.get("verbs", []) or "*" in r.get("verbs", [])) and not r.get("resourceNames")
               for r in rules)


def pruned(value, schema: dict, path: str = "spec") -> list[str]:
    """What the apiserver's pruning would drop from ``value`` (fields the schema does not know) or refuse
    (a value of the wrong type)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, (int, str)) and not isinstance(value, bool) else [f"{path}: {value!r}"]
    t = schema["type"]
    ok = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int}[t]
    if not isinstance(value, ok) or (t == "integer" and isinstance(value, bool)):
        return [f"{path}: {value!r} is not {t}"]
    out = []
    if t == "object":
        for k, v in value.items():
            if "properties" in schema:
                if k not in schema["properties"]:
                    out.append(f"{path}.{k}: unknown field, pruned")
                else:
                    out += pruned(v, schema["properties"][k], f"{path}.{k}")
            elif "additionalProperties" in schema:
                out += pruned(v, schema["additionalProperties"], f"{path}.{k}")
            else:
                out.append(f"{path}.{k}: unknown field, pruned")
    if t == "array":
        for i, v in enumerate(value):
            out += pruned(v, schema["items"], f"{path}[{i}]")
    return out
