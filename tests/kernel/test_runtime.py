"""Each extension point's status semantics, as kube's ``framework/runtime/framework_test.go`` checks them:
Success / Unschedulable / UnschedulableAndUnresolvable / Error / Skip at pre_filter and filter, score
normalisation and weights, reserve then unreserve in reverse order, permit wait / allow / reject /
timeout, pre_bind and bind (Skip passes to the next binder), plugin timeouts, and a raising plugin that
fails only its own pod's cycle. Driven through the kernel's Scheduler (the ``kernel`` fixture); every
expected figure is worked out by hand in the test."""

from __future__ import annotations

import anyio
import numpy as np

from koordfw import PreFilterResult, Status, hookimpl
from koordfw.core.model import make_pod
from koordfw.core.state import CycleState
from koordfw.core.status import Code


def queue_pool(k, pod) -> str:
    q = k.scheduler.queue
    for name in ("active", "backoff", "unschedulable", "in_flight"):
        if pod.uid in getattr(q, name):
            return name
    return "absent"


# -- pre_filter ---------------------------------------------------------------------------------

class PreFilterSays:
    def __init__(self, name: str, result, calls: list[str]) -> None:
        self.name, self.result, self.calls = name, result, calls

    @hookimpl
    def pre_filter(self, pod):
        self.calls.append(f"pre_filter:{self.name}")
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    @hookimpl
    def filter(self, pod, node):
        self.calls.append(f"filter:{self.name}:{node.name}")


def two_prefilters(kernel, first, second, calls):
    return kernel({"a": PreFilterSays("a", first, calls), "b": PreFilterSays("b", second, calls)})


async def test_pre_filter_success_runs_the_filters(kernel):
    calls: list[str] = []
    k = two_prefilters(kernel, None, None, calls)
    p = make_pod("p", requests={"cpu": "1"})
    out = await k.run(p)
    assert out.bound == {"p": "n0"}
    assert calls == ["pre_filter:a", "pre_filter:b", "filter:a:n0", "filter:b:n0"]


async def test_pre_filter_unschedulable_rejects_the_pod_but_the_others_run(kernel):
    calls: list[str] = []
    k = two_prefilters(kernel, Status.unschedulable("not now"), None, calls)
    p = make_pod("p")
    out = await k.run(p)
    st = out.failed["p"]
    assert (st.code, st.plugin, st.reasons) == (Code.UNSCHEDULABLE, "a", ("not now",))
    assert calls == ["pre_filter:a", "pre_filter:b"]  # no filter ran
    assert queue_pool(k, p) == "unschedulable"


async def test_pre_filter_unresolvable_stops_at_once(kernel):
    calls: list[str] = []
    k = two_prefilters(kernel, Status.unresolvable("never here"), None, calls)
    p = make_pod("p")
    out = await k.run(p)
    st = out.failed["p"]
    assert (st.code, st.plugin) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "a")
    assert calls == ["pre_filter:a"]
    assert queue_pool(k, p) == "unschedulable"


async def test_pre_filter_error_stops_at_once_and_backs_off(kernel):
    calls: list[str] = []
    k = two_prefilters(kernel, RuntimeError("boom"), None, calls)
    p = make_pod("p")
    out = await k.run(p)
    st = out.failed["p"]
    assert st.code == Code.ERROR and st.plugin == "a"
    assert st.message == "plugin a raised RuntimeError in pre_filter: boom"
    assert calls == ["pre_filter:a"]
    assert queue_pool(k, p) == "backoff"


async def test_pre_filter_skip_disables_that_plugins_filter(kernel):
    calls: list[str] = []
    k = two_prefilters(kernel, Status.skip(), None, calls)
    out = await k.run(make_pod("p"))
    assert out.bound == {"p": "n0"}
    assert calls == ["pre_filter:a", "pre_filter:b", "filter:b:n0"]


async def test_pre_filter_results_intersect_the_candidate_nodes(kernel):
    calls: list[str] = []
    k = kernel({"a": PreFilterSays("a", PreFilterResult(frozenset({"n1", "n2"})), calls),
                "b": PreFilterSays("b", PreFilterResult(frozenset({"n2", "n3"})), calls)},
               nodes={"n0": "4", "n1": "4", "n2": "4", "n3": "4"})
    out = await k.run(make_pod("p"))
    assert out.bound == {"p": "n2"}
    assert [c for c in calls if c.startswith("filter:a")] == ["filter:a:n2"]


# -- filter -------------------------------------------------------------------------------------

class RejectNodes:
    def __init__(self, rejections: dict[str, Status]) -> None:
        self.rejections = rejections

    @hookimpl
    def filter(self, pod, node):
        return self.rejections.get(node.name)


