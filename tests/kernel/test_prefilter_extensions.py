"""kube's PreFilterExtensions as hook points (``pre_filter_add_pod`` / ``pre_filter_remove_pod``): run only
through a plugin's PluginsRunner (``handle.run_pre_filter_extension_add_pod`` / ``_remove_pod``), in profile
order, on the state the plugins' pre_filter wrote, skipping a plugin whose pre_filter returned Skip, and
stopping at the first failure."""

from __future__ import annotations

from typing import Any

from koordfw import CycleState, StateKey, Status, hookimpl
from koordfw.core.model import make_pod

SEEN: StateKey[list[str]] = StateKey("test/seen")


class Ext:
    """Writes its name into the state at pre_filter; each extension call appends what it saw."""

    def __init__(self, name: str, log: list[tuple[Any, ...]], *, skip: bool = False,
                 fail_add: bool = False) -> None:
        self.name, self.log, self.skip, self.fail_add = name, log, skip, fail_add

    @hookimpl
    def pre_filter(self, pod, state):
        if self.skip:
            return Status.skip()
        seen = list(state.get(SEEN, []))
        state[SEEN] = [*seen, self.name]
        return None

    @hookimpl
    def pre_filter_add_pod(self, pod, state, pod_to_add, node):
        self.log.append(("add", self.name, pod.name, pod_to_add.name, node.name, tuple(state[SEEN])))
        return Status.unschedulable(f"{self.name} refuses") if self.fail_add else None

    @hookimpl
    def pre_filter_remove_pod(self, pod, state, pod_to_remove, node):
        self.log.append(("remove", self.name, pod.name, pod_to_remove.name, node.name, tuple(state[SEEN])))


class Driver:
    """A post_filter making a what-if through its handle, as preemption does."""

    def __init__(self) -> None:
        self.results: list[Status] = []

    @hookimpl
    async def post_filter(self, pod, state, handle):
        other = make_pod("victim", requests={"cpu": "1"})
        self.results.append(await handle.run_pre_filter_extension_remove_pod(pod, state, other, "n1"))
        self.results.append(await handle.run_pre_filter_extension_add_pod(pod, state, other, "n1"))
        self.results.append(await handle.run_pre_filter_extension_add_pod(pod, state, other, "gone"))
        return None


def _kernel(kernel, log, profile=None, **flags):
    drv = Driver()
    plugins = {"b": Ext("b", log, **flags.get("b", {})), "a": Ext("a", log, **flags.get("a", {})),
               "c": Ext("c", log, skip=True), "drv": drv}
    return kernel(plugins, nodes={"n1": "1"}, profile=profile), drv


async def test_hook_pre_filter_remove_pod_runs_in_profile_order_on_the_pre_filter_state(kernel):
    log: list[tuple[Any, ...]] = []
    k, drv = _kernel(kernel, log, profile={"plugins": {"preFilterRemovePod": {"enabled": ["a", "b"]}}})
    await k.run(make_pod("p", requests={"cpu": "2"}))  # fits nowhere: post_filter runs
    removes = [e for e in log if e[0] == "remove"]
    # c returned Skip from pre_filter: its extensions are not called; a before b as the profile says
    assert removes == [("remove", "a", "p", "victim", "n1", ("b", "a")),
                       ("remove", "b", "p", "victim", "n1", ("b", "a"))]
    assert drv.results[0].ok


async def test_hook_pre_filter_add_pod_stops_at_the_first_failure(kernel):
    log: list[tuple[Any, ...]] = []
    k, drv = _kernel(kernel, log, b={"fail_add": True})
    await k.run(make_pod("p", requests={"cpu": "2"}))
    adds = [e for e in log if e[0] == "add"]
    assert adds == [("add", "b", "p", "victim", "n1", ("b", "a"))]  # b refused: a is not called
    assert not drv.results[1].ok and "b refuses" in drv.results[1].message
    assert drv.results[2].code.name == "UNSCHEDULABLE_AND_UNRESOLVABLE"  # an unknown node


async def test_the_extensions_never_run_in_a_plain_cycle(kernel):
    log: list[tuple[Any, ...]] = []
    k, _ = _kernel(kernel, log)
    eng = await k.run(make_pod("p", requests={"cpu": "1"}))
    assert eng.bound == {"p": "n1"} and log == []


def test_a_cycle_state_clone_shares_values_until_one_is_replaced():
    """What the hook docs ask of an implementation: write a new value, never change a shared one."""
    st = CycleState()
    st[SEEN] = ["x"]
    c = st.clone()
    c[SEEN] = [*c[SEEN], "y"]
    assert st[SEEN] == ["x"] and c[SEEN] == ["x", "y"]
