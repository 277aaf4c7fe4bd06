"""``/healthz`` and ``/metrics`` (Prometheus text format) for the long-running modes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ...metrics import REGISTRY


def add_health_routes(app: web.Application, health: Callable[[], dict[str, Any]],
                      ready: Callable[[], bool] | None = None) -> None:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", **health()})

    async def readyz(_: web.Request) -> web.Response:
        ok = ready() if ready is not None else True
        return web.json_response({"ready": ok, **health()}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)


async def start_health_server(host: str, port: int, health: Callable[[], dict[str, Any]],
                              ready: Callable[[], bool] | None = None) -> tuple[web.AppRunner, int]:
    """Serve the health routes; returns the runner (``await runner.cleanup()`` to stop) and the port."""
    app = web.Application()
    add_health_routes(app, health, ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
