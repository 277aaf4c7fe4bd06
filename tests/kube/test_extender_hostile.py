"""Hostile and malformed extender requests (issue 16): never a 5xx, a traceback, a hang or a blow-up.

Every case of :func:`cases` is POSTed to a real extender on 127.0.0.1, both without a cluster cache and
with one (fed by the fake API server): the answer must be 200, or a 4xx whose JSON body carries an
``Error`` (a 400 naming the field where the extender itself checks it), and a good filter request must
still succeed afterwards. Slow clients (headers or body trickled past the timeout) are disconnected while
a concurrent normal request answers promptly. A hypothesis property mutates well-formed bodies of every
verb the same way; ``KOORDFW_FUZZ_EXAMPLES`` sets how many examples it tries (``make fuzz`` sets it
higher).

The servers run in a thread with their own event loop and the tests talk to them with blocking sockets,
so hypothesis drives plain functions and one pair of servers lives through every example.
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import http.client
import inspect
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kube_testkit import node, pod

from koordfw.engines.embedded import build_registry
from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.extender import Extender, ExtenderServer
from koordfw.testing.fake_apiserver import FakeApiServer

#: the slow-client bounds the servers under test use (the defaults are tens of seconds)
HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
FUZZ_EXAMPLES = int(os.environ.get("KOORDFW_FUZZ_EXAMPLES", "100"))
MODES = ("stateless", "stateful")


# -- the servers -----------------------------------------------------------------------------------

def server_kwargs() -> dict[str, Any]:
    """Timeout arguments, passed only when ExtenderServer takes them (so the catalog can also be run
    against an extender from before they existed, to count what it got wrong)."""
    params = inspect.signature(ExtenderServer).parameters
    want = {"header_timeout": HEADER_TIMEOUT, "body_timeout": BODY_TIMEOUT}
    return {k: v for k, v in want.items() if k in params}


class Servers:
    """A stateless extender and one with a cluster cache (nodes n0..n2, pending pods web and web2, and
    victim on n0), both with the installed plugins, served from a background thread's event loop."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.ports: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="extender-servers", daemon=True)
        self._thread.start()
        if not self.ready.wait(30) or self.error is not None:
            raise RuntimeError(f"extender servers did not start: {self.error!r}")

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            self.error = e
            self.ready.set()

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with FakeApiServer(bookmark_interval=0.2) as api:
            for i in range(3):
                api.create(node(f"n{i}", cpu="4"))
            api.create(pod("web"))
            api.create(pod("web2"))
            api.create(pod("victim", cpu="3", node_name="n0", scheduler="default-scheduler"))
            stateless = ExtenderServer(Extender(build_registry(None)), **server_kwargs())
            self.ports["stateless"] = await stateless.start("127.0.0.1", 0)
            async with KubeClient(api.url, qps=0) as client:
                ext = Extender(build_registry(None), client=client)
                stateful = ExtenderServer(ext, **server_kwargs())
                self.ports["stateful"] = await stateful.start("127.0.0.1", 0)
                cache = asyncio.ensure_future(stateful.run_cache())
                for r in ext.reflectors:
                    await r.synced.wait()
                self.ready.set()
                await self._stop.wait()
                cache.cancel()
                await stateful.stop()
            await stateless.stop()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture(scope="module")
def servers():
    s = Servers()
    yield s
    s.close()


def post(port: int, path: str, body: bytes, *, timeout: float = 10.0,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


class Answer(NamedTuple):
    outcome: str  # ok (200), 4xx (with a JSON Error), 4xx-no-error, 5xx (JSON), bare-5xx, hang, dropped
    status: int | None
    error: str  # the reply's Error field, or the raw reply's start


def answer(port: int, verb: str, body: bytes) -> Answer:
    """POST ``body`` to ``/verb`` and judge the answer (``hang``: none within 10 s; ``dropped``: the
    connection closed without one)."""
    try:
        status, raw = post(port, f"/{verb}", body)
    except TimeoutError:
        return Answer("hang", None, "")
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        return Answer("dropped", None, repr(e))
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    err = doc.get("Error") if isinstance(doc, dict) else None
    text = err if isinstance(err, str) else raw[:300].decode(errors="replace")
    if status == 200:
        return Answer("ok", status, text)
    if status >= 500:
        return Answer("5xx" if isinstance(err, str) else "bare-5xx", status, text)
    if 400 <= status < 500 and isinstance(err, str) and err:
        return Answer("4xx", status, text)
    return Answer("4xx-no-error", status, text)


def good_filter_works(servers: Servers, mode: str) -> bool:
    body = GOOD["filter"] if mode == "stateless" else GOOD_CACHED["filter"]
    try:
        status, raw = post(servers.ports[mode], "/filter", json.dumps(body).encode())
    except OSError:
        return False
    return status == 200 and json.loads(raw).get("Error") == ""


# -- well-formed bodies and the hostile catalog ---------------------------------------------------

def unshared(n: dict) -> dict:
    """A Node manifest whose capacity and allocatable are two objects (kube_testkit's share one)."""
    n["status"]["allocatable"] = dict(n["status"]["capacity"])
    return n


NODES = {"metadata": {}, "items": [unshared(node("n0", cpu="4")), unshared(node("n1", cpu="8", labels={"zone": "a"}))]}
GOOD: dict[str, dict] = {
    "filter": {"Pod": pod("probe", cpu="1"), "Nodes": NODES, "NodeNames": None},
    "prioritize": {"Pod": pod("probe", cpu="1"), "Nodes": NODES, "NodeNames": None},
    "preempt": {"Pod": pod("probe", cpu="2"), "NodeNameToVictims": None,
                "NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": "u-1"}], "NumPDBViolations": 0}}},
    "bind": {"PodName": "web", "PodNamespace": "default", "PodUID": "", "Node": "n1"},
}
#: the same in cache mode (nodeCacheCapable: true)
GOOD_CACHED: dict[str, dict] = {
    "filter": {"Pod": pod("probe", cpu="1"), "Nodes": None, "NodeNames": ["n0", "n1", "n2"]},
    "prioritize": {"Pod": pod("probe", cpu="1"), "Nodes": None, "NodeNames": ["n1", "n2"]},
    "preempt": GOOD["preempt"],
    "bind": GOOD["bind"],
}

