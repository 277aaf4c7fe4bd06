"""Scheduler profiles: which plugins run at which hook point, in which order, with which weights and args.

A profile is YAML (or a dict)::

    percentageOfNodesToScore: 0          # 0 = Kubernetes' adaptive rule
    pluginTimeoutSeconds: 30
    plugins:                             # per hook point, Kubernetes' merge rule:
      score:                             #   defaults first, then ``enabled`` appended;
        disabled: [{name: "*"}]          #   "*" in ``disabled`` drops the defaults
        enabled: [{name: load_aware, weight: 2}, node_resources_fit]
    disable: [default_preemption]        # switch plugins off everywhere
    pluginConfig:
      node_resources_fit: {scoringStrategy: {type: MostAllocated}}

``pluginConfig`` may also be Kubernetes' list form ``[{name: ..., args: {...}}]``. Args are
structured into the plugin's attrs class (see the ``plugin_args`` hook) with camelCase keys.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import cattrs
import yaml
from cattrs.gen import make_dict_structure_fn, override

from .errors import ConfigError

POINTS = ("queue_sort", "pre_enqueue", "pre_filter", "filter", "post_filter", "pre_score", "score",
          "normalize_score", "reserve", "unreserve", "permit", "pre_bind", "bind", "post_bind",
          "collect", "qos_plan", "runtime_hook", "deschedule", "node_resources", "startup", "shutdown",
          "report")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def make_converter() -> cattrs.Converter:
    """A cattrs converter for plugin args: camelCase keys, unknown keys rejected."""
    conv = cattrs.Converter(forbid_extra_keys=True)

    def factory(cls: type) -> Any:
        overrides = {f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)}
        return make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **overrides)

    conv.register_structure_hook_factory(attrs.has, factory)

    def unstructure_factory(cls: type) -> Any:
        from cattrs.gen import make_dict_unstructure_fn

        overrides = {f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)}
        return make_dict_unstructure_fn(cls, conv, **overrides)

    conv.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    return conv


CONVERTER = make_converter()


def structure_args(plugin: str, cls: type, raw: Any, source: str = "profile") -> Any:
    """Structure ``raw`` into ``cls``; a bad arg names the plugin and the field path."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: pluginConfig.{plugin}: expected a mapping, got {type(raw).__name__}")
    try:
        return CONVERTER.structure(raw, cls)
    except Exception as e:  # cattrs raises ClassValidationError / ForbiddenExtraKeysError / ValueError
        msgs = cattrs.transform_error(e, path=f"pluginConfig.{plugin}", format_exception=_format_exc) if isinstance(
            e, (cattrs.BaseValidationError,)) else [f"pluginConfig.{plugin}: {e}"]
        # cattrs reports Python field names; the user wrote camelCase keys
        prefix = f"pluginConfig.{plugin}"
        msgs = [_camel_path(m, prefix) for m in msgs]
        known = ", ".join(camel(f.name) for f in attrs.fields(cls))
        raise ConfigError(f"{source}: invalid args for plugin {plugin!r}: {'; '.join(msgs)} "
                          f"(known fields: {known})") from None


def _format_exc(exc: BaseException, type_: Any) -> str:
    """cattrs' default wording, plus the validator's own message where it has one."""
    base = cattrs.v.format_exception(exc, type_)
    if isinstance(exc, ValueError) and str(exc) and str(exc) not in base:
        return f"{base}: {exc}"
    return base


def _camel_path(msg: str, prefix: str) -> str:
    head, sep, tail = msg.partition(prefix)
    if not sep:
        return msg
    return head + prefix + re.sub(r"\.([a-z0-9]+(?:_[a-z0-9]+)+)", lambda m: "." + camel(m.group(1)), tail)


@attrs.define
class PluginSet:
    enabled: list[tuple[str, int]] = attrs.field(factory=list)  # (name, weight)
    disabled: set[str] = attrs.field(factory=set)


@attrs.define
class Profile:
    scheduler_name: str = "koordfw-scheduler"
    plugins: dict[str, PluginSet] = attrs.field(factory=dict)
    plugin_config: dict[str, Any] = attrs.field(factory=dict)
    disable: set[str] = attrs.field(factory=set)
    percentage_of_nodes_to_score: int = 0
    plugin_timeout_seconds: float = 30.0
    threaded_plugins: set[str] = attrs.field(factory=set)
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    pod_max_in_unschedulable_seconds: float = 300.0
    source: str = "<default profile>"

    def weight(self, plugin: str) -> int:
        for name, w in self.plugins.get("score", PluginSet()).enabled:
            if name == plugin:
                return w or 1
        return 1

    def names_mentioned(self) -> set[str]:
        out = set(self.plugin_config) | set(self.disable) | set(self.threaded_plugins)
        for ps in self.plugins.values():
            out |= {n for n, _ in ps.enabled}
            out |= {n for n in ps.disabled if n != "*"}
        return out


_KEY_RE = re.compile(r"(?<!^)(?=[A-Z])")


