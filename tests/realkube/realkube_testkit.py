"""Helpers for the real-control-plane tests: objects, waiting, and running koordfw's commands as the
ServiceAccounts ``deploy/`` gives them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from koordfw.testing.control_plane import ControlPlane, ControlPlaneError

SCHED = "koordfw-scheduler"


def stop_process(proc: subprocess.Popen, grace: float = 15.0) -> int | None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code (None if it was already reaped)."""
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def pod(name: str, ns: str, cpu: str = "100m", memory: str = "128Mi", *, scheduler: str = SCHED,
        labels: dict | None = None, annotations: dict | None = None, **spec: Any) -> dict:
    s: dict[str, Any] = {"schedulerName": scheduler,
                         "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                         "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {}},
            "spec": s}


def wait_until(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition", step: float = 0.1) -> Any:
    """Poll ``pred`` (synchronous) until it returns a true value; that value, or AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def pods(plane: ControlPlane, ns: str) -> list[dict]:
    return list(plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"])


def bound(plane: ControlPlane, ns: str) -> dict[str, str]:
    """pod name -> node name, for the bound pods of ``ns``."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods(plane, ns) if p["spec"].get("nodeName")}


def apply_pod(plane: ControlPlane, obj: dict) -> None:
    """Create a pod, retrying the 500 a new namespace answers while its ServiceAccount has no token Secret yet."""
    def created() -> bool:
        try:
            plane.apply(obj)
            return True
        except ControlPlaneError as e:
            if "No API token found" not in str(e):
                raise
            return False
    wait_until(created, what=f"pod {obj['metadata']['name']} admitted")