_MISSING = object()


def set_path(doc: Any, path: str, value: Any = _MISSING) -> Any:
    """Set (or with no ``value`` delete) the value at ``path`` (dots; list indices as numbers) in ``doc``."""
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    at: Any = doc
    for k in keys[:-1]:
        at = at[k]
    if value is _MISSING:
        del at[keys[-1]]
    else:
        at[keys[-1]] = value
    return doc


def mutate(verb: str, path: str, value: Any = _MISSING, *, cached: bool = False) -> dict:
    """A copy of the good ``verb`` body with the value at ``path`` replaced (deleted when omitted)."""
    return set_path(copy.deepcopy((GOOD_CACHED if cached else GOOD)[verb]), path, value)


def raw_with(verb: str, path: str, literal: str, *, cached: bool = False) -> bytes:
    """The good body with the value at ``path`` replaced by a raw JSON ``literal`` (NaN, 1e400...)."""
    marker = "__KOORDFW_LITERAL__"
    return json.dumps(mutate(verb, path, marker, cached=cached)).replace(f'"{marker}"', literal).encode()


def enc(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def bracketed(path: str) -> str:
    """``Nodes.items.0.metadata`` → ``Nodes.items[0].metadata``, as error messages write it."""
    return ".".join(f"[{k}]" if k.isdigit() else k for k in path.split(".")).replace(".[", "[")


class Case(NamedTuple):
    cls: str
    verb: str
    what: str
    body: bytes
    #: "400", "413" or "200": that status; None: 200 or a 4xx with an Error (the model decides)
    expect: str | None = None
    #: a text the Error must contain (the field), when ``expect`` is 400
    field: str | None = None
    #: the cache mode reads only the names of Nodes.items, so there a bad Node content may be fine
    content_of_nodes: bool = False


BIG = "1" + "0" * 399  # a 400-digit integer
CPU = "Pod.spec.containers.0.resources.requests.cpu"
NODE_CPU = "Nodes.items.0.status.allocatable.cpu"
CPU_FIELD = "resources.requests.cpu"


def cases() -> list[Case]:
    """Every hostile input, each the smallest body showing its problem."""
    out: list[Case] = []
    add = lambda *a, **kw: out.append(Case(*a, **kw))  # noqa: E731

    # non-finite numbers: JSON's NaN/Infinity extensions, 1e400 (a float overflowing to inf), YAML's .nan
    for lit in ("NaN", "Infinity", "-Infinity", "1e400", "-1e400"):
        add("non-finite", "filter", f"cpu request {lit}", raw_with("filter", CPU, lit), "400", bracketed(CPU))
        add("non-finite", "filter", f"node allocatable {lit}", raw_with("filter", NODE_CPU, lit), "400",
            bracketed(NODE_CPU))
        add("non-finite", "prioritize", f"priority {lit}", raw_with("prioritize", "Pod.spec.priority", lit), "400",
            "Pod.spec.priority")
        add("non-finite", "preempt", f"NumPDBViolations {lit}",
            raw_with("preempt", "NodeNameToMetaVictims.n0.NumPDBViolations", lit), "400", "NumPDBViolations")
        add("non-finite", "bind", f"PodName {lit}", raw_with("bind", "PodName", lit), "400", "PodName")
    for s in (".nan", ".inf", "NaN", "Infinity", "-inf"):
        add("non-finite", "filter", f"cpu request {s!r}", enc(mutate("filter", CPU, s)), "400", CPU_FIELD)
        add("non-finite", "prioritize", f"memory allocatable {s!r}",
            enc(mutate("prioritize", "Nodes.items.1.status.allocatable.memory", s)), "400", "allocatable.memory",
            content_of_nodes=True)
    # huge numbers and quantities
    for q in ("1e100000000", "1e16", "9" * 400, "99999999999999999999Ei", "1e-100000000", "0." + "0" * 5000 + "1"):
        add("huge", "filter", f"cpu request {q[:20]!r}", enc(mutate("filter", CPU, q)), "400", CPU_FIELD)
        add("huge", "prioritize", f"node allocatable {q[:20]!r}", enc(mutate("prioritize", NODE_CPU, q)), "400",
            "allocatable.cpu", content_of_nodes=True)
    add("huge", "filter", "cpu request 1e300 (a number)", raw_with("filter", CPU, "1e300"), "400", CPU_FIELD)
    add("huge", "filter", "priority 1e300", raw_with("filter", "Pod.spec.priority", "1e300"), "400", "priority")
    add("huge", "filter", "a 5000-digit integer", raw_with("filter", "Pod.spec.priority", "1" + "0" * 4999), "400",
        "digits")
    add("huge", "filter", "priority '9'*4000", enc(mutate("filter", "Pod.spec.priority", "9" * 4000)))
    add("huge", "filter", "pods allocatable 2^63", enc(mutate("filter", "Nodes.items.0.status.allocatable.pods",
                                                              str(2 ** 63))), "400", "pods",
        content_of_nodes=True)
    add("huge", "preempt", "NumPDBViolations 1e300", raw_with("preempt", "NodeNameToMetaVictims.n0.NumPDBViolations",
                                                              "1e300"), "400", "NumPDBViolations")
    add("huge", "bind", "PodName of 100 kB", enc(mutate("bind", "PodName", "a" * 100_000)), "400", "PodName")
    add("huge", "filter", "10,000 NodeNames, all the same",
        enc(mutate("filter", "NodeNames", ["n1"] * 10_000, cached=True)), "400", "NodeNames[1]")
    add("huge", "filter", "a body over the size limit", enc(mutate("filter", "Pod.metadata.annotations",
                                                                   {"a": "x" * (33 * 2**20)})), "413")
    # 400-digit integers where numbers go, and where they do not
    for verb, path in (("filter", "Pod.spec.priority"), ("filter", CPU), ("filter", NODE_CPU),
                       ("prioritize", "Pod.spec.priority"), ("prioritize", "Pod.spec.tolerations"),
                       ("preempt", "NodeNameToMetaVictims.n0.NumPDBViolations"), ("preempt", "Pod.spec.priority"),
                       ("bind", "PodUID"), ("bind", "Node"), ("filter", "Pod.metadata.name"),
                       ("filter", "Pod.spec.containers.0.ports"), ("filter", "Pod.metadata.creationTimestamp")):
        add("400-digit int", verb, path, raw_with(verb, path, BIG), "400", bracketed(path))
    add("400-digit int", "filter", "negative priority", raw_with("filter", "Pod.spec.priority", "-" + BIG), "400",
        "Pod.spec.priority")
    add("400-digit int", "filter", "priority 2^63", raw_with("filter", "Pod.spec.priority", str(2 ** 63)), "400",
        "Pod.spec.priority")
    add("400-digit int", "filter", "priority 2^31", raw_with("filter", "Pod.spec.priority", str(2 ** 31)))
    # deep nesting
    add("nesting", "filter", "[ x 500", b"[" * 500, "400")
    add("nesting", "filter", "[ x 100000", b"[" * 100_000, "400")
    add("nesting", "filter", "[ x 5000 ] x 5000 (valid JSON)", b"[" * 5000 + b"]" * 5000, "400", "nested")
    add("nesting", "filter", "{\"Pod\": [ x 500", b'{"Pod":' + b"[" * 500, "400")
    add("nesting", "prioritize", "{\"Pod\": [ x 500 ] x 500}", b'{"Pod":' + b"[" * 500 + b"]" * 500 + b"}", "400",
        "nested")
    deep: Any = {}
    for _ in range(500):
        deep = {"a": deep}
    add("nesting", "filter", "affinity 500 mappings deep", enc(mutate("filter", "Pod.spec.affinity", deep)), "400",
        "nested")
    deep90: Any = "x"
    for _ in range(90):
        deep90 = [deep90]
    add("nesting", "filter", "a label value 90 lists deep", enc(mutate("filter", "Pod.metadata.labels.x", deep90)))
    add("nesting", "preempt", "victims 500 deep", b'{"NodeNameToMetaVictims":{"n0":{"Pods":' + b"[" * 500
        + b"]" * 500 + b"}}}", "400", "nested")
    # encodings
    good = enc(GOOD["filter"])
    add("encoding", "filter", "\\xff\\xfe prefix", b"\xff\xfe" + good, "400", "UTF-8")
    add("encoding", "filter", "a latin-1 byte in a name", good.replace(b'"probe"', b'"pr\xe9be"'), "400", "UTF-8")
    add("encoding", "filter", "UTF-16", json.dumps(GOOD["filter"]).encode("utf-16"), "400", "UTF-8")
    add("encoding", "filter", "UTF-8 BOM (accepted)", b"\xef\xbb\xbf" + good, "200")
    add("encoding", "filter", "a lone surrogate in a name", good.replace(b'"probe"', b'"pr\\ud800be"'))
    add("encoding", "filter", "NUL in a label value", enc(mutate("filter", "Pod.metadata.labels", {"a": "b\x00c"})))
    add("encoding", "filter", "truncated UTF-8", good[:-3] + b"\xe2\x82", "400", "UTF-8")
    add("encoding", "bind", "a surrogate PodName", b'{"PodName":"\\udfff","Node":"n1"}', "400", "PodName")
    add("encoding", "filter", "empty body", b"", "400", "malformed JSON")
    add("encoding", "filter", "whitespace body", b"   \n", "400", "malformed JSON")
    add("encoding", "filter", "trailing garbage", good + b"garbage", "400", "malformed JSON")
    # duplicates
    add("duplicates", "filter", "Pod twice, the last a number", good[:-1] + b', "Pod": 5}', "400", "Pod")
    add("duplicates", "filter", "Pod and pod", enc(GOOD["filter"] | {"pod": 5}))
    add("duplicates", "filter", "the same node twice", enc(mutate("filter", "Nodes.items", [node("n0"), node("n0")])),
        "400", "Nodes.items[1].metadata.name")
    add("duplicates", "filter", "NodeNames twice", enc(mutate("filter", "NodeNames", ["n1", "n1"], cached=True)),
        "400", "NodeNames[1]")
    add("duplicates", "preempt", "a victim twice", enc(mutate("preempt", "NodeNameToMetaVictims.n0.Pods",
                                                              [{"UID": "u-1"}, {"UID": "u-1"}])))
    # wrong shapes, verb by verb
    for verb in ("filter", "prioritize"):
        for what, doc, expect, field in shapes_args(verb, full=verb == "filter"):
            add(f"shape {verb}", verb, what, enc(doc), expect, field)
    for what, doc, expect, field in shapes_preempt():
        add("shape preempt", "preempt", what, enc(doc), expect, field)
    for what, doc, expect, field in shapes_bind():
        add("shape bind", "bind", what, enc(doc), expect, field)
    return out


WRONG = [None, True, 0, 1.5, -1, "x", "", [], ["x"], {}, {"a": 1}]

# how the extender judges a field it checks itself: value -> wrong?
def _typed(t: type, required: bool = False) -> Callable[[Any], bool]:
    return lambda v: v is None if required else (v is not None and not isinstance(v, t))


def _name_like(v: Any) -> bool:
    return not isinstance(v, str) or not v


def _count_like(v: Any) -> bool:
    return v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0)