async def test_filter_rejections_leave_the_other_nodes(kernel):
    k = kernel({"r": RejectNodes({"n0": Status.unschedulable("no")})}, nodes={"n0": "4", "n1": "4"})
    out = await k.run(make_pod("p"))
    assert out.bound == {"p": "n1"}


async def test_every_node_rejected_gives_kubes_fit_error(kernel):
    k = kernel({"r": RejectNodes({"n0": Status.unschedulable("too cold"), "n1": Status.unschedulable("too cold"),
                                  "n2": Status.unresolvable("wrong zone")})},
               nodes={"n0": "4", "n1": "4", "n2": "4"})
    p = make_pod("p")
    out = await k.run(p)
    st = out.failed["p"]
    assert st.code == Code.UNSCHEDULABLE  # Unresolvable only when every node's rejection is
    assert st.message == "0/3 nodes are available: 2 too cold, 1 wrong zone."
    assert st.plugin == "r"
    assert queue_pool(k, p) == "unschedulable"


async def test_every_node_unresolvable_is_unresolvable(kernel):
    k = kernel({"r": RejectNodes({"n0": Status.unresolvable("wrong zone"), "n1": Status.unresolvable("wrong zone")})},
               nodes={"n0": "4", "n1": "4"})
    out = await k.run(make_pod("p"))
    assert out.failed["p"].code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert out.failed["p"].message == "0/2 nodes are available: 2 wrong zone."


async def test_the_resource_fit_counts_what_is_already_requested(kernel):
    k = kernel(nodes={"n0": "4"})
    out = await k.run(make_pod("a", requests={"cpu": "3"}), make_pod("b", requests={"cpu": "2"}))
    assert out.bound == {"a": "n0"}
    assert out.failed["b"].message == "0/1 nodes are available: 1 Insufficient cpu."


class RaisesFor:
    """Raises in ``point`` for the pod named ``victim`` only."""

    def __init__(self, victim: str) -> None:
        self.victim = victim

    @hookimpl
    def filter(self, pod, node):
        if pod.name == self.victim:
            raise ValueError("bad pod")


async def test_a_raising_filter_fails_only_that_pods_cycle(kernel):
    k = kernel({"x": RaisesFor("bad")})
    bad, good = make_pod("bad", priority=10), make_pod("good", priority=0)
    out = await k.run(bad, good)
    assert out.bound == {"good": "n0"}
    st = out.failed["bad"]
    assert (st.code, st.plugin) == (Code.ERROR, "x")
    assert st.message == "plugin x raised ValueError in filter: bad pod"
    assert queue_pool(k, bad) == "backoff"


class Sleeps:
    @hookimpl
    async def filter(self, pod, nodes):
        await anyio.sleep(60)


async def test_a_plugin_over_its_timeout_is_an_error(kernel):
    k = kernel({"slow": Sleeps()}, profile={"pluginTimeoutSeconds": 0.05})
    out = await k.run(make_pod("p"))
    st = out.failed["p"]
    assert (st.code, st.plugin) == (Code.ERROR, "slow")
    assert st.message == "plugin slow timed out after 0.05s in filter"


# -- score --------------------------------------------------------------------------------------

class RawScores:
    """Scores 5 and 10 (out of range until normalised), normalised ×10."""

    @hookimpl
    def score(self, pod, nodes):
        return {"n0": 5, "n1": 10}

    @hookimpl
    def normalize_score(self, scores):
        return scores * 10


class Prefers:
    def __init__(self, scores: dict[str, int]) -> None:
        self.scores = scores

    @hookimpl
    def score(self, pod, node):  # the per-node form
        return self.scores[node.name]


def score_kernel(kernel, plugins, enabled):
    return kernel(plugins, nodes={"n0": "4", "n1": "4"}, builtins=frozenset({"default_binder"}),
                  profile={"plugins": {"score": {"enabled": enabled}}})


async def test_scores_are_normalised_then_weighted(kernel):
    k = score_kernel(kernel, {"raw": RawScores(), "pref": Prefers({"n0": 30, "n1": 0})},
                     [{"name": "raw", "weight": 2}, {"name": "pref", "weight": 1}])
    fw = k.scheduler.framework
    st, total, top = await fw.run_score(make_pod("p"), CycleState(), np.array([0, 1]))
    # raw: 5, 10 → ×10 → 50, 100 → ×2 → 100, 200; pref: 30, 0 → ×1; sum 130, 200; top 100×2 + 100×1
    assert st.ok
    assert total.tolist() == [130, 200]
    assert top == 300


