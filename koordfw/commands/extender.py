"""``koordfw extender``: serve kube-scheduler's HTTP extender protocol with the installed plugins."""

from __future__ import annotations

import argparse
import signal
import sys

from ..command_api import Commands
from ._common import DAY, add_plugin_options, number, registry_from_args
from .scheduler import add_unhealthy_after_option, split_address


def _optional_address(text: str) -> str:
    """``HOST:PORT`` (port 0..65535) or empty (off)."""
    host, sep, port = text.rpartition(":")
    if text and (not sep or not port.isdigit() or int(port) > 65535):
        raise argparse.ArgumentTypeError(f"expected HOST:PORT or empty, got {text!r}")
    return text


def register(sub: Commands) -> None:
    p = sub.add("extender", help="serve the kube-scheduler extender protocol (filter/prioritize/bind/preempt)",
                description="Answer kube-scheduler's extender calls with the installed plugins. With "
                            "--kubeconfig or --in-cluster it keeps a cluster cache like the scheduler's.")
    p.add_argument("--listen", default="127.0.0.1:8888", help="address to listen on (default 127.0.0.1:8888)")
    p.add_argument("--url-prefix", default="", help="path prefix of the verbs (default none: POST /filter)")
    p.add_argument("--health-address", type=_optional_address, default="", metavar="HOST:PORT",
                   help="also serve /healthz, /readyz and /metrics here, e.g. 0.0.0.0:10262 for the kubelet's probes "
                        "while --listen stays on loopback (default off: they are served on --listen only)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--kubeconfig", metavar="FILE", help="keep a cluster cache from this cluster")
    g.add_argument("--in-cluster", action="store_true", help="keep a cluster cache, using the service account")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--kube-api-qps", type=number(float, 0, 1e6), default=50.0, help="client QPS limit (default 50; 0 = none)")
    p.add_argument("--kube-api-burst", type=number(int, 1, 10**6), default=100, help="client burst (default 100)")
    p.add_argument("--max-body-bytes", type=number(int, 1024, 2**31), default=32 * 1024 * 1024,
                   help="request size limit (default 32 MiB)")
    p.add_argument("--header-timeout", type=number(float, 0, DAY, above=True), default=15.0, metavar="SECONDS",
                   help="close a connection whose request headers (or next request) take longer (default 15)")
    p.add_argument("--body-timeout", type=number(float, 0, DAY, above=True), default=30.0, metavar="SECONDS",
                   help="answer 408 and close when a request body takes longer to arrive (default 30)")
    add_unhealthy_after_option(p)
    p.add_argument("--tls-cert-file", help="serve HTTPS with this certificate")
    p.add_argument("--tls-key-file", help="private key of --tls-cert-file")
    add_plugin_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import anyio

    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        print("koordfw: error: --tls-cert-file and --tls-key-file go together", file=sys.stderr)
        return 2
    return anyio.run(_main, args)


async def _main(args: argparse.Namespace) -> int:
    import anyio

    from ..engines.kube.extender import Extender, ExtenderServer
    from .scheduler import make_client

    registry = registry_from_args(args)
    client = await make_client(args) if (args.kubeconfig or args.in_cluster) else None
    ext = Extender(registry, client=client, unhealthy_after=args.unhealthy_after_seconds)
    server = ExtenderServer(ext, prefix=args.url_prefix, max_body=args.max_body_bytes,
                            header_timeout=args.header_timeout, body_timeout=args.body_timeout)
    if not ext.stateful and ext.plugins_needing_state:
        print("koordfw: note: no --kubeconfig: these plugins need cluster state and will see none: "
              + ", ".join(ext.plugins_needing_state), file=sys.stderr)
    from ..engines.kube.health import server_tls

    ctx = server_tls(args.tls_cert_file, args.tls_key_file) if args.tls_cert_file else None
    host, port = split_address(args.listen)
    port = await server.start(host, port, ssl_context=ctx)
    health = None
    if args.health_address:
        from ..engines.kube.health import start_health_server

        try:
            health_host, health_port = split_address(args.health_address)
            health, health_port = await start_health_server(health_host, health_port, server.info,
                                                            lambda: ext.synced, ext.unhealthy_reason)
        except BaseException:
            await server.stop()
            raise
        print(f"koordfw extender health on http://{health_host}:{health_port}/healthz", file=sys.stderr)
    print(f"koordfw extender listening on {'https' if ctx else 'http'}://{host}:{port}{server.prefix}/", file=sys.stderr)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.run_cache)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            tg.cancel_scope.cancel()
    finally:
        await server.stop()
        if health is not None:
            await health.cleanup()
        if client is not None:
            await client.close()
    return 0
