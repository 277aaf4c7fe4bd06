"""Every hook point of koordfw, grouped by loop. This module is the plugin contract.

How hooks are called (the same for every hook, by ``koordfw.core.caller``):

* Implementations take **any subset** of a spec's arguments, by name; arguments are only ever added.
* Besides the arguments listed, every hook may also take ``args`` (the plugin's own typed config,
  see :func:`plugin_args`) and ``handle``: the plugin's own :class:`koordfw.Handle` in the scheduling
  engines (clock, read-only cluster view, waiting pods, queue, nominator, seeded RNG, event recorder,
  PluginsRunner, bind/evict; see ``koordfw.core.handle``), :class:`koordfw.AgentHandle` in the node
  agent (node state, clock, filesystem roots, ``apply``), or :class:`koordfw.AdmissionHandle` in the pod
  admission hooks (clock, seeded RNG, the cached cluster objects).
* Implementations may be plain functions or ``async``; returned awaitables are awaited.
* Plugins run in the order the profile gives (Kubernetes' default-then-enabled merge), never in
  pluggy's registration order. Each call has a per-plugin timeout (``pluginTimeoutSeconds``).
* An exception (or a timeout) in a plugin becomes an ``Error`` status naming the plugin: in a scheduling
  or binding cycle the cycle of that pod fails, the process and the other pods go on; in the other loops
  the plugin is logged and skipped. docs/hooks.md says, per hook, which plugins are called and when the
  kernel stops early.
* The "first result" specs (``firstresult=True``: ``plugin_args``, ``queue_sort``) give one value, not one
  per plugin: ``plugin_args`` is each plugin's own, called by the registry when it loads the plugin, and
  only the first ``queue_sort`` plugin of the profile is called.
* docs/hooks.md lists these hooks, section by section (:func:`_section`), with their signatures and
  docstrings; ``tests/test_hooks_doc.py`` checks it against this module.

Parameters are annotated with the public types: pods are :class:`koordfw.Pod`; nodes passed to
scheduling hooks are :class:`koordfw.NodeView` (``.name``, ``.labels``, ``.annotations``,
``.allocatable``, ``.requested``, ``.pods``, ``.index``); batches of nodes are :class:`koordfw.NodeBatch`:
iterable NodeViews plus ``.idx`` (numpy indices into the cluster's per-node columns); ``state`` is the
pod's :class:`koordfw.CycleState`, read and written with typed :class:`koordfw.StateKey` s. ``args`` is
:data:`koordfw.PluginArgs` (``object``: an implementation annotates its own attrs class), manifests are
:data:`koordfw.JSONObject`. Returns are the named result types of :mod:`koordfw.core.results`
(:data:`koordfw.FilterResult`, :data:`koordfw.ScoreResult`, ...: every shape the runtime accepts), and
each hook's plugin kind is a Protocol of :mod:`koordfw.core.contract` (:data:`koordfw.FilterPlugin`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import pluggy

if TYPE_CHECKING:
    import numpy as np

    from .core.cluster import NodeBatch, NodeView
    from .core.contract import JSONObject, PluginArgs
    from .core.handle import AdmissionHandle, AgentHandle, ClusterView, Handle
    from .core.hints import ClusterEventWithHint
    from .core.model import Migration, Pod
    from .core.nodestate import ContainerState, Eviction, FileWrite, NodeState, PodState
    from .core.results import (
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
    from .core.state import CycleState
    from .core.status import Status

PROJECT = "koordfw"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class _Section(NamedTuple):
    """A section of the hooks: its title, whether its hooks run in an engine's loop, the index of its
    first hook. Bound to a module-level name where it starts (see :func:`_section`)."""

    title: str
    loop: bool
    start: int


def _specs() -> list[str]:
    """The hooks specified so far in this module, in definition order (pluggy marks each function
    decorated with ``@hookspec`` with a ``koordfw_spec`` attribute)."""
    return [name for name, obj in globals().items()
            if callable(obj) and getattr(obj, f"{PROJECT}_spec", None) is not None]


def _section(title: str, *, loop: bool = True) -> _Section:
    """Start a section (bind it to a module-level name): the hooks defined from here to the next one
    belong to it. ``title`` is its heading in docs/hooks.md; ``loop`` is False for hooks outside the
    engines' loops (lifecycle)."""
    return _Section(title, loop, len(_specs()))


