"""Plugin discovery and the registry: which plugin implements which hook, in profile order.

Plugins come from the entry-point group ``koordfw`` (built-ins included, through the same path).
An entry point may name a module (functions marked with ``@hookimpl``) or a class, which is
instantiated once per registry, so stateful plugins get fresh state per scheduler.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any

import attrs
import pluggy
import structlog

from .. import hookspecs
from .errors import ConfigError, PluginLoadError
from .profile import PluginSet, Profile, structure_args, unknown_plugin_error

log = structlog.get_logger("koordfw.plugins")

ENTRY_POINT_GROUP = "koordfw"

#: the distribution whose own ``koordfw`` entry points are the built-in plugins
BUILTIN_DISTRIBUTION = "koordfw"

#: The default order of the built-ins, by name: their order in koordfw's pyproject.toml, which the
#: installed metadata does not keep (hatchling writes entry_points.txt sorted by name). What the built-ins
#: are and where they live comes from those entry points alone; one missing here loads after these.
BUILTIN_ORDER: tuple[str, ...] = (
    "priority_sort", "scheduling_gates", "scheduling_hint", "node_unschedulable", "node_selector", "taint_toleration",
    "node_ports", "node_resources_fit", "volume_restrictions", "node_volume_limits", "volume_binding", "volume_zone",
    "pod_topology_spread", "inter_pod_affinity", "image_locality", "default_preemption", "default_binder",
    "node_resources_balanced_allocation")

#: built-ins that run only where a profile enables them (kube-scheduler has them on by default; koordfw's
#: default profile scores with node_resources_fit's one strategy): not in any point's default order
OPT_IN_BUILTINS: frozenset[str] = frozenset({"node_resources_balanced_allocation"})

#: hooks whose implementations may come in a per-node form (``node`` instead of ``nodes``)
PER_NODE_HOOKS = ("filter", "score")


def builtin_entry_points() -> list[metadata.EntryPoint]:
    """koordfw's own ``koordfw`` entry points (the built-in plugins), in :data:`BUILTIN_ORDER`."""
    try:
        dist = metadata.distribution(BUILTIN_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise PluginLoadError(f"the {BUILTIN_DISTRIBUTION} distribution is not installed, so its built-in "
                              f"plugins (its {ENTRY_POINT_GROUP!r} entry points) cannot be found; "
                              f"install it (pip install -e .)") from None
    rank = {name: i for i, name in enumerate(BUILTIN_ORDER)}
    return sorted(dist.entry_points.select(group=ENTRY_POINT_GROUP), key=lambda e: rank.get(e.name, len(rank)))


def create_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


IMPL_MARK = f"{hookspecs.PROJECT}_impl"

#: what a class plugin's constructor may take, by name (kube's ``New(args, handle)``)
CONSTRUCTOR_ARGS = ("name", "args", "handle")


#: pluggy hookimpl options the kernel does not honour, and why. It calls each implementation itself, in
#: profile order (``plugins.<point>.enabled``), with its own timeout and failure handling: a wrapper
#: would be called as a plain function, ``tryfirst``/``trylast`` would be silently outranked by the
#: profile, and hooks are found by attribute name (``specname`` would leave the hook unrun).
#: ``optionalhook`` is honoured: an implementation of a hook with no spec is ignored instead of refused.
UNSUPPORTED_IMPL_OPTIONS: dict[str, str] = {
    "hookwrapper": "koordfw calls every implementation itself; there are no hook wrappers",
    "wrapper": "koordfw calls every implementation itself; there are no hook wrappers",
    "tryfirst": "the order of a hook point's plugins is the profile's (plugins.<point>.enabled)",
    "trylast": "the order of a hook point's plugins is the profile's (plugins.<point>.enabled)",
    "specname": "koordfw finds a plugin's hooks by their function names",
}


def impl_options(obj: Any) -> dict[str, dict[str, Any]]:
    """The pluggy options of each ``@hookimpl`` of ``obj`` (a class or module), by attribute name."""
    out = {}
    for attr in marked_hooks(obj):
        fn = inspect.getattr_static(obj, attr)
        out[attr] = dict(getattr(getattr(fn, "__func__", fn), IMPL_MARK))
    return out


def check_impl_options(name: str, where: str, obj: Any) -> set[str]:
    """Refuse (:class:`PluginLoadError`) a hookimpl option of :data:`UNSUPPORTED_IMPL_OPTIONS`, naming the
    plugin, the hook and the option. Returns the hooks marked ``optionalhook``."""
    optional = set()
    for hook, opts in impl_options(obj).items():
        for opt, why in UNSUPPORTED_IMPL_OPTIONS.items():
            if opts.get(opt):
                raise PluginLoadError(f"plugin {name!r} ({where}): hook {hook!r} is marked "
                                      f"@hookimpl({opt}={opts[opt]!r}), which koordfw does not honour: {why}")
        if opts.get("optionalhook"):
            optional.add(hook)
    return optional


def marked_hooks(obj: Any) -> list[str]:
    """The names of ``obj``'s (a class or module) attributes marked with ``@hookimpl``."""
    out = []
    for attr in dir(obj):
        if attr.startswith("_"):
            continue
        try:
            fn = inspect.getattr_static(obj, attr)
        except AttributeError:
            continue
        fn = getattr(fn, "__func__", fn)
        if getattr(fn, IMPL_MARK, None) is not None:
            out.append(attr)
    return sorted(out)


@attrs.define
class PluginInfo:
    """A loaded plugin: a module (``obj``) or a class (``factory``) constructed when an engine binds
    the registry (:meth:`Registry.bind`); ``obj`` is then the instance."""

    name: str
    obj: Any
    distribution: str = ""
    version: str = ""
    builtin: bool = False
    args_cls: type | None = None
    factory: type | None = None

    def hooks(self, pm: pluggy.PluginManager) -> list[str]:
        if self.obj is None:
            return marked_hooks(self.factory)
        return sorted(h.name for h in pm.get_hookcallers(self.obj) or [])


@attrs.define
class LoadError:
    name: str
    distribution: str
    error: str


@attrs.define
class Impl:
    """One plugin's implementation of one hook, ready to call."""

    plugin: str
    point: str
    fn: Callable[..., Any]
    argnames: tuple[str, ...]
    is_async: bool
    per_node: bool = False
    weight: int = 1
    args: Any = None
    timeout: float = 30.0
    threaded: bool = False


class Registry:
    """The loaded plugins of one scheduler (or agent), with their args, ordered per hook point."""

    def __init__(self, profile: Profile | None = None) -> None:
        self.pm = create_plugin_manager()
        self.profile = profile or Profile()
        self.plugins: dict[str, PluginInfo] = {}
        self.errors: list[LoadError] = []
        self.args: dict[str, Any] = {}
        self._impls: dict[str, list[Impl]] = {}

    # -- loading --------------------------------------------------------------------------------
    def register(self, name: str, obj: Any, *, distribution: str = "", version: str = "",
                 builtin: bool = False) -> PluginInfo:
        """Add a plugin: a module or instance (registered now) or a class, constructed by :meth:`bind`
        with the arguments its ``__init__`` names among ``name``, ``args`` and ``handle``."""
        if name in self.plugins:
            raise PluginLoadError(f"plugin {name!r} is registered twice "
                                  f"({self.plugins[name].distribution or 'in-process'} and {distribution or 'in-process'})")
        where = distribution or "in-process"
        optional = check_impl_options(name, where, obj)
        if inspect.isclass(obj):
            info = PluginInfo(name, None, distribution, version, builtin, factory=obj)
            unknown = [h for h in marked_hooks(obj) if h not in hookspecs.HOOK_NAMES and h not in optional]
            if unknown:
                raise ConfigError(f"plugin {name!r} ({where}) implements unknown hook(s) "
                                  f"{', '.join(unknown)}; known hooks: {', '.join(hookspecs.HOOK_NAMES)}")
            params = inspect.signature(obj).parameters
            extra = [p for p, v in params.items() if p not in CONSTRUCTOR_ARGS and v.default is inspect.Parameter.empty
                     and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)]
            if extra:
                raise PluginLoadError(f"plugin {name!r} ({where}): its constructor may take only "
                                      f"{', '.join(CONSTRUCTOR_ARGS)}, not {', '.join(extra)}")
            fn = inspect.getattr_static(obj, "plugin_args", None)
            if fn is not None and getattr(getattr(fn, "__func__", fn), IMPL_MARK, None) is not None:
                if not isinstance(fn, (staticmethod, classmethod)):
                    raise PluginLoadError(f"plugin {name!r} ({where}): plugin_args of a class plugin must be a "
                                          "@staticmethod or @classmethod (it is called before the plugin is constructed)")
                info.args_cls = getattr(obj, "plugin_args")()  # noqa: B009 - a hookimpl found by name
        else:
            try:
                self.pm.register(obj, name=name)
            except pluggy.PluginValidationError as e:
                raise PluginLoadError(f"plugin {name!r}: {e}") from None
            unknown = [h.name for h in self.pm.get_hookcallers(obj) or [] if not h.has_spec() and h.name not in optional]
            if unknown:
                self.pm.unregister(obj)
                raise ConfigError(f"plugin {name!r} ({where}) implements unknown hook(s) "
                                  f"{', '.join(sorted(unknown))}; known hooks: {', '.join(hookspecs.HOOK_NAMES)}")
            info = PluginInfo(name, obj, distribution, version, builtin)
            fn = getattr(obj, "plugin_args", None)
            if fn is not None and getattr(fn, IMPL_MARK, None) is not None:
                info.args_cls = fn()
        self.plugins[name] = info
        self._impls.clear()
        return info

    def bind(self, handle_for: Callable[[str], Any]) -> None:
        """Construct the class plugins not constructed yet (kube's ``New(args, handle)``), each given
        the arguments its ``__init__`` asks for: its ``name``, its typed ``args`` and ``handle_for(name)``.
        An engine calls this once it can make handles; a registry is bound once, and engines that share
        it share the plugin objects (each still passes its own handle to the hooks)."""
        for name, info in self.plugins.items():
            if info.obj is not None or info.factory is None:
                continue
            offered = {"name": name, "args": self.args.get(name), "handle": handle_for(name)}
            params = inspect.signature(info.factory).parameters
            takes_all = any(v.kind == v.VAR_KEYWORD for v in params.values())
            kwargs = {k: v for k, v in offered.items() if takes_all or k in params}
            where = info.distribution or "in-process"
            try:
                obj = info.factory(**kwargs)
            except Exception as e:
                raise PluginLoadError(f"plugin {name!r} ({where}) failed to construct: "
                                      f"{type(e).__name__}: {e}") from e
            try:
                self.pm.register(obj, name=name)
            except pluggy.PluginValidationError as e:
                raise PluginLoadError(f"plugin {name!r}: {e}") from None
            info.obj = obj
            self._impls.clear()

    def disable_at(self, plugin: str, points: Iterable[str]) -> None:
        """Run ``plugin`` at none of ``points`` from now on (as the profile's ``plugins.<point>.disabled``
        would), for an engine where something else does that part of its work."""
        for point in points:
            self.profile.plugins.setdefault(point, PluginSet()).disabled.add(plugin)
        self._impls.clear()

    def plugin(self, name: str) -> Any:
        """The constructed object of plugin ``name`` (module or instance), for engines and tests."""
        info = self.plugins.get(name)
        return None if info is None else info.obj

    def load(self, *, autoload: bool | None = None, disable: set[str] | None = None, strict: bool = False,
             extra: dict[str, Any] | None = None, only: set[str] | None = None) -> Registry:
        """Load built-ins and entry-point plugins, then extra in-process ones; configure args.

        ``only`` restricts the entry-point plugins (not the built-ins) to those names.
        """
        cli_disable = set(disable or ())
        disable = cli_disable | set(self.profile.disable)
        # a name switched off must name a plugin: a typo (``load-aware``) would leave the plugin running
        known = {ep.name for ep in builtin_entry_points()} | {ep.name for ep in metadata.entry_points(
            group=ENTRY_POINT_GROUP)} | set(extra or ())
        for name in sorted(cli_disable - known):
            raise unknown_plugin_error(name, known, "--disable")
        for name in sorted(set(self.profile.disable) - known):
            raise unknown_plugin_error(name, known, f"{self.profile.source}: disable")
        if autoload is None:
            autoload = os.environ.get("KOORDFW_DISABLE_PLUGIN_AUTOLOAD", "") not in ("1", "true", "yes")
        seen: set[str] = set()
        # Built-ins always load (they are koordfw's own entry points); they come first, in their default order.
        for ep in builtin_entry_points():
            seen.add(ep.name)
            if ep.name not in disable:
                self._load_one(ep, strict, builtin=True)
        if autoload:
            for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                if ep.name in seen or ep.name in disable or (only is not None and ep.name not in only):
                    continue
                seen.add(ep.name)
                self._load_one(ep, strict, builtin=False)
        for name, obj in (extra or {}).items():
            if name not in disable:
                self.register(name, obj, distribution="in-process")
        self.configure()
        return self

    def _load_one(self, ep: metadata.EntryPoint, strict: bool, builtin: bool) -> None:
        name = ep.name
        dist = ep.dist.name if ep.dist is not None else ""
        version = ep.dist.version if ep.dist is not None else ""
        try:
            obj = ep.load()
            self.register(name, obj, distribution=dist, version=version, builtin=builtin)
        except ConfigError:
            raise
        except Exception as e:  # a broken plugin must not take the others down
            msg = f"{type(e).__name__}: {e}"
            if strict:
                raise PluginLoadError(f"plugin {name!r} from distribution {dist!r} failed to load: {msg}") from e
            self.errors.append(LoadError(name, dist, msg))
            log.warning("plugin failed to load", plugin=name, distribution=dist, error=msg)

    def configure(self) -> None:
        """Validate the profile against the loaded plugins and structure every plugin's args."""
        known = set(self.plugins)
        broken = {e.name for e in self.errors}
        for name in sorted(self.profile.names_mentioned()):
            if name not in known and name not in self.profile.disable and name not in broken:
                raise unknown_plugin_error(name, known, self.profile.source)
        for name, info in self.plugins.items():
            raw = self.profile.plugin_config.get(name)
            if info.args_cls is None:
                if raw:
                    raise ConfigError(f"{self.profile.source}: plugin {name!r} takes no args "
                                      f"but pluginConfig.{name} was given")
                self.args[name] = None
            else:
                self.args[name] = structure_args(name, info.args_cls, raw, self.profile.source)
        self._impls.clear()

    # -- ordering -------------------------------------------------------------------------------
    def impls(self, point: str) -> list[Impl]:
        cached = self._impls.get(point)
        if cached is not None:
            return cached
        hc = getattr(self.pm.hook, point)
        by_plugin: dict[str, Any] = {}
        for hi in hc.get_hookimpls():
            by_plugin[hi.plugin_name] = hi
        default_order = [n for n in self.plugins if n in by_plugin and n not in OPT_IN_BUILTINS]
        ps = self.profile.plugins.get(point)
        multi = self.profile.plugins.get("*")
        order: list[tuple[str, int]] = []
        disabled = set(self.profile.disable)
        for s in (multi, ps):
            if s is not None:
                disabled |= s.disabled
        if "*" not in disabled:
            order = [(n, 0) for n in default_order if n not in disabled]
        for s in (multi, ps):
            if s is None:
                continue
            for n, w in s.enabled:
                if n not in by_plugin:
                    continue  # enabled at a point it does not implement: nothing to run there
                order = [(m, mw) for m, mw in order if m != n] + [(n, w)]
        impls = []
        for n, w in order:
            hi = by_plugin[n]
            fn = hi.function
            argnames = tuple(hi.argnames)
            per_node = point in PER_NODE_HOOKS and "node" in argnames and "nodes" not in argnames
            weight = w or self.profile.weight(n)
            impls.append(Impl(plugin=n, point=point, fn=fn, argnames=argnames,
                              is_async=inspect.iscoroutinefunction(fn), per_node=per_node, weight=weight,
                              args=self.args.get(n), timeout=self.profile.plugin_timeout_seconds,
                              threaded=n in self.profile.threaded_plugins))
        self._impls[point] = impls
        return impls

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for name, info in sorted(self.plugins.items()):
            out.append({"name": name, "distribution": info.distribution, "version": info.version,
                        "builtin": info.builtin, "hooks": info.hooks(self.pm)})
        for e in self.errors:
            out.append({"name": e.name, "distribution": e.distribution, "version": "", "builtin": False,
                        "hooks": [], "error": e.error})
        return out
