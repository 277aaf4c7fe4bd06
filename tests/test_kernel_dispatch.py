"""The kernel's call of plain-function hooks without a coroutine (HookCaller.call_sync): the same results,
failures, timeouts, plugin context and timing as the awaited path."""

from __future__ import annotations

import time

import anyio
import pytest

from koordfw import Status, hookimpl
from koordfw.core.caller import CURRENT_PLUGIN, HookCaller, Pending, PluginFailure
from koordfw.core.plugins import Impl
from koordfw.testing import ClusterBuilder, schedule


def _pods(r):
    return {p["name"]: p for p in r.to_dict()["pods"]}


def test_sync_hook_returning_a_coroutine_that_hangs_times_out_for_that_pod_only():
    class Hang:
        @hookimpl
        def filter(self, pod, nodes):
            async def later():
                if pod.name == "stuck":
                    await anyio.sleep_forever()
                return None
            return later()

    t0 = time.monotonic()
    r = schedule(ClusterBuilder().node("n").pod("stuck", cpu="1").pod("ok", cpu="1"), plugins={"hang": Hang()},
                 profile={"pluginTimeoutSeconds": 0.2})
    d = _pods(r)
    assert d["ok"]["phase"] == "Bound"
    assert d["stuck"]["phase"] == "Pending" and "plugin hang timed out after 0.2s in filter" in d["stuck"]["reason"]
    assert time.monotonic() - t0 < 30
    calls, seconds = r.scheduler.caller.durations[("hang", "filter")]
    assert calls >= 2 and seconds >= 0.2  # the awaited part is the plugin's time


def test_sync_hook_returning_awaitables_is_awaited_at_every_point():
    class Later:
        def __init__(self, value):
            self.value = value

        def __await__(self):
            yield from anyio.sleep(0).__await__()
            return self.value

    seen = []

    class Deferred:
        @hookimpl
        def pre_filter(self, pod):
            async def skip():
                await anyio.sleep(0)
                return Status.skip()
            return skip()

        @hookimpl
        def filter(self, pod, nodes):
            raise AssertionError("skipped at pre_filter")

        @hookimpl
        def score(self, nodes):
            return Later([10 if v.name == "b" else 0 for v in nodes])

        @hookimpl
        def reserve(self, pod, node):
            seen.append(CURRENT_PLUGIN.get())
            return Later(None)

    r = schedule(ClusterBuilder().node("a").node("b").pod("p", cpu="1"), plugins={"deferred": Deferred()},
                 profile={"percentageOfNodesToScore": 100})
    assert r.placements() == {"default/p": "b"}
    assert seen == ["deferred"]
    assert CURRENT_PLUGIN.get() is None


def test_sync_hook_raising_fails_the_cycle_with_its_name_and_context_reset():
    class Boom:
        @hookimpl
        def pre_filter(self, pod):
            if pod.name == "bad":
                raise ValueError("nope")

    r = schedule(ClusterBuilder().node("n").pod("bad", cpu="1").pod("good", cpu="1"), plugins={"boom": Boom()})
    d = _pods(r)
    assert d["good"]["phase"] == "Bound"
    assert "plugin boom raised ValueError in pre_filter: nope" in d["bad"]["reason"]
    assert r.scheduler.caller.durations[("boom", "pre_filter")][0] >= 2
    assert CURRENT_PLUGIN.get() is None


class _Reg:
    def __init__(self, impl):
        self.impl = impl

    def impls(self, point):
        return [self.impl]


def test_call_sync_matches_call():
    got = []

    def f(pod, handle, args):
        got.append((pod, handle, args, CURRENT_PLUGIN.get()))
        return "no"

    impl = Impl(plugin="x", point="filter", fn=f, argnames=("pod", "handle", "args"), is_async=False, args={"a": 1})
    caller = HookCaller(_Reg(impl), lambda name: f"handle of {name}")
    p = caller.prepared(impl, ("pod", "nodes", "state"))
    assert p.sync
    assert caller.call_sync(p, "P", "N", "S") == "no"
    assert anyio.run(lambda: caller.call(impl, pod="P", nodes="N", state="S")) == "no"
    assert got == [("P", "handle of x", {"a": 1}, "x")] * 2
    assert caller.durations[("x", "filter")][0] == 2


