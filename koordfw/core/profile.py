"""Scheduler profiles: which plugins run at which hook point, in which order, with which weights and args.

A profile is YAML (or a dict)::

    percentageOfNodesToScore: 0          # 0 = Kubernetes' adaptive rule
    pluginTimeoutSeconds: 30
    plugins:                             # per hook point, Kubernetes' merge rule:
      score:                             #   defaults first, then ``enabled`` appended;
        disabled: [{name: "*"}]          #   "*" in ``disabled`` drops the defaults
        enabled: [{name: load_aware, weight: 2}, node_resources_fit]
    disable: [default_preemption]        # switch plugins off everywhere (names are checked)
    pluginConfig:
      node_resources_fit: {scoringStrategy: MostAllocated}   # a string, not kube's {type: ...}

``pluginConfig`` may also be Kubernetes' list form ``[{name: ..., args: {...}}]``. Args are
structured into the plugin's attrs class (see the ``plugin_args`` hook) with camelCase keys.

A ``KubeSchedulerConfiguration`` (Koordinator's or kube-scheduler's, with their plugin names and args),
or a ConfigMap holding one, is accepted too: :mod:`koordfw.core.kubeconfig_compat` maps it.
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, override

from .. import hookspecs
from .errors import ConfigError
from .quantity import MAX_DURATION_SECONDS
from .safeload import InputError, check_depth, load_yaml, read_text

#: the hook points ``plugins:`` may name (every hook but ``plugin_args``), from the hookspecs
POINTS = hookspecs.PROFILE_POINTS


def camel(name: str) -> str:
    """A plugin args field's wire name (``cpu_suppress_threshold_percent`` → ``cpuSuppressThresholdPercent``),
    as the profile's converter spells it: what an args validator's error names."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def make_converter() -> cattrs.Converter:
    """A cattrs converter for plugin args: camelCase keys, unknown keys rejected."""
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(float, _finite_float)
    conv.register_structure_hook(bool, _strict_bool)  # else bool, an int subclass, would take the int hook

    # dict[str, Any]: mypy matches **overrides against the named _cattrs_* flags as well as **kwargs
    def factory(cls: type) -> Any:
        overrides: dict[str, Any] = {f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)}
        return make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **overrides)

    conv.register_structure_hook_factory(attrs.has, factory)

    def unstructure_factory(cls: type) -> Any:
        from cattrs.gen import make_dict_unstructure_fn

        overrides: dict[str, Any] = {f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)}
        return make_dict_unstructure_fn(cls, conv, **overrides)

    conv.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    return conv


def _strict_int(v: Any, _: type) -> int:
    """An int arg: an integer (or a float or string holding one); ``65.7`` is refused, not truncated."""
    if isinstance(v, bool):
        raise ValueError(f"expected an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and len(v) < 20:
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise ValueError(f"expected an integer, got {str(v)[:40]}")


def _strict_bool(v: Any, _: type) -> bool:
    """A bool arg: true or false (``bool("false")`` would be True)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ValueError(f"expected true or false, got {str(v)[:40]}")


def _finite_float(v: Any, _: type) -> float:
    """A float arg: a finite number (NaN and infinities are refused)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"expected a number, got {str(v)[:40]}")
    try:
        f = float(v)
    except (ValueError, OverflowError):
        raise ValueError(f"expected a number, got {str(v)[:40]}") from None
    if not math.isfinite(f):
        raise ValueError(f"expected a finite number, got {str(v)[:40]}")
    return f


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


def unknown_plugin_error(name: str, known: Any, where: str) -> ConfigError:
    """The error for a plugin name that no loaded or installed plugin has: ``where`` (``"--disable"``,
    ``"FILE: disable"``, ...) names the field, then a did-you-mean over ``known`` (difflib's close
    matches; ``load-aware`` -> ``load_aware``), Koordinator's and kube-scheduler's own names pointing
    at their koordfw plugin (``LoadAwareScheduling`` -> ``load_aware``), and the names there are."""
    from .kubeconfig_compat import koordfw_name_for

    names = sorted(set(known))
    hint = ""
    mapped = koordfw_name_for(name)
    if mapped is not None and mapped in names:
        hint = f" (Koordinator's/kube-scheduler's name of {mapped!r}: use {mapped!r}, or a KubeSchedulerConfiguration)"
    else:
        by_lower = {n.lower().replace("-", "_"): n for n in names}
        close = difflib.get_close_matches(name.lower().replace("-", "_"), list(by_lower), n=3, cutoff=0.6)
        if close:
            hint = f" (did you mean {' or '.join(repr(by_lower[c]) for c in close)}?)"
    return ConfigError(f"{where}: unknown plugin {name!r}{hint}; available: {', '.join(names)}")


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
    #: what a Koordinator/kube configuration could not carry over in full, for the commands to print
    warnings: list[str] = attrs.field(factory=list)

    def weight(self, plugin: str) -> int:
        """The plugin's score weight: from ``plugins.score.enabled``, else ``multiPoint`` (kube's rule), else 1."""
        for point in ("score", "*"):
            for name, w in self.plugins.get(point, PluginSet()).enabled:
                if name == plugin and w:
                    return w
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
    out: list[tuple[str, int]] = []
    if items is None:
        return out
    if not isinstance(items, list):
        raise ConfigError(f"{source}: {where}: expected a list")
    for i, it in enumerate(items):
        if isinstance(it, str):
            out.append((it, 0))
        elif isinstance(it, dict) and isinstance(it.get("name"), str):
            w = it.get("weight", 0) or 0
            if not isinstance(w, int) or isinstance(w, bool) or not 0 <= w <= 2**31 - 1:
                raise ConfigError(f"{source}: {where}[{i}].weight: expected a non-negative integer below 2^31, "
                                  f"got {str(w)[:40]}")
            out.append((it["name"], w))
        else:
            raise ConfigError(f"{source}: {where}[{i}]: expected a plugin name or {{name: ..., weight: ...}}")
    return out


