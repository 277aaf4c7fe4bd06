"""``koordfw scheduler``: schedule a live Kubernetes cluster's pods as a secondary scheduler."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

from ..command_api import Commands
from ..core.errors import KoordfwError
from ._common import DAY, add_plugin_options, number, registry_from_args

if TYPE_CHECKING:
    from ..engines.kube.client import KubeClient


def add_connection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    g.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--kube-api-qps", type=number(float, 0, 1e6), default=50.0, help="client QPS limit (default 50; 0 = none)")
    p.add_argument("--kube-api-burst", type=number(int, 1, 10**6), default=100, help="client burst (default 100)")


async def make_client(args: argparse.Namespace, *, qps: float | None = None, burst: int | None = None) -> KubeClient:
    from ..engines.kube.client import KubeClient

    kw: dict[str, Any] = {"qps": args.kube_api_qps if qps is None else qps,
                          "burst": args.kube_api_burst if burst is None else burst,
                          "user_agent": f"koordfw/{args.command}"}
    if args.in_cluster:
        return KubeClient.in_cluster(**kw)
    return await KubeClient.from_kubeconfig(args.kubeconfig, context=args.context, **kw)


def register(sub: Commands) -> None:
    p = sub.add("scheduler", help="run as a secondary scheduler on a Kubernetes cluster",
                description="Watch every pod and node of a cluster and schedule the pods whose "
                            "spec.schedulerName is --scheduler-name with the installed plugins.")
    add_connection_options(p)
    p.add_argument("--scheduler-name", help="schedulerName to serve (default: the profile's, koordfw-scheduler)")
    add_plugin_options(p)
    p.add_argument("--config", dest="profile", metavar="FILE",
                   help="as --profile; kube-scheduler's flag, for a KubeSchedulerConfiguration (Koordinator's "
                        "koord-scheduler-config included, see docs/koordinator-config.md)")
    add_leader_election_options(p, name_default=None, name_help="Lease name (default: the scheduler name)")
    p.add_argument("--health-address", default="0.0.0.0:10259",
                   help="serve /healthz and /metrics here (default 0.0.0.0:10259; empty = off)")
    add_unhealthy_after_option(p)
    p.add_argument("--seed", type=int, default=0, help="seed for tie-breaking")
    d = p.add_argument_group("descheduling (the deschedule hooks, e.g. the defrag plugin)")
    d.add_argument("--deschedule-interval", type=number(float, 0, DAY), default=0.0, metavar="SECONDS",
                   help="run the descheduling plugins every SECONDS (default 0: off)")
    d.add_argument("--deschedule-execute", action="store_true",
                   help="evict through the Eviction API (default: dry-run, plans are only logged)")
    d.add_argument("--max-evictions-per-minute", type=number(int, 0, 10**6), default=10,
                   help="descheduling evictions at most per minute (default 10; 0 = none)")
    d.add_argument("--reservation-ttl", type=number(float, 0, DAY, above=True), default=300.0, metavar="SECONDS",
                   help="how long a migration's target stays reserved for the replacement pod (default 300)")
    p.set_defaults(func=run)


def add_unhealthy_after_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unhealthy-after-seconds", type=number(float, 0, DAY, above=True), default=120.0,
                   metavar="SECONDS",
                   help="/healthz answers 500 once the API has been unreachable, or the caches unsynced since "
                        "the start, for longer than SECONDS (default 120)")


def split_address(addr: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or default_host, int(port)


def check_leader_args(args: argparse.Namespace) -> None:
    """kube's LeaderElectionConfiguration rule, checked before connecting (exit 2 naming the flags)."""
    if args.leader_elect and not (args.leader_elect_lease_duration > args.leader_elect_renew_deadline
                                  > args.leader_elect_retry_period):
        raise KoordfwError("need --leader-elect-lease-duration > --leader-elect-renew-deadline > "
                           "--leader-elect-retry-period")



