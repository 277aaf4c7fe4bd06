"""``koordfw manager``: koord-manager's controllers on a live cluster (issue 18).

The controllers run by the manager are built by :func:`build_controllers`: the node-resources
controller always; the NodeSLO controller (``koordfw.engines.kube.nodeslo.NodeSLOController``) when
that module is part of the install; the pod admission webhook server
(``koordfw.engines.kube.webhook.WebhookServer(host=, port=, cert_file=, key_file=, skip_namespaces=)``) when
``--webhook-listen`` is given. Each is a ``koordfw.engines.kube.manager.Controller``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

from ..command_api import Commands
from ..core.errors import KoordfwError
from ..extension import CONFIG_NAMESPACE, SLO_CTRL_CONFIG_MAP
from ._common import DAY, add_plugin_options, number
from .scheduler import (
    add_connection_options,
    add_leader_election_options,
    add_unhealthy_after_option,
    check_leader_args,
    leader_elector_from_args,
    load_registry,
    make_client,
    run_process,
    split_address,
)


def _address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return text


def register(sub: Commands) -> None:
    p = sub.add("manager", help="run koord-manager's controllers (node resources) on a Kubernetes cluster",
                description="Keep node.status' batch (kubernetes.io/batch-cpu, batch-memory) and device "
                            "(koordinator.sh/gpu-*) resources up to date from NodeMetrics and Devices, "
                            f"configured by the {SLO_CTRL_CONFIG_MAP} ConfigMap, as Koordinator's koord-manager.")
    add_connection_options(p)
    add_plugin_options(p)
    p.add_argument("--config-namespace", default=CONFIG_NAMESPACE,
                   help=f"namespace of the {SLO_CTRL_CONFIG_MAP} ConfigMap (default {CONFIG_NAMESPACE})")
    p.add_argument("--resync-period", type=number(float, 0, DAY, above=True), default=60.0, metavar="SECONDS",
                   help="recompute every node this often besides on changes (default 60)")
    add_leader_election_options(p, name_default="koordfw-manager", name_help="Lease name (default koordfw-manager)")
    p.add_argument("--health-address", default="0.0.0.0:10260",
                   help="serve /healthz, /readyz and /metrics here (default 0.0.0.0:10260; empty = off)")
    add_unhealthy_after_option(p)
    w = p.add_argument_group("pod admission webhook")
    w.add_argument("--webhook-listen", type=_address, metavar="HOST:PORT",
                   help="serve the admission webhook here (HTTPS; needs --tls-cert-file and --tls-private-key-file)")
    w.add_argument("--tls-cert-file", metavar="FILE", help="the webhook's serving certificate (PEM)")
    w.add_argument("--tls-private-key-file", metavar="FILE", help="the webhook's private key (PEM)")
    w.add_argument("--webhook-skip-namespace", action="append", metavar="NAMESPACE",
                   help="leave this namespace's pods alone (repeatable; default kube-system): on clusters "
                        "before 1.21 it is labelled koordfw.io/admission-webhook=skip, which deploy/webhook.yaml's "
                        "namespaceSelector excludes, and the webhook lets its pods through unchanged; "
                        "an empty value: none)")
    p.set_defaults(func=run)


def _check_args(args: argparse.Namespace) -> None:
    if args.webhook_listen and not (args.tls_cert_file and args.tls_private_key_file):
        raise KoordfwError("--webhook-listen needs --tls-cert-file and --tls-private-key-file")
    if not args.webhook_listen and (args.tls_cert_file or args.tls_private_key_file):
        raise KoordfwError("--tls-cert-file and --tls-private-key-file are only used with --webhook-listen")
    check_leader_args(args)
    if args.webhook_listen and importlib.util.find_spec("koordfw.engines.kube.webhook") is None:
        raise KoordfwError("--webhook-listen: this koordfw has no webhook server (koordfw.engines.kube.webhook)")


def build_controllers(args: argparse.Namespace) -> list[Any]:
    """The manager's components for these arguments (see the module docstring)."""
    from ..engines.kube.noderesource import NodeResourceController

    out: list[Any] = [NodeResourceController(resync_period=args.resync_period)]
    if importlib.util.find_spec("koordfw.engines.kube.nodeslo") is not None:
        from ..engines.kube import nodeslo  # type: ignore[attr-defined,unused-ignore]

        out.append(nodeslo.NodeSLOController())
    if args.webhook_listen:
        from ..engines.kube import webhook  # type: ignore[attr-defined,unused-ignore]

        host, port = split_address(args.webhook_listen, "0.0.0.0")
        skip = args.webhook_skip_namespace if args.webhook_skip_namespace is not None else ["kube-system"]
        out.append(webhook.WebhookServer(host=host, port=port, cert_file=args.tls_cert_file,
                                         key_file=args.tls_private_key_file,
                                         skip_namespaces=[n for n in skip if n]))
    return out


def run(args: argparse.Namespace) -> int:
    import anyio

    _check_args(args)
    return anyio.run(_main, args)


async def _main(args: argparse.Namespace) -> int:
    from ..engines.kube.engine import default_identity
    from ..engines.kube.manager import KubeManager

    registry = load_registry(args)
    client = await make_client(args)
    elector = leader_elector_from_args(client, args, name=args.leader_elect_name, identity=default_identity())
    manager = KubeManager(registry, client, controllers=build_controllers(args),
                          config_namespace=args.config_namespace, leader_elector=elector,
                          unhealthy_after=args.unhealthy_after_seconds)
    try:
        await run_process(manager, args)
    finally:
        await client.close()
    if manager.stopped_reason and manager.stopped_reason != "stop requested" \
            and not manager.stopped_reason.startswith("signal"):
        print(f"koordfw: error: {manager.stopped_reason}", file=sys.stderr)
        return 1
    return 0

