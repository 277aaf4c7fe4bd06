"""Koordinator's and kube-scheduler's configuration, unchanged: a ``KubeSchedulerConfiguration``
(``kubescheduler.config.k8s.io/v1beta2``, ``v1beta3``, ``v1``), or the ConfigMap that ships one (as
Koordinator's ``config/manager/scheduler-config.yaml``), becomes a koordfw profile.

The one mapping of Koordinator's and kube-scheduler's plugin names to koordfw's plugins, and of their
args to koordfw's args, is :data:`PLUGINS` (docs/koordinator-config.md shows it as a table; a test
checks the two agree). A name of Koordinator's or kube's with no koordfw counterpart (:data:`NO_COUNTERPART`)
is an error naming it when it is enabled or configured, never a silent drop; one that koordfw covers
elsewhere maps to ``None`` with the reason. Names that are koordfw's own pass unchanged, and
:meth:`koordfw.core.plugins.Registry.configure` refuses any name that is neither (with a did-you-mean).

Args keep their wire names where koordfw's args class mirrors the Go type (most do); ``apiVersion`` and
``kind`` are checked and dropped; the fields that differ are converted by the plugin's entry
(kube's ``scoringStrategy: {type, resources}`` object, Go durations); fields that set up the process
(workers, GC intervals) are dropped with the reason in the table; any other field reaches koordfw's
args class, which refuses what it does not know.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .errors import ConfigError
from .quantity import parse_duration
from .safeload import InputError, check_depth, load_yaml

#: the KubeSchedulerConfiguration versions read
API_VERSIONS = ("kubescheduler.config.k8s.io/v1beta2", "kubescheduler.config.k8s.io/v1beta3",
                "kubescheduler.config.k8s.io/v1")
KIND = "KubeSchedulerConfiguration"

#: top-level KubeSchedulerConfiguration fields of the process, which koordfw's flags set
#: (``koordfw scheduler --leader-elect*``, ``--kube-api-qps``/``--kube-api-burst``, ``--health-address``)
PROCESS_FIELDS = ("leaderElection", "clientConnection", "parallelism", "healthzBindAddress", "metricsBindAddress",
                  "enableProfiling", "enableContentionProfiling", "delayCacheUntilActive")

ArgsFn = Callable[[dict[str, Any], str], dict[str, Any]]


@attrs.frozen
class PluginMapping:
    """Where a Koordinator/kube plugin name goes: ``koordfw`` (None: nothing to run, see ``note``),
    how its args become koordfw's (``args``; None: unchanged), and the doc table's ``note``."""

    koordfw: str | None
    note: str = ""
    args: ArgsFn | None = None
    #: the args fields converted (wire name -> koordfw's wire name or a description), for the doc table
    fields: tuple[tuple[str, str], ...] = ()
    #: a warning printed when the plugin is enabled (its behaviour is not fully carried over)
    warn: str = ""
    #: for a plugin mapped to None: its args are accepted and not read (the warning says why)
    ignore_args: bool = False


def _drop(args: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k not in fields}


def _resources(v: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(v, list):
        raise ConfigError(f"{where}: expected a list of {{name, weight}}")
    out = []
    for i, r in enumerate(v):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or set(r) - {"name", "weight"}:
            raise ConfigError(f"{where}[{i}]: expected {{name: ..., weight: ...}}")
        out.append({"name": r["name"], "weight": r.get("weight", 1)})
    return out


def _node_resources_fit(args: dict[str, Any], where: str) -> dict[str, Any]:
    """kube's NodeResourcesFitArgs: ``scoringStrategy: {type, resources, requestedToCapacityRatio}``
    becomes koordfw's ``scoringStrategy`` (the type), ``resources`` and ``requestedToCapacityRatio``."""
    out = dict(args)
    ss = out.pop("scoringStrategy", None)
    if ss is None:
        return out
    if isinstance(ss, str):  # koordfw's own form
        out["scoringStrategy"] = ss
        return out
    if not isinstance(ss, dict):
        raise ConfigError(f"{where}.scoringStrategy: expected {{type: ..., resources: [...]}}")
    extra = set(ss) - {"type", "resources", "requestedToCapacityRatio"}
    if extra:
        raise ConfigError(f"{where}.scoringStrategy: unknown field(s) {sorted(extra)}; "
                          f"known: type, resources, requestedToCapacityRatio")
    out["scoringStrategy"] = ss.get("type") or "LeastAllocated"
    if "resources" in ss and ss["resources"] is not None:
        out["resources"] = _resources(ss["resources"], f"{where}.scoringStrategy.resources")
    if ss.get("requestedToCapacityRatio") is not None:
        out["requestedToCapacityRatio"] = ss["requestedToCapacityRatio"]
    return out