def profile_from_dict(raw: Any, source: str = "<profile>") -> Profile:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a profile must be a mapping")
    try:
        check_depth(raw)
    except InputError as e:
        raise ConfigError(f"{source}: {e}") from None
    # Koordinator's and kube-scheduler's configuration (or the ConfigMap shipping one), names and args
    # mapped to koordfw's (koordfw.core.kubeconfig_compat)
    from . import kubeconfig_compat

    raw, source = kubeconfig_compat.unwrap_configmap(raw, source)
    warnings: list[str] = []
    if kubeconfig_compat.is_kube_config(raw):
        raw, warnings = kubeconfig_compat.to_profile_dict(raw, source)
    known = {"schedulerName", "plugins", "pluginConfig", "disable", "percentageOfNodesToScore",
             "pluginTimeoutSeconds", "threadedPlugins", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
             "podMaxInUnschedulablePodsDuration", "apiVersion", "kind"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{source}: unknown profile field(s) {sorted(unknown)}; known: {sorted(known)}")
    prof = Profile(source=source, warnings=warnings)
    if "schedulerName" in raw:
        if not isinstance(raw["schedulerName"], str) or not raw["schedulerName"]:
            raise ConfigError(f"{source}: schedulerName: expected a non-empty string")
        prof.scheduler_name = raw["schedulerName"]
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
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise ConfigError(f"{source}: pluginConfig[{i}]: expected {{name: ..., args: {{...}}}}")
            if item["name"] in conv:
                raise ConfigError(f"{source}: pluginConfig[{i}]: a second entry for plugin {item['name']!r}")
            conv[item["name"]] = item.get("args") or {}
        pc = conv
    if not isinstance(pc, dict):
        raise ConfigError(f"{source}: pluginConfig: expected a mapping of plugin name to args")
    prof.plugin_config = dict(pc)
    dis = raw.get("disable") or []
    if not isinstance(dis, list) or not all(isinstance(d, str) for d in dis):
        raise ConfigError(f"{source}: disable: expected a list of plugin names")
    prof.disable = set(dis)
    thr = raw.get("threadedPlugins") or []
    if not isinstance(thr, list) or not all(isinstance(t, str) for t in thr):
        raise ConfigError(f"{source}: threadedPlugins: expected a list of plugin names")
    prof.threaded_plugins = set(thr)
    if "percentageOfNodesToScore" in raw:
        v = raw["percentageOfNodesToScore"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100:
            raise ConfigError(f"{source}: percentageOfNodesToScore: expected an integer between 0 and 100, "
                              f"got {str(v)[:40]}")
        prof.percentage_of_nodes_to_score = v
    # durations in seconds, as kube-scheduler validates them: positive (the unschedulable cap may be 0)
    for key, attr, positive in (("pluginTimeoutSeconds", "plugin_timeout_seconds", True),
                                ("podInitialBackoffSeconds", "pod_initial_backoff_seconds", True),
                                ("podMaxBackoffSeconds", "pod_max_backoff_seconds", True),
                                ("podMaxInUnschedulablePodsDuration", "pod_max_in_unschedulable_seconds", False)):
        if key in raw:
            setattr(prof, attr, _seconds(raw[key], key, source, positive))
    if prof.pod_max_backoff_seconds < prof.pod_initial_backoff_seconds:
        raise ConfigError(f"{source}: podMaxBackoffSeconds: must be at least podInitialBackoffSeconds "
                          f"({prof.pod_initial_backoff_seconds:g}), got {prof.pod_max_backoff_seconds:g}")
    return prof


def _seconds(v: Any, key: str, source: str, positive: bool) -> float:
    """A duration field in seconds: a finite number, above 0 (or at least 0), within Go's time.Duration."""
    ok = not isinstance(v, bool) and isinstance(v, (int, float))
    if ok:
        try:
            f = float(v)
        except OverflowError:
            ok = False
        else:
            ok = math.isfinite(f) and (f > 0 if positive else f >= 0) and f <= MAX_DURATION_SECONDS
    if not ok:
        what = "greater than 0" if positive else "at least 0"
        raise ConfigError(f"{source}: {key}: expected a number of seconds {what} and at most "
                          f"{MAX_DURATION_SECONDS:.3g}, got {str(v)[:40]}")
    return f


def load_profile(path: str | Path | None) -> Profile:
    if path is None:
        return Profile()
    p = Path(path)
    try:
        raw = load_yaml(read_text(p))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read profile: {e.strerror or e}") from None
    except InputError as e:
        msg = str(e)
        raise ConfigError(f"{p}: {'not valid YAML' + msg[12:] if msg.startswith('invalid YAML') else msg}") from None
    return profile_from_dict(raw, source=str(p))
