"""scheduling_hint: Koordinator's SchedulingHint (v1.8, ``pkg/scheduler/plugins/schedulinghint``).

A pod's scheduling-hint annotation (:data:`~koordfw.extension.ANNOTATION_SCHEDULING_HINT`, else the
deprecated :data:`~koordfw.extension.DEPRECATED_ANNOTATION_SCHEDULING_HINT`) is JSON
``{"nodeNames": [...], "preferredNodeNames": [...]}``:

- ``nodeNames`` are required: pre_filter restricts the candidates to them (a PreFilterResult);
- ``preferredNodeNames`` are tried in order, at most ``maxHintNodes`` (default 100) of them and only those
  among the required ones: the first that passes every filter is the pod's only candidate (Koordinator's
  PreferNodes step: it runs after every pre_filter, so this pre_filter runs the profile's pre_filters
  itself first, which they allow, being idempotent within a cycle); when none passes, the pod is
  scheduled as without preferred nodes.

No annotation, or an empty one: nothing (the plugin's filter is skipped). Invalid JSON is an error
status, as Koordinator's ``GetSchedulingHint`` returns.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from koordfw import CycleState, Handle, Pod, PreFilterResult, StateKey, Status, hookimpl
from koordfw.extension import ANNOTATION_SCHEDULING_HINT, DEPRECATED_ANNOTATION_SCHEDULING_HINT


def _max_hint_nodes(inst: Any, attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise ValueError(f"maxHintNodes: expected an integer in [1, 2147483647], got {str(value)[:40]}")


@attrs.define
class Args:
    """Koordinator's SchedulingHintArgs: ``maxHintNodes``, how many preferred nodes are tried."""

    max_hint_nodes: int = attrs.field(default=100, validator=_max_hint_nodes)


@attrs.frozen
class Hint:
    node_names: tuple[str, ...] = ()
    preferred_node_names: tuple[str, ...] = ()


#: set while this plugin's pre_filter runs the profile's pre_filters (its own call then skips the preferred step)
_RUNNING: StateKey[bool] = StateKey("scheduling_hint/running")


@hookimpl
def plugin_args() -> type:
    return Args


def hint_of(pod: Pod) -> Hint | None:
    """The pod's scheduling hint (None without one); ``ValueError`` for one that is not valid JSON."""
    raw = pod.annotations.get(ANNOTATION_SCHEDULING_HINT) or pod.annotations.get(DEPRECATED_ANNOTATION_SCHEDULING_HINT)
    if not raw:
        return None
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"invalid scheduling hint: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError("invalid scheduling hint: expected a JSON object")
    out = {}
    for key in ("nodeNames", "preferredNodeNames"):
        names = obj.get(key) or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"invalid scheduling hint: {key}: expected a list of node names")
        out[key] = tuple(names)
    return Hint(out["nodeNames"], out["preferredNodeNames"])


@hookimpl
def pre_filter(pod: Pod, state: CycleState, args: Args, handle: Handle) -> Any:
    """Sync for the common pod without a hint (Skip); the preferred-node step is awaited by the kernel."""
    if ANNOTATION_SCHEDULING_HINT not in pod.annotations and DEPRECATED_ANNOTATION_SCHEDULING_HINT not in pod.annotations:
        return Status.skip()
    try:
        hint = hint_of(pod)
    except ValueError as e:
        return Status.error(str(e))
    if hint is None or not (hint.node_names or hint.preferred_node_names):
        return Status.skip()
    required = PreFilterResult(frozenset(hint.node_names)) if hint.node_names else None
    if not hint.preferred_node_names or state.get(_RUNNING):
        return required
    return _prefer(pod, state, args, handle, hint, required)


async def _prefer(pod: Pod, state: CycleState, args: Args, handle: Handle, hint: Hint,
                  required: PreFilterResult | None) -> PreFilterResult | None:
    """Koordinator's PreferNodes: after every pre_filter, the first preferred node passing the filters."""
    state[_RUNNING] = True
    try:
        st, candidates = await handle.run_pre_filters(pod, state)
        if not st.ok:
            return required  # the kernel's own pre_filter pass reports it
        for name in hint.preferred_node_names[: args.max_hint_nodes]:
            if candidates is not None and name not in candidates:
                continue
            if handle.cluster.node_index(name) is None:
                continue
            if (await handle.run_filters(pod, name, state)).ok:
                return PreFilterResult(frozenset((name,)))  # the first preferred node that fits
    finally:
        state[_RUNNING] = False
    return required