_F = TypeVar("_F", bound=Callable[..., object])


def _called_on_load(fn: _F) -> _F:
    """Mark a hook the registry calls itself when it loads a plugin: no profile orders it."""
    fn.koordfw_on_load = True  # type: ignore[attr-defined]
    return fn

# ================================================================================================
# Lifecycle and configuration
# ================================================================================================
_LIFECYCLE = _section("Lifecycle and configuration", loop=False)


@_called_on_load
@hookspec(firstresult=True)
def plugin_args() -> type | None:
    """Declare the plugin's typed configuration.

    Called once when the plugin is loaded. Return an attrs class whose fields are the plugin's args
    (with defaults); the profile's ``pluginConfig: {<plugin name>: {...}}`` mapping is structured into
    it with cattrs and the instance is passed as ``args`` to every hook of that plugin. Return ``None``
    (or do not implement the hook) for a plugin without args. Sync only; idempotent.
    """


@hookspec
def startup(args: PluginArgs, handle: Handle | AgentHandle) -> None:
    """Called once when an engine starts, before any other hook of the plugin.

    Use it to build caches from ``handle.cluster``. Return value ignored. May be async. Not required to
    be idempotent (called once per engine).
    """


@hookspec
def shutdown(args: PluginArgs, handle: Handle | AgentHandle) -> None:
    """Called once when an engine stops (also on SIGTERM for the node agent).

    Node-side plugins restore what they throttled here. Return value ignored. May be async; must be
    idempotent.
    """


@hookspec
def report(args: PluginArgs, handle: Handle | AgentHandle) -> Mapping[str, object] | None:
    """Contribute extra top-level sections to ``koordfw simulate``'s output after a run.

    Return a mapping merged into the JSON/YAML output (e.g. ``{"quotas": [...]}``), or ``None``.
    May be async. Idempotent.
    """


# ================================================================================================
# Scheduling cycle (one pod at a time; named after the Kubernetes extension points)
# ================================================================================================
_SCHEDULING = _section("Scheduling cycle")


@hookspec(firstresult=True)
def queue_sort(pod: Pod, args: PluginArgs, handle: Handle) -> QueueSortKey:
    """Return the sort key of a pod in the active queue (smaller key = scheduled first).

    Exactly one queue_sort plugin is called: the first enabled in the profile (``priority_sort`` by
    default: higher priority first). Ties go to the earlier arrival, then to the order pods were queued.
    ``None`` is not passed on to another plugin: the pod gets the default key, ``(-priority,)`` (what
    ``priority_sort`` returns), and so does a pod whose key raised (logged as an error). Keys are compared
    across pods, so a plugin that may return ``None`` should return keys comparable with that tuple.
    Sync only (it runs inside the queue's heap); must be pure and idempotent.
    """


@hookspec
def events_to_register(args: PluginArgs, handle: Handle) -> Sequence[ClusterEventWithHint] | None:
    """Declare the cluster events that can make a pod this plugin rejected schedulable (kube's
    ``EnqueueExtensions.EventsToRegister``), each with a queueing hint.

    Return a list of :class:`koordfw.ClusterEventWithHint`: a :class:`koordfw.ClusterEvent` (``Pod``,
    ``AssignedPod``, ``Node`` or another object kind; ``Add``, ``Update``, ``Delete``; ``*`` for any) and
    ``hint(pod, old, new)`` returning :attr:`koordfw.QueueingHint.QUEUE` or ``QUEUE_SKIP`` (``None``:
    always Queue). A pod in the unschedulable pool moves on an event only when a plugin that rejected it
    registered the event and its hint says Queue. Return ``None`` (or do not implement the hook) to get the
    default: pods leaving, nodes added or updated, and any change of another object. Called once, after
    ``startup``. Hints run on every matching event for every pod this plugin rejected: keep them cheap and
    pure. May be async.
    """


