"""``koordfw manager``'s process against the fake API server: caches, components, leadership, the command."""

from __future__ import annotations

import subprocess
import sys
from contextlib import asynccontextmanager

import anyio
import pytest
from kube_testkit import node, pod, sigterm_and_wait, wait_for

from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.leader import LeaderElector
from koordfw.engines.kube.manager import Controller, KubeManager, ManagerContext
from koordfw.extension import SLO_CTRL_CONFIG_MAP


class Recorder:
    """A component that records what it saw of the shared caches."""

    def __init__(self, name: str, leader_only: bool) -> None:
        self.name, self.leader_only = name, leader_only
        self.ctx: ManagerContext | None = None
        self.events: list[tuple[str, str, str]] = []
        self.started = anyio.Event()

    async def run(self, ctx: ManagerContext) -> None:
        self.ctx = ctx
        ctx.add_listener(lambda kind, etype, obj, old: self.events.append((kind, etype, obj["metadata"]["name"])))
        self.started.set()
        await ctx.stopping.wait()


@asynccontextmanager
async def running(manager: KubeManager):
    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        with anyio.fail_after(10):
            await manager.started.wait()
        yield manager
        manager.stop()


def config_map(data: dict, ns: str = "koordinator-system") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SLO_CTRL_CONFIG_MAP, "namespace": ns},
            "data": data}


async def test_components_share_the_caches_and_see_changes(api, client, registry):
    api.create(node("n1"))
    api.create(pod("p1", node_name="n1"))
    api.create(config_map({"colocation-config": "{}"}))
    ctl, hook = Recorder("ctl", True), Recorder("webhook", False)
    assert isinstance(ctl, Controller)
    m = KubeManager(registry, client, controllers=[ctl, hook])
    async with running(m):
        await ctl.started.wait()
        await hook.started.wait()
        assert ctl.ctx is hook.ctx and ctl.ctx is not None
        ctx = ctl.ctx
        assert ctx.cluster.node("n1") is not None and [p.name for p in ctx.cluster.pods_on("n1")] == ["p1"]
        assert ctx.slo_config == {"colocation-config": "{}"}
        api.create(node("n2"))
        api.update("configmaps", SLO_CTRL_CONFIG_MAP, lambda o: o["data"].update(x="1"), "koordinator-system")
        await wait_for(lambda: ("ConfigMap", "MODIFIED", SLO_CTRL_CONFIG_MAP) in ctl.events
                       and ("Node", "ADDED", "n2") in ctl.events)
        assert ctx.slo_config == {"colocation-config": "{}", "x": "1"}
        health = m.health()
        assert health["synced"] and health["running"] and health["controllers"]["ctl"]["running"]
        # a ConfigMap of that name in another namespace is not the manager's
        api.create(config_map({"colocation-config": "[]"}, ns="default"))
        api.delete("configmaps", SLO_CTRL_CONFIG_MAP, "koordinator-system")
        await wait_for(lambda: ctx.slo_config is None)


async def test_a_failing_component_stops_the_manager(api, client, registry):
    class Broken:
        name, leader_only = "broken", True

        async def run(self, ctx: ManagerContext) -> None:
            raise RuntimeError("boom")

    m = KubeManager(registry, client, controllers=[Broken()])
    with anyio.fail_after(10):
        await m.run()
    assert m.stopped_reason == "component broken failed: RuntimeError: boom"


async def test_leader_only_components_wait_for_the_lease(api, registry):
    kw = dict(namespace="kube-system", name="koordfw-manager", lease_duration=2.0, renew_deadline=1.0,
              retry_period=0.25)
    async with KubeClient(api.url, qps=0) as ca, KubeClient(api.url, qps=0) as cb:
        a_ctl, a_hook = Recorder("ctl", True), Recorder("webhook", False)
        b_ctl, b_hook = Recorder("ctl", True), Recorder("webhook", False)
        a = KubeManager(registry, ca, controllers=[a_ctl, a_hook], leader_elector=LeaderElector(ca, identity="A", **kw))
        b = KubeManager(registry, cb, controllers=[b_ctl, b_hook], leader_elector=LeaderElector(cb, identity="B", **kw))
        async with running(a):
            async with anyio.create_task_group() as tg:
                tg.start_soon(b.run)
                await b_hook.started.wait()  # every replica serves the webhook
                await b.wait_synced()
                assert not b_ctl.started.is_set() and not b.started.is_set()
                assert a_ctl.started.is_set() and a.ctx.is_leader() and not b.ctx.is_leader()
                a.stop()  # A releases the lease on a graceful stop: B takes over
                await wait_for(lambda: b_ctl.started.is_set())
                b.stop()