def _victim_map(v: Any) -> bool:
    return v is not None and (not isinstance(v, dict) or any(not isinstance(x, dict) for x in v.values()))


def _required(t: type) -> Callable[[Any], bool]:
    return lambda v: v is None or not isinstance(v, t)


#: ExtenderArgs fields the extender checks itself (others are the model's: any answer but a 5xx)
ARGS_CHECKS: dict[str, Callable[[Any], bool]] = {
    "Pod": _required(dict), "Pod.metadata": _typed(dict), "Pod.metadata.uid": _typed(str),
    "Pod.metadata.ownerReferences": _typed(list), "Pod.spec": _typed(dict), "Pod.status": _typed(dict),
    "Pod.spec.containers": _typed(list), "Pod.spec.containers.0": _required(dict),
    "Pod.spec.containers.0.resources": _typed(dict), "Pod.spec.containers.0.name": _typed(str),
    "Pod.spec.initContainers": _typed(list), "Pod.spec.tolerations": _typed(list),
    "Pod.spec.schedulerName": _typed(str), "Pod.spec.nodeName": _typed(str), "Pod.spec.preemptionPolicy": _typed(str),
    "Nodes": _required(dict), "Nodes.items": _required(list), "Nodes.items.0": _required(dict),
    "Nodes.items.0.metadata": _required(dict), "Nodes.items.0.metadata.name": _name_like,
    "Nodes.items.0.spec": _typed(dict), "Nodes.items.0.status": _typed(dict),
    "Nodes.items.0.status.allocatable": _typed(dict), "Nodes.items.0.spec.taints": _typed(list),
    "Nodes.items.0.spec.unschedulable": _typed(bool), "Nodes.items.0.metadata.labels": lambda v: False,
}


