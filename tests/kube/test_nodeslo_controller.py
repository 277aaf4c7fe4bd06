"""The NodeSLO controller inside ``KubeManager`` against the fake API server: one NodeSLO per node,
created, updated (only when the rendered spec differs) and deleted as nodes, NodeSLOs and
slo-controller-config change, retried after failed writes, and nothing written once leadership is lost."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import asynccontextmanager

import anyio
import yaml
from kube_testkit import node, wait_for

from koordfw.engines.kube.engine import NotLeading
from koordfw.engines.kube.manager import KubeManager
from koordfw.engines.kube.nodeslo import NodeSLOController, render_nodeslo_spec

NS = "koordinator-system"
CM = "slo-controller-config"
THRESHOLD = "resource-threshold-config"


def config_map(data: dict, ns: str = NS) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CM, "namespace": ns}, "data": data}


def threshold(pct: int, nodes: list | None = None) -> str:
    return json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": pct},
                       "nodeStrategies": nodes or []})


def writes(api, method: str | None = None) -> list[tuple[str, str]]:
    return [(m, p) for m, p in api.requests if "/nodeslos" in p and m != "GET" and (method is None or m == method)]


@asynccontextmanager
async def manager(api, client, registry, **kw):
    ctl = NodeSLOController(initial_backoff=0.05, max_backoff=0.2)
    m = KubeManager(registry, client, controllers=[ctl], **kw)
    async with anyio.create_task_group() as tg:
        tg.start_soon(m.run)
        with anyio.fail_after(10):
            await m.started.wait()
            while ctl.reflector is None or not ctl.reflector.synced.is_set():
                await anyio.sleep(0.01)
        yield m, ctl
        m.stop()


def slo_spec(api, name: str) -> dict | None:
    o = api.get("nodeslos", name)
    return None if o is None else o["spec"]


async def test_nodeslo_lifecycle(api, client, registry):
    api.create(node("n1", labels={"pool": "online"}))
    api.create(node("n2"))
    nodes = [{"nodeSelector": {"matchLabels": {"pool": "offline"}}, "cpuSuppressThresholdPercent": 40}]
    api.create(config_map({THRESHOLD: threshold(60, nodes)}))
    async with manager(api, client, registry) as (m, ctl):
        await wait_for(lambda: api.get("nodeslos", "n1") and api.get("nodeslos", "n2"))
        data = {THRESHOLD: threshold(60, nodes)}
        assert slo_spec(api, "n1") == render_nodeslo_spec(data, {"pool": "online"})
        slo = api.get("nodeslos", "n1")
        assert slo["apiVersion"] == "slo.koordinator.sh/v1alpha1" and slo["kind"] == "NodeSLO"
        assert "namespace" not in slo["metadata"]
        assert slo_spec(api, "n1")["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 60
        # a label change that selects a node strategy
        api.update("nodes", "n1", lambda o: o["metadata"]["labels"].update(pool="offline"))
        await wait_for(lambda: slo_spec(api, "n1")["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 40)
        # a change that does not touch the rendering's inputs writes nothing
        before = len(writes(api))
        api.update("nodes", "n2", lambda o: o["metadata"].setdefault("annotations", {}).update(x="1"))
        api.update("nodes", "n2", lambda o: o["status"].update(phase="Running"))
        # the ConfigMap changes: every node whose spec differs is updated
        api.update("configmaps", CM, lambda o: o["data"].update({THRESHOLD: threshold(70, nodes)}), NS)
        await wait_for(lambda: slo_spec(api, "n2")["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 70)
        assert writes(api)[before:] == [("PUT", "/apis/slo.koordinator.sh/v1alpha1/nodeslos/n2")]  # n1: 40 still
        # a key that does not decode keeps its previous value: nothing written
        api.update("configmaps", CM, lambda o: o["data"].update({THRESHOLD: "{not json"}), NS)
        await wait_for(lambda: ctl.problems)
        assert THRESHOLD in ctl.problems[0]
        health = m.health()["controllers"]["nodeslo"]
        assert health["running"] and health["configErrors"] == 1 and THRESHOLD in health["configProblems"][0]
        assert health["created"] == 2 and health["writes"] == health["created"] + health["updated"]
        # the node's bandwidth annotation is an input
        api.update("nodes", "n2", lambda o: o["metadata"]["annotations"].update(
            {"node.koordinator.sh/network-bandwidth": "1000M"}))
        await wait_for(lambda: slo_spec(api, "n2")["systemStrategy"]["totalNetworkBandwidth"] == "1G")
        # someone edits a NodeSLO: the spec is put back; deletes it: it is recreated
        api.update("nodeslos", "n2", lambda o: o["spec"].update(resourceQOSStrategy={"beClass": {}}))
        await wait_for(lambda: slo_spec(api, "n2")["resourceQOSStrategy"] == {})
        api.delete("nodeslos", "n2")
        await wait_for(lambda: api.get("nodeslos", "n2") is not None)
        # a new node gets one, a deleted node loses its own
        api.create(node("n3"))
        api.delete("nodes", "n1")
        await wait_for(lambda: api.get("nodeslos", "n3") is not None and api.get("nodeslos", "n1") is None)
        # the ConfigMap goes: the defaults
        api.delete("configmaps", CM, NS)
        await wait_for(lambda: slo_spec(api, "n3")["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 65)
        assert slo_spec(api, "n2") == render_nodeslo_spec(None, {}, {"node.koordinator.sh/network-bandwidth": "1000M"})


async def test_an_unchanged_spec_is_not_written_again(api, client, registry):
    api.create(node("n1"))
    spec = render_nodeslo_spec(None, {})
    api.create({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n1"},
                "spec": spec})
    api.create({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "gone"},
                "spec": spec})
    async with manager(api, client, registry) as (_, ctl):
        await wait_for(lambda: api.get("nodeslos", "gone") is None)
        # a ConfigMap whose rendering equals the defaults changes nothing either
        api.create(config_map({THRESHOLD: json.dumps({"clusterStrategy": {"cpuSuppressThresholdPercent": 65}})}))
        await wait_for(lambda: ctl._data is not None)
        await anyio.sleep(0.1)
    assert writes(api) == [("DELETE", "/apis/slo.koordinator.sh/v1alpha1/nodeslos/gone")]
    assert ctl.created == ctl.updated == 0 and ctl.deleted == 1


async def test_failed_writes_are_retried(api, client, registry):
    api.create(node("n1"))
    api.fail(500, count=2, method="POST", path="/nodeslos")
    async with manager(api, client, registry) as (_, ctl):
        await wait_for(lambda: api.get("nodeslos", "n1") is not None)
    assert len(writes(api, "POST")) == 3 and ctl.errors == 2


async def test_other_namespaces_config_map_is_not_read(api, client, registry):
    api.create(node("n1"))
    api.create(config_map({THRESHOLD: threshold(10)}, ns="default"))
    api.create(config_map({THRESHOLD: threshold(20)}, ns="custom"))
    async with manager(api, client, registry, config_namespace="custom"):
        await wait_for(lambda: api.get("nodeslos", "n1") is not None)
        assert slo_spec(api, "n1")["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 20


async def test_nothing_is_written_without_leadership(api, client, registry):
    api.create(node("n1"))

    class Ctx:
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def check_leading(self, what):
            raise NotLeading(f"not the leader any more: not {what}")

    ctl = NodeSLOController()
    seen: list[BaseException] = []

    class Wrapper:
        name, leader_only = "nodeslo", True

        async def run(self, ctx):
            try:
                await ctl.run(Ctx(ctx))
            except NotLeading as e:
                seen.append(e)
                raise

    m = KubeManager(registry, client, controllers=[Wrapper()])
    with anyio.fail_after(10):
        await m.run()
    assert m.stopped_reason == "lost leadership" and "creating NodeSLO n1" in str(seen[0])
    assert writes(api) == []


async def test_without_the_crd_nothing_is_written_until_it_is_served(api, client, registry):
    api.create(node("n1"))
    absent = api.fail(404, method="GET", path="/nodeslos")
    ctl = NodeSLOController(probe_interval=0.1)
    m = KubeManager(registry, client, controllers=[ctl])
    async with anyio.create_task_group() as tg:
        tg.start_soon(m.run)
        await wait_for(lambda: m.health()["controllers"].get("nodeslo", {}).get("error") == "NodeSLO CRD not installed")
        assert m.health()["controllers"]["nodeslo"]["running"] and not m.stopped_reason
        assert writes(api) == []
        api.faults.remove(absent)  # the CRD is installed: the reflector's next probe lists it
        await wait_for(lambda: api.get("nodeslos", "n1") is not None)
        assert "error" not in m.health()["controllers"]["nodeslo"]
        m.stop()
    assert writes(api) == [("POST", "/apis/slo.koordinator.sh/v1alpha1/nodeslos")]


async def test_the_manager_command_writes_nodeslos(api, tmp_path):
    """``koordfw manager`` runs the NodeSLO controller (a subprocess against the fake API server)."""
    api.create(node("n1", labels={"pool": "offline"}))
    nodes = [{"nodeSelector": {"matchLabels": {"pool": "offline"}}, "cpuSuppressThresholdPercent": 40}]
    api.create(config_map({THRESHOLD: threshold(60, nodes)}))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
    cmd = [sys.executable, "-m", "koordfw", "manager", "--kubeconfig", str(kubeconfig), "--health-address", ""]
    async with await anyio.open_process(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        try:
            await wait_for(lambda: api.get("nodeslos", "n1") is not None, timeout=60)
        finally:
            proc.terminate()
            with anyio.fail_after(30):
                await proc.wait()
    spec = slo_spec(api, "n1")
    assert spec == render_nodeslo_spec({THRESHOLD: threshold(60, nodes)}, {"pool": "offline"})
    assert spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 40


async def test_the_agent_applies_what_the_controller_writes(api, client, registry):
    """The writer and the reader agree: the NodeSLO rendered from deploy/slo-controller-config.yaml is applied
    by the node agent's mapping (koordfw.agent.nodeslo) without an error, with the node strategy's values."""
    from pathlib import Path

    from koordfw.agent.nodeslo import host_apps_from_nodeslo, plugin_config_from_nodeslo
    from koordfw.core.plugins import Registry
    from koordfw.core.profile import profile_from_dict

    [cm] = [d for d in yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy" /
                                           "slo-controller-config.yaml").read_text()) if d]
    cm["metadata"]["namespace"] = NS
    api.create(cm)
    api.create(node("n1", labels={"node-pool": "offline"}))
    async with manager(api, client, registry):
        await wait_for(lambda: api.get("nodeslos", "n1") is not None)
    slo = api.get("nodeslos", "n1")
    agent = Registry(profile_from_dict({})).load(only={"be_suppress", "llc_isolation"})
    conf = plugin_config_from_nodeslo(slo, agent, {})
    assert conf["be_suppress"]["cpuSuppressThresholdPercent"] == 80 and conf["be_suppress"]["enable"] is True
    assert conf["llc_isolation"]["BE"]["catRangeEndPercent"] == 30
    apps, raw = host_apps_from_nodeslo(slo, cgroup_version=2, cgroup_driver="systemd", kubepods="kubepods.slice")
    assert [a.name for a in apps] == ["nginx"] and raw["nginx"]["qos"] == "LS"
