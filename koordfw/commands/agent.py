"""``koordfw agent``: the node QoS loop on this machine; ``koordfw agent plan --state FILE``: a dry plan.

Input bounds: the state file is at most :data:`MAX_STATE_BYTES` as JSON and :data:`MAX_YAML_BYTES` as
YAML, the profile (``--config``, YAML) at most :data:`MAX_YAML_BYTES`, all UTF-8, read with
:mod:`koordfw.core.safeload` (nesting, YAML aliases and NaN/Infinity refused); ``--interval`` is finite,
:data:`~koordfw.agent.loop.MIN_INTERVAL`..:data:`~koordfw.agent.loop.MAX_INTERVAL` seconds;
``--node-metric-interval``, ``--topology-interval`` and ``--device-interval`` 0 (off) or 1..86400 s; the
kubelet configuration (``--kubelet-config``) at most 1 MiB of YAML.
Any bad input exits 2 with one ``koordfw: error: FILE: field F: ...`` line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..command_api import Commands

if TYPE_CHECKING:
    from ..core.nodestate import NodeState
    from ..core.plugins import Registry
    from ..core.profile import Profile


def register(sub: Commands) -> None:
    p = sub.add(
        "agent", help="run the node QoS agent (collect → plan → apply on cgroups), or print a plan",
        description="Run the node agent: every --interval seconds, collect node and pod usage from the kubelet's "
                    "cgroup tree, ask the node QoS plugins (qos_plan) for the cgroup values they want, and write "
                    "what differs. On SIGTERM/SIGINT the plugins restore what they throttled. "
                    "`koordfw agent plan --state STATE.json` prints the writes for a node state instead.")
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup", help="cgroup mount root (default /sys/fs/cgroup)")
    p.add_argument("--resctrl-root", default="/sys/fs/resctrl", help="resctrl mount (default /sys/fs/resctrl)")
    p.add_argument("--kubepods", default=None,
                   help="the kubepods dir under each controller (default kubepods; kubepods.slice with systemd)")
    p.add_argument("--cgroup-driver", choices=("auto", "systemd", "cgroupfs"), default="auto",
                   help="the kubelet's cgroup driver (default auto: systemd when the cpu cgroup root holds "
                        "kubepods.slice, cgroupfs when it holds kubepods, as Koordinator's koordlet detects it)")
    p.add_argument("--cgroup-version", type=int, choices=(1, 2), default=None, help="default: detected")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between rounds (default 1)")
    p.add_argument("--config", metavar="FILE", help="profile YAML with the plugins' pluginConfig")
    p.add_argument("--disable", metavar="NAME", action="append", default=[], help="disable a plugin (repeatable)")
    p.add_argument("--pods-from", metavar="DIR", help="pod (and Node) manifests giving pods' QoS metadata")
    p.add_argument("--node-name", default=None, help="default: the host name")
    kube = p.add_mutually_exclusive_group()
    kube.add_argument("--kubeconfig", metavar="FILE",
                      help="read this node's pods from the API (instead of --pods-from) and publish its NodeMetric")
    kube.add_argument("--in-cluster", action="store_true", help="as --kubeconfig, with the pod's service account")
    p.add_argument("--node-metric-interval", type=float, default=60.0,
                   help="with --kubeconfig/--in-cluster: 0 turns the NodeMetric off; otherwise the "
                        "reportIntervalSeconds of a NodeMetric the agent has to create (default 60). The object's "
                        "spec.metricCollectPolicy then sets the report interval and the aggregation")
    p.add_argument("--topology-interval", type=float, default=30.0,
                   help="seconds between NodeResourceTopology checks (written when it changed; default 30; 0 = off)")
    p.add_argument("--device-interval", type=float, default=60.0,
                   help="seconds between Device checks from NVML (default 60; 0 = off; no NVML: off)")
    p.add_argument("--kubelet-config", metavar="FILE",
                   help="the kubelet's KubeletConfiguration (cpuManagerPolicy, cpuManagerPolicyOptions, "
                        "reservedSystemCPUs, topologyManagerPolicy/Scope), reported as the CPU manager policy")
    p.add_argument("--kubelet-root-dir", metavar="DIR", default="/var/lib/kubelet",
                   help="the kubelet's root dir, for cpu_manager_state with the static policy (default /var/lib/kubelet)")
    p.add_argument("--dry-run", action="store_true", help="log the writes, change nothing")
    p.add_argument("--once", action="store_true", help="run one round and exit (writes stay in place)")
    p.add_argument("--metrics-listen", metavar="HOST:PORT", default=None,
                   help="serve Prometheus /metrics there (default off; loopback only)")
    p.add_argument("--metrics-allow-remote", action="store_true", help="allow a non-loopback --metrics-listen")
    p.set_defaults(func=run)
    sp = Commands.nested(p, dest="agent_command", metavar="SUBCOMMAND")
    pl = sp.add("plan", help="print the writes the QoS plugins would make for a node state file",
                description="Read a node state (JSON or YAML) and print, as JSON, the cgroup/resctrl "
                            "writes the enabled QoS plugins would make and the pods they would evict: "
                            "{\"writes\": [{path, value, plugin, fs}], \"evictions\": [{pod, uid, reason, "
                            "plugin}]}, paths relative to the filesystem root. Touches nothing.")
    pl.add_argument("--state", required=True, metavar="FILE",
                    help="the node state (JSON or YAML; format in docs/agent.md, e.g. examples/agent/state.json)")
    pl.add_argument("--config", dest="plan_config", metavar="FILE",
                    help="profile YAML; the state's `config` is merged over its pluginConfig")
    # also after `plan` (`agent plan --disable X`); added to the agent's own --disable
    pl.add_argument("--disable", dest="plan_disable", metavar="NAME", action="append", default=[],
                    help="disable a plugin (repeatable)")
    pl.add_argument("--all", action="store_true",
                    help="also list writes that would not change the current value given in `cgroups`")
    pl.set_defaults(func=run_plan)
    # plugin packages add node-side sub-commands (e.g. gpu_share's `agent devices`) through this group; each
    # entry point is a register(Commands) called with these sub-commands
    from importlib import metadata

    for ep in sorted(metadata.entry_points(group="koordfw.agent_commands"), key=lambda e: e.name):
        try:
            ep.load()(sp)
        except Exception as e:  # a broken add-on must not break the agent
            print(f"koordfw: agent sub-command {ep.name!r} failed to load: {e}", file=sys.stderr)


#: the largest node state file read by ``agent plan --state`` as JSON (5000 pods are about 1 MiB,
#: read in 0.1 s)
MAX_STATE_BYTES = 8 * 2**20
#: the largest YAML read here (a YAML state file, the ``--config`` profile): the pure-Python YAML
#: reader needs up to 16 s and 400 MiB per MiB of dense flow YAML, so 512 KiB stays under 10 s
MAX_YAML_BYTES = 512 * 2**10


def _load_profile(config: str | None) -> Profile:
    """The ``--config`` profile, read with the bounded loaders (UTF-8, nesting and aliases bounded)."""
    from ..core.errors import ConfigError
    from ..core.profile import Profile, profile_from_dict
    from ..core.safeload import load_yaml, read_text

    if config is None:
        return Profile()
    try:
        raw = load_yaml(read_text(config, limit=MAX_YAML_BYTES))
    except OSError as e:
        raise ConfigError(f"{config}: cannot read profile: {e.strerror or e}") from None
    except ValueError as e:  # InputError, and Python's own limit on integer digits
        raise ConfigError(f"{config}: {_input_error(e)}") from None
    return profile_from_dict(raw, source=str(config))


def _load_registry(config: str | None, disable: list[str], plugin_config: dict[str, Any] | None = None,
                   plugin_config_source: str = "") -> Registry:
    """The registry of ``--config`` with ``plugin_config`` (a state file's ``config``) merged over its
    pluginConfig. An error in ``plugin_config`` names ``plugin_config_source`` and the field
    ``config.<plugin>``, not the profile; entries of plugins switched off with ``--disable`` are dropped."""
    from ..core.errors import ConfigError
    from ..core.plugins import Registry
    from ..core.profile import structure_args

    profile = _load_profile(config)
    reg = Registry(profile).load(disable=set(disable))
    for e in reg.errors:
        print(f"koordfw: warning: plugin {e.name!r} from {e.distribution!r} failed to load: {e.error}", file=sys.stderr)
    if plugin_config:
        src = plugin_config_source or "<state>"
        off = set(disable) | set(profile.disable) | {e.name for e in reg.errors}
        merged = dict(profile.plugin_config)
        for name, raw in plugin_config.items():
            if name in off:
                continue
            info = reg.plugins.get(name)
            if info is None:
                raise ConfigError(f"{src}: field config.{name}: unknown plugin {name!r}; "
                                  f"available: {', '.join(sorted(reg.plugins))}")
            if info.args_cls is None:
                if raw:
                    raise ConfigError(f"{src}: field config.{name}: plugin {name!r} takes no args")
            else:
                try:
                    structure_args(name, info.args_cls, raw, source=src)
                except ConfigError as e:
                    detail = str(e).removeprefix(f"{src}: ").replace(f"pluginConfig.{name}", f"config.{name}")
                    detail = detail.removeprefix(f"config.{name}: ")
                    raise ConfigError(f"{src}: field config.{name}: {detail}") from None
            merged[name] = raw
        profile.plugin_config = merged
        reg.configure()  # every part is valid on its own: structures the merged args
    return reg


def _input_error(e: ValueError) -> str:
    """The message of a loader's error; Python's own digit limit reworded (its hint is for programmers)."""
    msg = str(e)
    if msg.startswith("Exceeds the limit"):
        return f"an integer with more than {sys.get_int_max_str_digits()} digits"
    return msg


def _read_state(path: str) -> Any:
    """The state file's document: JSON, else YAML; UTF-8, at most :data:`MAX_STATE_BYTES`, bounded."""
    from ..core.errors import ManifestError
    from ..core.safeload import load_yaml, loads_json, read_text

    try:
        text = read_text(path, limit=MAX_STATE_BYTES)
    except OSError as e:
        raise ManifestError(f"cannot read: {e.strerror or e}", file=str(path)) from None
    except ValueError as e:
        raise ManifestError(str(e), file=str(path)) from None
    try:
        return loads_json(text)
    except ValueError as json_error:
        if len(text.encode("utf-8", "surrogatepass")) > MAX_YAML_BYTES:
            raise ManifestError(f"not JSON ({_input_error(json_error)}), and larger than {MAX_YAML_BYTES} bytes, "
                                f"the most read as YAML", file=str(path)) from None
        try:
            return load_yaml(text)
        except ValueError as e:  # InputError, and Python's own limit on integer digits
            why = _input_error(json_error) if text.lstrip().startswith(("{", "[")) and "JSON at line" not in str(
                json_error) else _input_error(e)
            raise ManifestError(f"neither JSON nor YAML: {why}", file=str(path)) from None


def plan_writes(ns: NodeState, registry: Registry, *, only_changes: bool = True) -> list[dict[str, str]]:
    """The writes the plugins want for ``ns``, simulated in order against ``ns.cgroups``."""
    return plan_node(ns, registry, only_changes=only_changes)["writes"]


def plan_node(ns: NodeState, registry: Registry, *, only_changes: bool = True) -> dict[str, list[dict[str, Any]]]:
    """What ``koordfw agent plan`` prints for ``ns``: ``{"writes": [...], "evictions": [...]}``; the writes
    simulated in order against ``ns.cgroups``, the evictions (``pod``, ``uid``, ``reason``, ``plugin``) in
    plan order. Nothing is written or evicted."""
    import anyio

    from ..agent.executor import path_refusal, values_equal
    from ..core.caller import HookCaller
    from ..core.clock import RealClock
    from ..core.node_runtime import NodeRuntime, PlannedNode, node_handles

    node = PlannedNode(registry, RealClock(), "koordfw agent plan writes nothing")
    node.node_state = ns
    handle_for = node_handles(node)
    registry.bind(handle_for)
    runtime = NodeRuntime(HookCaller(registry, handle_for))
    plan = anyio.run(runtime.run_qos_plan, ns)
    for f in plan.failures:
        if f.bad_output:
            print(f"koordfw: warning: plugin {f.plugin} returned a bad plan: {f.message}", file=sys.stderr)
        else:
            print(f"koordfw: warning: {f.message}", file=sys.stderr)
    writes, evictions = plan.writes, plan.evictions
    current = {("cgroup", k): v for k, v in ns.cgroups.items()}
    out = []
    for w in writes:
        why = path_refusal(w, ns.cgroup_version)
        if why:  # what the executor would refuse is not part of the plan
            print(f"koordfw: warning: plugin {w.plugin} planned a write the agent refuses: {why}", file=sys.stderr)
            continue
        key = (w.fs, w.path)
        if only_changes and values_equal(w.path, current.get(key), w.value):
            continue
        current[key] = w.value
        out.append(w.to_dict())
    return {"writes": out, "evictions": [e.to_dict() for e in evictions]}


def run_plan(args: argparse.Namespace) -> int:
    from ..core.nodestate import NodeState

    ns = NodeState.from_state_file(_read_state(args.state), source=args.state)
    registry = _load_registry(args.plan_config, [*args.disable, *args.plan_disable], dict(ns.config),
                              plugin_config_source=args.state)
    json.dump(plan_node(ns, registry, only_changes=not args.all), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def run(args: argparse.Namespace) -> int:
    import anyio

    from ..agent.cgroups import CgroupLayout, detect_version, resolve_driver
    from ..agent.executor import Executor
    from ..agent.loop import MAX_INTERVAL, MIN_INTERVAL, Agent
    from ..core.errors import ConfigError

    if not (math.isfinite(args.interval) and MIN_INTERVAL <= args.interval <= MAX_INTERVAL):
        raise ConfigError(f"--interval: expected {MIN_INTERVAL} to {MAX_INTERVAL} seconds, got {args.interval!r}")
    for flag in ("node_metric_interval", "topology_interval", "device_interval"):
        v = getattr(args, flag)
        if not (math.isfinite(v) and (v == 0 or 1 <= v <= MAX_INTERVAL)):
            raise ConfigError(f"--{flag.replace('_', '-')}: expected 0 (off) or 1 to {MAX_INTERVAL} seconds, got {v!r}")
    from ..agent.topology import read_kubelet_config

    kubelet = read_kubelet_config(args.kubelet_config)
    listen = None
    if args.metrics_listen:
        from ..agent.metrics_server import parse_listen

        listen = parse_listen(args.metrics_listen, args.metrics_allow_remote)
    try:
        version = args.cgroup_version or detect_version(args.cgroup_root)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    try:
        driver, kubepods = resolve_driver(args.cgroup_root, version, args.cgroup_driver, args.kubepods)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    layout = CgroupLayout(Path(args.cgroup_root), version, driver, kubepods)
    registry = _load_registry(args.config, args.disable)
    executor = Executor({"cgroup": args.cgroup_root, "resctrl": args.resctrl_root}, dry_run=args.dry_run,
                        cgroup_version=version)
    agent = Agent(registry, layout, executor, interval=args.interval, node_name=args.node_name,
                  pods_from=args.pods_from)
    if kubelet.policy:  # the plugins see the CPU manager policy as the NodeResourceTopology reports it
        from ..agent.topology import kubelet_policy_annotation, read_processors

        agent.extra_annotations = kubelet_policy_annotation(kubelet, read_processors(agent.sys_root))

    async def main() -> None:
        runner = None
        if listen is not None:
            from ..agent.metrics_server import start_metrics_server

            runner = await start_metrics_server(*listen)
        try:
            if args.kubeconfig or args.in_cluster:
                from ..engines.kube.client import KubeClient
                from ..engines.kube.node import run_agent_on_cluster

                client = (KubeClient.in_cluster() if args.in_cluster
                          else await KubeClient.from_kubeconfig(args.kubeconfig))
                async with client:
                    await run_agent_on_cluster(agent, client, publish_interval=args.node_metric_interval or None,
                                               once=args.once, topology_interval=args.topology_interval or None,
                                               device_interval=args.device_interval or None,
                                               kubelet_config=args.kubelet_config,
                                               kubelet_root=args.kubelet_root_dir, resctrl_root=args.resctrl_root)
            else:
                await agent.run(once=args.once)
        finally:
            if runner is not None:
                await runner.cleanup()

    anyio.run(main)
    if args.once:
        json.dump({"round": agent.rounds, "pods": len(agent.node_state.pods) if agent.node_state else 0,
                   "writes": [{**r.write.to_dict(), "old": r.old, "outcome": r.outcome}
                              for r in agent.last_results if r.outcome != "unchanged"]},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0
