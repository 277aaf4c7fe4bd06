"""The quota check of one pod's cycle: what ``pre_filter`` found (Koordinator's ElasticQuota
``PostFilterState``), kept in the cycle state so that a what-if can move pods in and out of it.

``pre_filter`` snapshots the used of the pod's quota (and, with ``enableCheckParentQuota``, of its
ancestors) into the state; ``pre_filter_remove_pod`` / ``pre_filter_add_pod`` take a pod charged to one of
those quotas out of it or add it back (Koordinator's ``RemovePod`` / ``AddPod``), and ``filter`` checks
the pod against the snapshot, so a preemption's dry run sees its victims' usage released and the members it
has already placed charged. The snapshot is frozen: an extension writes a new one, so a cloned state never
sees another clone's change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import Pod, StateKey

from .quotas import DEFAULT, SYSTEM, QuotaTree, fmt


def exceeded(tree: QuotaTree, name: str, request: Mapping[str, int], args: Any, *,
             used: Mapping[str, int] | None = None) -> str | None:
    """Why ``request`` does not fit ``name``'s limit (runtime, or max when ``enableRuntimeQuota`` is off and
    for the system and default quotas), or None if it fits; ``used`` replaces the quota's own used."""
    st = tree.states[name]
    q = st.quota
    limit = st.runtime if args.enable_runtime_quota and name not in (SYSTEM, DEFAULT) else q.max
    used = st.used if used is None else used
    bad = [r for r in sorted(q.max) if used.get(r, 0) + request.get(r, 0) > limit.get(r, 0)]
    if not bad:
        return None
    what = "runtime" if limit is st.runtime else "max"
    return (f"Insufficient quota {name}: " + "; ".join(
        f"{r} used {fmt(r, used.get(r, 0))} + request {fmt(r, request.get(r, 0))} > {what} "
        f"{fmt(r, limit.get(r, 0))}" for r in bad))


@attrs.frozen(eq=False)
class QuotaCheck:
    """The pod's quota check as ``pre_filter`` made it. ``checked``: the pod's quota, then the ancestors
    checked; ``used``: each one's used (with the pending pods nominated by a preemption counted), as the
    what-if has changed it; ``reserved``: node → what a Reservation charged to the quota holds for the pod
    there (it allocates that from the reservation on that node); ``non_preemptible``: why a non-preemptible
    pod exceeds its quota's min (no victim can change it); ``fits``: the answer at ``pre_filter``, None once
    a what-if has moved a pod."""

    tree: QuotaTree
    quota: str
    checked: tuple[str, ...]
    used: Mapping[str, Mapping[str, int]]
    reserved: Mapping[str, Mapping[str, int]] = attrs.field(factory=dict)
    non_preemptible: str | None = None
    fits: bool | None = None

    def why_not(self, pod: Pod, args: Any, take: Mapping[str, int] | None = None) -> str | None:
        """Why ``pod`` does not fit the quotas checked (``take``: what a reservation covers), or None."""
        for q in self.checked:
            used = dict(self.used[q])
            for k, v in (take or {}).items():
                used[k] = max(used.get(k, 0) - v, 0)
            why = exceeded(self.tree, q, pod.requests, args, used=used)
            if why is not None:
                return why
        return None

    def moved(self, other: Pod, other_quota: str, sign: int) -> QuotaCheck:
        """The check with ``other`` (charged to ``other_quota``) added (``sign`` 1) or taken out (-1) of each
        quota checked that it is charged to: its own and every ancestor of it (used never goes below 0, as
        Koordinator's ``SubtractWithNonNegativeResult``). Itself when none of them is charged."""
        charged = {other_quota, *self.tree.ancestors(other_quota)} if other_quota in self.tree.states else set()
        hit = [q for q in self.checked if q in charged]
        if not hit or not other.requests:
            return self
        used = dict(self.used)
        for q in hit:
            u = dict(used[q])
            for r, v in other.requests.items():
                u[r] = max(u.get(r, 0) + sign * v, 0)
            used[q] = u
        return attrs.evolve(self, used=used, fits=None)


#: the cycle's quota check, written by ``pre_filter`` (before it decides, so that a preemption after a
#: rejection finds it) and replaced by the pre_filter extensions
CHECK: StateKey[QuotaCheck] = StateKey("elastic_quota/check")
