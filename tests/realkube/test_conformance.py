"""The fake stays honest (issue #30, point 8): the API behaviours koordfw relies on, asserted the same way on
koordfw.testing's FakeApiServer (what the fast tests in tests/kube/ run against) and on a real kube-apiserver
(``kube_plane``). Each test runs twice, ``[fake]`` and ``[real]``; where the two differ the fake is fixed, or
(a deliberate, harmless difference) the fake's docstring says so and the test skips that backend naming why.

Every name a test makes starts with ``cf-``; the real plane's sweep removes the namespaces and nodes after each
test, the few cluster-scoped objects a test adds besides (PriorityClasses, NodeMetrics) are deleted by it."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from aiohttp import web

from koordfw.engines.kube.client import ApiError, KubeClient
from koordfw.testing.control_plane import ControlPlane
from koordfw.testing.fake_apiserver import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]
PODS = "/api/v1/namespaces/{ns}/pods"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
NODEMETRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"


@attrs.define
class Backend:
    """One API server under test: ``fake`` (a FakeApiServer in this event loop) or ``real`` (the session's
    kube-apiserver v1.20)."""

    name: str
    url: str
    api: FakeApiServer | None = None
    plane: ControlPlane | None = None
    #: the server's Kubernetes minor version (the fake models the newest API)
    minor: int = 99

    def client(self) -> KubeClient:
        if self.plane is not None:
            return self.plane.client()  # type: ignore[no-any-return]
        return KubeClient(self.url, qps=0)

    async def namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        if self.plane is not None:
            self.plane.create_namespace(name, labels)  # waits for its default ServiceAccount
            if self.minor < 24:  # and its token Secret, without which ServiceAccount admission refuses pods
                with anyio.fail_after(30):
                    while not self.plane.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").get(
                            "secrets"):
                        await anyio.sleep(0.1)
        else:
            assert self.api is not None
            self.api.create({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": name, "labels": dict(labels or {})}})
        return name

    async def node(self, name: str) -> None:
        if self.plane is not None:
            self.plane.add_node(name, cpu="4", memory="8Gi")
        else:
            assert self.api is not None
            res = {"cpu": "4", "memory": "8Gi", "pods": "110"}
            self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                             "status": {"capacity": res, "allocatable": res,
                                        "conditions": [{"type": "Ready", "status": "True"}]}})

    async def compact(self) -> None:
        """etcd compaction at the current revision."""
        if self.plane is not None:
            self.plane.compact_etcd()
        else:
            assert self.api is not None
            self.api.compact()

    async def nodemetric_crd(self) -> None:
        if self.plane is not None:
            self.plane.apply_file(ROOT / "deploy" / "00-crd-nodemetric.yaml")


@pytest.fixture(params=["fake", "real"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "fake":
        async with FakeApiServer(bookmark_interval=0.2) as api:
            yield Backend("fake", api.url, api=api)
    else:
        plane: ControlPlane = request.getfixturevalue("kube_plane")
        minor = int("".join(ch for ch in plane.request("GET", "/version")["minor"] if ch.isdigit()))
        yield Backend("real", plane.url, plane=plane, minor=minor)


def pod(name: str, **spec: Any) -> dict:
    s: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": s}


async def failure(aw: Awaitable[Any]) -> ApiError:
    try:
        await aw
    except ApiError as e:
        return e
    raise AssertionError("the request succeeded")


async def events_of(c: KubeClient, path: str, params: dict[str, Any], timeout: float,
                    on_event: Callable[[dict], Awaitable[None]] | None = None) -> list[dict]:
    """Every event of a watch until the server ends it (``timeoutSeconds``); ``on_event`` is awaited after
    each (to write while the watch is open)."""
    out: list[dict] = []
    with anyio.fail_after(timeout + 10):
        async for ev in c.watch(path, {**params, "timeoutSeconds": int(timeout)}, timeout=timeout):
            out.append(ev)
            if on_event is not None:
                await on_event(ev)
    return out


def cf_names(doc: dict) -> list[str]:
    """The names of a list's items that a test made (``cf-*``), sorted."""
    return sorted(o["metadata"]["name"] for o in doc["items"] if o["metadata"]["name"].startswith("cf-"))


def rv(obj: dict) -> int:
    return int(obj["metadata"]["resourceVersion"])


# -- list and watch -----------------------------------------------------------------------------------------

