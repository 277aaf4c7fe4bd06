"""reservation: Koordinator's Reservation plugin (``pkg/scheduler/plugins/reservation``) and the status
its reservation controller keeps.

* Every Pending Reservation becomes a **reserve pod** (its template, :func:`~.api._reserve_pod`), added
  with ``handle.add_placeholder``: it is scheduled like any pod, every filter and score applying, and
  its binding (this plugin's ``bind``) makes the Reservation Available on that node, where the reserve
  pod then holds what it reserves. A Reservation already Available on a node in the input is placed
  there at startup.
* For a pod, ``pre_filter`` finds the Available reservations on each node that it may use: those whose
  owners it matches (and its ``reservation-affinity``: name, selector, tolerations of the reservation's
  taints and ``unschedulable``), or all of them for a ``reservation-ignored`` pod; what they still hold
  counts as free on their nodes for this pod's filters and scores (``handle.restore_requests``, the
  restore-reservation transformer). Everybody else finds those resources taken.
* ``filter``: on a node with such reservations the pod must fit the node's free resources plus one
  reservation's remainder (Aligned and the default policy), and a Restricted reservation's reserved
  resources on their own; a pod with a reservation affinity only fits nodes with a matching reservation.
* ``score`` prefers nodes with a matching reservation: the lowest ``reservation-order``, else how fully
  the pod (with what is allocated already) uses the nominated reservation (MostAllocated), normalized.
* ``reserve`` allocates from the nominated reservation (its reserve pod shrinks to what remains),
  ``pre_bind`` writes ``scheduling.koordinator.sh/reservation-allocated`` ``{"name", "uid"}``,
  ``post_bind`` records the owner in ``status.currentOwners``; an ``allocateOnce`` reservation is then
  Succeeded and releases the rest. An owner that goes away gives its share back to a reservation that
  is not ``allocateOnce``. At expiry (``expires``, creation + ``ttl``; ``ttl: 0`` never) a reservation
  is Failed and releases its node.
* ``report`` adds ``reservations`` to ``koordfw simulate``'s output.
* The status (phase, the Scheduled and Ready conditions with Koordinator's reasons, nodeName, allocatable,
  allocated, currentOwners) is written through ``handle.update_object_status`` whenever it changes (the
  live scheduler PUTs the Reservation's ``/status``); Reservations created, deleted or recreated after
  startup arrive through ``handle.watch_objects`` (the live scheduler replays what it listed once its
  caches have synced: Available ones are placed on their nodes at once, their owners re-read from the
  pods' ``reservation-allocated``). A deleted Reservation releases what it held.

Without Reservation objects every hook returns at once.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import structlog

from koordfw import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    NODE_UPDATE,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    ManifestError,
    PreFilterResult,
    QueueingHint,
    StateKey,
    Status,
    format_quantity,
    hookimpl,
    normalize,
)
from koordfw.extension import ANNOTATION_RESERVATION_ALLOCATED, KIND_RESERVATION

from .api import (
    AVAILABLE,
    FAILED,
    PENDING,
    POLICY_DEFAULT,
    POLICY_RESTRICTED,
    SUCCEEDED,
    WAITING,
    Reservation,
    ReservationAffinity,
    is_reservation_ignored,
    reservation_affinity,
    reservation_from_manifest,
)

log = structlog.get_logger("koordfw.reservation")

PLUGIN = "reservation"

# Koordinator's reasons (plugin.go)
ERR_AFFINITY = "node(s) no reservations match reservation affinity"
ERR_NODE_NOT_MATCH = "node(s) didn't match the nodeName specified by reservation"
ERR_POLICY_CONFLICT = "node(s) reservation allocate policy conflict"
ERR_INACTIVE = "reservation is not active"
ERR_NO_RESERVATION_FITS = "node(s) no reservation(s) to meet the requirements"
RESERVATION_REASON_PREFIX = "Reservation(s) "
MOST_PREFERRED_SCORE = 1000

_EVENT_RESERVATION = ClusterEvent(KIND_RESERVATION, "*")


@attrs.define
class _CycleData:
    """What pre_filter found for the cycle's pod."""

    #: node name → the reservations there the pod may use (matched, or all for a reservation-ignored pod)
    matched: dict[str, list[Reservation]]
    affinity: ReservationAffinity | None
    ignored: bool
    #: the same by node index, and a bool mask over node indices of those nodes (for the batch hooks)
    by_index: dict[int, list[Reservation]] = attrs.field(factory=dict)
    mask: np.ndarray = attrs.field(factory=lambda: np.zeros(0, dtype=bool))
    #: node name → the reservation nominated there (PreScore / Reserve)
    nominated: dict[str, Reservation | None] = attrs.field(factory=dict)
    preferred_node: str = ""
    #: the reservation reserve allocated from, for unreserve / pre_bind / post_bind
    assumed: Reservation | None = None