def _seconds_of(fields: tuple[str, ...]) -> ArgsFn:
    """Go durations (``metav1.Duration``: ``"120s"``) to koordfw's seconds."""

    def convert(args: dict[str, Any], where: str) -> dict[str, Any]:
        out = dict(args)
        for f in fields:
            if f in out and isinstance(out[f], str):
                try:
                    out[f] = parse_duration(out[f], allow_negative=False)
                except ValueError as e:
                    raise ConfigError(f"{where}.{f}: {e}") from None
        return out

    return convert


#: ElasticQuotaArgs fields with no koordfw counterpart that do not change placements
_EQ_DROPPED = ("quotaGroupNamespace", "enableQueueHint", "quotaSnapshotUpdateInterval")


def _elastic_quota(args: dict[str, Any], where: str) -> dict[str, Any]:
    return _seconds_of(("delayEvictTime", "revokePodInterval"))(_drop(args, _EQ_DROPPED), where)


def _coscheduling(args: dict[str, Any], where: str) -> dict[str, Any]:
    out = _drop(args, ("controllerWorkers",))
    if isinstance(out.get("defaultTimeout"), (int, float)) and not isinstance(out["defaultTimeout"], bool):
        out["defaultTimeout"] = f"{out['defaultTimeout']}s"
    return out


_RESERVATION_DROPPED = ("controllerWorkers", "gcDurationSeconds", "gcIntervalSeconds", "disableGarbageCollection",
                        "resyncIntervalSeconds")


def _device_share(args: dict[str, Any], where: str) -> dict[str, Any]:
    """DeviceShareArgs' ``scoringStrategy.type`` is gpu_share's ``policy`` (LeastAllocated: spread,
    MostAllocated: binpack); ``scoringStrategy.resources`` is dropped (gpu_share scores the GPU share)."""
    out = dict(args)
    ss = out.pop("scoringStrategy", None)
    if ss is not None:
        if not isinstance(ss, dict):
            raise ConfigError(f"{where}.scoringStrategy: expected {{type: ..., resources: [...]}}")
        kind = str(ss.get("type") or "LeastAllocated")
        policy = {"LeastAllocated": "spread", "MostAllocated": "binpack"}.get(kind)
        if policy is None:
            raise ConfigError(f"{where}.scoringStrategy.type: {kind!r} has no gpu_share policy; "
                              f"use LeastAllocated or MostAllocated")
        out["policy"] = policy
    return out


def _cpu_topology(args: dict[str, Any], where: str) -> dict[str, Any]:
    """NodeNUMAResourceArgs: ``scoringStrategy`` and ``numaScoringStrategy`` keep their ``type``;
    their ``resources`` are dropped (cpu_topology scores by CPUs)."""
    out = dict(args)
    for key in ("scoringStrategy", "numaScoringStrategy"):
        ss = out.get(key)
        if isinstance(ss, dict) and "resources" in ss:
            out[key] = {k: v for k, v in ss.items() if k != "resources"}
    return out


