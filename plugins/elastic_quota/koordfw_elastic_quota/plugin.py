"""elastic_quota: Koordinator's ElasticQuota plugin (``pkg/scheduler/plugins/elasticquota``).

* ``pre_filter`` admits a pod only if ``used + request <= runtime`` for every resource of its quota's
  max (max instead of runtime when ``enableRuntimeQuota`` is off), and a non-preemptible pod only if
  ``nonPreemptibleUsed + request <= min``; the parents too when ``enableCheckParentQuota`` is on.
* ``pre_filter`` snapshots the quota check into the cycle state (:mod:`.check`); ``pre_filter_remove_pod`` /
  ``pre_filter_add_pod`` release or charge a pod there in a preemption's what-if, and ``filter`` checks the
  snapshot, so a dry run sees its victims' usage released.
* ``post_filter`` preempts, on one node, lower-priority preemptible pods of the preemptor's own
  quota (never of the default quota), reprieving the most important first.
* ``deschedule`` is the over-use revoke controller: a quota whose used stays above its runtime for
  longer than ``delayEvictTime`` gives back its least important borrowed pods.
* ``report`` adds the quota tree to ``koordfw simulate``'s output.

With no ElasticQuota object in the cluster every hook returns ``None``: nothing changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import attrs
import numpy as np
import structlog

from koordfw import (
    BoundedCache,
    ClusterView,
    Code,
    CycleState,
    Handle,
    IdentityKey,
    Migration,
    NodeBatch,
    Pod,
    PostFilterResult,
    PreFilterResult,
    StateKey,
    Status,
    canonical,
    hookimpl,
    warn_once,
)
from koordfw.contract import FilterResult
from koordfw.extension import ANNOTATION_RESERVATION_NAME, ANNOTATION_RESERVE_POD, KIND_RESERVATION
from koordfw.inputs import camel

from .check import CHECK, QuotaCheck, exceeded
from .quotas import DEFAULT, LABEL_PREEMPTIBLE, ROOT, SYSTEM, QuotaTree, build_quotas, fmt, fmt_map

reservation_from_manifest: Any
try:  # reservations (plugins/reservation): what a reservation holds is its owners' quota, charged once
    from koordfw_reservation.api import reservation_from_manifest
except ImportError:  # pragma: no cover - without the reservation package there are no reserve pods
    reservation_from_manifest = None

log = structlog.get_logger("koordfw.elastic_quota")

PLUGIN = "elastic_quota"
STATE_KEY: StateKey[str] = StateKey("elastic_quota/quota")


def _resource_list(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    for k, v in (value or {}).items():
        try:
            if canonical(str(k), v) < 0:
                raise ValueError("negative")
        except ValueError as e:
            raise ValueError(f"{camel(attribute.name)}.{k}: invalid quantity {v!r} ({e})") from None


#: the longest delay accepted (seconds, ~31 years): Go's Duration holds 292 years
MAX_SECONDS = 1e9


def _seconds(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A finite number of seconds in [0, 1e9] (Koordinator refuses negative durations)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 <= value <= MAX_SECONDS):
        raise ValueError(f"{camel(attribute.name)}: expected a number of seconds in [0, {MAX_SECONDS:g}], "
                         f"got {value!r}")


@attrs.define
class Args:
    """ElasticQuotaArgs. ``delayEvictTime`` and ``revokePodInterval`` are in seconds."""

    delay_evict_time: float = attrs.field(default=120.0, validator=_seconds)
    revoke_pod_interval: float = attrs.field(default=1.0, validator=_seconds)
    #: max of the default and system quotas when no ElasticQuota object defines them (empty = no limit)
    default_quota_group_max: dict[str, str] = attrs.field(factory=dict, validator=_resource_list)
    system_quota_group_max: dict[str, str] = attrs.field(factory=dict, validator=_resource_list)
    #: the revoke controller runs only with this and enable_runtime_quota (Koordinator ships it off)
    monitor_all_quotas: bool = True
    enable_check_parent_quota: bool = False
    enable_runtime_quota: bool = True
    disable_default_quota_preemption: bool = True
    enable_min_quota_scale: bool = True
    #: feature gate ElasticQuotaGuaranteeUsage: guarantee = max(used, min) in the water-filling
    guarantee_usage: bool = False


def is_preemptible(pod: Any) -> bool:
    return pod.labels.get(LABEL_PREEMPTIBLE) != "false"


def _importance_desc(p: Any) -> tuple:
    """Most important first: higher priority, then earlier start (kube's MoreImportantPod)."""
    return (-p.priority, p.creation_timestamp or 0.0, p.key)


class ElasticQuota:
    """Per-scheduler state: the quota tree, refreshed when the cluster changes, and the revoke monitors."""

    def __init__(self) -> None:
        self._tree: QuotaTree | None = None
        self._tree_key: tuple | None = None
        self._quota_sig: tuple | None = None
        self._quotas: tuple[dict, dict] | None = None
        self._pod_quota: dict[str, tuple[Any, str]] = {}
        self._logged: BoundedCache[str, bool] = BoundedCache(4096)
        #: quota → last time its used was within runtime (Koordinator's lastUnderUsedTime)
        self._last_under: dict[str, float] = {}
        self._last_revoke: float | None = None
        #: uid → (pod object, quota or None, assigned, preemptible) as last accounted
        self._acct: dict[str, tuple] = {}
        #: quota → (Σ requests, Σ used, Σ non-preemptible used) of its own pods, kept incrementally
        self._sums: dict[str, tuple[dict, dict, dict]] = {}
        self._nominated_by_uid: dict[str, tuple[str, Any]] = {}
        #: quota → uid → the placed reserve pods charged to it (what Reservations hold for their owners)
        self._holds: dict[str, dict[str, Any]] = {}
        #: Reservation name → (the object, its owners' reader or None when unreadable), reused while the
        #: cluster holds that very object
        self._reservations: BoundedCache[str, tuple[Any, Any]] = BoundedCache(65536)

    @property
    def _nominated(self) -> list[tuple[str, Any]]:
        """Pending pods nominated by a preemption: (quota, pod)."""
        return list(self._nominated_by_uid.values())

    def _apply(self, entry: tuple, sign: int) -> None:
        pod, quota, assigned, preemptible = entry
        if quota is None:
            return
        req, used, npu = self._sums.setdefault(quota, ({}, {}, {}))
        for r, v in pod.requests.items():
            req[r] = req.get(r, 0) + sign * v
            if assigned:
                used[r] = used.get(r, 0) + sign * v
                if not preemptible:
                    npu[r] = npu.get(r, 0) + sign * v

    def _account(self, cluster: Any, tree: QuotaTree) -> None:
        """Bring the per-quota sums up to date: only pods whose object or placement changed are
        re-accounted (pod objects are immutable, so identity tells)."""
        acct, nominated = self._acct, self._nominated_by_uid
        pods = cluster.pods
        for uid, e in pods.items():
            p = e.pod
            assigned = e.node_index >= 0
            old = acct.get(uid)
            if old is not None and old[0] is p and old[2] == assigned:
                continue
            if old is not None:
                self._apply(old, -1)
                if old[1] is not None:
                    self._holds.get(old[1], {}).pop(uid, None)
            quota = None if p.is_terminal else self._quota_for(p, tree)
            new = (p, quota, assigned, is_preemptible(p))
            self._apply(new, 1)
            acct[uid] = new
            if quota is not None and assigned and p.annotations.get(ANNOTATION_RESERVE_POD) == "true":
                self._holds.setdefault(quota, {})[uid] = p
            if quota is not None and not assigned and p.nominated_node_name:
                nominated[uid] = (quota, p)
            else:
                nominated.pop(uid, None)
        if len(acct) != len(pods):
            for uid in [u for u in acct if u not in pods]:
                gone = acct.pop(uid)
                self._apply(gone, -1)
                if gone[1] is not None:
                    self._holds.get(gone[1], {}).pop(uid, None)
                nominated.pop(uid, None)
                self._pod_quota.pop(uid, None)

    def _quota_for(self, p: Any, tree: QuotaTree) -> str:
        hit = self._pod_quota.get(p.uid)
        if hit is None or hit[0] is not p.labels:
            hit = (p.labels, tree.quota_name_of(p.labels, p.namespace))
            self._pod_quota[p.uid] = hit
        return hit[1]

    # -- the tree ----------------------------------------------------------------------------------
    def tree(self, cluster: Any, args: Args) -> QuotaTree | None:
        """The quota tree with request/used/runtime for the cluster as it is now; None without quotas."""
        objs = cluster.objects_of("ElasticQuota")
        if not objs:
            self._tree = self._tree_key = None
            return None
        key = (cluster.generation, IdentityKey(cluster, args))
        if self._tree is not None and key == self._tree_key:
            return self._tree
        names = sorted(objs)
        sig = (tuple(names), IdentityKey(cluster, *(objs[k] for k in names)))
        if sig != self._quota_sig or self._quotas is None:  # (_quotas is None only while _quota_sig is)
            self._quotas = build_quotas(o for _, o in sorted(objs.items()))
            self._quota_sig = sig
            self._pod_quota.clear()
            self._holds.clear()
            self._acct.clear()
            self._sums.clear()
            self._nominated_by_uid.clear()
            for q in self._quotas[1].values():
                warn_once(log, self._logged, q.error, "invalid ElasticQuota ignored", quota=q.name, error=q.error)
        valid, invalid = self._quotas
        tree = QuotaTree(valid, invalid,
                         default_max={k: canonical(k, v) for k, v in args.default_quota_group_max.items()},
                         system_max={k: canonical(k, v) for k, v in args.system_quota_group_max.items()},
                         enable_min_scale=args.enable_min_quota_scale, guarantee_usage=args.guarantee_usage)
        self._account(cluster, tree)
        for name, (req, used, npu) in self._sums.items():
            st = tree.states.get(name)
            if st is not None:
                st.pod_request = {k: v for k, v in req.items() if v}
                st.used = {k: v for k, v in used.items() if v}
                st.non_preemptible_used = {k: v for k, v in npu.items() if v}
        tree.aggregate_used()
        n = cluster.num_nodes
        alloc = cluster.allocatable[:n]
        if n and cluster.has_removed_nodes:
            alloc = alloc[cluster.live_mask]
        sums = alloc.sum(axis=0) if len(alloc) else np.zeros(len(cluster.resources), dtype=np.int64)
        tree.compute({r: int(sums[i]) for i, r in enumerate(cluster.resources) if sums[i]})
        self._tree, self._tree_key = tree, key
        return tree

    def quota_of(self, pod: Any, tree: QuotaTree) -> str:
        hit = self._pod_quota.get(pod.uid)
        if hit is not None and hit[0] is pod.labels:
            return hit[1]
        return tree.quota_name_of(pod.labels, pod.namespace)

    def used_with_nominated(self, tree: QuotaTree, name: str, pod: Any) -> dict[str, int]:
        """``name``'s used plus the requests of pending pods of ``name`` (or below it) nominated by a
        preemption with at least ``pod``'s priority: kube adds them in the filter phase
        (``addNominatedPods`` → ElasticQuota's ``AddPod``) so that a victim cannot take back the room
        made for its preemptor."""
        used = dict(tree.states[name].used)
        for q, p in self._nominated:
            if p.uid != pod.uid and p.priority >= pod.priority and (q == name or name in tree.ancestors(q)):
                for r, v in p.requests.items():
                    used[r] = used.get(r, 0) + v
        return used

    def reserved_for(self, pod: Any, name: str, cluster: Any) -> list[tuple[str, dict[str, int]]]:
        """What each placed Reservation charged to quota ``name`` holds for ``pod`` (an owner of it), with
        its node: (node, the part of the pod's requests it covers). On that node the pod allocates it from
        the reservation rather than adding it (so it must not be counted twice); anywhere else it adds.
        Empty for pods that own none, reserve pods, and without the reservation package."""
        holds = self._holds.get(name)
        if not holds or reservation_from_manifest is None or pod.annotations.get(ANNOTATION_RESERVE_POD) == "true":
            return []
        out: list[tuple[str, dict[str, int]]] = []
        for h in holds.values():
            rname = h.annotations.get(ANNOTATION_RESERVATION_NAME, "")
            obj = cluster.get_object(KIND_RESERVATION, rname)
            if obj is None:
                continue
            hit = self._reservations.get(rname)
            if hit is None or hit[0] is not obj:
                try:
                    hit = (obj, reservation_from_manifest(obj))
                except Exception:  # noqa: BLE001 - the reservation plugin reports a malformed Reservation
                    hit = (obj, None)
                self._reservations[rname] = hit
            r = hit[1]
            if r is None or not r.matches_owner(pod):
                continue
            take = {k: min(v, h.requests.get(k, 0)) for k, v in pod.requests.items() if v and h.requests.get(k, 0)}
            if take and h.node_name:
                out.append((h.node_name, take))
        return out

    @staticmethod
    def exceeded(tree: QuotaTree, name: str, request: Mapping[str, int], args: Args, *,
                 used: Mapping[str, int] | None = None) -> str | None:
        """Why ``request`` does not fit ``name``'s limit (runtime, or max), or None if it fits."""
        return exceeded(tree, name, request, args, used=used)

    # -- hooks ---------------------------------------------------------------------------------------
    @staticmethod
    @hookimpl
    def plugin_args() -> type[Args]:
        return Args

    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, args: Args, handle: Handle) -> PreFilterResult | Status | None:
        tree = self.tree(handle.cluster, args)
        if tree is None:
            return None
        name = self.quota_of(pod, tree)
        state[STATE_KEY] = name
        if name in tree.invalid:
            return Status.unresolvable(f"the pod's quota is invalid: {tree.invalid[name].error}")
        checked = (name, *(tree.ancestors(name) if args.enable_check_parent_quota else ()))
        check = QuotaCheck(tree, name, checked, {q: self.used_with_nominated(tree, q, pod) for q in checked})
        why = check.why_not(pod, args)
        only: frozenset[str] | None = None
        if why is not None:
            # an owner of a reservation charged to this quota fits on the reservation's node, where it
            # allocates from what is already charged (reservations: charged once)
            reserved = {node: take for node, take in self.reserved_for(pod, name, handle.cluster)}
            check = attrs.evolve(check, reserved=reserved)
            only = frozenset(node for node, take in reserved.items() if check.why_not(pod, args, take) is None)
        np_why = None
        if not is_preemptible(pod):
            st = tree.states[name]
            q = st.quota
            bad = [r for r in sorted(q.max) if r in q.min
                   and st.non_preemptible_used.get(r, 0) + pod.requests.get(r, 0) > q.min[r]]
            if bad:
                np_why = f"Insufficient non-preemptible quota {name}: " + "; ".join(
                    f"{r} non-preemptible used {fmt(r, st.non_preemptible_used.get(r, 0))} + request "
                    f"{fmt(r, pod.requests.get(r, 0))} > min {fmt(r, q.min[r])}" for r in bad)
        # written before deciding: a preemption after a rejection releases its victims' usage from it
        state[CHECK] = attrs.evolve(check, non_preemptible=np_why, fits=why is None and np_why is None)
        if why is not None and not only:
            return Status.unschedulable(why)
        if np_why is not None:
            return Status.unschedulable(np_why)
        return PreFilterResult(only) if only is not None else None

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState, args: Args) -> FilterResult:
        """The quota check again, on the cycle's snapshot: the same answer as ``pre_filter`` in a plain
        cycle (nothing to do), the what-if's answer once a preemption moved pods in or out of it."""
        check = state.get(CHECK)
        if check is None or check.fits:
            return None
        why = check.non_preemptible or check.why_not(pod, args)
        if why is None:
            return None
        if not check.reserved:
            return np.zeros(len(nodes), dtype=bool), why
        ok = np.array([n.name in check.reserved and check.why_not(pod, args, check.reserved[n.name]) is None
                       for n in nodes], dtype=bool)
        return ok, why

    def _moved(self, pod: Pod, state: CycleState, other: Pod, sign: int) -> None:
        check = state.get(CHECK)
        if check is not None and not other.is_terminal:
            state[CHECK] = check.moved(other, self.quota_of(other, check.tree), sign)

    @hookimpl
    def pre_filter_remove_pod(self, pod: Pod, state: CycleState, pod_to_remove: Pod) -> None:
        """Koordinator's ``RemovePod``: a victim taken off in a what-if no longer uses its quota."""
        self._moved(pod, state, pod_to_remove, -1)

    @hookimpl
    def pre_filter_add_pod(self, pod: Pod, state: CycleState, pod_to_add: Pod) -> None:
        """Koordinator's ``AddPod``: a pod put back (or placed) in a what-if uses its quota again."""
        self._moved(pod, state, pod_to_add, 1)

    @hookimpl
    async def post_filter(self, pod: Pod, state: CycleState, statuses: Mapping[str, Status], args: Args,
                          handle: Handle) -> PostFilterResult | None:
        cluster = handle.cluster
        tree = self.tree(cluster, args)
        if tree is None or pod.preemption_policy == "Never":
            return None
        name = state.get(STATE_KEY) or self.quota_of(pod, tree)
        if name in tree.invalid or name not in tree.states:
            return None
        if name == DEFAULT and args.disable_default_quota_preemption:
            return None
        by_node: dict[str, list[Pod]] = {}
        for p in cluster.all_pods():
            if (p.node_name and not p.is_terminal and p.priority < pod.priority and is_preemptible(p)
                    and self.quota_of(p, tree) == name and not cluster.is_assumed(p.uid)):
                by_node.setdefault(p.node_name, []).append(p)
        if statuses:  # the filters ran: the nodes they found Unschedulable (not Unresolvable) only
            allowed = {n for n, st in statuses.items() if st.code == Code.UNSCHEDULABLE}
            nodes = sorted(n for n in by_node if n in allowed)
        else:  # pre_filter rejected the pod: every node is a candidate, as in kube
            nodes = sorted(n for n in by_node if cluster.node(n) is not None)
        found: list[tuple[str, list[Pod]]] = []
        for node in nodes:
            victims = await self._select_victims(pod, node, by_node[node], tree, name, state, args, handle)
            if victims:
                found.append((node, victims))
        if not found:
            return None
        node, victims = min(found, key=_pick_key)
        for v in victims:
            await handle.evict(v, f"preempted by {pod.key} on {node} (elastic quota {name})")
        return PostFilterResult(node)

    async def _select_victims(self, pod: Pod, node: str, potential: list[Pod], tree: QuotaTree, name: str,
                              state: CycleState, args: Args, handle: Handle) -> list[Pod] | None:
        """Koordinator's ``SelectVictimsOnNode``: take every potential victim off (node and quota, through the
        pre_filter extensions, into a clone of the cycle's state), then put them back one by one, most
        important first, keeping out those without which the pod no longer fits its node or its quota."""
        st = state.clone()
        if CHECK not in st:  # pre_filter did not run into this state: snapshot the quota now
            st[CHECK] = QuotaCheck(tree, name, (name,), {name: self.used_with_nominated(tree, name, pod)})

        async def move(v: Pod, add: bool) -> bool:
            if add:
                return (await handle.run_pre_filter_extension_add_pod(pod, st, v, node)).ok
            return (await handle.run_pre_filter_extension_remove_pod(pod, st, v, node)).ok

        async def fits(removed: list[Pod]) -> bool:
            if st[CHECK].why_not(pod, args) is not None:  # Koordinator checks used + request <= limit itself
                return False
            with handle.without_pods(node, removed):
                return (await handle.run_filters(pod, node, st)).ok

        for v in potential:
            if not await move(v, False):
                return None
        if not await fits(potential):
            return None
        victims = sorted(potential, key=_importance_desc)
        for p in list(victims):
            trial = [v for v in victims if v.uid != p.uid]
            if not await move(p, True):
                return None
            if await fits(trial):
                victims = trial
            elif not await move(p, False):
                return None
        return victims or None

    @hookimpl
    def deschedule(self, cluster: ClusterView, args: Args, handle: Handle) -> list[Migration] | None:
        """The over-use revoke controller; returns evictions (``to`` None) of borrowed pods."""
        if not (args.monitor_all_quotas and args.enable_runtime_quota):
            return None
        tree = self.tree(cluster, args)
        if tree is None:
            self._last_under.clear()
            return None
        now = handle.clock.now()
        if self._last_revoke is not None and now - self._last_revoke < args.revoke_pod_interval:
            return None
        self._last_revoke = now
        pods_by_quota: dict[str, list[Pod]] = {}
        for p in cluster.all_pods():
            if p.node_name and not p.is_terminal and not cluster.is_assumed(p.uid):
                pods_by_quota.setdefault(self.quota_of(p, tree), []).append(p)
        plan = []
        for name in tree.walk():
            if name in (SYSTEM, DEFAULT):
                continue
            st = tree.states[name]
            q = st.quota
            over = [r for r in sorted(q.max) if st.used.get(r, 0) > st.runtime.get(r, 0)]
            if not over:
                self._last_under[name] = now
                continue
            since = self._last_under.setdefault(name, now)
            if now - since <= args.delay_evict_time:
                continue
            for p in self.revoke_list(pods_by_quota.get(name, []), st.used, st.runtime, q.max):
                detail = ", ".join(f"{r} used {fmt(r, st.used.get(r, 0))} > runtime {fmt(r, st.runtime.get(r, 0))}"
                                   for r in over)
                plan.append(Migration(pod=p.key, from_node=cast(str, p.node_name), to=None, plugin=PLUGIN,
                                      reason=f"elastic quota {name} over its runtime for {now - since:g}s ({detail})"))
        return plan or None

    @staticmethod
    def revoke_list(pods: Iterable[Pod], used: Mapping[str, int], runtime: Mapping[str, int],
                    dims: Iterable[str]) -> list[Pod]:
        """Koordinator's ``getToRevokePodList``: take pods off from the least important until used fits
        the runtime, then give back, most important first, those that still fit; the rest are evicted."""
        dims = sorted(dims)
        cur = dict(used)

        def fits(extra: Mapping[str, int] | None = None) -> bool:
            return all(cur.get(r, 0) + (extra.get(r, 0) if extra else 0) <= runtime.get(r, 0) for r in dims)

        order = sorted((p for p in pods if is_preemptible(p)),
                       key=lambda p: (p.priority, -(p.creation_timestamp or 0.0), p.key))
        taken: list[Pod] = []
        for p in order:
            if fits():
                break
            for r, x in p.requests.items():
                cur[r] = cur.get(r, 0) - x
            taken.append(p)
        evict: list[Pod] = []
        for p in reversed(taken):
            if fits(p.requests):
                for r, x in p.requests.items():
                    cur[r] = cur.get(r, 0) + x
            else:
                evict.append(p)
        return evict[::-1]

    @hookimpl
    def report(self, args: Args, handle: Handle) -> dict[str, Any] | None:
        tree = self.tree(handle.cluster, args)
        if tree is None:
            return None
        out = []
        for name in tree.walk():
            st = tree.states[name]
            q = st.quota
            if name in (SYSTEM, DEFAULT) and not st.request and name not in (self._quotas or ({}, {}))[0]:
                continue
            keys = set(q.max) | set(q.min)
            out.append({"name": name, "parent": q.parent if name not in (SYSTEM, DEFAULT) else ROOT,
                        "min": fmt_map(q.min), "max": fmt_map(q.max), "request": fmt_map(st.request),
                        "used": fmt_map(st.used),
                        "runtime": fmt_map({r: v for r, v in st.runtime.items() if r in keys})})
        for name in sorted(tree.invalid):
            q = tree.invalid[name]
            out.append({"name": name, "parent": q.parent, "min": fmt_map(q.min), "max": fmt_map(q.max),
                        "request": {}, "used": {}, "runtime": {}, "error": q.error})
        return {"quotas": out}


def _pick_key(item: tuple[str, Sequence[Pod]]) -> tuple[Any, ...]:
    """kube's pickOneNodeForPreemption order: lowest top victim priority, lowest priority sum, fewest
    victims, latest start among the top-priority victims, then node name."""
    node, victims = item
    top = max(v.priority for v in victims)
    latest = max((v.creation_timestamp or 0.0) for v in victims if v.priority == top)
    return (top, sum(v.priority for v in victims), len(victims), -latest, node)
