"""One runtime for the hook points outside the scheduling cycle (koordfw.core.node_runtime): the same inputs
give the same answers through every engine, and a plugin that raises (or returns something the point's
validator refuses) loses only its own contribution, in every engine.

* ``node_resources``: ``koordfw simulate`` (the embedded engine's refresh), ``koordfw.embed.update_node_resources``
  and the manager's node-resource controller against the fake API server;
* ``qos_plan``: the node agent's round on a fake node, :class:`koordfw.NodePlanner` and ``koordfw agent plan``;
* ``mutate_pod``: ``koordfw simulate``'s admission, :class:`koordfw.PodAdmission` and the manager's webhook.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import jsonpatch
import pytest
import yaml
from kube_testkit import node, pod, wait_for

import koordfw
import koordfw.embed
import koordfw.inputs
from koordfw import AgentHandle, Eviction, FileWrite, hookimpl
from koordfw.agent.cgroups import CgroupLayout, detect_version
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.commands.agent import plan_node
from koordfw.core.caller import CURRENT_PLUGIN
from koordfw.core.clock import VirtualClock
from koordfw.core.cluster import ClusterState
from koordfw.core.manifests import load_manifests
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.core.quantity import canonical
from koordfw.embed import NodePlanner, PodAdmission
from koordfw.engines.embedded import EmbeddedEngine, build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.manager import KubeManager
from koordfw.engines.kube.noderesource import NodeResourceController
from koordfw.engines.kube.webhook import WebhookServer
from koordfw.extension import BATCH_CPU, BATCH_MEMORY, SLO_CTRL_CONFIG_MAP
from koordfw.testing.cgroups import FakeNode
from koordfw.testing.fake_apiserver import FakeApiServer

NOW = 1_800_000_000.0
WIDGETS = "example.com/widgets"
WRITTEN = (BATCH_CPU, BATCH_MEMORY, WIDGETS, "example.com/gadgets")


# -- node_resources ---------------------------------------------------------------------------------------------
class Widgets:
    """A contribution that depends on the node and its pods."""

    @hookimpl
    def node_resources(self, node: Any, pods: list) -> dict:
        return {WIDGETS: 10 * len(pods) + len(node.name)}


class Refused:
    """A result the one validator refuses: left out whole (its gadgets too)."""

    @hookimpl
    def node_resources(self) -> dict:
        return {WIDGETS: -1, "example.com/gadgets": 5}


class RaisesOnNodeResources:
    @hookimpl
    def node_resources(self) -> dict:
        raise RuntimeError("boom in node_resources")


def node_resources_registry() -> Registry:
    return build_registry(None, only=["batch_resource"], plugins={
        "widgets": Widgets, "refused": Refused, "raises": RaisesOnNodeResources})


def iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cluster_objects() -> list[dict]:
    """Two nodes with running pods and fresh NodeMetrics, and the colocation configuration."""
    out: list[dict] = [{"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": SLO_CTRL_CONFIG_MAP, "namespace": "koordinator-system"},
                        "data": {"colocation-config": json.dumps({"enable": True})}}]
    for name, cpu, mem, pods in (("n1", "8", "32Gi", 2), ("node-2", "16", "64Gi", 1)):
        out.append(node(name, cpu=cpu, memory=mem))
        running = [f"web-{name}-{i}" for i in range(pods)]
        out += [pod(p, cpu="1", memory="2Gi", node_name=name) for p in running]
        out.append({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                    "status": {"updateTime": iso(NOW),
                               "nodeMetric": {"nodeUsage": {"resources": {"cpu": "3", "memory": "6Gi"}},
                                              "systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}},
                               "podsMetric": [{"namespace": "default", "name": p,
                                               "podUsage": {"resources": {"cpu": "1", "memory": "2Gi"}}}
                                              for p in running]}})
    return out


def written(allocatable: dict) -> dict[str, int]:
    return {k: canonical(k, v) for k, v in allocatable.items() if k in WRITTEN and canonical(k, v) != 0}


def through_simulate(tmp: Path) -> dict[str, dict[str, int]]:
    f = tmp / "cluster.yaml"
    f.write_text(yaml.safe_dump_all(cluster_objects()))
    r = koordfw.simulate([str(f)], plugins={"widgets": Widgets, "refused": Refused, "raises": RaisesOnNodeResources},
                         only=["batch_resource"])
    return {n["name"]: written(n["allocatable"]) for n in r.to_dict()["nodes"]}


async def through_helper(tmp: Path) -> dict[str, dict[str, int]]:
    f = tmp / "helper.yaml"
    f.write_text(yaml.safe_dump_all(cluster_objects()))
    manifests = load_manifests([str(f)])
    cluster = ClusterState()
    engine = EmbeddedEngine(node_resources_registry(), cluster, start_time=manifests.newest_timestamp())
    manifests.to_cluster(cluster)
    assert await koordfw.embed.update_node_resources(engine, {}) == ["n1", "node-2"]
    return {v.name: {k: int(a) for k, a in v.allocatable.items() if k in WRITTEN and int(a) != 0}
            for v in cluster.nodes}


async def through_manager() -> tuple[dict[str, dict[str, int]], tuple[int, int]]:
    async with FakeApiServer() as api, KubeClient(api.url, qps=0) as client:
        for obj in cluster_objects():
            api.create(obj)
        ctl = NodeResourceController(resync_period=3600)
        m = KubeManager(node_resources_registry(), client, controllers=[ctl], clock=lambda: NOW)
        async with anyio.create_task_group() as tg:
            tg.start_soon(m.run)
            with anyio.fail_after(10):
                await m.started.wait()
            await wait_for(lambda: all(WIDGETS in (api.get("nodes", n) or {})["status"]["allocatable"]
                                       for n in ("n1", "node-2")))
            with anyio.fail_after(10):
                await ctl.settled()
            m.stop()
        return ({n: written(api.get("nodes", n)["status"]["allocatable"]) for n in ("n1", "node-2")},
                (ctl.errors, ctl.reconciles))


def test_node_resources_same_answers_through_simulate_the_helper_and_the_manager(tmp_path: Path) -> None:
    simulated = through_simulate(tmp_path)
    helped = anyio.run(through_helper, tmp_path)
    managed, (errors, reconciles) = anyio.run(through_manager)
    # each engine: batch_resource's and Widgets' amounts; the raising and the refused plugins left out
    assert simulated["n1"][WIDGETS] == 22 and simulated["node-2"][WIDGETS] == 16
    assert simulated["n1"][BATCH_CPU] > 0 and simulated["node-2"][BATCH_MEMORY] > 0
    assert "example.com/gadgets" not in simulated["n1"]
    assert simulated == helped == managed
    assert reconciles and errors == 2 * reconciles  # the manager counts both failures of each reconcile


# -- qos_plan ---------------------------------------------------------------------------------------------------
class Throttles:
    @hookimpl
    def qos_plan(self, node_state: Any) -> list:
        be = [p for p in node_state.pods if p.qos == "BE"]
        return [FileWrite(f"cpu/{p.cgroup_dir}/cpu.shares", str(2 + len(node_state.pods))) for p in be] + \
            [Eviction(p.uid, f"default/{p.uid}", reason="too many") for p in be[1:]]


class RaisesOnQosPlan:
    @hookimpl
    def qos_plan(self, node_state: Any) -> list:
        raise RuntimeError("boom in qos_plan")


class BadPlan:
    @hookimpl
    def qos_plan(self) -> list:
        return [FileWrite("cpu/x/cpu.shares", "2"), "not a write"]


class SeesHandle:
    """Records what kind of handle it was given (every engine gives a koordfw.AgentHandle)."""

    def __init__(self) -> None:
        self.handles: list[bool] = []

    @hookimpl
    def qos_plan(self, handle: Any) -> None:
        self.handles.append(isinstance(handle, AgentHandle) and handle.plugin_name == "sees")


def qos_registry(sees: SeesHandle) -> Registry:
    prof = profile_from_dict({"pluginConfig": {"be_suppress": {"enable": True}}})
    return Registry(prof).load(only={"be_suppress"}, extra={
        "throttles": Throttles, "raises": RaisesOnQosPlan, "bad": BadPlan, "sees": sees})


def test_qos_plan_same_answers_through_the_agent_the_planner_and_agent_plan(tmp_path: Path) -> None:
    fake = FakeNode(tmp_path)
    ls = fake.add_pod("ls1", "burstable")
    be = fake.add_pod("be1", "besteffort")
    fake.add_pod("be2", "besteffort")
    clock = VirtualClock(100.0)
    sees = SeesHandle()
    layout = CgroupLayout(fake.root, detect_version(fake.root), fake.driver, fake.kubepods)
    agent = Agent(qos_registry(sees), layout, Executor({"cgroup": fake.root}, dry_run=True), interval=1.0,
                  node_name="n1", proc_root=str(fake.proc), sys_root=str(fake.sys), clock=clock)
    anyio.run(agent.run_once)  # the first samples
    clock.advance(1.0)
    fake.set_usage(ls, int(3e9))
    fake.set_usage(be, int(2e9))
    fake.set_proc_stat(int(6e9))
    results = anyio.run(agent.run_once)
    ns = agent.node_state
    assert ns is not None
    by_agent = ([r.write for r in results], agent.last_evictions)
    planned = anyio.run(NodePlanner(qos_registry(sees), clock=VirtualClock(101.0)).plan, ns)
    printed = plan_node(ns, qos_registry(sees), only_changes=False)
    assert by_agent == (planned.writes, planned.evictions)
    assert printed == {"writes": [w.to_dict() for w in planned.writes],
                       "evictions": [e.to_dict() for e in planned.evictions]}
    # be_suppress's and Throttles' plans, stamped; the raising plugin and the bad plan left out
    assert {w.plugin for w in planned.writes} == {"be_suppress", "throttles"}
    assert [e.pod_uid for e in planned.evictions] == ["be2"] and planned.evictions[0].plugin == "throttles"
    assert planned.errors == ["raises: plugin raises raised RuntimeError in qos_plan: boom in qos_plan",
                              "bad: bad plan: item 1: expected a FileWrite or an Eviction, got str"]
    assert sees.handles and all(sees.handles)  # two agent rounds, the planner and agent plan


# -- mutate_pod ---------------------------------------------------------------------------------------------------
class Labels:
    @hookimpl
    def mutate_pod(self, pod: dict) -> dict:
        pod.setdefault("metadata", {}).setdefault("labels", {})["labelled"] = "yes"
        return pod


class RaisesOnBoom:
    """Raises for the pods labelled ``boom`` only: those pods are refused (naming it), the others admitted."""

    @hookimpl
    def mutate_pod(self, pod: dict) -> dict | None:
        if (pod.get("metadata") or {}).get("labels", {}).get("boom"):
            raise RuntimeError("boom in mutate_pod")
        return None


def admission_registry() -> Registry:
    return build_registry({}, only=[], plugins={"labels": Labels, "raises": RaisesOnBoom})


def pending(name: str, boom: bool) -> dict:
    p = pod(name, cpu="100m", memory="128Mi", labels={"boom": "1"} if boom else {})
    return p


async def through_webhook(pods: list[dict]) -> dict[str, tuple[bool, dict[str, str], str]]:
    out: dict[str, tuple[bool, dict[str, str], str]] = {}
    async with FakeApiServer() as api, KubeClient(api.url, qps=0) as client:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
        server = WebhookServer(host="127.0.0.1", port=0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, client, admission_registry())
            with anyio.fail_after(10):
                await server.listening.wait()
                while server._unsynced():
                    await anyio.sleep(0.02)
            async with aiohttp.ClientSession() as s:
                for p in pods:
                    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "request": {"uid": p["metadata"]["name"], "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                          "resource": {"group": "", "version": "v1", "resource": "pods"},
                                          "namespace": "default", "operation": "CREATE", "object": copy.deepcopy(p)}}
                    async with s.post(f"http://127.0.0.1:{server.bound_port}/mutate-pod", json=review) as r:
                        resp = (await r.json())["response"]
                    if resp["allowed"]:
                        ops = json.loads(base64.b64decode(resp["patch"])) if resp.get("patch") else []
                        labels = jsonpatch.apply_patch(p, ops)["metadata"]["labels"]
                        out[p["metadata"]["name"]] = (True, labels, "")
                    else:
                        out[p["metadata"]["name"]] = (False, {}, resp["status"]["message"])
            tg.cancel_scope.cancel()
    return out


async def through_pod_admission(pods: list[dict]) -> dict[str, tuple[bool, dict[str, str], str]]:
    adm = PodAdmission(admission_registry(), [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}])
    out: dict[str, tuple[bool, dict[str, str], str]] = {}
    for p in pods:
        try:
            admitted = await adm.admit(copy.deepcopy(p))
        except koordfw.ManifestError as e:
            out[p["metadata"]["name"]] = (False, {}, str(e))
            continue
        out[p["metadata"]["name"]] = (True, dict(admitted.labels), "")
    return out


def through_simulate_admission(tmp: Path, pods: list[dict]) -> dict[str, tuple[bool, dict[str, str], str]]:
    f = tmp / "pods.yaml"
    f.write_text(yaml.safe_dump_all([node("n1"), *pods]))
    r = koordfw.simulate([str(f)], plugins={"labels": Labels, "raises": RaisesOnBoom}, only=[])
    out: dict[str, tuple[bool, dict[str, str], str]] = {}
    for p, why in r.rejected.values():
        out[p.name] = (False, {}, why)
    for p in (e.pod for e in r.engine.cluster.pods.values()):
        if p.uid not in r.rejected:
            out[p.name] = (True, dict(p.labels), "")
    return out


def test_mutate_pod_failure_refuses_only_its_pod_alike_in_simulate_pod_admission_and_the_webhook(tmp_path: Path) -> None:
    pods = [pending("calm", False), pending("loud", True)]
    simulated = through_simulate_admission(tmp_path, pods)
    admitted = anyio.run(through_pod_admission, pods)
    hooked = anyio.run(through_webhook, pods)
    want_calm = (True, {"labelled": "yes"}, "")
    assert simulated["calm"] == admitted["calm"] == hooked["calm"] == want_calm
    for got in (simulated["loud"], admitted["loud"], hooked["loud"]):
        assert got[0] is False and "plugin raises raised RuntimeError in mutate_pod: boom in mutate_pod" in got[2], got


# -- queue_sort --------------------------------------------------------------------------------------------------
def test_queue_sort_runs_through_the_caller_and_a_failure_falls_back_to_the_default_order() -> None:
    seen: list[str | None] = []

    class ByName:
        @hookimpl
        def queue_sort(self, pod: Any) -> Any:
            seen.append(CURRENT_PLUGIN.get())
            if pod.name == "bad":
                raise ValueError("no key for this one")
            return (pod.name,)

    reg = build_registry({}, only=[], plugins={"by_name": ByName()}, disable=["priority_sort"])
    cluster = ClusterState()
    engine = EmbeddedEngine(reg, cluster)
    fw = engine.scheduler.framework
    good, bad = koordfw.inputs.make_pod("good"), koordfw.inputs.make_pod("bad")
    assert fw.queue_sort_key(good) == ("good",)
    assert fw.queue_sort_key(bad) is None  # logged by the caller; the scheduler's default key applies
    assert seen == ["by_name", "by_name"] and CURRENT_PLUGIN.get() is None
    assert engine.scheduler.caller.durations[("by_name", "queue_sort")][0] == 2


def test_an_async_queue_sort_is_refused_and_leaves_no_plugin_context() -> None:
    class Async:
        @hookimpl
        async def queue_sort(self, pod: Any) -> Any:
            return (pod.name,)

    engine = EmbeddedEngine(build_registry({}, only=[], plugins={"async_sort": Async()}, disable=["priority_sort"]),
                            ClusterState())
    assert engine.scheduler.framework.queue_sort_key(koordfw.inputs.make_pod("p")) is None
    assert CURRENT_PLUGIN.get() is None


@pytest.mark.parametrize("threaded", [False, True])
def test_call_sync_runs_async_and_threaded_implementations_as_call_does(threaded: bool) -> None:
    """The one sync/async dispatch: ``call_sync`` gives a Pending for an async or threaded implementation,
    which awaited runs it (a threaded one in a worker thread) with the plugin's context."""
    from koordfw.core.caller import HookCaller, Pending
    from koordfw.core.plugins import Impl

    def plain(pod: str) -> tuple[str, str | None]:
        return pod, CURRENT_PLUGIN.get()

    async def coro(pod: str) -> tuple[str, str | None]:
        await anyio.sleep(0)
        return pod, CURRENT_PLUGIN.get()

    fn: Any = plain if threaded else coro
    impl = Impl(plugin="x", point="reserve", fn=fn, argnames=("pod",), is_async=not threaded, threaded=threaded)

    class _Reg:
        def impls(self, point: str) -> list[Impl]:
            return [impl]

    caller = HookCaller(_Reg(), lambda name: None)  # type: ignore[arg-type]
    p = caller.prepared(impl, ("pod", "node", "state"))

    async def go() -> Any:
        res = caller.call_sync(p, "P", "N", "S")
        assert type(res) is Pending and CURRENT_PLUGIN.get() == "x"
        out = await res
        assert CURRENT_PLUGIN.get() is None
        return out, await caller.call_prepared(p, "P", "N", "S")

    assert anyio.run(go) == (("P", "x"), ("P", "x"))
    assert caller.durations[("x", "reserve")][0] == 2