#: every Koordinator and kube-scheduler plugin name koordfw maps (the doc table's rows)
PLUGINS: dict[str, PluginMapping] = {
    # -- kube-scheduler's in-tree plugins (pkg/scheduler/framework/plugins/names) --
    "PrioritySort": PluginMapping("priority_sort"),
    "SchedulingGates": PluginMapping("scheduling_gates"),
    "NodeUnschedulable": PluginMapping("node_unschedulable"),
    "NodeName": PluginMapping(None, "a pod with spec.nodeName is bound already: koordfw never schedules it"),
    "NodeAffinity": PluginMapping("node_selector", "nodeSelector and node affinity; `addedAffinity` is not read "
                                  "(refused)"),
    "TaintToleration": PluginMapping("taint_toleration"),
    "NodePorts": PluginMapping("node_ports"),
    "NodeResourcesFit": PluginMapping(
        "node_resources_fit", "kube's scoring: unrequested extended resources skipped, resources a node does not "
        "advertise left out of the weights, 100m/200Mi for containers without requests",
        _node_resources_fit,
        (("scoringStrategy.type", "scoringStrategy"), ("scoringStrategy.resources", "resources"),
         ("scoringStrategy.requestedToCapacityRatio", "requestedToCapacityRatio"),
         ("ignoredResources", "ignoredResources"), ("ignoredResourceGroups", "ignoredResourceGroups"))),
    "NodeResourcesBalancedAllocation": PluginMapping(
        "node_resources_balanced_allocation", "kube's balanced-allocation score, opt-in in koordfw's own profile",
        fields=(("resources", "resources"),)),
    "VolumeRestrictions": PluginMapping("volume_restrictions"),
    "NodeVolumeLimits": PluginMapping("node_volume_limits"),
    "EBSLimits": PluginMapping("node_volume_limits", "the CSI limits cover the in-tree volume types"),
    "GCEPDLimits": PluginMapping("node_volume_limits", "the CSI limits cover the in-tree volume types"),
    "AzureDiskLimits": PluginMapping("node_volume_limits", "the CSI limits cover the in-tree volume types"),
    "CinderLimits": PluginMapping("node_volume_limits", "the CSI limits cover the in-tree volume types"),
    "VolumeBinding": PluginMapping("volume_binding", "", lambda a, w: _drop(a, ("bindTimeoutSeconds",)),
                                   (("bindTimeoutSeconds", "dropped: koordfw binds the pod at once and the kubelet "
                                     "waits for its volumes (see volume_binding)"),)),
    "VolumeZone": PluginMapping("volume_zone"),
    "PodTopologySpread": PluginMapping("pod_topology_spread", "",
                                       fields=(("defaultConstraints", "defaultConstraints"),
                                               ("defaultingType", "defaultingType"))),
    "InterPodAffinity": PluginMapping("inter_pod_affinity", "",
                                      fields=(("hardPodAffinityWeight", "hardPodAffinityWeight"),
                                              ("ignorePreferredTermsOfExistingPods",
                                               "ignorePreferredTermsOfExistingPods"))),
    "ImageLocality": PluginMapping("image_locality"),
    "DefaultPreemption": PluginMapping("default_preemption", "",
                                       fields=(("minCandidateNodesPercentage", "minCandidateNodesPercentage"),
                                               ("minCandidateNodesAbsolute", "minCandidateNodesAbsolute"))),
    "DefaultBinder": PluginMapping("default_binder"),
    # -- Koordinator's (pkg/scheduler/plugins) --
    "LoadAwareScheduling": PluginMapping("load_aware", "args unchanged (same field names)"),
    "NodeNUMAResource": PluginMapping("cpu_topology", "", _cpu_topology,
                                      (("defaultCPUBindPolicy", "defaultCPUBindPolicy"),
                                       ("scoringStrategy.type", "scoringStrategy.type"),
                                       ("numaScoringStrategy.type", "numaScoringStrategy.type"),
                                       ("*.resources", "dropped: cpu_topology scores by CPUs"))),
    "DeviceShare": PluginMapping("gpu_share", "", _device_share,
                                 (("scoringStrategy.type", "policy (LeastAllocated: spread, MostAllocated: binpack)"),
                                  ("scoringStrategy.resources", "dropped: gpu_share scores the GPU share"))),
    "Reservation": PluginMapping("reservation", "", lambda a, w: _drop(a, _RESERVATION_DROPPED),
                                 tuple((f, "dropped: controller tuning") for f in _RESERVATION_DROPPED)),
    "Coscheduling": PluginMapping("gang", "", _coscheduling,
                                  (("defaultTimeout", "defaultTimeout"), ("defaultMatchPolicy", "defaultMatchPolicy"),
                                   ("enablePreemption", "enablePreemption (job-level preemption)"),
                                   ("controllerWorkers", "dropped: controller tuning"))),
    "ElasticQuota": PluginMapping("elastic_quota", "", _elastic_quota,
                                  (("delayEvictTime", "delayEvictTime (Go duration to seconds)"),
                                   ("revokePodInterval", "revokePodInterval (Go duration to seconds)"),
                                   ("quotaGroupNamespace", "dropped: the namespace of Koordinator's system and "
                                    "default quota groups, which koordfw's elastic_quota builds in"),
                                   ("enableQueueHint", "dropped: a queueing switch of Koordinator's; koordfw's "
                                    "plugin registers its events itself"),
                                   ("quotaSnapshotUpdateInterval", "dropped: koordfw keeps no periodic quota "
                                    "snapshot"))),
    "SchedulingHint": PluginMapping("scheduling_hint", "", fields=(("maxHintNodes", "maxHintNodes"),)),
    "DefaultPreBind": PluginMapping(None, "built into koordfw's binding: the default binder writes the "
                                    "annotations every pre_bind plugin asked for, with the binding"),
}

