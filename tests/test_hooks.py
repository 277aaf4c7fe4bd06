"""One test per hook point (``test_hook_<name>``), each through the engine that calls it."""

from __future__ import annotations

import anyio
import attrs
import numpy as np
import pytest

from koordfw import Migration, PostFilterResult, PreFilterResult, Status, hookimpl
from koordfw.core.caller import HookCaller
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing import ClusterBuilder, schedule


def small(n_nodes=3, **node_kw):
    b = ClusterBuilder()
    for i in range(n_nodes):
        b.node(f"n{i}", **node_kw)
    return b


# -- lifecycle -------------------------------------------------------------------------------------

def test_hook_plugin_args():
    @attrs.define
    class Args:
        preferred_node: str = "n0"
        bonus_weight: int = 1

    class Prefer:
        @hookimpl
        def plugin_args(self):
            return Args

        @hookimpl
        def score(self, nodes, args):
            return {n.name: 100 if n.name == args.preferred_node else 0 for n in nodes}

    r = schedule(small().pod("p", cpu="1"), plugins={"prefer": Prefer()},
                 profile={"pluginConfig": {"prefer": {"preferredNode": "n2"}}})
    assert r.placements() == {"default/p": "n2"}


def test_hook_startup_and_shutdown():
    calls = []

    class Life:
        @hookimpl
        async def startup(self, handle):
            calls.append(("startup", len(handle.cluster.nodes)))

        @hookimpl
        def shutdown(self):
            calls.append(("shutdown",))

    schedule(small(2).pod("p", cpu="1"), plugins={"life": Life()})
    assert calls == [("startup", 2), ("shutdown",)]


def test_hook_report():
    class Rep:
        @hookimpl
        def report(self, handle):
            return {"bound_by_report": sorted(p.name for p in handle.cluster.all_pods() if p.node_name)}

    r = schedule(small().pod("a", cpu="1").pod("b", cpu="1"), plugins={"rep": Rep()})
    assert r.to_dict()["bound_by_report"] == ["a", "b"]


def test_hook_shutdown_is_called_even_for_unschedulable_runs():
    seen = []

    class S:
        @hookimpl
        def shutdown(self):
            seen.append(True)

    schedule(small(1, cpu="1").pod("big", cpu="4"), plugins={"s": S()})
    assert seen == [True]


# -- scheduling cycle --------------------------------------------------------------------------------

def test_hook_queue_sort():
    order = []

    class Rev:  # schedules pods in reverse name order, replacing priority_sort
        @hookimpl
        def queue_sort(self, pod):
            return tuple(-ord(c) for c in pod.name)

        @hookimpl
        def reserve(self, pod):
            order.append(pod.name)

    schedule(small().pod("a", cpu="1").pod("b", cpu="1").pod("c", cpu="1"), plugins={"rev": Rev()},
             profile={"disable": ["priority_sort"]})
    assert order == ["c", "b", "a"]


def test_hook_queue_sort_default_is_priority_then_arrival():
    order = []

    class Rec:
        @hookimpl
        def reserve(self, pod):
            order.append(pod.name)

    b = small().pod("low", cpu="1", priority=1).pod("high", cpu="1", priority=100).pod("low2", cpu="1", priority=1)
    schedule(b, plugins={"rec": Rec()})
    assert order == ["high", "low", "low2"]


def test_hook_pre_enqueue():
    class Gate:
        @hookimpl
        def pre_enqueue(self, pod, handle):
            # "b" waits until "a" exists bound somewhere
            if pod.name == "b" and not any(p.node_name for p in handle.cluster.all_pods() if p.name == "a"):
                return "waiting for a"
            if pod.name == "never":
                return Status.unschedulable("gated forever")
            return None

    r = schedule(small().pod("b", cpu="1").pod("a", cpu="1").pod("never", cpu="1"), plugins={"gate": Gate()})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert d["a"]["phase"] == "Bound" and d["b"]["phase"] == "Bound"
    assert d["never"]["phase"] == "Pending" and "gated forever" in d["never"]["reason"]


def test_hook_pre_filter_result_restricts_nodes_and_skip_disables_filter():
    class OnlyN1:
        @hookimpl
        def pre_filter(self, pod):
            return PreFilterResult(frozenset({"n1"}))

    r = schedule(small().pod("p", cpu="1"), plugins={"only": OnlyN1()})
    assert r.placements() == {"default/p": "n1"}

    class SkipMe:
        @hookimpl
        def pre_filter(self):
            return Status.skip()

        @hookimpl
        def filter(self, nodes):
            return {n.name: "never runs" for n in nodes}

    r = schedule(small().pod("p", cpu="1"), plugins={"skipme": SkipMe()})
    assert r.placements()["default/p"] is not None