def _field_of(path: str) -> str:
    """What an error about ``path`` must mention (the model names Pod fields without the ``Pod.``)."""
    return bracketed(path).removeprefix("Pod.") if path != "Pod" else "Pod"


def shapes_args(verb: str, full: bool = True) -> list[tuple[str, Any, str | None, str | None]]:
    """Wrong types for the fields of ExtenderArgs (all of them with ``full``, else a sample)."""
    out: list[tuple[str, Any, str | None, str | None]] = [
        ("body a list", [GOOD[verb]], "400", "JSON object"), ("body a string", "Pod", "400", "JSON object"),
        ("body null", None, "400", "JSON object"), ("body a number", 5, "400", "JSON object"),
        ("Pod missing", mutate(verb, "Pod"), "400", "Pod"),
        ("Nodes missing, NodeNames null", mutate(verb, "Nodes"), "400", "Nodes")]
    fields = list(ARGS_CHECKS) + ["Pod.metadata.name", "Pod.metadata.namespace", "Pod.metadata.labels",
                                  "Pod.metadata.annotations", "Pod.metadata.creationTimestamp",
                                  "Pod.spec.containers.0.resources.requests", CPU, "Pod.spec.overhead",
                                  "Pod.spec.priority", "Pod.spec.nodeSelector", "Pod.spec.affinity", NODE_CPU,
                                  "Nodes.items.0.metadata.creationTimestamp"]
    if not full:
        fields = ["Pod", "Pod.spec", "Pod.spec.containers", "Nodes", "Nodes.items", "Nodes.items.0.metadata.name",
                  CPU, "Pod.spec.priority", "Pod.spec.affinity"]
    for f in fields:
        for v in WRONG:
            check = ARGS_CHECKS.get(f)
            if check is not None and check(v):
                out.append((f"{f} = {v!r}", mutate(verb, f, v), "400", _field_of(f)))
            else:
                out.append((f"{f} = {v!r}", mutate(verb, f, v), None, None))
    out += [
        ("a label value an object", mutate(verb, "Pod.metadata.labels", {"a": {"b": 1}}), None, None),
        ("a toleration a string", mutate(verb, "Pod.spec.tolerations", ["x"]), "400", "spec.tolerations[0]"),
        ("a taint key a number", mutate(verb, "Nodes.items.0.spec.taints", [{"key": 5, "effect": []}]), None, None),
        ("a container a list", mutate(verb, "Pod.spec.containers", [[1]]), "400", "spec.containers[0]"),
        ("a resource name of digits", mutate(verb, "Pod.spec.containers.0.resources.requests", {"5": "1"}), None, None),
        ("creationTimestamp garbage", mutate(verb, "Pod.metadata.creationTimestamp", "yesterday"), "400",
         "creationTimestamp"),
        ("creationTimestamp year 99999", mutate(verb, "Pod.metadata.creationTimestamp", "99999-01-01T00:00:00Z"),
         "400", "creationTimestamp"),
        ("nodeAffinity a string", mutate(verb, "Pod.spec.affinity", {"nodeAffinity": "x"}), None, None),
        ("a node selector term of wrong types", mutate(verb, "Pod.spec.affinity", {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": 5, "operator": "In", "values": "x"}]}]}}}), None, None),
        ("Gt with a huge value", mutate(verb, "Pod.spec.affinity", {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "Gt", "values": ["1e400"]}]}]}}}), None, None),
    ]
    for v in WRONG + [[1, 2], [None], [["n0"]], [{"a": 1}], ["n0", 5]]:
        ok = isinstance(v, list) and all(isinstance(n, str) and n for n in v)
        out.append((f"NodeNames = {v!r}", mutate(verb, "NodeNames", v, cached=True),
                     None if ok else "400", None if ok else "NodeNames"))
    return out


