"""Faults against a real control plane (issue #30, point 6): kube-apiserver killed (-9) and restarted
mid-flow, etcd compacted so watches get 410, a ServiceAccount's token Secret deleted and recreated, and a
pod deleted and recreated under the same name during its binding cycle.

In each: nothing lost, nothing bound twice (kube-apiserver's audit log holds every ``create
pods/binding`` of the component's ServiceAccount with its answer), every pod bound in the end, and each
component's ``/healthz`` honest meanwhile (500 only once the API has been unreachable for longer than
``--unhealthy-after-seconds``, 200 again once it answers).

These tests kill and restart the API server, so they run on a PRIVATE control plane (module-scoped), never
on the session's shared one.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import yaml
from realkube_testkit import bound, pod, pods, stop_process, wait_until

from koordfw import hookimpl
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.testing.control_plane import ControlPlane, free_port

KOORDFW = str(Path(sys.executable).with_name("koordfw"))
SYSTEM = "flt-system"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNHEALTHY_AFTER = 3.0


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own: these tests kill its API server."""
    p = ControlPlane.start(tmp_path_factory.mktemp("flt-plane"))
    try:
        for crd in sorted(DEPLOY.glob("00-crd-*.yaml")):
            p.apply_file(crd)
        p.create_namespace(SYSTEM)
        yield p
    finally:
        p.stop()


def service_account(plane: ControlPlane, name: str) -> str:
    """A ServiceAccount in flt-system bound to cluster-admin (the faults, not RBAC, are under test here);
    its user name."""
    plane.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": SYSTEM}})
    plane.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": f"{SYSTEM}-{name}"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SYSTEM}]})
    return f"system:serviceaccount:{SYSTEM}:{name}"


def token_file_kubeconfig(plane: ControlPlane, token_file: Path, path: Path) -> Path:
    """A kubeconfig whose user reads its token from ``token_file`` (as the kubelet's projected token)."""
    cfg = yaml.safe_load(plane.kubeconfig_text())
    cfg["users"] = [{"name": "admin", "user": {"tokenFile": str(token_file)}}]
    path.write_text(yaml.safe_dump(cfg))
    return path


def healthz(port: int) -> tuple[int, dict]:
    """``/healthz``'s status and body; (0, {}) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    except (OSError, ValueError):
        return 0, {}


class Component:
    """``koordfw scheduler`` or ``koordfw manager`` as a subprocess, stopped by its own pid."""

    def __init__(self, mode: str, kubeconfig: Path, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.log = log
        argv = [KOORDFW, "--log-level", "info", mode, "--kubeconfig", str(kubeconfig),
                "--health-address", f"127.0.0.1:{self.port}", "--unhealthy-after-seconds", str(UNHEALTHY_AFTER),
                "--kube-api-qps", "0", *extra]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        try:
            wait_until(lambda: self.health()[0] == 200 and self.health()[1].get("synced"), 60,
                       f"{mode}'s /healthz to answer ok")
        except AssertionError:
            self.stop()
            raise AssertionError(f"{mode} did not start: {self.tail()}") from None

    def health(self) -> tuple[int, dict]:
        assert self.proc.poll() is None, f"the component exited: {self.tail()}"
        return healthz(self.port)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def stop(self) -> None:
        stop_process(self.proc, 15)


def bindings(plane: ControlPlane, user: str, ns: str) -> dict[str, list[int]]:
    """pod name -> the answer codes of ``user``'s ``create pods/binding`` requests for it, in order."""
    out: dict[str, list[int]] = {}
    for e in plane.audit(user=user):
        ref = e.get("objectRef") or {}
        if e.get("verb") == "create" and ref.get("subresource") == "binding" and ref.get("namespace") == ns:
            out.setdefault(ref["name"], []).append(int(e["responseStatus"]["code"]))
    return out


def assert_bound_once(plane: ControlPlane, user: str, ns: str, n: int) -> dict[str, str]:
    """Every one of the ``n`` pods of ``ns`` bound, and none bound twice (at most one binding answered 201
    per pod; a binding whose reply was lost in a crash is retried and answered 409, which the binder
    reconciles)."""
    placed = bound(plane, ns)
    assert len(placed) == n, f"{n - len(placed)} pods not bound"
    twice = {name: codes for name, codes in bindings(plane, user, ns).items() if codes.count(201) > 1}
    assert not twice, f"bound twice: {twice}"
    return placed


