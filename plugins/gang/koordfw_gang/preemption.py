"""Job-level preemption: Koordinator's coscheduling ``preemptionEvaluatorImpl`` (``core/preemption.go``).

When a member of a gang (or gang group) fits nowhere, preemption runs once for the whole job:

1. the job must be eligible: the trigger pod's ``preemptionPolicy`` is not ``Never``, and no pending
   member's nominated node still has a victim terminating by an earlier preemption;
2. on every node the trigger was rejected from as ``Unschedulable`` (not ``Unresolvable``), the pods of
   lower priority that may be evicted (``disable-preemptible`` not ``true``, quota ``preemptible`` not
   ``false``, the quota rule, not a placeholder) are removed in a what-if;
3. each node gets a cost (Koordinator's ``estimatePreemptionCost``): the sum, over the distinct jobs its
   possible victims belong to, of the rank of the job's priority among all possible victims' priorities;
   a node whose possible victims a PodDisruptionBudget protects costs more than any node without;
4. every pending member is placed in turn on the cheapest node its filters accept, the members already
   placed holding their requests; if any member cannot be placed nothing is evicted ("not helpful");
5. on each chosen node the victims are re-added one by one, most important first (PDB-protected ones
   before the rest), and kept when the members placed there still fit: the fewest victims per node;
6. the victims are evicted, pods of lower priority nominated to those nodes lose their nomination, and
   every member of the job is nominated (pending members to their planned node, members that waited at
   Permit to the node they waited on), so the room is held for the job until it binds.

Beyond Koordinator (``evictWholeStrictGangs``): a bound member of a Strict gang is a possible victim only
if all its gang's bound members are, and a Strict gang that loses one member loses them all (it is broken
anyway). Either way the outcome reports the member time each choice wastes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from koordfw import Code, CycleState, Handle, Pod, PostFilterResult, Status, fit_error
from koordfw.extension import LABEL_DISABLE_PREEMPTIBLE, LABEL_QUESTIONED_OBJECT_KEY, LABEL_QUOTA_PREEMPTIBLE
from koordfw.inputs import selector_matches

# Koordinator's JobPreemptionState reasons (core/preemption.go)
REASON_ALREADY_PREEMPTED = "preemption already attempted by {} with message {}"
REASON_NO_PENDING_PODS = "no pending pods"
REASON_POLICY_NEVER = "not eligible due to preemptionPolicy=Never."
REASON_TERMINATING_VICTIM = "not eligible due to terminating pod on the nominated node."
REASON_NO_NODES = "no nodes available"
REASON_NO_POTENTIAL_VICTIMS = "no potential victims"
REASON_NOT_HELPFUL = "preemption not helpful"
REASON_PREPARE_ERROR = "prepare candidates error"
REASON_SUCCESS = "preempt success, alreadyWaitingForBound: {}/{}"
#: the status of a node rejected as Unresolvable (or not tried at all) in the not-helpful message
NOT_HELPFUL_ON_NODE = "Preemption is not helpful for scheduling"


@attrs.define
class Job:
    """The preemptor: its key (the gang group id, or the trigger pod's key), the pod whose failure
    triggered preemption, the members still pending and the members waiting at Permit (pod, node)."""

    key: str
    trigger: Pod
    pending: list[Pod]
    waiting: list[tuple[Pod, str]] = attrs.field(factory=list)


@attrs.define
class Outcome:
    """What a preemption did (Koordinator's ``JobPreemptionState``, plus the waste report)."""

    reason: str
    message: str
    #: pod key → planned node, for every pending member (empty unless the dry run placed them all)
    nominations: dict[str, str] = attrs.field(factory=dict)
    possible_victims: dict[str, list[Pod]] = attrs.field(factory=dict)
    victims: dict[str, list[Pod]] = attrs.field(factory=dict)
    #: terminating pod key → the nominated node it is on (the "terminating victim" reason)
    terminating: dict[str, str] = attrs.field(factory=dict)
    pdb_violations: int = 0
    #: the member time each choice wastes (see :func:`waste_report`); empty when nothing was evicted
    waste: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: the choice applied: ``podLevel`` (Koordinator) or ``wholeGang`` (``evictWholeStrictGangs``)
    choice: str = ""

    @property
    def ok(self) -> bool:
        return self.reason == REASON_SUCCESS

    def result(self, trigger: Pod) -> tuple[PostFilterResult | None, Status]:
        """The PostFilter answer Koordinator gives: the trigger's node and success, an empty nomination
        and Unschedulable when not helpful, else nothing and Unschedulable."""
        if self.ok:
            return PostFilterResult(self.nominations.get(trigger.key, "")), Status.success()
        if self.reason == REASON_NOT_HELPFUL:
            return PostFilterResult(""), Status.unschedulable(self.message)
        return None, Status.unschedulable(self.message)

    def victim_keys(self) -> list[str]:
        return sorted(v.key for vs in self.victims.values() for v in vs)


def is_preemptible(pod: Pod) -> bool:
    """Koordinator's ``IsEligiblePod``: ``IsPodPreemptible && !IsPodNonPreemptible``."""
    return pod.labels.get(LABEL_DISABLE_PREEMPTIBLE) != "true" and pod.labels.get(LABEL_QUOTA_PREEMPTIBLE) != "false"


def terminating_by_preemption(pod: Pod) -> bool:
    """``podTerminatingByPreemption``: being deleted, with a true ``DisruptionTarget`` condition of
    reason ``PreemptionByScheduler``."""
    if pod.deletion_timestamp is None:
        return False
    for c in ((pod.raw or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "DisruptionTarget":
            return c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler"
    return False


def job_key(pod: Pod, gang_of: Callable[[Pod], str]) -> str:
    """The job a victim belongs to for the cost: Koordinator's ``questioned-object-key`` label, else its
    gang, else the pod itself."""
    return pod.labels.get(LABEL_QUESTIONED_OBJECT_KEY) or gang_of(pod) or pod.key


def estimate_costs(possible: Mapping[str, Sequence[Pod]], gang_of: Callable[[Pod], str]) -> dict[str, int]:
    """``estimatePreemptionCost``: per node, the rank of each distinct victim job's priority (its first
    victim's) among the priorities of all possible victims, summed."""
    ranks = {p: i for i, p in enumerate(sorted({v.priority for vs in possible.values() for v in vs}))}
    out: dict[str, int] = {}
    for node, vs in possible.items():
        seen: set[str] = set()
        cost = 0
        for v in vs:
            j = job_key(v, gang_of)
            if j not in seen:
                seen.add(j)
                cost += ranks[v.priority]
        out[node] = cost
    return out


def pdb_protected(pods: Sequence[Pod], pdbs: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The uids among ``pods`` whose eviction, together with those before them, would take a matching
    PodDisruptionBudget below zero disruptions allowed (kube's filterPodsWithPDBViolation)."""
    allowed = {k: int(((pdb.get("status") or {}).get("disruptionsAllowed")) or 0) for k, pdb in pdbs.items()}
    out: set[str] = set()
    for p in pods:
        for key, pdb in pdbs.items():
            if (pdb.get("metadata") or {}).get("namespace", "default") != p.namespace:
                continue
            if selector_matches((pdb.get("spec") or {}).get("selector"), p.labels):
                allowed[key] -= 1
                if allowed[key] < 0:
                    out.add(p.uid)
    return out


def victim_order(pods: Sequence[Pod], gang_of: Callable[[Pod], str], protected: set[str]) -> list[Pod]:
    """The reprieve order: PDB-protected pods first (kube), then Koordinator's ``sortVictims``: higher
    priority, then job, then name."""
    return sorted(pods, key=lambda p: (p.uid not in protected, -p.priority, job_key(p, gang_of), p.name))


def waste_report(victims: Sequence[Pod], strict_gangs: Callable[[Pod], tuple[str, list[Pod]] | None],
                 run_seconds: Callable[[Pod], float]) -> dict[str, dict[str, Any]]:
    """The member time the two choices waste, for the victims chosen node by node: ``podLevel`` evicts only
    them (a Strict gang that lost a member keeps its other members running, broken); ``wholeGang`` evicts
    those members too. The run time lost so far is the same (a broken Strict gang's work is lost either
    way); pod-level leaves ``membersLeftBroken`` members running for nothing, wasting that many
    member-seconds per second (and their room) until their job restarts."""
    chosen = {v.uid for v in victims}
    broken: dict[str, list[Pod]] = {}
    for v in victims:
        hit = strict_gangs(v)
        if hit is not None:
            gid, members = hit
            rest = [m for m in members if m.uid not in chosen]
            if rest:
                broken.setdefault(gid, rest)
    left = {m.uid: m for ms in broken.values() for m in ms}
    lost = sum(run_seconds(v) for v in victims) + sum(run_seconds(m) for m in left.values())
    return {"podLevel": {"evicted": len(victims), "wastedMemberSeconds": round(lost, 3),
                         "membersLeftBroken": len(left), "brokenGangs": sorted(broken)},
            "wholeGang": {"evicted": len(victims) + len(left), "wastedMemberSeconds": round(lost, 3),
                          "membersLeftBroken": 0, "brokenGangs": []}}


@attrs.define
class Evaluator:
    """One job preemption. ``eligible(preemptor, victim)`` adds the quota rule to Koordinator's
    ``IsEligiblePod``; ``gang_of(pod)`` names a pod's gang (``""`` for none); ``strict_gang(pod)`` gives a
    bound member's Strict gang id and its bound members (``None`` when it is not in one); ``run_seconds(pod)``
    is how long a victim has run (for the waste report). Members other than the trigger are filtered after the
    profile's pre_filter runs for them into a fresh CycleState (the caller keeps its own pre_filter out)."""

    handle: Handle
    eligible: Callable[[Pod, Pod], bool]
    gang_of: Callable[[Pod], str]
    strict_gang: Callable[[Pod], tuple[str, list[Pod]] | None]
    run_seconds: Callable[[Pod], float]
    whole_strict_gangs: bool = False

    async def preempt(self, job: Job, state: CycleState, statuses: Mapping[str, Status],
                      already: str = "") -> Outcome:
        """Koordinator's ``preempt``; ``already`` is the message of a preemption this round already ran."""
        trigger = job.trigger
        if already:
            return Outcome(REASON_ALREADY_PREEMPTED, already)
        if not job.pending:
            return Outcome(REASON_NO_PENDING_PODS, REASON_NO_PENDING_PODS)
        if trigger.preemption_policy == "Never":
            return Outcome(REASON_POLICY_NEVER, REASON_POLICY_NEVER)
        terminating = self._terminating_on_nominated(job, statuses)
        if terminating:
            return Outcome(REASON_TERMINATING_VICTIM, REASON_TERMINATING_VICTIM, terminating=terminating)
        cluster = self.handle.cluster
        if cluster.num_nodes == 0:
            return Outcome(REASON_NO_NODES, REASON_NO_NODES)
        # the job's own nominations would count against its members in the dry run (Koordinator's
        # MakeNominatedPodsOfTheSameJob): drop them; success sets them anew, failure leaves them cleared
        for p in job.pending:
            if p.nominated_node_name:
                self.handle.nominate(p, None)
        out = await self._dry_run(job, state, statuses)
        if not out.ok:
            return out
        await self._execute(job, out)
        return out

    def _terminating_on_nominated(self, job: Job, statuses: Mapping[str, Status]) -> dict[str, str]:
        """``jobEligibleToPreemptOthers``: pending members nominated to a node where a victim of an earlier
        preemption is still terminating make the job wait (the trigger's own nomination does not, when its
        node is now Unresolvable for it)."""
        cluster = self.handle.cluster
        found: dict[str, str] = {}
        for p in job.pending:
            node = p.nominated_node_name
            if not node:
                continue
            if p.uid == job.trigger.uid:
                st = statuses.get(node)
                if st is None or st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    continue
            for v in cluster.pods_on(node):
                if v.priority < job.trigger.priority and self._eligible(job.trigger, v) and terminating_by_preemption(v):
                    found[v.key] = node
                    break
        return found

    def _eligible(self, preemptor: Pod, victim: Pod) -> bool:
        return is_preemptible(victim) and self.eligible(preemptor, victim)

    def _possible_victims(self, job: Job, nodes: Sequence[str]) -> dict[str, list[Pod]]:
        """``removePossibleVictims``' choice: per node, the pods of lower priority that may be evicted."""
        cluster, handle, trigger = self.handle.cluster, self.handle, job.trigger
        own = {p.uid for p in job.pending} | {p.uid for p, _ in job.waiting}
        ok_cache: dict[str, bool] = {}

        def ok(v: Pod) -> bool:
            if v.uid in own or handle.is_placeholder(v.uid) or v.priority >= trigger.priority:
                return False
            if not self._eligible(trigger, v):
                return False
            if self.whole_strict_gangs:
                hit = self.strict_gang(v)
                if hit is not None:
                    gid, members = hit
                    if gid not in ok_cache:
                        ok_cache[gid] = all(m.priority < trigger.priority and self._eligible(trigger, m)
                                            and not handle.is_placeholder(m.uid) for m in members)
                    return ok_cache[gid]
            return True

        out: dict[str, list[Pod]] = {}
        for n in nodes:
            vs = [v for v in cluster.pods_on(n) if ok(v)]
            if vs:
                out[n] = vs
        return out

    async def _dry_run(self, job: Job, state: CycleState, statuses: Mapping[str, Status]) -> Outcome:
        """``findCandidates`` + ``dryRunPreemption``: place every pending member with the possible victims
        removed, then pick the fewest victims per chosen node."""
        handle = self.handle
        cluster = handle.cluster
        n_all = cluster.num_nodes
        potential = sorted(n for n, st in statuses.items() if st.code == Code.UNSCHEDULABLE and cluster.node(n))
        if not potential:
            unresolvable = {n: Status.unresolvable(NOT_HELPFUL_ON_NODE) for n, st in statuses.items()
                            if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE}
            return Outcome(REASON_NOT_HELPFUL, fit_error(n_all, unresolvable).message)
        possible = self._possible_victims(job, potential)
        status_map: dict[str, Status] = {n: Status.unresolvable(REASON_NO_POTENTIAL_VICTIMS)
                                         for n in potential if n not in possible}
        if not possible:
            return Outcome(REASON_NOT_HELPFUL, fit_error(n_all, status_map).message)
        pdbs = cluster.objects_of("PodDisruptionBudget")
        protected = {n: pdb_protected(victim_order(vs, self.gang_of, set()), pdbs) for n, vs in possible.items()}
        costs = estimate_costs(possible, self.gang_of)
        # a node whose possible victims a PDB protects goes after every node without (kube's first criterion)
        key = {n: (bool(protected.get(n)), costs.get(n, 0), n) for n in potential}

        members = [job.trigger] + sorted((p for p in job.pending if p.uid != job.trigger.uid), key=lambda p: p.key)
        placed: dict[str, list[Pod]] = {}
        nominations: dict[str, str] = {}
        states: dict[str, CycleState] = {}
        with contextlib.ExitStack() as stack:
            for n, vs in possible.items():
                stack.enter_context(handle.without_pods(n, vs))
            feasible = list(potential)
            for p in members:
                st = state.clone() if p.uid == job.trigger.uid else await self._pre_filtered(p)
                if not isinstance(st, Status):
                    # Koordinator's removePossibleVictims / addPod: the victims are out of the member's
                    # pre_filter state too (their quota usage released), the members placed are in it
                    st = await self._extended(p, st, [(v, n) for n, vs in possible.items() for v in vs],
                                              [(m, nominations[m.key]) for m in members if m.key in nominations])
                if isinstance(st, Status):
                    status_map.update({n: st for n in feasible})
                    return Outcome(REASON_NOT_HELPFUL, fit_error(n_all, status_map).message,
                                   possible_victims=possible)
                states[p.uid] = st
                fits = []
                for n in feasible:
                    res = await handle.run_filters(p, n, st)
                    if res.ok:
                        fits.append(n)
                    else:
                        status_map[n] = res
                feasible = fits
                if not feasible:
                    return Outcome(REASON_NOT_HELPFUL, fit_error(n_all, status_map).message,
                                   possible_victims=possible)
                node = min(feasible, key=lambda n: key[n])
                placed.setdefault(node, []).append(p)
                nominations[p.key] = node
                stack.enter_context(handle.with_requests_held(node, cluster.request_vector(p)))
        # choosing the victims, each member's state holds the whole job (those placed after it added too), so
        # a reprieve is checked against the job's total usage whichever member filters it
        for i, p in enumerate(members):
            st = await self._extended(p, states[p.uid], [], [(m, nominations[m.key]) for m in members[i + 1:]])
            if isinstance(st, Status):
                return Outcome(REASON_NOT_HELPFUL, st.message, possible_victims=possible)
            states[p.uid] = st
        victims: dict[str, list[Pod]] = {}
        for node in sorted(placed):
            chosen = await self._select_on_node(node, placed[node], possible.get(node, []),
                                                protected.get(node, set()), states, members)
            if chosen:
                victims[node] = chosen
        violations = sum(len(pdb_protected(victim_order(vs, self.gang_of, set()), pdbs)) for vs in victims.values())
        return Outcome(REASON_SUCCESS, "", nominations=nominations, possible_victims=possible, victims=victims,
                       pdb_violations=violations)

    async def _pre_filtered(self, pod: Pod) -> CycleState | Status:
        """The profile's pre_filter for another member, into a fresh state. A resolvable rejection does not
        end the dry run: as in Koordinator (which filters every member with the trigger's state) the filters
        decide, once the victims are out of the state (a quota check, say)."""
        st = CycleState()
        status, _ = await self.handle.run_pre_filters(pod, st)
        return st if status.ok or status.code in (Code.SKIP, Code.UNSCHEDULABLE) else status

    async def _extended(self, pod: Pod, st: CycleState, removed: Sequence[tuple[Pod, str]],
                        added: Sequence[tuple[Pod, str]]) -> CycleState | Status:
        """``st`` told, through the pre_filter extensions, of the pods (pod, node) ``removed`` and ``added``."""
        handle = self.handle
        for v, n in removed:
            res = await handle.run_pre_filter_extension_remove_pod(pod, st, v, n)
            if not res.ok:
                return res
        for m, n in added:
            res = await handle.run_pre_filter_extension_add_pod(pod, st, m, n)
            if not res.ok:
                return res
        return st

    async def _select_on_node(self, node: str, pods: list[Pod], possible: list[Pod], protected: set[str],
                              states: Mapping[str, CycleState], members: Sequence[Pod]) -> list[Pod]:
        """``selectVictims`` on one node: re-add each possible victim, most important first (into every
        member's state as well), and keep it if every member placed there still fits (each filtered with those
        before it holding their room)."""
        handle = self.handle
        victims = list(possible)
        for v in victim_order(possible, self.gang_of, protected):
            trial = [x for x in victims if x.uid != v.uid]
            back = [await handle.run_pre_filter_extension_add_pod(m, states[m.uid], v, node) for m in members]
            if all(b.ok for b in back) and await self._all_fit(node, pods, trial, states):
                victims = trial
                continue
            for m, b in zip(members, back):
                if b.ok:
                    await handle.run_pre_filter_extension_remove_pod(m, states[m.uid], v, node)
        return victims

    async def _all_fit(self, node: str, pods: list[Pod], removed: list[Pod], states: Mapping[str, CycleState]) -> bool:
        handle = self.handle
        with contextlib.ExitStack() as stack:
            stack.enter_context(handle.without_pods(node, removed))
            for p in pods:
                if not (await handle.run_filters(p, node, states[p.uid])).ok:
                    return False
                stack.enter_context(handle.with_requests_held(node, handle.cluster.request_vector(p)))
        return True

    async def _execute(self, job: Job, out: Outcome) -> None:
        """``prepareCandidates`` + ``makeNomination``: evict, clear lower nominations, nominate the job."""
        handle = self.handle
        chosen = [v for n in sorted(out.victims) for v in out.victims[n]]
        evict = list(chosen)
        if self.whole_strict_gangs:
            seen = {v.uid for v in chosen}
            for v in chosen:
                hit = self.strict_gang(v)
                for m in (hit[1] if hit is not None else []):
                    if m.uid not in seen:
                        seen.add(m.uid)
                        evict.append(m)
                        if m.node_name:
                            out.victims.setdefault(m.node_name, []).append(m)
        out.waste = waste_report(chosen, self.strict_gang, self.run_seconds)
        out.choice = "wholeGang" if self.whole_strict_gangs else "podLevel"
        failed = []
        for v in evict:
            if v.deletion_timestamp is not None:
                continue  # already being deleted: no second API call
            if not await handle.evict(v, f"preempted by job {job.key} (trigger {job.trigger.key}) on {v.node_name}"):
                failed.append(v.key)
        if failed:  # Koordinator gives up at the first error: nobody is nominated, the next attempt tries again
            out.reason, out.nominations = REASON_PREPARE_ERROR, {}
            out.message = f"{REASON_PREPARE_ERROR}: could not evict {', '.join(failed)}"
            return
        members = {p.uid for p in job.pending} | {p.uid for p, _ in job.waiting}
        for node in sorted(out.victims):
            for p in handle.nominated_pods(node):
                if p.uid not in members and p.priority < job.trigger.priority:
                    handle.nominate(p, None)
        out.message = REASON_SUCCESS.format(len(job.waiting), len(job.pending) + len(job.waiting))
        for p in job.pending:
            handle.nominate(p, out.nominations[p.key])
        for p, node in job.waiting:
            handle.nominate(p, node)