def test_hook_pre_filter_rejection_names_plugin():
    class Deny:
        @hookimpl
        def pre_filter(self, pod):
            return Status.unresolvable("quota exhausted")

    r = schedule(small().pod("p", cpu="1"), plugins={"deny": Deny()})
    pod = r.to_dict()["pods"][0]
    assert pod["phase"] == "Pending" and pod["reason"] == "quota exhausted"


def test_hook_filter_batch_per_node_and_mask_forms():
    class Batch:
        @hookimpl
        def filter(self, nodes):
            return {n.name: "n0 is reserved" for n in nodes if n.name == "n0"}

    class PerNode:
        @hookimpl
        def filter(self, node):
            return "n1 is draining" if node.name == "n1" else None

    class Mask:
        @hookimpl
        def filter(self, nodes):
            return np.array([n.name != "n3" for n in nodes]), Status.unresolvable("n3 is broken")

    b = small(5)
    for i in range(5):
        b.pod(f"p{i}", cpu="1")
    r = schedule(b, plugins={"batch": Batch(), "pernode": PerNode(), "mask": Mask()})
    assert set(r.placements().values()) == {"n2", "n4"}

    # n2 is too small, every other node is rejected by one of the three plugins
    b = ClusterBuilder().node("n0").node("n1").node("n2", cpu="1").node("n3").pod("p", cpu="2")
    r = schedule(b, plugins={"batch": Batch(), "pernode": PerNode(), "mask": Mask()})
    reason = r.to_dict()["pods"][0]["reason"]
    for part in ("n0 is reserved", "n1 is draining", "n3 is broken", "Insufficient cpu"):
        assert part in reason


def test_hook_post_filter():
    calls = []

    class Post:
        @hookimpl
        def post_filter(self, pod, statuses):
            calls.append((pod.name, sorted(statuses)))
            return None

    schedule(small(2, cpu="1").pod("big", cpu="8"), plugins={"post": Post()}, profile={"disable": ["default_preemption"]})
    assert calls == [("big", ["n0", "n1"])]


def test_hook_pre_score_skip_disables_score():
    class Skipper:
        @hookimpl
        def pre_score(self):
            return Status.skip()

        @hookimpl
        def score(self, nodes):
            raise AssertionError("score must not run after Skip")

    r = schedule(small().pod("p", cpu="1"), plugins={"skipper": Skipper()})
    assert r.placements()["default/p"] is not None


def test_hook_score_weights_and_per_node_form():
    class PreferN0:
        @hookimpl
        def score(self, node):
            return 100 if node.name == "n0" else 0

    class PreferN1:
        @hookimpl
        def score(self, nodes):
            return [100 if n.name == "n1" else 0 for n in nodes]

    plugins = {"prefer_n0": PreferN0(), "prefer_n1": PreferN1()}
    r = schedule(small().pod("p", cpu="1"), plugins=plugins,
                 profile={"plugins": {"score": {"enabled": [{"name": "prefer_n1", "weight": 5}]}}})
    assert r.placements() == {"default/p": "n1"}
    r = schedule(small().pod("p", cpu="1"), plugins=plugins,
                 profile={"plugins": {"score": {"enabled": [{"name": "prefer_n0", "weight": 5}]}}})
    assert r.placements() == {"default/p": "n0"}


def test_hook_normalize_score_and_range_check():
    class Raw:
        @hookimpl
        def score(self, nodes):
            return {n.name: 1000 * int(n.name[1:]) for n in nodes}

        @hookimpl
        def normalize_score(self, scores):
            return 100 * scores // max(int(scores.max()), 1)

    r = schedule(small().pod("p", cpu="1"), plugins={"raw": Raw()})
    assert r.placements() == {"default/p": "n2"}

    class OutOfRange:
        @hookimpl
        def score(self, nodes):
            return {n.name: 500 for n in nodes}

    r = schedule(small().pod("p", cpu="1"), plugins={"oor": OutOfRange()})
    pod = r.to_dict()["pods"][0]
    assert pod["phase"] == "Pending" and "oor" in pod["reason"] and "outside [0, 100]" in pod["reason"]


