"""Version skew by discovery, on the fake API server as the newest release and as Kubernetes 1.20: PodDisruptionBudget
and Eviction in ``policy/v1`` where served, else ``policy/v1beta1``; the fake's discovery documents themselves."""

from __future__ import annotations

import pytest
from kube_testkit import node, pdb, pod, running, wait_for

from koordfw import Eviction
from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import ApiError, KubeClient
from koordfw.engines.kube.discovery import Discovery, discovery_for, version_refused
from koordfw.engines.kube.engine import KubeSchedulerEngine
from koordfw.engines.kube.evictor import NodeEvictor, post_eviction
from koordfw.testing.fake_apiserver import NEWEST_VERSION, FakeApiServer

#: (fake release, the policy version PDB is served in, the Eviction version the subresource advertises)
RELEASES = [(NEWEST_VERSION, "v1", "policy/v1"), ("1.20", "v1beta1", "policy/v1beta1")]


def be(name, **kw):
    return pod(name, ns="batch", node_name="n1", labels={"koordinator.sh/qosClass": "BE", "app": name}, **kw)


@pytest.mark.parametrize(("release", "pdb_version", "eviction"), RELEASES)
async def test_the_fake_serves_discovery_as_the_release(release, pdb_version, eviction):
    async with FakeApiServer(version=release) as api, KubeClient(api.url, qps=0) as c:
        ver = await c.request("GET", "/version")
        assert (ver["major"], ver["minor"]) == ("1", release.split(".")[1])
        group = await c.request("GET", "/apis/policy")
        assert group["kind"] == "APIGroup" and [v["version"] for v in group["versions"]] == [pdb_version]
        assert group["preferredVersion"]["groupVersion"] == f"policy/{pdb_version}"
        groups = {g["name"] for g in (await c.request("GET", "/apis"))["groups"]}
        assert {"policy", "slo.koordinator.sh", "coordination.k8s.io"} <= groups
        core = {r["name"]: r for r in (await c.request("GET", "/api/v1"))["resources"]}
        assert "pods/status" in core and "nodes" in core
        assert f"{core['pods/eviction']['group']}/{core['pods/eviction']['version']}" == eviction
        plurals = {r["name"] for r in (await c.request("GET", f"/apis/policy/{pdb_version}"))["resources"]}
        assert {"poddisruptionbudgets", "poddisruptionbudgets/status"} <= plurals
        other = "v1beta1" if pdb_version == "v1" else "v1"
        with pytest.raises(ApiError) as e:
            await c.request("GET", f"/apis/policy/{other}/poddisruptionbudgets")
        assert e.value.status == 404
        ns = await c.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "vs-team"}})
        labels = ns["metadata"].get("labels") or {}
        # the automatic name label came with 1.21 (NamespaceDefaultLabelName)
        assert labels == ({} if release == "1.20" else {"kubernetes.io/metadata.name": "vs-team"})
        made = await c.request("POST", f"/apis/policy/{pdb_version}/namespaces/batch/poddisruptionbudgets",
                               body=pdb("p", {"app": "x"}, 0, ns="batch"))
        assert made["apiVersion"] == f"policy/{pdb_version}"


async def test_the_1_20_fake_refuses_a_policy_v1_eviction_as_that_release_does():
    async with FakeApiServer(version="1.20") as api, KubeClient(api.url, qps=0) as c:
        api.create(be("spark-1"))
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "spark-1", "namespace": "batch"}}
        with pytest.raises(ApiError) as e:
            await c.request("POST", "/api/v1/namespaces/batch/pods/spark-1/eviction", body=body)
        assert e.value.status == 400 and 'no kind "Eviction" is registered for version "policy/v1"' in e.value.message
        assert version_refused(e.value)
        assert api.evictions == []


def test_an_unknown_release_is_refused():
    with pytest.raises(ValueError, match="version must be one of"):
        FakeApiServer(version="1.19")


@pytest.mark.parametrize(("release", "pdb_version", "eviction"), RELEASES)
async def test_discovery_is_asked_once_per_client(release, pdb_version, eviction):
    async with FakeApiServer(version=release) as api, KubeClient(api.url, qps=0) as c:
        disc = discovery_for(c)
        assert discovery_for(c) is disc
        assert await disc.version("policy") == pdb_version
        assert await disc.eviction_version() == eviction
        asked = disc.requests
        assert await disc.version("policy") == pdb_version and await disc.eviction_version() == eviction
        assert disc.requests == asked
        assert await disc.served_versions("nosuch.example.com") == ()
        async with KubeClient(api.url, qps=0) as other:
            assert discovery_for(other) is not disc


