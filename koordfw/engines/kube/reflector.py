"""A reflector: LIST (paged) then WATCH from the list's resourceVersion, as client-go's.

* Which state a LIST asks for follows client-go's ``relistResourceVersion``: the first LIST sends
  ``resourceVersion=0`` (served from the apiserver's watch cache, possibly a little stale: the watch
  that follows catches up); a relist sends the last resourceVersion seen with
  ``resourceVersionMatch=NotOlderThan`` (never older than what the store already holds); after a LIST
  answered 410 Gone or "Too large resource version" (504 with the ``ResourceVersionTooLarge`` cause)
  the next one sends no resourceVersion at all, a quorum read of the newest state. Continuation pages
  carry only ``continue``.
* A LIST's items are handed on in key order (namespace, name), as etcd lists them, whichever cache
  served it: the order the scheduler queues pods of one priority and creation second in follows.
* Bookmarks are requested; every event and bookmark advances the resourceVersion to resume from.
* A 410 on the watch (an HTTP status, or an ``ERROR`` event with code 410) means the history is gone:
  re-list (from the last resourceVersion, NotOlderThan), diff against the store, synthesise ``DELETED``
  for what vanished, and watch again.
* A dropped or timed-out stream resumes from the last resourceVersion seen; other errors back off
  (exponential, capped) and retry.
* An ``optional`` kind (a CRD that may not be installed, a kind RBAC may not grant) answering 404 or
  403 is treated as absent: logged once, the store emptied (DELETED for what it held), the reflector
  counted as synced, and the LIST re-probed every ``probe_interval`` seconds until it is served.
  A kind that was served is given ``absent_after`` seconds first, retried with backoff and its store
  kept: a restarting kube-apiserver listens before its RBAC and CRD caches are filled and answers 403
  (or 404 for a CRD's kind) for a moment, which must not empty the cache of every NodeMetric.

The handler gets ``(type, obj, old)`` with type ADDED, MODIFIED or DELETED; ``old`` is the stored copy
(None for ADDED). Objects are keyed by ``metadata.uid`` (recreated objects are distinct).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from .client import ApiError, KubeClient

log = structlog.get_logger("koordfw.kube")

Handler = Callable[[str, dict, "dict | None"], Awaitable[None]]


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return meta.get("uid") or (f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace")
                               else str(meta.get("name")))


class Expired(Exception):
    pass


class Reflector:
    def __init__(self, client: KubeClient, path: str, handler: Handler, *, field_selector: str = "",
                 page_size: int = 500, watch_timeout: int = 300, name: str = "",
                 initial_backoff: float = 0.2, max_backoff: float = 10.0, strip_managed_fields: bool = True,
                 optional: bool = False, probe_interval: float = 60.0, absent_after: float = 30.0) -> None:
        self.client, self.path, self.handler = client, path, handler
        self.field_selector, self.page_size, self.watch_timeout = field_selector, page_size, watch_timeout
        self.name = name or path
        self.initial_backoff, self.max_backoff = initial_backoff, max_backoff
        self.strip_managed_fields = strip_managed_fields
        self.optional = optional  # a 404/403 (CRD not installed, kind not granted): absent, re-probed
        self.probe_interval = probe_interval
        #: how long a served kind may answer 403/404 before it is treated as absent
        self.absent_after = absent_after
        #: client-clock time of the first 403/404 since the kind was last served (None: none)
        self.denied_since: float | None = None
        self.store: dict[str, dict] = {}
        self.resource_version = ""
        #: the last LIST answered 410 or "too large": the next one is a quorum read (client-go's
        #: isLastSyncResourceVersionUnavailable)
        self.rv_unavailable = False
        #: why the kind is absent ("" while it is served)
        self.unavailable_reason = ""
        self.probes = 0
        self.synced = anyio.Event()
        self.relists = 0
        self.watches = 0
        self.errors = 0
        self.available = True
        self._rng = random.Random(0)

    async def run(self) -> None:
        """Run until cancelled."""
        backoff = self.initial_backoff
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    backoff = self.initial_backoff
                await self._watch()
                backoff = self.initial_backoff
            except Expired as e:
                log.info("watch expired; re-listing", reflector=self.name, detail=str(e))
                need_list = True
            except ApiError as e:
                self.errors += 1
                if (e.status == 410 or e.too_large_resource_version) and not (need_list and self.rv_unavailable):
                    # (a quorum LIST answering so again backs off below, as any failing LIST)
                    if need_list:
                        # the LIST itself: its resourceVersion is gone or ahead of the server's, so the
                        # next one is a quorum read
                        self.rv_unavailable = True
                    log.info("resourceVersion unavailable; re-listing", reflector=self.name, error=str(e),
                             quorum=need_list)
                    need_list = True
                    continue
                if e.status in (403, 404) and self.optional and self._denial_may_pass(e):
                    log.info("a served kind answered 403/404; retrying before treating it as absent",
                             reflector=self.name, error=str(e), seconds=round(backoff, 2))
                    need_list = True
                    await anyio.sleep(backoff * (0.5 + self._rng.random()))
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                if e.status in (403, 404) and self.optional:
                    await self._absent(e)
                    need_list = True
                    await anyio.sleep(self.probe_interval)
                    continue
                log.warning("API error; backing off", reflector=self.name, error=str(e), seconds=round(backoff, 2))
                await anyio.sleep(backoff * (0.5 + self._rng.random()))
                backoff = min(backoff * 2, self.max_backoff)

    def _denial_may_pass(self, e: ApiError) -> bool:
        """Whether a 403/404 of a kind that was served is still within its ``absent_after`` grace."""
        if not (self.available and self.relists > 0):
            return False  # never served, or already absent: the probe's answer stands
        now = self.client.clock()
        if self.denied_since is None:
            self.denied_since = now
        return now - self.denied_since < self.absent_after

    async def _absent(self, e: ApiError) -> None:
        """The kind is not served (404) or not granted (403): like its absence, logged once."""
        self.probes += 1
        reason = "not served (404)" if e.status == 404 else f"forbidden (403): {e.message}"
        if self.available or reason != self.unavailable_reason:
            log.info("resource unavailable; treating it as absent and re-probing",
                     reflector=self.name, reason=reason, every=self.probe_interval)
        self.available = False
        self.denied_since = None
        self.unavailable_reason = reason
        if self.store:
            await self._replace([])
        self.resource_version = ""
        self.synced.set()

    def list_params(self) -> dict[str, Any]:
        """resourceVersion / resourceVersionMatch of the next LIST's first page (client-go's
        relistResourceVersion, with NotOlderThan spelled out for a relist)."""
        if self.rv_unavailable:
            return {}
        if not self.resource_version:
            return {"resourceVersion": "0"}
        return {"resourceVersion": self.resource_version, "resourceVersionMatch": "NotOlderThan"}

    async def _list(self) -> None:
        items: list[dict] = []
        cont = None
        rv = ""
        first = self.list_params()
        while True:
            params: dict[str, Any] = {"limit": self.page_size, "fieldSelector": self.field_selector or None}
            if cont:
                params["continue"] = cont
            else:
                params.update(first)
            page = await self.client.request("GET", self.path, params=params, timeout=60)
            meta = page.get("metadata") or {}
            if not rv:
                rv = meta.get("resourceVersion", "")
            items.extend(page.get("items") or [])
            cont = meta.get("continue")
            if not cont:
                break
        # in key order (namespace, name), as etcd answers a quorum LIST: the watch cache answers the first
        # LIST (resourceVersion=0) in its hash order, which would make the order pods are queued in (and
        # hence who wins a tie on priority and creation second) differ from run to run and from
        # ``koordfw simulate`` on the same objects
        items.sort(key=_list_order)
        self.relists += 1
        self.rv_unavailable = False
        self.denied_since = None
        if not self.available:
            log.info("resource served again", reflector=self.name)
            self.available, self.unavailable_reason = True, ""
        await self._replace(items)
        self.resource_version = rv
        self.synced.set()

    async def _replace(self, items: list[dict]) -> None:
        """Make the store equal to ``items``: events for what changed, DELETED for what vanished."""
        fresh: dict[str, dict] = {}
        for obj in items:
            self._strip(obj)
            fresh[object_key(obj)] = obj
        gone = [k for k in self.store if k not in fresh]
        for k in gone:
            old = self.store.pop(k)
            await self.handler("DELETED", old, old)
        for k, obj in fresh.items():
            prev = self.store.get(k)
            if prev is not None and _rv(prev) == _rv(obj):
                continue
            self.store[k] = obj
            await self.handler("MODIFIED" if prev is not None else "ADDED", obj, prev)

    def _strip(self, obj: dict) -> None:
        if self.strip_managed_fields:
            meta = obj.get("metadata")
            if isinstance(meta, dict):
                meta.pop("managedFields", None)

    async def _watch(self) -> None:
        params = {"resourceVersion": self.resource_version, "allowWatchBookmarks": True,
                  "timeoutSeconds": self.watch_timeout, "fieldSelector": self.field_selector or None}
        self.watches += 1
        async for ev in self.client.watch(self.path, params, timeout=self.watch_timeout):
            etype = ev.get("type")
            obj = ev.get("object") or {}
            if etype == "ERROR":
                if obj.get("code") == 410:
                    raise Expired(obj.get("message", "410"))
                raise ApiError(int(obj.get("code") or 500), obj.get("message", "watch error"), obj, obj.get("reason", ""))
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if etype == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
            self._strip(obj)
            key = object_key(obj)
            old = self.store.get(key)
            if etype == "DELETED":
                self.store.pop(key, None)
                if rv:
                    self.resource_version = rv
                await self.handler("DELETED", obj, old)
                continue
            if etype not in ("ADDED", "MODIFIED"):
                log.warning("unknown watch event type", reflector=self.name, type=etype)
                continue
            self.store[key] = obj
            if rv:
                self.resource_version = rv
            await self.handler("MODIFIED" if old is not None else "ADDED", obj, old)


def _list_order(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv(obj: dict) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")
