"""default_preemption: kube-scheduler's DefaultPreemption as a post_filter plugin.

For a pod that fits nowhere, it looks for nodes where evicting lower-priority pods makes room:
candidates are nodes rejected as Unschedulable (not Unresolvable), visited from a random offset until
``max(numNodes * minCandidateNodesPercentage / 100, minCandidateNodesAbsolute)`` candidates are found.
Victims per node are chosen as ``SelectVictimsOnNode`` does (remove every lower-priority pod; reprieve
the most important ones first, PDB-violating before the rest), telling the plugins' pre_filter state of each
pod removed or put back through the pre_filter extensions (kube's ``RunPreFilterExtensionRemovePod`` /
``AddPod``: elastic_quota releases a victim's quota usage); the node is chosen by
``pickOneNodeForPreemption``'s criteria. ``preemptionPolicy: Never`` pods do not preempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koordfw import Code, CycleState, Handle, Pod, PostFilterResult, Status, hookimpl
from koordfw.inputs import selector_matches


@attrs.define
class Args:
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


@hookimpl
def plugin_args() -> type[Args]:
    return Args


def _sort_key(p: Pod) -> tuple[int, float, str]:
    return (-p.priority, p.creation_timestamp or 0.0, p.key)


def split_by_pdb(pods: Iterable[Pod], pdbs: Mapping[str, dict[str, Any]]) -> tuple[list[Pod], list[Pod]]:
    """(violating, non_violating): a pod violates when a matching PDB has no disruptions left."""
    allowed = {}
    for key, pdb in pdbs.items():
        st = pdb.get("status") or {}
        allowed[key] = int(st.get("disruptionsAllowed", 0))
    violating: list[Pod] = []
    ok: list[Pod] = []
    for p in pods:
        hit = False
        for key, pdb in pdbs.items():
            if (pdb.get("metadata") or {}).get("namespace", "default") != p.namespace:
                continue
            if selector_matches((pdb.get("spec") or {}).get("selector"), p.labels):
                allowed[key] -= 1
                if allowed[key] < 0:
                    hit = True
        (violating if hit else ok).append(p)
    return violating, ok


async def select_victims_on_node(pod: Pod, node_name: str, state: CycleState,
                                 handle: Handle) -> tuple[list[Pod], int] | None:
    """kube's SelectVictimsOnNode, in a clone of ``state``: every lower-priority pod is taken off the node and
    out of the plugins' pre_filter state (``run_pre_filter_extension_remove_pod``: e.g. its quota usage
    released); if the pod then fits, each is put back (``..._add_pod``), most important first, and stays
    unless the pod no longer fits. (victims, how many of them a PDB protects), or None."""
    cluster = handle.cluster
    lower = [p for p in cluster.pods_on(node_name) if p.priority < pod.priority]
    if not lower:
        return None
    st = state.clone()
    for p in lower:
        if not (await handle.run_pre_filter_extension_remove_pod(pod, st, p, node_name)).ok:
            return None
    with handle.without_pods(node_name, lower):
        if not (await handle.run_filters(pod, node_name, st)).ok:
            return None
    lower.sort(key=_sort_key)
    violating, ok = split_by_pdb(lower, cluster.objects_of("PodDisruptionBudget"))
    victims = list(lower)
    pdb_violations = 0
    for group, is_violating in ((violating, True), (ok, False)):
        for p in group:
            if not (await handle.run_pre_filter_extension_add_pod(pod, st, p, node_name)).ok:
                return None
            trial = [v for v in victims if v.uid != p.uid]
            with handle.without_pods(node_name, trial):
                fits = (await handle.run_filters(pod, node_name, st)).ok
            if fits:
                victims = trial
                continue
            if not (await handle.run_pre_filter_extension_remove_pod(pod, st, p, node_name)).ok:
                return None
            if is_violating:
                pdb_violations += 1
    return victims, pdb_violations


def pick_one_node(candidates: list[tuple[str, tuple[list[Pod], int]]]) -> str:
    """kube's pickOneNodeForPreemption, criteria in order."""
    def key(item: tuple[str, tuple[list[Pod], int]]) -> tuple[Any, ...]:
        name, (victims, viol) = item
        if not victims:
            return (0, 0, 0, 0, 0, name)
        top = max(v.priority for v in victims)
        latest_start_of_top = max((v.creation_timestamp or 0.0) for v in victims if v.priority == top)
        return (viol, top, sum(v.priority for v in victims), len(victims), -latest_start_of_top, name)

    for name, (victims, _) in candidates:
        if not victims:
            return name
    return min(candidates, key=key)[0]


@hookimpl
async def post_filter(pod: Pod, state: CycleState, statuses: Mapping[str, Status], args: Args,
                      handle: Handle) -> PostFilterResult | Status | None:
    if pod.preemption_policy == "Never":
        return Status.unresolvable("not eligible for preemption: preemptionPolicy is Never")
    names = [n for n, st in statuses.items() if st.code == Code.UNSCHEDULABLE]
    if not names:
        return None
    names.sort(key=lambda n: handle.cluster.node_index(n) or 0)
    num = len(names) * args.min_candidate_nodes_percentage // 100
    num = min(max(num, args.min_candidate_nodes_absolute), len(names))
    offset = int(handle.rng.integers(len(names)))
    lowest = handle.cluster.lowest_named_priority()
    if lowest is None or lowest >= pod.priority:
        # no running pod of lower priority anywhere: no node has victims (what the search below
        # would find; the offset is drawn first, so the random stream is the same)
        return Status.unschedulable("preemption: no node where evicting lower-priority pods helps")
    found = []
    for k in range(len(names)):
        name = names[(offset + k) % len(names)]
        res = await select_victims_on_node(pod, name, state, handle)
        if res is not None:
            found.append((name, res))
            if len(found) >= num:
                break
    if not found:
        return Status.unschedulable("preemption: no node where evicting lower-priority pods helps")
    node = pick_one_node(found)
    victims = dict(found)[node][0]
    for v in victims:
        await handle.evict(v, f"preempted by {pod.key} on {node}")
    # kube's prepareCandidate: pods of lower priority nominated to that node lose the nomination (the
    # room they were promised is the preemptor's now); they look for another node on their next try
    for p in handle.nominated_pods(node):
        if p.uid != pod.uid and p.priority < pod.priority:
            handle.nominate(p, None)
    return PostFilterResult(node)
