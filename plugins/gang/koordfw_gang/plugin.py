"""gang: Koordinator coscheduling (``pkg/scheduler/plugins/coscheduling``) on koordfw's hooks.

* ``pre_enqueue`` holds a gang's pods until every gang of its gang group has at least min-available
  children (a once-satisfied gang that was satisfied passes directly).
* ``pre_filter`` keeps the attempts of one gang group together: while a group's round has untried
  members in the active queue, pods of other gang groups are set aside and re-activated when the round
  ends (Koordinator's ``NextPod`` feeding). After a Strict member failed, the rest of the round fails
  fast with the cached reason.
* ``permit`` makes members wait (the gang's waiting time) until every gang of the group is valid for
  its match policy, then allows all waiting members at once.
* ``post_filter`` / ``unreserve``: in Strict mode a member's failure or timeout rejects every waiting
  member of the group, releasing their reservations; NonStrict keeps them. With ``enablePreemption`` a
  member's failure first preempts for the whole group (:mod:`koordfw_gang.preemption`, once per round).
* ``pre_bind`` writes ``bind-gang-group-id`` / ``bind-gang-member-count`` when several members were
  allowed together; ``post_bind`` marks the gang once-satisfied.
* ``queue_sort`` (used when the profile selects it for ``queueSort``) is Koordinator's ``Less``:
  priority, sub-priority (``koordinator.sh/priority``), the gang group's last schedule time (its first
  member's arrival, moved to the time of its last failed round), group id, gang id, then the pod; the
  members of a group stay together and, among equal priorities, the group waiting longest goes first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import (
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    Handle,
    Pod,
    PostFilterResult,
    QueueingHint,
    StateKey,
    Status,
    fit_error,
    hookimpl,
)
from koordfw.extension import LABEL_POD_PRIORITY
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE, POD_ADD, POD_DELETE

from .args import CoschedulingArgs
from .gang import (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED,
    ANNOTATION_BIND_GANG_MEMBER_COUNT,
    ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED,
    MODE_STRICT,
    Gang,
    GangDefinitionError,
    gang_id_of,
    is_crd_gang,
    spec_from_pod,
    spec_from_pod_group,
)
from .jobs import JobPreemption
from .pending import PendingJobs
from .room import RoomCheck

PLUGIN_NAME = "gang"
_SKIP_POST_FILTER: StateKey[bool] = StateKey("gang/skip-post-filter")


@attrs.define(eq=False)
class Round:
    """One scheduling attempt of a gang group: the members pending when it started, those tried so
    far, and the cached failure that makes the rest fail fast (Strict)."""

    group_id: str
    members: set[str]
    attempted: set[str] = attrs.field(factory=set)
    failed: str = ""
    #: the cluster as it was when a member last failed (see ``Coscheduling._fingerprint``)
    fail_key: tuple | None = None
    #: set once job-level preemption ran in this round (Koordinator's preemptionMessage)
    preempted: str = ""


def _sub_priority(pod: Any) -> int:
    """``extension.GetPodSubPriority``: the ``koordinator.sh/priority`` label, 0 when absent or unreadable."""
    raw = pod.labels.get(LABEL_POD_PRIORITY)
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        return 0


class Coscheduling:
    """The plugin. One instance per scheduler: it keeps Koordinator's gang cache."""

    def __init__(self, name: str) -> None:
        self._name = name
        #: pods bound since startup (post_bind), part of the failure fingerprint
        self._binds = 0
        self._gangs: dict[str, Gang] = {}
        self._pod_gang: dict[str, str] = {}
        self._arrival: dict[str, float] = {}
        self._crd: set[str] = set()
        #: gang -> the PodGroup object its spec was read from (held, so `is` tells a replaced object)
        self._pg_seen: dict[str, Any] = {}
        self._rounds: dict[str, Round] = {}
        self._active_group: str | None = None
        self._deferred: dict[str, None] = {}
        #: gang group -> the time its last round failed (Koordinator's GangGroupInfo.LastScheduleTime)
        self._group_time: dict[str, float] = {}
        #: pod uid -> (gang group id, member count) of the binding snapshot it is in (GetGangBindingInfo)
        self._binding: dict[str, tuple[str, int]] = {}
        #: gang groups allowed at Permit since their last rejection: a later member is allowed alone and the
        #: group's binding snapshot (AllowGangGroup's member set) stays
        self._allowed_groups: set[str] = set()
        self._room_check = RoomCheck()
        self._jobs = JobPreemption()
        #: why each job is pending (pending.py)
        self._pending = PendingJobs()

    # -- configuration / lifecycle -----------------------------------------------------------------
    @staticmethod
    @hookimpl
    def plugin_args() -> type[CoschedulingArgs]:
        return CoschedulingArgs

    @hookimpl
    def startup(self, handle: Handle) -> None:
        for pod in handle.cluster.all_pods():
            self._track(pod, handle)
            if pod.node_name and pod.creation_timestamp is not None:
                self._jobs.bound_at[pod.uid] = pod.creation_timestamp

    @hookimpl
    def events_to_register(self, handle: Handle) -> list[ClusterEventWithHint]:
        """What can make a pod this plugin rejected (its gang group could not be placed, or is not
        complete) schedulable: room freed or added (pods leaving, nodes added or changed), a member of
        its gang group arriving or leaving, and its PodGroup changing. The rest of the gang's own life (a round
        ending, a member deferred) re-activates pods explicitly."""

        def same_gang(pod: Any, old: Any, new: Any) -> QueueingHint:
            # a member of its gang or of another gang of its gang group (whose arrival can complete the
            # group that pre_enqueue waits for)
            other = new if new is not None else old
            if other is None:
                return QueueingHint.QUEUE
            mine, theirs = gang_id_of(pod), gang_id_of(other)
            if theirs == mine:
                return QueueingHint.QUEUE
            if theirs:
                for gid, peer in ((mine, theirs), (theirs, mine)):
                    g = self._gangs.get(gid)
                    if g is not None and g.spec is not None and peer in g.spec.groups:
                        return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP

        def room_on(pod: Any, node_name: str | None) -> QueueingHint:
            # the gang failed because a member found no room: only room that this member could use
            # helps it (room elsewhere did not change; nodes' other properties are not the gang's concern),
            # and only once the cluster could hold what the gang group still needs
            if not self._demand_may_fit(pod, handle):
                return QueueingHint.QUEUE_SKIP
            cluster = handle.cluster
            i = cluster.node_index(node_name) if node_name else None
            if i is None:
                return QueueingHint.QUEUE_SKIP if node_name else QueueingHint.QUEUE
            fits = cluster.has_room(i, cluster.request_vector(pod))
            return QueueingHint.QUEUE if fits else QueueingHint.QUEUE_SKIP

        def assigned_pod_left(pod: Any, old: Any, new: Any) -> QueueingHint:
            return room_on(pod, old.node_name if old is not None else None)

        def node_changed(pod: Any, old: Any, new: Any) -> QueueingHint:
            return room_on(pod, new.name if new is not None else None)

        def member_left_or_room(pod: Any, old: Any, new: Any) -> QueueingHint:
            # an unassigned pod leaving frees nothing, unless it is of this gang or held a nomination
            if old is None or old.nominated_node_name:
                return QueueingHint.QUEUE
            return same_gang(pod, old, new)

        def its_pod_group(pod: Any, old: Any, new: Any) -> QueueingHint:
            obj = new if new is not None else old
            meta = (obj or {}).get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            return QueueingHint.QUEUE if obj is None or key == gang_id_of(pod) else QueueingHint.QUEUE_SKIP

        return [ClusterEventWithHint(ASSIGNED_POD_DELETE, assigned_pod_left), ClusterEventWithHint(NODE_ADD, node_changed),
                ClusterEventWithHint(NODE_UPDATE, node_changed), ClusterEventWithHint(POD_ADD, same_gang),
                ClusterEventWithHint(POD_DELETE, member_left_or_room),
                ClusterEventWithHint(ClusterEvent("PodGroup", "*"), its_pod_group)]

    def _demand_may_fit(self, pod: Any, handle: Handle) -> bool:
        g = self._gangs.get(self._pod_gang.get(pod.uid) or "")
        return g is None or self._room_check.may_fit(g, self._gangs, pod, handle)

    # -- the gang cache --------------------------------------------------------------------------------
    def _track(self, pod: Any, handle: Handle) -> Gang | None:
        """Add ``pod`` to its gang (once); ``None`` for a pod without a gang."""
        gid = self._pod_gang.get(pod.uid)
        if gid is None:
            gid = gang_id_of(pod)
            self._pod_gang[pod.uid] = gid
            if gid:
                arrival = pod.creation_timestamp if pod.creation_timestamp is not None else handle.clock.now()
                self._arrival[pod.uid] = arrival
                g = self._gangs.get(gid)
                if g is None:
                    g = self._gangs[gid] = Gang(gid)
                if is_crd_gang(pod):
                    self._crd.add(gid)
                g.children[pod.uid] = pod
                if g.first_arrival is None or arrival < g.first_arrival:
                    g.first_arrival = arrival
                if pod.node_name and not pod.is_terminal:
                    g.bound.add(pod.uid)
                    g.once_satisfied = True
        if not gid:
            return None
        return self._gangs[gid]

    def _init(self, g: Gang, handle: Handle, args: CoschedulingArgs) -> Gang:
        """(Re)initialise a gang's spec: from its PodGroup (re-read when the object changes) or from
        the first member whose annotations define it."""
        timeout, match_policy = args.timeout_seconds, args.default_match_policy
        if g.gang_id in self._crd:
            pg = handle.cluster.get_object("PodGroup", g.gang_id)
            if pg is None:
                g.spec, g.error = None, f"Gang \"{g.gang_id}\" not found: no PodGroup {g.gang_id}"
                self._pg_seen.pop(g.gang_id, None)
            elif self._pg_seen.get(g.gang_id) is not pg:
                try:
                    g.spec, g.error = spec_from_pod_group(g.gang_id, pg, default_timeout=timeout,
                                                       default_match_policy=match_policy), ""
                except GangDefinitionError as e:
                    g.spec, g.error = None, f"Gang \"{g.gang_id}\" has not initialized: {e}"
                self._pg_seen[g.gang_id] = pg
            return g
        if g.spec is None:
            first_error = ""
            for pod in g.children.values():
                try:
                    g.spec = spec_from_pod(pod, default_timeout=timeout, default_match_policy=match_policy)
                    break
                except GangDefinitionError as e:
                    first_error = first_error or str(e)
            g.error = "" if g.spec is not None else (
                f"Gang \"{g.gang_id}\" has not initialized: {first_error or 'no member pods'}")
        return g

    def _lookup(self, gid: str, handle: Handle, args: CoschedulingArgs) -> Gang | None:
        """A gang by id; a PodGroup without pods yet still defines an (empty) gang."""
        g = self._gangs.get(gid)
        if g is None:
            if handle.cluster.get_object("PodGroup", gid) is None:
                return None
            g = self._gangs[gid] = Gang(gid)
            self._crd.add(gid)
        return self._init(g, handle, args)

    def _gang_of(self, pod: Any, handle: Handle, args: Any) -> Gang | None:
        g = self._track(pod, handle)
        return None if g is None else self._init(g, handle, args)

    def _prune(self, g: Gang, handle: Handle) -> None:
        """Forget members that left the cluster (Koordinator's onPodDelete), and count a bound member that is
        pending again (the embedded engine brings an evicted pod back under its uid) as no longer bound."""
        entries = handle.cluster.pods  # looked up directly: this runs for every gated member at every event
        gone = [u for u in g.children if u not in entries]
        for u in gone:
            g.children.pop(u, None)
            g.waiting.discard(u)
            g.bound.discard(u)
            self._pod_gang.pop(u, None)
        for u in [u for u in g.bound if (e := entries.get(u)) is None or not e.pod.node_name]:
            g.bound.discard(u)

    def _group(self, g: Gang, handle: Handle, args: Any) -> list[tuple[str, Gang | None]]:
        assert g.spec is not None
        return [(gid, g if gid == g.gang_id else self._lookup(gid, handle, args)) for gid in g.spec.groups]

    def _basic_check(self, pod: Any, g: Gang, handle: Handle, args: Any) -> str:
        """PreEnqueue/BeforePreFilter: the reason the pod cannot be scheduled yet, or ``""``."""
        if g.spec is None:
            return g.error or f"Gang \"{g.gang_id}\" has not initialized"
        if g.passes_once_satisfied:
            return ""
        group = g.spec.group_id
        for gid, member in self._group(g, handle, args):
            if member is None:
                return (f"gangGroup [{group}] basic check: memberGang {gid} not found, "
                        f"current gang: {g.gang_id}, podName: {pod.key}")
            if member.spec is None:
                return f"gangGroup [{group}] basic check: {member.error}, current gang: {g.gang_id}, podName: {pod.key}"
            if len(member.children) >= member.spec.min_member:
                self._prune(member, handle)  # only pruning can turn enough into too few
            if len(member.children) < member.spec.min_member:
                return (f"gangGroup [{group}] basic check: memberGangs [{gid}] child pod not collect enough, "
                        f"current gang: {g.gang_id}, podName: {pod.key}")
        return ""

    # -- rounds: keeping a gang group's attempts together ---------------------------------------------------
    def _pending_members(self, g: Gang, handle: Handle, args: Any) -> set[str]:
        out: set[str] = set()
        for _, member in self._group(g, handle, args):
            if member is not None:
                out.update(u for u in member.children if u not in member.bound and u not in member.waiting)
        return out

    def _round_alive(self, group_id: str, handle: Handle) -> bool:
        """Does the round still have untried members that the queue will hand out next?"""
        r = self._rounds.get(group_id)
        if r is None:
            return False
        return any(handle.is_active(u) for u in r.members if u not in r.attempted)

    def _fingerprint(self, g: Gang, handle: Handle) -> tuple:
        """What could let a failed group fit next time: binds, pods or nodes coming and going, node
        capacity, the capacity in use (an eviction frees it without changing the number of pods), and the
        reservations other groups hold at Permit."""
        cluster = handle.cluster
        own = set(g.spec.groups) if g.spec is not None else {g.gang_id}
        others = frozenset(u for wp in handle.iterate_waiting_pods()
                           if self._pod_gang.get(u := wp.pod.uid) not in own)
        alloc, used = cluster.allocatable, cluster.requested
        # capacity in use by everything but the group itself (its own members come and go at Permit)
        in_use = int(used.sum()) if used.size else 0
        for gid in own:
            m = self._gangs.get(gid)
            for u in (m.waiting | m.bound) if m is not None else ():
                p = cluster.pod(u)
                if p is not None and p.node_name:
                    in_use -= int(cluster.request_vector(p).sum())
        return (self._binds, len(cluster.pods), cluster.num_nodes, int(alloc.sum()) if alloc.size else 0, in_use,
                others)

    @staticmethod
    def _may_help(old: tuple, new: tuple) -> bool:
        return old[:5] != new[:5] or not old[5] <= new[5]

    def _after_attempt(self, handle: Handle, args: Any) -> None:
        """Called when a scheduling cycle ends: close the active round once it has nothing left to try."""
        gid = self._active_group
        if gid is not None and not self._round_alive(gid, handle):
            self._end_round(gid, handle, args)

    def _end_round(self, group_id: str, handle: Handle, args: Any) -> None:
        self._active_group = None
        r = self._rounds.get(group_id)
        if r is not None and r.failed:
            self._group_time[group_id] = handle.clock.now()
        if r is not None and r.members <= r.attempted:
            # every member was tried and the group is still short: Strict gangs give back what they hold
            gangs = [self._gangs.get(gid) for gid in group_id.split(",")]
            if not all(g is not None and g.valid_for_permit() for g in gangs):
                for g in gangs:
                    if g is not None and g.spec is not None and g.spec.mode == MODE_STRICT and not g.passes_once_satisfied:
                        self._reject_group(g, f"GangGroup \"{group_id}\" gets rejected: all members were attempted "
                                              f"and the group is not satisfied", handle)
                        break
        if self._deferred:
            ready = [u for u in self._deferred if not handle.is_in_flight(u)]
            for u in ready:
                self._deferred.pop(u, None)
            handle.activate(ready)

    def _reject_group(self, g: Gang, message: str, handle: Handle) -> int:
        """Reject every member of ``g``'s gang group still waiting at Permit; returns how many. The group's
        next successful round takes a new binding snapshot."""
        n = 0
        groups = g.spec.groups if g.spec is not None else (g.gang_id,)
        if g.spec is not None:
            self._allowed_groups.discard(g.spec.group_id)
            for u in [u for u, (gid, _) in self._binding.items() if gid == g.spec.group_id]:
                del self._binding[u]
        for gid in groups:
            member = self._gangs.get(gid)
            if member is None:
                continue
            for u in sorted(member.waiting):
                wp = handle.get_waiting_pod(u)
                if wp is not None and wp.status is None:
                    wp.reject(self._name, message)
                    n += 1
        return n

    # -- scheduling cycle ---------------------------------------------------------------------------------
    @hookimpl
    def queue_sort(self, pod: Pod, handle: Handle) -> tuple[Any, ...]:
        """Koordinator's ``Less``: ``(-priority, -sub-priority, group's last schedule time, group id, gang
        id, pod arrival, pod name)``. A group's time is its first member's arrival until one of its rounds
        fails, then the time of that failure (so an older waiting group of equal priority goes first). A
        pod without a gang is its own group at its arrival, so such pods keep ``priority_sort``'s order."""
        sub = _sub_priority(pod)
        g = self._track(pod, handle)
        if g is None:
            ts = pod.creation_timestamp
            t = ts if ts is not None else handle.clock.now()
            return (-pod.priority, -sub, t, "", "", t, pod.name)
        own = self._arrival.get(pod.uid, 0.0)
        group = (g.gang_id,) if g.spec is None else g.spec.groups
        group_id = ",".join(group)
        firsts = [m.first_arrival for gid in group if (m := self._gangs.get(gid)) is not None
                  and m.first_arrival is not None]
        t = self._group_time.get(group_id, min(firsts, default=own))
        return (-pod.priority, -sub, t, group_id, g.gang_id, own, pod.name)

    @hookimpl
    def pre_enqueue(self, pod: Pod, args: CoschedulingArgs, handle: Handle) -> Status | None:
        g = self._gang_of(pod, handle, args)
        if g is None:
            return None
        reason = self._basic_check(pod, g, handle, args)
        if not reason:
            return None
        st = Status.unresolvable(reason, plugin=PLUGIN_NAME)
        # a gated member gets no attempt (no error_handler call): the job's message is published here
        self._pending.record(pod, st)
        self._pending.publish(g, self._groups_of(g, handle, args), handle)
        return st

    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, args: CoschedulingArgs, handle: Handle) -> Status | None:
        if self._jobs.dry_run:  # job preemption's dry run filtering another member: no round bookkeeping
            return None
        g = self._gang_of(pod, handle, args)
        if g is None:
            return None
        reason = self._basic_check(pod, g, handle, args)
        if reason:
            state[_SKIP_POST_FILTER] = True
            return Status.unresolvable(reason)
        if g.passes_once_satisfied:
            return None
        assert g.spec is not None
        group_id = g.spec.group_id
        active = self._active_group
        if active is not None and active != group_id:
            if self._round_alive(active, handle):
                self._deferred[pod.uid] = None
                state[_SKIP_POST_FILTER] = True
                return Status.unschedulable(f"gangGroup {active} is scheduling and this pod waits until its "
                                            f"members have been attempted")
            self._end_round(active, handle, args)
        r = self._rounds.get(group_id)
        if r is None or pod.uid in r.attempted:
            if r is not None and r.fail_key is not None and not self._may_help(r.fail_key, self._fingerprint(g, handle)):
                # re-placing the same members would only fail and release again (a livelock)
                state[_SKIP_POST_FILTER] = True
                return Status.unschedulable(r.failed or f"gangGroup {group_id} failed and nothing has changed since")
            if (r is not None and r.fail_key is not None and g.spec.mode == MODE_STRICT
                    and not self._demand_may_fit(pod, handle)):
                # a Strict group failed before, and the room left cannot hold it now either (a necessary
                # condition; post_filter still runs, so the group gives back what it holds)
                return Status.unschedulable(f"gangGroup {group_id} cannot be placed: the room left, node by node, "
                                            f"holds fewer members than it still needs")
            r = self._rounds[group_id] = Round(group_id, self._pending_members(g, handle, args))
            # Koordinator's NextPod: every pending member of the group is fed in this round, wherever it
            # waits (the unschedulable pool, backoff), so the round ends with the whole group tried
            handle.activate([u for u in sorted(r.members)
                             if u != pod.uid and not handle.is_active(u) and not handle.is_in_flight(u)])
        self._active_group = group_id
        r.attempted.add(pod.uid)
        if r.failed and g.spec.mode == MODE_STRICT:
            state[_SKIP_POST_FILTER] = True
            return Status.unschedulable(r.failed)
        return None

    @hookimpl
    async def post_filter(self, pod: Pod, state: CycleState, statuses: Mapping[str, Status], args: CoschedulingArgs,
                          handle: Handle) -> PostFilterResult | Status | None:
        skip = state.pop(_SKIP_POST_FILTER, False)
        g = self._gang_of(pod, handle, args)
        if g is None or g.spec is None or g.passes_once_satisfied:
            self._after_attempt(handle, args)
            return None
        # with job-level preemption, a member's failure is the job's: pod-level preemption (the post_filter
        # plugins after this one) must not evict for it alone, so every answer below stops the point
        job = args.enable_preemption
        if skip:
            self._after_attempt(handle, args)
            return Status.unresolvable("job-level preemption: this member was not filtered") if job else None
        r = self._rounds.get(g.spec.group_id)
        if r is not None:
            r.fail_key = self._fingerprint(g, handle)
        outcome = None
        if job:
            res, pst, outcome = await self._jobs.post_filter(self, pod, g, r, state, statuses, args, handle)
        result: PostFilterResult | Status | None = None
        if outcome is not None and outcome.ok:
            self._reject_group(g, f"GangGroup \"{g.spec.group_id}\" preempted: {outcome.message}", handle)
            if r is not None:  # the rest of the round waits for the room its nomination holds
                r.failed = f"GangGroup \"{g.spec.group_id}\" is nominated after preemption: {outcome.message}"
            result = res
        elif g.spec.mode == MODE_STRICT or outcome is not None:
            fit = fit_error(handle.cluster.num_nodes, statuses).message
            already = sum(len(m.waiting) for _, m in self._group(g, handle, args) if m is not None)
            self._reject_group(g, f"Gang \"{g.gang_id}\" gets rejected due to member Pod \"{pod.name}\" is "
                                  f"unschedulable with reason \"{fit}\"", handle)
            if r is not None and g.spec.mode == MODE_STRICT:
                r.failed = (f"GangGroup \"{g.spec.group_id}\" gets rejected due to member Pod \"{pod.key}\" is "
                            f"unschedulable with reason \"{fit}\", alreadyWaitForBound: {already}")
            if outcome is not None:
                result = Status.unresolvable(pst.message)
            else:
                result = Status.unschedulable(f"Gang \"{g.gang_id}\" gets rejected due to pod is unschedulable")
        self._after_attempt(handle, args)
        return result

    @hookimpl
    def permit(self, pod: Pod, state: CycleState, args: CoschedulingArgs, handle: Handle) -> Status | None:
        g = self._gang_of(pod, handle, args)
        if g is None:
            self._after_attempt(handle, args)
            return None
        if g.spec is None:
            return Status.unresolvable(g.error or f"Gang \"{g.gang_id}\" not found")
        g.waiting.add(pod.uid)
        group = self._group(g, handle, args)
        if all(m is not None and m.valid_for_permit() for _, m in group):
            self._allow_group(pod, g, group, handle)
            result = None
        else:
            result = Status.wait(g.spec.wait_seconds, f"waiting for gang group {g.spec.group_id}")
        self._after_attempt(handle, args)
        return result

    def _allow_group(self, pod: Any, g: Gang, group: list[tuple[str, Gang | None]], handle: Handle) -> None:
        """AllowGangGroup: allow every waiting member of every gang of the group, recording the set."""
        assert g.spec is not None
        members = [u for _, m in group if m is not None for u in sorted(m.waiting)]
        if g.spec.group_id not in self._allowed_groups:
            # Koordinator's AllowGangGroup: the binding snapshot of this round, kept through the binding
            # cycle (a member that fails to bind and is retried still carries it)
            self._allowed_groups.add(g.spec.group_id)
            for u in members:
                self._binding[u] = (g.spec.group_id, len(members))
        for u in members:
            if u != pod.uid:
                wp = handle.get_waiting_pod(u)
                if wp is not None:
                    wp.allow(self._name)

    @hookimpl
    def unreserve(self, pod: Pod, args: CoschedulingArgs, handle: Handle) -> None:
        g = self._gang_of(pod, handle, args)
        if g is None:
            return
        g.waiting.discard(pod.uid)
        if g.spec is not None and g.spec.mode == MODE_STRICT and not g.passes_once_satisfied:
            self._reject_group(g, f"Gang \"{g.gang_id}\" gets rejected due to Pod \"{pod.name}\" in Unreserve", handle)
        self._after_attempt(handle, args)

    # -- binding cycle -------------------------------------------------------------------------------------
    @hookimpl
    def pre_bind(self, pod: Pod) -> dict[str, str] | None:
        rec = self._binding.get(pod.uid)
        if rec is None or rec[1] <= 1:
            return None
        group_id, count = rec[0], str(rec[1])
        return {ANNOTATION_BIND_GANG_GROUP_ID: group_id, ANNOTATION_BIND_GANG_MEMBER_COUNT: count,
                ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED: group_id,
                ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED: count}

    @hookimpl
    def post_bind(self, pod: Pod, handle: Handle) -> None:
        self._binds += 1
        self._jobs.bound_at[pod.uid] = handle.clock.now()
        g = self._track(pod, handle)
        if g is None:
            return
        g.waiting.discard(pod.uid)
        g.bound.add(pod.uid)
        g.once_satisfied = True
        rec = self._binding.pop(pod.uid, None)
        if rec is not None and not any(gid == rec[0] for gid, _ in self._binding.values()):
            self._allowed_groups.discard(rec[0])  # the snapshot all bound: a later round takes its own

    # -- reporting -----------------------------------------------------------------------------------------
    def summaries(self, handle: Handle, args: CoschedulingArgs) -> list[dict[str, Any]]:
        """One row per known gang: definition, bound/waiting/pending counts and a phase
        (``Satisfied``: bound ≥ min; ``PartlyBound``: 0 < bound < min; ``Pending``: nothing bound)."""
        out = []
        for gid in sorted(self._gangs):
            g = self._init(self._gangs[gid], handle, args)
            self._prune(g, handle)
            spec = g.spec
            bound = len(g.bound)
            if spec is None:
                phase = "NotInitialized"
            elif bound >= spec.min_member and bound > 0:
                phase = "Satisfied"
            elif bound > 0:
                phase = "PartlyBound"
            else:
                phase = "Pending"
            out.append({"gang": gid, "group": spec.group_id if spec else gid,
                        "mode": spec.mode if spec else "", "matchPolicy": spec.match_policy if spec else "",
                        "minMember": spec.min_member if spec else None, "children": len(g.children),
                        "bound": bound, "waiting": len(g.waiting), "onceSatisfied": g.once_satisfied,
                        "phase": phase, **({"error": g.error} if g.error else {})})
        return out

    def _groups_of(self, g: Gang, handle: Handle, args: CoschedulingArgs) -> list[Gang]:
        """The gangs of ``g``'s gang group (``g`` alone while it is not defined)."""
        if g.spec is None:
            return [g]
        return [m for _, m in self._group(g, handle, args) if m is not None] or [g]

    @hookimpl
    def error_handler(self, pod: Pod, status: Status, args: CoschedulingArgs, handle: Handle) -> None:
        """Why is my job pending: the member's failure, then the job's one message on its PodGroup."""
        g = self._gangs.get(self._pod_gang.get(pod.uid) or "")
        if g is not None:
            self._pending.record(pod, status)
            self._pending.publish(g, self._groups_of(g, handle, args), handle)

    @hookimpl
    def report(self, args: CoschedulingArgs, handle: Handle) -> dict[str, Any] | None:
        rows = self.summaries(handle, args)
        out: dict[str, Any] = {"gangs": rows} if rows else {}
        if self._jobs.history:
            out["jobPreemptions"] = list(self._jobs.history)
        seen: set[str] = set()
        groups = []
        for gid in sorted(self._gangs):
            group = self._groups_of(self._gangs[gid], handle, args)
            key = ",".join(sorted(m.gang_id for m in group))
            if key not in seen:
                seen.add(key)
                groups.append(group)
        jobs = self._pending.rows(groups, handle)
        if jobs:
            out["jobs"] = jobs
        return out or None

