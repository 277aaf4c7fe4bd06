"""A tiny aiohttp ``/metrics`` endpoint for the agent (loopback only unless explicitly allowed)."""

from __future__ import annotations

import ipaddress

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..core.errors import ConfigError
from ..metrics import REGISTRY


def parse_listen(value: str, allow_remote: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9100`` for IPv6); a non-loopback host needs ``allow_remote``."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--metrics-listen {value!r}: expected HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    if not allow_remote:
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConfigError(f"--metrics-listen {value!r}: {host} is not a loopback address; "
                              f"pass --metrics-allow-remote to expose metrics beyond this host")
    return host, int(port)


async def start_metrics_server(host: str, port: int) -> web.AppRunner:
    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
