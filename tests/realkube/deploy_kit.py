"""deploy/ on the real control plane, as a user applies it: ``kubectl apply -f deploy/``, then koordfw's
components run as local processes (no kubelet runs pods here) with the container args their manifests give
and the token of the ServiceAccount their manifest names. Used by test_deploy_real.py and
test_zero_intrusion_real.py.

What is adapted from the manifests, because a local process is not a pod (and only that):

* ``--in-cluster`` becomes ``--kubeconfig`` with the ServiceAccount's token (same identity, same RBAC);
* listen addresses (``--health-address``, ``--webhook-listen``, ``--metrics-listen``) move to free
  loopback ports;
* paths of mounted volumes: the webhook's certificate (``/etc/koordfw/webhook-tls``) is one made for
  127.0.0.1, the scheduler's ``--profile`` is the ConfigMap key written to a file, the agent's
  ``/host/sys/fs/...`` is this machine's ``/sys/fs/...``;
* ``$(NODE_NAME)`` (the downward API) is the simulated node's name;
* the webhook configurations call the manager at ``https://127.0.0.1:<port>`` instead of the Service
  (no kube-proxy or endpoints here), trusting the CA of the certificate made for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from realkube_testkit import stop_process, wait_until

from koordfw.testing.control_plane import ControlPlane, ControlPlaneError, free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NS = "koordfw-system"
KOORDFW = [str(Path(sys.executable).with_name("koordfw"))]
if not Path(KOORDFW[0]).exists():
    KOORDFW = [sys.executable, "-m", "koordfw"]


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if isinstance(d, dict)]


def workload(name: str) -> dict:
    """The Deployment or DaemonSet of a deploy/ file."""
    return next(d for d in documents(name) if d["kind"] in ("Deployment", "DaemonSet"))


def container_args(name: str) -> tuple[str, list[str]]:
    """(ServiceAccount, args) of the workload's first container (the image's ENTRYPOINT is ``koordfw``)."""
    spec = workload(name)["spec"]["template"]["spec"]
    return spec.get("serviceAccountName") or "default", list(spec["containers"][0]["args"])


def config_map_key(name: str, key: str) -> str:
    return next(d["data"][key] for d in documents(name) if d["kind"] == "ConfigMap" and key in (d.get("data") or {}))


def wait_namespace_gone(plane: ControlPlane, ns: str, timeout: float = 60) -> None:
    """A previous test's ``ns`` may still be Terminating (the sweep deletes it): creating it again then fails."""
    def gone() -> bool:
        try:
            plane.request("GET", f"/api/v1/namespaces/{ns}")
        except ControlPlaneError as e:
            return getattr(e, "status", 0) == 404
        return False
    try:
        wait_until(gone, timeout, f"namespace {ns} from an earlier test to be gone")
    except AssertionError as e:
        left = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["metadata"].get("deletionTimestamp"))
                for p in plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]]
        status = plane.request("GET", f"/api/v1/namespaces/{ns}").get("status")
        raise AssertionError(f"{e}: its status {status}, its pods {left}") from None


def delete_deploy_namespace(plane: ControlPlane) -> None:
    """Delete koordfw-system (its pods first, grace 0) at the end of a test: the ``kube_plane`` sweep keeps a
    namespace that existed when the test began, which a previous test's may have (still Terminating)."""
    plane.delete_namespace(NS)