async def test_the_highest_total_wins(kernel):
    k = score_kernel(kernel, {"raw": RawScores(), "pref": Prefers({"n0": 100, "n1": 0})},
                     [{"name": "raw", "weight": 1}, {"name": "pref", "weight": 1}])
    out = await k.run(make_pod("p"))
    assert out.bound == {"p": "n0"}  # n0: 50 + 100 = 150, n1: 100 + 0 = 100


async def test_a_score_outside_0_100_after_normalising_is_an_error(kernel):
    k = score_kernel(kernel, {"pref": Prefers({"n0": 101, "n1": 0})}, [{"name": "pref", "weight": 1}])
    st, _, _ = await k.scheduler.framework.run_score(make_pod("p"), CycleState(), np.array([0, 1]))
    assert (st.code, st.plugin) == (Code.ERROR, "pref")
    assert st.message == "plugin pref returned a score of 101, outside [0, 100]"


class SkipsScore(Prefers):
    @hookimpl
    def pre_score(self, pod):
        return Status.skip()


async def test_pre_score_skip_disables_that_plugins_score(kernel):
    k = score_kernel(kernel, {"skipped": SkipsScore({"n0": 100, "n1": 0}), "pref": Prefers({"n0": 0, "n1": 40})},
                     [{"name": "skipped", "weight": 1}, {"name": "pref", "weight": 1}])
    st, total, top = await k.scheduler.framework.run_score(make_pod("p"), CycleState(), np.array([0, 1]))
    assert st.ok
    assert total.tolist() == [0, 40]
    assert top == 100


# -- reserve / unreserve --------------------------------------------------------------------------

class Reserver:
    def __init__(self, name: str, calls: list[str], fail: bool = False) -> None:
        self.name, self.calls, self.fail = name, calls, fail

    @hookimpl
    def reserve(self, pod, node):
        self.calls.append(f"reserve:{self.name}")
        return Status.unschedulable("no room in the reservation") if self.fail else None

    @hookimpl
    def unreserve(self, pod, node):
        self.calls.append(f"unreserve:{self.name}")


async def test_a_failed_reserve_unreserves_every_plugin_in_reverse_order(kernel):
    calls: list[str] = []
    k = kernel({"r1": Reserver("r1", calls), "r2": Reserver("r2", calls, fail=True), "r3": Reserver("r3", calls)})
    p = make_pod("p", requests={"cpu": "3"})
    out = await k.run(p)
    assert calls == ["reserve:r1", "reserve:r2", "unreserve:r3", "unreserve:r2", "unreserve:r1"]
    st = out.failed["p"]
    assert (st.code, st.plugin, st.reasons) == (Code.UNSCHEDULABLE, "r2", ("no room in the reservation",))
    # the assumed pod was forgotten: the node's 4 cpus are all free again
    assert k.cluster.node("n0").free("cpu") == 4000
    assert out.binds == []


async def test_a_successful_cycle_does_not_unreserve(kernel):
    calls: list[str] = []
    k = kernel({"r1": Reserver("r1", calls), "r2": Reserver("r2", calls)})
    out = await k.run(make_pod("p"))
    assert out.bound == {"p": "n0"}
    assert calls == ["reserve:r1", "reserve:r2"]


# -- permit -------------------------------------------------------------------------------------

class Permit:
    def __init__(self, result, calls: list[str] | None = None) -> None:
        self.result, self.calls = result, calls if calls is not None else []

    @hookimpl
    def permit(self, pod, node):
        return self.result

    @hookimpl
    def unreserve(self, pod, node):
        self.calls.append(f"unreserve:{pod.name}")


async def test_permit_rejection_unreserves(kernel):
    calls: list[str] = []
    k = kernel({"gate": Permit(Status.unschedulable("not all members"), calls)})
    out = await k.run(make_pod("p", requests={"cpu": "1"}))
    assert (out.failed["p"].code, out.failed["p"].plugin) == (Code.UNSCHEDULABLE, "gate")
    assert calls == ["unreserve:p"]
    assert k.cluster.node("n0").free("cpu") == 4000


async def test_permit_skip_is_an_error(kernel):
    k = kernel({"gate": Permit(Status.skip())})
    out = await k.run(make_pod("p"))
    assert out.failed["p"].code == Code.ERROR
    assert out.failed["p"].message == "plugin gate returned SKIP from permit"


async def test_a_waiting_pod_binds_once_allowed(kernel):
    k = kernel({"gate": Permit(Status.wait(30.0))})
    p = make_pod("p", requests={"cpu": "1"})
    await k.add(p)
    handle = k.scheduler.handle_for("gate")
    async with anyio.create_task_group() as tg:
        await k.scheduler.schedule_next(tg)
        wp = handle.get_waiting_pod(p.uid)
        assert wp is not None and wp.pending_plugins == ["gate"]
        assert k.cluster.node("n0").free("cpu") == 3000  # the room stays reserved while it waits
        wp.allow("gate")
    assert k.engine.bound == {"p": "n0"}
    assert handle.get_waiting_pod(p.uid) is None