def test_command_refuses_bad_flags_with_one_line():
    for argv, msg in [(["--webhook-listen", "0.0.0.0:9443"], "needs --tls-cert-file"),
                      (["--tls-cert-file", "c.pem"], "only used with --webhook-listen"),
                      (["--webhook-listen", "nope"], "expected HOST:PORT")]:
        r = subprocess.run([sys.executable, "-m", "koordfw", "manager", "--kubeconfig", "/nonexistent", *argv],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert msg in r.stderr.strip().splitlines()[-1], r.stderr  # argparse's usage, then one error line


@pytest.mark.parametrize("flag", ["--help"])
def test_command_is_registered(flag):
    r = subprocess.run([sys.executable, "-m", "koordfw", "manager", flag], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--config-namespace" in r.stdout and "--leader-elect" in r.stdout


async def test_the_command_writes_batch_resources_and_serves_health(api, tmp_path):
    """``koordfw manager`` as a process: caches the fake cluster, patches the node's batch resources,
    answers /healthz and /readyz, and exits 0 on SIGTERM."""
    import datetime as dt
    import json
    import socket

    import aiohttp

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.create(node("n1", cpu="8", memory="32Gi"))
    api.create({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"},
                "status": {"updateTime": now, "nodeMetric": {"systemUsage": {"resources": {"cpu": "1", "memory": "1Gi"}},
                                                             "nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}},
                           "podsMetric": []}})
    api.create(config_map({"colocation-config": json.dumps({"enable": True})}))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(api.kubeconfig()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "koordfw", "manager", "--kubeconfig", str(kubeconfig),
                             "--health-address", f"127.0.0.1:{port}", "--log-level", "info"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # 8000m - 40 % margin - 1000m of system usage
        await wait_for(lambda: api.get("nodes", "n1")["status"]["allocatable"].get("kubernetes.io/batch-cpu")
                       == "3800", timeout=60, what="batch-cpu written by the command")
        assert api.get("nodes", "n1")["status"]["capacity"]["kubernetes.io/batch-cpu"] == "3800"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                body = await r.json()
                assert r.status == 200 and body["ready"] and body["config"]
            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                body = await r.json()
                assert r.status == 200 and body["controllers"]["noderesource"]["running"]
        await sigterm_and_wait(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def test_healthz_reason_when_the_config_map_cannot_be_read(api, registry):
    """RBAC refusing configmaps keeps that cache unsynced: nothing runs, and past --unhealthy-after-seconds
    (on the client's injected clock) /healthz's check names the cache."""
    t = [1000.0]
    api.forbid("configmaps")
    async with KubeClient(api.url, qps=0, clock=lambda: t[0]) as c:
        ctl = Recorder("ctl", True)
        m = KubeManager(registry, c, controllers=[ctl], unhealthy_after=120.0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(m.run)
            await wait_for(lambda: m.reflectors["ConfigMap"].errors > 0 and m.reflectors["Node"].synced.is_set())
            assert m.unhealthy_reason() is None and not ctl.started.is_set()
            t[0] += 121
            assert m.unhealthy_reason() == ("caches not synced 121s after the start (more than 120s): ConfigMap")
            m.stop()


@pytest.mark.parametrize("command", ["manager", "scheduler"])
def test_leader_election_durations_out_of_order_exit_2(command):
    """kube's LeaderElectionConfiguration rule (lease > renew deadline > retry period), one line, exit 2:
    the scheduler used to hand the numbers to the elector and die with a traceback."""
    r = subprocess.run([sys.executable, "-m", "koordfw", command, "--kubeconfig", "/nonexistent", "--leader-elect",
                        "--leader-elect-lease-duration", "5", "--leader-elect-renew-deadline", "10"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "koordfw: error: need --leader-elect-lease-duration > --leader-elect-renew-deadline > "
        "--leader-elect-retry-period"]
