"""Koordinator's job-level preemption table (``pkg/scheduler/plugins/coscheduling/core/preemption_test.go``,
``Test_preemptionEvaluatorImpl_preempt``) run against :class:`koordfw_gang.preemption.Evaluator` on the
embedded engine's cluster: two 32-CPU nodes, four 16-CPU pods already running, gang ``gangA`` of 16-CPU
members. Each case checks the reason and message Koordinator's test expects, the PostFilter answer, the
possible victims, the victims (gone from their nodes afterwards) and the nominations of the job's pods."""

from __future__ import annotations

import anyio
import attrs
import pytest
from gang_testkit import ts
from koordfw_gang.preemption import (
    REASON_ALREADY_PREEMPTED,
    REASON_NO_PENDING_PODS,
    REASON_NOT_HELPFUL,
    REASON_POLICY_NEVER,
    REASON_SUCCESS,
    REASON_TERMINATING_VICTIM,
    Evaluator,
    Job,
)

from koordfw import CycleState, Status
from koordfw.core.cluster import ClusterState
from koordfw.embed import build_registry
from koordfw.engines.embedded import EmbeddedEngine
from koordfw.testing import ClusterBuilder

HIGH, LOW = 1000, 1
PG = "pod-group.scheduling.sigs.k8s.io"
START = 1793491200.0


def manifest(name: str, *, priority: int | None = None, node: str | None = None, nominated: str | None = None,
             gang: bool = False, never: bool = False, terminating: bool = False) -> dict:
    spec: dict = {"containers": [{"name": "main", "resources": {"requests": {"cpu": "16"}}}]}
    if priority is not None:
        spec["priority"] = priority
    if node:
        spec["nodeName"] = node
    if never:
        spec["preemptionPolicy"] = "Never"
    meta: dict = {"name": name, "namespace": "default", "uid": name, "creationTimestamp": ts(0),
                  "labels": {PG: "gangA"} if gang else {}}
    status: dict = {"phase": "Running" if node else "Pending"}
    if nominated:
        status["nominatedNodeName"] = nominated
    if terminating:
        meta["deletionTimestamp"] = ts(5)
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def existing(*, priority: int, skip: tuple[int, ...] = (), terminating_first: bool = False) -> list[dict]:
    return [manifest(f"existing-pod-{i}", priority=priority, node=f"node-{(i + 1) // 2}",
                     terminating=terminating_first and i == 1)
            for i in (1, 2, 3, 4) if i not in skip]