@hookspec
def pre_enqueue(pod: Pod, args: PluginArgs, handle: Handle) -> StatusResult:
    """Gate a pod before it enters the active queue.

    Return ``None`` to admit it, or a reason string / ``Status`` to hold it in the unschedulable pool
    (it is re-checked on the cluster events this plugin's ``events_to_register`` accepts, on every event
    without it). Runs when a pod is added and whenever it would be
    moved back to the active queue. May be async. Must be idempotent.
    """


@hookspec
def pre_filter(pod: Pod, state: CycleState, args: PluginArgs, handle: Handle) -> PreFilterReturn:
    """Run once per scheduling cycle, before filtering.

    ``state`` is the cycle's :class:`CycleState`, shared by the plugins of this cycle (not a dict: its
    keys are typed ``StateKey`` s, plain strings are refused). Return ``None`` for success; a ``Status``
    (``Unschedulable`` / ``UnschedulableAndUnresolvable`` to reject the pod, ``Skip`` to disable this
    plugin's ``filter`` for the cycle); or a :class:`PreFilterResult` restricting the candidate nodes.
    May be async. Idempotent within a cycle.
    """


@hookspec
def pre_filter_add_pod(
    pod: Pod, state: CycleState, pod_to_add: Pod, node: NodeView, args: PluginArgs, handle: Handle
) -> StatusResult:
    """kube's ``PreFilterExtensions.AddPod``: in a what-if for ``pod`` (preemption reprieving a victim, a
    job's member placed by a dry run), ``pod_to_add`` now counts on ``node``; update what this plugin's
    ``pre_filter`` wrote into ``state`` so that its ``filter`` sees the pod there.

    Called only by the kernel, for a plugin running the what-if through its handle
    (``handle.run_pre_filter_extension_add_pod``), never in a plain cycle; plugins whose ``pre_filter``
    returned Skip for ``state`` are not called. ``state`` may be a :meth:`CycleState.clone` sharing its
    values with other clones: write a new value under your key, never change a shared one in place.
    Return ``None`` for success or a ``Status`` (not a success: the what-if fails). May be async.
    """


@hookspec
def pre_filter_remove_pod(
    pod: Pod, state: CycleState, pod_to_remove: Pod, node: NodeView, args: PluginArgs, handle: Handle
) -> StatusResult:
    """kube's ``PreFilterExtensions.RemovePod``: in a what-if for ``pod`` (preemption taking a possible
    victim off its node), ``pod_to_remove`` no longer counts on ``node``; update what this plugin's
    ``pre_filter`` wrote into ``state`` (e.g. release the victim's quota usage) so that its ``filter``
    sees the pod gone.

    Called as :func:`pre_filter_add_pod` is (``handle.run_pre_filter_extension_remove_pod``), with the
    same rules for ``state``. Return ``None`` for success or a ``Status`` (not a success: the what-if
    fails). May be async.
    """


@hookspec
def filter(
    pod: Pod, nodes: NodeBatch, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle
) -> FilterResult:
    """Reject nodes that cannot run the pod.

    Batch form (take ``nodes``): called once per cycle with the candidate ``NodeBatch``. Return ``None``
    or ``{}`` for no objection, a dict ``{node name: reason or Status}`` of rejected nodes, a
    sequence aligned with ``nodes`` whose items are ``True``/``None`` (feasible) or a reason/``False``
    (a numpy bool array works too), or the fast form ``(feasible_mask, reason)``: a bool array aligned
    with ``nodes`` plus one reason/Status for every rejected node (or a sequence of reasons aligned
    with ``nodes``). Per-node form (take ``node`` and not ``nodes``): called for each
    candidate; return ``None``/``True`` to accept or a reason/``Status`` to reject. A string reason means
    ``Unschedulable``. May be async. Must be idempotent and must not change state.
    """


@hookspec
def post_filter(
    pod: Pod, state: CycleState, statuses: Mapping[str, Status], args: PluginArgs, handle: Handle
) -> PostFilterReturn:
    """Called when no node passed filtering (typically preemption).

    ``statuses`` maps node name → the rejecting ``Status``. Return ``None`` (nothing done), a
    :class:`PostFilterResult` with a nominated node (the pod is retried and should fit there), or a
    ``Status``. Plugins run in order until one returns a success result, an unresolvable status or an
    error. May be async.
    """


