"""The manifests in deploy/ (and its subdirectories, whatever is there when this runs) start:

* every container's command line (``command``/``args`` over the Dockerfile's ENTRYPOINT/CMD, as the
  kubelet combines them) parses with koordfw's real CLI parser, or with the model of the other image;
* every file a command line names under a ConfigMap mount is a key of that ConfigMap;
* every probe reaches what the container serves, given its arguments, from the pod IP, as the kubelet
  dials it (httpGet's ``host`` defaults to the pod IP; a process on 127.0.0.1 cannot pass);
* every KubeSchedulerConfiguration passes kube-scheduler's own validation (tests/kube/kube_scheduler_validation);
* deploy/extender/ is self-contained: what its objects reference is defined there or built in.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import json
import re
import shlex
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from aiohttp import web
from deploy_testkit import DEPLOY, DOCS, cluster_rules, may, objects
from kube_scheduler_validation import is_extended_resource_name, validate_extenders, validate_scheduler_config

from koordfw.cli import build_parser


def pod_spec(doc: dict) -> dict | None:
    """The pod template of a workload (or a Pod's spec)."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return ((((spec.get("jobTemplate") or {}).get("spec") or {}).get("template")) or {}).get("spec")
    return None


CONTAINERS = [(f"{where} container {c['name']}", doc, spec, c)
              for where, doc in DOCS if (spec := pod_spec(doc))
              for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]


def dockerfile_exec_form(instruction: str) -> list[str] | None:
    """The exec-form (JSON array) value of the Dockerfile's last ``instruction``, if any."""
    value = None
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.upper().startswith(instruction + " "):
            text = line[len(instruction):].strip()
            value = json.loads(text) if text.startswith("[") else ["/bin/sh", "-c", text]
    return value


KOORDFW_ENTRYPOINT = dockerfile_exec_form("ENTRYPOINT") or []
KOORDFW_CMD = dockerfile_exec_form("CMD") or []


def image_name(image: str) -> str:
    """``registry/path/name`` without tag or digest."""
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return name


def is_koordfw_image(image: str) -> bool:
    return image_name(image).rsplit("/", 1)[-1] == "koordfw"


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: a defined variable is replaced, ``$$`` is a literal ``$``,
    an undefined reference stays as written."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def container_env(c: dict) -> dict[str, str]:
    """Literal ``value``s as themselves; ``valueFrom`` fields as ``$(fieldPath)`` markers (e.g.
    ``$(status.podIP)``), which the probe model recognises."""
    out: dict[str, str] = {}
    for e in c.get("env") or []:
        if "value" in e:
            out[e["name"]] = expand(str(e["value"]), out)
        elif field := ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath"):
            out[e["name"]] = f"$({field})"
    return out


def argv(c: dict) -> list[str]:
    """What the container runs: ``command`` replaces the image's ENTRYPOINT (and drops its CMD),
    ``args`` replaces its CMD; ``$(VAR)`` expanded."""
    koordfw = is_koordfw_image(c["image"])
    command = c.get("command")
    args = c.get("args")
    if command is None:
        if not koordfw:
            pytest.fail(f"{c['name']}: no command for image {c['image']}, whose ENTRYPOINT this test does not know")
        command = KOORDFW_ENTRYPOINT
        if args is None:
            args = KOORDFW_CMD
    env = container_env(c)
    return [expand(str(x), env) for x in [*command, *(args or [])]]


def parse_koordfw(where: str, line: list[str]) -> argparse.Namespace:
    if not line or Path(line[0]).name != "koordfw":
        pytest.fail(f"{where}: runs {shlex.join(line)!r}, not koordfw (the image's ENTRYPOINT is "
                    f"{KOORDFW_ENTRYPOINT})")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(line[1:])
    except SystemExit:
        pytest.fail(f"{where}: koordfw rejects its command line {shlex.join(line)!r}: "
                    f"{err.getvalue().strip().splitlines()[-1]}")
    if not getattr(args, "func", None):
        pytest.fail(f"{where}: {shlex.join(line)!r} names no command that runs (koordfw prints its help, exits 2)")
    return args


# -- the other image: kube-scheduler (its flags, cmd/kube-scheduler/app/options) ------------------------
KUBE_SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler"


def kube_scheduler_parser() -> argparse.ArgumentParser:
    """The kube-scheduler flags the manifests may use (an unknown one fails, as kube-scheduler's would)."""
    p = argparse.ArgumentParser(prog="kube-scheduler", add_help=False, exit_on_error=False)
    p.add_argument("--config")
    p.add_argument("--secure-port", type=int, default=10259)
    p.add_argument("--bind-address", default="0.0.0.0")
    p.add_argument("--v", "-v", type=int)
    p.add_argument("--kubeconfig")
    p.add_argument("--authentication-kubeconfig")
    p.add_argument("--authorization-kubeconfig")
    p.add_argument("--feature-gates")
    p.add_argument("--leader-elect", nargs="?", const="true")
    return p


def parse_kube_scheduler(where: str, line: list[str]) -> argparse.Namespace:
    if not line or Path(line[0]).name != "kube-scheduler":
        pytest.fail(f"{where}: image {KUBE_SCHEDULER_IMAGE} runs {shlex.join(line)!r}, not kube-scheduler")
    try:
        args, extra = kube_scheduler_parser().parse_known_args(line[1:])
    except argparse.ArgumentError as e:
        pytest.fail(f"{where}: kube-scheduler {e}")
    if extra:
        pytest.fail(f"{where}: kube-scheduler flags this test does not know: {extra}")
    return args


@pytest.mark.parametrize("where,doc,spec,c", CONTAINERS, ids=[w for w, *_ in CONTAINERS])
def test_container_command_line_parses(where, doc, spec, c):
    line = argv(c)
    if is_koordfw_image(c["image"]):
        parse_koordfw(where, line)
    elif image_name(c["image"]) == KUBE_SCHEDULER_IMAGE:
        args = parse_kube_scheduler(where, line)
        assert args.config, f"{where}: kube-scheduler without --config runs the default profile only"
    else:
        pytest.fail(f"{where}: no model of image {c['image']}'s command line; add one to this test")


def test_the_tests_see_the_manifests():
    assert KOORDFW_ENTRYPOINT == ["koordfw"]
    names = {c["name"] for _, _, _, c in CONTAINERS}
    assert {"scheduler", "agent", "kube-scheduler", "koordfw-extender"} <= names


def test_a_flag_the_cli_does_not_know_fails():
    bad = {"name": "x", "image": "koordfw:latest", "args": ["scheduler", "--no-such-flag"]}
    with pytest.raises(pytest.fail.Exception, match="--no-such-flag"):
        parse_koordfw("x", argv(bad))
    with pytest.raises(pytest.fail.Exception, match="names no command"):
        parse_koordfw("x", argv({"name": "x", "image": "koordfw:v1", "args": ["--log-level", "info"]}))
    ok = parse_koordfw("x", argv({"name": "x", "image": "example.com/koordfw:v1", "env": [{"name": "N", "value": "n1"}],
                                  "args": ["agent", "--node-name=$(N)", "--log-level=info"]}))
    assert (ok.node_name, ok.log_level) == ("n1", "info")
    with pytest.raises(pytest.fail.Exception, match="does not know"):
        parse_kube_scheduler("x", ["kube-scheduler", "--config=/c", "--policy-config-file=/p"])


# -- files under ConfigMap mounts ----------------------------------------------------------------------


def mounted_configmap_files(doc: dict, spec: dict, c: dict) -> dict[str, tuple[str, set[str]]]:
    """mountPath → (ConfigMap name, the file names it holds there)."""
    ns = (doc.get("metadata") or {}).get("namespace", "")
    cms = objects("ConfigMap")
    vols = {v["name"]: v for v in spec.get("volumes") or []}
    out = {}
    for m in c.get("volumeMounts") or []:
        cm = (vols.get(m["name"]) or {}).get("configMap")
        if not cm:
            continue
        data = cms.get((ns, cm["name"]))
        keys = set((data or {}).get("data") or {}) | set((data or {}).get("binaryData") or {})
        files = {i["path"] for i in cm["items"]} if cm.get("items") else keys
        if m.get("subPath"):
            files = {""} if m["subPath"] in files else set()
        out[m["mountPath"].rstrip("/")] = (cm["name"], files)
    return out


@pytest.mark.parametrize("where,doc,spec,c", CONTAINERS, ids=[w for w, *_ in CONTAINERS])
def test_files_named_on_the_command_line_exist(where, doc, spec, c):
    mounts = mounted_configmap_files(doc, spec, c)
    for token in argv(c):
        value = token.split("=", 1)[1] if token.startswith("-") and "=" in token else token
        if not value.startswith("/"):
            continue
        for mount, (cm, files) in mounts.items():
            if value == mount and "" in files:
                break
            if value.startswith(mount + "/"):
                rel = value[len(mount) + 1:]
                assert rel in files, (f"{where}: {token!r} names {rel!r} in ConfigMap {cm!r} mounted at {mount}, "
                                      f"which holds {sorted(files)}")
                break


# -- probes: what the kubelet dials vs what the container serves ------------------------------------------
@attrs.frozen
class Endpoint:
    host: str  # as the process binds it
    port: int
    scheme: str  # HTTP, HTTPS or TCP-only
    paths: frozenset[str]

    @property
    def reachable_from_pod_ip(self) -> bool:
        """Bound to every address (0.0.0.0, ::) or to the pod's IP ($(status.podIP))."""
        if self.host == "$(status.podIP)":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_unspecified
        except ValueError:
            return False


def _routes(app: web.Application) -> frozenset[str]:
    return frozenset(r.resource.canonical for r in app.router.routes() if r.resource is not None)


def health_paths() -> frozenset[str]:
    from koordfw.engines.kube.health import add_health_routes

    app = web.Application()
    add_health_routes(app, dict)
    return _routes(app)


def extender_paths(prefix: str) -> frozenset[str]:
    from koordfw.engines.embedded import build_registry
    from koordfw.engines.kube.extender import Extender, ExtenderServer

    return _routes(ExtenderServer(Extender(build_registry(None, autoload=False)), prefix=prefix).app)


def webhook_paths() -> frozenset[str]:
    """The routes of ``koordfw manager --webhook-listen`` (the admission webhook with its health routes)."""
    from koordfw.engines.kube.webhook import Webhook

    return _routes(Webhook(None, synced=list).app)  # type: ignore[arg-type]  # routes only, no admission


def koordfw_endpoints(args: argparse.Namespace) -> list[Endpoint]:
    """What ``koordfw <command>`` serves given its arguments, with the address parsing of the commands
    themselves. A command's ``--health-address`` serves the health routes (koordfw.engines.kube.health)."""
    from koordfw.commands.scheduler import split_address

    out = []
    if getattr(args, "health_address", ""):
        host, port = split_address(args.health_address)
        out.append(Endpoint(host, port, "HTTP", health_paths()))
    if args.command == "extender":
        host, port = split_address(args.listen)
        out.append(Endpoint(host, port, "HTTPS" if args.tls_cert_file else "HTTP", extender_paths(args.url_prefix)))
    if getattr(args, "webhook_listen", None):
        # koordfw.engines.kube.webhook.Webhook's routes (not built here: its metrics register once per
        # process): the two admission endpoints and the health routes, over TLS
        host, port = split_address(args.webhook_listen)
        out.append(Endpoint(host, port, "HTTPS", health_paths() | {"/mutate-pod", "/validate-pod"}))
    if args.command == "manager" and args.webhook_listen:
        host, port = split_address(args.webhook_listen, "0.0.0.0")
        out.append(Endpoint(host, port, "HTTPS", webhook_paths()))
    if args.command == "agent" and args.metrics_listen:
        from koordfw.agent.metrics_server import parse_listen

        host, port = parse_listen(args.metrics_listen, args.metrics_allow_remote)
        out.append(Endpoint(host, port, "HTTP", frozenset({"/metrics"})))
    return out


def kube_scheduler_endpoints(args: argparse.Namespace) -> list[Endpoint]:
    """kube-scheduler's secure serving: --bind-address (default 0.0.0.0) : --secure-port (default 10259,
    0 = off), HTTPS; /healthz, /livez and /readyz are always allowed without authorization."""
    if args.secure_port == 0:
        return []
    return [Endpoint(args.bind_address, args.secure_port, "HTTPS", frozenset({"/healthz", "/livez", "/readyz",
                                                                               "/metrics"}))]


def served(where: str, c: dict) -> list[Endpoint]:
    line = argv(c)
    if is_koordfw_image(c["image"]):
        return koordfw_endpoints(parse_koordfw(where, line))
    if image_name(c["image"]) == KUBE_SCHEDULER_IMAGE:
        return kube_scheduler_endpoints(parse_kube_scheduler(where, line))
    pytest.fail(f"{where}: no model of what image {c['image']} serves; add one to this test")


def probe_problem(where: str, spec: dict, c: dict, kind: str, probe: dict) -> str | None:
    """Why the kubelet's ``kind`` probe cannot pass, or None."""
    if "exec" in probe:
        return None
    if "grpc" in probe:
        return f"{where} {kind}: a grpc probe, which nothing here serves"
    action = probe.get("httpGet") or probe.get("tcpSocket")
    if action is None:
        return f"{where} {kind}: no handler (exec, httpGet, tcpSocket or grpc)"
    port = action.get("port")
    if isinstance(port, str) and not port.isdigit():
        named = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
        if port not in named:
            return f"{where} {kind}: port {port!r} is not a named port of the container"
        port = named[port]
    port = int(port)
    host = action.get("host")
    if host and not spec.get("hostNetwork"):
        # the kubelet dials `host` from the node's network namespace: never the container's loopback
        return f"{where} {kind}: host {host!r}: the kubelet dials it from the node, not from inside the pod"
    eps = [e for e in served(where, c) if e.port == port]
    if not eps:
        return f"{where} {kind}: nothing in the container listens on port {port} (given its arguments)"
    if not any(e.reachable_from_pod_ip for e in eps):
        return (f"{where} {kind}: port {port} is bound to {', '.join(sorted({e.host for e in eps}))}, "
                "which the kubelet's probe to the pod IP cannot reach")
    eps = [e for e in eps if e.reachable_from_pod_ip]
    if "httpGet" in probe:
        scheme = action.get("scheme", "HTTP").upper()
        path = action.get("path", "/").split("?", 1)[0]
        if not any(e.scheme == scheme for e in eps):
            return f"{where} {kind}: {scheme} to port {port}, which serves {', '.join(e.scheme for e in eps)}"
        if not any(path in e.paths for e in eps if e.scheme == scheme):
            return f"{where} {kind}: port {port} does not serve {path!r}"
    return None


PROBES = [(f"{where}", spec, c, kind, c[kind]) for where, _, spec, c in CONTAINERS
          for kind in ("startupProbe", "livenessProbe", "readinessProbe") if c.get(kind)]


@pytest.mark.parametrize("where,spec,c,kind,probe", PROBES, ids=[f"{w} {k}" for w, _, _, k, _ in PROBES])
def test_probe_reaches_the_process(where, spec, c, kind, probe):
    assert probe_problem(where, spec, c, kind, probe) is None


def test_probe_model_catches_loopback_and_wrong_paths():
    spec: dict[str, Any] = {}
    ext = {"name": "e", "image": "koordfw:latest", "args": ["extender", "--listen=127.0.0.1:8888"]}
    probe = {"httpGet": {"path": "/healthz", "port": 8888}}
    assert "cannot reach" in probe_problem("w", spec, ext, "livenessProbe", probe)
    assert "dials it from the node" in probe_problem(
        "w", spec, ext, "livenessProbe", {"httpGet": {"path": "/healthz", "port": 8888, "host": "127.0.0.1"}})
    ext["args"] = ["extender", "--listen=0.0.0.0:8888"]
    assert probe_problem("w", spec, ext, "livenessProbe", probe) is None
    assert "does not serve" in probe_problem("w", spec, ext, "livenessProbe",
                                             {"httpGet": {"path": "/nope", "port": 8888}})
    assert "HTTPS" in probe_problem("w", spec, ext, "livenessProbe",
                                    {"httpGet": {"path": "/healthz", "port": 8888, "scheme": "HTTPS"}})
    ext["args"] = ["extender", "--health-address=$(POD_IP):9000"]
    ext["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    assert probe_problem("w", spec, ext, "readinessProbe", {"httpGet": {"path": "/readyz", "port": 9000}}) is None
    sched = {"name": "s", "image": "koordfw:latest", "args": ["scheduler", "--health-address=:10259"],
             "ports": [{"name": "metrics", "containerPort": 10259}]}
    assert "cannot reach" in probe_problem("w", spec, sched, "livenessProbe", {"tcpSocket": {"port": "metrics"}})


# -- KubeSchedulerConfiguration -------------------------------------------------------------------------
def scheduler_configs() -> list[tuple[str, dict]]:
    out = [(w, d) for w, d in DOCS if d.get("kind") == "KubeSchedulerConfiguration"]
    for w, d in DOCS:
        if d.get("kind") == "ConfigMap":
            for key, text in (d.get("data") or {}).items():
                inner = yaml.safe_load(text)
                if isinstance(inner, dict) and inner.get("kind") == "KubeSchedulerConfiguration":
                    out.append((f"{w} data.{key}", inner))
    return out


CONFIGS = scheduler_configs()


@pytest.mark.parametrize("where,cfg", CONFIGS, ids=[w for w, _ in CONFIGS])
def test_scheduler_config_passes_kube_scheduler_validation(where, cfg):
    if cfg.get("apiVersion") == "kubescheduler.config.k8s.io/v1beta1":
        # the fields used are v1's too; kube-scheduler v1.20 reading this file is proven for real in
        # tests/realkube/test_extender_real.py
        cfg = {**cfg, "apiVersion": "kubescheduler.config.k8s.io/v1"}
    assert validate_scheduler_config(cfg) == []


def test_the_standalone_scheduler_configs_are_the_ones_deployed():
    """deploy/extender/config/ (out of `kubectl apply -f deploy/extender/`'s reach: not API objects) holds
    the same files as extender.yaml's ConfigMap, in both versions: v1 and v1beta1 (Kubernetes 1.19-1.22)."""
    standalone = {w.split("#")[0].removeprefix("extender/config/"): cfg for w, cfg in CONFIGS
                  if w.startswith("extender/config/")}
    embedded = {w.split("data.")[1]: cfg for w, cfg in CONFIGS if w.startswith("extender/extender.yaml")}
    assert set(standalone) == set(embedded) == {"kube-scheduler-config.yaml", "kube-scheduler-config-v1beta1.yaml"}
    assert standalone == embedded
    v1, v1beta1 = embedded["kube-scheduler-config.yaml"], embedded["kube-scheduler-config-v1beta1.yaml"]
    assert v1["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert v1beta1 == {**v1, "apiVersion": "kubescheduler.config.k8s.io/v1beta1"}


def test_no_file_kubectl_applies_from_deploy_extender_is_a_scheduler_configuration():
    """`kubectl apply -f deploy/extender/` reads the folder's files (not its subfolders): a
    KubeSchedulerConfiguration there is not an API object and fails the whole apply."""
    top = [f for f in (DEPLOY / "extender").iterdir() if f.suffix in (".yaml", ".yml", ".json")]
    assert top
    for f in top:
        assert all(d.get("kind") != "KubeSchedulerConfiguration"
                   for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict)), f


@pytest.mark.parametrize("name,extended", [
    ("example.com/foo", True), ("koordinator.sh/gpu-core", True), ("nvidia.com/gpu", True),
    ("kubernetes.io/batch-cpu", False), ("kubernetes.io/batch-memory", False),
    ("foo.kubernetes.io/bar", False),  # kube's test is a substring test
    ("cpu", False), ("requests.example.com/foo", False), ("Example.com/foo", False),
    ("example.com/-foo", False), ("example.com/" + "a" * 63, True), ("example.com/" + "a" * 64, False),
    ("a/b/c", False), ("/foo", False), ("example.com/", False),
])
def test_extended_resource_name(name, extended):
    assert is_extended_resource_name(name) is extended


def test_validate_extenders_rules():
    assert validate_extenders([{"urlPrefix": "http://x", "managedResources": [{"name": "kubernetes.io/batch-cpu"}]}]) == [
        "extenders[0].managedResources[0].name: Invalid value: 'kubernetes.io/batch-cpu': is an invalid extended "
        "resource name"]
    dup = validate_extenders([{"urlPrefix": "a", "managedResources": [{"name": "example.com/x"}]},
                              {"urlPrefix": "b", "managedResources": [{"name": "example.com/x"}]}])
    assert dup == ["extenders[1].managedResources[0].name: Invalid value: 'example.com/x': duplicate extender "
                   "managed resource name"]
    errs = validate_extenders([{"urlPrefix": "a", "prioritizeVerb": "p", "bindVerb": "b"},
                               {"urlPrefix": "b", "bindVerb": "b", "weight": 1, "bogus": 1}])
    assert any("positive weight" in e for e in errs) and any("only one extender can implement bind" in e
                                                             for e in errs)
    assert any("unknown field(s) bogus" in e for e in errs)


# -- deploy/extender/ is self-contained -----------------------------------------------------------------
BUILTIN_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
BUILTIN_PRIORITY_CLASSES = {"system-cluster-critical", "system-node-critical"}
#: bootstrap RBAC roles every cluster has (plugin/pkg/auth/authorizer/rbac/bootstrappolicy)
BUILTIN_CLUSTER_ROLES = {"system:kube-scheduler", "system:volume-scheduler", "cluster-admin", "admin", "edit", "view"}
BUILTIN_ROLES = {("kube-system", "extension-apiserver-authentication-reader")}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "CustomResourceDefinition",
                  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "StorageClass"}


def references(docs: list[tuple[str, dict]]) -> list[tuple[str, str, str, str]]:
    """(where, kind, namespace, name) of every object the documents refer to."""
    refs = []
    for where, d in docs:
        meta = d.get("metadata") or {}
        ns = meta.get("namespace", "")
        if d.get("kind") not in CLUSTER_SCOPED:
            refs.append((where, "Namespace", "", ns or "default"))
        if d.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
            rr = d["roleRef"]
            refs.append((where, rr["kind"], ns if rr["kind"] == "Role" else "", rr["name"]))
            for s in d.get("subjects") or []:
                if s["kind"] == "ServiceAccount":
                    refs.append((where, "ServiceAccount", s.get("namespace", ns), s["name"]))
        if spec := pod_spec(d):
            refs.append((where, "ServiceAccount", ns, spec.get("serviceAccountName") or "default"))
            if spec.get("priorityClassName"):
                refs.append((where, "PriorityClass", "", spec["priorityClassName"]))
            for v in spec.get("volumes") or []:
                if "configMap" in v and not v["configMap"].get("optional"):
                    refs.append((where, "ConfigMap", ns, v["configMap"]["name"]))
                if "secret" in v and not v["secret"].get("optional"):
                    refs.append((where, "Secret", ns, v["secret"]["secretName"]))
    return refs


def unresolved(docs: list[tuple[str, dict]]) -> list[str]:
    defined = {(d.get("kind"), (d.get("metadata") or {}).get("namespace", "") if d.get("kind") not in CLUSTER_SCOPED
                else "", (d.get("metadata") or {}).get("name")) for _, d in docs}
    missing = []
    for where, kind, ns, name in references(docs):
        if (kind, ns, name) in defined:
            continue
        if kind == "Namespace" and name in BUILTIN_NAMESPACES:
            continue
        if kind == "ServiceAccount" and name == "default":
            continue
        if kind == "PriorityClass" and name in BUILTIN_PRIORITY_CLASSES:
            continue
        if kind == "ClusterRole" and name in BUILTIN_CLUSTER_ROLES:
            continue
        if kind == "Role" and (ns, name) in BUILTIN_ROLES:
            continue
        missing.append(f"{where}: {kind} {ns + '/' if ns else ''}{name} is neither defined here nor built in")
    return missing


def test_extender_manifests_are_self_contained():
    docs = [(w, d) for w, d in DOCS if w.startswith("extender/")]
    assert docs
    assert unresolved(docs) == []


def test_self_contained_check_finds_what_is_missing():
    docs = [(w, d) for w, d in DOCS if w.startswith("extender/")]
    without_sa = [(w, d) for w, d in docs if d.get("kind") != "ServiceAccount"]
    assert any("ServiceAccount" in m for m in unresolved(without_sa))
    foreign = [("x", {"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "kube-system"},
                      "roleRef": {"kind": "Role", "name": "not-here"}, "subjects": []})]
    assert unresolved(foreign) == ["x: Role kube-system/not-here is neither defined here nor built in"]


# -- RBAC: the cache lists every kind its plugins read (nodes and pods it may not list: it never syncs; ----
# -- another kind: treated as absent, so the plugins reading it see nothing) --------------------------------


def api_resource(path: str) -> tuple[str, str]:
    """(apiGroup, resource) of a collection path: /api/v1/pods, /apis/<group>/<version>/<resource>."""
    parts = path.strip("/").split("/")
    return ("", parts[2]) if parts[0] == "api" else (parts[1], parts[3])






def cache_kinds() -> list[tuple[str, str]]:
    """What the scheduler's and the extender's cluster cache lists and watches (their real reflectors)."""
    from koordfw.engines.embedded import build_registry
    from koordfw.engines.kube.engine import build_cache

    _, _, reflectors = build_cache(build_registry(None, autoload=False), None, scheduler_name=None)  # type: ignore[arg-type]
    return [api_resource(r.path) for r in reflectors]


CACHED = [(where, doc, spec, c) for where, doc, spec, c in CONTAINERS
          if is_koordfw_image(c["image"]) and argv(c)[1:2] in (["scheduler"], ["extender"])]


@pytest.mark.parametrize("where,doc,spec,c", CACHED, ids=[w for w, *_ in CACHED])
def test_cache_kinds_are_listable(where, doc, spec, c):
    args = parse_koordfw(where, argv(c))
    if not (args.in_cluster or args.kubeconfig):
        pytest.skip("no cluster cache")
    ns = (doc.get("metadata") or {}).get("namespace", "default")
    sa = spec.get("serviceAccountName") or "default"
    rules = cluster_rules(DOCS, ns, sa)
    missing = [f"{verb} {g or 'core'}/{r}" for g, r in cache_kinds() for verb in ("list", "watch")
               if not may(rules, verb, g, r)]
    assert not missing, f"{where}: service account {ns}/{sa} may not {missing}: its cache would miss them"
    for verb, r in (("create", "pods/binding"), ("patch", "pods")):  # the Binding; pre_bind's annotations
        assert may(rules, verb, "", r), f"{where}: service account {ns}/{sa} may not {verb} {r}"


def test_rbac_model_sees_a_missing_rule():
    docs = [(w, d) for w, d in DOCS if w.startswith("extender/")]
    rules = cluster_rules(docs, "koordfw-system", "koordfw-extended-scheduler")
    assert may(rules, "watch", "slo.koordinator.sh", "nodemetrics") and may(rules, "list", "", "nodes")
    assert not may([r for r in rules if "slo.koordinator.sh" not in r.get("apiGroups", [])], "watch",
                   "slo.koordinator.sh", "nodemetrics")
    assert not may(cluster_rules(docs, "koordfw-system", "someone-else"), "list", "", "pods")
    assert ("topology.node.k8s.io", "noderesourcetopologies") in cache_kinds()


def test_the_image_installs_every_plugin_package_after_its_dependencies():
    import tomllib

    line = next(ln for ln in (DEPLOY / "Dockerfile").read_text().splitlines() if ln.startswith("ARG PLUGINS="))
    chosen = line.split("=", 1)[1].strip('"').split()
    root = DEPLOY.parent / "plugins"
    packages = {p.parent.name: tomllib.loads(p.read_text())["project"] for p in root.glob("*/pyproject.toml")}
    assert sorted(chosen) == sorted(packages), "deploy/Dockerfile's default PLUGINS should list every plugin package"
    by_dist = {proj["name"].replace("_", "-"): name for name, proj in packages.items()}
    for i, name in enumerate(chosen):
        for dep in packages[name].get("dependencies", []):
            dist = re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0].replace("_", "-")
            if dist in by_dist:
                assert by_dist[dist] in chosen[:i], f"{name} needs {dist} installed before it"