META = "NodeNameToMetaVictims"
PREEMPT_CHECKS: dict[str, Callable[[Any], bool]] = {
    "Pod": _required(dict), "Pod.spec": _typed(dict), META: _victim_map, f"{META}.n0": _required(dict),
    f"{META}.n0.Pods": _typed(list), f"{META}.n0.Pods.0": _required(dict), f"{META}.n0.Pods.0.UID": _typed(str),
    f"{META}.n0.NumPDBViolations": _count_like, "NodeNameToVictims": _victim_map,
    "n0": _required(dict), "n0.Pods": _typed(list), "n0.Pods.0": _required(dict), "n0.Pods.0.metadata": _typed(dict),
    "n0.Pods.0.metadata.uid": _typed(str), "n0.NumPDBViolations": _count_like,
}


def shapes_preempt() -> list[tuple[str, Any, str | None, str | None]]:
    out: list[tuple[str, Any, str | None, str | None]] = [
        ("body a list", [GOOD["preempt"]], "400", "JSON object"), ("Pod missing", mutate("preempt", "Pod"), "400", "Pod")]
    for f in ("Pod", "Pod.metadata.name", "Pod.spec", META, f"{META}.n0", f"{META}.n0.Pods", f"{META}.n0.Pods.0",
              f"{META}.n0.Pods.0.UID", f"{META}.n0.NumPDBViolations", "NodeNameToVictims"):
        check = PREEMPT_CHECKS.get(f)
        for v in WRONG:
            bad = check is not None and check(v)
            out.append((f"{f} = {v!r}", mutate("preempt", f, v), "400" if bad else None,
                        (_field_of(f) if f != META and f != "NodeNameToVictims" else f) if bad else None))
    full = {"n0": {"Pods": [pod("victim", node_name="n0")], "NumPDBViolations": 0}}
    base = mutate("preempt", "NodeNameToVictims", full)
    for f in ("n0", "n0.Pods", "n0.Pods.0", "n0.Pods.0.metadata", "n0.Pods.0.metadata.uid", "n0.NumPDBViolations"):
        for v in WRONG:
            bad = PREEMPT_CHECKS[f](v)
            doc = copy.deepcopy(base)
            set_path(doc["NodeNameToVictims"], f, v)
            out.append((f"NodeNameToVictims.{f} = {v!r}", doc, "400" if bad else None,
                        bracketed(f"NodeNameToVictims.{f}") if bad else None))
    for v in ("1e5", "-3", "abc", 2 ** 40):
        bad = _count_like(v)
        out.append((f"NumPDBViolations = {v!r}", mutate("preempt", f"{META}.n0.NumPDBViolations", v),
                    "400" if bad else None, "NumPDBViolations" if bad else None))
    return out