def _point_name(key: str) -> str:
    """Accept ``preFilter``, ``PreFilter`` and ``pre_filter``."""
    return _KEY_RE.sub("_", key).lower()


def _names(items: Any, where: str, source: str) -> list[tuple[str, int]]:
    out = []
    if items is None:
        return out
    if not isinstance(items, list):
        raise ConfigError(f"{source}: {where}: expected a list")
    for i, it in enumerate(items):
        if isinstance(it, str):
            out.append((it, 0))
        elif isinstance(it, dict) and isinstance(it.get("name"), str):
            w = it.get("weight", 0) or 0
            if not isinstance(w, int) or isinstance(w, bool) or w < 0:
                raise ConfigError(f"{source}: {where}[{i}].weight: expected a non-negative integer, got {w!r}")
            out.append((it["name"], w))
        else:
            raise ConfigError(f"{source}: {where}[{i}]: expected a plugin name or {{name: ..., weight: ...}}")
    return out


def profile_from_dict(raw: Any, source: str = "<profile>") -> Profile:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a profile must be a mapping")
    # A KubeSchedulerConfiguration with one profile is accepted too.
    if raw.get("kind") == "KubeSchedulerConfiguration" and isinstance(raw.get("profiles"), list):
        if not raw["profiles"]:
            raise ConfigError(f"{source}: profiles: empty")
        merged = dict(raw["profiles"][0])
        for k in ("percentageOfNodesToScore",):
            if k in raw and k not in merged:
                merged[k] = raw[k]
        raw = merged
    known = {"schedulerName", "plugins", "pluginConfig", "disable", "percentageOfNodesToScore",
             "pluginTimeoutSeconds", "threadedPlugins", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
             "podMaxInUnschedulablePodsDuration", "apiVersion", "kind"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{source}: unknown profile field(s) {sorted(unknown)}; known: {sorted(known)}")
    prof = Profile(source=source)
    if "schedulerName" in raw:
        prof.scheduler_name = str(raw["schedulerName"])
    plugins = raw.get("plugins") or {}
    if not isinstance(plugins, dict):
        raise ConfigError(f"{source}: plugins: expected a mapping of hook point to enabled/disabled lists")
    for key, val in plugins.items():
        point = _point_name(str(key))
        if point == "multi_point":
            point = "*"
        if point != "*" and point not in POINTS:
            raise ConfigError(f"{source}: plugins.{key}: unknown hook point; known: {', '.join(POINTS)}")
        if not isinstance(val, dict):
            raise ConfigError(f"{source}: plugins.{key}: expected a mapping with enabled/disabled")
        extra = set(val) - {"enabled", "disabled"}
        if extra:
            raise ConfigError(f"{source}: plugins.{key}: unknown field(s) {sorted(extra)}")
        ps = PluginSet(enabled=_names(val.get("enabled"), f"plugins.{key}.enabled", source),
                       disabled={n for n, _ in _names(val.get("disabled"), f"plugins.{key}.disabled", source)})
        prof.plugins[point] = ps
    pc = raw.get("pluginConfig") or {}
    if isinstance(pc, list):  # Kubernetes' form
        conv = {}
        for i, item in enumerate(pc):
            if not isinstance(item, dict) or "name" not in item:
                raise ConfigError(f"{source}: pluginConfig[{i}]: expected {{name: ..., args: {{...}}}}")
            conv[str(item["name"])] = item.get("args") or {}
        pc = conv
    if not isinstance(pc, dict):
        raise ConfigError(f"{source}: pluginConfig: expected a mapping of plugin name to args")
    prof.plugin_config = dict(pc)
    dis = raw.get("disable") or []
    if not isinstance(dis, list) or not all(isinstance(d, str) for d in dis):
        raise ConfigError(f"{source}: disable: expected a list of plugin names")
    prof.disable = set(dis)
    thr = raw.get("threadedPlugins") or []
    if not isinstance(thr, list):
        raise ConfigError(f"{source}: threadedPlugins: expected a list of plugin names")
    prof.threaded_plugins = set(map(str, thr))
    for key, attr, typ in (("percentageOfNodesToScore", "percentage_of_nodes_to_score", int),
                           ("pluginTimeoutSeconds", "plugin_timeout_seconds", float),
                           ("podInitialBackoffSeconds", "pod_initial_backoff_seconds", float),
                           ("podMaxBackoffSeconds", "pod_max_backoff_seconds", float),
                           ("podMaxInUnschedulablePodsDuration", "pod_max_in_unschedulable_seconds", float)):
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ConfigError(f"{source}: {key}: expected a non-negative number, got {v!r}")
            if key == "percentageOfNodesToScore" and v > 100:
                raise ConfigError(f"{source}: {key}: must be between 0 and 100, got {v!r}")
            setattr(prof, attr, typ(v))
    return prof


def load_profile(path: str | Path | None) -> Profile:
    if path is None:
        return Profile()
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read profile: {e.strerror or e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{p}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    return profile_from_dict(raw, source=str(p))