#: names of Koordinator's and kube-scheduler's with no koordfw counterpart: an error when enabled or
#: configured (disabling one is accepted: it does not run)
NO_COUNTERPART: dict[str, str] = {
    "NodeResourcesFitPlus": "Koordinator's per-resource scoring strategies",
    "ScarceResourceAvoidance": "Koordinator's scarce-resource avoidance",
    "DynamicResources": "kube's dynamic resource allocation",
    "NodeDeclaredFeatures": "kube's node declared features",
    "SelectorSpread": "kube's deprecated selector spreading (use PodTopologySpread)",
    "ServiceAffinity": "kube's removed service affinity",
}


def koordfw_name_for(name: str) -> str | None:
    """The koordfw plugin of a Koordinator/kube plugin name (None if it has none or is not one)."""
    m = PLUGINS.get(name)
    return None if m is None else m.koordfw


def unwrap_configmap(raw: Any, source: str) -> tuple[Any, str]:
    """A ConfigMap holding one KubeSchedulerConfiguration in its ``data`` (as Koordinator ships
    ``koord-scheduler-config``): that configuration, and ``source`` naming the key."""
    if not (isinstance(raw, dict) and raw.get("kind") == "ConfigMap"):
        return raw, source
    data = raw.get("data")
    found = []
    if isinstance(data, dict):
        for key, text in data.items():
            if not isinstance(text, str):
                continue
            try:
                doc = load_yaml(text)
            except InputError:
                continue
            if isinstance(doc, dict) and doc.get("kind") == KIND:
                found.append((key, doc))
    if len(found) != 1:
        raise ConfigError(f"{source}: a ConfigMap is read as a profile only when its data holds one "
                          f"{KIND}; found {len(found)}")
    key, doc = found[0]
    try:
        check_depth(doc)
    except InputError as e:
        raise ConfigError(f"{source}: data.{key}: {e}") from None
    return doc, f"{source}: data.{key}"


def is_kube_config(raw: Any) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == KIND