def test_hook_reserve_and_unreserve_reverse_order():
    log = []

    class R1:
        @hookimpl
        def reserve(self, pod):
            log.append("r1.reserve")

        @hookimpl
        def unreserve(self, pod):
            log.append("r1.unreserve")

    class R2:
        @hookimpl
        def reserve(self, pod):
            log.append("r2.reserve")
            return Status.unschedulable("no exact CPUs left")

        @hookimpl
        def unreserve(self, pod):
            log.append("r2.unreserve")

    r = schedule(small(1).pod("p", cpu="1"), plugins={"r1": R1(), "r2": R2()},
                 profile={"disable": ["default_preemption"]})
    assert log[:4] == ["r1.reserve", "r2.reserve", "r2.unreserve", "r1.unreserve"]
    pod = r.to_dict()["pods"][0]
    assert pod["phase"] == "Pending" and "no exact CPUs left" in pod["reason"]
    # the failed reservation released its node: nothing is accounted
    assert r.to_dict()["nodes"][0]["pods"] == 0


def test_hook_unreserve_runs_when_permit_rejects():
    released = []

    class Track:
        @hookimpl
        def unreserve(self, pod, node, state):
            released.append((pod.name, node.name))

    class No:
        @hookimpl
        def permit(self, pod):
            return Status.unschedulable("denied")

    r = schedule(small(1).pod("p", cpu="1"), plugins={"track": Track(), "no": No()},
                 profile={"disable": ["default_preemption"]})
    assert released == [("p", "n0")]
    assert r.to_dict()["nodes"][0]["pods"] == 0


def test_hook_permit_allow_and_reject():
    class Permit:
        @hookimpl
        def permit(self, pod):
            return "not today" if pod.name == "no" else None

    r = schedule(small().pod("yes", cpu="1").pod("no", cpu="1"), plugins={"permit": Permit()})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert d["yes"]["phase"] == "Bound"
    assert d["no"]["phase"] == "Pending" and d["no"]["reason"] == "not today"


def test_hook_pre_bind_annotations_reach_the_pod():
    class Ann:
        @hookimpl
        async def pre_bind(self, pod, node):
            return {"example.com/placed-on": node.name}

    r = schedule(small(1).pod("p", cpu="1"), plugins={"ann": Ann()})
    pod = r.to_dict()["pods"][0]
    assert pod["annotations"] == {"example.com/placed-on": "n0"}
    assert r.cluster.pod_by_key("default/p").annotations["example.com/placed-on"] == "n0"


def test_hook_pre_bind_failure_releases_reservation():
    class Fail:
        @hookimpl
        def pre_bind(self):
            return Status.error("volume not ready")

    r = schedule(small(1).pod("p", cpu="1"), plugins={"fail": Fail()})
    pod = r.to_dict()["pods"][0]
    assert pod["phase"] == "Pending" and "volume not ready" in pod["reason"]
    assert r.to_dict()["nodes"][0]["pods"] == 0


def test_hook_bind_custom_binder_and_skip():
    bound = []

    class SkipBinder:
        @hookimpl
        def bind(self):
            return Status.skip()

    class MyBinder:
        @hookimpl
        async def bind(self, pod, node, state, handle):
            bound.append((pod.name, node.name))
            await handle.bind_pod(pod, node.name, dict(state.annotations))
            return True

    r = schedule(small(1).pod("p", cpu="1"), plugins={"skip": SkipBinder(), "mine": MyBinder()},
                 profile={"disable": ["default_binder"]})
    assert bound == [("p", "n0")] and r.placements() == {"default/p": "n0"}


def test_hook_post_bind():
    seen = []

    class PB:
        @hookimpl
        def post_bind(self, pod, node):
            seen.append((pod.name, node.name))

    schedule(small(1).pod("p", cpu="1"), plugins={"pb": PB()})
    assert seen == [("p", "n0")]


def test_hook_error_handler():
    """Every failed attempt is reported with the status that failed it (a filter's, a permit's), to every
    plugin even when one raises; a bound pod is never reported."""
    seen = []

    class Broken:
        @hookimpl
        def error_handler(self, pod):
            raise RuntimeError("boom")

    class EH:
        @hookimpl
        def error_handler(self, pod, status):
            seen.append((pod.name, status.code.name, status.message))

        @hookimpl
        def permit(self, pod):
            return Status.unschedulable("not today") if pod.name == "denied" else None

    b = small(1, cpu="2").pod("big", cpu="4").pod("denied", cpu="1").pod("ok", cpu="1")
    r = schedule(b, plugins={"broken": Broken(), "eh": EH()})
    assert r.placements() == {"default/big": None, "default/denied": None, "default/ok": "n0"}
    assert ("big", "UNSCHEDULABLE", "0/1 nodes are available: 1 Insufficient cpu.") in seen
    assert ("denied", "UNSCHEDULABLE", "not today") in seen
    assert all(name != "ok" for name, _, _ in seen)


