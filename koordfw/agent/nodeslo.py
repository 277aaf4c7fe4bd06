"""The node's ``NodeSLO`` (``slo.koordinator.sh/v1alpha1``, named like the node) as the agent's QoS config.

:data:`NODESLO_ARGS` is the one mapping from NodeSLO spec fields (Koordinator's ``apis/slo/v1alpha1/
nodeslo_types.go`` names) to the ``pluginConfig`` args of the node QoS plugins; docs/agent.md prints the
same table. Precedence: a field present in the NodeSLO overrides the same arg of the local ``--config``
profile; a field the NodeSLO leaves out keeps the local value (and an arg neither sets keeps the plugin's
default, which is Koordinator's). Rows whose plugin is not loaded are skipped.

:func:`plugin_config_from_nodeslo` turns a NodeSLO object into that merged pluginConfig and checks every
mapped value with the plugin's own args class, so a bad NodeSLO raises :class:`NodeSLOError` naming the
NodeSLO field; :func:`apply_nodeslo` swaps the registry's args only when the whole NodeSLO is good, so a
malformed one leaves the previous config in force.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..core.errors import ConfigError, KoordfwError, ManifestError
from ..core.nodestate import HostApp, NodeState
from ..core.plugins import Registry
from ..core.profile import structure_args


class NodeSLOError(KoordfwError):
    """A NodeSLO that cannot be applied; the message names the object and the field."""


def _be_cpu_idle(cpu_qos: Any) -> Any:
    """``beClass.cpuQOS`` → be_suppress ``beCPUIdle``: BE runs SCHED_IDLE when the class's CPU QoS is
    enabled and its ``schedIdle`` is 1 (Koordinator's BE default); absent ``enable``: not mapped."""
    if not isinstance(cpu_qos, Mapping):
        raise ValueError("expected a mapping")
    if "enable" not in cpu_qos or cpu_qos["enable"] is None:
        return _ABSENT
    enable, idle = cpu_qos["enable"], cpu_qos.get("schedIdle", 1)
    if not isinstance(enable, bool):
        raise ValueError(f"enable: expected true or false, got {enable!r}")
    if isinstance(idle, bool) or idle not in (0, 1):
        raise ValueError(f"schedIdle: expected 0 or 1, got {idle!r}")
    return enable and idle == 1


_ABSENT = object()


@attrs.frozen
class ArgMapping:
    """One row: the NodeSLO ``spec`` field at ``slo`` (dotted) sets ``arg`` (dotted) of ``plugin``'s args."""

    slo: str
    plugin: str
    arg: str
    convert: Callable[[Any], Any] | None = None
    note: str = ""


#: the fields of a class's ``memoryQOS`` the memory_qos plugin takes (Koordinator's ``MemoryQOSCfg``
#: without the page cache limit)
MEMORY_QOS_FIELDS = ("enable", "minLimitPercent", "lowLimitPercent", "throttlingPercent", "wmarkRatio",
                     "wmarkScalePermill", "wmarkMinAdj", "priorityEnable", "priority", "oomKillGroup")


def _rows() -> tuple[ArgMapping, ...]:
    rows = [ArgMapping(f"resourceUsedThresholdWithBE.{f}", "be_suppress", f)
            for f in ("enable", "cpuSuppressThresholdPercent", "cpuSuppressMinPercent", "cpuSuppressPolicy")]
    rows.append(ArgMapping("resourceQOSStrategy.beClass.cpuQOS", "be_suppress", "beCPUIdle", _be_cpu_idle,
                           "enable && schedIdle == 1 (schedIdle defaults to 1)"))
    rows += [ArgMapping(f"resourceUsedThresholdWithBE.{f}", "eviction", f)
             for f in ("memoryEvictThresholdPercent", "memoryEvictLowerPercent", "cpuEvictBESatisfactionLowerPercent",
                       "cpuEvictBESatisfactionUpperPercent", "cpuEvictBEUsageThresholdPercent",
                       "cpuEvictTimeWindowSeconds", "cpuEvictPolicy", "evictEnabledPriorityThreshold")]
    rows += [ArgMapping(f"cpuBurstStrategy.{f}", "cpu_burst", f)
             for f in ("policy", "cpuBurstPercent", "cfsQuotaBurstPercent", "cfsQuotaBurstPeriodSeconds",
                       "sharePoolThresholdPercent")]
    for cls, group in (("lsrClass", "LSR"), ("lsClass", "LS"), ("beClass", "BE")):
        rows += [ArgMapping(f"resourceQOSStrategy.{cls}.resctrlQOS.{f}", "llc_isolation", f"{group}.{f}")
                 for f in ("enable", "catRangeStartPercent", "catRangeEndPercent", "mbaPercent")]
    for cls in ("lsrClass", "lsClass", "beClass", "systemClass"):
        rows += [ArgMapping(f"resourceQOSStrategy.{cls}.memoryQOS.{f}", "memory_qos", f"{cls}.{f}")
                 for f in MEMORY_QOS_FIELDS]
    return tuple(rows)


#: NodeSLO spec field → node QoS plugin arg (the table of docs/agent.md)
NODESLO_ARGS: tuple[ArgMapping, ...] = _rows()

#: NodeSLO spec fields no node plugin of koordfw consumes yet (read, checked to be mappings, not applied)
NOT_APPLIED = ("resourceQOSStrategy.*.memoryQOS.{pageCache*}", "resourceQOSStrategy.*.blkioQOS",
               "resourceQOSStrategy.*.networkQOS", "resourceQOSStrategy.{lsrClass,lsClass}.cpuQOS",
               "resourceQOSStrategy.systemClass (but its memoryQOS)",
               "resourceQOSStrategy.{cgroupRoot,policies}", "systemStrategy",
               "extensions")


def _nodeslo_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"NodeSLO {name if isinstance(name, str) else '?'}"


def _lookup(spec: Mapping[str, Any], dotted: str, ctx: str) -> Any:
    cur: Any = spec
    done = "spec"
    for part in dotted.split("."):
        if cur is None:
            return _ABSENT
        if not isinstance(cur, Mapping):
            raise NodeSLOError(f"{ctx}: field {done}: expected a mapping, got {type(cur).__name__}")
        if part not in cur:
            return _ABSENT
        cur = cur[part]
        done = f"{done}.{part}"
    return _ABSENT if cur is None else cur


def _set(target: dict, dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    cur = target
    for part in head:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = dict(nxt) if isinstance(nxt, Mapping) else {}
        cur = nxt
    cur[last] = value


def _why(e: ConfigError) -> str:
    """The plugin's own reason in a structuring error, without the profile's framing."""
    m = re.search(r"invalid (?:value: |type \()(.*?)\)? @ ", str(e))
    return m.group(1) if m else str(e).split(": ", 1)[-1]


def _structure(registry: Registry, plugin: str, raw: Mapping[str, Any], source: str) -> None:
    info = registry.plugins[plugin]
    if info.args_cls is not None:
        structure_args(plugin, info.args_cls, dict(raw), source=source)


def plugin_config_from_nodeslo(obj: Mapping[str, Any], registry: Registry,
                               local: Mapping[str, Any]) -> dict[str, Any]:
    """``local`` (the ``--config`` pluginConfig) with every field the NodeSLO sets applied over it.

    Raises :class:`NodeSLOError` (``NodeSLO <name>: field spec.<path>: <why>``) for a value the target
    plugin's args refuse or a part of the spec of the wrong type."""
    ctx = _nodeslo_name(obj)
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise NodeSLOError(f"{ctx}: field spec: expected a mapping, got {type(spec).__name__}")
    for top in ("resourceUsedThresholdWithBE", "resourceQOSStrategy", "cpuBurstStrategy", "systemStrategy"):
        if spec.get(top) is not None and not isinstance(spec[top], Mapping):
            raise NodeSLOError(f"{ctx}: field spec.{top}: expected a mapping, got {type(spec[top]).__name__}")
    merged: dict[str, Any] = {k: copy.deepcopy(dict(v)) if isinstance(v, Mapping) else v for k, v in local.items()}
    for row in NODESLO_ARGS:
        if row.plugin not in registry.plugins:
            continue
        value = _lookup(spec, row.slo, ctx)
        if value is _ABSENT:
            continue
        if row.convert is not None:
            try:
                value = row.convert(value)
            except ValueError as e:
                raise NodeSLOError(f"{ctx}: field spec.{row.slo}: {e}") from None
            if value is _ABSENT:
                continue
        candidate = copy.deepcopy(merged.get(row.plugin) or {})
        _set(candidate, row.arg, value)
        try:  # the row on its own, so that an error names this NodeSLO field
            _structure(registry, row.plugin, candidate, ctx)
        except ConfigError as e:
            raise NodeSLOError(f"{ctx}: field spec.{row.slo}: {_why(e)} (as {row.plugin} arg {row.arg})") from None
        merged[row.plugin] = candidate
    for plugin, raw in merged.items():  # the rows together (e.g. catRangeStart < catRangeEnd)
        if plugin in registry.plugins and isinstance(raw, Mapping):
            try:
                _structure(registry, plugin, raw, ctx)
            except ConfigError as e:
                fields = sorted(r.slo for r in NODESLO_ARGS if r.plugin == plugin)
                raise NodeSLOError(f"{ctx}: fields spec.{{{', '.join(fields)}}} together: {_why(e)}") from None
    return merged


def host_apps_from_nodeslo(obj: Mapping[str, Any], *, cgroup_version: int, cgroup_driver: str,
                           kubepods: str) -> tuple[tuple[HostApp, ...], dict[str, dict[str, Any]]]:
    """The NodeSLO's ``hostApplications`` as HostApps (their cgroup dirs resolved against the kubelet's
    layout) and, by name, the raw specs (``priority``, ``qos``). Raises :class:`NodeSLOError` naming
    ``spec.hostApplications[i].<field>``."""
    ctx = _nodeslo_name(obj)
    spec = obj.get("spec")
    raw = (spec.get("hostApplications") if isinstance(spec, Mapping) else None) or []
    if not isinstance(raw, list):
        raise NodeSLOError(f"{ctx}: field spec.hostApplications: expected a list")
    apps, specs = [], {}
    for i, a in enumerate(raw):
        if not isinstance(a, Mapping):
            raise NodeSLOError(f"{ctx}: field spec.hostApplications[{i}]: expected a mapping")
        apps.append({"name": a.get("name"), "qos": a.get("qos"), "cgroupPath": a.get("cgroupPath")})
        if isinstance(a.get("name"), str):
            specs[a["name"]] = dict(a)
    try:
        ns = NodeState.from_state_file({"cgroupVersion": cgroup_version, "cgroupDriver": cgroup_driver,
                                        "kubepods": kubepods, "hostApps": apps}, source=ctx)
    except ManifestError as e:
        field = (e.field or "").replace("hostApps", "spec.hostApplications", 1)
        raise NodeSLOError(f"{ctx}: field {field}: {e.detail}") from None
    return ns.host_apps, specs


def apply_nodeslo(registry: Registry, local: Mapping[str, Any], obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """Reconfigure ``registry`` from ``obj`` (``None``: the NodeSLO is gone, back to ``local``) and return
    the pluginConfig now in force. On :class:`NodeSLOError` nothing has changed."""
    merged = dict(local) if obj is None else plugin_config_from_nodeslo(obj, registry, local)
    registry.profile.plugin_config = merged
    registry.configure()  # every part was structured above: this cannot fail on the NodeSLO's values
    return merged