async def test_paged_list_is_one_consistent_snapshot(backend):
    ns = await backend.namespace("cf-page")
    path = f"/api/v1/namespaces/{ns}/configmaps"
    async with backend.client() as c:
        # (a controller-manager puts kube-root-ca.crt in every namespace; the fake has none: its "k" sorts last)
        others = len((await c.request("GET", path))["items"])
        for i in range(5):
            await c.request("POST", path, body={"metadata": {"name": f"cf-{i}"}, "data": {"i": str(i)}})
        first = await c.request("GET", path, params={"limit": 2})
        assert [o["metadata"]["name"] for o in first["items"]] == ["cf-0", "cf-1"]
        assert first["metadata"]["remainingItemCount"] == 3 + others and first["metadata"]["continue"]
        await c.request("POST", path, body={"metadata": {"name": "cf-5"}})  # after the snapshot
        await c.request("DELETE", f"{path}/cf-4")
        names, cont, rvs = [], first["metadata"]["continue"], {first["metadata"]["resourceVersion"]}
        while cont:
            page = await c.request("GET", path, params={"limit": 2, "continue": cont})
            names += [o["metadata"]["name"] for o in page["items"] if o["metadata"]["name"].startswith("cf-")]
            cont = page["metadata"].get("continue")
            rvs.add(page["metadata"]["resourceVersion"])
        assert names == ["cf-2", "cf-3", "cf-4"]  # the snapshot's: cf-4 still there, cf-5 not yet
        assert len(rvs) == 1
        e = await failure(c.request("GET", path, params={"limit": 2, "continue": first["metadata"]["continue"],
                                                         "resourceVersion": "1"}))
        assert e.status == 400


async def test_watch_from_a_lists_resource_version_replays_in_order_with_bookmarks(backend):
    ns = await backend.namespace("cf-watch")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        start = (await c.request("GET", path))["metadata"]["resourceVersion"]
        created = await c.request("POST", path, body=pod("cf-w"))
        patched = await c.request("PATCH", f"{path}/cf-w", body={"metadata": {"labels": {"cf": "1"}}},
                                  content_type="application/merge-patch+json")
        deleted = await c.request("DELETE", f"{path}/cf-w")

        async def then_write(ev: dict) -> None:
            # v1.20's watch cache sends a bookmark (2 s before the watch's timeout) only after an event that
            # came in while the watch was open: make one once the replay is done
            if ev["type"] == "DELETED":
                await c.request("POST", path, body=pod("cf-w2"))

        evs = await events_of(c, path, {"resourceVersion": start, "allowWatchBookmarks": True}, 5, then_write)
    real = [e for e in evs if e["type"] != "BOOKMARK"]
    # a pod's DELETE is graceful: deletionTimestamp is written first (grace 0 for an unbound pod), then it goes
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in real] == [
        ("ADDED", "cf-w"), ("MODIFIED", "cf-w"), ("MODIFIED", "cf-w"), ("DELETED", "cf-w"), ("ADDED", "cf-w2")]
    assert [rv(e["object"]) for e in real[:2]] == [rv(created), rv(patched)]
    assert rv(created) < rv(patched) < rv(real[2]["object"]) < rv(real[3]["object"])
    marked = real[2]["object"]["metadata"]
    assert marked["deletionTimestamp"] and marked["deletionGracePeriodSeconds"] == 0
    assert real[3]["object"]["metadata"]["uid"] == deleted["metadata"]["uid"]
    assert real[3]["object"]["metadata"]["deletionTimestamp"]
    bookmarks = [e for e in evs if e["type"] == "BOOKMARK"]
    assert bookmarks, "no bookmark within the watch"
    for b in bookmarks:
        assert b["object"]["kind"] == "Pod" and b["object"]["apiVersion"] == "v1"
        assert b["object"]["metadata"]["resourceVersion"].isdigit()
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) >= rv(real[4]["object"])


async def test_watch_with_a_field_selector_says_deleted_when_an_object_stops_matching(backend):
    ns = await backend.namespace("cf-wsel")
    await backend.node("cf-wsel-n")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        start = (await c.request("GET", path))["metadata"]["resourceVersion"]
        await c.request("POST", path, body=pod("cf-a"))
        await c.request("POST", f"{path}/cf-a/binding", body={"metadata": {"name": "cf-a"},
                                                              "target": {"kind": "Node", "name": "cf-wsel-n"}})
        evs = await events_of(c, path, {"resourceVersion": start, "fieldSelector": "spec.nodeName="}, 1)
    assert [e["type"] for e in evs] == ["ADDED", "DELETED"]
    gone = evs[1]["object"]
    assert not gone["spec"].get("nodeName")  # the last state that matched, at the binding's resourceVersion
    assert rv(gone) > rv(evs[0]["object"])