def audit_time(event: dict) -> float:
    """When the API server received an audited request (wall clock seconds)."""
    return datetime.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def create_pods(plane: ControlPlane, ns: str, names: list[str], **kw) -> None:
    for name in names:
        plane.apply(pod(name, ns, **kw))


def test_apiserver_killed_and_restarted_mid_flow(plane: ControlPlane, tmp_path: Path) -> None:
    """kube-apiserver SIGKILLed while pods are being created and bound, then restarted on the same port
    and data: the scheduler and manager ride it out, /healthz answers 500 only past
    --unhealthy-after-seconds and 200 again after the restart, every pod is bound exactly once."""
    user = service_account(plane, "flt-kill-sched")
    mgr_user = service_account(plane, "flt-kill-mgr")
    kc = plane.service_account_kubeconfig(SYSTEM, "flt-kill-sched", tmp_path / "sched.kubeconfig")
    mkc = plane.service_account_kubeconfig(SYSTEM, "flt-kill-mgr", tmp_path / "mgr.kubeconfig")
    for i in range(3):
        plane.add_node(f"flt-kill-n{i}", cpu="8", memory="16Gi")
        plane.report_node_metric(f"flt-kill-n{i}", cpu="1", memory="1Gi")
    plane.create_namespace("flt-kill")
    sched = Component("scheduler", kc, tmp_path / "scheduler.log")
    mgr = Component("manager", mkc, tmp_path / "manager.log")
    try:
        create_pods(plane, "flt-kill", [f"a{i}" for i in range(15)])
        plane.kill_apiserver()
        killed = time.monotonic()
        # honest meanwhile: still ok within --unhealthy-after-seconds of the first failed round trip ...
        time.sleep(1.0)
        assert sched.health()[0] == 200 and mgr.health()[0] == 200
        # ... and 500 past it, naming why
        wait_until(lambda: sched.health()[0] == 500 and mgr.health()[0] == 500, 15, "/healthz to fail")
        assert time.monotonic() - killed >= UNHEALTHY_AFTER - 0.2
        code, body = sched.health()
        assert code == 500 and "unreachable" in body["reason"], body
        absent: set[str] = set()

        def recovered() -> bool:
            (code, body), (mcode, mbody) = sched.health(), mgr.health()
            absent.update(body.get("absentKinds") or [], mbody.get("absentKinds") or [])
            return code == 200 and mcode == 200 and not body.get("apiUnreachableForSeconds")

        plane.start_apiserver()
        ready = time.time()
        wait_until(recovered, 30, "/healthz to recover")
        for _ in range(20):  # the kinds served before the crash stay served through the restart
            recovered()
            time.sleep(0.1)
        assert not absent & {"NodeMetric", "Device", "NodeSLO", "Reservation", "PodGroup"}, absent
        create_pods(plane, "flt-kill", [f"b{i}" for i in range(10)])
        wait_until(lambda: len(bound(plane, "flt-kill")) == 25, 30, "every pod bound")
        time.sleep(0.5)
        assert_bound_once(plane, user, "flt-kill", 25)
        # a restarting kube-apiserver listens before its RBAC caches are filled and answers 403 until then
        # (the binder and the reflectors retry those); nothing is refused once it is ready
        late = [f"{e['verb']} {e['requestURI']} -> {e['responseStatus']['code']}"
                for u in (user, mgr_user) for e in plane.audit(user=u, min_code=401) if audit_time(e) > ready]
        assert not late, late
        assert sched.health()[0] == 200 and mgr.health()[0] == 200
    finally:
        sched.stop()
        mgr.stop()
    assert sched.proc.returncode == 0 and mgr.proc.returncode == 0, sched.tail() + mgr.tail()


