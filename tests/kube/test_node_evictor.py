"""The node agent's evictor against the fake API server: the Eviction API call with the pod's
DisruptionTarget condition and an Event, LS and system pods refused at execution, the rate limit and the
evicted-pods cache, a PodDisruptionBudget's 429."""

from __future__ import annotations

from kube_testkit import node, pdb, pod

from koordfw import Eviction
from koordfw.engines.kube.evictor import NodeEvictor
from koordfw.metrics import REGISTRY
from koordfw.testing.fake_apiserver import FakeApiServer


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def be(name, node="n1", **kw):
    return pod(name, ns="batch", node_name=node, labels={"koordinator.sh/qosClass": "BE", "app": name}, **kw)


def planned(obj, plugin="eviction", reason="trigger by koordlet feature BEMemoryEvict: memory 95% >= 70%"):
    m = obj["metadata"]
    return Eviction(m["uid"], f"{m['namespace']}/{m['name']}", reason=reason, plugin=plugin)


def count(outcome, plugin="eviction"):
    return REGISTRY.get_sample_value("koordfw_agent_evictions_total", {"plugin": plugin, "outcome": outcome}) or 0


async def test_evicts_a_be_pod_through_the_eviction_api_with_condition_and_event(client, api):
    p = api.create(be("spark-1"))
    before = count("evicted")
    ev = NodeEvictor(client, "n1", clock=Clock())
    out = await ev([planned(p)])
    assert [o.outcome for o in out] == ["evicted"]
    assert api.evictions == [("batch", "spark-1")]
    posts = [r for r in api.requests if r[0] == "POST" and r[1].endswith("/eviction")]
    assert posts == [("POST", "/api/v1/namespaces/batch/pods/spark-1/eviction")]
    patches = [r for r in api.requests if r == ("PATCH", "/api/v1/namespaces/batch/pods/spark-1/status")]
    assert len(patches) == 1  # the condition went on before the eviction
    assert api.requests.index(patches[0]) < api.requests.index(posts[0])
    events = list(api.objects["events"].values())
    assert len(events) == 1 and events[0]["reason"] == "evictPodSuccess" and events[0]["type"] == "Warning"
    assert "plugin: eviction" in events[0]["note"] and "BEMemoryEvict" in events[0]["note"]
    assert events[0]["regarding"]["uid"] == p["metadata"]["uid"]
    assert count("evicted") == before + 1