def test_deploy_as_a_whole_references_only_what_it_defines():
    """All of deploy/ applied together: every reference resolves, except Secrets (TLS material is made at
    install time, e.g. by cert-manager or the docs' openssl steps)."""
    assert [m for m in unresolved(DOCS) if ": Secret " not in m] == []


def host_mounts(spec: dict, c: dict) -> dict[str, str]:
    """mountPath → host path of the container's hostPath mounts."""
    vols = {v["name"]: v for v in spec.get("volumes") or []}
    return {m["mountPath"].rstrip("/"): vols[m["name"]]["hostPath"]["path"].rstrip("/")
            for m in c.get("volumeMounts") or [] if "hostPath" in vols.get(m["name"], {})}


NODE_ROOTS = [(where, spec, c) for where, _, spec, c in CONTAINERS
              if is_koordfw_image(c["image"]) and argv(c)[1:2] == ["agent"]]


@pytest.mark.parametrize("where,spec,c", NODE_ROOTS, ids=[w for w, *_ in NODE_ROOTS])
def test_agent_roots_are_the_hosts(where, spec, c):
    """The agent's filesystem roots (--cgroup-root, --resctrl-root, their defaults included) are the
    host's: inside a hostPath mount of the same host path, not the container's own /sys."""
    args = parse_koordfw(where, argv(c))
    mounts = host_mounts(spec, c)
    for opt, want in (("cgroup_root", "/sys/fs/cgroup"), ("resctrl_root", "/sys/fs/resctrl")):
        value = getattr(args, opt).rstrip("/")
        host = next((h + value[len(m):] for m, h in mounts.items() if value == m or value.startswith(m + "/")), None)
        assert host == want, f"{where}: --{opt.replace('_', '-')} {value} is {host or 'not a host path'}, not {want}"
