"""``/healthz``, ``/readyz`` and ``/metrics`` (Prometheus text format) for the long-running modes.

``/healthz`` answers 500 with ``{"status": "unhealthy", "reason": ...}`` when the process should be
restarted: its caches have not synced within ``unhealthy_after`` seconds of the start, or the API has
been unreachable (every round trip failing: transport errors, 401, 429, 5xx; a run of 401s is not
ended by events on watches opened before it) for longer than that, as the client records it.
Otherwise 200 with ``{"status": "ok", ...}``. Both carry the details.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ...metrics import REGISTRY

if TYPE_CHECKING:
    from .client import KubeClient


#: the default of ``--unhealthy-after-seconds``
DEFAULT_UNHEALTHY_AFTER = 120.0


def api_health(client: KubeClient) -> dict[str, Any]:
    """What the client knows about reaching the API, in seconds ago on its clock (None: never/not)."""
    now = client.clock()
    return {"apiLastSuccessSecondsAgo": None if client.last_success is None else round(now - client.last_success, 3),
            "apiUnreachableForSeconds": None if client.unreachable_since is None
            else round(now - client.unreachable_since, 3),
            "apiUnauthorizedForSeconds": None if client.unauthorized_since is None
            else round(now - client.unauthorized_since, 3)}


def unhealthy_reason(client: KubeClient, *, unsynced: Sequence[str] = (), started_at: float | None = None,
                     after: float = DEFAULT_UNHEALTHY_AFTER) -> str | None:
    """Why the process is unhealthy, or None: the API unreachable for longer than ``after`` seconds, or
    caches (``unsynced`` names them) still unsynced ``after`` seconds past ``started_at`` (both on the
    client's clock)."""
    now = client.clock()
    if client.unreachable_since is not None and now - client.unreachable_since > after:
        why = " (refusing the credentials: 401)" if client.unauthorized_since is not None else ""
        return (f"the API has been unreachable for {now - client.unreachable_since:.0f}s "
                f"(more than {after:g}s){why}")
    if unsynced and started_at is not None and now - started_at > after:
        return f"caches not synced {now - started_at:.0f}s after the start (more than {after:g}s): " + \
            ", ".join(sorted(unsynced))
    return None


def add_health_routes(app: web.Application, health: Callable[[], dict[str, Any]],
                      ready: Callable[[], bool] | None = None,
                      check: Callable[[], str | None] | None = None) -> None:
    """``check()`` returns why the process is unhealthy (``/healthz`` then answers 500), or None."""
    async def healthz(_: web.Request) -> web.Response:
        reason = check() if check is not None else None
        if reason:
            return web.json_response({"status": "unhealthy", "reason": reason, **health()}, status=500)
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
                              ready: Callable[[], bool] | None = None,
                              check: Callable[[], str | None] | None = None) -> tuple[web.AppRunner, int]:
    """Serve the health routes; returns the runner (``await runner.cleanup()`` to stop) and the port."""
    app = web.Application()
    add_health_routes(app, health, ready, check)
    return await start_app(app, host, port)


async def start_app(app: web.Application, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                    keepalive_timeout: float = 75.0) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (port 0: any free one); returns the runner (``await
    runner.cleanup()`` to stop) and the port bound. Every server of the live modes starts here."""
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=keepalive_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def server_tls(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A serving TLS context from PEM files (a certificate chain and its private key)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx
