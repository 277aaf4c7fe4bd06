"""The stock kube-scheduler v1.20.2 with ``deploy/extender``'s configuration (its ``v1beta1`` variant, the
version a 1.20 scheduler reads) and ``koordfw extender`` with the args ``extender.yaml`` gives it, both as
the ServiceAccount that manifest names, under its RBAC, on a real API server: pods are bound through
koordfw's filter, prioritize and bind, and koordfw-only rules show in the result (load_aware keeps pods off
a node at 90 % CPU use; gpu_share's ``device-allocated`` annotation is written before the Binding).

And ``kubectl apply -f deploy/extender/``, which ``extender.yaml`` tells users to run, is accepted whole."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import yaml
from realkube_testkit import bound, pod, pods, stop_process, wait_until

from koordfw.testing.control_plane import ControlPlane, ControlPlaneError, free_port

REPO = Path(__file__).resolve().parents[2]
EXTENDER_DIR = REPO / "deploy" / "extender"
MANIFEST = EXTENDER_DIR / "extender.yaml"
NS_SYSTEM = "koordfw-system"
SA = "koordfw-extended-scheduler"
USER = f"system:serviceaccount:{NS_SYSTEM}:{SA}"
PROFILE = "koordfw-extended-scheduler"
NS = "ext-work"
ANN = "scheduling.koordinator.sh/device-allocated"
GPU = {"koordinator.sh/gpu": "200", "koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory-ratio": "200",
       "koordinator.sh/gpu-memory": "32Gi"}


def manifest_docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def config_map() -> dict:
    return next(d for d in manifest_docs() if d["kind"] == "ConfigMap")


def extender_args() -> list[str]:
    """The koordfw-extender container's args in extender.yaml."""
    dep = next(d for d in manifest_docs() if d["kind"] == "Deployment")
    c = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "koordfw-extender")
    return list(c["args"])


