"""Helpers for testing plugins inside the stock kube-scheduler: the HTTP extender with its cluster
cache filled from a (fake) API server.

    async with FakeApiServer() as api:
        api.create(node_manifest)
        async with extender_with_cache(api.url, build_registry(None, only=["gpu_share"])) as (ext, http):
            async with http.post("/bind", json=...) as reply: ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import anyio

from ..core.plugins import Registry
from ..engines.kube.client import KubeClient
from ..engines.kube.extender import Extender, ExtenderServer

__all__ = ["extender_with_cache"]


@asynccontextmanager
async def extender_with_cache(api_url: str, registry: Registry, *, prefix: str = ""
                              ) -> AsyncIterator[tuple[Extender, aiohttp.ClientSession]]:
    """An :class:`Extender` whose cluster cache watches ``api_url``, served on loopback; yields it and an
    aiohttp session on its address once every reflector has synced. Everything stops on exit."""
    async with KubeClient(api_url, qps=0) as client:
        ext = Extender(registry, client=client)
        srv = ExtenderServer(ext, prefix=prefix)
        port = await srv.start("127.0.0.1", 0)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(srv.run_cache)
                for r in ext.reflectors:
                    await r.synced.wait()
                async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                    yield ext, http
                tg.cancel_scope.cancel()
        finally:
            await srv.stop()