@pytest.mark.parametrize(("release", "pdb_version", "eviction"), RELEASES)
async def test_the_agent_evicts_through_the_eviction_version_served(release, pdb_version, eviction):
    async with FakeApiServer(version=release) as api, KubeClient(api.url, qps=0) as c:
        p = api.create(be("spark-1"))
        guarded = api.create(be("spark-2"))
        api.create(pdb("keep", {"app": "spark-2"}, 0, ns="batch"))
        out = await NodeEvictor(c, "n1")([Eviction(p["metadata"]["uid"], "batch/spark-1", "r", "eviction"),
                                          Eviction(guarded["metadata"]["uid"], "batch/spark-2", "r", "eviction")])
        assert [o.outcome for o in out] == ["evicted", "failed"]
        assert out[1].detail == "disruption budget"  # the 429 of a PDB in policy/<pdb_version>
        assert api.evictions == [("batch", "spark-1")]
        assert await discovery_for(c).eviction_version() == eviction


async def test_a_stale_eviction_version_is_asked_again_and_the_eviction_retried():
    """A component that learnt ``policy/v1`` of another server (or before a downgrade) meets the 400 of a release
    without it: discovery is asked again and the eviction goes through in ``policy/v1beta1``."""
    async with FakeApiServer(version="1.20") as api, KubeClient(api.url, qps=0) as c:
        p = api.create(be("spark-1"))
        disc = discovery_for(c)
        disc._eviction = "policy/v1"
        await post_eviction(c, "batch", "spark-1", p["metadata"]["uid"])
        assert api.evictions == [("batch", "spark-1")]
        assert await disc.eviction_version() == "policy/v1beta1"
        posts = [r for r in api.requests if r == ("POST", "/api/v1/namespaces/batch/pods/spark-1/eviction")]
        assert len(posts) == 2


async def test_a_missing_pod_is_a_404_with_no_retry():
    async with FakeApiServer(version="1.20") as api, KubeClient(api.url, qps=0) as c:
        with pytest.raises(ApiError) as e:
            await post_eviction(c, "batch", "gone", "u")
        assert e.value.status == 404 and not version_refused(e.value)
        assert [r for r in api.requests if r[1].endswith("/eviction")] == [
            ("POST", "/api/v1/namespaces/batch/pods/gone/eviction")]


async def test_discovery_that_fails_is_not_cached():
    async with FakeApiServer() as api, KubeClient(api.url, qps=0) as c:
        api.fail(500, path="/api/v1", count=1, method="GET")
        disc = Discovery(c)
        assert await disc.eviction_version() == "policy/v1"  # the newest, assumed
        assert disc._eviction is None


@pytest.mark.parametrize(("release", "pdb_version", "eviction"), RELEASES)
async def test_preemption_sees_a_pdb_of_the_version_served(release, pdb_version, eviction):
    """``guarded`` (priority 0) has a PDB allowing no disruption, ``free`` (priority 10) none: with the PDB seen,
    kube's victim selection reprieves ``guarded`` first and preempts ``free``; blind to it, it would preempt the
    lower ``guarded``."""
    async with FakeApiServer(bookmark_interval=0.2, version=release) as api, KubeClient(api.url, qps=0) as c:
        api.create(node("n1", cpu="2"))
        api.create(pod("guarded", cpu="1", node_name="n1", priority=0, scheduler="other", labels={"app": "g"}))
        api.create(pod("free", cpu="1", node_name="n1", priority=10, scheduler="other"))
        api.create(pdb("guard", {"app": "g"}, 0))
        eng = KubeSchedulerEngine(build_registry(None, autoload=False), c)
        async with running(eng):
            refl = next(r for r in eng.reflectors if r.name == "PodDisruptionBudget")
            assert refl.available and refl.path == f"/apis/policy/{pdb_version}/poddisruptionbudgets"
            assert "PodDisruptionBudget" not in eng.health()["absentKinds"]
            assert len(eng.cluster.objects_of("PodDisruptionBudget")) == 1
            api.create(pod("high", cpu="1", priority=1000))
            await wait_for(lambda: api.get("pods", "free", "default") is None, what="free preempted")
        assert api.get("pods", "guarded", "default") is not None