STATE: StateKey[_CycleData] = StateKey("reservation/cycle")


def _now_str(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _masked(requests: Mapping[str, int], names: list[str]) -> dict[str, int]:
    return {r: v for r, v in requests.items() if r in names and v}


class ReservationPlugin:
    """Per-scheduler state: the reservations by uid, their reserve pods, and an expiry heap."""

    def __init__(self) -> None:
        self.reservations: dict[str, Reservation] = {}
        #: node name → Available reservations there (by uid)
        self._on_node: dict[str, dict[str, Reservation]] = {}
        self._indexed_at: dict[str, str] = {}
        #: owner index of the active reservations: key (see :func:`owner_keys`) → uids; and those that cannot
        #: be indexed (an owner with no name, uid, matchLabels or controller): every pod is a candidate
        self._by_owner_key: dict[tuple[str, str], set[str]] = {}
        self._unindexed: set[str] = set()
        #: the reservations that are not allocateOnce (their owners may go away and give their share back)
        self._shared: set[str] = set()
        self._expiry: list[tuple[float, str]] = []
        self._free_gen = -1
        self._started = False
        #: uid → the status last written (nothing is written when it is unchanged)
        self._written: dict[str, dict[str, Any]] = {}

    # -- bookkeeping ------------------------------------------------------------------------------
    def _index(self, r: Reservation) -> None:
        """Keep ``_on_node`` (the reservations active on each node) up to date for ``r``."""
        at = self._indexed_at.pop(r.uid, None)
        if at is not None:
            rs = self._on_node.get(at)
            if rs is not None:
                rs.pop(r.uid, None)
                if not rs:
                    del self._on_node[at]
            self._unindexed.discard(r.uid)
            for key in owner_keys(r) or ():
                uids = self._by_owner_key.get(key)
                if uids is not None:
                    uids.discard(r.uid)
                    if not uids:
                        del self._by_owner_key[key]
        if r.node_name and r.phase in (AVAILABLE, WAITING):
            self._on_node.setdefault(r.node_name, {})[r.uid] = r
            self._indexed_at[r.uid] = r.node_name
            keys = owner_keys(r)
            if keys is None:
                self._unindexed.add(r.uid)
            else:
                for key in keys:
                    self._by_owner_key.setdefault(key, set()).add(r.uid)

    def _candidates(self, pod: Any, ignored: bool) -> list[Reservation]:
        """The active reservations whose owners the pod may match (all of them for a reservation-ignored pod),
        from the owner index; the full match is still to be made."""
        if ignored:
            return [r for rs in self._on_node.values() for r in rs.values()]
        uids = set(self._unindexed)
        index = self._by_owner_key
        if index:
            for key in pod_keys(pod):
                hit = index.get(key)
                if hit:
                    uids |= hit
        rs = self.reservations
        return [rs[u] for u in sorted(uids) if u in rs]

    def _hold(self, r: Reservation, handle: Any) -> None:
        """Place (or resize) r's reserve pod on its node: it holds what r has not allocated."""
        pod = attrs.evolve(r.reserve_pod, node_name=r.node_name, requests=r.remaining, phase="Running")
        handle.add_placeholder(pod)

    def _release(self, r: Reservation, handle: Any) -> None:
        handle.remove_placeholder(r.uid)
        self._index(r)

    def _expire(self, r: Reservation, handle: Any) -> None:
        """SetReservationExpired: Failed, Ready False (Expired); what it held is released."""
        if r.is_terminal or self.reservations.get(r.uid) is not r:  # ended, or deleted meanwhile
            return
        r.phase = FAILED
        r.set_condition("Ready", "False", "Expired", _now_str(handle.now()))
        self._release(r, handle)
        self._write_status(r, handle)
        log.info("reservation expired", reservation=r.name, node=r.node_name or None)

    def _succeed(self, r: Reservation, handle: Any) -> None:
        """SetReservationSucceeded (allocateOnce consumed): the rest of what it held is released."""
        r.phase = SUCCEEDED
        r.set_condition("Ready", "False", "Succeeded", _now_str(handle.now()))
        self._release(r, handle)
        self._write_status(r, handle)

    def _write_status(self, r: Reservation, handle: Any) -> None:
        """Write r's status through the engine when it changed (the reservation controller's UpdateStatus)."""
        status = status_of(r)
        if self._written.get(r.uid) == status:
            return
        self._written[r.uid] = status
        handle.update_object_status(KIND_RESERVATION, r.name, status)

    def _forget(self, r: Reservation, handle: Any) -> None:
        """The Reservation was deleted: what it held is released and it is forgotten."""
        if handle.is_placeholder(r.uid):
            handle.remove_placeholder(r.uid)
        r.phase = FAILED  # gone: unindexed
        self._index(r)
        self.reservations.pop(r.uid, None)
        self._shared.discard(r.uid)
        self._written.pop(r.uid, None)
        log.info("reservation deleted", reservation=r.name, node=r.node_name or None)

    def _on_object(self, handle: Any, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """A Reservation added, changed or deleted after startup (``handle.watch_objects``): a new one is
        admitted as at startup, a deleted (or terminating) one forgotten; a known one's other changes (its
        status written back, spec edits) change nothing (Koordinator's spec is fixed once scheduled)."""
        obj = new if new is not None else old
        meta = (obj or {}).get("metadata") or {}
        name = str(meta.get("name") or key)
        uid = str(meta.get("uid") or f"reservation-{name}")
        known = self.reservations.get(uid)
        if new is None or meta.get("deletionTimestamp"):
            if known is not None:
                self._forget(known, handle)
            return
        if known is not None:
            st = new.get("status") or {}
            if (known.phase == PENDING and not handle.is_placeholder(uid) and st.get("nodeName")
                    and st.get("phase") in (AVAILABLE, WAITING)):
                # another scheduler placed it (not ours to schedule): now it holds its node here too
                self._forget(known, handle)
            else:
                return
        try:
            r = reservation_from_manifest(new)
        except ManifestError as e:
            log.error("ignoring a Reservation the plugin cannot read", reservation=name, error=str(e))
            return
        for other in [x for x in self.reservations.values() if x.name == r.name]:  # deleted and recreated
            self._forget(other, handle)
        self._admit(r, handle)
    def _tick(self, handle: Any) -> None:
        """Expire what is due and give back the shares of owners that went away (the reservation
        controller's sync), cheaply when nothing changed."""
        now = handle.now()
        heap = self._expiry
        while heap and heap[0][0] <= now:
            _, uid = heapq.heappop(heap)
            r = self.reservations.get(uid)
            if r is not None:
                self._expire(r, handle)
        cluster = handle.cluster
        gen = cluster.free_generation
        if gen == self._free_gen:
            return
        self._free_gen = gen
        for uid in self._shared:
            r = self.reservations[uid]
            if not r.current_owners or r.phase != AVAILABLE:
                continue
            gone = [uid for uid in r.current_owners
                    if (p := cluster.pod(uid)) is None or p.is_terminal or p.node_name != r.node_name]
            if not gone:
                continue
            for uid in gone:
                del r.current_owners[uid]
                for res, v in r.owner_requests.pop(uid, {}).items():
                    r.allocated[res] = max(r.allocated.get(res, 0) - v, 0)
            r.allocated = {k: v for k, v in r.allocated.items() if v}
            self._hold(r, handle)
            self._write_status(r, handle)

    # -- lifecycle ----------------------------------------------------------------------------------
    @hookimpl
    def startup(self, handle: Any) -> None:
        self.reservations.clear()
        self._on_node.clear()
        self._indexed_at.clear()
        self._by_owner_key.clear()
        self._unindexed.clear()
        self._shared.clear()
        self._expiry.clear()
        self._written.clear()
        if hasattr(handle, "watch_objects"):
            handle.watch_objects(KIND_RESERVATION, lambda key, old, new: self._on_object(handle, key, old, new))
        objs = handle.cluster.objects_of(KIND_RESERVATION)
        if not objs:
            return
        parsed = [(reservation_from_manifest(o), o) for _, o in sorted(objs.items())]
        for r, obj in parsed:
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            self._admit(r, handle)

    def _admit(self, r: Reservation, handle: Any) -> None:
        """Take a Reservation in (at startup, or when it appears): a terminal one is kept for the report, an
        expired one fails, one Available on a node is placed there (its owners re-read from the pods), a
        Pending one is queued as a reserve pod. Its status is written if that changed it."""
        now = handle.now()
        cluster = handle.cluster
        self.reservations[r.uid] = r
        if not r.allocate_once:
            self._shared.add(r.uid)
        self._written[r.uid] = status_of(r)  # what the object carries
        if r.is_terminal:
            return
        when = r.expiry(now)
        if when is not None and when <= now:
            self._expire(r, handle)
            return
        if when is not None:
            heapq.heappush(self._expiry, (when, r.uid))
            handle.clock.call_at(when, lambda r=r: self._expire(r, handle))
        if r.node_name and r.phase in (AVAILABLE, WAITING):
            if cluster.node(r.node_name) is None:  # the controller expires it (missingNode)
                self._expire(r, handle)
                return
            if not r.allocatable:
                r.allocatable = dict(r.reserve_pod.requests)
            self._sync_owners(r, cluster)
            if r.allocate_once and r.current_owners:
                r.phase = SUCCEEDED
                r.set_condition("Ready", "False", "Succeeded", _now_str(now))
                self._write_status(r, handle)
                return
            self._index(r)
            self._hold(r, handle)
        else:
            r.phase, r.node_name = PENDING, ""
            mine = getattr(handle, "scheduler_name", None)
            if mine is not None and r.reserve_pod.scheduler_name != mine:
                # isResponsibleForReservation: another scheduler places it (its template's schedulerName)
                return
            handle.add_placeholder(r.reserve_pod, on_unschedulable=lambda _p, st, r=r: self._unschedulable(r, st, handle))
        self._write_status(r, handle)

    def _unschedulable(self, r: Reservation, st: Status, handle: Any) -> None:
        """SetReservationUnschedulable: the reserve pod failed a cycle; the Reservation stays Pending (it is
        tried again) with Scheduled False, Unschedulable and the scheduler's message."""
        if self.reservations.get(r.uid) is not r or r.phase != PENDING:
            return
        msg = st.message or ""
        if any(c.get("type") == "Scheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               and c.get("message") == msg for c in r.conditions):
            return  # told already: each retry does not write again
        r.set_condition("Scheduled", "False", "Unschedulable", _now_str(handle.now()), st.message or "")
        self._write_status(r, handle)

    def _sync_owners(self, r: Reservation, cluster: Any) -> None:
        """The controller's syncStatus: owners are the pods on its node whose reservation-allocated names
        its uid; allocated is their requests, masked to what it reserves (the status read is replaced)."""
        owners: dict[str, dict[str, str]] = {}
        reqs: dict[str, dict[str, int]] = {}
        names = r.resource_names
        for p in cluster.pods_on(r.node_name):
            raw = p.annotations.get(ANNOTATION_RESERVATION_ALLOCATED)
            if not raw or p.is_terminal:
                continue
            try:
                ref = json.loads(raw)
            except ValueError:
                continue
            if isinstance(ref, dict) and ref.get("uid") == r.uid:
                owners[p.uid] = {"namespace": p.namespace, "name": p.name, "uid": p.uid}
                reqs[p.uid] = _masked(p.requests, names)
        alloc: dict[str, int] = {}
        for q in reqs.values():
            for k, v in q.items():
                alloc[k] = alloc.get(k, 0) + v
        r.current_owners, r.owner_requests, r.allocated = owners, reqs, alloc

    # -- queueing hints ------------------------------------------------------------------------------
    @hookimpl
    def events_to_register(self, handle: Any) -> list[ClusterEventWithHint]:
        Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP

        def placed(pod: Any, old: Any, new: Any) -> QueueingHint:
            r = self.reservations.get(getattr(new, "uid", ""))
            if r is None:
                return SKIP
            return Q if is_reservation_ignored(pod) or r.matches_owner(pod) else SKIP

        return [ClusterEventWithHint(ASSIGNED_POD_ADD, placed), ClusterEventWithHint(ASSIGNED_POD_DELETE),
                ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE),
                ClusterEventWithHint(_EVENT_RESERVATION)]

    # -- pre_filter: which reservations the pod may use (BeforePreFilter + PreFilter) ------------------
    @hookimpl
    def pre_filter(self, pod: Any, state: CycleState, handle: Any) -> Any:
        if not self.reservations:
            return Status.skip()
        self._tick(handle)
        r = self.reservations.get(pod.uid)
        if r is not None and handle.is_placeholder(pod.uid):  # a reserve pod
            if r.is_terminal:
                return Status.unresolvable(ERR_INACTIVE)
            node = r.reserve_pod.annotations.get("scheduling.koordinator.sh/reservation-node")
            if node:
                return PreFilterResult(frozenset({node}))
            return None
        affinity = reservation_affinity(pod)
        ignored = is_reservation_ignored(pod)
        cluster = handle.cluster
        matched: dict[str, list[Reservation]] = {}
        for res in self._candidates(pod, ignored):
            if not res.is_available or (res.allocate_once and res.current_owners):
                continue
            if not ignored and not self._usable(res, pod, affinity, cluster):
                continue
            matched.setdefault(res.node_name, []).append(res)
        if not matched:  # most pods: nothing to restore, filter or score
            if affinity is not None:
                return Status.unresolvable(ERR_AFFINITY)
            return Status.skip()
        by_index = {i: rs for name, rs in matched.items() if (i := cluster.node_index(name)) is not None}
        mask = np.zeros(cluster.num_nodes, dtype=bool)
        mask[list(by_index)] = True
        state[STATE] = _CycleData(matched, affinity, ignored, by_index, mask)
        for node_name, usable in matched.items():
            vec = None
            for res in usable:
                v = cluster.request_vector(cluster.pod(res.uid) or res.reserve_pod)
                vec = v.copy() if vec is None else vec + v
            if vec is not None:
                handle.restore_requests(state, node_name, vec)
        if affinity is not None:
            return PreFilterResult(frozenset(matched))
        return None

    @staticmethod
    def _usable(res: Reservation, pod: Any, affinity: ReservationAffinity | None, cluster: Any) -> bool:
        """checkReservationMatchedOrIgnored for a pod that does not ignore reservations: its owners, then
        the affinity's name (alone, if given), unschedulable, taints and selectors."""
        if not res.matches_owner(pod):
            return False
        if affinity is not None and affinity.name:
            return affinity.name == res.name
        if res.unschedulable and not (affinity is not None and affinity.tolerates_unschedulable()):
            return False
        # a reservation's taints bind only pods with a reservation affinity (FindMatchingUntoleratedTaint
        # of a nil affinity tolerates everything)
        if res.taints and affinity is not None and affinity.untolerated_taint(res.taints) is not None:
            return False
        if affinity is not None:
            view = cluster.node(res.node_name)
            if view is None or not affinity.matches(res, view.labels):
                return False
        return True

    # -- filter ----------------------------------------------------------------------------------------
    @hookimpl
    def filter(self, pod: Any, nodes: Any, state: CycleState, handle: Any) -> Any:
        r = self.reservations.get(pod.uid)
        if r is not None and handle.is_placeholder(pod.uid):
            return self._filter_reserve_pod(r, nodes)
        data = state.get(STATE)
        if data is None:
            return None
        out: dict[str, Any] = {}
        cluster = nodes.cluster
        views = cluster.views
        hit = data.mask[nodes.idx]
        if data.affinity is not None and not hit.all():  # (pre_filter narrowed the nodes to these already)
            out.update({views[int(i)].name: Status.unresolvable(ERR_AFFINITY) for i in nodes.idx[~hit]})
        if data.ignored:
            return out or None  # everything on the node was restored: node_resources_fit decides
        for gi in nodes.idx[hit].tolist():
            v = views[gi]
            st = self._filter_with_reservations(pod, v, data.by_index[gi], data, cluster)
            if st is not None:
                out[v.name] = st
        return out or None

    def _filter_reserve_pod(self, r: Reservation, nodes: Any) -> Any:
        node = r.reserve_pod.annotations.get("scheduling.koordinator.sh/reservation-node")
        out: dict[str, Any] = {}
        if node:
            names = nodes.names
            out.update({n: Status.unresolvable(ERR_NODE_NOT_MATCH) for n in names if n != node})
            views = [v for v in nodes if v.name == node]
        else:
            cluster = nodes.cluster
            mask = np.zeros(cluster.num_nodes, dtype=bool)
            mask[[i for n in self._on_node if (i := cluster.node_index(n)) is not None]] = True
            views = [cluster.views[i] for i in nodes.idx[mask[nodes.idx]].tolist()]
        for v in views:
            # ReservationAllocatePolicyDefault cannot coexist with other allocate policies on a node
            for other in self._on_node.get(v.name, {}).values():
                mine, theirs = r.allocate_policy, other.allocate_policy
                if (mine == POLICY_DEFAULT or theirs == POLICY_DEFAULT) and mine != theirs:
                    out[v.name] = Status.unresolvable(ERR_POLICY_CONFLICT)
                    break
        return out or None

    @staticmethod
    def _free_without(v: Any, rs: list[Reservation], cluster: Any) -> dict[str, int]:
        """The node's free resources without what the restored reservations ``rs`` hold (inside the cycle's
        filters and scores they count as free). Their reserve pods do not count against the node's pod
        number (fitsNode: ``allocatedPods - matchedOrIgnored + 1``)."""
        alloc, req = cluster.allocatable[v.index], cluster.requested[v.index]
        held: dict[str, int] = {}
        for res in rs:
            for k, x in res.remaining.items():
                if k != "pods":
                    held[k] = held.get(k, 0) + x
        return {name: int(alloc[i] - req[i]) - held.get(name, 0) for i, name in enumerate(cluster.resources)}

    def _filter_with_reservations(self, pod: Any, v: Any, rs: list[Reservation], data: _CycleData,
                                  cluster: Any, candidates: list[Reservation] | None = None,
                                  required: bool = False) -> Status | None:
        """filterWithReservations: node free + one reservation's remainder must hold the pod; a
        Restricted reservation's own resources must hold it on their own. ``rs``: the reservations
        restored on the node; ``candidates``: those to try (default all); ``required``: the pod must
        allocate from one of them (a reservation affinity, a nomination)."""
        free = self._free_without(v, rs, cluster)
        requests = {k: x for k, x in pod.requests.items() if x and k != "pods"}
        pod_names = set(requests)
        by_node: set[str] = set()
        by_reservation: list[str] = []
        name = data.affinity.name if data.affinity is not None else ""
        has_affinity = data.affinity is not None
        required = required or has_affinity
        for res in rs if candidates is None else candidates:
            if not has_affinity and not pod_names & set(res.resource_names):
                continue
            if name and name != res.name:
                continue
            rem = res.remaining
            short = [k for k, x in requests.items() if x > free.get(k, 0) + rem.get(k, 0)]
            if free.get("pods", 0) < 1:
                short.append("pods")
            by_node.update(short)
            reasons = []
            if res.allocate_policy == POLICY_RESTRICTED:
                reasons = self._fits_reservation(requests, res, detailed=bool(name))
                by_reservation += reasons
            if not short and not reasons:
                return None
        if required:
            reasons = [f"Insufficient {k} by node" for k in sorted(by_node)] + by_reservation
            return Status.unschedulable(*(reasons or [ERR_NO_RESERVATION_FITS]))
        if by_node:
            return Status.unschedulable(*(f"Insufficient {k} by node" for k in sorted(by_node)))
        # the node alone, without any reservation's remainder
        short = sorted(k for k, x in requests.items() if x > free.get(k, 0))
        if free.get("pods", 0) < 1:
            short.append("pods")
        if short:
            return Status.unschedulable(*(f"Insufficient {k} by node" for k in short))
        return None

    @staticmethod
    def _fits_reservation(requests: Mapping[str, int], r: Reservation, *, detailed: bool) -> list[str]:
        """fitsReservation: within a Restricted reservation's restricted resources, what it has left."""
        out = []
        allocatable = r.requests
        if "pods" in allocatable and len(r.current_owners) + 1 > allocatable["pods"]:
            out.append(RESERVATION_REASON_PREFIX + (
                f"Too many pods, requested: 1, used: {len(r.current_owners)}, capacity: {allocatable['pods']}"
                if detailed else "Too many pods"))
        for k in r.restricted:
            want = requests.get(k, 0)
            if not want:
                continue
            cap = allocatable.get(k, 0)
            used = r.allocated.get(k, 0)
            if want <= cap - used:
                continue
            out.append(RESERVATION_REASON_PREFIX + (
                f"Insufficient {k}, requested: {want}, used: {used}, capacity: {cap}" if detailed
                else f"Insufficient {k}"))
        return out

    # -- scoring -----------------------------------------------------------------------------------
    @hookimpl
    def pre_score(self, pod: Any, nodes: Any, state: CycleState, handle: Any) -> Any:
        if not self.reservations:  # the common case: nothing to do, as fast as possible
            return Status.skip()
        data = state.get(STATE)
        if data is None or data.ignored or not data.matched:
            return Status.skip()
        best = 0
        views = nodes.cluster.views
        for gi in nodes.idx[data.mask[nodes.idx]].tolist():
            v, rs = views[gi], data.by_index[gi]
            order = min((r.order for r in rs if r.order), default=0)
            if order and (not best or order < best):
                best, data.preferred_node = order, v.name
            data.nominated[v.name] = self._nominate(pod, v, rs, data, handle.cluster)
        return None

    def _nominate(self, pod: Any, v: Any, rs: list[Reservation], data: _CycleData, cluster: Any) -> Reservation | None:
        """NominateReservation: among the usable reservations on the node that the pod fits, the lowest
        order, else the best ScoreReservation (ties: name)."""
        if len(rs) == 1 and data.affinity is not None:
            return rs[0]
        fits = [r for r in rs
                if self._filter_with_reservations(pod, v, rs, data, cluster, candidates=[r], required=True) is None]
        if not fits:
            return None
        if len(fits) == 1:
            return fits[0]
        ordered = [r for r in fits if r.order]
        if ordered:
            return min(ordered, key=lambda r: (r.order, r.name))
        return max(fits, key=lambda r: (score_reservation(pod.requests, r), r.name))

    @hookimpl
    def score(self, pod: Any, nodes: Any, state: CycleState) -> Any:
        data = state.get(STATE)
        if data is None:
            return None
        out = np.zeros(len(nodes), dtype=np.int64)
        views = nodes.cluster.views
        idx = nodes.idx
        for j in np.flatnonzero(data.mask[idx]).tolist():
            name = views[int(idx[j])].name
            if name == data.preferred_node:
                out[j] = MOST_PREFERRED_SCORE
                continue
            r = data.nominated.get(name)
            if r is not None:
                out[j] = score_reservation(pod.requests, r)
        return out

    @hookimpl
    def normalize_score(self, scores: np.ndarray) -> np.ndarray:
        return normalize(scores)

    # -- reserve / unreserve (the reservation cache's assume / forget) -------------------------------
    @hookimpl
    def reserve(self, pod: Any, node: Any, state: CycleState, handle: Any) -> Any:
        if not self.reservations:  # the common case: nothing to do, as fast as possible
            return None
        r = self.reservations.get(pod.uid)
        if r is not None and handle.is_placeholder(pod.uid):
            return None
        data = state.get(STATE)
        if data is None or data.ignored:
            return None
        rs = data.matched.get(node.name)
        if not rs:
            return Status.unschedulable(ERR_AFFINITY) if data.affinity is not None else None
        if node.name in data.nominated:
            chosen = data.nominated[node.name]
        else:  # a single feasible node: no scoring ran
            # the cycle's restoration is over: the node's requested now holds this pod and every reservation
            chosen = self._nominate_after(pod, node, rs, data, handle.cluster)
        if chosen is None:
            return Status.unschedulable(ERR_AFFINITY) if data.affinity is not None else None
        masked = _masked(pod.requests, chosen.resource_names)
        for k, x in masked.items():
            chosen.allocated[k] = chosen.allocated.get(k, 0) + x
        chosen.current_owners[pod.uid] = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
        chosen.owner_requests[pod.uid] = masked
        data.assumed = chosen
        self._hold(chosen, handle)
        return None

    def _nominate_after(self, pod: Any, node: Any, rs: list[Reservation], data: _CycleData, cluster: Any) -> Reservation | None:
        """Nominate on the assumed node: the pod is accounted there now, so take it off for the check."""
        vec = cluster.request_vector(pod)
        cluster.add_requested(node.index, -vec)
        held = None
        for r in rs:
            p = cluster.pod(r.uid)
            if p is not None:
                w = cluster.request_vector(p)
                held = w.copy() if held is None else held + w
        if held is not None:
            cluster.add_requested(node.index, -held)
        try:
            return self._nominate(pod, node, rs, data, cluster)
        finally:
            cluster.add_requested(node.index, vec)
            if held is not None:
                cluster.add_requested(node.index, held)

    @hookimpl
    def unreserve(self, pod: Any, state: CycleState, handle: Any) -> None:
        if not self.reservations:  # the common case: nothing to do, as fast as possible
            return None
        data = state.get(STATE)
        if data is None or data.assumed is None:
            return
        r, data.assumed = data.assumed, None
        for k, x in r.owner_requests.pop(pod.uid, {}).items():
            r.allocated[k] = max(r.allocated.get(k, 0) - x, 0)
        r.allocated = {k: x for k, x in r.allocated.items() if x}
        r.current_owners.pop(pod.uid, None)
        if not r.is_terminal and handle.is_placeholder(r.uid) and handle.cluster.pod(r.uid) is not None:
            self._hold(r, handle)

    # -- binding ----------------------------------------------------------------------------------------
    @hookimpl
    def pre_bind(self, pod: Any, state: CycleState, handle: Any) -> Any:
        if not self.reservations:  # the common case: nothing to do, as fast as possible
            return None
        if handle.is_placeholder(pod.uid) or is_reservation_ignored(pod):
            return None
        data = state.get(STATE)
        if data is None or data.assumed is None:
            if data is not None and data.affinity is not None:
                return Status.unschedulable(ERR_AFFINITY)
            return None
        r = data.assumed
        return {ANNOTATION_RESERVATION_ALLOCATED: json.dumps({"name": r.name, "uid": r.uid}, separators=(",", ":"))}

    @hookimpl
    def bind(self, pod: Any, node: Any, handle: Any) -> Any:
        """The reserve pod's binding: the Reservation becomes Available on the node (SetReservationAvailable);
        nothing is bound. Only reserve pods reach here (the kernel calls a placeholder's own plugin alone;
        other pods were bound by default_binder before)."""
        r = self.reservations.get(pod.uid)
        if r is None or not handle.is_placeholder(pod.uid):
            return None
        if r.phase == FAILED:
            return Status.error(ERR_INACTIVE)
        now = _now_str(handle.now())
        r.allocatable = dict(r.reserve_pod.requests)
        r.node_name, r.phase = node.name, AVAILABLE
        r.set_condition("Scheduled", "True", "Scheduled", now)
        r.set_condition("Ready", "True", "Available", now)
        self._index(r)
        self._write_status(r, handle)
        handle.events.eventf(f"{KIND_RESERVATION} {r.name}", "Normal", "Scheduled",
                             f"Successfully assigned {r.name} to {node.name}")
        return True

    @hookimpl
    def post_bind(self, pod: Any, state: CycleState, handle: Any) -> None:
        if not self.reservations:  # the common case: nothing to do, as fast as possible
            return None
        data = state.get(STATE)
        if data is None or data.assumed is None:
            return
        r = data.assumed
        if r.allocate_once and not r.is_terminal:
            self._succeed(r, handle)
        else:
            self._write_status(r, handle)

    # -- output -----------------------------------------------------------------------------------------
    @hookimpl
    def report(self, handle: Any) -> dict[str, Any] | None:
        if not self.reservations:
            return None
        self._tick(handle)
        rows = []
        for r in sorted(self.reservations.values(), key=lambda r: r.name):
            rows.append({"name": r.name, "phase": r.phase, "node": r.node_name or None,
                         "allocatable": {k: format_quantity(k, v) for k, v in sorted(r.allocatable.items()) if v},
                         "allocated": {k: format_quantity(k, v) for k, v in sorted(r.allocated.items()) if v},
                         "owners": sorted(f"{o['namespace']}/{o['name']}" for o in r.current_owners.values())})
        return {"reservations": rows}


def status_of(r: Reservation) -> dict[str, Any]:
    """The Reservation's ``status`` as the API carries it (ReservationStatus; empty fields omitted,
    quantities as Kubernetes quantity strings, currentOwners as object references)."""
    st: dict[str, Any] = {"phase": r.phase}
    if r.conditions:
        st["conditions"] = [dict(c) for c in r.conditions]
    if r.node_name:
        st["nodeName"] = r.node_name
    if r.allocatable:
        st["allocatable"] = {k: format_quantity(k, v) for k, v in sorted(r.allocatable.items())}
    if any(r.allocated.values()):
        st["allocated"] = {k: format_quantity(k, v) for k, v in sorted(r.allocated.items()) if v}
    if r.current_owners:
        st["currentOwners"] = [dict(o) for _, o in sorted(r.current_owners.items(),
                                                          key=lambda kv: (kv[1].get("namespace", ""),
                                                                          kv[1].get("name", ""), kv[0]))]
    return st


def owner_keys(r: Reservation) -> list[tuple[str, str]] | None:
    """One key per owner that a pod must have to match it (its uid, name, first matchLabels pair, or
    controller uid/name), for the owner index; None when an owner has none (it may match any pod)."""
    keys: list[tuple[str, str]] = []
    for o in r.owners:
        if o.object and o.object.get("uid"):
            keys.append(("uid", o.object["uid"]))
        elif o.object and o.object.get("name"):
            keys.append(("name", o.object["name"]))
        elif o.label_selector and o.label_selector.get("matchLabels"):
            k, v = next(iter(o.label_selector["matchLabels"].items()))
            keys.append(("label", f"{k}={v}"))
        elif o.controller and o.controller.get("uid"):
            keys.append(("ctl-uid", o.controller["uid"]))
        elif o.controller and o.controller.get("name"):
            keys.append(("ctl-name", o.controller["name"]))
        else:
            return None
    return keys


def pod_keys(pod: Any) -> list[tuple[str, str]]:
    """The owner-index keys a pod has (see :func:`owner_keys`)."""
    keys = [("uid", pod.uid), ("name", pod.name)]
    keys += [("label", f"{k}={v}") for k, v in pod.labels.items()]
    for ref in (((pod.raw or {}).get("metadata") or {}).get("ownerReferences")) or []:
        if isinstance(ref, Mapping):
            if ref.get("uid"):
                keys.append(("ctl-uid", str(ref["uid"])))
            if ref.get("name"):
                keys.append(("ctl-name", str(ref["name"])))
    return keys


def score_reservation(requests: Mapping[str, int], r: Reservation) -> int:
    """ScoreReservation: MostAllocated of (the pod's requests + what is allocated) over the reservation's
    allocatable, each resource weighted 1, a resource overflowing scoring 0."""
    cap = {k: v for k, v in r.requests.items() if v}
    if not cap:
        return 0
    s = 0
    for k, c in cap.items():
        want = requests.get(k, 0) + r.allocated.get(k, 0)
        if want <= c:
            s += 100 * want // c
    return s // len(cap)