@hookspec
def pre_score(pod: Pod, nodes: NodeBatch, state: CycleState, args: PluginArgs, handle: Handle) -> StatusResult:
    """Called once before scoring with the feasible nodes. Return ``None``, or ``Status.skip()`` to
    disable this plugin's ``score`` for the cycle, or a rejection/error status. May be async."""


@hookspec
def score(
    pod: Pod, nodes: NodeBatch, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle
) -> ScoreResult:
    """Score feasible nodes. Higher is better; weights come from the profile.

    Batch form (take ``nodes``): return ``None`` (no opinion), a dict ``{node name: int}`` or a
    sequence/array aligned with ``nodes``. Per-node form (take ``node``): return an int. Scores of a
    plugin without ``normalize_score`` must lie in [0, 100]. May be async. Idempotent.
    """


@hookspec
def normalize_score(
    pod: Pod, nodes: NodeBatch, scores: np.ndarray, state: CycleState, args: PluginArgs, handle: Handle
) -> NormalizeScoreResult:
    """Rescale this plugin's own raw scores (``scores``: an int64 numpy array aligned with ``nodes``).

    Return the new array (or modify in place and return ``None``). The kernel checks the result lies
    in [0, 100] and fails the cycle otherwise. May be async.
    """


@hookspec
def reserve(pod: Pod, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle) -> StatusResult:
    """Claim node-local resources for the pod on the chosen node (e.g. exact CPUs or GPUs).

    Return ``None`` for success or a ``Status`` to fail; on any failure of this or a later step,
    ``unreserve`` runs for every reserve plugin in reverse order. May be async.
    """


@hookspec
def unreserve(pod: Pod, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle) -> None:
    """Release what ``reserve`` claimed. Must be idempotent and may be called even when this plugin's
    reserve was not (Kubernetes' contract). Return value ignored. May be async."""


@hookspec
def permit(pod: Pod, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle) -> StatusResult:
    """Approve, deny or delay the binding of a reserved pod.

    Return ``None`` (allow), ``Status.wait(timeout_seconds)`` (the pod waits, keeping its reservation,
    until a plugin allows or rejects it through ``handle.get_waiting_pod(uid)``, or the timeout, capped
    at 15 minutes, rejects it), or a rejection reason/``Status``. May be async.
    """


# ================================================================================================
# Binding cycle (runs concurrently, one task per pod)
# ================================================================================================
_BINDING = _section("Binding cycle")


@hookspec
def pre_bind(pod: Pod, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle) -> PreBindResult:
    """Prepare the binding. Return ``None``, a dict of **annotations** to set on the pod (the
    engine writes them: in memory, or as a patch before the Binding on a live cluster), or a failure
    ``Status``. All pre_bind plugins must succeed. May be async. Must be idempotent."""


@hookspec
def bind(pod: Pod, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle) -> BindResult:
    """Bind the pod. Return ``None`` or ``Status.skip()`` to let the next bind plugin do it, ``True``
    or a success status when bound, or a failure status. May be async."""


@hookspec
def post_bind(pod: Pod, node: NodeView, state: CycleState, args: PluginArgs, handle: Handle) -> None:
    """Called after a successful bind, for bookkeeping (e.g. record a gang's bound members, drop a
    reservation now carried by the pod's annotations). Return value ignored; an exception is logged
    and does not undo the binding. May be async."""


@hookspec
def error_handler(pod: Pod, status: Status, args: PluginArgs, handle: Handle) -> None:
    """Called after a pod's scheduling or binding attempt failed, with the status that failed it
    (Koordinator's ``frameworkext`` error handlers): a rejection by any plugin, a Permit rejection or
    timeout, a failed bind. After post_filter, before the pod goes back to the queue.

    For bookkeeping across plugins, e.g. the gang plugin's one message per job naming what holds it.
    Return value ignored; an exception is logged and the other plugins still run. May be async. Must
    not assume it sees every attempt of a pod (a pod deleted meanwhile is not reported)."""