class SlowPreBind:
    """A pre_bind plugin that holds pods labelled ``slow`` for ``seconds`` (a device or volume plugin
    waiting on the API), so the test can act during their binding cycle."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.entered: list[str] = []

    @hookimpl
    async def pre_bind(self, pod, node):
        if pod.labels.get("slow"):
            self.entered.append(pod.uid)
            await anyio.sleep(self.seconds)
        return None


def compact(plane: ControlPlane) -> None:
    """Compact etcd at its current revision (a revision compacted already answers 400: nothing new)."""
    with contextlib.suppress(urllib.error.HTTPError):
        plane.compact_etcd()


def engine_for(plane: ControlPlane, token: str, **kw) -> tuple[KubeSchedulerEngine, object]:
    client = plane.client(token=token)
    return KubeSchedulerEngine(build_registry(None, autoload=False, plugins=kw.pop("plugins", None)), client,
                               **kw), client


async def test_etcd_compacted_watches_get_410_and_relist(plane: ControlPlane) -> None:
    """With the API server's watch cache off, watches are etcd's: after a compaction a watch resumed from
    an older resourceVersion gets 410 Gone, the reflector re-lists and the cache equals the server's
    state again; pods created and deleted throughout are all accounted, each bound once."""
    user = service_account(plane, "flt-compact-sched")
    token = plane.service_account_token(SYSTEM, "flt-compact-sched")
    plane.kill_apiserver()
    plane.start_apiserver(extra=["--watch-cache=false"])
    try:
        for i in range(2):
            plane.add_node(f"flt-compact-n{i}", cpu="16", memory="32Gi")
        plane.create_namespace("flt-compact")
        engine, client = engine_for(plane, token, watch_timeout=1, objects={})
        async with client, anyio.create_task_group() as tg:
            tg.start_soon(engine.run)
            with anyio.fail_after(20):
                await engine.started.wait()
            stop = threading.Event()

            def churn() -> None:
                """Pods created (and every third deleted), config maps written (etcd's revision moves past
                the pods' last one), etcd compacted, while the watches roll over every second."""
                i = 0
                while not stop.is_set() and i < 30:
                    plane.apply(pod(f"c{i}", "flt-compact"))
                    if i % 3 == 2:
                        plane.request("DELETE", f"/api/v1/namespaces/flt-compact/pods/c{i - 1}",
                                      params={"gracePeriodSeconds": "0"})
                    plane.apply({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": f"churn{i % 3}", "namespace": "flt-compact"},
                                 "data": {"i": str(i)}})
                    if i % 5 == 4:
                        compact(plane)
                    i += 1
                    time.sleep(0.15)
                compact(plane)

            pods_refl = next(r for r in engine.reflectors if r.name == "pods")
            lists0 = pods_refl.relists
            await anyio.to_thread.run_sync(churn)
            with anyio.fail_after(20):
                while len(await anyio.to_thread.run_sync(bound, plane, "flt-compact")) < 20:
                    await anyio.sleep(0.2)
            # every pod is bound, so the pods watch sees no more events: move etcd's revision past its last
            # one and compact there; the watch, resumed from that older resourceVersion within a second,
            # gets 410 and the reflector re-lists (during the churn a binding after a compaction could
            # keep the pods watch ahead of every compaction)
            relists = pods_refl.relists
            await anyio.sleep(0.5)
            # two writes: a watch resumed from resourceVersion X starts at revision X + 1, so one write
            # (revision X + 1) compacted at would still be watchable, and no 410 would come
            for n in range(2):
                plane.apply({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "churn-last", "namespace": "flt-compact"},
                             "data": {"n": str(n)}})
            compact(plane)
            with anyio.fail_after(15):
                while pods_refl.relists == relists:
                    await anyio.sleep(0.1)
            server = {p["metadata"]["uid"] for p in await anyio.to_thread.run_sync(pods, plane, "flt-compact")}
            with anyio.fail_after(10):
                while {u for u, e in engine.cluster.pods.items() if e.pod.namespace == "flt-compact"} != server:
                    await anyio.sleep(0.1)
            assert engine.health()["synced"] and engine.unhealthy_reason() is None
            engine.stop()
        assert pods_refl.relists > lists0
        assert_bound_once(plane, user, "flt-compact", 20)
    finally:
        plane.kill_apiserver()
        plane.start_apiserver()


