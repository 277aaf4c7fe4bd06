"""The gang plugin's side of job-level preemption: who the job is (the gang group's pending members and
those waiting at Permit), which pods may be victims (Koordinator's rules, the elastic-quota rule when that
plugin runs), the report rows, and what the round remembers (Koordinator preempts once per round)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koordfw import CycleState, Handle, Pod, PostFilterResult, Status

from .gang import MODE_STRICT, gang_id_of
from .preemption import REASON_ALREADY_PREEMPTED, Evaluator, Job, Outcome

try:  # the quota rule applies only with the elastic_quota plugin installed and in the profile
    from koordfw_elastic_quota import api as quota_api
except ImportError:  # pragma: no cover - an install without it
    quota_api = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .args import CoschedulingArgs
    from .gang import Gang
    from .plugin import Coscheduling, Round

#: how many preemption attempts the report keeps (the latest)
HISTORY = 200


class JobPreemption:
    """Owned by the :class:`~koordfw_gang.plugin.Coscheduling` instance: bind times and the history."""

    def __init__(self) -> None:
        #: uid → when it was bound (post_bind; pods bound before startup: their creation time)
        self.bound_at: dict[str, float] = {}
        self.history: list[dict[str, Any]] = []
        #: set while the dry run runs the profile's pre_filter for other members (gang's own is a no-op then)
        self.dry_run = False

    def strict_gang_of(self, plugin: Coscheduling, handle: Handle, args: CoschedulingArgs
                       ) -> Callable[[Pod], tuple[str, list[Pod]] | None]:
        cluster = handle.cluster

        def strict_gang(pod: Pod) -> tuple[str, list[Pod]] | None:
            gid = gang_id_of(pod)
            g = plugin._gangs.get(gid) if gid else None
            if g is None:
                return None
            g = plugin._init(g, handle, args)
            if g.spec is None or g.spec.mode != MODE_STRICT:
                return None
            members = [p for u in sorted(g.bound) if (p := cluster.pod(u)) is not None and p.node_name]
            return gid, members

        return strict_gang

    def run_seconds(self, handle: Handle) -> Callable[[Pod], float]:
        now = handle.clock.now()

        def run(pod: Pod) -> float:
            start = self.bound_at.get(pod.uid, pod.creation_timestamp if pod.creation_timestamp is not None else now)
            return max(0.0, now - start)

        return run

    def eligible(self, handle: Handle) -> Callable[[Pod, Pod], bool]:
        quota_args = handle.plugin_args("elastic_quota") if quota_api is not None else None
        rule = quota_api.victim_rule(handle.cluster, quota_args) if quota_api is not None and quota_args else None

        def ok(preemptor: Pod, victim: Pod) -> bool:
            return rule is None or rule(preemptor, victim) is None

        return ok

    async def post_filter(self, plugin: Coscheduling, pod: Pod, g: Gang, r: Round | None, state: CycleState,
                          statuses: Mapping[str, Status], args: CoschedulingArgs,
                          handle: Handle) -> tuple[PostFilterResult | None, Status, Outcome]:
        """Preempt for ``pod``'s gang group: (the post_filter result, its status, the outcome)."""
        assert g.spec is not None
        cluster = handle.cluster
        group = plugin._group(g, handle, args)
        pending: list[Pod] = []
        waiting: list[tuple[Pod, str]] = []
        for _, m in group:
            if m is None:
                continue
            for u in sorted(m.children):
                cur = cluster.pod(u)
                if u in m.bound or cur is None or cur.is_terminal:
                    continue
                if u in m.waiting:
                    wp = handle.get_waiting_pod(u)
                    if wp is not None:
                        waiting.append((wp.pod, wp.node_name))
                elif not cur.node_name:
                    pending.append(cur)
        trigger = cluster.pod(pod.uid) or pod
        job = Job(g.spec.group_id, trigger, pending, waiting)
        ev = Evaluator(handle, eligible=self.eligible(handle), gang_of=gang_id_of,
                       strict_gang=self.strict_gang_of(plugin, handle, args), run_seconds=self.run_seconds(handle),
                       whole_strict_gangs=args.evict_whole_strict_gangs)
        self.dry_run = True
        try:
            out = await ev.preempt(job, state, statuses, already=r.preempted if r is not None else "")
        finally:
            self.dry_run = False
        if r is not None and not r.preempted:
            r.preempted = REASON_ALREADY_PREEMPTED.format(trigger.key, out.message)
        if out.ok:
            # the victims' gangs lose them (the embedded engine brings an evicted pod back under its uid)
            hit: dict[str, Gang] = {}
            for vs in out.victims.values():
                for v in vs:
                    vg = plugin._gangs.get(gang_id_of(v))
                    if vg is not None:
                        vg.bound.discard(v.uid)
                        hit[vg.gang_id] = vg
            for vg in hit.values():
                if not vg.bound:  # evicted whole: it must be placed whole again, not member by member
                    vg.once_satisfied = False
            if r is not None:
                r.fail_key = None  # the cluster changed for this job: its next round must not be held back
        if out.reason != REASON_ALREADY_PREEMPTED:
            self._record(job, out, handle)
        result, status = out.result(trigger)
        if status.ok:
            return result, status, out
        return result, Status.unschedulable(f"preemption: {status.message}"), out

    def _record(self, job: Job, out: Outcome, handle: Handle) -> None:
        row: dict[str, Any] = {"job": job.key, "trigger": job.trigger.key, "time": handle.clock.now(),
                               "reason": out.reason.split(",")[0], "message": out.message}
        if out.ok:
            row.update(nominations=dict(sorted(out.nominations.items())), victims=out.victim_keys(),
                       pdbViolations=out.pdb_violations, choice=out.choice, waste=out.waste)
        self.history.append(row)
        del self.history[:-HISTORY]