def kubectl(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", f"--kubeconfig={plane.kubeconfig}", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_scheduler_configuration_is_not_for_kubectl(kube_plane):
    """Why deploy/extender/ keeps its configuration files in config/ (`kubectl apply -f DIR` does not read
    subfolders): kubectl refuses a KubeSchedulerConfiguration, and with it the whole apply."""
    bad = kubectl(kube_plane, "apply", "--dry-run=server", "-f", str(EXTENDER_DIR / "config") + "/")
    assert bad.returncode != 0 and 'no matches for kind "KubeSchedulerConfiguration"' in bad.stderr, bad.stderr


class Extender:
    """``koordfw extender`` as a subprocess, with extender.yaml's args (``--in-cluster`` replaced by the
    ServiceAccount's kubeconfig, addresses by free loopback ports, the profile from the ConfigMap)."""

    def __init__(self, workdir: Path, kubeconfig: Path) -> None:
        self.port, self.health_port = free_port(), free_port()
        profile = workdir / "profile.yaml"
        profile.write_text(config_map()["data"]["profile.yaml"])
        argv = []
        for a in extender_args():
            if a.startswith("--listen="):
                a = f"--listen=127.0.0.1:{self.port}"
            elif a.startswith("--health-address="):
                a = f"--health-address=127.0.0.1:{self.health_port}"
            elif a == "--in-cluster":
                a = f"--kubeconfig={kubeconfig}"
            elif a.startswith("--profile="):
                a = f"--profile={profile}"
            argv.append(a)
        self.argv = [sys.executable, "-m", "koordfw", *argv]
        self.log = workdir / "koordfw-extender.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"koordfw extender exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def wait(self, pred: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        """:func:`wait_until`, failing with this extender's and kube-scheduler's last log lines."""
        try:
            return wait_until(pred, timeout=timeout, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\nextender log:\n{self.tail()}") from None

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def stop(self) -> None:
        stop_process(self.proc, 10)


def scheduler_config(extender_port: int, kubeconfig: Path) -> dict:
    """deploy/extender's v1beta1 configuration (what kube-scheduler 1.19-1.22 reads) as shipped, pointed at
    this extender's port and run as the ServiceAccount."""
    cfg = yaml.safe_load(config_map()["data"]["kube-scheduler-config-v1beta1.yaml"])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    [ext] = cfg["extenders"]
    ext["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
    cfg["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    return cfg


def delete(plane: ControlPlane, obj: dict) -> None:
    with suppress(ControlPlaneError):
        plane.request("DELETE", plane.path_of(obj, name=True))


@pytest.fixture(scope="module")
def extended(kube_control_plane: ControlPlane, tmp_path_factory) -> Iterator[tuple[ControlPlane, Extender]]:
    """extender.yaml applied with kubectl, CRDs for NodeMetric and Device, three nodes (one hot, one with
    two GPUs described by a Device), the extender and kube-scheduler running as the ServiceAccount."""
    plane = kube_control_plane
    workdir = tmp_path_factory.mktemp("extender")
    namespaces = {n["metadata"]["name"] for n in plane.request("GET", "/api/v1/namespaces")["items"]}
    for crd in ("00-crd-nodemetric.yaml", "00-crd-device.yaml"):
        plane.apply_file(REPO / "deploy" / crd)
    # as extender.yaml tells users to (a server-side dry run cannot show it: the namespaced objects' namespace
    # does not exist yet)
    out = kubectl(plane, "apply", "-f", str(EXTENDER_DIR) + "/")
    assert out.returncode == 0, out.stderr
    applied = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(applied) == len(manifest_docs()), out.stdout
    ext: Extender | None = None
    nodes = ("ext-hot", "ext-cool", "ext-gpu")
    try:
        kc = plane.service_account_kubeconfig(NS_SYSTEM, SA, workdir / "sa.kubeconfig")
        plane.add_node("ext-hot", cpu="32", memory="64Gi")
        plane.add_node("ext-cool", cpu="8", memory="32Gi")
        plane.add_node("ext-gpu", cpu="8", memory="32Gi", extra=GPU)
        plane.report_node_metric("ext-hot", cpu="29", memory="8Gi")  # 90 % of 32 cores
        plane.report_node_metric("ext-cool", cpu="1", memory="4Gi")
        plane.report_node_metric("ext-gpu", cpu="1", memory="4Gi")
        dev = {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100",
               "koordinator.sh/gpu-memory": "16Gi"}
        plane.apply({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
                     "metadata": {"name": "ext-gpu"},
                     "spec": {"devices": [{"type": "gpu", "minor": m, "health": True, "resources": dev}
                                          for m in (0, 1)]}})
        plane.create_namespace(NS)
        ext = Extender(workdir, kc)
        wait_until(ext.ready, timeout=30, what=f"the extender's /readyz ({ext.log})")
        plane.start_scheduler(scheduler_config(ext.port, kc), name="ext-kube-scheduler",
                              extra=[f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}"])
        yield plane, ext
    finally:
        plane.stop_process("ext-kube-scheduler")
        if ext is not None:
            ext.stop()
        plane.delete_namespace(NS)
        plane.delete_nodes(nodes)
        for n in nodes:
            delete(plane, {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": n}})
        delete(plane, {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
                       "metadata": {"name": "ext-gpu"}})
        for d in reversed(manifest_docs()):
            if d["kind"] == "Namespace" and d["metadata"]["name"] in namespaces:
                continue  # there before: other tests' (deploy/ makes it too)
            delete(plane, d)


def events(plane: ControlPlane, ns: str) -> list[dict]:
    return list(plane.request("GET", f"/api/v1/namespaces/{ns}/events")["items"])


def test_kube_scheduler_binds_through_the_extender(extended):
    plane, ext = extended
    for i in range(6):
        plane.apply(pod(f"p{i}", NS, cpu="500m", scheduler=PROFILE))
    req = {"cpu": "1", "memory": "1Gi", "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
    gpu = pod("gpu", NS, scheduler=PROFILE)
    gpu["spec"]["containers"][0]["resources"] = {"requests": req, "limits": req}
    plane.apply(gpu)
    placed = ext.wait(lambda: b if len(b := bound(plane, NS)) == 7 else None, "7 pods bound")
    # load_aware: kube-scheduler alone would prefer the emptiest node, ext-hot (32 cores, nothing requested)
    assert "ext-hot" not in placed.values(), placed
    assert placed["gpu"] == "ext-gpu"
    # gpu_share: the extender's bind verb wrote Koordinator's annotation before posting the Binding
    g = plane.request("GET", f"/api/v1/namespaces/{NS}/pods/gpu")
    assert json.loads(g["metadata"]["annotations"][ANN]) == {"gpu": [{"minor": 0, "resources": {
        "koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "8Gi",
        "koordinator.sh/gpu-memory-ratio": "50"}}]}
    # kube-scheduler reports each binding it made through the extender as its own
    wait_until(lambda: {e["involvedObject"]["name"] for e in events(plane, NS) if e["reason"] == "Scheduled"}
               >= set(placed), what="a Scheduled event per pod")
    assert all(p["spec"]["nodeName"] for p in pods(plane, NS))


def test_a_pod_only_the_hot_node_could_take_stays_pending_with_load_awares_reason(extended):
    plane, ext = extended
    plane.apply(pod("pinned", NS, cpu="500m", scheduler=PROFILE, nodeSelector={"kubernetes.io/hostname": "ext-hot"}))

    def failed() -> str | None:
        msgs = [e["message"] for e in events(plane, NS)
                if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "pinned"]
        return msgs[-1] if msgs else None

    msg = ext.wait(failed, "a FailedScheduling event")
    assert "cpu usage exceed threshold" in msg, msg
    assert "nodeName" not in plane.request("GET", f"/api/v1/namespaces/{NS}/pods/pinned")["spec"]


def test_the_deployment_pod_is_admitted(extended):
    """The real controller-manager creates extender.yaml's pod (ServiceAccount, system-cluster-critical
    priority outside kube-system, the ConfigMap volume): admission accepts it."""
    plane, _ = extended
    made = wait_until(lambda: pods(plane, NS_SYSTEM) and [p for p in pods(plane, NS_SYSTEM)
                                                           if p["metadata"]["name"].startswith(SA)],
                      timeout=30, what="the Deployment's pod")
    assert made[0]["spec"]["serviceAccountName"] == SA


def test_nothing_the_service_account_asked_was_refused(extended):
    """Runs last in this module: kube-scheduler and the extender, both as the ServiceAccount, have listed,
    watched, bound, patched and written events by now; RBAC refused none of it."""
    plane, ext = extended
    time.sleep(1.0)  # the audit log is written as requests complete
    assert plane.refused(USER) == []
    assert plane.audit(user=USER), "the ServiceAccount made no request: the audit log would prove nothing"
    assert "koordfw" in ext.metrics()