# -- the other points, each result checked once ------------------------------------------------------------------
def test_a_hanging_qos_plan_times_out_alone() -> None:
    class Hangs:
        @hookimpl
        async def qos_plan(self) -> list:
            await anyio.sleep(60)
            return []

    class Writes:
        @hookimpl
        def qos_plan(self) -> list:
            return [FileWrite("cpu/kubepods/cpu.shares", "2")]

    reg = Registry(profile_from_dict({"pluginTimeoutSeconds": 0.05})).load(
        only=set(), extra={"hangs": Hangs, "writes": Writes})
    plan = anyio.run(NodePlanner(reg).plan, koordfw.NodeState())
    assert [w.plugin for w in plan.writes] == ["writes"]
    assert plan.errors == ["hangs: plugin hangs timed out after 0.05s in qos_plan"]


def test_deschedule_report_and_runtime_hook_results_are_checked_in_the_runtime() -> None:
    from koordfw.core.caller import HookCaller
    from koordfw.core.model import Migration
    from koordfw.core.node_runtime import NodeRuntime

    class Good:
        @hookimpl
        def deschedule(self) -> list:
            return [Migration("default/a", "n1", None, "r")]

        @hookimpl
        def report(self) -> dict:
            return {"good": 1}

        @hookimpl
        def runtime_hook(self, event: str) -> list:
            return [FileWrite(f"cpu/{event}/cpu.shares", "2")]

    class Bad:
        @hookimpl
        def deschedule(self) -> list:
            return ["default/b"]

        @hookimpl
        def report(self) -> list:
            return ["not a mapping"]

        @hookimpl
        def runtime_hook(self) -> list:
            return [Eviction("u", "default/u")]  # runtime_hook plans writes only

    class Raises:
        @hookimpl
        def deschedule(self) -> list:
            raise RuntimeError("boom")

    reg = Registry(profile_from_dict({})).load(only=set(), extra={"good": Good, "bad": Bad, "raises": Raises})
    reg.bind(lambda name: None)  # the class plugins constructed (no handle needed here)
    rt = NodeRuntime(HookCaller(reg, lambda name: None))

    async def go() -> Any:
        return (await rt.run_deschedule(None), await rt.run_report(),
                await rt.run_runtime_hook("pod_start", None, None, koordfw.NodeState()))  # type: ignore[arg-type]

    (plans, failures), report, (writes, hook_failures) = anyio.run(go)
    assert plans == {"good": [Migration("default/a", "n1", None, "r", plugin="good")]}
    assert [(f.plugin, f.bad_output) for f in failures] == [("raises", False), ("bad", True)]
    assert report == {"good": 1}
    assert [(w.path, w.plugin) for w in writes] == [("cpu/pod_start/cpu.shares", "good")]
    assert [(f.plugin, f.point, f.bad_output) for f in hook_failures] == [("bad", "runtime_hook", True)]
    assert rt.implements("report") and not rt.implements("qos_plan")