# -- node QoS loop: these hooks are called by the node agent through the same HookCaller -------------

def _caller(plugins, profile=None):
    reg = Registry(profile_from_dict(profile or {})).load(autoload=False, extra=plugins)
    return HookCaller(reg, lambda _name: None)


def test_hook_collect():
    class C1:
        @hookimpl
        def collect(self, node_state):
            return {"cpu": node_state["cpu"] * 2}

    class C2:
        @hookimpl
        async def collect(self):
            return {"mem": 1}

    out = anyio.run(lambda: _caller({"c1": C1(), "c2": C2()}).call_safe("collect", node_state={"cpu": 3}))
    assert [(i.plugin, r) for i, r, _ in out] == [("c1", {"cpu": 6}), ("c2", {"mem": 1})]


def test_hook_qos_plan():
    class Plan:
        @hookimpl
        def qos_plan(self, node_state, args):
            return [("cpu/kubepods/besteffort/cpu.cfs_quota_us", str(node_state["quota"]))]

    out = anyio.run(lambda: _caller({"plan": Plan()}).call_safe("qos_plan", node_state={"quota": 2000}))
    assert out[0][1] == [("cpu/kubepods/besteffort/cpu.cfs_quota_us", "2000")]


def test_hook_runtime_hook():
    class RH:
        @hookimpl
        def runtime_hook(self, event, pod, container):
            return [f"{event}:{pod}:{container}"]

    out = anyio.run(lambda: _caller({"rh": RH()}).call_safe(
        "runtime_hook", event="container_start", pod="p", container="c", node_state=None))
    assert out[0][1] == ["container_start:p:c"]


# -- descheduling loop ------------------------------------------------------------------------------

def test_hook_deschedule_moves_pod_in_simulation():
    class Move:
        done = False

        @hookimpl
        def deschedule(self, cluster):
            pod = cluster.pod_by_key("default/p")
            if self.done or pod is None or pod.node_name != "n0":
                return None
            self.done = True
            return [Migration(pod="default/p", from_node="n0", to="n2", reason="rebalance")]

    class PreferN0:
        @hookimpl
        def score(self, node):
            return 100 if node.name == "n0" else 0

    r = schedule(small().pod("p", cpu="1"), plugins={"move": Move(), "prefer": PreferN0()}, deschedule=True)
    assert r.placements() == {"default/p": "n2"}
    assert [(m.pod, m.from_node, m.to, m.plugin) for m in r.migrations] == [("default/p", "n0", "n2", "move")]


# -- node resources ----------------------------------------------------------------------------------

def test_hook_node_resources_extends_allocatable():
    class Batch:
        @hookimpl
        def node_resources(self, node, pods, metric, now):
            return {"kubernetes.io/batch-cpu": 3000 if node.name == "n0" else 0}

    b = small(2).pod("be1", requests={"kubernetes.io/batch-cpu": "2000"}).pod(
        "be2", requests={"kubernetes.io/batch-cpu": "2000"})
    r = schedule(b, plugins={"batch": Batch()})
    d = r.to_dict()
    assert d["nodes"][0]["allocatable"]["kubernetes.io/batch-cpu"] == "3000"
    assert "kubernetes.io/batch-cpu" not in d["nodes"][1]["allocatable"]
    phases = sorted(p["phase"] for p in d["pods"])
    assert phases == ["Bound", "Pending"]


@pytest.mark.parametrize("hook", ["filter", "score"])
def test_kernel_adapts_per_node_form(hook):
    calls = []

    class P:
        pass

    def impl(node):
        calls.append(node.name)
        return None if hook == "filter" else 10

    setattr(P, hook, hookimpl(staticmethod(impl)) if False else hookimpl(lambda self, node: impl(node)))
    schedule(small(3).pod("p", cpu="1"), plugins={"p": P()})
    assert sorted(calls) == ["n0", "n1", "n2"]


def test_post_filter_result_nominates_node():
    class Nominate:
        @hookimpl
        def post_filter(self, pod, handle):
            return PostFilterResult("n0")

    r = schedule(small(1, cpu="1").pod("big", cpu="2"), plugins={"nom": Nominate()},
                 profile={"disable": ["default_preemption"]})
    assert r.cluster.pod_by_key("default/big").nominated_node_name == "n0"
