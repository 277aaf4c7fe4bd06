"""The plugin contract as types: what ``args`` is, the JSON objects some hooks take, and one
:class:`~typing.Protocol` per plugin kind (per hook point, named after kube-scheduler's plugin
interfaces where it has one).

A plugin is any object (a module, a class, an instance) with ``@hookimpl`` functions named after the
hooks of :mod:`koordfw.hookspecs`. Implementations take **any subset** of a spec's arguments, by name,
so a kind's Protocol does not fix the parameters: it says the plugin has the hook, and what the hook
may return (the types of :mod:`koordfw.core.results`), directly or as an awaitable. A plugin that
implements ``filter`` is a :class:`FilterPlugin` both for mypy (assign it to a variable of that type)
and at run time (the Protocols are ``runtime_checkable``: ``isinstance`` checks the hook is there).
:data:`KINDS` maps every hook to its kind. ``koordfw/builtin/_contract.py`` and each plugin package's
``_contract.py`` assign every plugin to the kinds of its hooks, so mypy checks them;
``tests/kernel/test_contract.py`` checks the installed plugins at run time and that those modules
cover every hook of every plugin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, runtime_checkable

from .results import (
    BindResult,
    FilterResult,
    NodeResourcesReturn,
    NormalizeScoreResult,
    PostFilterReturn,
    PreBindResult,
    PreFilterReturn,
    QueueSortKey,
    ScoreResult,
    StatusResult,
)
from .status import Status

if TYPE_CHECKING:
    from .hints import ClusterEventWithHint
    from .model import Migration
    from .nodestate import Eviction, FileWrite

#: The type of every hookspec's ``args`` parameter: the plugin's own configuration, an instance of the
#: attrs class its ``plugin_args`` returns (``None`` for a plugin without one). The kernel passes it
#: untouched, so the specs say ``object``; an implementation annotates its own class
#: (``args: MyArgs``): hooks are called by argument name, so an implementation may narrow it.
PluginArgs: TypeAlias = object

#: A JSON object as parsed (a manifest, a NodeMetric, Koordinator's ColocationCfg): its values are any
#: JSON value.
JSONObject: TypeAlias = dict[str, Any]

_T = TypeVar("_T")

#: A hook's result, or an awaitable of it (``async def`` implementations).
MaybeAwaitable: TypeAlias = _T | Awaitable[_T]


# -- lifecycle and configuration -------------------------------------------------------------------
@runtime_checkable
class PluginArgsProvider(Protocol):
    """Declares its typed configuration (``plugin_args``)."""

    @property
    def plugin_args(self) -> Callable[..., type | None]: ...


@runtime_checkable
class StartupPlugin(Protocol):
    """Called when an engine starts (``startup``)."""

    @property
    def startup(self) -> Callable[..., MaybeAwaitable[None]]: ...


@runtime_checkable
class ShutdownPlugin(Protocol):
    """Called when an engine stops (``shutdown``)."""

    @property
    def shutdown(self) -> Callable[..., MaybeAwaitable[None]]: ...


@runtime_checkable
class ReportPlugin(Protocol):
    """Adds sections to ``koordfw simulate``'s output (``report``)."""

    @property
    def report(self) -> Callable[..., MaybeAwaitable[Mapping[str, object] | None]]: ...


# -- scheduling cycle (kube's framework interfaces) -------------------------------------------------
@runtime_checkable
class QueueSortPlugin(Protocol):
    """kube's QueueSortPlugin (``queue_sort``; sync only)."""

    @property
    def queue_sort(self) -> Callable[..., QueueSortKey]: ...


@runtime_checkable
class EnqueueExtensions(Protocol):
    """kube's EnqueueExtensions (``events_to_register``)."""

    @property
    def events_to_register(self) -> Callable[..., MaybeAwaitable[Sequence[ClusterEventWithHint] | None]]: ...


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    """kube's PreEnqueuePlugin (``pre_enqueue``)."""

    @property
    def pre_enqueue(self) -> Callable[..., MaybeAwaitable[StatusResult]]: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    """kube's PreFilterPlugin (``pre_filter``)."""

    @property
    def pre_filter(self) -> Callable[..., MaybeAwaitable[PreFilterReturn]]: ...


@runtime_checkable
class PreFilterAddPodExtension(Protocol):
    """The AddPod half of kube's PreFilterExtensions (``pre_filter_add_pod``)."""

    @property
    def pre_filter_add_pod(self) -> Callable[..., MaybeAwaitable[StatusResult]]: ...


@runtime_checkable
class PreFilterRemovePodExtension(Protocol):
    """The RemovePod half of kube's PreFilterExtensions (``pre_filter_remove_pod``)."""

    @property
    def pre_filter_remove_pod(self) -> Callable[..., MaybeAwaitable[StatusResult]]: ...


@runtime_checkable
class FilterPlugin(Protocol):
    """kube's FilterPlugin (``filter``, batch or per-node form)."""

    @property
    def filter(self) -> Callable[..., MaybeAwaitable[FilterResult]]: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    """kube's PostFilterPlugin (``post_filter``)."""

    @property
    def post_filter(self) -> Callable[..., MaybeAwaitable[PostFilterReturn]]: ...


@runtime_checkable
class PreScorePlugin(Protocol):
    """kube's PreScorePlugin (``pre_score``)."""

    @property
    def pre_score(self) -> Callable[..., MaybeAwaitable[StatusResult]]: ...