# ================================================================================================
# Node QoS loop (the node agent: collect → plan → apply)
# ================================================================================================
_NODE_QOS = _section("Node QoS loop (node agent)")


@hookspec
def collect(node_state: NodeState, args: PluginArgs, handle: AgentHandle) -> Mapping[str, object] | None:
    """Gather metrics for this round. ``node_state`` is the agent's
    :class:`koordfw.core.nodestate.NodeState`. Return a mapping merged into ``node_state.metrics`` or
    ``None``; under the key ``NodeState.COLLECTED_CGROUPS`` (``"cgroups"``) it may also return the cgroup
    files it read (path → text), which join ``node_state.cgroups`` so the executor compares this round's
    writes with them instead of reading the files again; under ``NodeState.NODE_METRIC_STATUS``
    (``"nodeMetricStatus"``) a mapping of NodeMetric ``status`` fields (e.g. the prediction plugin's
    ``prodReclaimableMetric``), which the agent's NodeMetric reporter publishes with the status it builds
    (its own fields win; a ``None`` value leaves the field out). May be async. Must tolerate vanished
    cgroups."""


@hookspec
def qos_plan(node_state: NodeState, args: PluginArgs, handle: AgentHandle) -> Sequence[FileWrite | Eviction] | None:
    """Compute the desired node-local knobs for a node state.

    Return a list of :class:`koordfw.core.nodestate.FileWrite` (path relative to the filesystem root,
    value, ``fs`` = "cgroup" or "resctrl") or ``None``. Must do no I/O, and its writes must be idempotent:
    the agent's executor writes only what differs. It need not be pure: a plugin may keep history from
    round to round (eviction remembers its last evictions per handle and evicts nothing more within its
    cool-downs), so the same node state can give different evictions on two calls. The list may also hold
    :class:`koordfw.Eviction` s (pod uid, ``namespace/name``, reason): pods to evict, in the order given;
    the agent hands them to its evictor (on a cluster the Eviction API, rate-limited, refusing any pod that
    is not BE or is a system pod; without one it logs what it would evict). May be async.
    """


@hookspec
def runtime_hook(
    event: str, pod: PodState, container: ContainerState | None, node_state: NodeState, args: PluginArgs,
    handle: AgentHandle,
) -> Sequence[FileWrite] | None:
    """Called when a pod or container starts on the node (``event`` = "pod_start" / "container_start")
    so plugins can set its knobs before the next round. Returns FileWrites like ``qos_plan``. May be
    async. Idempotent."""


# ================================================================================================
# Descheduling loop
# ================================================================================================
_DESCHEDULING = _section("Descheduling loop")


@hookspec
def deschedule(cluster: ClusterView, args: PluginArgs, handle: Handle) -> Sequence[Migration] | None:
    """Propose evictions or migrations for a cluster snapshot.

    Return a list of :class:`koordfw.core.model.Migration` or ``None``. The engine executes them
    (simulate: in memory; live: the Eviction API, rate-limited, dry-run by default). May be async.
    """


# ================================================================================================
# Node resources
# ================================================================================================
_NODE_RESOURCES = _section("Node resources")


@hookspec
def node_resources(
    node: NodeView, pods: list[Pod], metric: JSONObject | None, now: float, last_update: float | None,
    colocation: JSONObject | None, slo_config: Mapping[str, str] | None, args: PluginArgs, handle: Handle
) -> NodeResourcesReturn:
    """Compute extended allocatable for a node (e.g. ``kubernetes.io/batch-cpu``), and the node annotations
    and allocatable the manager keeps (e.g. Koordinator's CPU normalization ratio, amplified allocatable).

    ``pods`` are the pods on the node, ``metric`` the node's NodeMetric object (a dict) or ``None``,
    ``now`` the engine clock (seconds since the epoch). ``last_update`` is when the engine last wrote this
    node's resources (``koordfw manager``; ``None``: never, and always in ``koordfw simulate``), for
    Koordinator's ``updateTimeThresholdSeconds``/``resourceDiffThreshold`` rule. ``colocation`` is the
    cluster's Koordinator ColocationCfg (the JSON object of the ``colocation-config`` key of the
    ``slo-controller-config`` ConfigMap; ``{}`` when the manager finds no such ConfigMap or key) or
    ``None`` when the engine has none (``koordfw simulate`` without that ConfigMap): a plugin that
    reads it takes it over its own args. ``slo_config`` is the whole ``data`` of that ConfigMap (key →
    JSON text, e.g. ``cpu-normalization-config``), ``None`` when the engine has no such ConfigMap. Return
    ``{resource name: canonical int}`` (milli for cpu-like, units otherwise), written to (merged over)
    the node's allocatable and capacity; a value of ``None`` removes the resource (Koordinator's reset),
    and in the embedded engine so does ``0``. Or return a :class:`koordfw.NodeResourcesResult`: those
    ``amounts``, plus node ``annotations`` to set (``None`` removes one) and an ``allocatable`` override
    (allocatable only, not capacity); plugins later in profile order are given the node with the
    earlier ones' annotations and allocatable applied. Return ``None`` for "no write needed". May be
    async. Must be idempotent.
    """