def kubectl_apply_deploy(plane: ControlPlane) -> str:
    """``kubectl apply -f deploy/`` as the admin; its output (an AssertionError with it when it fails)."""
    wait_namespace_gone(plane, NS)
    r = subprocess.run(["kubectl", "--kubeconfig", str(plane.kubeconfig), "apply", "-f", str(DEPLOY)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"kubectl apply -f deploy/ failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def replace_flag(args: list[str], flag: str, value: str | None) -> list[str]:
    """``args`` with ``flag=...`` (or a bare ``flag``) replaced by ``flag=value`` (dropped when None)."""
    out = []
    for a in args:
        if a == flag or a.startswith(flag + "="):
            if value is not None:
                out.append(f"{flag}={value}")
            continue
        out.append(a)
    return out


class Component:
    """A koordfw command run as a local process, stopped by its own pid."""

    def __init__(self, name: str, argv: list[str], log: Path, *, sa: str) -> None:
        self.name, self.argv, self.log_path, self.sa = name, argv, log, sa
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=ROOT, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{NS}:{self.sa}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        return stop_process(self.proc, 20)


def manager_argv(plane: ControlPlane, workdir: Path) -> tuple[str, list[str], int, int]:
    """(ServiceAccount, argv, webhook port, health port) of deploy/manager.yaml's container, adapted."""
    sa, args = container_args("manager.yaml")
    crt, key = plane.serving_cert("koordfw-webhook")
    webhook, health = free_port(), free_port()
    args = replace_flag(args, "--in-cluster", None)
    args = replace_flag(args, "--health-address", f"127.0.0.1:{health}")
    args = replace_flag(args, "--webhook-listen", f"127.0.0.1:{webhook}")
    args = replace_flag(args, "--tls-cert-file", str(crt))
    args = replace_flag(args, "--tls-private-key-file", str(key))
    kubeconfig = plane.service_account_kubeconfig(NS, sa)
    return sa, [*KOORDFW, *args, f"--kubeconfig={kubeconfig}"], webhook, health


def scheduler_argv(plane: ControlPlane, workdir: Path) -> tuple[str, list[str], int]:
    sa, args = container_args("scheduler.yaml")
    profile = workdir / "scheduler-profile.yaml"
    profile.write_text(config_map_key("scheduler.yaml", "profile.yaml"))
    health = free_port()
    args = replace_flag(args, "--in-cluster", None)
    args = replace_flag(args, "--profile", str(profile))
    args = replace_flag(args, "--health-address", f"127.0.0.1:{health}")
    kubeconfig = plane.service_account_kubeconfig(NS, sa)
    return sa, [*KOORDFW, *args, f"--kubeconfig={kubeconfig}"], health


def agent_argv(plane: ControlPlane, node: str) -> tuple[str, list[str]]:
    """deploy/agent.yaml's container for ``node``, on this machine's cgroups, ``--once --dry-run`` (it
    publishes its reports and writes no cgroup)."""
    sa, args = container_args("agent.yaml")
    args = [a.replace("$(NODE_NAME)", node).replace("=/host/sys/fs/", "=/sys/fs/") for a in args]
    args = replace_flag(args, "--in-cluster", None)
    kubeconfig = plane.service_account_kubeconfig(NS, sa)
    return sa, [*KOORDFW, *args, f"--kubeconfig={kubeconfig}", "--cgroup-driver=cgroupfs", "--once", "--dry-run"]


def point_webhooks_at(plane: ControlPlane, port: int) -> list[dict]:
    """deploy/webhook.yaml's configurations, calling the local manager on ``port`` (see the module docstring)."""
    crt, _ = plane.serving_cert("koordfw-webhook")
    out = []
    for d in documents("webhook.yaml"):
        if d["kind"].endswith("WebhookConfiguration"):
            out.append(plane.apply(plane.webhook_at(d, f"https://127.0.0.1:{port}", crt)))
    return out


def healthy(port: int, path: str = "/healthz", tls: bool = False) -> bool:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}", timeout=2,
                                    **({"context": ctx} if tls else {})) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def metric(port: int, name: str, labels: dict[str, str], tls: bool = True) -> float:
    """The value of one Prometheus sample ``name{labels}`` served on ``port``'s /metrics (0 when absent)."""
    import ssl
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"{'https' if tls else 'http'}://127.0.0.1:{port}/metrics", timeout=5,
                                **({"context": ctx} if tls else {})) as r:
        text = r.read().decode()
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def started(c: Component, ok: Any, what: str, timeout: float = 30) -> None:
    def check() -> bool:
        if not c.alive():
            raise AssertionError(f"{c.name} exited ({c.proc.returncode}):\n{c.log()[-3000:]}")
        return bool(ok())
    try:
        wait_until(check, timeout, what, step=0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{c.name} log:\n{c.log()[-3000:]}") from None


def sleep_until_audited(seconds: float = 0.5) -> None:
    """The audit log is written as requests complete (blocking mode): a short pause after the last one."""
    time.sleep(seconds)
