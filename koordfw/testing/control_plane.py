"""A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver, kube-controller-manager and
(when asked) kube-scheduler, run from binaries on this machine, with simulated nodes as kwok keeps them.

    plane = ControlPlane.start(tmp_dir)            # binaries from scripts/kube-binaries.sh's folder
    plane.apply(manifest)                           # as the admin (a static token in system:masters)
    plane.add_node("n1", cpu="8", memory="32Gi")    # a Node object with a Ready status, no kubelet
    async with plane.client() as client: ...        # a KubeClient as the admin
    plane.service_account_kubeconfig("koordfw-system", "koordfw-manager")  # a kubeconfig with its token
    plane.stop()

What the pieces are:

* **etcd** (Debian's ``etcd-server``) on two free loopback ports, data in the work folder.
* **kube-apiserver** on a free loopback port, TLS with the self-signed serving certificate it makes in
  ``--cert-dir`` (which is also the CA every kubeconfig written here trusts), ``--insecure-port=0``,
  RBAC on (``--authorization-mode=Node,RBAC``), ServiceAccount tokens signed by a key made here, a static
  admin token (``--token-auth-file``, group ``system:masters``), and endpoint routing for webhooks and
  aggregated APIs (``--enable-aggregator-routing``: no kube-proxy runs).
* **kube-controller-manager** as the admin, every controller but ``nodelifecycle`` (no kubelet heartbeats
  here) with ``--use-service-account-credentials``: it creates each namespace's ``default``
  ServiceAccount, token Secrets (v1.20 makes one per ServiceAccount), ReplicaSets' and Jobs' pods.
* **kube-scheduler** when a test asks (:meth:`start_scheduler`), with a configuration it gives.
* **Nodes** are API objects whose status :meth:`add_node` writes (capacity, allocatable, a Ready
  condition) and whose ``node.kubernetes.io/not-ready`` taint (put on by admission) it removes. No
  kubelet runs: bound pods stay Pending with ``spec.nodeName`` set; deleting them needs
  ``gracePeriodSeconds=0`` (:meth:`delete_pods`).

Every process is started in its own session, its output kept in ``<name>.log`` in the work folder, and
stopped by its own pid (SIGTERM, then SIGKILL). A start that fails raises :class:`ControlPlaneError`
naming the binary and quoting its last log lines.

The binaries: ``$KUBEBUILDER_ASSETS`` (envtest's convention) when set, else what
``scripts/kube-binaries.sh`` prints (it fills a cache outside the checkout), else the cache folder.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ControlPlane", "ControlPlaneError", "Sweep", "find_binaries", "free_port"]

ADMIN_TOKEN = "koordfw-test-admin-token"
#: the ServiceAccount issuer the API server signs tokens as
ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.96.0.0/16"


class ControlPlaneError(RuntimeError):
    """A control-plane process did not start, or the API server refused a setup request."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_binaries(repo: Path | None = None) -> Path:
    """The folder with kube-apiserver, kube-controller-manager, kube-scheduler (and etcd, or etcd on PATH):
    ``$KUBEBUILDER_ASSETS``, else what ``scripts/kube-binaries.sh`` prints (run once; it may unpack or build),
    else ``$KOORDFW_KUBE_CACHE``/``~/.cache/koordfw-kube``'s v1.20.2."""
    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env:
        return Path(env)
    repo = repo or Path(__file__).resolve().parents[2]
    script = repo / "scripts" / "kube-binaries.sh"
    if script.exists():
        out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip().splitlines()[-1])
        raise ControlPlaneError(f"{script} failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    cache = Path(os.environ.get("KOORDFW_KUBE_CACHE") or Path.home() / ".cache" / "koordfw-kube") / "v1.20.2"
    return cache


class _Process:
    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name, self.argv, self.log_path = name, list(argv), log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            assert self.proc is not None
            with suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        with suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def failed(self, why: str) -> ControlPlaneError:
        rc = self.proc.poll() if self.proc else None
        state = f"exited with {rc}" if rc is not None else "still running"
        return ControlPlaneError(f"{self.name} ({self.argv[0]}) {why}; it is {state}. "
                                 f"Last lines of {self.log_path}:\n{self.tail()}")


class ControlPlane:
    """See the module docstring. Build with :meth:`start`; everything stops with :meth:`stop` (or ``with``)."""

    def __init__(self, workdir: Path, binaries: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.binaries = binaries or find_binaries()
        self.etcd_port, self.etcd_peer_port, self.port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.token = ADMIN_TOKEN
        self.pki = self.workdir / "pki"
        self.processes: dict[str, _Process] = {}
        self._ssl: ssl.SSLContext | None = None
        self._kinds: dict[tuple[str, str], tuple[str, bool]] = {}
        self._minor: int | None = None

    # -- binaries and files ---------------------------------------------------------------------------
    def _bin(self, name: str) -> str:
        p = self.binaries / name
        if p.exists():
            return str(p)
        found = shutil.which(name)
        if found:
            return found
        raise ControlPlaneError(f"{name}: not in {self.binaries} nor on PATH (scripts/kube-binaries.sh provides it)")

    @property
    def ca_file(self) -> Path:
        """The API server's self-signed serving certificate, which every client here trusts."""
        return self.pki / "apiserver.crt"

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl

    def _write_pki(self) -> None:
        self.pki.mkdir(exist_ok=True)
        key = self.pki / "sa.key"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(self.pki / "sa.pub")],
                           check=True, capture_output=True)
        (self.pki / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
        # every request's user, verb, resource and answer (no bodies), for :meth:`audit`
        (self.pki / "audit-policy.yaml").write_text(yaml.safe_dump(
            {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
             "rules": [{"level": "None", "users": ["admin", "system:apiserver"]},
                       {"level": "None", "userGroups": ["system:nodes"]},
                       {"level": "Metadata"}]}))

    def kubeconfig_text(self, token: str | None = None, user: str = "admin") -> str:
        """A kubeconfig for this API server with ``token`` (the admin's by default)."""
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "koordfw-test",
            "clusters": [{"name": "koordfw-test", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token or self.token}}],
            "contexts": [{"name": "koordfw-test", "context": {"cluster": "koordfw-test", "user": user}}]})

    def write_kubeconfig(self, path: Path | None = None, token: str | None = None, user: str = "admin") -> Path:
        path = path or self.workdir / f"{user}.kubeconfig"
        path.write_text(self.kubeconfig_text(token, user))
        path.chmod(0o600)
        return path

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (written at start)."""
        return self.workdir / "admin.kubeconfig"

    # -- processes ------------------------------------------------------------------------------------
    def _etcd_argv(self) -> list[str]:
        return [self._bin("etcd"), "--name", "koordfw-test", "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
                "--initial-cluster", f"koordfw-test=http://127.0.0.1:{self.etcd_peer_port}",
                "--unsafe-no-fsync", "--quota-backend-bytes", str(4 * 2**30)]

    def apiserver_argv(self, extra: Iterable[str] = ()) -> list[str]:
        return [self._bin("kube-apiserver"), f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1", f"--secure-port={self.port}", f"--cert-dir={self.pki}",
                "--insecure-port=0", f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={self.pki / 'sa.pub'}",
                f"--service-account-signing-key-file={self.pki / 'sa.key'}",
                f"--token-auth-file={self.pki / 'tokens.csv'}", "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--enable-aggregator-routing=true",
                "--allow-privileged=true", "--watch-cache=true", "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000", "--enable-priority-and-fairness=false",
                "--event-ttl=1h", f"--audit-policy-file={self.pki / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}", "--audit-log-mode=blocking", "--v=1", *extra]

    def _controller_manager_argv(self) -> list[str]:
        return [self._bin("kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                f"--service-account-private-key-file={self.pki / 'sa.key'}", f"--root-ca-file={self.ca_file}",
                "--use-service-account-credentials=true", "--controllers=*,-nodelifecycle,-nodeipam,-ttl",
                "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                "--port=0", "--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-replicaset-syncs=10",
                "--v=1"]

    def _spawn(self, name: str, argv: Sequence[str]) -> _Process:
        p = _Process(name, argv, self.workdir / f"{name}.log")
        p.start()
        self.processes[name] = p
        return p

    @classmethod
    def start(cls, workdir: Path, binaries: Path | None = None, *, controller_manager: bool = True,
              timeout: float = 60.0) -> ControlPlane:
        """Start etcd, kube-apiserver and (by default) kube-controller-manager; returns once the API
        server is ready and the ``default`` namespace has its ServiceAccount."""
        plane = cls(workdir, binaries)
        try:
            plane._write_pki()
            etcd = plane._spawn("etcd", plane._etcd_argv())
            plane._wait(lambda: plane._etcd_healthy(), etcd, "did not become healthy", timeout)
            plane.start_apiserver(timeout=timeout)
            plane.write_kubeconfig(plane.kubeconfig)
            if controller_manager:
                plane.start_controller_manager(timeout=timeout)
        except BaseException:
            plane.stop()
            raise
        return plane

    def start_apiserver(self, extra: Iterable[str] = (), timeout: float = 60.0) -> None:
        """(Re)start kube-apiserver on the same port, data and keys; returns once ``/readyz`` answers ok."""
        p = self._spawn("kube-apiserver", self.apiserver_argv(extra))
        self._wait(lambda: self._ready(), p, "did not answer /readyz ok", timeout)

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (a crash: no graceful shutdown)."""
        self.processes["kube-apiserver"].kill(signal.SIGKILL)

    def start_controller_manager(self, timeout: float = 60.0) -> None:
        p = self._spawn("kube-controller-manager", self._controller_manager_argv())
        self._wait(lambda: self._has_default_sa(), p, "did not create the default ServiceAccount", timeout)

    def start_scheduler(self, config: Mapping[str, Any] | str | None = None, *, extra: Iterable[str] = (),
                        name: str = "kube-scheduler", timeout: float = 60.0) -> _Process:
        """Start kube-scheduler with ``config`` (a KubeSchedulerConfiguration, dict or YAML), as the admin
        unless its ``clientConnection.kubeconfig`` names another kubeconfig; ``name`` tells several apart.
        Returns once it answers ``/healthz``."""
        port = free_port()
        if config is None:
            config = {"apiVersion": "kubescheduler.config.k8s.io/v1beta1", "kind": "KubeSchedulerConfiguration"}
        cfg = yaml.safe_load(config) if isinstance(config, str) else dict(config)
        cfg["clientConnection"] = {**(cfg.get("clientConnection") or {})}
        cfg["clientConnection"].setdefault("kubeconfig", str(self.kubeconfig))
        cfg.setdefault("leaderElection", {"leaderElect": False})
        path = self.workdir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        argv = [self._bin("kube-scheduler"), f"--config={path}", f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}", "--bind-address=127.0.0.1",
                f"--secure-port={port}", "--port=0", "--v=1", *extra]
        p = self._spawn(name, argv)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=2) as r:
                    return bool(r.status == 200)
            except (OSError, urllib.error.URLError):
                return False
        self._wait(healthy, p, "did not answer /healthz", timeout)
        return p

    def stop_process(self, name: str) -> None:
        p = self.processes.pop(name, None)
        if p is not None:
            p.stop()

    def stop(self) -> None:
        """Stop every process, newest first, each by its own pid."""
        for name in reversed(list(self.processes)):
            self.processes[name].stop()
        self.processes.clear()

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait(self, ok: Any, proc: _Process, why: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise proc.failed("exited during start")
            if ok():
                return
            time.sleep(0.2)
        raise proc.failed(f"{why} within {timeout:.0f} s")

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                return bool(json.loads(r.read()).get("health") in ("true", True))
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def _ready(self) -> bool:
        if not self.ca_file.exists():
            return False
        try:
            return bool(self.request("GET", "/readyz", raw=True) == "ok")
        except (OSError, ControlPlaneError, urllib.error.URLError, ssl.SSLError):
            return False

    def _has_default_sa(self) -> bool:
        try:
            self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            return True
        except ControlPlaneError:
            return False

    # -- audit -----------------------------------------------------------------------------------------
    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (JSON lines, level Metadata, the admin's own requests left out)."""
        return self.workdir / "audit.log"

    def audit(self, *, user: str | None = None, min_code: int = 0) -> list[dict]:
        """The audit events at stage ResponseComplete (or Panic) so far, of ``user`` (e.g.
        ``system:serviceaccount:koordfw-system:koordfw-manager``) when given, with an answer code of at
        least ``min_code``: ``audit(user=sa, min_code=403)`` lists what RBAC refused it."""
        out = []
        try:
            lines = self.audit_log.read_text(errors="replace").splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") not in ("ResponseComplete", "Panic"):
                continue
            if user is not None and (ev.get("user") or {}).get("username") != user:
                continue
            if int((ev.get("responseStatus") or {}).get("code") or 0) < min_code:
                continue
            out.append(ev)
        return out

    def refused(self, user: str) -> list[str]:
        """``verb uri -> code`` of every request of ``user`` answered 401 or 403."""
        return [f"{e['verb']} {e['requestURI']} -> {e['responseStatus']['code']}"
                for e in self.audit(user=user, min_code=401) if e["responseStatus"]["code"] in (401, 403)]

    # -- etcd -----------------------------------------------------------------------------------------
    def etcd_revision(self) -> int:
        body = json.dumps({"key": base64.b64encode(b"/").decode()}).encode()
        req = urllib.request.Request(f"{self.etcd_url}/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(json.loads(r.read())["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (through its v3 JSON gateway): watches from before it get
        410 Gone once the API server's watch cache no longer holds their resourceVersion. Returns it."""
        rev = self.etcd_revision()
        body = json.dumps({"revision": str(rev), "physical": True}).encode()
        req = urllib.request.Request(f"{self.etcd_url}/v3/kv/compaction", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        return rev

    # -- the API, synchronously, as the admin -----------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, *, params: Mapping[str, str] | None = None,
                content_type: str = "application/json", token: str | None = None, raw: bool = False,
                timeout: float = 30.0) -> Any:
        """One request as the admin (or ``token``); the parsed reply, or :class:`ControlPlaneError` with the
        status and message for a non-2xx answer (``.status`` holds the code)."""
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token or self.token}",
                                              "Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            try:
                msg = json.loads(detail).get("message", detail)
            except ValueError:
                msg = detail
            err = ControlPlaneError(f"{method} {path}: HTTP {e.code}: {msg}")
            err.status = e.code  # type: ignore[attr-defined]
            raise err from None
        if raw:
            return text
        return json.loads(text) if text else None

    def _discovery(self) -> dict[tuple[str, str], tuple[str, bool]]:
        """(apiVersion, kind) -> (path prefix, namespaced), from the server's discovery documents."""
        out: dict[tuple[str, str], tuple[str, bool]] = {}
        core = self.request("GET", "/api/v1")
        for r in core["resources"]:
            if "/" not in r["name"]:
                out[("v1", r["kind"])] = (f"/api/v1|{r['name']}", r["namespaced"])
        for g in self.request("GET", "/apis")["groups"]:
            for v in g["versions"]:
                gv = v["groupVersion"]
                try:
                    doc = self.request("GET", f"/apis/{gv}")
                except ControlPlaneError:
                    continue
                for r in doc["resources"]:
                    if "/" not in r["name"]:
                        out[(gv, r["kind"])] = (f"/apis/{gv}|{r['name']}", r["namespaced"])
        return out

    def path_of(self, obj: Mapping[str, Any], *, name: bool = False) -> str:
        """The collection path (or the object's, ``name=True``) of a manifest, from discovery (re-read when
        the kind is unknown, e.g. a CRD just established)."""
        key = (obj["apiVersion"], obj["kind"])
        if key not in self._kinds:
            self._kinds = self._discovery()
        disc = self._kinds
        if key not in disc:
            raise ControlPlaneError(f"the server does not serve {obj['apiVersion']} {obj['kind']}")
        prefix, namespaced = disc[key]
        base, plural = prefix.split("|")
        meta = obj.get("metadata") or {}
        ns = f"/namespaces/{meta.get('namespace') or 'default'}" if namespaced else ""
        path = f"{base}{ns}/{plural}"
        return f"{path}/{meta['name']}" if name else path

    def apply(self, obj: Mapping[str, Any]) -> Any:
        """Create ``obj``, or replace it (PUT with the current resourceVersion) when it exists; a CRD is
        waited for until Established."""
        try:
            out = self.request("POST", self.path_of(obj), obj)
        except ControlPlaneError as e:
            if getattr(e, "status", 0) != 409:
                raise
            cur = self.request("GET", self.path_of(obj, name=True))
            new = json.loads(json.dumps(obj))
            new.setdefault("metadata", {})["resourceVersion"] = cur["metadata"]["resourceVersion"]
            out = self.request("PUT", self.path_of(obj, name=True), new)
        if obj["kind"] == "CustomResourceDefinition":
            self.wait_established(obj["metadata"]["name"])
        return out

    def apply_file(self, path: Path) -> list[Any]:
        """Every document of a YAML file, in order (CRDs established before the next document)."""
        return [self.apply(d) for d in yaml.safe_load_all(path.read_text()) if d]

    def wait_established(self, crd: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            obj = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
            conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                self._kinds.clear()
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"CustomResourceDefinition {crd} not Established within {timeout:.0f} s")

    def delete(self, obj: Mapping[str, Any], *, grace: int | None = None) -> None:
        params = {"gracePeriodSeconds": str(grace)} if grace is not None else None
        with suppress(ControlPlaneError):
            self.request("DELETE", self.path_of(obj, name=True), params=params)

    # -- nodes, namespaces, pods ------------------------------------------------------------------------
    def add_node(self, name: str, *, cpu: str = "8", memory: str = "32Gi", pods: str = "110",
                 labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
                 extra: Mapping[str, str] | None = None, taints: Sequence[Mapping[str, str]] = ()) -> dict:
        """A simulated node: the Node object, then its status (capacity = allocatable, Ready, its
        addresses) as a kubelet would write it, and the admission-set ``not-ready`` taint removed."""
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  **(labels or {})}
        self.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                               "metadata": {"name": name, "labels": labels,
                                                            "annotations": dict(annotations or {})},
                                               "spec": {"taints": list(taints)}})
        return self.set_node_status(name, cpu=cpu, memory=memory, pods=pods, extra=extra, taints=taints)

    def set_node_status(self, name: str, *, cpu: str = "8", memory: str = "32Gi", pods: str = "110",
                        extra: Mapping[str, str] | None = None, taints: Sequence[Mapping[str, str]] = ()) -> dict:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        res = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
        status = {"capacity": res, "allocatable": res,
                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "message": "simulated node", "lastHeartbeatTime": now,
                                  "lastTransitionTime": now}],
                  "addresses": [{"type": "Hostname", "address": name}],
                  "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.20.2",
                               "containerRuntimeVersion": "simulated", "kernelVersion": "", "osImage": "",
                               "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}}
        self.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                     content_type="application/merge-patch+json")
        return dict(self.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": list(taints) or None}},
                                 content_type="application/merge-patch+json"))

    def delete_nodes(self, names: Iterable[str]) -> None:
        for n in names:
            with suppress(ControlPlaneError):
                self.request("DELETE", f"/api/v1/nodes/{n}")

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """A namespace; returns once the controller-manager has given it its ``default`` ServiceAccount
        (pods are refused without it). A namespace of that name still terminating (an earlier test's) is
        waited for until it is gone."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                old = self.request("GET", f"/api/v1/namespaces/{name}")
            except ControlPlaneError:
                break
            if not old["metadata"].get("deletionTimestamp"):
                break
            time.sleep(0.2)
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}})
        # before 1.24 the ServiceAccount admission plugin refuses pods ("No API token found for service
        # account") until the tokens controller has made the account's token Secret
        needs_secret = self.server_minor() < 24
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                sa = self.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
                if sa.get("secrets") or not needs_secret:
                    return
            except ControlPlaneError:
                pass
            time.sleep(0.1)
        raise ControlPlaneError(f"namespace {name}: no default ServiceAccount (with its token) within 30 s")

    def server_minor(self) -> int:
        """The API server's minor version (20 for v1.20.2), from ``/version``."""
        if self._minor is None:
            v = self.request("GET", "/version")
            self._minor = int("".join(ch for ch in str(v.get("minor", "0")) if ch.isdigit()) or 0)
        return self._minor

    def delete_pods(self, namespace: str) -> None:
        """Delete every pod of ``namespace`` at once (grace 0: no kubelet will confirm a graceful stop)."""
        pods = self.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        for p in pods:
            with suppress(ControlPlaneError):
                self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}",
                             params={"gracePeriodSeconds": "0"})

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace's pods (grace 0) and then the namespace (the namespace controller empties it)."""
        with suppress(ControlPlaneError):
            self.delete_pods(name)
        with suppress(ControlPlaneError):
            self.request("DELETE", f"/api/v1/namespaces/{name}")

    # -- what a pod would have: serving certificates, webhooks on loopback, agents' reports ---------------
    def serving_cert(self, name: str, ip: str = "127.0.0.1") -> tuple[Path, Path]:
        """A self-signed serving certificate and key for ``ip`` (PEM files in the work folder), for a
        webhook server the API server calls; the certificate is its own CA (the ``caBundle``)."""
        crt, key = self.workdir / f"{name}.crt", self.workdir / f"{name}.key"
        if not crt.exists():
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                            "-subj", f"/CN={ip}", "-addext", f"subjectAltName=IP:{ip}",
                            "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
        return crt, key

    @staticmethod
    def webhook_at(config: Mapping[str, Any], base_url: str, ca_file: Path) -> dict:
        """A Mutating/ValidatingWebhookConfiguration whose webhooks call ``base_url`` (e.g.
        ``https://127.0.0.1:9443``) with their service's path instead of the in-cluster Service (no
        kube-proxy routes Services here), trusting ``ca_file``."""
        out = json.loads(json.dumps(config))
        ca = base64.b64encode(ca_file.read_bytes()).decode()
        for wh in out.get("webhooks") or []:
            svc = (wh.get("clientConfig") or {}).get("service") or {}
            wh["clientConfig"] = {"url": base_url.rstrip("/") + (svc.get("path") or "/"), "caBundle": ca}
        return out

    def report_node_metric(self, node: str, *, cpu: str, memory: str, system_cpu: str = "0",
                           system_memory: str = "0", pods: Sequence[Mapping[str, Any]] = ()) -> None:
        """Write ``node``'s NodeMetric (slo.koordinator.sh/v1alpha1; the CRD must be installed) as the node
        agent reports it, stamped now: node usage, system usage and ``pods``' usage (``{"namespace",
        "name", "cpu", "memory"}``)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"updateTime": now,
                  "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}},
                                 "systemUsage": {"resources": {"cpu": system_cpu, "memory": system_memory}}},
                  "podsMetric": [{"namespace": p["namespace"], "name": p["name"],
                                  "podUsage": {"resources": {"cpu": p["cpu"], "memory": p["memory"]}}}
                                 for p in pods]}
        base = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
        try:
            cur = self.request("GET", f"{base}/{node}")
        except ControlPlaneError:
            cur = self.request("POST", base, {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                                              "metadata": {"name": node},
                                              "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}}})
        cur["status"] = status
        self.request("PUT", f"{base}/{node}/status", cur)

    # -- ServiceAccounts -------------------------------------------------------------------------------
    def service_account_token(self, namespace: str, name: str, timeout: float = 30.0) -> str:
        """The token of ``namespace/name``'s token Secret (the controller-manager's tokens controller makes
        one per ServiceAccount on v1.20; on releases that no longer do, one is requested through the
        TokenRequest API)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                sa = self.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
            except ControlPlaneError:
                time.sleep(0.1)
                continue
            for ref in sa.get("secrets") or []:
                try:
                    sec = self.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")
                except ControlPlaneError:
                    continue
                tok = (sec.get("data") or {}).get("token")
                if tok:
                    return base64.b64decode(tok).decode()
            time.sleep(0.1)
        # newer releases: no Secret; ask for a token (an hour)
        req = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": 3600}})
        return str(req["status"]["token"])

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path | None = None) -> Path:
        """A kubeconfig that authenticates as ``system:serviceaccount:<namespace>:<name>``."""
        return self.write_kubeconfig(path or self.workdir / f"{namespace}-{name}.kubeconfig",
                                     self.service_account_token(namespace, name), user=f"{namespace}-{name}")

    def client(self, token: str | None = None, **kw: Any) -> Any:
        """A :class:`koordfw.engines.kube.client.KubeClient` of this API server (the admin's token by
        default; no client-side rate limit unless ``qps`` is given)."""
        from ..engines.kube.client import KubeClient

        kw.setdefault("qps", 0)
        return KubeClient(self.url, token=token or self.token, ssl_context=self.ssl_context(), **kw)

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """The environment for a command that should talk to this API server (``KUBECONFIG``)."""
        return {**os.environ, "KUBECONFIG": str(kubeconfig or self.kubeconfig)}


#: cluster-scoped collections a test's leftovers are removed from (namespaces go with their objects)
_SWEPT = ("/api/v1/nodes", "/api/v1/namespaces",
          "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
          "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")


class Sweep:
    """What a test adds to a shared control plane, removed after it: the names of nodes, namespaces and
    webhook configurations present at the start are remembered; :meth:`clean` deletes every other one (a
    namespace's pods first, with grace 0)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.before = {c: self._names(c) for c in _SWEPT}

    def _names(self, collection: str) -> set[str]:
        """The names in ``collection``, those being deleted left out (a test may recreate one: it is then
        the test's to remove)."""
        try:
            return {o["metadata"]["name"] for o in self.plane.request("GET", collection)["items"]
                    if not o["metadata"].get("deletionTimestamp")}
        except ControlPlaneError:
            return set()

    def clean(self) -> None:
        for c in _SWEPT:
            for name in sorted(self._names(c) - self.before[c]):
                if c.endswith("/namespaces"):
                    self.plane.delete_namespace(name)
                else:
                    with suppress(ControlPlaneError):
                        self.plane.request("DELETE", f"{c}/{name}")