# ================================================================================================
# Pod admission (the manager's webhook; ``koordfw simulate`` before scheduling)
# ================================================================================================
_ADMISSION = _section("Pod admission")


@hookspec
def mutate_pod(
    pod: JSONObject, operation: str, namespace: JSONObject | None, args: PluginArgs, handle: AdmissionHandle
) -> JSONObject | None:
    """Mutate a pod manifest as it is admitted (a mutating admission webhook).

    ``pod`` is the Pod manifest (a JSON dict, ``metadata.namespace`` filled in), ``operation`` the
    admission operation (``CREATE``, ``UPDATE``, ``DELETE``, ``CONNECT``), ``namespace`` the pod's
    Namespace object from the engine's cache (``None`` if the cache has none). ``handle`` is an
    :class:`koordfw.AdmissionHandle` (clock, seeded RNG, read-only cluster objects). Return the mutated
    manifest (a modified copy, or ``pod`` itself changed in place), or ``None`` for no change; each plugin
    gets the previous one's result. The engine sends the difference from the original as an RFC 6902
    JSONPatch. May be async. Must be deterministic given the handle's RNG.
    """


@hookspec
def validate_pod(
    pod: JSONObject, old: JSONObject | None, operation: str, namespace: JSONObject | None, args: PluginArgs,
    handle: AdmissionHandle,
) -> Status | str | None:
    """Accept or reject a pod manifest as it is admitted (a validating admission webhook), after every
    ``mutate_pod``.

    ``pod`` is the (mutated) manifest, ``old`` the stored pod on ``UPDATE`` (``None`` otherwise),
    ``operation`` and ``namespace`` as for ``mutate_pod``. Return ``None`` (or a success Status) to allow;
    a reason string or a non-success :class:`koordfw.Status` rejects the pod with that message, which
    should name the field (``labels.koordinator.sh/qosClass: ...``). May be async. Must be pure.
    """


#: every hook name, in definition order (= documentation order: tests check each is documented and tested)
HOOK_NAMES: tuple[str, ...] = tuple(_specs())

#: the hooks of each section, by title (docs/hooks.md's ``##`` headings), in definition order
#: the sections in definition order (each bound where it starts)
_SECTION_STARTS: tuple[_Section, ...] = tuple(v for v in globals().values() if isinstance(v, _Section))
_ENDS = [start for *_, start in _SECTION_STARTS[1:]] + [len(HOOK_NAMES)]
SECTIONS: dict[str, tuple[str, ...]] = {title: HOOK_NAMES[start:end]
                                         for (title, _, start), end in zip(_SECTION_STARTS, _ENDS)}

#: the hook points a profile's ``plugins:`` orders (``koordfw.core.profile``): the loops' hooks, then the
#: lifecycle hooks the engines call; not the hooks the registry calls on loading a plugin (``plugin_args``)
PROFILE_POINTS: tuple[str, ...] = tuple(
    name
    for title, _, _ in sorted(_SECTION_STARTS, key=lambda sec: not sec[1])  # the loops first (a stable sort)
    for name in SECTIONS[title]
    if not getattr(globals()[name], "koordfw_on_load", False)
)