@runtime_checkable
class ScorePlugin(Protocol):
    """kube's ScorePlugin (``score``, batch or per-node form)."""

    @property
    def score(self) -> Callable[..., MaybeAwaitable[ScoreResult]]: ...


@runtime_checkable
class ScoreExtensions(Protocol):
    """kube's ScoreExtensions (``normalize_score``)."""

    @property
    def normalize_score(self) -> Callable[..., MaybeAwaitable[NormalizeScoreResult]]: ...


@runtime_checkable
class ReservePlugin(Protocol):
    """The Reserve half of kube's ReservePlugin (``reserve``)."""

    @property
    def reserve(self) -> Callable[..., MaybeAwaitable[StatusResult]]: ...


@runtime_checkable
class UnreservePlugin(Protocol):
    """The Unreserve half of kube's ReservePlugin (``unreserve``; koordfw calls it on every plugin that
    has it, whether or not it has ``reserve``)."""

    @property
    def unreserve(self) -> Callable[..., MaybeAwaitable[None]]: ...


@runtime_checkable
class PermitPlugin(Protocol):
    """kube's PermitPlugin (``permit``)."""

    @property
    def permit(self) -> Callable[..., MaybeAwaitable[StatusResult]]: ...


@runtime_checkable
class PreBindPlugin(Protocol):
    """kube's PreBindPlugin (``pre_bind``)."""

    @property
    def pre_bind(self) -> Callable[..., MaybeAwaitable[PreBindResult]]: ...


@runtime_checkable
class BindPlugin(Protocol):
    """kube's BindPlugin (``bind``)."""

    @property
    def bind(self) -> Callable[..., MaybeAwaitable[BindResult]]: ...


@runtime_checkable
class PostBindPlugin(Protocol):
    """kube's PostBindPlugin (``post_bind``)."""

    @property
    def post_bind(self) -> Callable[..., MaybeAwaitable[None]]: ...


@runtime_checkable
class ErrorHandlerPlugin(Protocol):
    """Koordinator's error handler (``error_handler``): told of every failed attempt."""

    @property
    def error_handler(self) -> Callable[..., MaybeAwaitable[None]]: ...


# -- node agent ------------------------------------------------------------------------------------
@runtime_checkable
class CollectPlugin(Protocol):
    """Gathers node metrics each round (``collect``)."""

    @property
    def collect(self) -> Callable[..., MaybeAwaitable[Mapping[str, object] | None]]: ...


@runtime_checkable
class QoSPlugin(Protocol):
    """Plans node-local knobs and evictions each round (``qos_plan``)."""

    @property
    def qos_plan(self) -> Callable[..., MaybeAwaitable[Sequence[FileWrite | Eviction] | None]]: ...


@runtime_checkable
class RuntimeHookPlugin(Protocol):
    """Sets a new pod's or container's knobs at once (``runtime_hook``)."""

    @property
    def runtime_hook(self) -> Callable[..., MaybeAwaitable[Sequence[FileWrite] | None]]: ...


# -- descheduling, node resources, admission -------------------------------------------------------
@runtime_checkable
class DeschedulePlugin(Protocol):
    """Proposes evictions or migrations (``deschedule``)."""

    @property
    def deschedule(self) -> Callable[..., MaybeAwaitable[Sequence[Migration] | None]]: ...


@runtime_checkable
class NodeResourcesPlugin(Protocol):
    """Computes a node's extended allocatable, annotations and allocatable override (``node_resources``)."""

    @property
    def node_resources(self) -> Callable[..., MaybeAwaitable[NodeResourcesReturn]]: ...


@runtime_checkable
class MutatingAdmissionPlugin(Protocol):
    """A mutating admission webhook (``mutate_pod``)."""

    @property
    def mutate_pod(self) -> Callable[..., MaybeAwaitable[JSONObject | None]]: ...


@runtime_checkable
class ValidatingAdmissionPlugin(Protocol):
    """A validating admission webhook (``validate_pod``)."""

    @property
    def validate_pod(self) -> Callable[..., MaybeAwaitable[Status | str | None]]: ...


#: hook name -> the Protocol of the plugins that implement it (every hook of koordfw.hookspecs)
KINDS: dict[str, type] = {
    "plugin_args": PluginArgsProvider, "startup": StartupPlugin, "shutdown": ShutdownPlugin,
    "report": ReportPlugin, "queue_sort": QueueSortPlugin, "events_to_register": EnqueueExtensions,
    "pre_enqueue": PreEnqueuePlugin, "pre_filter": PreFilterPlugin,
    "pre_filter_add_pod": PreFilterAddPodExtension, "pre_filter_remove_pod": PreFilterRemovePodExtension,
    "filter": FilterPlugin,
    "post_filter": PostFilterPlugin, "pre_score": PreScorePlugin, "score": ScorePlugin,
    "normalize_score": ScoreExtensions, "reserve": ReservePlugin, "unreserve": UnreservePlugin,
    "permit": PermitPlugin, "pre_bind": PreBindPlugin, "bind": BindPlugin, "post_bind": PostBindPlugin,
    "error_handler": ErrorHandlerPlugin,
    "collect": CollectPlugin, "qos_plan": QoSPlugin, "runtime_hook": RuntimeHookPlugin,
    "deschedule": DeschedulePlugin, "node_resources": NodeResourcesPlugin,
    "mutate_pod": MutatingAdmissionPlugin, "validate_pod": ValidatingAdmissionPlugin,
}