def add_leader_election_options(p: argparse.ArgumentParser, *, name_default: str | None, name_help: str) -> None:
    """``--leader-elect`` and its Lease settings (kube-scheduler's flags), for the scheduler and the manager."""
    p.add_argument("--leader-elect", action="store_true", help="elect a leader on a coordination.k8s.io Lease")
    p.add_argument("--leader-elect-namespace", default="kube-system",
                   help="namespace of the leader election Lease (default kube-system)")
    p.add_argument("--leader-elect-name", default=name_default, help=name_help)
    p.add_argument("--leader-elect-lease-duration", type=number(float, 0, DAY, above=True), default=15.0,
                   help="seconds a non-leader waits after the last renewal before taking over (default 15)")
    p.add_argument("--leader-elect-renew-deadline", type=number(float, 0, DAY, above=True), default=10.0,
                   help="seconds the leader keeps trying to renew before it stops leading (default 10)")
    p.add_argument("--leader-elect-retry-period", type=number(float, 0, DAY, above=True), default=2.0,
                   help="seconds between attempts to acquire or renew (default 2)")

def leader_elector_from_args(client: Any, args: argparse.Namespace, *, name: str, identity: str) -> Any:
    """The Lease elector the ``--leader-elect*`` flags ask for (None without ``--leader-elect``)."""
    if not args.leader_elect:
        return None
    from ..engines.kube.leader import LeaderElector

    return LeaderElector(client, namespace=args.leader_elect_namespace, name=name, identity=identity,
                         lease_duration=args.leader_elect_lease_duration,
                         renew_deadline=args.leader_elect_renew_deadline,
                         retry_period=args.leader_elect_retry_period)


def run(args: argparse.Namespace) -> int:
    import anyio

    check_leader_args(args)
    return anyio.run(_main, args)


async def _main(args: argparse.Namespace) -> int:
    from ..engines.kube.engine import KubeSchedulerEngine, default_identity

    registry = load_registry(args)
    client = await make_client(args)
    # kube-scheduler gives its event recorder a separate clientset (its own QPS budget)
    event_client = await make_client(args)
    name = args.scheduler_name or registry.profile.scheduler_name
    identity = default_identity()
    elector = leader_elector_from_args(client, args, name=args.leader_elect_name or name, identity=identity)
    engine = KubeSchedulerEngine(registry, client, scheduler_name=name, event_client=event_client, seed=args.seed,
                                 identity=identity, leader_elector=elector,
                                 deschedule_interval=args.deschedule_interval,
                                 deschedule_dry_run=not args.deschedule_execute,
                                 max_evictions_per_minute=args.max_evictions_per_minute,
                                 reservation_ttl=args.reservation_ttl,
                                 unhealthy_after=args.unhealthy_after_seconds)
    try:
        await run_process(engine, args)
    finally:
        await client.close()
        await event_client.close()
    if engine.stopped_reason == "lost leadership":
        print("koordfw: error: lost leadership", file=sys.stderr)
        return 1
    return 0


def load_registry(args: argparse.Namespace) -> Any:
    """The profile's plugins; a plugin that failed to load is a warning line (the others run)."""
    registry = registry_from_args(args)
    for e in registry.errors:
        print(f"koordfw: warning: plugin {e.name!r} failed to load: {e.error}", file=sys.stderr)
    return registry


async def run_process(proc: Any, args: argparse.Namespace) -> None:
    """Run a long-lived mode (the scheduler engine, the manager: ``run()``, ``stop(reason)``, ``started``,
    ``health()``, ``unhealthy_reason()``) with its ``/healthz`` on ``--health-address``, until it stops;
    SIGTERM or SIGINT stops it gracefully."""
    import anyio

    from ..engines.kube.health import start_health_server

    runner = None
    if args.health_address:
        host, port = split_address(args.health_address)
        runner, _ = await start_health_server(host, port, proc.health, lambda: proc.started.is_set(),
                                              proc.unhealthy_reason)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, proc)
            await proc.run()
            tg.cancel_scope.cancel()
    finally:
        if runner is not None:
            await runner.cleanup()


async def _stop_on_signal(proc: Any) -> None:
    import anyio

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for sig in signals:
            proc.stop(f"signal {sig}")
            return