async def test_list_resource_version_semantics(backend):
    ns = await backend.namespace("cf-rv")
    path = f"/api/v1/namespaces/{ns}/configmaps"
    async with backend.client() as c:
        a = await c.request("POST", path, body={"metadata": {"name": "cf-a"}})
        at_a = (await c.request("GET", path))["metadata"]["resourceVersion"]
        b = await c.request("POST", path, body={"metadata": {"name": "cf-b"}})
        # opaque strings, in practice increasing with every write; an update bumps it, a no-op does not
        assert isinstance(a["metadata"]["resourceVersion"], str) and rv(a) < rv(b)
        a2 = await c.request("PATCH", f"{path}/cf-a", body={"data": {"k": "v"}},
                             content_type="application/merge-patch+json")
        assert rv(a2) > rv(b)
        same = await c.request("PATCH", f"{path}/cf-a", body={"data": {"k": "v"}},
                               content_type="application/merge-patch+json")
        assert same["metadata"]["resourceVersion"] == a2["metadata"]["resourceVersion"]

        # resourceVersion=0: any state (the watch cache), whole: the limit is not applied
        zero = await c.request("GET", path, params={"resourceVersion": "0", "limit": 1})
        assert cf_names(zero) == ["cf-a", "cf-b"]
        assert not zero["metadata"].get("continue")
        # NotOlderThan: the newest state, at least that version
        nto = await c.request("GET", path, params={"resourceVersion": at_a, "resourceVersionMatch": "NotOlderThan"})
        assert cf_names(nto) == ["cf-a", "cf-b"]
        assert int(nto["metadata"]["resourceVersion"]) >= rv(a2)
        # Exact: the state at that version
        exact = await c.request("GET", path, params={"resourceVersion": at_a, "resourceVersionMatch": "Exact"})
        assert cf_names(exact) == ["cf-a"]
        assert exact["metadata"]["resourceVersion"] == at_a
        assert "data" not in [o for o in exact["items"] if o["metadata"]["name"] == "cf-a"][0]
        # the options' validation
        e = await failure(c.request("GET", path, params={"resourceVersionMatch": "NotOlderThan"}))
        assert (e.status, e.reason) == (422, "Invalid")
        assert "resourceVersionMatch is forbidden unless resourceVersion is provided" in e.message


async def test_list_from_a_resource_version_ahead_of_the_server_is_too_large(backend):
    ns = await backend.namespace("cf-large")
    async with backend.client() as c:
        cur = int((await c.request("GET", f"/api/v1/namespaces/{ns}/configmaps"))["metadata"]["resourceVersion"])
        e = await failure(c.request("GET", f"/api/v1/namespaces/{ns}/configmaps", timeout=30, params={
            "resourceVersion": str(cur + 100_000), "resourceVersionMatch": "NotOlderThan"}))
    assert e.status == 504 and e.too_large_resource_version


async def test_compaction_expires_old_versions_where_etcd_serves_them(backend):
    """etcd compaction: a LIST at an exact old version, a continue token from before it, and a watch of a
    kind the API server keeps no watch cache for (events) from before it all answer 410 Expired; a watch of
    a cached kind (pods, configmaps) from a version still in the watch cache's window is served from it."""
    ns = await backend.namespace("cf-compact")
    cms, evs = f"/api/v1/namespaces/{ns}/configmaps", f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
    async with backend.client() as c:
        for i in range(3):
            await c.request("POST", cms, body={"metadata": {"name": f"cf-{i}"}})
        page = await c.request("GET", cms, params={"limit": 1})
        old = page["metadata"]["resourceVersion"]
        old_events = (await c.request("GET", evs))["metadata"]["resourceVersion"]
        await c.request("POST", evs, body={
            "metadata": {"name": "cf-ev"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "CfTest",
            "type": "Normal", "action": "Test", "reportingController": "koordfw.io/cf", "reportingInstance": "cf",
            "regarding": {"kind": "Pod", "namespace": ns, "name": "cf-x"}})
        await c.request("POST", cms, body={"metadata": {"name": "cf-after"}})
        await backend.compact()

        e = await failure(c.request("GET", cms, params={"resourceVersion": old, "resourceVersionMatch": "Exact"}))
        assert (e.status, e.reason, e.message) == (410, "Expired", "The resourceVersion for the provided list is too old.")
        e = await failure(c.request("GET", cms, params={"limit": 1, "continue": page["metadata"]["continue"]}))
        assert (e.status, e.reason) == (410, "Expired")
        assert e.message.startswith("The provided continue parameter is too old to display a consistent list result.")

        gone = await events_of(c, evs, {"resourceVersion": old_events}, 1)
        assert [e["type"] for e in gone] == ["ERROR"]
        assert {k: gone[0]["object"][k] for k in ("kind", "code", "reason")} == {
            "kind": "Status", "code": 410, "reason": "Expired"}

        cached = await events_of(c, cms, {"resourceVersion": old}, 1)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in cached] == [("ADDED", "cf-after")]