def test_call_sync_missing_argument_is_the_same_failure():
    impl = Impl(plugin="x", point="reserve", fn=lambda pod, nodes: None, argnames=("pod", "nodes"), is_async=False)
    caller = HookCaller(_Reg(impl), lambda name: None)
    with pytest.raises(PluginFailure) as sync_err:
        caller.call_sync(caller.prepared(impl, ("pod", "node", "state")), 1, 2, 3)
    with pytest.raises(PluginFailure) as async_err:
        anyio.run(lambda: caller.call(impl, pod=1, node=2, state=3))
    assert sync_err.value.status == async_err.value.status
    assert sync_err.value.status.message == "kernel did not pass 'nodes' to x.reserve"
    assert caller.durations[("x", "reserve")][0] == 0


def test_call_sync_hands_back_awaitables_as_pending():
    async def co():
        return 7

    impl = Impl(plugin="x", point="pre_filter", fn=lambda pod: co(), argnames=("pod",), is_async=False)
    caller = HookCaller(_Reg(impl), lambda name: None)

    async def main():
        res = caller.call_sync(caller.prepared(impl, ("pod", "state")), 1, 2)
        assert type(res) is Pending and CURRENT_PLUGIN.get() == "x"
        assert await res == 7
        assert CURRENT_PLUGIN.get() is None

    anyio.run(main)
    assert caller.durations[("x", "pre_filter")][0] == 1


@pytest.mark.parametrize("fn,argnames,positional", [
    (lambda pod, nodes: (pod, nodes), ("pod", "nodes"), True),
    (lambda pod, nodes, args: (pod, nodes, args), ("pod", "nodes", "args"), True),
    (lambda pod, nodes, state, handle: (pod, nodes, state, handle), ("pod", "nodes", "state", "handle"), True),
    (lambda pod, state, handle: (pod, state, handle), ("pod", "state", "handle"), False),  # nodes skipped: by name
    (lambda args, pod: (args, pod), ("args", "pod"), False),  # args first: by name
    (lambda nodes, pod: (nodes, pod), ("nodes", "pod"), False),  # another order: by name
    (lambda state: (state,), ("state",), False),  # not the first of the call site's: by name
])
def test_prepared_calls_bind_as_by_name(fn, argnames, positional):
    impl = Impl(plugin="x", point="filter", fn=fn, argnames=argnames, is_async=False, args="A")
    caller = HookCaller(_Reg(impl), lambda name: "H")
    p = caller.prepared(impl, ("pod", "nodes", "state"))
    assert (p.n >= 0) == positional
    given = {"pod": "P", "nodes": "N", "state": "S", "args": "A", "handle": "H"}
    expected = tuple(given[a] for a in argnames)
    assert caller.call_sync(p, "P", "N", "S") == expected
    assert anyio.run(lambda: caller.call(impl, pod="P", nodes="N", state="S")) == expected


def test_positional_only_parameter_fails_as_by_name():
    def f(pod, /, nodes):
        return "ran"

    impl = Impl(plugin="x", point="filter", fn=f, argnames=("pod", "nodes"), is_async=False)
    caller = HookCaller(_Reg(impl), lambda name: None)
    p = caller.prepared(impl, ("pod", "nodes", "state"))
    assert p.n == -1
    with pytest.raises(PluginFailure) as sync_err:
        caller.call_sync(p, 1, 2, 3)
    with pytest.raises(PluginFailure) as async_err:
        anyio.run(lambda: caller.call(impl, pod=1, nodes=2, state=3))
    assert sync_err.value.status == async_err.value.status
    assert "raised TypeError in filter" in sync_err.value.status.message