def shapes_bind() -> list[tuple[str, Any, str | None, str | None]]:
    out: list[tuple[str, Any, str | None, str | None]] = [
        ("body a list", [GOOD["bind"]], "400", "JSON object"), ("body empty", {}, "400", "PodName")]
    fine = {"PodName": ("x",), "PodNamespace": (None, "x", ""), "PodUID": (None, "x", ""), "Node": ("x",)}
    for f in ("PodName", "PodNamespace", "PodUID", "Node"):
        for v in WRONG:
            bad = v not in fine[f] or isinstance(v, bool)
            out.append((f"{f} = {v!r}", mutate("bind", f, v), "400" if bad else None, f if bad else None))
        out.append((f"{f} missing", mutate("bind", f), "400" if f in ("PodName", "Node") else None,
                    f if f in ("PodName", "Node") else None))
    for v in ("../../nodes/n0", "web/binding", "web?x=1", "web#x", "WEB", "-web", "a" * 254, "web\n", "we b"):
        out.append((f"PodName {v[:20]!r}", mutate("bind", "PodName", v), "400", "PodName"))
    for v in ("..", "kube-system/pods", "a" * 64, "Default"):
        out.append((f"PodNamespace {v[:20]!r}", mutate("bind", "PodNamespace", v), "400", "PodNamespace"))
    for v in ("n1/../n2", "n1 ", "a" * 254, "N1"):
        out.append((f"Node {v[:20]!r}", mutate("bind", "Node", v), "400", "Node"))
    return out


CASES = cases()
CLASSES = sorted({c.cls for c in CASES})


def judge(c: Case, mode: str, a: Answer) -> str | None:
    """What is wrong with answer ``a`` to case ``c`` in ``mode`` (None: nothing)."""
    if a.outcome not in ("ok", "4xx"):
        return f"{a.outcome} {a.status}: {a.error[:200]!r}"
    want = c.expect
    if c.content_of_nodes and mode == "stateful":
        want = None
    if want is not None and str(a.status) != want:
        return f"status {a.status}, expected {want}: {a.error[:200]!r}"
    if want == "400" and c.field and c.field not in a.error:
        return f"the Error does not name {c.field!r}: {a.error[:200]!r}"
    return None


@pytest.mark.parametrize("cls", CLASSES)
def test_hostile_catalog(servers, cls):
    """Each hostile body of the class, in both modes: the expected answer, and a good request after it."""
    bad = []
    for c in (c for c in CASES if c.cls == cls):
        for mode in MODES:
            why = judge(c, mode, answer(servers.ports[mode], c.verb, c.body))
            if why:
                bad.append(f"{mode} {c.verb} {c.what}: {why}")
            if not good_filter_works(servers, mode):
                bad.append(f"{mode}: a good filter request failed after {c.verb} {c.what}")
    assert not bad, "\n".join(bad)


def test_non_finite_errors_name_the_field(servers):
    status, raw = post(servers.ports["stateless"], "/filter", raw_with("filter", CPU, "NaN"))
    assert status == 400
    assert json.loads(raw)["Error"] == ("malformed JSON in the filter request: field "
                                        "Pod.spec.containers[0].resources.requests.cpu: NaN is not a JSON number")
    status, raw = post(servers.ports["stateless"], "/filter", raw_with("filter", "Pod.spec.priority", "1e400"))
    assert status == 400 and json.loads(raw)["Error"] == "field Pod.spec.priority: inf is not a finite number"