async def test_a_waiting_pod_rejected_by_a_plugin_is_unreserved(kernel):
    calls: list[str] = []
    k = kernel({"gate": Permit(Status.wait(30.0), calls)})
    p = make_pod("p", requests={"cpu": "1"})
    await k.add(p)
    async with anyio.create_task_group() as tg:
        await k.scheduler.schedule_next(tg)
        assert k.scheduler.handle_for("gate").reject_waiting_pod(p.uid, "gang timed out")
    st = k.engine.failed["p"]
    assert (st.code, st.plugin, st.reasons) == (Code.UNSCHEDULABLE, "gate", ("gang timed out",))
    assert calls == ["unreserve:p"]
    assert k.cluster.node("n0").free("cpu") == 4000


async def test_a_waiting_pod_times_out_on_the_clock(kernel):
    calls: list[str] = []
    k = kernel({"gate": Permit(Status.wait(5.0), calls)})
    p = make_pod("p", requests={"cpu": "1"})
    await k.add(p)
    async with anyio.create_task_group() as tg:
        await k.scheduler.schedule_next(tg)
        k.clock.advance(4.999)
        await anyio.sleep(0)
        assert "p" not in k.engine.failed
        k.clock.advance(0.001)
    st = k.engine.failed["p"]
    assert st.code == Code.UNSCHEDULABLE
    assert st.message == "rejected due to timeout after waiting 5s at plugin gate"
    assert calls == ["unreserve:p"]


# -- pre_bind / bind ------------------------------------------------------------------------------

class PreBind:
    def __init__(self, result) -> None:
        self.result = result

    @hookimpl
    def pre_bind(self, pod, node):
        return self.result


async def test_pre_bind_annotations_reach_the_binder(kernel):
    k = kernel({"pb": PreBind({"example.com/disk": "ready"})})
    p = make_pod("p")
    out = await k.run(p)
    assert out.bound == {"p": "n0"}
    assert k.cluster.pod(p.uid).annotations["example.com/disk"] == "ready"


async def test_pre_bind_failure_is_an_error_and_unreserves(kernel):
    k = kernel({"pb": PreBind("volume not attached")})
    p = make_pod("p", requests={"cpu": "1"})
    out = await k.run(p)
    st = out.failed["p"]
    assert (st.code, st.plugin, st.reasons) == (Code.ERROR, "pb", ("volume not attached",))
    assert out.binds == []
    assert k.cluster.node("n0").free("cpu") == 4000
    assert queue_pool(k, p) == "backoff"


class Binder:
    def __init__(self, result, calls: list[str], name: str) -> None:
        self.result, self.calls, self.name = result, calls, name

    @hookimpl
    def bind(self, pod, node):
        self.calls.append(self.name)
        return self.result


def binders(kernel, first, calls):
    """``first`` binds before the default binder (the profile puts it first)."""
    return kernel({"first": Binder(first, calls, "first")},
                  profile={"plugins": {"bind": {"enabled": [{"name": "first"}, {"name": "default_binder"}]}}})


async def test_a_binder_returning_skip_passes_to_the_next(kernel):
    calls: list[str] = []
    out = await binders(kernel, Status.skip(), calls).run(make_pod("p"))
    assert calls == ["first"]
    assert out.binds == [("p", "n0")]
    assert out.bound == {"p": "n0"}


async def test_a_binder_returning_none_passes_to_the_next(kernel):
    calls: list[str] = []
    out = await binders(kernel, None, calls).run(make_pod("p"))
    assert out.binds == [("p", "n0")]


async def test_a_binder_that_binds_ends_the_point(kernel):
    calls: list[str] = []
    out = await binders(kernel, True, calls).run(make_pod("p"))
    assert calls == ["first"]
    assert out.binds == []  # the default binder was not called
    assert out.bound == {"p": "n0"}


async def test_a_binder_failure_fails_the_binding(kernel):
    calls: list[str] = []
    out = await binders(kernel, Status.error("api down"), calls).run(make_pod("p"))
    st = out.failed["p"]
    assert (st.code, st.plugin, st.reasons) == (Code.ERROR, "first", ("api down",))
    assert out.binds == []


async def test_no_binder_is_an_error(kernel):
    k = kernel(builtins=frozenset({"priority_sort", "node_resources_fit"}))
    out = await k.run(make_pod("p"))
    assert out.failed["p"].code == Code.ERROR
    assert out.failed["p"].message == "no bind plugin bound the pod"