async def test_watch_from_before_the_watch_cache_window_is_expired(backend):
    """A watch from a resourceVersion older than what the watch cache holds: a 200 stream with one ERROR
    event, 410 Expired ``too old resource version: <asked> (<oldest>)``. A real server's watch cache of a
    kind begins when the kind is served (here: a CRD made now; the built-in kinds' caches began with etcd
    empty, and v1.20 grows a cache to keep 75 s of events), so a version from before is older than it; the
    fake's history begins at its first write (resourceVersion 1000)."""
    async with backend.client() as c:
        if backend.plane is not None:
            before = (await c.request("GET", "/api/v1/namespaces"))["metadata"]["resourceVersion"]
            backend.plane.apply({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "cfwindows.conformance.koordfw.io"},
                "spec": {"group": "conformance.koordfw.io", "scope": "Cluster",
                         "names": {"kind": "CfWindow", "plural": "cfwindows", "listKind": "CfWindowList"},
                         "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                             "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
            path = "/apis/conformance.koordfw.io/v1/cfwindows"
            with anyio.fail_after(10):  # served once discovery has it
                while True:
                    try:
                        await c.request("GET", path)
                        break
                    except ApiError:
                        await anyio.sleep(0.1)
        else:
            before, path = "1", "/api/v1/pods"
        try:
            evs = await events_of(c, path, {"resourceVersion": before}, 1)
        finally:
            if backend.plane is not None:
                backend.plane.request("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                      "cfwindows.conformance.koordfw.io")
    assert [e["type"] for e in evs] == ["ERROR"]
    st = evs[0]["object"]
    assert (st["kind"], st["code"], st["reason"]) == ("Status", 410, "Expired")
    assert st["message"].startswith(f"too old resource version: {before} (")


# -- selectors -------------------------------------------------------------------------------------------

async def test_field_selectors_on_pods(backend):
    ns = await backend.namespace("cf-fsel")
    await backend.node("cf-fsel-n")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        await c.request("POST", path, body=pod("cf-default"))
        await c.request("POST", path, body=pod("cf-koord", schedulerName="koord-scheduler"))
        await c.request("POST", path, body=pod("cf-bound"))
        await c.request("POST", f"{path}/cf-bound/binding", body={"metadata": {"name": "cf-bound"},
                                                                  "target": {"name": "cf-fsel-n"}})
        await c.request("PATCH", f"{path}/cf-koord/status", body={"status": {"phase": "Succeeded"}},
                        content_type="application/merge-patch+json")

        async def names(sel: str, where: str = path) -> list[str]:
            items = (await c.request("GET", where, params={"fieldSelector": sel}))["items"]
            return sorted(o["metadata"]["name"] for o in items if o["metadata"]["namespace"] == ns)

        assert await names("spec.nodeName=cf-fsel-n") == ["cf-bound"]
        assert await names("spec.nodeName=cf-fsel-n", "/api/v1/pods") == ["cf-bound"]
        assert await names("spec.nodeName=") == ["cf-default", "cf-koord"]
        assert await names("spec.schedulerName=koord-scheduler") == ["cf-koord"]
        assert await names("spec.schedulerName!=koord-scheduler") == ["cf-bound", "cf-default"]
        assert await names("status.phase!=Succeeded,status.phase!=Failed") == ["cf-bound", "cf-default"]
        assert await names("metadata.name=cf-default") == ["cf-default"]
        assert await names("metadata.name==cf-default,spec.nodeName=") == ["cf-default"]
        e = await failure(names("spec.priority=0"))
        assert (e.status, e.reason, e.message) == (400, "BadRequest", "field label not supported: spec.priority")


async def test_label_selectors(backend):
    ns = await backend.namespace("cf-lsel")
    path = f"/api/v1/namespaces/{ns}/configmaps"
    async with backend.client() as c:
        for name, labels in (("cf-a", {"tier": "be", "app": "x"}), ("cf-b", {"tier": "ls"}),
                             ("cf-c", {"app": "y"}), ("cf-d", {})):
            await c.request("POST", path, body={"metadata": {"name": name, "labels": labels}})

        async def names(sel: str) -> list[str]:
            return cf_names(await c.request("GET", path, params={"labelSelector": sel}))

        assert await names("tier=be") == ["cf-a"]
        assert await names("tier==be") == ["cf-a"]
        assert await names("tier!=be") == ["cf-b", "cf-c", "cf-d"]  # a missing label is "not be"
        assert await names("tier in (be,ls)") == ["cf-a", "cf-b"]
        assert await names("tier notin (be)") == ["cf-b", "cf-c", "cf-d"]
        assert await names("app") == ["cf-a", "cf-c"]
        assert await names("!app") == ["cf-b", "cf-d"]
        assert await names("app,tier=be") == ["cf-a"]
        assert await names("tier in (be, ls),app notin (x)") == ["cf-b"]
        assert await names("") == ["cf-a", "cf-b", "cf-c", "cf-d"]
        e = await failure(names("tier inn (x)"))
        assert (e.status, e.reason) == (400, "BadRequest") and "unable to parse requirement" in e.message
        # a watch filters the same way
        start = (await c.request("GET", path))["metadata"]["resourceVersion"]
        await c.request("POST", path, body={"metadata": {"name": "cf-e", "labels": {"tier": "be"}}})
        await c.request("POST", path, body={"metadata": {"name": "cf-f", "labels": {"tier": "ls"}}})
        evs = await events_of(c, path, {"resourceVersion": start, "labelSelector": "tier=be"}, 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [("ADDED", "cf-e")]


# -- subresources ---------------------------------------------------------------------------------------

async def test_binding_subresource(backend):
    ns = await backend.namespace("cf-bind")
    await backend.node("cf-bind-n")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        p = await c.request("POST", path, body=pod("cf-p"))
        q = await c.request("POST", path, body=pod("cf-q"))
        if backend.minor >= 21:
            # with a uid precondition that does not hold: 409 (v1.20's BindingREST ignores the binding's uid)
            e = await failure(c.request("POST", f"{path}/cf-p/binding", body={
                "metadata": {"name": "cf-p", "uid": q["metadata"]["uid"]}, "target": {"name": "cf-bind-n"}}))
            assert (e.status, e.reason) == (409, "Conflict")
            assert e.message.startswith('Operation cannot be fulfilled on pods/binding "cf-p": StorageError: invalid '
                                        "object, Code: 4, Key: /registry/pods/cf-bind/cf-p, ResourceVersion: 0, "
                                        "AdditionalErrorMsg: Precondition failed: UID in precondition: ")
        ok = await c.request("POST", f"{path}/cf-p/binding", body={
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "cf-p", "uid": p["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "cf-bind-n"}})
        assert (ok["kind"], ok["status"], ok["code"]) == ("Status", "Success", 201)
        await c.request("POST", f"{path}/cf-q/binding", body={"metadata": {"name": "cf-q"},
                                                              "target": {"name": "cf-bind-n"}})
        got = await c.request("GET", f"{path}/cf-p")
        assert got["spec"]["nodeName"] == "cf-bind-n"
        cond = {x["type"]: x for x in got["status"]["conditions"]}["PodScheduled"]
        assert cond["status"] == "True" and cond["lastTransitionTime"]
        # already bound: 409 with the server's message and details
        e = await failure(c.request("POST", f"{path}/cf-p/binding", body={"metadata": {"name": "cf-p"},
                                                                          "target": {"name": "cf-other"}}))
        assert (e.status, e.reason) == (409, "Conflict")
        assert e.message == 'Operation cannot be fulfilled on pods/binding "cf-p": pod cf-p is already assigned to ' \
                            'node "cf-bind-n"'
        assert e.body["details"] == {"name": "cf-p", "kind": "pods/binding"}
        e = await failure(c.request("POST", f"{path}/cf-none/binding", body={"metadata": {"name": "cf-none"},
                                                                             "target": {"name": "cf-bind-n"}}))
        assert (e.status, e.reason, e.message) == (404, "NotFound", 'pods "cf-none" not found')


async def policy_version(c: KubeClient) -> str:
    """The policy group's version this server prefers (policy/v1, or policy/v1beta1 before 1.21)."""
    try:
        doc = await c.request("GET", "/apis/policy")
    except ApiError as e:
        if e.status != 404:
            raise
        return "policy/v1"  # the fake serves no discovery of its own yet
    return str(doc["preferredVersion"]["groupVersion"])


async def test_eviction_subresource(backend):
    ns = await backend.namespace("cf-evict")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        gv = await policy_version(c)
        await c.request("POST", path, body=pod("cf-free"))
        await c.request("POST", path, body={**pod("cf-kept"), "metadata": {"name": "cf-kept", "labels": {"cf": "pdb"}}})
        await c.request("PATCH", f"{path}/cf-kept/status", body={"status": {"phase": "Running"}},
                        content_type="application/merge-patch+json")
        await c.request("POST", f"/apis/{gv}/namespaces/{ns}/poddisruptionbudgets", body={
            "apiVersion": gv, "kind": "PodDisruptionBudget", "metadata": {"name": "cf-pdb"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"cf": "pdb"}}}})

        def eviction(name: str) -> dict:
            return {"apiVersion": gv, "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}

        # a pod no budget covers is evicted (deleted: at once, it is unbound)
        ok = await c.request("POST", f"{path}/cf-free/eviction", body=eviction("cf-free"))
        assert (ok["kind"], ok["status"], ok["code"]) == ("Status", "Success", 201)
        e = await failure(c.request("GET", f"{path}/cf-free"))
        assert e.status == 404
        # a Running one is refused while the budget allows no disruption
        e = await failure(c.request("POST", f"{path}/cf-kept/eviction", body=eviction("cf-kept")))
        assert (e.status, e.reason) == (429, "TooManyRequests")
        assert e.message == "Cannot evict pod as it would violate the pod's disruption budget."
        assert [x["reason"] for x in e.body["details"]["causes"]] == ["DisruptionBudget"]
        e = await failure(c.request("POST", f"{path}/cf-none/eviction", body=eviction("cf-none")))
        assert (e.status, e.reason) == (404, "NotFound")


# -- writes: patches, status, conflicts, errors --------------------------------------------------------------

async def test_patch_types(backend):
    ns = await backend.namespace("cf-patch")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        await c.request("POST", path, body={**pod("cf-p"), "metadata": {"name": "cf-p", "labels": {"a": "1", "b": "2"}}})
        # JSON merge patch: maps merge, null removes, lists are replaced
        p = await c.request("PATCH", f"{path}/cf-p", body={"metadata": {"labels": {"a": None, "c": "3"}}},
                            content_type="application/merge-patch+json")
        assert p["metadata"]["labels"] == {"b": "2", "c": "3"}
        # strategic merge patch on pods/status: conditions merge on their type
        st = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"},
                             {"type": "Ready", "status": "False"}]}
        await c.request("PATCH", f"{path}/cf-p/status", body={"status": st},
                        content_type="application/strategic-merge-patch+json")
        p = await c.request("PATCH", f"{path}/cf-p/status", body={"status": {"conditions": [
            {"type": "PodScheduled", "status": "True", "reason": None, "message": None}]}},
            content_type="application/strategic-merge-patch+json")
        conds = {x["type"]: x for x in p["status"]["conditions"]}
        assert set(conds) == {"PodScheduled", "Ready"}
        assert conds["PodScheduled"]["status"] == "True" and "reason" not in conds["PodScheduled"]
        assert conds["Ready"]["status"] == "False"
        # strategic merge patch on the spec: containers merge on their name
        p = await c.request("PATCH", f"{path}/cf-p", body={"spec": {"containers": [
            {"name": "app", "image": "registry.k8s.io/pause:3.10"}]}},
            content_type="application/strategic-merge-patch+json")
        assert [(x["name"], x["image"]) for x in p["spec"]["containers"]] == [("app", "registry.k8s.io/pause:3.10")]
        assert p["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"  # kept
        # JSON patch (RFC 6902)
        p = await c.request("PATCH", f"{path}/cf-p", body=[
            {"op": "test", "path": "/metadata/labels/b", "value": "2"},
            {"op": "add", "path": "/metadata/annotations", "value": {"x/y": "z"}},
            {"op": "replace", "path": "/metadata/labels/c", "value": "4"},
            {"op": "remove", "path": "/metadata/labels/b"}], content_type="application/json-patch+json")
        assert p["metadata"]["labels"] == {"c": "4"} and p["metadata"]["annotations"] == {"x/y": "z"}
        e = await failure(c.request("PATCH", f"{path}/cf-p", body=[
            {"op": "test", "path": "/metadata/labels/c", "value": "5"}], content_type="application/json-patch+json"))
        assert e.status == 422 and e.reason == "Invalid"


async def test_status_subresource_pods_and_nodes(backend):
    ns = await backend.namespace("cf-status")
    await backend.node("cf-status-n")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        # create drops a pod's status: it starts Pending
        p = await c.request("POST", path, body={**pod("cf-p"), "status": {"phase": "Running", "podIP": "10.0.0.1"}})
        assert p["status"]["phase"] == "Pending" and "podIP" not in p["status"]
        assert p["status"]["qosClass"] == "BestEffort"
        # the main resource ignores status; /status ignores everything else
        p["status"] = {"phase": "Failed"}
        p["metadata"]["labels"] = {"cf": "x"}
        p = await c.request("PUT", f"{path}/cf-p", body=p)
        assert p["status"]["phase"] == "Pending" and p["metadata"]["labels"] == {"cf": "x"}
        p = await c.request("PATCH", f"{path}/cf-p", body={"status": {"phase": "Failed"}},
                            content_type="application/merge-patch+json")
        assert p["status"]["phase"] == "Pending"
        p["status"]["phase"] = "Running"
        p["metadata"]["labels"] = {"cf": "y"}
        p["spec"]["activeDeadlineSeconds"] = 5
        p = await c.request("PUT", f"{path}/cf-p/status", body=p)
        # a pod's (and a node's) status strategy keeps the old spec, but not the old labels
        assert p["status"]["phase"] == "Running" and p["metadata"]["labels"] == {"cf": "y"}
        assert "activeDeadlineSeconds" not in p["spec"]
        n = await c.request("PATCH", "/api/v1/nodes/cf-status-n", body={"status": {"allocatable": {"cpu": "99"}}},
                            content_type="application/merge-patch+json")
        assert n["status"]["allocatable"]["cpu"] == "4"
        n = await c.request("PATCH", "/api/v1/nodes/cf-status-n/status", body={"status": {"allocatable": {"cpu": "3"}}},
                            content_type="application/strategic-merge-patch+json")
        assert n["status"]["allocatable"]["cpu"] == "3" and n["status"]["allocatable"]["memory"] == "8Gi"


async def test_status_subresource_of_a_custom_resource(backend):
    await backend.nodemetric_crd()
    name = f"cf-nm-{backend.name}"
    async with backend.client() as c:
        try:
            created = await c.request("POST", NODEMETRICS, body={
                "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
                "status": {"updateTime": "2026-01-01T00:00:00Z"}})
            assert "status" not in created or not created["status"]
            cur = dict(created, status={"updateTime": "2026-01-01T00:00:00Z"})
            put = await c.request("PUT", f"{NODEMETRICS}/{name}", body=cur)
            assert not put.get("status")
            put["status"] = {"updateTime": "2026-01-01T00:00:01Z"}
            put["spec"] = {"metricCollectPolicy": {"reportIntervalSeconds": 1}}
            st = await c.request("PUT", f"{NODEMETRICS}/{name}/status", body=put)
            assert st["status"] == {"updateTime": "2026-01-01T00:00:01Z"}
            assert st["spec"] == {"metricCollectPolicy": {"reportIntervalSeconds": 60}}
            # a stale resourceVersion: 409, the group-qualified resource in the message
            e = await failure(c.request("PUT", f"{NODEMETRICS}/{name}/status", body=put))
            assert (e.status, e.reason) == (409, "Conflict")
            assert e.message == (f'Operation cannot be fulfilled on nodemetrics.slo.koordinator.sh "{name}": the '
                                 "object has been modified; please apply your changes to the latest version and try "
                                 "again")
            assert e.body["details"] == {"name": name, "group": "slo.koordinator.sh", "kind": "nodemetrics"}
        finally:
            await c.request("DELETE", f"{NODEMETRICS}/{name}")
        e = await failure(c.request("GET", f"{NODEMETRICS}/{name}"))
        assert (e.status, e.reason, e.message) == (404, "NotFound", f'nodemetrics.slo.koordinator.sh "{name}" not found')
        assert e.body["details"] == {"name": name, "group": "slo.koordinator.sh", "kind": "nodemetrics"}


async def test_conflicts_and_not_found_shapes(backend):
    ns = await backend.namespace("cf-errors")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        p = await c.request("POST", path, body=pod("cf-p"))
        await c.request("PATCH", f"{path}/cf-p", body={"metadata": {"labels": {"v": "2"}}},
                        content_type="application/merge-patch+json")
        e = await failure(c.request("PUT", f"{path}/cf-p", body=p))  # p's resourceVersion is stale now
        assert (e.status, e.reason) == (409, "Conflict")
        assert e.message == ('Operation cannot be fulfilled on pods "cf-p": the object has been modified; please '
                             "apply your changes to the latest version and try again")
        assert e.body["details"] == {"name": "cf-p", "kind": "pods"}
        e = await failure(c.request("POST", path, body=pod("cf-p")))
        assert (e.status, e.reason, e.message) == (409, "AlreadyExists", 'pods "cf-p" already exists')
        assert e.body["details"] == {"name": "cf-p", "kind": "pods"}
        e = await failure(c.request("GET", f"{path}/cf-none"))
        assert e.status == 404
        assert {k: e.body[k] for k in ("kind", "apiVersion", "status", "reason", "code", "message", "details")} == {
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
            "message": 'pods "cf-none" not found', "details": {"name": "cf-none", "kind": "pods"}}
        e = await failure(c.request("DELETE", f"{path}/cf-none"))
        assert (e.status, e.message) == (404, 'pods "cf-none" not found')
        e = await failure(c.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/cf-none"))
        assert (e.status, e.message) == (404, 'leases.coordination.k8s.io "cf-none" not found')
        assert e.body["details"] == {"name": "cf-none", "group": "coordination.k8s.io", "kind": "leases"}


# -- defaulting and admission --------------------------------------------------------------------------------

async def test_pod_defaults(backend):
    ns = await backend.namespace("cf-defaults")
    path = PODS.format(ns=ns)
    async with backend.client() as c:
        p = await c.request("POST", path, body=pod("cf-p", containers=[
            {"name": "app", "image": "registry.k8s.io/pause:3.9", "resources": {"limits": {"cpu": "1"}}},
            {"name": "latest", "image": "busybox"}]))
        s = p["spec"]
        assert (s["restartPolicy"], s["dnsPolicy"], s["terminationGracePeriodSeconds"]) == ("Always", "ClusterFirst", 30)
        assert s["schedulerName"] == "default-scheduler"
        assert s["serviceAccountName"] == "default" and s["serviceAccount"] == "default"
        assert s["priority"] == 0 and s["preemptionPolicy"] == "PreemptLowerPriority"
        assert s["enableServiceLinks"] is True and s["securityContext"] == {}
        tol = {t["key"]: t for t in s["tolerations"]}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            assert tol[key] == {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        app, latest = s["containers"]
        assert (app["terminationMessagePath"], app["terminationMessagePolicy"]) == ("/dev/termination-log", "File")
        assert app["imagePullPolicy"] == "IfNotPresent" and latest["imagePullPolicy"] == "Always"
        assert app["resources"] == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}  # requests from limits
        assert p["status"] == {"phase": "Pending", "qosClass": "Burstable"}
        # the ServiceAccount's token: a volume mounted read-only in every container (v1.20: the token
        # Secret's; from v1.21 a projected kube-api-access-* volume)
        vols = {v["name"]: v for v in s["volumes"]}
        for ctr in s["containers"]:
            mount = [m for m in ctr["volumeMounts"] if m["mountPath"] == SA_MOUNT]
            assert len(mount) == 1 and mount[0]["readOnly"] is True
            vol = vols[mount[0]["name"]]
            assert (vol["name"].startswith("default-token-") and vol["secret"]["secretName"] == vol["name"]) or \
                (vol["name"].startswith("kube-api-access-") and "projected" in vol), vol
        # a toleration of its own for not-ready is kept, and only unreachable's default added
        own = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
        q = await c.request("POST", path, body=pod("cf-q", tolerations=[own], automountServiceAccountToken=False,
                                                   restartPolicy="Never", terminationGracePeriodSeconds=5))
        assert q["spec"]["tolerations"] == [own, {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                                  "effect": "NoExecute", "tolerationSeconds": 300}]
        assert not q["spec"].get("volumes") and "volumeMounts" not in q["spec"]["containers"][0]
        assert (q["spec"]["restartPolicy"], q["spec"]["terminationGracePeriodSeconds"]) == ("Never", 5)


async def test_pod_priority_from_its_priority_class(backend):
    ns = await backend.namespace("cf-prio")
    path = PODS.format(ns=ns)
    pc = f"cf-batch-{backend.name}"
    async with backend.client() as c:
        await c.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body={
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc},
            "value": 5000, "preemptionPolicy": "Never"})
        try:
            p = await c.request("POST", path, body=pod("cf-p", priorityClassName=pc))
            assert (p["spec"]["priority"], p["spec"]["preemptionPolicy"]) == (5000, "Never")
            e = await failure(c.request("POST", path, body=pod("cf-q", priorityClassName="cf-missing")))
            assert (e.status, e.reason) == (403, "Forbidden")
            assert "no PriorityClass with name cf-missing was found" in e.message
        finally:
            await c.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc}")


async def test_a_mutating_webhook_is_called_with_an_admission_review_and_its_patch_applied(backend, tmp_path):
    """A MutatingWebhookConfiguration with a ``url`` on loopback: the server POSTs an AdmissionReview v1
    (uid, kind, resource, namespace, operation, object, dryRun) for a matching create and applies the
    JSONPatch the webhook answers."""
    if backend.api is not None:
        pytest.skip("the fake calls no admission webhooks (see its docstring): koordfw's webhook is tested by "
                    "posting AdmissionReviews to it, and through the real API server here")
    ns = await backend.namespace("cf-hook", {"cf-hook": "on"})
    seen: list[dict] = []

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        patch = [{"op": "add", "path": "/metadata/labels", "value": {"cf-mutated": "yes"}}]
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": body["request"]["uid"], "allowed": True, "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode()}})

    app = web.Application()
    app.router.add_post("/mutate", review)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    assert backend.plane is not None
    crt, key = backend.plane.serving_cert("cf-webhook")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(crt), str(key))
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cfg_name = f"cf-hook-{backend.name}"
    try:
        async with backend.client() as c:
            await c.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body={
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": cfg_name},
                "webhooks": [{"name": "cf.koordfw.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                              "failurePolicy": "Fail", "timeoutSeconds": 5,
                              "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate",
                                               "caBundle": base64.b64encode(crt.read_bytes()).decode()},
                              "namespaceSelector": {"matchLabels": {"cf-hook": "on"}},
                              "objectSelector": {"matchLabels": {"cf-hook": "on"}},
                              "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                         "resources": ["pods"], "scope": "Namespaced"}]}]})
            made = {**pod("cf-p"), "metadata": {"name": "cf-p", "labels": {"cf-hook": "on"}}}
            with anyio.fail_after(20):
                while True:  # the real server's webhook informer takes a moment to see the configuration
                    p = await c.request("POST", PODS.format(ns=ns), body=made, params={"dryRun": "All"})
                    if seen:
                        break
                    await anyio.sleep(0.2)
            assert p["metadata"]["labels"] == {"cf-mutated": "yes"}
            req = seen[-1]
            assert (req["apiVersion"], req["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
            r = req["request"]
            assert r["uid"] and r["operation"] == "CREATE" and r["dryRun"] is True
            assert r["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
            assert r["resource"] == {"group": "", "version": "v1", "resource": "pods"}
            assert r["namespace"] == ns and r["name"] == "cf-p"
            assert r["object"]["metadata"]["labels"] == {"cf-hook": "on"}
            assert r["object"]["spec"]["restartPolicy"] == "Always"  # defaulted before the webhook
            assert r["oldObject"] is None
            # not dry-run: stored as mutated; an object the selector leaves out is not sent
            n = len(seen)
            p = await c.request("POST", PODS.format(ns=ns), body=made)
            assert p["metadata"]["labels"] == {"cf-mutated": "yes"} and seen[-1]["request"]["dryRun"] is False
            await c.request("POST", PODS.format(ns=ns), body=pod("cf-q"))
            assert len(seen) == n + 1
    finally:
        backend.plane.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{cfg_name}")
        await runner.cleanup()