async def test_the_condition_is_on_the_pod(client):
    async with FakeApiServer(graceful_deletes=True) as api:
        from koordfw.engines.kube.client import KubeClient

        async with KubeClient(api.url, qps=0) as c:
            p = api.create(be("spark-1"))
            out = await NodeEvictor(c, "n1", clock=Clock())([planned(p)])
            assert out[0].outcome == "evicted"
            live = api.get("pods", "spark-1", "batch")
            conds = {x["type"]: x for x in (live.get("status") or {}).get("conditions") or []}
            assert conds["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
            assert "koordfw agent plugin eviction" in conds["DisruptionTarget"]["message"]
            assert live["metadata"].get("deletionTimestamp")


async def test_ls_and_system_pods_are_refused_at_execution(client, api):
    ls = api.create(pod("web", ns="prod", node_name="n1", labels={"koordinator.sh/qosClass": "LS"}))
    lsr = api.create(pod("db", ns="prod", node_name="n1", cpu="1", memory="1Gi", labels={"koordinator.sh/qosClass": "LSR"}))
    unlabelled = api.create(pod("api", ns="prod", node_name="n1"))  # Burstable without a label: LS by default
    sys_ = api.create(be("agent", priorityClassName="system-node-critical"))
    crit = api.create(be("crit", priority=2000001000))
    system_qos = api.create(pod("sysd", ns="kube-system", node_name="n1", labels={"koordinator.sh/qosClass": "SYSTEM"}))
    before = count("refused", "rogue")
    ev = NodeEvictor(client, "n1", clock=Clock())
    out = await ev([planned(x, plugin="rogue") for x in (ls, lsr, unlabelled, sys_, crit, system_qos)])
    assert [o.outcome for o in out] == ["refused"] * 6
    assert "LS pod" in out[0].detail and "LSR pod" in out[1].detail and "LS pod" in out[2].detail
    assert "system-node-critical" in out[3].detail and "priority" in out[4].detail and "SYSTEM" in out[5].detail
    assert api.evictions == [] and not [r for r in api.requests if r[0] in ("PATCH", "DELETE")]
    assert count("refused", "rogue") == before + 6


async def test_a_recreated_pod_or_one_of_another_node_is_refused(client, api):
    p = api.create(be("spark-1"))
    other = api.create(be("spark-2", node="n2"))
    stale = Eviction("not-the-uid", "batch/spark-1", reason="r", plugin="eviction")
    out = await NodeEvictor(client, "n1", clock=Clock())([stale, planned(other)])
    assert [o.outcome for o in out] == ["refused", "refused"]
    assert "uid" in out[0].detail and "not on this node" in out[1].detail
    assert api.evictions == [] and p


async def test_rate_limit_and_the_evicted_pods_cache(client):
    async with FakeApiServer(graceful_deletes=True) as api:
        from koordfw.engines.kube.client import KubeClient

        async with KubeClient(api.url, qps=0) as c:
            pods = [api.create(be(f"spark-{i}")) for i in range(3)]
            clock = Clock()
            ev = NodeEvictor(c, "n1", max_per_minute=2, clock=clock)
            out = await ev([planned(p) for p in pods])
            assert [o.outcome for o in out] == ["evicted", "evicted", "rate-limited"]
            clock.t += 30
            out = await ev([planned(pods[0])])  # still terminating: not evicted again
            assert [o.outcome for o in out] == ["already-evicted"]
            clock.t += 31
            out = await ev([planned(pods[2])])
            assert [o.outcome for o in out] == ["evicted"]
            assert len(api.evictions) == 3


async def test_a_disruption_budget_leaves_the_pod_and_records_a_failure(client, api):
    p = api.create(be("spark-1"))
    api.create(pdb("keep", {"app": "spark-1"}, 0, ns="batch"))
    out = await NodeEvictor(client, "n1", clock=Clock())([planned(p)])
    assert [(o.outcome, o.detail) for o in out] == [("failed", "disruption budget")]
    assert api.get("pods", "spark-1", "batch") is not None
    assert [e["reason"] for e in api.objects["events"].values()] == ["evictPodFail"]
    # not cached: the next round may try again
    out = await NodeEvictor(client, "n1", clock=Clock())([planned(p)])
    assert out[0].outcome == "failed"


async def test_a_vanished_pod_fails_quietly(client, api):
    out = await NodeEvictor(client, "n1", clock=Clock())([Eviction("u", "batch/gone", "r", "eviction")])
    assert out[0].outcome == "failed" and "gone" in out[0].detail


async def test_the_agent_on_a_cluster_evicts_be_pods_never_ls(client, api, tmp_path):
    from koordfw.agent.cgroups import CgroupLayout, detect_version
    from koordfw.agent.executor import Executor
    from koordfw.agent.loop import Agent, log_evictions
    from koordfw.core.plugins import Registry
    from koordfw.core.profile import profile_from_dict
    from koordfw.engines.kube.node import NodeOnCluster
    from koordfw.testing.cgroups import FakeNode

    api.create(node("n1", memory="32Gi"))
    b1 = api.create(be("spark-1"))
    b2 = api.create(be("spark-2"))
    ls = api.create(pod("web", ns="prod", node_name="n1", labels={"koordinator.sh/qosClass": "LS"}))
    fake = FakeNode(tmp_path)
    for p, mem in ((b1, 3), (b2, 1), (ls, 20)):
        fake.set_memory(fake.add_pod(p["metadata"]["uid"], "besteffort" if p is not ls else "burstable"), mem << 30)
    # 30 of 32 GiB used: 93 % ≥ 70 %; 32 GiB × 25 // 100 = 8 GiB: both BE pods (4 GiB), the LS pod never
    (fake.proc / "meminfo").write_text("MemTotal:       33554432 kB\nMemAvailable:    2097152 kB\n")

    def make(dry_run):
        reg = Registry(profile_from_dict({})).load(only={"eviction"})
        layout = CgroupLayout(fake.root, detect_version(fake.root), fake.driver, fake.kubepods)
        return Agent(reg, layout, Executor({"cgroup": fake.root}, dry_run=dry_run), interval=0.01, node_name="n1",
                     proc_root=str(fake.proc), sys_root=str(fake.sys))

    dry = make(True)
    on = NodeOnCluster(dry, client, publish_interval=None, topology_interval=None, device_interval=None)
    assert dry.evictor is log_evictions and on.evictor is not None  # --dry-run evicts nothing
    agent = make(False)
    on = NodeOnCluster(agent, client, publish_interval=None, topology_interval=None, device_interval=None)
    assert agent.evictor is on.evictor
    await on.run(once=True, handle_signals=False)
    assert [e.pod for e in agent.last_evictions] == ["batch/spark-1", "batch/spark-2"]
    assert sorted(api.evictions) == [("batch", "spark-1"), ("batch", "spark-2")]
    assert api.get("pods", "web", "prod") is not None
