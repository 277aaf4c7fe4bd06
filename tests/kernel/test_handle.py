"""The handle protocols are met by the handles the engines really give plugins. Each handle is taken
from inside a hook (what a plugin sees), then checked with ``isinstance`` where the protocol is
``runtime_checkable`` (ClusterView, AgentHandle, AdmissionHandle) and member by member for ``Handle``,
which is not."""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import anyio

from koordfw import AdmissionHandle, AgentHandle, ClusterView, Handle, hookimpl
from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.core.admission import Admission, StaticObjects
from koordfw.core.clock import VirtualClock
from koordfw.core.handle import EventRecorder, PluginsRunner
from koordfw.core.model import make_pod
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import FakeNode


def protocol_members(proto: type) -> set[str]:
    """The names a Protocol declares, its bases' included."""
    out: set[str] = set()
    for cls in proto.__mro__:
        if cls in (Protocol, object) or Protocol not in getattr(cls, "__mro__", ()):
            continue
        out |= {n for n in vars(cls) if not n.startswith("_")}
        out |= {n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")}
    return out


class Captures:
    def __init__(self) -> None:
        self.handles: list[Any] = []

    @hookimpl
    def filter(self, pod, node, handle):
        self.handles.append(handle)


async def test_the_scheduler_handle_has_every_member_of_handle(kernel):
    cap = Captures()
    k = kernel({"cap": cap})
    await k.run(make_pod("p"))
    h = cap.handles[0]
    members = protocol_members(Handle)
    # a few the protocol must keep declaring (so this test cannot pass by checking nothing)
    assert {"plugin_name", "cluster", "clock", "now", "bind_pod", "nominate", "get_waiting_pod",
            "run_filters"} <= members
    missing = sorted(m for m in members if not hasattr(h, m))
    assert missing == []
    methods = {m for m in members if inspect.isfunction(inspect.getattr_static(Handle, m, None))}
    assert {"now", "bind_pod", "run_filters"} <= methods
    assert sorted(m for m in methods if not callable(getattr(h, m))) == []
    assert h.plugin_name == "cap"
    assert h.now() == 1000.0


async def test_the_scheduler_handle_events_and_cluster_meet_their_protocols(kernel):
    cap = Captures()
    k = kernel({"cap": cap})
    await k.run(make_pod("p"))
    h = cap.handles[0]
    assert isinstance(h.cluster, ClusterView)
    assert isinstance(k.cluster, ClusterView)
    assert all(callable(getattr(h.events, m)) for m in protocol_members(EventRecorder))
    assert all(hasattr(h, m) for m in protocol_members(PluginsRunner))


async def test_each_plugin_gets_its_own_scheduler_handle(kernel):
    a, b = Captures(), Captures()
    k = kernel({"a": a, "b": b})
    await k.run(make_pod("p1"), make_pod("p2"))
    assert [h.plugin_name for h in a.handles] == ["a", "a"]
    assert [h.plugin_name for h in b.handles] == ["b", "b"]
    assert a.handles[0] is a.handles[1]
    assert a.handles[0] is not b.handles[0]


class CapturesQos:
    def __init__(self) -> None:
        self.handles: list[Any] = []

    @hookimpl
    def qos_plan(self, node_state, handle):
        self.handles.append(handle)


def test_the_agents_handle_is_an_agent_handle(tmp_path):
    node = FakeNode(tmp_path / "node")
    cap = CapturesQos()
    reg = Registry(profile_from_dict({})).load(only=set(), extra={"cap": cap})
    agent = Agent(reg, CgroupLayout(node.root, 1), Executor({"cgroup": node.root}, dry_run=True), node_name="n1",
                  proc_root=str(node.proc), sys_root=str(node.sys), clock=VirtualClock(50.0))
    anyio.run(agent.run_once)
    assert len(cap.handles) == 1
    h = cap.handles[0]
    assert isinstance(h, AgentHandle)
    assert not isinstance(h, AdmissionHandle)
    assert h.plugin_name == "cap"
    assert h.now() == 50.0
    assert h.node_state is agent.node_state


class CapturesAdmission:
    def __init__(self) -> None:
        self.handles: list[Any] = []

    @hookimpl
    def mutate_pod(self, pod, handle):
        self.handles.append(handle)


def test_the_admission_handle_is_an_admission_handle():
    cap = CapturesAdmission()
    reg = Registry(profile_from_dict({})).load(autoload=False, extra={"cap": cap})
    adm = Admission(reg, StaticObjects([]), clock=VirtualClock(7.0))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c"}]}}
    anyio.run(lambda: adm.mutate(pod, "CREATE"))
    assert len(cap.handles) == 1
    h = cap.handles[0]
    assert isinstance(h, AdmissionHandle)
    assert not isinstance(h, AgentHandle)
    assert (h.plugin_name, h.now()) == ("cap", 7.0)