def test_the_reply_to_a_bug_names_no_exception(servers, monkeypatch):
    """A bug in the extender is a 500 with an Error saying so, not a Python exception name."""
    ext = Extender(build_registry(None, autoload=False))

    async def broken(args):
        raise KeyError("oops")

    monkeypatch.setattr(ext, "filter", broken)
    srv = ExtenderServer(ext)
    handler = srv._handler("filter")

    class Req:
        async def read(self):
            return b"{}"

    resp = asyncio.run(handler(Req()))
    assert resp.status == 500
    err = json.loads(resp.text)["Error"]
    assert "internal error in the extender's filter" in err and "KeyError" not in err


# -- transport: encodings, slow clients ----------------------------------------------------------

def raw_exchange(port: int, data: bytes, wait: float = 10.0) -> tuple[str, bytes]:
    """Send ``data`` on a fresh connection; the reply's status line and body (till close or complete)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        c.sendall(data)
        out = b""
        while True:
            b = c.recv(65536)
            if not b:
                break
            out += b
            head, sep, body = out.partition(b"\r\n\r\n")
            lengths = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
            if sep and lengths and len(body) >= int(lengths[0].split(b":")[1]):
                break
    finally:
        c.close()
    head, _, body = out.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), body


def request_bytes(body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def test_bad_transfer_and_content_encodings(servers):
    port = servers.ports["stateless"]
    line, body = raw_exchange(port, request_bytes(b"\x1f\x8bgarbage", b"Content-Encoding: gzip\r\n"))
    assert " 400 " in line and "content-encoding" in json.loads(body)["Error"]
    line, _ = raw_exchange(port, b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    assert " 400 " in line  # aiohttp's own answer to an unparsable request
    # 200 MiB of spaces in 200 kB of gzip: refused once the decompressed body passes the limit
    line, body = raw_exchange(port, request_bytes(gzip.compress(b" " * (200 * 2**20)), b"Content-Encoding: gzip\r\n"))
    assert " 413 " in line and "too large" in json.loads(body)["Error"]
    # a good body gzip-compressed is fine
    line, body = raw_exchange(port, request_bytes(gzip.compress(enc(GOOD["filter"])), b"Content-Encoding: gzip\r\n"))
    assert " 200 " in line and json.loads(body)["Error"] == ""
    assert good_filter_works(servers, "stateless")


def _trickle(port: int, kind: str, result: dict, limit: float) -> None:
    """Open a connection and send, every 0.1 s, one more byte of the headers (``headers``) or of the body
    (``body``), or nothing (``idle``); record when the server closed it (or that it did not in ``limit``)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=limit + 5)
    t0 = time.monotonic()
    good = enc(GOOD["filter"])
    i, got = 0, b""
    try:
        if kind == "headers":
            c.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        elif kind == "body":
            c.sendall(request_bytes(good)[:-len(good)])
        while time.monotonic() - t0 < limit:
            if kind != "idle":
                c.sendall(b"a" if kind == "headers" else good[i:i + 1])
            i += 1
            c.settimeout(0.1)
            try:
                chunk = c.recv(4096)
            except TimeoutError:
                continue
            got += chunk
            if not chunk:
                result[kind] = (time.monotonic() - t0, got)
                return
        result[kind] = (None, got)
    except OSError:  # reset or broken pipe: closed by the server; keep what it said before
        closed = time.monotonic() - t0
        try:
            c.settimeout(0.2)
            got += c.recv(4096)
        except OSError:
            pass
        result[kind] = (closed, got)
    finally:
        c.close()


def test_slow_clients_are_disconnected_while_others_are_served(servers):
    limit = HEADER_TIMEOUT + BODY_TIMEOUT + 4
    for mode in MODES:
        port, result = servers.ports[mode], {}
        threads = [threading.Thread(target=_trickle, args=(port, k, result, limit)) for k in ("idle", "headers", "body")]
        for t in threads:
            t.start()
        time.sleep(0.2)
        latencies = []
        while any(t.is_alive() for t in threads):
            t0 = time.monotonic()
            assert good_filter_works(servers, mode)
            latencies.append(time.monotonic() - t0)
            time.sleep(0.1)
        for t in threads:
            t.join()
        assert max(latencies) < 1.0, latencies  # the slow clients never held up the others
        for kind, bound in (("idle", HEADER_TIMEOUT), ("headers", HEADER_TIMEOUT), ("body", BODY_TIMEOUT)):
            closed_after, got = result[kind]
            assert closed_after is not None, f"{mode}: a client trickling {kind} was never disconnected"
            assert bound - 0.2 <= closed_after <= bound + 1.5, (mode, kind, closed_after)
        assert result["body"][1].startswith(b"HTTP/1.1 408"), result["body"][1][:100]
        assert b"did not arrive within" in result["body"][1]
        assert good_filter_works(servers, mode)