CASES = {
    "already preempted": dict(
        trigger=manifest("trigger-pod", gang=True), pending=[], existing=[],
        already="preemption already attempted by default/trigger-pod-1 with message",
        reason=REASON_ALREADY_PREEMPTED, message="preemption already attempted by default/trigger-pod-1 with message",
        result=None, ok=False),
    "no pending pods": dict(
        trigger=manifest("trigger-pod", gang=True), pending=[], existing=existing(priority=0),
        reason=REASON_NO_PENDING_PODS, message="no pending pods", result=None, ok=False),
    "job not eligible due to preemption policy": dict(
        trigger=manifest("pending-pod-1", gang=True, never=True),
        pending=[manifest("pending-pod-1", gang=True, never=True), manifest("pending-pod-2", gang=True)],
        existing=existing(priority=0),
        reason=REASON_POLICY_NEVER, message="not eligible due to preemptionPolicy=Never.", result=None, ok=False),
    "job not eligible due to terminating pod": dict(
        trigger=manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
        pending=[manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
                 manifest("pending-pod-2", gang=True, priority=HIGH, nominated="node-1")],
        existing=existing(priority=LOW, terminating_first=True),
        reason=REASON_TERMINATING_VICTIM, message="not eligible due to terminating pod on the nominated node.",
        terminating={"default/existing-pod-1": "node-1"}, result=None, ok=False),
    "unschedulableAndUnResolvable": dict(
        trigger=manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
        pending=[manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
                 manifest("pending-pod-2", gang=True, priority=HIGH, nominated="node-1")],
        existing=existing(priority=HIGH), unresolvable=True,
        reason=REASON_NOT_HELPFUL, message="0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        result="", ok=False),
    "no potential victims": dict(
        trigger=manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
        pending=[manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
                 manifest("pending-pod-2", gang=True, priority=HIGH, nominated="node-1")],
        existing=existing(priority=HIGH),
        reason=REASON_NOT_HELPFUL, message="0/2 nodes are available: 2 no potential victims.", result="", ok=False),
    "preempt success": dict(
        trigger=manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
        pending=[manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-2"),
                 manifest("pending-pod-2", gang=True, priority=HIGH, nominated="node-1")],
        existing=existing(priority=LOW),
        reason=REASON_SUCCESS, message="preempt success, alreadyWaitingForBound: 0/2", result="node-1", ok=True,
        nominations={"default/pending-pod-1": "node-1", "default/pending-pod-2": "node-1"},
        possible=["existing-pod-1", "existing-pod-2", "existing-pod-3", "existing-pod-4"],
        victims=["existing-pod-1", "existing-pod-2"],
        job_pods={"pending-pod-1": "node-1", "pending-pod-2": "node-1"}),
    "preempt success with one waiting pod": dict(
        trigger=manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-1"),
        pending=[manifest("pending-pod-1", gang=True, priority=HIGH, nominated="node-2")],
        waiting=[manifest("pending-pod-2", gang=True, priority=HIGH, node="node-2")],
        existing=existing(priority=LOW, skip=(3,)),
        reason=REASON_SUCCESS, message="preempt success, alreadyWaitingForBound: 1/2", result="node-1", ok=True,
        nominations={"default/pending-pod-1": "node-1"},
        possible=["existing-pod-1", "existing-pod-2", "existing-pod-4"], victims=["existing-pod-2"],
        job_pods={"pending-pod-1": "node-1", "pending-pod-2": "node-2"}),
}


async def _run(case: dict):
    b = ClusterBuilder().node("node-1", cpu="32").node("node-2", cpu="32")
    trigger_m, pending_m, waiting_m = case["trigger"], case["pending"], case.get("waiting", [])
    objs = list(case["existing"]) + list(waiting_m)
    objs += [m for m in pending_m if m["metadata"]["name"] != trigger_m["metadata"]["name"]] + [trigger_m]
    b.obj(*objs)
    cl = ClusterState()
    engine = EmbeddedEngine(build_registry(only=set()), cl, start_time=START + 60)
    b.build().to_cluster(cl)
    s = engine.scheduler
    handle = s.handle_for("default_preemption")
    for p in cl.all_pods():
        if p.nominated_node_name and not p.node_name:
            handle.nominate(p, p.nominated_node_name)
    trigger = cl.pod_by_key(f"default/{trigger_m['metadata']['name']}")
    by_name = {p.name: p for p in cl.all_pods()}
    # the pending pods as the gang cache holds them (the trigger's own object may differ, as in the Go test)
    pending = [attrs.evolve(by_name[m["metadata"]["name"]],
                            nominated_node_name=(m.get("status") or {}).get("nominatedNodeName"))
               for m in pending_m]
    waiting = [(by_name[m["metadata"]["name"]], m["spec"]["nodeName"]) for m in waiting_m]
    state = CycleState()
    if case.get("unresolvable"):
        statuses = {n: Status.unresolvable("fake filter") for n in ("node-1", "node-2")}
    else:
        st, _ = await handle.run_pre_filters(trigger, state)
        assert st.ok
        statuses = {}
        for n in ("node-1", "node-2"):
            r = await handle.run_filters(trigger, n, state)
            if not r.ok:
                statuses[n] = r
    ev = Evaluator(handle, eligible=lambda a, b: True, gang_of=lambda p: "", strict_gang=lambda p: None,
                   run_seconds=lambda p: 0.0)
    out = await ev.preempt(Job("default/gangA,default/gangB", trigger, pending, waiting), state, statuses,
                           already=case.get("already", ""))
    return out, trigger, cl, s


@pytest.mark.parametrize("name", list(CASES))
def test_preemption_evaluator_preempt(name):
    """Koordinator's ``Test_preemptionEvaluatorImpl_preempt``, case by case."""
    case = CASES[name]
    out, trigger, cl, s = anyio.run(_run, case)
    assert out.reason == case["reason"]
    assert out.message == case["message"]
    assert out.ok is case["ok"]
    result, status = out.result(trigger)
    if case["result"] is None:
        assert result is None
    else:
        assert result is not None and result.nominated_node == case["result"]
    assert status.ok is case["ok"]
    if not case["ok"]:
        assert status.message == case["message"]
    assert out.terminating == case.get("terminating", {})
    assert out.nominations == case.get("nominations", {})
    got_possible = sorted(v.name for vs in out.possible_victims.values() for v in vs)
    assert got_possible == case.get("possible", [])
    assert sorted(v.name for vs in out.victims.values() for v in vs) == case.get("victims", [])
    for v in case.get("victims", []):  # evicted: off its node (the embedded engine requeues it pending)
        assert not cl.pod_by_key(f"default/{v}").node_name
    for pod_name, node in case.get("job_pods", {}).items():
        assert pod_name in {p.name for p in s.nominator.nominated_pods(node)}
