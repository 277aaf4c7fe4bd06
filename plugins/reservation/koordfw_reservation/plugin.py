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

import json
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import structlog

from koordfw import (
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    Handle,
    NodeBatch,
    NodeView,
    Pod,
    PreFilterResult,
    QueueingHint,
    StateKey,
    Status,
    format_quantity,
    hookimpl,
    normalize,
)
from koordfw.contract import BindResult, FilterBatchResult, PreBindResult, PreFilterReturn, ScoreResult, StatusResult
from koordfw.extension import ANNOTATION_RESERVATION_ALLOCATED, KIND_RESERVATION
from koordfw.hints import ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE

from .api import (
    AVAILABLE,
    FAILED,
    POLICY_DEFAULT,
    POLICY_RESTRICTED,
    Reservation,
    ReservationAffinity,
    is_reservation_ignored,
    reservation_affinity,
)
from .controller import ReservationController, masked_requests, rfc3339

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


class ReservationPlugin:
    """The scheduling side: pods using reservations (pre_filter .. post_bind) and the reserve pods'
    binding; the lifecycle is the :class:`~.controller.ReservationController`'s."""

    def __init__(self) -> None:
        self.ctl = ReservationController()

    @property
    def reservations(self) -> dict[str, Reservation]:
        """The reservations by uid (the controller's)."""
        return self.ctl.reservations

    @hookimpl
    def startup(self, handle: Handle) -> None:
        self.ctl.start(handle)

    # -- queueing hints ------------------------------------------------------------------------------
    @hookimpl
    def events_to_register(self, handle: Handle) -> list[ClusterEventWithHint]:
        Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP

        def placed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            r = self.ctl.reservations.get(getattr(new, "uid", ""))
            if r is None:
                return SKIP
            return Q if is_reservation_ignored(pod) or r.matches_owner(pod) else SKIP

        return [ClusterEventWithHint(ASSIGNED_POD_ADD, placed), ClusterEventWithHint(ASSIGNED_POD_DELETE),
                ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE),
                ClusterEventWithHint(_EVENT_RESERVATION)]

    # -- pre_filter: which reservations the pod may use (BeforePreFilter + PreFilter) ------------------
    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> PreFilterReturn:
        if not self.ctl.reservations:
            return Status.skip()
        self.ctl.tick(handle)
        r = self.ctl.reservations.get(pod.uid)
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
        for res in self.ctl.candidates(pod, ignored):
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
    def _usable(res: Reservation, pod: Pod, affinity: ReservationAffinity | None, cluster: Any) -> bool:
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
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState, handle: Handle) -> FilterBatchResult:
        r = self.ctl.reservations.get(pod.uid)
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
            mask[[i for n in self.ctl.on_node if (i := cluster.node_index(n)) is not None]] = True
            views = [cluster.views[i] for i in nodes.idx[mask[nodes.idx]].tolist()]
        for v in views:
            # ReservationAllocatePolicyDefault cannot coexist with other allocate policies on a node
            for other in self.ctl.on_node.get(v.name, {}).values():
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

    def _filter_with_reservations(self, pod: Pod, v: Any, rs: list[Reservation], data: _CycleData,
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
    def pre_score(self, pod: Pod, nodes: NodeBatch, state: CycleState, handle: Handle) -> StatusResult:
        if not self.ctl.reservations:  # the common case: nothing to do, as fast as possible
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

    def _nominate(self, pod: Pod, v: Any, rs: list[Reservation], data: _CycleData, cluster: Any) -> Reservation | None:
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
    def score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> ScoreResult:
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
    def reserve(self, pod: Pod, node: NodeView, state: CycleState, handle: Handle) -> StatusResult:
        if not self.ctl.reservations:  # the common case: nothing to do, as fast as possible
            return None
        r = self.ctl.reservations.get(pod.uid)
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
            chosen = self._nominate_after(pod, node, rs, data, handle)
        if chosen is None:
            return Status.unschedulable(ERR_AFFINITY) if data.affinity is not None else None
        masked = masked_requests(pod.requests, chosen.resource_names)
        for k, x in masked.items():
            chosen.allocated[k] = chosen.allocated.get(k, 0) + x
        chosen.current_owners[pod.uid] = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
        chosen.owner_requests[pod.uid] = masked
        data.assumed = chosen
        self.ctl.hold(chosen, handle)
        return None

    def _nominate_after(self, pod: Pod, node: NodeView, rs: list[Reservation], data: _CycleData,
                        handle: Handle) -> Reservation | None:
        """Nominate on the assumed node: the pod is accounted there now, and the reservations' reserve
        pods hold their requests, so count both as free for the check (the handle's what-if)."""
        cluster = handle.cluster
        freed = cluster.request_vector(pod)
        for r in rs:
            p = cluster.pod(r.uid)
            if p is not None:
                freed = freed + cluster.request_vector(p)
        with handle.with_requests_freed(node.name, freed):
            return self._nominate(pod, node, rs, data, cluster)

    @hookimpl
    def unreserve(self, pod: Pod, state: CycleState, handle: Handle) -> None:
        if not self.ctl.reservations:  # the common case: nothing to do, as fast as possible
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
            self.ctl.hold(r, handle)

    # -- binding ----------------------------------------------------------------------------------------
    @hookimpl
    def pre_bind(self, pod: Pod, state: CycleState, handle: Handle) -> PreBindResult:
        if not self.ctl.reservations:  # the common case: nothing to do, as fast as possible
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
    def bind(self, pod: Pod, node: NodeView, handle: Handle) -> BindResult:
        """The reserve pod's binding: the Reservation becomes Available on the node (SetReservationAvailable);
        nothing is bound. Only reserve pods reach here (the kernel calls a placeholder's own plugin alone;
        other pods were bound by default_binder before)."""
        r = self.ctl.reservations.get(pod.uid)
        if r is None or not handle.is_placeholder(pod.uid):
            return None
        if r.phase == FAILED:
            return Status.error(ERR_INACTIVE)
        now = rfc3339(handle.now())
        r.allocatable = dict(r.reserve_pod.requests)
        r.node_name, r.phase = node.name, AVAILABLE
        r.set_condition("Scheduled", "True", "Scheduled", now)
        r.set_condition("Ready", "True", "Available", now)
        self.ctl.index(r)
        self.ctl.write_status(r, handle)
        handle.events.eventf(f"{KIND_RESERVATION} {r.name}", "Normal", "Scheduled",
                             f"Successfully assigned {r.name} to {node.name}")
        return True

    @hookimpl
    def post_bind(self, pod: Pod, state: CycleState, handle: Handle) -> None:
        if not self.ctl.reservations:  # the common case: nothing to do, as fast as possible
            return None
        data = state.get(STATE)
        if data is None or data.assumed is None:
            return
        r = data.assumed
        if r.allocate_once and not r.is_terminal:
            self.ctl.succeed(r, handle)
        else:
            self.ctl.write_status(r, handle)

    # -- output -----------------------------------------------------------------------------------------
    @hookimpl
    def report(self, handle: Handle) -> dict[str, Any] | None:
        if not self.ctl.reservations:
            return None
        self.ctl.tick(handle)
        rows = []
        for r in sorted(self.ctl.reservations.values(), key=lambda r: r.name):
            rows.append({"name": r.name, "phase": r.phase, "node": r.node_name or None,
                         "allocatable": {k: format_quantity(k, v) for k, v in sorted(r.allocatable.items()) if v},
                         "allocated": {k: format_quantity(k, v) for k, v in sorted(r.allocated.items()) if v},
                         "owners": sorted(f"{o['namespace']}/{o['name']}" for o in r.current_owners.values())})
        return {"reservations": rows}


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