def test_token_secret_deleted_and_recreated(plane: ControlPlane, tmp_path: Path) -> None:
    """The scheduler's ServiceAccount token Secret is deleted: the old token is refused (401), the
    controller-manager's tokens controller makes a new Secret, and the test rewrites the kubeconfig's
    ``tokenFile`` as the kubelet rewrites a projected token; the scheduler re-reads it after a 401 and
    binds every pod created meanwhile, once. /healthz fails while every request is refused and recovers."""
    user = service_account(plane, "flt-rot-sched")
    old = plane.service_account_token(SYSTEM, "flt-rot-sched")
    token_file = tmp_path / "token"
    token_file.write_text(old)
    kc = token_file_kubeconfig(plane, token_file, tmp_path / "sched.kubeconfig")
    plane.add_node("flt-rot-n0", cpu="8", memory="16Gi")
    plane.create_namespace("flt-rot")
    sched = Component("scheduler", kc, tmp_path / "scheduler.log")
    try:
        create_pods(plane, "flt-rot", [f"a{i}" for i in range(3)])
        wait_until(lambda: len(bound(plane, "flt-rot")) == 3, 20, "the first pods bound")
        sa = plane.request("GET", f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/flt-rot-sched")
        secret = sa["secrets"][0]["name"]
        plane.request("DELETE", f"/api/v1/namespaces/{SYSTEM}/secrets/{secret}")
        new = wait_until(lambda: (t := plane.service_account_token(SYSTEM, "flt-rot-sched", timeout=1)) != old and t,
                         20, "a new token Secret")
        # the old token no longer works
        wait_until(lambda: _status_with(plane, old) == 401, 10, "the old token to be refused")
        create_pods(plane, "flt-rot", [f"b{i}" for i in range(5)])
        refused = time.monotonic()
        # the open watches (authenticated when they opened) keep delivering events: they do not make the
        # process healthy while every request it makes is refused
        wait_until(lambda: sched.health()[0] == 500, 15, "/healthz to fail while every request is refused")
        code, body = sched.health()
        assert "401" in body["reason"] and time.monotonic() - refused < 10, body
        token_file.write_text(new)
        wait_until(lambda: len(bound(plane, "flt-rot")) == 8, 30, "every pod bound with the new token")
        wait_until(lambda: sched.health()[0] == 200, 20, "/healthz to recover")
        time.sleep(0.5)
        assert_bound_once(plane, user, "flt-rot", 8)
    finally:
        sched.stop()
    assert sched.proc.returncode == 0, sched.tail()


def _status_with(plane: ControlPlane, token: str) -> int:
    try:
        plane.request("GET", "/api/v1/namespaces/flt-rot/pods", token=token)
        return 200
    except Exception as e:  # noqa: BLE001 - the status is the point
        return int(getattr(e, "status", 0))


async def test_pod_recreated_under_the_same_name_during_its_binding_cycle(plane: ControlPlane) -> None:
    """A pod is deleted and recreated under the same name while a slow pre_bind holds its binding cycle:
    the old pod's Binding carries its uid and is refused; the binder drops it; the new pod is scheduled
    and bound, once."""
    user = service_account(plane, "flt-re-sched")
    token = plane.service_account_token(SYSTEM, "flt-re-sched")
    plane.add_node("flt-re-n0", cpu="8", memory="16Gi")
    plane.create_namespace("flt-re")
    slow = SlowPreBind(2.0)
    engine, client = engine_for(plane, token, plugins={"flt_slow_pre_bind": slow}, objects={})
    async with client, anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(20):
            await engine.started.wait()
        for i in range(4):
            await anyio.to_thread.run_sync(plane.apply, pod(f"p{i}", "flt-re", labels={"slow": "1"}))
        with anyio.fail_after(10):
            while len(slow.entered) < 4:
                await anyio.sleep(0.05)
        old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await anyio.to_thread.run_sync(pods, plane, "flt-re")}
        for i in range(4):
            await anyio.to_thread.run_sync(lambda i=i: plane.request(
                "DELETE", f"/api/v1/namespaces/flt-re/pods/p{i}", params={"gracePeriodSeconds": "0"}))
            # half come back held again, half go straight through
            await anyio.to_thread.run_sync(plane.apply, pod(f"p{i}", "flt-re", labels={"slow": "1"} if i % 2 else {}))
        with anyio.fail_after(25):
            while len(await anyio.to_thread.run_sync(bound, plane, "flt-re")) < 4:
                await anyio.sleep(0.1)
        await anyio.sleep(0.5)
        engine.stop()
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(plane, "flt-re")}
    assert all(now[n] != old[n] for n in old), "a pod was not recreated"
    assert_bound_once(plane, user, "flt-re", 4)
    # the old pods' bindings were never sent: kube-apiserver v1.20 ignores a Binding's uid and would have
    # bound the successor of the same name to the node chosen for its predecessor (which this test saw
    # before the binder asked the engine's cache whether the pod still exists)
    codes = bindings(plane, user, "flt-re")
    assert codes == {f"p{i}": [201] for i in range(4)}, codes
    assert engine.binder.dropped_gone == 4 and engine.binder.bound == 4
    assert not [u for u in old.values() if engine.cluster.pod(u) is not None], "an old pod is still cached"
