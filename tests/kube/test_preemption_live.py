"""Preemption in the live scheduler goes through the API (kube-scheduler's PrepareCandidate)."""

from __future__ import annotations

import types

import pytest
from kube_testkit import node, pod, running, wait_for

from koordfw.core.model import make_pod
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.engine import KubeSchedulerEngine, NotLeading
from koordfw.testing.fake_apiserver import FakeApiServer


async def test_preemption_deletes_the_victim_through_the_api_and_binds_the_preemptor():
    async with FakeApiServer(bookmark_interval=0.2) as api, KubeClient(api.url, qps=0) as client:
        api.create(node("n1", cpu="1"))
        low = api.create(pod("low", cpu="1", node_name="n1", priority=0, scheduler="other"))
        api.create(pod("high", cpu="1", priority=1000))
        eng = KubeSchedulerEngine(build_registry(None, autoload=False), client)
        async with running(eng):
            await wait_for(lambda: any(n == "n1" for _, n in api.bind_log), what="the preemptor bound")
            seen = [p["metadata"]["name"] for p in api.pods()]
        assert ("DELETE", "/api/v1/namespaces/default/pods/low") in api.requests
        assert api.get("pods", "low", "default") is None and "low" not in seen
        high = api.get("pods", "high", "default")
        assert high["spec"]["nodeName"] == "n1"
        # the victim was marked before it went, and never treated as a pod of ours
        patches = [r for r in api.requests if r == ("PATCH", "/api/v1/namespaces/default/pods/low/status")]
        assert len(patches) == 1
        assert low["metadata"]["uid"] not in eng.scheduler.queue.infos
        assert eng.preempted == 1


async def test_the_preemptor_is_nominated_in_its_status_while_the_victim_terminates():
    async with FakeApiServer(bookmark_interval=0.2) as api, KubeClient(api.url, qps=0) as client:
        api.create(node("n1", cpu="1"))
        api.create(pod("low", cpu="1", node_name="n1", priority=0, scheduler="other"))
        api.create(pod("high", cpu="1", priority=1000))
        api.fail(500, method="DELETE", path="/pods/low", count=10**6)  # the victim cannot go yet
        eng = KubeSchedulerEngine(build_registry(None, autoload=False), client)
        async with running(eng):
            await wait_for(lambda: (api.get("pods", "high", "default").get("status") or {}).get("nominatedNodeName")
                           == "n1", what="nominatedNodeName written")
            low = api.get("pods", "low", "default")
            conds = {c["type"]: c for c in (low.get("status") or {}).get("conditions") or []}
            assert conds["DisruptionTarget"]["reason"] == "PreemptionByScheduler"
            assert "PodScheduled" not in conds  # not ours: no scheduling status written on it
            assert "nodeName" not in api.get("pods", "high", "default")["spec"]


async def test_no_bind_or_preemption_once_leadership_is_lost():
    async with FakeApiServer(bookmark_interval=0.2) as api, KubeClient(api.url, qps=0) as client:
        lease = types.SimpleNamespace(is_leader=True)
        eng = KubeSchedulerEngine(build_registry(None, autoload=False), client, leader_elector=lease)
        eng.started.set()
        p = make_pod("web", requests={"cpu": "1"})
        lease.is_leader = False
        with pytest.raises(NotLeading, match="not binding default/web"):
            await eng._bind(p, "n1", {})
        with pytest.raises(NotLeading, match="not preempting default/web"):
            await eng._preempt_victim(p, "test")
        assert api.bind_log == [] and not [r for r in api.requests if r[0] in ("POST", "DELETE", "PATCH")]


async def test_preemption_clears_the_nomination_of_lower_pods_on_the_node():
    """kube's prepareCandidate: a pod of lower priority nominated to the chosen node loses its
    nomination, in the kernel and in its status on the API."""
    async with FakeApiServer(bookmark_interval=0.2) as api, KubeClient(api.url, qps=0) as client:
        api.create(node("n1", cpu="1"))
        api.create(pod("low", cpu="1", node_name="n1", priority=0, scheduler="other"))
        mid = pod("mid", cpu="1", priority=500, nodeSelector={"disk": "none-has-it"})
        mid["status"] = {"nominatedNodeName": "n1"}  # nominated before a restart, say
        api.create(mid)
        eng = KubeSchedulerEngine(build_registry(None, autoload=False), client)
        async with running(eng):
            await wait_for(lambda: eng.scheduler.nominator.nominated_pods("n1"), what="mid counted on n1")
            api.create(pod("high", cpu="1", priority=1000))
            await wait_for(lambda: any(n == "n1" for _, n in api.bind_log), what="the preemptor bound")
            await wait_for(lambda: not (api.get("pods", "mid", "default").get("status") or {})
                           .get("nominatedNodeName"), what="mid's nomination cleared")
        assert not eng.scheduler.nominator.nominated_pods("n1")