def to_profile_dict(raw: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """A KubeSchedulerConfiguration as koordfw's profile dict (plugin names and args mapped), and the
    warnings to print. Raises :class:`ConfigError` for what cannot be carried over."""
    api = raw.get("apiVersion")
    if api is not None and api not in API_VERSIONS:
        raise ConfigError(f"{source}: apiVersion: {str(api)[:60]!r} is not read; use one of {', '.join(API_VERSIONS)}")
    known = {"apiVersion", "kind", "profiles", "percentageOfNodesToScore", "podInitialBackoffSeconds",
             "podMaxBackoffSeconds", "extenders", *PROCESS_FIELDS}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{source}: unknown {KIND} field(s) {sorted(unknown)}; known: {sorted(known)}")
    if raw.get("extenders"):
        raise ConfigError(f"{source}: extenders: koordfw calls no scheduler extenders; remove them")
    profiles = raw.get("profiles")
    if profiles is None:
        profiles = [{}]
    if not isinstance(profiles, list) or not profiles:
        raise ConfigError(f"{source}: profiles: expected a list of one profile")
    if len(profiles) > 1:
        names = [str(p.get("schedulerName", "default-scheduler"))[:60] if isinstance(p, dict) else "?"
                 for p in profiles]
        raise ConfigError(f"{source}: profiles: koordfw runs one profile per process, found {len(profiles)} "
                          f"({', '.join(names)}); keep the one to run, or run one koordfw per profile")
    prof = profiles[0]
    if not isinstance(prof, dict):
        raise ConfigError(f"{source}: profiles[0]: expected a mapping")
    out: dict[str, Any] = {k: v for k, v in prof.items() if k not in ("plugins", "pluginConfig")}
    for k in ("percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds"):
        if k in raw and k not in out:
            out[k] = raw[k]
    warnings: list[str] = []
    plugins = prof.get("plugins")
    if plugins is not None:
        if not isinstance(plugins, dict):
            raise ConfigError(f"{source}: profiles[0].plugins: expected a mapping of extension point to "
                              f"enabled/disabled lists")
        out["plugins"] = {point: _point(val, f"profiles[0].plugins.{point}", source, warnings)
                          for point, val in plugins.items()}
    pc = prof.get("pluginConfig")
    if pc is not None:
        out["pluginConfig"] = _plugin_config(pc, source)
    return out, warnings


def _point(val: Any, where: str, source: str, warnings: list[str]) -> Any:
    if not isinstance(val, dict):
        return val  # profile_from_dict names the error
    out = dict(val)
    for key in ("enabled", "disabled"):
        items = val.get(key)
        if not isinstance(items, list):
            continue
        mapped = []
        for i, it in enumerate(items):
            name = it if isinstance(it, str) else it.get("name") if isinstance(it, dict) else None
            if not isinstance(name, str) or name == "*":
                mapped.append(it)
                continue
            if name in NO_COUNTERPART:
                if key == "disabled":
                    continue  # not running in koordfw either
                raise ConfigError(f"{source}: {where}.{key}[{i}]: plugin {name!r} ({NO_COUNTERPART[name]}) has "
                                  f"no koordfw counterpart; remove it (see docs/koordinator-config.md)")
            m = PLUGINS.get(name)
            if m is None:
                mapped.append(it)  # koordfw's own name, or unknown: the registry decides
                continue
            if m.koordfw is None:
                if key == "enabled" and m.warn and m.warn not in warnings:
                    warnings.append(m.warn)
                continue  # covered elsewhere or nothing to do (PLUGINS says why)
            if any((x if isinstance(x, str) else x.get("name") if isinstance(x, dict) else None) == m.koordfw
                   for x in mapped):
                continue  # two kube names of one koordfw plugin (EBSLimits, NodeVolumeLimits)
            mapped.append(m.koordfw if isinstance(it, str) else {**it, "name": m.koordfw})
        out[key] = mapped
    return out


def _plugin_config(pc: Any, source: str) -> Any:
    if not isinstance(pc, list):
        return pc  # koordfw's mapping form, or an error profile_from_dict names
    out: list[Any] = []
    for i, item in enumerate(pc):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            out.append(item)
            continue
        name, args = item["name"], item.get("args")
        where = f"profiles[0].pluginConfig[{i}].args"
        if isinstance(args, dict):
            args = dict(args)
            args.pop("apiVersion", None)
            kind = args.pop("kind", None)
            if kind is not None and kind != f"{name}Args":
                raise ConfigError(f"{source}: {where}.kind: {str(kind)[:60]!r} is not {name}Args")
        if name in NO_COUNTERPART:
            raise ConfigError(f"{source}: profiles[0].pluginConfig[{i}]: plugin {name!r} ({NO_COUNTERPART[name]}) "
                              f"has no koordfw counterpart; remove it (see docs/koordinator-config.md)")
        m = PLUGINS.get(name)
        if m is None:
            out.append({**item, "args": args})
            continue
        if m.koordfw is None:
            if args and not m.ignore_args:
                raise ConfigError(f"{source}: profiles[0].pluginConfig[{i}]: {name} takes no args in koordfw "
                                  f"({m.note})")
            continue
        if isinstance(args, dict) and m.args is not None:
            args = m.args(args, f"{source}: {where}")
        out.append({"name": m.koordfw, "args": args})
    return out
