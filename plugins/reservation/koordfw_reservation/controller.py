"""The reservation controller (Koordinator keeps it apart from the scheduler plugin, in
``pkg/scheduler/frameworkext/reservation`` and the reservation controller): what Reservations exist, which
are Available on which node (indexed by owner), their reserve pods (placeholders holding what a
reservation has not allocated), expiry, owners going away, and the status written back through the
handle (``handle.update_object_status``) only when it changed."""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import ManifestError, Status, format_quantity
from koordfw.extension import ANNOTATION_RESERVATION_ALLOCATED, KIND_RESERVATION

from .api import AVAILABLE, FAILED, PENDING, SUCCEEDED, WAITING, Reservation, reservation_from_manifest

log = structlog.get_logger("koordfw.reservation")


def rfc3339(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def masked_requests(requests: Mapping[str, int], names: list[str]) -> dict[str, int]:
    return {r: v for r, v in requests.items() if r in names and v}


class ReservationController:
    """The reservations by uid, their reserve pods, owners, expiry heap and the status written back:
    Koordinator's reservation controller, driven by the scheduler plugin through its handle."""

    def __init__(self) -> None:
        self.reservations: dict[str, Reservation] = {}
        #: node name → Available reservations there (by uid)
        self.on_node: dict[str, dict[str, Reservation]] = {}
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
    def index(self, r: Reservation) -> None:
        """Keep ``on_node`` (the reservations active on each node) up to date for ``r``."""
        at = self._indexed_at.pop(r.uid, None)
        if at is not None:
            rs = self.on_node.get(at)
            if rs is not None:
                rs.pop(r.uid, None)
                if not rs:
                    del self.on_node[at]
            self._unindexed.discard(r.uid)
            for key in owner_keys(r) or ():
                uids = self._by_owner_key.get(key)
                if uids is not None:
                    uids.discard(r.uid)
                    if not uids:
                        del self._by_owner_key[key]
        if r.node_name and r.phase in (AVAILABLE, WAITING):
            self.on_node.setdefault(r.node_name, {})[r.uid] = r
            self._indexed_at[r.uid] = r.node_name
            keys = owner_keys(r)
            if keys is None:
                self._unindexed.add(r.uid)
            else:
                for key in keys:
                    self._by_owner_key.setdefault(key, set()).add(r.uid)

    def candidates(self, pod: Any, ignored: bool) -> list[Reservation]:
        """The active reservations whose owners the pod may match (all of them for a reservation-ignored pod),
        from the owner index; the full match is still to be made."""
        if ignored:
            return [r for rs in self.on_node.values() for r in rs.values()]
        uids = set(self._unindexed)
        index = self._by_owner_key
        if index:
            for key in pod_keys(pod):
                hit = index.get(key)
                if hit:
                    uids |= hit
        rs = self.reservations
        return [rs[u] for u in sorted(uids) if u in rs]

    def hold(self, r: Reservation, handle: Any) -> None:
        """Place (or resize) r's reserve pod on its node: it holds what r has not allocated."""
        pod = attrs.evolve(r.reserve_pod, node_name=r.node_name, requests=r.remaining, phase="Running")
        handle.add_placeholder(pod)

    def release(self, r: Reservation, handle: Any) -> None:
        handle.remove_placeholder(r.uid)
        self.index(r)

    def expire(self, r: Reservation, handle: Any) -> None:
        """SetReservationExpired: Failed, Ready False (Expired); what it held is released."""
        if r.is_terminal or self.reservations.get(r.uid) is not r:  # ended, or deleted meanwhile
            return
        r.phase = FAILED
        r.set_condition("Ready", "False", "Expired", rfc3339(handle.now()))
        self.release(r, handle)
        self.write_status(r, handle)
        log.info("reservation expired", reservation=r.name, node=r.node_name or None)

    def succeed(self, r: Reservation, handle: Any) -> None:
        """SetReservationSucceeded (allocateOnce consumed): the rest of what it held is released."""
        r.phase = SUCCEEDED
        r.set_condition("Ready", "False", "Succeeded", rfc3339(handle.now()))
        self.release(r, handle)
        self.write_status(r, handle)

    def write_status(self, r: Reservation, handle: Any) -> None:
        """Write r's status through the engine when it changed (the reservation controller's UpdateStatus)."""
        status = status_of(r)
        if self._written.get(r.uid) == status:
            return
        self._written[r.uid] = status
        handle.update_object_status(KIND_RESERVATION, r.name, status)

    def forget(self, r: Reservation, handle: Any) -> None:
        """The Reservation was deleted: what it held is released and it is forgotten."""
        if handle.is_placeholder(r.uid):
            handle.remove_placeholder(r.uid)
        r.phase = FAILED  # gone: unindexed
        self.index(r)
        self.reservations.pop(r.uid, None)
        self._shared.discard(r.uid)
        self._written.pop(r.uid, None)
        log.info("reservation deleted", reservation=r.name, node=r.node_name or None)

    def on_object(self, handle: Any, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
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
                self.forget(known, handle)
            return
        if known is not None:
            st = new.get("status") or {}
            if (known.phase == PENDING and not handle.is_placeholder(uid) and st.get("nodeName")
                    and st.get("phase") in (AVAILABLE, WAITING)):
                # another scheduler placed it (not ours to schedule): now it holds its node here too
                self.forget(known, handle)
            else:
                return
        try:
            r = reservation_from_manifest(new)
        except ManifestError as e:
            log.error("ignoring a Reservation the plugin cannot read", reservation=name, error=str(e))
            return
        for other in [x for x in self.reservations.values() if x.name == r.name]:  # deleted and recreated
            self.forget(other, handle)
        self.admit(r, handle)
    def tick(self, handle: Any) -> None:
        """Expire what is due and give back the shares of owners that went away (the reservation
        controller's sync), cheaply when nothing changed."""
        now = handle.now()
        heap = self._expiry
        while heap and heap[0][0] <= now:
            _, uid = heapq.heappop(heap)
            r = self.reservations.get(uid)
            if r is not None:
                self.expire(r, handle)
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
            self.hold(r, handle)
            self.write_status(r, handle)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self, handle: Any) -> None:
        """Forget everything and take in the Reservations the cluster holds; watch for later ones."""
        self.reservations.clear()
        self.on_node.clear()
        self._indexed_at.clear()
        self._by_owner_key.clear()
        self._unindexed.clear()
        self._shared.clear()
        self._expiry.clear()
        self._written.clear()
        if hasattr(handle, "watch_objects"):
            handle.watch_objects(KIND_RESERVATION, lambda key, old, new: self.on_object(handle, key, old, new))
        objs = handle.cluster.objects_of(KIND_RESERVATION)
        if not objs:
            return
        parsed = [(reservation_from_manifest(o), o) for _, o in sorted(objs.items())]
        for r, obj in parsed:
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            self.admit(r, handle)

    def admit(self, r: Reservation, handle: Any) -> None:
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
            self.expire(r, handle)
            return
        if when is not None:
            heapq.heappush(self._expiry, (when, r.uid))
            handle.clock.call_at(when, lambda r=r: self.expire(r, handle))
        if r.node_name and r.phase in (AVAILABLE, WAITING):
            if cluster.node(r.node_name) is None:  # the controller expires it (missingNode)
                self.expire(r, handle)
                return
            if not r.allocatable:
                r.allocatable = dict(r.reserve_pod.requests)
            self.sync_owners(r, cluster)
            if r.allocate_once and r.current_owners:
                r.phase = SUCCEEDED
                r.set_condition("Ready", "False", "Succeeded", rfc3339(now))
                self.write_status(r, handle)
                return
            self.index(r)
            self.hold(r, handle)
        else:
            r.phase, r.node_name = PENDING, ""
            mine = getattr(handle, "scheduler_name", None)
            if mine is not None and r.reserve_pod.scheduler_name != mine:
                # isResponsibleForReservation: another scheduler places it (its template's schedulerName)
                return
            handle.add_placeholder(r.reserve_pod, on_unschedulable=lambda _p, st, r=r: self.unschedulable(r, st, handle))
        self.write_status(r, handle)

    def unschedulable(self, r: Reservation, st: Status, handle: Any) -> None:
        """SetReservationUnschedulable: the reserve pod failed a cycle; the Reservation stays Pending (it is
        tried again) with Scheduled False, Unschedulable and the scheduler's message."""
        if self.reservations.get(r.uid) is not r or r.phase != PENDING:
            return
        msg = st.message or ""
        if any(c.get("type") == "Scheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               and c.get("message") == msg for c in r.conditions):
            return  # told already: each retry does not write again
        r.set_condition("Scheduled", "False", "Unschedulable", rfc3339(handle.now()), st.message or "")
        self.write_status(r, handle)

    def sync_owners(self, r: Reservation, cluster: Any) -> None:
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
                reqs[p.uid] = masked_requests(p.requests, names)
        alloc: dict[str, int] = {}
        for q in reqs.values():
            for k, v in q.items():
                alloc[k] = alloc.get(k, 0) + v
        r.current_owners, r.owner_requests, r.allocated = owners, reqs, alloc

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
