"""Every manifest in deploy/ parses and validates against the Kubernetes schemas (kubernetes-validate,
which ships the JSON schemas in its wheel: nothing is downloaded); the KubeSchedulerConfiguration's
extender stanza follows kube-scheduler's validation rules; the embedded koordfw profiles load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kube_scheduler_validation import validate_scheduler_config

from koordfw.engines.embedded import build_registry

kubernetes_validate = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S_VERSION = "1.31.0"
DOCS = [(f.relative_to(DEPLOY).as_posix(), i, d) for f in sorted(DEPLOY.rglob("*.yaml"))
        for i, d in enumerate(yaml.safe_load_all(f.read_text())) if d is not None]


def check_scheduler_config(cfg: dict) -> None:
    """kube-scheduler's own validation (pkg/scheduler/apis/config/validation), as ported in
    kube_scheduler_validation; the example must carry an extender."""
    assert cfg.get("extenders"), "the example must carry an extender"
    if cfg.get("apiVersion") == "kubescheduler.config.k8s.io/v1beta1":  # the same fields (v1.19-1.22)
        cfg = {**cfg, "apiVersion": "kubescheduler.config.k8s.io/v1"}
    assert validate_scheduler_config(cfg) == []


@pytest.mark.parametrize("path,index,doc", DOCS, ids=[f"{p}#{i}" for p, i, _ in DOCS])
def test_manifest_is_valid(path, index, doc):
    if doc.get("kind") == "KubeSchedulerConfiguration":
        check_scheduler_config(doc)
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    if doc["kind"] == "ConfigMap":
        for key, text in (doc.get("data") or {}).items():
            inner = yaml.safe_load(text)
            if key == "profile.yaml":
                build_registry(inner, autoload=False)  # the profile loads
            elif inner.get("kind") == "KubeSchedulerConfiguration":
                check_scheduler_config(inner)


def test_rbac_covers_what_the_scheduler_writes():
    roles = {d["metadata"]["name"]: d for _, _, d in DOCS if d["kind"] in ("ClusterRole", "Role")}
    rules = roles["koordfw-scheduler"]["rules"]
    assert any("pods" in r["resources"] and "patch" in r["verbs"] for r in rules)  # pre_bind annotations
    agent = roles["koordfw-agent"]["rules"]
    assert any("nodemetrics/status" in r["resources"] and "update" in r["verbs"] for r in agent)


def test_agent_daemonset_shape():
    [ds] = [d for _, _, d in DOCS if d["kind"] == "DaemonSet"]
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert c["securityContext"]["privileged"] is True
    mounts = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert {"/sys/fs", "/proc"} <= mounts  # /sys/fs: cgroup and resctrl
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--node-name=$(NODE_NAME)" in c["args"]


def test_dockerfile_copies_what_exists():
    text = (DEPLOY / "Dockerfile").read_text()
    root = DEPLOY.parent
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (root / src).exists(), src
    plugins = next(ln for ln in text.splitlines() if ln.startswith("ARG PLUGINS=")).split("=", 1)[1].strip('"').split()
    for p in plugins:
        assert (root / "plugins" / p / "pyproject.toml").exists(), p
