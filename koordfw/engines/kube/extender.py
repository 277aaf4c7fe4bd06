"""kube-scheduler's HTTP extender protocol, served by the same plugins.

Wire format (``k8s.io/kube-scheduler/extender/v1``; the Go structs have no json tags): requests carry
capitalised keys (``Pod``, ``Nodes``, ``NodeNames``), read here case-insensitively; replies use the
capitalised keys kube-scheduler's decoder expects. Verbs are served at ``<prefix>/<verb>``:

* ``filter``: ExtenderArgs → ExtenderFilterResult (``NodeNames`` or ``Nodes`` in the request's mode,
  ``FailedNodes``, ``FailedAndUnresolvableNodes`` where preemption cannot help, ``Error``);
* ``prioritize``: ExtenderArgs → a bare ``[{"Host", "Score"}]`` list, scores mapped to 0..10;
* ``bind``: ExtenderBindingArgs → ExtenderBindingResult (needs an API client). When some plugin has
  ``reserve`` or ``pre_bind`` hooks, the pod is read from the API and run through pre_filter, the
  filters on the chosen node, reserve and pre_bind in the cache first, and the annotations they wrote
  (e.g. ``scheduling.koordinator.sh/device-allocated``) are merge-patched before the Binding; a
  rejection is returned as the ``Error`` naming the plugin, with nothing left reserved;
* ``preempt``: ExtenderPreemptionArgs → ``NodeNameToMetaVictims``, dropping nodes where the pod would
  still not fit after its victims leave.

With an API client the extender keeps the scheduler's cluster cache (reflectors), so stateful plugins
see real usage; without one it answers from the request alone: non-cache mode only (``Nodes``), with
no pods on the nodes. Malformed JSON is a 400 with a message, an oversized body a 413, and a plugin
error an ``Error`` field (HTTP 200 for filter/bind/preempt, 500 with ``{"Error"}`` for prioritize,
whose reply has no such field): never a dropped connection.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import anyio
import numpy as np
import structlog
from aiohttp import web

from ...core.caller import PluginFailure
from ...core.clock import RealClock
from ...core.cluster import ClusterState
from ...core.errors import KoordfwError
from ...core.framework import CycleState, Scheduler
from ...core.model import node_from_manifest, pod_from_manifest
from ...core.plugins import Registry
from ...core.status import Code, Status
from .binder import BindDropped, BindGated, KubeBinder
from .client import ApiError, KubeClient
from .health import add_health_routes

log = structlog.get_logger("koordfw.extender")

MAX_EXTENDER_PRIORITY = 10
DEFAULT_MAX_BODY = 32 * 1024 * 1024
#: hooks that only make sense with a cluster cache
STATEFUL_HOOKS = ("reserve", "unreserve", "permit", "pre_bind", "post_bind", "node_resources", "deschedule")


class BadRequest(Exception):
    pass


def ci_get(d: dict, key: str) -> Any:
    """Go's decoder matches keys case-insensitively; so do we (exact match first)."""
    if key in d:
        return d[key]
    low = key.lower()
    for k, v in d.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def map_score(total: int, max_total: int) -> int:
    """A weighted plugin total (0..max_total) → kube's extender range 0..10, rounded down."""
    if max_total <= 0:
        return 0
    return max(0, min(MAX_EXTENDER_PRIORITY, total * MAX_EXTENDER_PRIORITY // max_total))


def node_indices(cluster: ClusterState, names: list) -> np.ndarray:
    """Row index of each named node in the cluster's columns (-1: unknown or removed)."""
    if not all(isinstance(n, str) for n in names):
        raise BadRequest("NodeNames must be a list of strings")
    return cluster.indices_of(names)


class Extender:
    """The verbs, independent of HTTP (``await ext.filter(args_dict)`` returns the reply dict)."""

    def __init__(self, registry: Registry, *, client: KubeClient | None = None, seed: int = 0) -> None:
        self.registry = registry
        self.client = client
        self.binder = KubeBinder(client) if client is not None else None
        self.reflectors: list = []
        if client is not None:
            from .engine import build_cache

            self.scheduler, self.feeder, self.reflectors = build_cache(registry, client, scheduler_name=None, seed=seed)
        else:
            self.scheduler = Scheduler(registry, ClusterState(), RealClock(), seed=seed)
        self.stateful = client is not None

    @property
    def plugins_needing_state(self) -> list[str]:
        return sorted({i.plugin for h in STATEFUL_HOOKS for i in self.registry.impls(h)})

    # -- the cluster a request is judged against --------------------------------------------------
    def _target(self, args: dict) -> tuple[Scheduler, list[str], dict[str, dict] | None]:
        """(scheduler, node names, full node objects by name when the request carried them)."""
        nodes = ci_get(args, "Nodes")
        names = ci_get(args, "NodeNames")
        if nodes is not None:
            items = ci_get(nodes, "items") if isinstance(nodes, dict) else None
            if not isinstance(items, list):
                raise BadRequest("Nodes must be a NodeList with items")
            by_name = {}
            for i, n in enumerate(items):
                if not isinstance(n, dict) or not (n.get("metadata") or {}).get("name"):
                    raise BadRequest(f"Nodes.items[{i}] needs metadata.name")
                by_name[n["metadata"]["name"]] = n
            if self.stateful:
                return self.scheduler, list(by_name), by_name
            cluster = ClusterState()
            for n in items:
                try:
                    cluster.add_node(node_from_manifest(n))
                except KoordfwError as e:
                    raise BadRequest(str(e)) from None
            return Scheduler(self.registry, cluster, RealClock()), list(by_name), by_name
        if names is None:
            raise BadRequest("the request has neither Nodes nor NodeNames")
        if not isinstance(names, list):
            raise BadRequest("NodeNames must be a list of strings")
        if not self.stateful:
            raise BadRequest("NodeNames (nodeCacheCapable: true) needs a cluster cache: start the extender with "
                             "--kubeconfig or --in-cluster, or set nodeCacheCapable: false")
        return self.scheduler, names, None

    def _pod(self, args: dict):
        raw = ci_get(args, "Pod")
        if not isinstance(raw, dict):
            raise BadRequest("the request has no Pod")
        try:
            pod = pod_from_manifest(raw)
        except KoordfwError as e:
            raise BadRequest(str(e)) from None
        # the request's pod is authoritative: drop a request vector cached for an older copy
        self.scheduler.cluster.forget_request_cache(pod.uid)
        return pod

    async def _feasible(self, s: Scheduler, pod, names: list[str], state: CycleState
                        ) -> tuple[list[str], dict[str, Status]]:
        st, candidates = await s.run_pre_filter(pod, state)
        if st.code == Code.ERROR:
            raise PluginFailure(st)
        failed: dict[str, Status] = {}
        if not st.ok:
            return [], {n: st for n in names}
        idx = node_indices(s.cluster, names)
        usable = idx >= 0
        for j in np.flatnonzero(~usable).tolist():
            failed[str(names[j])] = Status.unschedulable(f"node {names[j]} is not in the extender's cache")
        if candidates is not None:
            for j in np.flatnonzero(usable).tolist():
                if names[j] not in candidates:
                    usable[j] = False
                    failed[names[j]] = Status.unresolvable("node(s) didn't satisfy plugin(s) pre_filter node set")
        sub = idx[usable]
        if not len(sub):
            return [], failed
        ok, statuses = await s.filter_nodes(pod, state, sub)
        failed.update(statuses)
        keep = np.isin(idx, ok) & usable
        return [names[j] for j in np.flatnonzero(keep).tolist()], failed

    # -- verbs -------------------------------------------------------------------------------------
    async def filter(self, args: dict) -> dict:
        s, names, full = self._target(args)
        pod = self._pod(args)
        try:
            kept, failed = await self._feasible(s, pod, names, CycleState())
        except PluginFailure as f:
            return self._filter_reply(full, [], {}, {}, f.status.message or "plugin error")
        soft, hard = {}, {}
        for n, st in failed.items():
            msg = st.message or f"rejected by {st.plugin}"
            (hard if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE else soft)[n] = msg
        return self._filter_reply(full, kept, soft, hard, "")

    @staticmethod
    def _filter_reply(full: dict[str, dict] | None, kept: list[str], soft: dict, hard: dict, error: str) -> dict:
        out: dict[str, Any] = {}
        if full is None:
            out["Nodes"], out["NodeNames"] = None, kept
        else:
            out["Nodes"], out["NodeNames"] = {"items": [full[n] for n in kept]}, None
        out.update({"FailedNodes": soft, "FailedAndUnresolvableNodes": hard, "Error": error})
        return out

    async def prioritize(self, args: dict) -> list[dict]:
        s, names, _ = self._target(args)
        pod = self._pod(args)
        state = CycleState()
        st, _cands = await s.run_pre_filter(pod, state)
        if st.code == Code.ERROR:
            raise PluginFailure(st)
        idx = node_indices(s.cluster, names)
        known = idx >= 0
        scores = np.zeros(len(idx), dtype=np.int64)
        if known.any():
            total, max_total = await s.score_nodes(pod, state, idx[known])
            if max_total > 0:
                scores[known] = np.clip(total * MAX_EXTENDER_PRIORITY // max_total, 0, MAX_EXTENDER_PRIORITY)
        return [{"Host": n, "Score": v} for n, v in zip(names, scores.tolist())]

    async def bind(self, args: dict) -> dict:
        if self.binder is None:
            return {"Error": "bind needs an API client: start the extender with --kubeconfig or --in-cluster"}
        name, ns, uid, node = (ci_get(args, k) for k in ("PodName", "PodNamespace", "PodUID", "Node"))
        if not name or not node:
            raise BadRequest("bind needs PodName and Node")
        ns, node = ns or "default", str(node)
        try:
            if self.stateful and self.binds_with_state:
                return await self._bind_with_state(name, ns, uid, node)
            if not uid:  # older senders: learn the UID so the binding still carries the precondition
                cur = await self.client.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                uid = (cur.get("metadata") or {}).get("uid", "")
            pod = pod_from_manifest({"metadata": {"name": name, "namespace": ns, "uid": uid}, "spec": {}})
            await self.binder(pod, node, {})
        except (BindDropped, BindGated, ApiError) as e:
            return {"Error": str(e)}
        return {"Error": ""}

    @property
    def binds_with_state(self) -> bool:
        """Some plugin reserves or writes pre_bind annotations (devices, cpusets): bind must run them."""
        return any(self.registry.impls(h) for h in ("reserve", "pre_bind"))

    async def _bind_with_state(self, name: str, ns: str, uid: str | None, node: str) -> dict:
        """Read the pod, run reserve and pre_bind for it on ``node`` in the cache, then bind with the
        annotations pre_bind wrote (merge-patched before the Binding, as the secondary scheduler does)."""
        cur = await self.client.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if uid and (cur.get("metadata") or {}).get("uid") != uid:
            return {"Error": f"pod {ns}/{name} was recreated (uid {(cur.get('metadata') or {}).get('uid')})"}
        try:
            pod = pod_from_manifest(cur)
        except KoordfwError as e:
            return {"Error": str(e)}
        s = self.scheduler
        s.cluster.forget_request_cache(pod.uid)
        cached = s.cluster.pod(pod.uid) is not None  # the cache keeps no pending pod of other schedulers
        st, state = await s.reserve_placed(pod, node)
        if st.ok:
            try:
                await self.binder(pod, node, dict(state.annotations))
                return {"Error": ""}
            except (BindDropped, BindGated, ApiError) as e:
                await s.release_placed(pod, node, state)
                st = Status.error(str(e))
        if not cached:
            s.cluster.remove_pod(pod.uid)
        why = st.message or "rejected"
        return {"Error": f"{why} (plugin {st.plugin})" if st.plugin else why}

    async def preempt(self, args: dict) -> dict:
        pod = self._pod(args)
        meta_victims = ci_get(args, "NodeNameToMetaVictims")
        full_victims = ci_get(args, "NodeNameToVictims")
        out: dict[str, Any] = {}
        if isinstance(full_victims, dict) and full_victims:
            for node, v in full_victims.items():
                pods = ci_get(v, "Pods") or []
                out[node] = {"Pods": [{"UID": (p.get("metadata") or {}).get("uid", "")} for p in pods],
                             "NumPDBViolations": int(ci_get(v, "NumPDBViolations") or 0)}
        elif isinstance(meta_victims, dict):
            for node, v in meta_victims.items():
                out[node] = {"Pods": [{"UID": ci_get(p, "UID")} for p in (ci_get(v, "Pods") or [])],
                             "NumPDBViolations": int(ci_get(v, "NumPDBViolations") or 0)}
        if not self.stateful:
            return {"NodeNameToMetaVictims": out}  # nothing to judge against: keep kube's candidates
        s = self.scheduler
        kept = {}
        for node, v in out.items():
            if s.cluster.node(node) is None:
                continue
            victims = [p for p in (s.cluster.pod(x["UID"]) for x in v["Pods"]) if p is not None]
            with s.cluster.without_pods(node, victims):
                st = await s.run_filters_on_node(pod, node, CycleState())
            if st.ok:
                kept[node] = v
        return {"NodeNameToMetaVictims": kept}


class ExtenderServer:
    """The aiohttp app around an :class:`Extender`."""

    def __init__(self, extender: Extender, *, prefix: str = "", max_body: int = DEFAULT_MAX_BODY) -> None:
        self.ext = extender
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.max_body = max_body
        self.requests = 0
        self.app = web.Application(client_max_size=max_body)
        for verb in ("filter", "prioritize", "bind", "preempt"):
            self.app.router.add_post(f"{self.prefix}/{verb}", self._handler(verb))
        self.app.router.add_get(f"{self.prefix}/" if self.prefix else "/", self._info)
        add_health_routes(self.app, self.info)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def info(self) -> dict[str, Any]:
        ext = self.ext
        out: dict[str, Any] = {"mode": "stateful" if ext.stateful else "stateless",
                               "verbs": [f"{self.prefix}/{v}" for v in ("filter", "prioritize", "bind", "preempt")],
                               "plugins": sorted(ext.registry.plugins), "requests": self.requests}
        if not ext.stateful:
            out["pluginsNeedingState"] = ext.plugins_needing_state
            out["note"] = ("no cluster cache: nodes are judged without their pods or NodeMetrics; NodeNames "
                           "requests are refused")
        else:
            out["nodes"] = ext.scheduler.cluster.num_nodes
            out["synced"] = all(r.synced.is_set() for r in ext.reflectors)
        return out

    async def _info(self, _: web.Request) -> web.Response:
        return web.json_response(self.info())

    def _handler(self, verb: str):
        fn = getattr(self.ext, verb)

        async def handle(request: web.Request) -> web.Response:
            self.requests += 1
            try:
                raw = await request.read()
            except web.HTTPRequestEntityTooLarge as e:
                return web.json_response({"Error": f"request body too large: {e.text}"}, status=413)
            try:
                args = json.loads(raw)
            except ValueError as e:
                return web.json_response({"Error": f"malformed JSON in the {verb} request: {e}"}, status=400)
            if not isinstance(args, dict):
                return web.json_response({"Error": f"the {verb} request must be a JSON object"}, status=400)
            try:
                reply = await fn(args)
            except BadRequest as e:
                return web.json_response({"Error": str(e)}, status=400)
            except PluginFailure as f:
                msg = f.status.message or "plugin error"
                if verb == "prioritize":
                    return web.json_response({"Error": msg}, status=500)
                return web.json_response({"Error": msg} if verb != "filter" else
                                         Extender._filter_reply(None, [], {}, {}, msg))
            except Exception as e:  # a bug must answer, not drop the connection
                log.error("extender verb failed", verb=verb, error=f"{type(e).__name__}: {e}", exc_info=True)
                return web.json_response({"Error": f"{type(e).__name__}: {e}"}, status=500)
            return web.Response(text=json.dumps(reply), content_type="application/json")

        return handle

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, ssl_context: ssl.SSLContext | None = None) -> int:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def run_cache(self) -> None:
        """Keep the cluster cache fed (stateful mode) until cancelled."""
        if not self.ext.reflectors:
            await anyio.sleep_forever()
        async with anyio.create_task_group() as tg:
            for r in self.ext.reflectors:
                tg.start_soon(r.run)