def test_timeouts_must_be_positive():
    ext = Extender(build_registry(None, autoload=False))
    for kw in ({"header_timeout": 0}, {"body_timeout": -1}, {"body_timeout": float("nan")}):
        with pytest.raises(ValueError):
            ExtenderServer(ext, **kw)


# -- the property: any mutation of a well-formed body ----------------------------------------------

#: stand-ins replaced in the serialised body by the JSON literal (not representable in a dict)
LITERALS = {"\x00NaN\x00": "NaN", "\x00Inf\x00": "-Infinity", "\x00Big\x00": "1e400", "\x00Long\x00": "9" * 5000}


def _nested(depth: int) -> Any:
    v: Any = "x"
    for _ in range(depth):
        v = [v]
    return v


leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([10**400, -(10**400), 2**63, -(2**63) - 1, 2**31, -1, 0]),
    st.text(max_size=12),
    st.sampled_from([*LITERALS, "1e100000000", "1e16", ".nan", "Infinity", "-1", "9" * 400, "", "../x", "a/b", "\x00",
                     "\ud800", "0.0000001m", "1Ei", "99999-01-01T00:00:00Z"]),
)
_trees = st.recursive(leaves, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                      max_leaves=6)
#: a replacement value: a small tree of hostile leaves, one time in ten a list nested 90 to 400 deep
values = st.integers(0, 9).flatmap(lambda i: st.integers(90, 400).map(_nested) if i == 9 else _trees)


def _paths(doc: Any, at: str = "") -> list[str]:
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(k, str) and "." not in k and not k.isdigit():
                p = f"{at}.{k}" if at else k
                out.append(p)
                out += _paths(v, p)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            p = f"{at}.{i}" if at else str(i)
            out.append(p)
            out += _paths(v, p)
    return out


@st.composite
def hostile_bodies(draw) -> tuple[str, str, bytes]:
    """(mode, verb, body): a well-formed body of a verb, mutated one to three times, then encoded."""
    mode = draw(st.sampled_from(MODES))
    verb = draw(st.sampled_from(["filter", "prioritize", "preempt", "bind"]))
    base = GOOD if draw(st.booleans()) else GOOD_CACHED
    doc: Any = copy.deepcopy(base[verb])
    if verb == "preempt" and draw(st.booleans()):
        doc["NodeNameToVictims"] = {"n0": {"Pods": [pod("victim", node_name="n0")], "NumPDBViolations": 0}}
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "wrap", "recase", "duplicate"]))
        if not paths or op == "replace" and draw(st.integers(0, 19)) == 19:
            doc = draw(values)  # the whole body
            continue
        path = draw(st.sampled_from(paths))
        keys = path.split(".")
        parent: Any = doc
        for k in keys[:-1]:
            parent = parent[int(k)] if isinstance(parent, list) else parent[k]
        last: Any = int(keys[-1]) if isinstance(parent, list) else keys[-1]
        if op == "replace":
            parent[last] = draw(values)
        elif op == "delete":
            del parent[last]
        elif op == "wrap":
            parent[last] = [parent[last]]
        elif op == "recase" and isinstance(parent, dict):
            parent[last.swapcase()] = parent.pop(last)
        elif op == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
        elif op == "duplicate":
            parent[last.lower() if last != last.lower() else last.upper()] = draw(values)
    try:
        text = json.dumps(doc)
    except ValueError:  # an int too long to print: json would refuse it too
        text = '{"Pod": 1' + "0" * 5000 + "}"
    for stand_in, literal in LITERALS.items():
        text = text.replace(json.dumps(stand_in), literal)
    encoding = draw(st.sampled_from(["utf-8"] * 15 + ["utf-16", "latin-1-byte", "bom", "truncate", "surrogate"]))
    if encoding == "utf-16":
        body = text.encode("utf-16")
    elif encoding == "bom":
        body = b"\xef\xbb\xbf" + text.encode()
    else:
        body = text.encode()
        if encoding == "latin-1-byte":
            i = draw(st.integers(0, max(0, len(body) - 1)))
            body = body[:i] + b"\xe9" + body[i + 1:]
        elif encoding == "truncate":
            body = body[:draw(st.integers(0, max(0, len(body) - 1)))]
        elif encoding == "surrogate":
            body = body.replace(b'"', b'"\\udc00', 1)
    return mode, verb, body


@settings(derandomize=True, max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(hostile_bodies())
def test_any_mutated_body_is_answered_and_the_server_lives_on(servers, case):
    mode, verb, body = case
    a = answer(servers.ports[mode], verb, body)
    assert a.outcome in ("ok", "4xx"), f"{mode} {verb}: {a} for {body[:300]!r}"
    assert good_filter_works(servers, mode), f"{mode}: no good answer after {verb} {body[:300]!r}"
